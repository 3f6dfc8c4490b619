"""Mesh-wide stop with external trainers: 3 agents with --trainer external and
--target-accuracy 0.9, each serving ext_worker.py. The first worker reports accuracy 0.95 at
its step 20 (its agent finishes); the others report 0.0 (they never meet the target on their
own) and train on to step STEPS.

Checks that:
- the finished node's final model is the one its trainer evaluated (the shared memory at the
  EVAL report: the worker's model after the last mix), not the snapshot published before;
- each node still training takes that final model over exactly once (mesh.peer_finished once,
  its parameters replaced by the final model, not averaged with it) — a node whose evaluation
  falls short trains on instead of being reset every round;
- after that the two train on to STEPS, keep mixing, and stay within the barrier; nothing is
  rejected.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import (Worker, Workers, external_mesh, require_numpy_python,  # noqa: E402
                          start_all)
from harness import parse_args, wait_until  # noqa: E402

STEPS = 200
TARGETS = [0.0, 3.0, 6.0]


def main():
    args = parse_args()
    py = require_numpy_python()
    with external_mesh(args.bin, 3, "ems", 2) as mesh, Workers() as workers:
        for a in mesh.agents:
            a.extra += ["--target-accuracy", "0.9"]
        start_all(mesh)
        for a in mesh.agents:
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
        for i, a in enumerate(mesh.agents):
            workers.append(Worker(py, a, mesh.workdir, "--steps", STEPS, "--target", TARGETS[i],
                                  "--sleep", 0.01, "--lr", 0.05, "--report-accuracy",
                                  0.95 if i == 0 else 0.0))
        for w in workers:
            w.proc.wait(timeout=120)
        done = [w.event("done") for w in workers]
        for w, d in zip(workers, done):
            assert d is not None, w.text()
        first = done[0]
        print(f"  {mesh.agents[0].name}: finished at step {first['step']}, final model mean "
              f"{first['mean']:.6f}")
        assert not first["training"] and first["step"] == 20, first
        for a, w, d in zip(mesh.agents[1:], workers[1:], done[1:]):
            taken = [x for x in w.lines() if x.get("event") == "taken"]
            print(f"  {a.name}: took the final model over {d['taken']} time(s) "
                  f"{[(t['step'], round(t['mean'], 6)) for t in taken]}, ended at step "
                  f"{d['step']} (mixed {d['mixed']}, model mean {d['mean']:.3f})")
            assert d["taken"] == 1 and len(taken) == 1, (d, taken)
            # Replaced, not averaged: the model right after the MIX is the final model itself.
            assert abs(taken[0]["mean"] - first["mean"]) < 1e-5, (taken[0], first)
            assert d["step"] == STEPS, d
            assert taken[0]["step"] < STEPS - 50, taken[0]
        for a in mesh.agents:
            st = wait_until(lambda: (lambda s: s if s and not s["training"] else None)(
                a.status()), 10, what=f"{a.name} not training")[1]
            assert st["rejected_by_reason"] == {}, st["rejected_by_reason"]
            assert a.alive(), f"{a.name} exited"
    print("PASS")


if __name__ == "__main__":
    main()
