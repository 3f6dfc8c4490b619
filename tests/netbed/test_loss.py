"""Membership under packet loss on real links: 8 agents, one per namespace, with
10 % loss between any two hosts (every host link drops 5.1 % each way, so a packet crossing two
links is lost with probability 10 %) for --duration seconds (40 in the suite, 20 in the sanitizer
build's run; bench/netbed_loss.py runs 180). Lifeguard timing of the lan profile. Checks that:

- no member is ever marked failed: 0 "failed" member events in any agent's metrics file, and
  every agent lists all 8 alive or suspect at every poll, and all 8 alive within 15 s of the
  loss ending (a suspicion raised just before is refuted at the suspect's next probe);
- reports the suspicions raised and refuted (status "membership" counters) and what linkemu
  dropped.
Skips (exit 77) where no bed can be built (not root, no namespaces or /dev/net/tun).
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bed import Bed, available, find_linkemu  # noqa: E402
import netbed_lib as nl  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--loss", type=float, default=0.10, help="loss between any two hosts")
    p.add_argument("--duration", type=float, default=20 if nl.SANITIZED else 40,
                   help="seconds under loss")
    p.add_argument("--rtt", type=float, default=20, help="ms between any two hosts")
    p.add_argument("--profile", default="lan")
    return p.parse_args(argv)


def run(a, tag="ls"):
    """Runs the scenario; returns a dict of figures (raises AssertionError on a broken setup)."""
    emu = find_linkemu(a.bin)
    work = tempfile.mkdtemp(prefix="meshtrain-netbed-loss-")
    n = a.agents
    res = {"agents": n, "path_loss": a.loss, "duration_s": a.duration, "polls": 0,
           "not_all_alive_polls": 0}
    ok = False
    try:
        with Bed(n, emu, delay_ms=a.rtt / 4, rate_mbit=100, tag=tag) as bed:
            metrics = [os.path.join(work, f"n{i + 1}.jsonl") for i in range(n)]
            for i in range(n):
                argv = [a.bin, "agent", "--name", f"n{i + 1}", "--bind",
                        f"{bed.addr(i)}:{nl.PORT}", "--rpc", nl.RPC, "--task", "none",
                        "--profile", a.profile, "--metrics-file", metrics[i]]
                if i > 0:
                    argv += ["--join", f"{bed.addr(0)}:{nl.PORT}", "--retry-join",
                             "--retry-interval", "1s"]
                bed.spawn(i, argv, os.path.join(work, f"n{i + 1}.log"))
                if i == 0:
                    time.sleep(0.3)
            names = {f"n{i + 1}" for i in range(n)}

            def alive_everywhere():
                for i in range(n):
                    m = nl.members(bed, i, a.bin)
                    if m is None or {k for k, v in m.items() if v["status"] == "alive"} != names:
                        return False
                return True
            deadline = time.monotonic() + 60
            while not alive_everywhere():
                assert time.monotonic() < deadline, "the mesh did not form without loss"
                time.sleep(0.5)
            link_loss = nl.path_loss_to_link_loss(a.loss)
            for i in range(n):
                bed.set_link(i, loss=link_loss)
            start = time.monotonic()
            while time.monotonic() - start < a.duration:
                res["polls"] += 1
                for i in range(n):
                    m = nl.members(bed, i, a.bin)
                    bad = None if m is None else {k: v["status"] for k, v in m.items()
                                                  if v["status"] not in ("alive", "suspect")}
                    if m is None or bad or set(m) != names:
                        res["not_all_alive_polls"] += 1
                        res.setdefault("seen", []).append((f"n{i + 1}", bad))
                time.sleep(2)
            for i in range(n):
                bed.set_link(i, loss=0.0)
            sts = [nl.status(bed, i, a.bin) for i in range(n)]
            assert all(s is not None for s in sts), "an agent stopped answering"
            ms = [s["membership"] for s in sts]
            res["suspicions_raised"] = sum(m["suspicions_raised"] for m in ms)
            res["refutations"] = sum(m["refutations"] for m in ms)
            res["failures_declared"] = sum(m["failures_declared"] for m in ms)
            res["probes"] = sum(m["probes"] for m in ms)
            res["failed_events"] = sum(
                1 for p in metrics for e in nl.metric_lines(p, "member")
                if e.get("status") == "failed")
            res["suspect_events"] = sum(
                1 for p in metrics for e in nl.metric_lines(p, "member")
                if e.get("status") == "suspect")
            # A suspicion raised just before the loss ended is still pending: the suspect
            # refutes at its next probe, so every view is all-alive again within a few probe
            # intervals (lan: 1 s) — not necessarily at the first poll.
            t_end = time.monotonic()
            res["all_alive_at_end"] = alive_everywhere()
            while not res["all_alive_at_end"] and time.monotonic() - t_end < 15:
                time.sleep(0.5)
                res["all_alive_at_end"] = alive_everywhere()
            res["all_alive_after_s"] = round(time.monotonic() - t_end, 1)
        res["linkemu"] = bed.emulator_report().strip()
        ok = True
        return res
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs kept in {work}", file=sys.stderr)


def main():
    a = parse_args()
    why = available(find_linkemu(a.bin))
    if why:
        print(f"SKIP: no network-namespace bed here: {why}")
        sys.exit(77)
    r = run(a)
    print(r.pop("linkemu", ""))
    print(f"{r['agents']} agents, {r['path_loss']:.0%} loss between hosts for "
          f"{r['duration_s']:.0f} s: failed events {r['failed_events']}, failures declared "
          f"{r['failures_declared']}, suspicions raised {r['suspicions_raised']}, refuted "
          f"{r['refutations']} (suspect events {r['suspect_events']}), probes {r['probes']}, "
          f"polls {r['polls']} with a member not alive/suspect: {r['not_all_alive_polls']}, all "
          f"alive {r.get('all_alive_after_s')} s after the loss ended")
    assert r["failed_events"] == 0 and r["failures_declared"] == 0, r
    assert r["not_all_alive_polls"] == 0, r.get("seen")
    assert r["all_alive_at_end"], r
    print("PASS")


if __name__ == "__main__":
    main()
