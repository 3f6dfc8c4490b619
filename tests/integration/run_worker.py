"""The training script of the `meshtrain run` tests (tests/integration/test_run.py,
tests/netbed/test_run.py): a numpy vector model pulled towards a target with a fake gradient,
through the Python client (python/meshtrain, on PYTHONPATH) at $MESHTRAIN_SOCKET, which
`meshtrain run` sets.

Prints JSON lines: {"event": "attached", "step", "resumed", "pid"} once attached (step: the
mesh's step the script continues from), {"event": "step", "step"} every --every steps, and
{"event": "done", "step"} when it stops at --steps. With --crash-once FILE it exits 1 at
--crash-at the first time (when FILE does not exist yet; it creates FILE).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import meshtrain


def say(**kv):
    print(json.dumps(kv), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=0, help="stop at this mesh step (0: never)")
    p.add_argument("--dim", type=int, default=1000)
    p.add_argument("--sleep", type=float, default=0.01, help="seconds of 'compute' per step")
    p.add_argument("--every", type=int, default=10, help="print the step every N steps")
    p.add_argument("--crash-once", default="", metavar="FILE")
    p.add_argument("--crash-at", type=int, default=10)
    a = p.parse_args()
    mesh = meshtrain.connect(os.environ["MESHTRAIN_SOCKET"], timeout=30)
    x = np.zeros(a.dim, np.float32)
    target = np.full(a.dim, 1.0, np.float32)
    if mesh.attach(x.size):
        np.copyto(x, mesh.params)
    say(event="attached", step=mesh.step_count, resumed=mesh.resumed, pid=os.getpid(),
        rpc=os.environ.get("MESHTRAIN_RPC", ""))
    while mesh.training and (a.steps == 0 or mesh.step_count < a.steps):
        x -= 0.05 * (x - target)  # the fake gradient step
        time.sleep(a.sleep)
        mesh.step(x)
        if mesh.step_count % a.every == 0:
            say(event="step", step=mesh.step_count)
        if a.crash_once and mesh.step_count >= a.crash_at and not os.path.exists(a.crash_once):
            open(a.crash_once, "w").close()
            say(event="crash", step=mesh.step_count)
            sys.exit(1)
    mesh.detach()
    say(event="done", step=mesh.step_count)


if __name__ == "__main__":
    main()
