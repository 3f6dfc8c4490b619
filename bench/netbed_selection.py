#!/usr/bin/env python3
"""Receiver selection (or barrier policy) on real, shaped links: hosts as network namespaces
(tests/netbed/bed.py; needs root), each host link at its own rate both ways, training
the workload (default fmnist-cnn to 0.90, benchlib.WORKLOADS) until every node has an eval >=
the target.

Default: 6 hosts at 40, 40, 160, 160, 640, 640 Mbit/s, 20 ms RTT, pssp (β 2, s 4), fanout P=2,
no --uplink-limit (the agents measure the links), --vary select: selmcast vs random.
`--vary barrier --values bsp,ssp,pssp,asp --links 100 --rtt 40` gives the per-policy table.

Per setting (medians over --repeat runs, settings interleaved): seconds from the first "starting
to train" to every node >= target, mean sync-round seconds and mean realized fanout (metrics
`sync` events up to that point), and the ratio to the first setting; then per host the
published uplink_mbps (members view) next to its shaped rate.

Exit status 0 when the runs completed (whatever the figures), 2 on setup failure, 77 when no bed
can be built here.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "netbed"))
import benchlib as bl  # noqa: E402
import netbed_lib as nl  # noqa: E402
from bed import Bed  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--vary", choices=["select", "barrier"], default="select")
    p.add_argument("--values", help="settings compared (default selmcast,random or "
                                    "bsp,ssp,pssp,asp)")
    p.add_argument("--links", default="40,40,160,160,640,640",
                   help="Mbit/s of each host's link, both ways; one value = every host")
    p.add_argument("--hosts", type=int, default=6)
    p.add_argument("--rtt", type=float, default=20, help="ms between any two hosts")
    p.add_argument("--select", default="selmcast", help="with --vary barrier")
    p.add_argument("--barrier", default="pssp", help="with --vary select")
    p.add_argument("--fanout", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    bl.add_workload_args(p)
    a = bl.workload_resolve(p.parse_args())
    if not a.values:
        a.values = "selmcast,random" if a.vary == "select" else "bsp,ssp,pssp,asp"
    rates = [float(x) for x in a.links.split(",")]
    a.rates = rates * a.hosts if len(rates) == 1 else rates
    if len(a.rates) != a.hosts:
        p.error(f"--links needs 1 or {a.hosts} values")
    return a


def run_one(a, binary, emu, workdir, value, tag):
    os.makedirs(workdir, exist_ok=True)
    n = a.hosts
    select = value if a.vary == "select" else a.select
    barrier = value if a.vary == "barrier" else a.barrier
    res = {"value": value, "reached": False}
    links = [{"rate_mbit": r} for r in a.rates]
    with Bed(n, emu, delay_ms=a.rtt / 4, links=links, tag=tag) as bed:
        spawn_wall, logs, metrics = {}, [], []
        for i in range(n):
            logs.append(os.path.join(workdir, f"n{i + 1}.log"))
            metrics.append(os.path.join(workdir, f"n{i + 1}.jsonl"))
            argv = [binary, "agent", "--name", f"n{i + 1}", "--bind", f"{bed.addr(i)}:{nl.PORT}",
                    "--rpc", nl.RPC, *bl.workload_agent_args(a), "--barrier", barrier,
                    "--sample", "2", "--staleness", "4", "--select", select,
                    "--fanout", str(a.fanout), "--steps", str(a.max_steps), "--min-peers", str(n - 1),
                    "--shard", f"{i}/{n}", "--metrics-file", metrics[i]]
            if i > 0:
                argv += ["--join", f"{bed.addr(0)}:{nl.PORT}", "--retry-join",
                         "--retry-interval", "1s"]
            spawn_wall[i] = time.time()
            bed.spawn(i, argv, logs[i])
            if i == 0:
                time.sleep(0.5)
        started = time.monotonic()
        reach = {}
        while time.monotonic() - started < a.timeout and len(reach) < n:
            for i in range(n):
                if i not in reach:
                    r = nl.first_reach(metrics[i], a.target)
                    if r:
                        reach[i] = (spawn_wall[i] + r[0], r[1])
            time.sleep(0.5)
        view = nl.members(bed, 0, binary) or {}
        res["uplink"] = [view.get(f"n{i + 1}", {}).get("uplink_mbps") for i in range(n)]
        t0 = bl.train_start(logs, min(spawn_wall.values()))
        res["reached"] = len(reach) == n
        end_wall = max(w for w, _ in reach.values()) if res["reached"] else time.time()
        rounds = []
        for i in range(n):
            for e in nl.metric_lines(metrics[i], "sync"):
                if spawn_wall[i] + e["t"] <= end_wall:
                    rounds.append(e)
        res["rounds"] = len(rounds)
        res["round_s"] = bl.mean([e["seconds"] for e in rounds]) if rounds else None
        res["fanout"] = bl.mean([e["fanout"] for e in rounds]) if rounds else None
        if res["reached"]:
            res["seconds"] = end_wall - t0
            res["steps"] = bl.mean([s for _, s in reach.values()])
    return res


def med(reps, key):
    v = [r[key] for r in reps if r.get(key) is not None]
    return bl.median(v) if v else None


def main():
    a = parse_args()
    binary, emu, code = bl.netbed_setup(a.bin, a.task)
    if code is not None:
        return code
    logdir = bl.make_logdir(f"meshtrain-netbed-{a.vary}-")
    print(f"logs: {logdir}", flush=True)
    values = [v for v in a.values.split(",") if v]
    results = {v: [] for v in values}
    for rep in range(a.repeat):
        for v in values:
            r = run_one(a, binary, emu, os.path.join(logdir, f"{v}-{rep + 1}"), v,
                        f"s{rep}{v[:3]}")
            results[v].append(r)
            print(f"  {v} run {rep + 1}: reached {r['reached']} in "
                  f"{bl.fmt(r.get('seconds'), '.1f')} s, steps {bl.fmt(r.get('steps'), '.0f')}, "
                  f"rounds {r['rounds']}, mean round {bl.fmt(r.get('round_s'), '.3f')} s, "
                  f"mean fanout {bl.fmt(r.get('fanout'), '.2f')}, uplink Mbit/s "
                  f"{[bl.fmt(u and u * 8, '.0f') for u in r['uplink']]}", flush=True)
    base = values[0]
    rows = []
    for v in values:
        reps = results[v]
        row = [v, f"{sum(1 for r in reps if r['reached'])}/{len(reps)}"]
        for key, spec in (("seconds", ".1f"), ("round_s", ".3f")):
            m, b = med(reps, key), med(results[base], key)
            row += [bl.fmt(m, spec), bl.fmt(None if not (m and b) else m / b, ".2f")]
        row += [bl.fmt(med(reps, "fanout"), ".2f"), bl.fmt(med(reps, "steps"), ".0f")]
        rows.append(row)
    print()
    print(f"{a.hosts} hosts on the namespace bed, links {a.links} Mbit/s both ways, {a.rtt:g} ms "
          f"RTT; {bl.workload_text(a)}, " +
          (f"{a.barrier} (β 2, s 4), fanout {a.fanout}" if a.vary == "select" else
           f"select {a.select} fanout {a.fanout}") +
          f"; medians of {a.repeat} interleaved runs")
    print(bl.table([a.vary, "reached", f"s to {a.target}", f"vs {base}", "mean round s",
                    f"vs {base}", "mean fanout", "steps"], rows))
    print()
    up_rows = []
    for i in range(a.hosts):
        pub = [r["uplink"][i] * 8 for v in values for r in results[v] if r["uplink"][i]]
        m = bl.median(pub) if pub else None  # members publish MB/s; links are Mbit/s
        up_rows.append([f"n{i + 1}", f"{a.rates[i]:g}", bl.fmt(m, ".0f"),
                        bl.fmt(None if m is None else m / a.rates[i], ".2f")])
    print("published uplink (members' uplink_mbps MB/s x 8; median over runs, view of n1) vs "
          "the shaped rate")
    print(bl.table(["host", "shaped Mbit/s", "published Mbit/s", "ratio"], up_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
