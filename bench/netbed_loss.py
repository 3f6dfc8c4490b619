#!/usr/bin/env python3
"""Membership under loss, the long variant of tests/netbed/test_loss.py: 8 agents
on the namespace bed, 10 % loss between any two hosts for 180 s (--duration), lan profile.
Prints failed events, failures declared, suspicions raised and refuted, per repeat.

Exit status 0 when the runs completed with 0 failed events, 1 otherwise, 77 when no bed can be
built here (not root, no namespaces).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "netbed"))
import benchlib as bl  # noqa: E402
import test_loss  # noqa: E402
from bed import available, find_linkemu  # noqa: E402


def main():
    argv = sys.argv[1:]
    repeat = 1
    if "--repeat" in argv:
        k = argv.index("--repeat")
        repeat = int(argv[k + 1])
        del argv[k:k + 2]
    if "--duration" not in argv:
        argv += ["--duration", "180"]
    if "--bin" not in argv:
        argv += ["--bin", bl.find_binary(None)]
    a = test_loss.parse_args(argv)
    why = available(find_linkemu(a.bin))
    if why:
        print(f"SKIP: no network-namespace bed here: {why}")
        return 77
    print(f"| run | agents | loss between hosts | seconds | failed events | failures declared "
          f"| suspicions raised | refuted | suspect events | probes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for rep in range(repeat):
        r = test_loss.run(a, tag=f"lb{rep}")
        bad += r["failed_events"] + r["failures_declared"]
        print(f"| {rep + 1} | {r['agents']} | {r['path_loss']:.0%} | {r['duration_s']:.0f} | "
              f"{r['failed_events']} | {r['failures_declared']} | {r['suspicions_raised']} | "
              f"{r['refutations']} | {r['suspect_events']} | {r['probes']} |", flush=True)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
