#!/usr/bin/env python3
"""Skewed shards end in one model: 3 agents (--trainer external, pssp) each train a
PyTorch MLP (784-256-LayerNorm-ReLU-4, Adam, --lr 1e-3, --batch 64) on Fashion-MNIST classes 0-3,
node i on classes {i, i+1} only, for --steps steps through meshtrain.torch.MeshOptimizer, then
call opt.finish(). Reported per setting and run: each node's accuracy on the test images of the
4 classes after finish(), whether the three hold the same parameters (CRC-32), and the parameter
bytes each agent sent (status params_bytes_sent); beside them, pooled training (one process on
the union of the shards, the same steps) — the reference the mesh is held to.

    /usr/bin/python3 bench/skew_consensus.py --runs 5 --settings avg:1,nesterov:25

A setting is OUTER:H[:DRIFT] (MeshOptimizer(outer=OUTER, sync_every=H, drift_correction=DRIFT),
OUTER avg, sgd, nesterov or torch-nesterov (outer_optimizer=torch.optim.SGD(lr 0.7, momentum
0.9, nesterov=True): the nesterov rule as a torch optimizer), DRIFT none, params or gradient; --drift sets it for settings that name none; with neither,
MeshOptimizer's default). --lr, --batch, --warmup and --schedule are the training recipe of the
pooled and the mesh runs alike.
Acceptance: every node within 0.02 of pooled in every run; nesterov:25 with at most 1/10 of
avg:1's bytes (docs/benchmarks.md, "one model at the end"):

    /usr/bin/python3 bench/skew_consensus.py --runs 5 --settings avg:1 --mix-state
    /usr/bin/python3 bench/skew_consensus.py --runs 5 --settings nesterov:25:gradient \\
        --schedule cosine --lr 3e-4

A bench (minutes on 2 cores), not a test. Needs numpy and torch (Debian's /usr/bin/python3)
and the dataset-fashion-mnist package.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from external_lib import external_mesh, start_all  # noqa: E402
from harness import wait_until  # noqa: E402

WORKER = r'''
import argparse, dataclasses, gzip, json, math, os, struct, sys, zlib
import numpy as np
import torch
sys.path.insert(0, os.environ["MESHTRAIN_PYTHON"])

p = argparse.ArgumentParser()
p.add_argument("--socket", default="")
p.add_argument("--classes", default="0,1,2,3")
p.add_argument("--steps", type=int, default=2000)
p.add_argument("--sync-every", type=int, default=1)
p.add_argument("--outer", default="avg")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--mix-state", action="store_true")
p.add_argument("--drift", default="")
p.add_argument("--outer-lr", type=float, default=None)
p.add_argument("--outer-momentum", type=float, default=None)
p.add_argument("--schedule", default="constant")
p.add_argument("--batch", type=int, default=64)
p.add_argument("--warmup", type=int, default=0)
p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
a = p.parse_args()
torch.set_num_threads(1)


def idx(path):
    with gzip.open(path, "rb") as f:
        d = f.read()
    magic, n = struct.unpack_from(">II", d)
    if magic == 2051:
        return np.frombuffer(d, np.uint8, n * 784, 16).reshape(n, 784)
    return np.frombuffer(d, np.uint8, n, 8)


def load(split, classes):
    pre = "train" if split == "train" else "t10k"
    x = idx(os.path.join(a.data, pre + "-images-idx3-ubyte.gz"))
    y = idx(os.path.join(a.data, pre + "-labels-idx1-ubyte.gz"))
    keep = np.isin(y, classes)
    return (torch.from_numpy(x[keep].astype(np.float32) / 255.0),
            torch.from_numpy(y[keep].astype(np.int64)))


classes = [int(c) for c in a.classes.split(",")]
x, y = load("train", classes)
xt, yt = load("test", [0, 1, 2, 3])
torch.manual_seed(a.seed)  # one initial model everywhere
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.LayerNorm(256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 4))
inner = torch.optim.Adam(model.parameters(), lr=a.lr)
sched = None
if a.warmup:  # linear from lr / warmup to lr over the first steps, then the schedule
    def factor(t):
        w = min(1.0, (t + 1) / a.warmup)
        if a.schedule == "cosine":
            return w * 0.5 * (1 + math.cos(math.pi * t / a.steps))
        return w
    sched = torch.optim.lr_scheduler.LambdaLR(inner, factor)
elif a.schedule == "cosine":  # to 0 at the last step, as DiLoCo's inner schedule
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(inner, T_max=a.steps)
g = torch.Generator().manual_seed(1000 + a.seed + 7 * classes[0])
opt = inner
if a.socket:
    import meshtrain, meshtrain.torch as mt
    mesh = meshtrain.connect(a.socket, timeout=60)
    # No --drift: MeshOptimizer's default (the documented one).
    kw = {"drift_correction": {"none": False, "params": True}.get(a.drift, a.drift)} \
        if a.drift else {}
    if a.outer == "torch-nesterov":  # the same rule as a torch optimizer
        kw["outer_optimizer"] = lambda p: torch.optim.SGD(
            p, lr=a.outer_lr or 0.7, momentum=a.outer_momentum or 0.9, nesterov=True)
    else:
        kw.update(outer=a.outer, outer_lr=a.outer_lr, outer_momentum=a.outer_momentum)
    opt = mt.MeshOptimizer(inner, mesh, model=model, sync_every=a.sync_every,
                           mix_state=a.mix_state, **kw)
for step in range(a.steps):
    i = torch.randint(0, len(x), (a.batch,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
    opt.step()
    if sched is not None:
        sched.step()
out = {"event": "done"}
with torch.no_grad():
    out["accuracy_own"] = float((model(xt).argmax(1) == yt).float().mean())
if a.socket:
    out["mixed"] = mesh.mixed_total
    out["finish"] = dataclasses.asdict(opt.finish())
with torch.no_grad():
    out["accuracy"] = float((model(xt).argmax(1) == yt).float().mean())
flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()]).numpy()
out["crc"] = zlib.crc32(flat.tobytes())
print(json.dumps(out), flush=True)
if a.socket:
    mesh.detach()
'''

SHARDS = ["0,1", "1,2", "2,3"]


def run_worker(py, script, args, log):
    with open(log, "wb") as out:
        return subprocess.Popen([py, script, *map(str, args)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def last_json(path):
    with open(path, errors="replace") as f:
        lines = [x for x in f if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def pooled(py, script, steps, seed, workdir, lr, schedule, recipe):
    log = os.path.join(workdir, f"pooled-{seed}.out")
    p = run_worker(py, script, ["--classes", "0,1,2,3", "--steps", steps, "--seed", seed,
                                "--lr", lr, "--schedule", schedule] + recipe, log)
    p.wait(timeout=3600)
    return last_json(log)


def mesh_run(binary, py, script, steps, outer, h, seed, workdir, lr, extra, compress, schedule,
             staleness):
    mesh = external_mesh(binary, 3, f"sk{seed}", staleness)
    mesh.common[mesh.common.index("--barrier") + 1] = "pssp"
    mesh.common += ["--sample", "2", "--compress", compress]
    procs, logs = [], []
    with mesh:
        start_all(mesh)
        for i, a in enumerate(mesh.agents):
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            logs.append(os.path.join(workdir, f"{outer}{h}-{seed}-{i}.out"))
            procs.append(run_worker(py, script, ["--socket", a.socket, "--classes", SHARDS[i],
                                                 "--steps", steps, "--sync-every", h,
                                                 "--outer", outer, "--seed", seed, "--lr", lr,
                                                 "--schedule", schedule]
                                       + extra,
                                       logs[-1]))
        try:
            for p in procs:
                p.wait(timeout=3600)
            outs = [last_json(x) for x in logs]
            sent = [a.status()["params_bytes_sent"] for a in mesh.agents]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return outs, sent


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--first-run", type=int, default=0, help="the first run's seed")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--settings", default="avg:1,nesterov:25")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    ap.add_argument("--mesh-lr", type=float, default=None,
                    help="Adam's learning rate in the mesh runs (default: --lr); the pooled run "
                    "keeps --lr")
    ap.add_argument("--schedule", choices=["constant", "cosine"], default="constant",
                    help="inner learning rate over the steps, for pooled and mesh runs alike: "
                    "constant, or cosine decay to 0 at the last step")
    ap.add_argument("--batch", type=int, default=64,
                    help="batch size, for pooled and mesh runs alike")
    ap.add_argument("--warmup", type=int, default=0,
                    help="inner learning rate warm-up: linear over the first WARMUP steps, "
                    "then --schedule (pooled and mesh runs alike)")
    ap.add_argument("--mix-state", action="store_true",
                    help="MeshOptimizer(mix_state=True): Adam's moments mix with the parameters")
    ap.add_argument("--drift", choices=["none", "params", "gradient"], default=None,
                    help="MeshOptimizer(drift_correction=True or 'gradient'): SCAFFOLD-style")
    ap.add_argument("--compress", default="none",
                    help="the agents' --compress for the mesh runs (none, fp16, int8)")
    ap.add_argument("--staleness", type=int, default=4,
                    help="the agents' pssp staleness (in mesh steps, each H local steps)")
    ap.add_argument("--outer-lr", type=float, default=None, help="MeshOptimizer outer_lr")
    ap.add_argument("--outer-momentum", type=float, default=None,
                    help="MeshOptimizer outer_momentum")
    a = ap.parse_args()
    binary = benchlib.find_binary(a.bin)
    benchlib.check_dataset("fmnist-mlp")
    py = "/usr/bin/python3"
    os.environ["MESHTRAIN_PYTHON"] = os.path.join(REPO, "python")
    workdir = tempfile.mkdtemp(prefix="meshtrain-skew-")
    script = os.path.join(workdir, "skew_worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    settings = []
    for text in a.settings.split(","):
        parts = text.split(":")
        if len(parts) not in (2, 3) or parts[0] not in ("avg", "sgd", "nesterov", "torch-nesterov") or \
                not parts[1].isdigit() or parts[2:] not in ([], ["none"], ["params"],
                                                            ["gradient"]):
            ap.error(f"a setting is OUTER:H[:none|params|gradient], not {text!r}")
        settings.append((parts[0], int(parts[1]), (parts[2:] or [a.drift])[0]))
    # The training recipe shared by the pooled and the mesh runs.
    recipe = ["--batch", a.batch, "--warmup", a.warmup]
    rows, ok = [], True
    bytes_by = {}
    for seed in range(a.first_run, a.first_run + a.runs):
        ref = pooled(py, script, a.steps, seed, workdir, a.lr, a.schedule, recipe)
        rows.append([seed, "pooled", "-", f"{ref['accuracy']:.4f}", "-", "-", "-"])
        for outer, h, drift in settings:
            t0 = time.monotonic()
            extra = recipe + (["--mix-state"] if a.mix_state else [])
            extra += ["--drift", drift] if drift else []
            if outer != "avg":
                for flag, v in (("--outer-lr", a.outer_lr), ("--outer-momentum", a.outer_momentum)):
                    if v is not None:
                        extra += [flag, v]
            outs, sent = mesh_run(binary, py, script, a.steps, outer, h, seed, workdir,
                                  a.lr if a.mesh_lr is None else a.mesh_lr,
                                  extra, a.compress, a.schedule, a.staleness)
            accs = [o["accuracy"] for o in outs]
            same = len({o["crc"] for o in outs}) == 1
            worst = max(ref["accuracy"] - x for x in accs)
            ok = ok and same and worst <= 0.02
            name = f"{outer} H={h}" + (f" drift={drift}" if drift else "")
            bytes_by.setdefault(name, []).append(sum(sent) / len(sent))
            rows.append([seed, name, f"{time.monotonic() - t0:.0f}",
                         " ".join(f"{x:.4f}" for x in accs), "yes" if same else "NO",
                         f"{worst:+.4f}", f"{sum(sent) / len(sent) / 1e6:.1f}"])
            print(" | ".join(map(str, rows[-1])), flush=True)
    print(benchlib.table(["run", "setting", "wall s", "accuracy per node", "same model",
                          "pooled - worst", "MB sent per node"], rows))
    base = bytes_by.get("avg H=1")
    for key, v in bytes_by.items():
        if base and key != "avg H=1":
            print(f"{key}: {benchlib.mean(v) / benchlib.mean(base):.4f} of avg H=1's "
                  "parameter bytes")
    print("every node within 0.02 of pooled, one model: " + ("yes" if ok else "NO"))
    print(f"logs in {workdir}")


if __name__ == "__main__":
    main()
