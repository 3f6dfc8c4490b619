"""The PyTorch example across a mesh, in CI with Debian's python3-torch: 2 agents with
--trainer external, each serving examples/torch_fmnist.py (a CNN on its half of Fashion-MNIST,
meshtrain.torch.MeshOptimizer) for 120 steps under ssp, the evaluated model being the moving
average of the parameters (--eval-average, meshtrain.torch.ModelAverage; checked on its own
first). Checks that both trainers attach, step to the end
and mix the other's models, that their evaluations learn (the CNN is far above chance after 120
steps: > 0.6 on 500 test images), and that the agents report the trainers' evaluations and stay
up after the trainers detach. Skips (77) without torch or the data set.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, external_mesh, numpy_python, start_all  # noqa: E402
from harness import parse_args, wait_until  # noqa: E402

DATASET = "/usr/share/datasets/fashion-mnist"
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "torch_fmnist.py")
STEPS = 120
PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")

# meshtrain.torch.ModelAverage on its own: the first update's warm-up weight, damping of an
# alternating parameter, and the restart when the mesh replaced the parameters.
AVERAGE_CHECK = r"""
import types, torch, meshtrain.torch as mt
m = torch.nn.Linear(1, 1, bias=False)
mesh = types.SimpleNamespace(adoptions=0)
with torch.no_grad():
    m.weight.fill_(0.0)
avg = mt.ModelAverage(m, decay=0.9, mesh=mesh)
with torch.no_grad():
    m.weight.fill_(11.0)
avg.update()  # d = min(0.9, 2/11): 9/11 of 11
assert abs(avg.model.weight.item() - 9.0) < 1e-5, avg.model.weight
for i in range(400):
    with torch.no_grad():
        m.weight.fill_(1.0 if i % 2 else -1.0)
    avg.update()
assert abs(avg.model.weight.item()) < 0.06, avg.model.weight
with torch.no_grad():
    m.weight.fill_(7.0)
mesh.adoptions += 1  # the mesh replaced the parameters
avg.update()
assert avg.model.weight.item() == 7.0 and avg.n == 0, (avg.model.weight, avg.n)
assert not any(p.requires_grad for p in avg.model.parameters())
print("ModelAverage ok")
"""


def main():
    args = parse_args()
    if not os.path.exists(os.path.join(DATASET, "t10k-images-idx3-ubyte.gz")):
        print(f"SKIP: Fashion-MNIST not installed in {DATASET}")
        sys.exit(77)
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP: no python3 with numpy and torch (install python3-numpy python3-torch)")
        sys.exit(77)
    r = subprocess.run([py, "-c", AVERAGE_CHECK], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": PYTHON_DIR})
    print(r.stdout.strip(), r.stderr.strip()[-2000:])
    assert r.returncode == 0, "meshtrain.torch.ModelAverage check failed"
    with external_mesh(args.bin, 2, "tex", 1) as mesh, Workers() as workers:
        start_all(mesh)
        for i, a in enumerate(mesh.agents):
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            workers.append(Worker(py, a, mesh.workdir, "--shard", f"{i}/2", "--max-steps", STEPS,
                                  "--eval-every", 60, "--eval-subset", 500, "--target", 0.99,
                                  "--eval-average", 0.98, "--seed", 0, script=EXAMPLE))
        for w in workers:
            w.proc.wait(timeout=300)
        for a, w in zip(mesh.agents, workers):
            evals = [e for e in w.lines() if e.get("event") == "eval"]
            print(f"  {a.name}: exit {w.proc.returncode}, evals " +
                  ", ".join(f"step {e['step']} {e['accuracy']:.3f}" for e in evals))
            assert w.proc.returncode == 0, w.text()[-2000:]
            assert [e["step"] for e in evals] == [60, 120], evals
            assert evals[-1]["accuracy"] > 0.6, evals
            st = wait_until(lambda: (lambda s: s if s and not s["training"] else None)(
                a.status()), 10, what=f"{a.name} not training after detach")[1]
            print(f"    agent: step {st['step']}, params received {st.get('params_received')}, "
                  f"accuracy {st['accuracy']}")
            assert st["step"] == STEPS, st
            assert st["params_received"] > 0, st
            assert abs(st["accuracy"] - evals[-1]["accuracy"]) < 1e-9, (st, evals)
            assert st["rejected_by_reason"] == {}, st["rejected_by_reason"]
            assert a.alive(), f"{a.name} exited"
    print("PASS")


if __name__ == "__main__":
    main()
