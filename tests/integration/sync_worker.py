"""A numpy trainer that syncs every H local steps (DiLoCo's inner loop with the average as outer
step), for the exact-exchange test. Each local step pulls the model towards this node's own
target, x <- x - lr (x - target), so after H steps from x a node holds
t + (1 - lr)^H (x - t), and a sync that mixes exactly the three nodes' models gives every node
their mean. Prints one JSON line at the end: the model before finish() (min, max, mean), the
consensus model's mean and CRC, and the syncs taken.
"""
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
    p.add_argument("--syncs", type=int, default=8)
    p.add_argument("--every", type=int, default=10, help="local steps between syncs (H)")
    p.add_argument("--dim", type=int, default=200000)
    p.add_argument("--target", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds of 'compute' per step")
    p.add_argument("--linger", type=float, default=0.0, help="seconds to wait before finish()")
    a = p.parse_args()
    mesh = meshtrain.connect(a.socket, timeout=60)
    x = np.zeros(a.dim, np.float32)
    target = np.float32(a.target)
    mesh.attach(x.size)
    mesh.configure(sync_every=a.every)
    mesh.wait_permit(1)  # start together (as MeshOptimizer does)
    means = []
    for _ in range(a.syncs):
        for _ in range(a.every):
            x -= np.float32(a.lr) * (x - target)
            if a.sleep:
                time.sleep(a.sleep)
        mesh.step(x, steps=a.every)
        means.append(float(x.mean()))
    if a.linger:
        time.sleep(a.linger)
    before = {"min": float(x.min()), "max": float(x.max()), "mean": float(x.mean())}
    res = mesh.finish(x)
    print(json.dumps({"event": "done", "step": mesh.step_count, "means": means,
                      "before": before,
                      "consensus": {"models": res.models, "crc32": res.crc32,
                                    "mean": float(x.mean())}}), flush=True)
    mesh.detach()


if __name__ == "__main__":
    main()
