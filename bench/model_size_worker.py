#!/usr/bin/env python3
"""One trainer of bench/model_size.py: a numpy model of --params float32 values that lives in the
agent's shared memory (mesh.params itself, so mesh.step copies nothing in Python). Each step
"computes" for --step-ms: it moves a slice of the model (a stand-in for an optimizer's update;
every slice in turn, so over the run the whole model changes) and sleeps the rest. Prints one
JSON line at the end: steps, the median and p90 time of mesh.step, models mixed, and the time of
one memcpy of the model (the floor of any step)."""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import meshtrain  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--params", type=int, required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-ms", type=float, default=100)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    mesh = meshtrain.connect(a.socket, timeout=600)
    mesh.attach(a.params)
    x = mesh.params
    rng = np.random.default_rng(a.seed)
    block = 1 << 20
    for lo in range(0, x.size, block):  # initialise in place, without a second model in memory
        x[lo:lo + block] = rng.standard_normal(min(block, x.size - lo), dtype=np.float32)
    scratch = np.empty_like(x)
    t0 = time.perf_counter()
    np.copyto(scratch, x)
    memcpy_ms = (time.perf_counter() - t0) * 1000
    del scratch
    overheads = []
    mixed = 0
    slice_len = max(1, x.size // 16)
    start = time.perf_counter()
    for step in range(a.steps):
        t0 = time.perf_counter()
        lo = (step * slice_len) % x.size
        x[lo:lo + slice_len] *= np.float32(0.999)
        rest = a.step_ms / 1000.0 - (time.perf_counter() - t0)
        if rest > 0:
            time.sleep(rest)
        t1 = time.perf_counter()
        mixed += mesh.step(x).mixed
        overheads.append((time.perf_counter() - t1) * 1000)
    train_s = time.perf_counter() - start
    overheads.sort()
    print(json.dumps({
        "steps": a.steps, "train_s": train_s, "mixed": mixed, "memcpy_ms": memcpy_ms,
        "step_overhead_ms_median": overheads[len(overheads) // 2],
        "step_overhead_ms_p90": overheads[int(len(overheads) * 0.9)],
        "finite": bool(np.isfinite(x).all()),
    }), flush=True)
    mesh.close()


if __name__ == "__main__":
    main()
