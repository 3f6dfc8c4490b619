"""External trainers: 3 agents with --trainer external, each serving a small numpy
trainer (ext_worker.py, through the Python client python/meshtrain) over its Unix socket.

Checks that:
- the socket is created with mode 0600;
- every trainer attaches, steps to the end and mixes peer models (mixed > 0), and the mixing
  pulls each model from its own target towards the targets' mean (without mixing each would
  sit at its own target);
- the barrier holds: with ssp staleness 2 and one trainer 10x slower, a fast agent's step
  (polled before the slow one's) never runs more than staleness + 2 steps ahead;
- eval reports reach `status`; after the trainers detach the agents say training: false and
  stay alive; nothing was rejected.
"""
import os
import stat
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import (Worker, Workers, external_mesh, require_numpy_python,  # noqa: E402
                          start_all)
from harness import parse_args, wait_until  # noqa: E402

STEPS = 120
STALENESS = 2
TARGETS = [0.0, 3.0, 6.0]


def main():
    args = parse_args()
    py = require_numpy_python()
    with external_mesh(args.bin, 3, "ext", STALENESS) as mesh, Workers() as workers:
        start_all(mesh)
        for a in mesh.agents:
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            mode = stat.S_IMODE(os.stat(a.socket).st_mode)
            assert mode == 0o600, f"{a.socket} has mode {oct(mode)}"
        for i, a in enumerate(mesh.agents):
            sleep = 0.05 if i == 2 else 0.005
            workers.append(Worker(py, a, mesh.workdir, "--steps", STEPS, "--target", TARGETS[i],
                                  "--sleep", sleep, "--lr", 0.05))
        slow, fast = mesh.agents[2], mesh.agents[:2]
        wait_until(lambda: all(w.event("attached") for w in workers), 30, what="all attached")
        # The barrier: poll the fast agents first, then the slow one.
        worst = -10**9
        polls = 0
        for _ in range(400):
            if all(w.proc.poll() is not None for w in workers):
                break
            fs = [a.status() for a in fast]
            ss = slow.status()
            if ss is None or any(s is None for s in fs) or ss["step"] >= STEPS:
                continue
            polls += 1
            worst = max(worst, max(s["step"] for s in fs) - ss["step"])
        print(f"barrier: {polls} polls, fast agents at most {worst} steps ahead of the slow one")
        assert polls >= 5, "too few polls while training"
        assert worst <= STALENESS + 2, f"a fast agent ran {worst} steps ahead (ssp {STALENESS})"
        for w in workers:
            w.proc.wait(timeout=120)
        mean = sum(TARGETS) / len(TARGETS)
        for a, w, t in zip(mesh.agents, workers, TARGETS):
            done = w.event("done")
            assert done is not None, w.text()
            print(f"  {a.name}: step {done['step']} mixed {done['mixed']} model mean "
                  f"{done['mean']:.3f} (own target {t}, targets' mean {mean})")
            assert done["step"] == STEPS and done["mixed"] > 0, done
            assert abs(done["mean"] - mean) < abs(t - mean) / 2 or abs(t - mean) < 1e-9, done
        for a in mesh.agents:
            st = wait_until(lambda: (lambda s: s if s and not s["training"] else None)(
                a.status()), 10, what=f"{a.name} not training after detach")[1]
            assert st["trainer"]["kind"] == "external" and not st["trainer"]["attached"], st
            assert st["accuracy"] is not None and st["loss"] is not None, st
            assert st["rejected_by_reason"] == {}, st["rejected_by_reason"]
            assert a.alive(), f"{a.name} exited"
    print("PASS")


if __name__ == "__main__":
    main()
