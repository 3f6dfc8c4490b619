"""One model at the end of training, on real agents on loopback:

1. Built-in trainers: 3 agents train `synthetic` with --outer nesterov --sync-every 10
   --fragments 2 (half the model every 5 steps) and
   different --steps (they finish at different times). Once the last one finishes, all three
   hold one model: status `consensus` says serving (the leader) or adopted, `models` 3, the same
   crc32 everywhere, and the evaluation of it (params_crc32) is that model; the loss is low.
2. External trainers (the Python client, numpy only): 3 trainers each fit a linear model on data
   of their own for a different number of mesh steps (the second one sends half the model at
   a time: streaming fragments), then call mesh.finish(). Every finish() returns the same crc32
   (of the parameters it loaded) and models == 3; the one model is the average of the models
   the trainers published at their last step (not of their mixes); the fragment sender's
   transfers carry half the parameter bytes of the others'.
3. PyTorch (skipped without torch): 2 trainers with a BatchNorm model through
   MeshOptimizer(model=net, sync_every=4, outer="nesterov") on data of their own, then
   opt.finish(): both hold the same parameters and the same BatchNorm running statistics (the
   buffers are mixed and part of the one model), which differ from what each had before.
Skips part 2 (not the test) without an interpreter with numpy, part 3 without torch.
"""
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, external_mesh, numpy_python, start_all  # noqa: E402
from harness import Mesh, parse_args, wait_until  # noqa: E402

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")

WORKER = r'''
import argparse, dataclasses, json, zlib
import numpy as np
import meshtrain

p = argparse.ArgumentParser()
p.add_argument("--socket", required=True)
p.add_argument("--node", type=int, default=0)
p.add_argument("--steps", type=int, default=50)
a = p.parse_args()
rng = np.random.default_rng(10 + a.node)
D = 512
x = rng.normal(size=(1024, D)).astype(np.float32) / np.sqrt(D / 16)
w_true = np.linspace(-1, 1, D).astype(np.float32)
w_true[a.node] += 1.0  # the nodes' data differ
y = x @ w_true
w = np.zeros(D, np.float32)
mesh = meshtrain.connect(a.socket, timeout=30)
for i in range(a.steps):
    idx = rng.integers(0, len(x), 32)
    grad = 2 * x[idx].T @ (x[idx] @ w - y[idx]) / 32
    w -= 0.05 * grad.astype(np.float32)
    # Odd nodes send streaming fragments: each half of the model in turn.
    published = w.copy()  # what this step publishes: the model as trained, before the mix
    mesh.step(w, span=((0, D // 2), (D // 2, D))[i % 2] if a.node % 2 else None)
own = zlib.crc32(w.tobytes())
mixed = w.copy()
res = mesh.finish(w)
print(json.dumps({"event": "finished", "own": own, "crc": zlib.crc32(w.tobytes()),
                  "reply": dataclasses.asdict(res), "training": mesh.training,
                  "published": published.tolist(), "mixed": mixed.tolist(),
                  "model": w.tolist()}), flush=True)
mesh.detach()
'''


TORCH_WORKER = r'''
import argparse, json, zlib
import torch
import meshtrain, meshtrain.torch as mt

p = argparse.ArgumentParser()
p.add_argument("--socket", required=True)
p.add_argument("--node", type=int, default=0)
a = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                          torch.nn.Linear(16, 1))
g = torch.Generator().manual_seed(50 + a.node)
x = torch.randn(512, 8, generator=g) * (1 + a.node) + 2 * a.node  # the nodes' data differ
y = x.sum(1, keepdim=True)
mesh = meshtrain.connect(a.socket, timeout=30)
opt = mt.MeshOptimizer(torch.optim.SGD(net.parameters(), lr=0.01), mesh, model=net,
                       sync_every=4, outer="nesterov")
for i in range(82):  # 2 local steps after the last sync: the statistics differ again
    idx = torch.randint(0, len(x), (32,), generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(net(x[idx]), y[idx]).backward()
    opt.step()


def crc(ts):
    return zlib.crc32(torch.cat([t.detach().reshape(-1) for t in ts]).numpy().tobytes())


bn = net[1]
before = crc([bn.running_mean, bn.running_var])
res = opt.finish()
print(json.dumps({"event": "finished", "params": crc(net.parameters()),
                  "stats": crc([bn.running_mean, bn.running_var]), "stats_before": before,
                  "buffers": len(opt.buffers), "models": res.models}), flush=True)
mesh.detach()
'''


