"""Torch parameters placed in the agent's shared memory: 2 agents with --trainer external, each
serving a small torch regression (an MLP pulled towards its own target function) through
meshtrain.torch.MeshOptimizer, which places float32 CPU parameters in the shared memory by default
(share_parameters). Checks, in the trainers:
  - every parameter's storage lies inside the mapping of mesh.params, before and after training,
    and a write to mesh.params is seen by the parameter (the tensors *are* the shared memory);
  - no parameter byte is copied in Python over 60 mesh steps (mesh.copied_bytes stays 0, while
    each report of a separate model does count: one model's bytes);
  - the model trains (the loss on the node's own data falls) and peers mix: MIX replies that
    mixed models change the parameters in place, replies that mixed none leave them untouched;
  - mesh.report(..., model=another) leaves the shared parameters as they were;
  - a trainer restarted on agent 1 with a differently initialised model continues from the
    agent's model: its placed parameters are exactly the last snapshot the first one published.
Skips (77) without an interpreter with numpy and torch.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, external_mesh, numpy_python, start_all  # noqa: E402
from harness import parse_args, wait_until  # noqa: E402

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
STEPS = 60

WORKER = r'''
import argparse, copy, json, sys
import numpy as np
import torch
import meshtrain
import meshtrain.torch as mt

p = argparse.ArgumentParser()
p.add_argument("--socket", required=True)
p.add_argument("--node", type=int, default=0)
p.add_argument("--steps", type=int, default=60)
p.add_argument("--save", default="")
p.add_argument("--resume-check", default="")
a = p.parse_args()
torch.set_num_threads(1)


def flat(model):
    return torch.cat([q.detach().reshape(-1) for q in model.parameters()]).clone()


def inside(model, mesh):
    base = mesh.params.__array_interface__["data"][0]
    end = base + mesh.params.nbytes
    return all(base <= q.data_ptr() and q.data_ptr() + 4 * q.numel() <= end
               for q in model.parameters())


torch.manual_seed(123 if a.resume_check else 0)  # one initial model on both nodes
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
mesh = meshtrain.connect(a.socket, timeout=30)
opt = mt.MeshOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5), mesh)
out = {"event": "done", "shared": opt.shared, "resumed": mesh.resumed,
       "inside_start": inside(model, mesh), "num_params": mesh.num_params}
if a.resume_check:
    out["equal_to_published"] = bool(np.array_equal(flat(model).numpy(), np.load(a.resume_check)))
    out["step"] = mesh.step_count
    mesh.detach()
    print(json.dumps(out), flush=True)
    sys.exit(0)

g = torch.Generator().manual_seed(100 + a.node)
x = torch.randn(256, 8, generator=g)
w = torch.linspace(-1, 1, 8)
w[0] += 0.5 if a.node else -0.5  # the nodes' targets differ
y = torch.tanh(x @ w).unsqueeze(1)


def full_loss():
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x), y))


loss0 = full_loss()
mixes_seen = changed_without_mix = report_kept = reports = report_bytes = 0
for i in range(a.steps):
    idx = torch.randint(0, len(x), (32,), generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x[idx]), y[idx]).backward()
    if i % 2 == 0:
        opt.step()  # MeshOptimizer: a local step and mesh.step(parameters)
        continue
    opt.optimizer.step()  # the local step alone, then mesh.step(model) watched
    before = flat(model)
    if i == a.steps - 1 and a.save:
        np.save(a.save, before.numpy())  # what this PUBLISH hands the agent
    mixed = mesh.step(model).mixed
    changed = not torch.equal(before, flat(model))
    mixes_seen += bool(mixed and changed)
    changed_without_mix += bool(changed and not mixed)
    if i % 20 == 19:  # report another model (an average): ours must stay as it is
        other = copy.deepcopy(model)
        with torch.no_grad():
            for q in other.parameters():
                q.mul_(0.5)
        now, b0 = flat(model), mesh.copied_bytes
        mesh.report(full_loss(), 0.0, model=other)
        report_bytes += mesh.copied_bytes - b0  # the other model into the shared memory
        reports += 1
        report_kept += torch.equal(now, flat(model)) and inside(model, mesh)
out.update(loss0=loss0, loss=full_loss(), mixed=mesh.mixed_total, mixes_seen=mixes_seen,
           changed_without_mix=changed_without_mix, reports=reports, report_kept=report_kept,
           step=mesh.step_count, inside_end=inside(model, mesh),
           copied_bytes=mesh.copied_bytes - report_bytes, report_bytes=report_bytes,
           is_shared=mt.shared(model, mesh))
first = next(model.parameters())
old = float(first.view(-1)[0])
mesh.params[0] += 1.0  # writes through to the parameter
out["write_through"] = abs(float(first.view(-1)[0]) - (old + 1.0)) < 1e-6
mesh.params[0] -= 1.0
out["counter_counts"] = report_bytes == reports * 4 * mesh.num_params  # copies count
mesh.detach()
print(json.dumps(out), flush=True)
'''


def main():
    args = parse_args()
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP: no python3 with numpy and torch (install python3-numpy python3-torch)")
        sys.exit(77)
    os.environ["PYTHONPATH"] = PYTHON_DIR  # for the workers
    with external_mesh(args.bin, 2, "tsh", 1) as mesh, Workers() as workers:
        script = os.path.join(mesh.workdir, "torch_shm_worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        saved = os.path.join(mesh.workdir, "published.npy")
        start_all(mesh)
        for i, a in enumerate(mesh.agents):
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            extra = ["--save", saved] if i == 0 else []
            workers.append(Worker(py, a, mesh.workdir, "--node", i, "--steps", STEPS, *extra,
                                  script=script))
        for w in workers:
            w.proc.wait(timeout=120)
        for a, w in zip(mesh.agents, workers):
            r = w.event("done")
            print(f"  {a.name}: exit {w.proc.returncode}, {r}")
            assert w.proc.returncode == 0 and r, w.text()[-2000:]
            assert r["shared"] and r["inside_start"] and r["inside_end"] and r["is_shared"], r
            assert r["write_through"], r
            assert r["copied_bytes"] == 0 and r["counter_counts"], r
            assert r["report_bytes"] == r["reports"] * 4 * r["num_params"], r
            assert r["loss"] < 0.5 * r["loss0"], r
            assert r["mixed"] > 0 and r["mixes_seen"] > 0 and r["changed_without_mix"] == 0, r
            assert r["reports"] == STEPS // 20 and r["report_kept"] == r["reports"], r
            assert r["step"] >= STEPS, r
            assert a.alive(), f"{a.name} exited"
        # A restarted trainer on agent 1: a fresh model (another seed) takes the agent's.
        again = Worker(py, mesh.agents[0], mesh.workdir, "--resume-check", saved, tag="-again",
                       script=script)
        workers.append(again)
        again.proc.wait(timeout=60)
        r = again.event("done")
        print(f"  {mesh.agents[0].name} restarted: exit {again.proc.returncode}, {r}")
        assert again.proc.returncode == 0 and r, again.text()[-2000:]
        assert r["shared"] and r["inside_start"] and r["resumed"], r
        assert r["equal_to_published"], r
    print("PASS")


if __name__ == "__main__":
    main()
