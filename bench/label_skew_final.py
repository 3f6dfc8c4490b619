#!/usr/bin/env python3
"""Label-skewed shards end where iid shards end: N agents (default 4) train
fmnist-mlp with the built-in trainer for --steps steps each, once on iid shards and once on
`--shard-mode label-skew:ALPHA` shards (default 0.1: each shard mostly two to four classes), then
agree on one model (the end-of-training consensus). Reported per run: each node's accuracy on the
full test set of the model it ends with (the consensus model, evaluated by every node after it
adopted it: status params_crc32 == consensus crc32), and the skewed run's distance to the iid
run's. Acceptance: every node of the skewed run within 0.02 of the iid run's.

    python3 bench/label_skew_final.py --runs 3 --steps 3000

Extra agent options (e.g. `--outer nesterov --sync-every 20`) go to both runs with --extra. A
bench (minutes on 2 cores), not a test. Needs the dataset-fashion-mnist package.
"""
import argparse
import os
import shlex
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
from harness import wait_until  # noqa: E402


def run(binary, workdir, n, mode, steps, seed, extra):
    common = ["--profile", "local", "--model", "fmnist-mlp", "--barrier", "pssp", "--sample", "2",
              "--shard-mode", mode, "--steps", str(steps), "--eval-every", str(steps),
              "--seed", str(seed), "--min-peers", str(n - 1)] + extra
    per_agent = [["--shard", f"{i}/{n}"] for i in range(n)]
    with bl.Run(binary, workdir, per_agent, common, name_prefix="ls") as r:
        r.start()

        def agreed():
            r.check_alive()
            sts = [a.status() for a in r.agents]
            if any(s is None for s in sts):
                return None
            ok = all(s["consensus"]["state"] in ("serving", "adopted") and
                     s["params_crc32"] == s["consensus"]["crc32"] and s["accuracy"] is not None
                     for s in sts)
            return sts if ok else None
        _, sts = wait_until(agreed, 1800, interval=1, what="every node holds the consensus model")
    return [s["accuracy"] for s in sts], {s["consensus"]["crc32"] for s in sts}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--alpha", default="0.1")
    ap.add_argument("--extra", default="", help="more agent options for both runs")
    a = ap.parse_args()
    binary = bl.find_binary(a.bin)
    bl.check_dataset("fmnist-mlp")
    logdir = tempfile.mkdtemp(prefix="meshtrain-labelskew-")
    extra = shlex.split(a.extra)
    rows, ok = [], True
    for seed in range(1, a.runs + 1):
        t0 = time.monotonic()
        iid, iid_crc = run(binary, os.path.join(logdir, f"iid{seed}"), a.nodes, "iid", a.steps,
                           seed, extra)
        skew, skew_crc = run(binary, os.path.join(logdir, f"skew{seed}"), a.nodes,
                             f"label-skew:{a.alpha}", a.steps, seed, extra)
        gap = max(max(iid) - x for x in skew)
        ok = ok and gap <= 0.02 and len(iid_crc) == 1 and len(skew_crc) == 1
        rows.append([seed, " ".join(f"{x:.4f}" for x in iid), " ".join(f"{x:.4f}" for x in skew),
                     f"{gap:+.4f}", "yes" if len(iid_crc) == len(skew_crc) == 1 else "NO",
                     f"{time.monotonic() - t0:.0f}"])
        print(" | ".join(map(str, rows[-1])), flush=True)
    print(bl.table(["seed", "iid: accuracy per node", f"label-skew:{a.alpha}: accuracy per node",
                    "iid - worst skewed", "one model each", "wall s"], rows))
    print("every skewed node within 0.02 of the iid run: " + ("yes" if ok else "NO"))
    print(f"logs in {logdir}")


if __name__ == "__main__":
    main()