def builtin_part(binary):
    common = ["--profile", "local", "--task", "synthetic", "--barrier", "pssp", "--sample", "2",
              "--staleness", "4", "--select", "random", "--fanout", "2", "--eval-every", "100",
              "--min-peers", "2", "--lr", "0.01", "--batch", "32", "--outer", "nesterov",
              "--sync-every", "10", "--fragments", "2"]
    with Mesh(binary, 3, common, name_prefix="cons") as mesh:
        for i, a in enumerate(mesh.agents):
            a.extra += ["--shard", f"{i}/3", "--steps", str(400 + 150 * i)]
        mesh.start_joined(timeout=10)

        def agreed():
            sts = [a.status() for a in mesh.agents]
            if any(s is None for s in sts):
                return None
            c = [s["consensus"] for s in sts]
            done = all(x["state"] in ("serving", "adopted") for x in c)
            # The evaluation of the consensus model runs just after it is adopted.
            evaluated = all(s["params_crc32"] == s["consensus"]["crc32"] for s in sts)
            return sts if done and evaluated else None
        _, sts = wait_until(agreed, 120, interval=0.5, what="every agent holds the consensus model")
        crcs = {s["consensus"]["crc32"] for s in sts}
        for s in sts:
            c = s["consensus"]
            print(f"  {s['name']}: step {s['step']} consensus {c['state']} leader {c['leader']} "
                  f"models {c['models']} crc32 {c['crc32']:08x} loss {s['loss']:.4f} "
                  f"outer_steps {s['outer_steps']}")
            assert c["models"] == 3 and c["participants"] == 3, c
            assert c["leader"] == "cons1", c
            assert s["outer_steps"] >= 30, s  # --outer nesterov stepped every 10 steps
            assert s["loss"] < 0.05, s
        assert len(crcs) == 1 and 0 not in crcs, crcs
        states = sorted(s["consensus"]["state"] for s in sts)
        assert states == ["adopted", "adopted", "serving"], states
    print("built-in trainers: one model (crc32 %08x) on all 3 agents" % crcs.pop())


@contextlib.contextmanager
def trainers_finished(binary, py, n, prefix, worker_text, args_of, timeout):
    """n agents with --trainer external, each with a worker running `worker_text` (arguments
    args_of(i)), until every worker printed its "finished" line: yields (mesh, those lines).
    Every agent and worker is ended by PID on the way out."""
    os.environ["PYTHONPATH"] = PYTHON_DIR
    with external_mesh(binary, n, prefix, 2) as mesh, Workers() as workers:
        script = os.path.join(mesh.workdir, f"{prefix}_worker.py")
        with open(script, "w") as f:
            f.write(worker_text)
        start_all(mesh)
        for i, a in enumerate(mesh.agents):
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            workers.append(Worker(py, a, mesh.workdir, *args_of(i), script=script))
        wait_until(lambda: all(w.event("finished") for w in workers), timeout, interval=0.3,
                   what="every trainer's finish() returned")
        yield mesh, [w.event("finished") for w in workers]


def external_part(binary):
    py = numpy_python()
    if py is None:
        print("SKIP part 2: no python3 with numpy (install python3-numpy)")
        return
    with trainers_finished(binary, py, 3, "cext", WORKER,
                           lambda i: ["--node", i, "--steps", 60 + 40 * i], 90) as (mesh, outs):
        per = []
        for a in mesh.agents:
            s = a.status()
            per.append(s["params_bytes_raw"] / max(1, s["rounds"] * s["mean_fanout"]))
        print("  parameter bytes per transfer: " + ", ".join(f"{x:.0f}" for x in per))
        assert per[1] < 0.8 * per[0] and per[1] < 0.8 * per[2], per  # fragments: about half
        # Each trainer finished right after its last step's mix: its final model is the one it
        # published at that step, so the consensus is the plain average of the nodes' last
        # models as trained (docs/design.md "One model at the end"), not of their mixes.
        def gap(key):
            mean = [sum(col) / len(outs) for col in zip(*(o[key] for o in outs))]
            return max(abs(m - c) for m, c in zip(mean, outs[0]["model"]))
        # How far each node's last mix moved its model: on a busy machine a node's last window
        # may hold no peer's model, and then its mix is its published model.
        moved = max(max(abs(m - q) for m, q in zip(o["mixed"], o["published"])) for o in outs)
        print(f"  consensus vs the mean of the published models: {gap('published'):.2e}, "
              f"of the mixed ones: {gap('mixed'):.2e} (the last mixes moved a model by "
              f"{moved:.2e})")
        assert gap("published") < 1e-5, (gap("published"), gap("mixed"), moved)
        if moved > 1e-4:  # the mixes differ from the published models: the test tells them apart
            assert gap("mixed") > 1e-5, (gap("published"), gap("mixed"), moved)
        for o in outs:
            print("  " + json.dumps({k: v for k, v in o.items()
                                     if k not in ("published", "mixed", "model")}))
            assert o["reply"]["models"] == 3, o
            assert o["reply"]["crc32"] == o["crc"], o  # what finish() loaded is the model
            assert o["own"] != o["crc"], o  # its own final model was replaced
            assert o["training"] is False, o
        assert len({o["crc"] for o in outs}) == 1, outs
    print("external trainers: finish() returned one model on all 3")


def torch_part(binary):
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP part 3: no python3 with numpy and torch (install python3-torch)")
        return
    with trainers_finished(binary, py, 2, "ctor", TORCH_WORKER, lambda i: ["--node", i],
                           120) as (_, outs):
        for o in outs:
            print("  " + json.dumps(o))
            # BatchNorm's running mean and variance, and the gradient drift correction's buffer
            # (MeshOptimizer's default with sync_every > 1)
            assert o["buffers"] == 3 and o["models"] == 2, o
        assert outs[0]["params"] == outs[1]["params"], outs
        assert outs[0]["stats"] == outs[1]["stats"], outs  # BatchNorm statistics agree
        assert outs[0]["stats_before"] != outs[1]["stats_before"], outs
    print("torch: one model, BatchNorm statistics included, on both")


def main():
    args = parse_args()
    builtin_part(args.bin)
    external_part(args.bin)
    torch_part(args.bin)
    print("PASS")


if __name__ == "__main__":
    main()
