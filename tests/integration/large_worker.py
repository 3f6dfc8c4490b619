"""A numpy trainer with a large model for test_large_model.py: the model lives in the
agent's shared memory (mesh.params itself, so mesh.step copies nothing in Python). Each step
moves one slice of the model in turn (so over the run the whole model changes) and sleeps
--sleep s, then calls mesh.step. Prints one JSON line when attached and one at the end."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402

import meshtrain  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--params", type=int, required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--sleep", type=float, default=0.1)
    p.add_argument("--value", type=float, default=0.0, help="every parameter's initial value")
    a = p.parse_args()
    mesh = meshtrain.connect(a.socket, timeout=120)
    mesh.attach(a.params)
    x = mesh.params
    x.fill(np.float32(a.value))
    print(json.dumps({"event": "attached", "pid": os.getpid()}), flush=True)
    slice_len = max(1, x.size // 8)
    mixed = 0
    worst = 0.0
    for step in range(a.steps):
        lo = (step * slice_len) % x.size
        x[lo:lo + slice_len] *= np.float32(0.999)
        time.sleep(a.sleep)
        t0 = time.monotonic()
        mixed += mesh.step(x).mixed
        worst = max(worst, time.monotonic() - t0)
        if not mesh.training:
            break
    print(json.dumps({"event": "done", "step": mesh.step_count, "mixed": mixed,
                      "mean": float(x[:1000].mean()), "step_max_s": worst,
                      "finite": bool(np.isfinite(x).all())}), flush=True)
    mesh.detach()


if __name__ == "__main__":
    main()
