"""MeshOptimizer(drift_correction=True) on skewed objectives, in one process (no agent).

Two nodes, each a thread with a MeshOptimizer over an in-process mesh (`FakeMesh`: a mesh step
publishes the node's model, waits for the other's and leaves their mean, like bsp with full
averaging). Node i minimises 0.5·c_i·|x − a_i|² with SGD, c = (1, 4), a = (1, −1): the optimum
of the sum is x* = (c·a)/Σc = −0.6. With sync_every = 10 local steps, plain averaging (FedAvg)
settles far from x* (each node runs to its own minimum between syncs: about −0.06); the drift
correction, in parameter space (True) or gradient space ("gradient"), must bring every node
to x* (within 0.01), with the outer steps avg and nesterov, and with 2 fragments; the default
("auto") is the gradient correction with sync_every > 1 and one fragment, off otherwise. Also: a
model the agent replaced (mesh.adoptions changes) clears the correction. Skips (77) without torch.
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import numpy_python  # noqa: E402
from fake_mesh import FakeMesh, run_nodes  # noqa: E402

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


CURV = (1.0, 4.0)
TARGET = (1.0, -1.0)
XSTAR = sum(c * a for c, a in zip(CURV, TARGET)) / sum(CURV)


def train(drift, outer="avg", fragments=1, h=10, rounds=60, lr=0.2):
    import torch
    import meshtrain.torch as mt
    shared = [None, None]
    barrier = threading.Barrier(2, timeout=60)
    xs = [torch.nn.Parameter(torch.zeros(5)) for _ in range(2)]
    opts = [mt.MeshOptimizer(torch.optim.SGD([xs[i]], lr=lr), FakeMesh(shared, barrier, i),
                             sync_every=h, share_memory=False, outer=outer,
                             fragments=fragments, drift_correction=drift) for i in range(2)]

    def steps(i):
        for _ in range(h * rounds):
            opts[i].zero_grad()
            (0.5 * CURV[i] * ((xs[i] - TARGET[i]) ** 2).sum()).backward()
            opts[i].step()

    run_nodes(2, barrier, steps)
    return xs, opts


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        py = numpy_python("torch")
        if py is None:
            print("SKIP: no interpreter with torch")
            return 77
        if os.path.realpath(py) != os.path.realpath(sys.executable):
            os.execv(py, [py, *sys.argv])
        print("SKIP: no interpreter with torch")
        return 77
    sys.path.insert(0, PYTHON_DIR)
    import torch

    plain, _ = train(False)
    gap = max(float((x.detach() - XSTAR).abs().max()) for x in plain)
    print(f"plain averaging: {float(plain[0][0]):.4f} (x* {XSTAR})")
    assert gap > 0.3, f"the skewed objectives should bias plain averaging, gap {gap}"
    for mode, outer, fragments in ((True, "avg", 1), (True, "nesterov", 1), (True, "avg", 2),
                                   ("gradient", "avg", 1), ("gradient", "nesterov", 1)):
        xs, opts = train(mode, outer=outer, fragments=fragments)
        gap = max(float((x.detach() - XSTAR).abs().max()) for x in xs)
        print(f"drift correction {mode}, outer {outer}, fragments {fragments}: "
              f"{float(xs[0][0]):.4f}, {float(xs[1][0]):.4f}")
        assert gap < 0.01, (mode, outer, fragments, gap, xs)
        learned = opts[0].drift.c if mode is True else opts[0].gradient_drift.delta
        assert float(learned.abs().max()) > 0.01  # a correction was learned

    # The default ("auto"): the gradient correction with sync_every > 1 and one fragment, none
    # otherwise; and it brings the nodes to x* as the explicit setting does.
    xs, opts = train("auto")
    assert opts[0].gradient_drift is not None and opts[0].drift is None
    assert max(float((x.detach() - XSTAR).abs().max()) for x in xs) < 0.01, xs
    for h, fragments in ((1, 1), (10, 2)):
        _, opts = train("auto", h=h, fragments=fragments, rounds=1)
        assert opts[0].gradient_drift is None and opts[0].drift is None, (h, fragments)
    print("drift correction auto: gradient with sync_every > 1 and one fragment, else off")

    # A replaced model clears the correction: afterwards, steps without a gradient leave the
    # parameters where they are.
    xs, opts = train(True, rounds=3)
    opt = opts[0]
    assert float(opt.drift.c.abs().max()) > 0
    opt.mesh.adoptions += 1
    opt.mesh.barrier = threading.Barrier(1)
    opt.mesh.shared = [None]

    def idle_steps(k):
        for _ in range(k):
            opt.zero_grad()
            (0.0 * xs[0].sum()).backward()
            opt.step()

    idle_steps(opt.sync_every)  # the sync at the end of these sees the adoption
    assert float(opt.drift.c.abs().max()) == 0.0, opt.drift.c
    before = xs[0].detach().clone()
    idle_steps(opt.sync_every - 1)
    assert torch.equal(xs[0].detach(), before), (xs[0], before)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
