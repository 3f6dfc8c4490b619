"""A small numpy trainer for the external-trainer tests (run with an interpreter that has numpy).

Each worker pulls a 1-D model towards its own target (x <- x - lr (x - target)) and calls
mesh.step after every step, so mixing pulls every node towards the targets' mean. Prints one
JSON line when attached and one at the end (and with --out writes the last one to a file).
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
    p.add_argument("--steps", type=int, default=100, help="stop at this mesh step")
    p.add_argument("--dim", type=int, default=1000)
    p.add_argument("--target", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds of 'compute' per step")
    p.add_argument("--out", default="")
    p.add_argument("--finish", action="store_true",
                   help="end with mesh.finish() (the consensus model) instead of detaching")
    p.add_argument("--die-at", type=int, default=-1,
                   help="exit with status 3, without a word to the agent, at this mesh step")
    p.add_argument("--poison-at", type=int, default=-1,
                   help="from this mesh step on, publish NaN parameters (the agent refuses them "
                        "and detaches the trainer, which then exits with status 4)")
    p.add_argument("--report-accuracy", type=float, default=0.0,
                   help="the accuracy reported every 20 steps (with the agent's --target-"
                        "accuracy at or below it, the agent finishes at step 20)")
    a = p.parse_args()
    mesh = meshtrain.connect(a.socket, timeout=30)
    x = np.zeros(a.dim, np.float32)
    target = np.full(a.dim, a.target, np.float32)
    resumed = mesh.attach(x.size)
    if resumed:
        np.copyto(x, mesh.params)
    print(json.dumps({"event": "attached", "step": mesh.step_count, "resumed": resumed,
                      "pid": os.getpid()}), flush=True)
    taken = 0  # finished peers' models taken over
    while mesh.step_count < a.steps and mesh.training:
        x -= a.lr * (x - target)
        if 0 <= a.poison_at <= mesh.step_count:
            x[0] = np.nan
            print(json.dumps({"event": "poisoned", "step": mesh.step_count}), flush=True)
            try:
                mesh.step(x)
            except meshtrain.MeshError as e:
                print(json.dumps({"event": "refused", "error": str(e)}), flush=True)
                sys.exit(4)
        if a.sleep:
            time.sleep(a.sleep)
        finished_in = mesh.step(x).peer_finished
        taken += finished_in
        if 0 <= a.die_at <= mesh.step_count:
            print(json.dumps({"event": "dying", "step": mesh.step_count}), flush=True)
            os._exit(3)
        if mesh.step_count % 20 == 0 or finished_in:
            loss = float(np.mean((x - target) ** 2))
            acc = a.report_accuracy
            if finished_in:
                print(json.dumps({"event": "taken", "step": mesh.step_count,
                                  "mean": float(x.mean()), "accuracy": acc}), flush=True)
            mesh.report(loss, acc)
    result = {"event": "done", "step": mesh.step_count, "mixed": mesh.mixed_total,
              "mean": float(x.mean()), "min": float(x.min()), "max": float(x.max()),
              "taken": taken, "training": mesh.training}
    if a.finish:
        t0 = time.time()
        fin = mesh.finish(x, timeout=600)
        result.update(consensus_models=fin.models, consensus_crc32=fin.crc32,
                      final_mean=float(x.mean()), finish_called=t0, finish_returned=time.time())
    else:
        mesh.detach()
    print(json.dumps(result), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
