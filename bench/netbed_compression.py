#!/usr/bin/env python3
"""Compressed exchange over slow links: N agents on the network-namespace bed
(tests/netbed/bed.py; needs root), every host link RATE Mbit/s both ways, RTT ms between any two
hosts, training the workload (default fmnist-cnn to 0.90, benchlib.WORKLOADS) under pssp until
every node has an eval >= the target. Per setting
(COMPRESS[/SYNC_EVERY]): seconds to target (from the common start of training), steps, parameter
MB per node (params_bytes_sent) at that moment; settings interleaved across repeats, medians.

Exit status 0 when the runs completed (whatever the figures), 2 on setup failure, 77 when no bed
can be built here (not root, no namespaces).
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
    p.add_argument("--settings", default="none,int8/auto,int8/4")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rate", type=float, default=20, help="Mbit/s of every host link, both ways")
    p.add_argument("--rtt", type=float, default=40, help="ms between any two hosts")
    p.add_argument("--barrier", default="pssp")
    p.add_argument("--repeat", type=int, default=1)
    bl.add_workload_args(p)
    return bl.workload_resolve(p.parse_args())


def run_one(a, binary, emu, workdir, setting):
    os.makedirs(workdir, exist_ok=True)
    comp, _, sync = setting.partition("/")
    res = {"setting": setting, "reached": False}
    with Bed(a.nodes, emu, delay_ms=a.rtt / 4, rate_mbit=a.rate, tag="cz") as bed:
        spawn_wall, logs, metrics = {}, [], []
        for i in range(a.nodes):
            logs.append(os.path.join(workdir, f"n{i + 1}.log"))
            metrics.append(os.path.join(workdir, f"n{i + 1}.jsonl"))
            argv = [binary, "agent", "--name", f"n{i + 1}", "--bind", f"{bed.addr(i)}:7950",
                    "--rpc", nl.RPC, *bl.workload_agent_args(a), "--barrier", a.barrier,
                    "--sample", "2", "--staleness", "4", "--select", "random", "--fanout", "2",
                    "--steps", str(a.max_steps),
                    "--min-peers", str(a.nodes - 1), "--shard", f"{i}/{a.nodes}",
                    "--compress", comp, "--sync-every", sync or "1",
                    "--metrics-file", metrics[i]]
            if i > 0:
                argv += ["--join", f"{bed.addr(0)}:7950", "--retry-join", "--retry-interval", "2s"]
            spawn_wall[i] = time.time()
            bed.spawn(i, argv, logs[i])
            if i == 0:
                time.sleep(0.5)
        started = time.monotonic()
        reach = {}
        last = {}
        while time.monotonic() - started < a.timeout:
            for i in range(a.nodes):
                if i in reach:
                    continue
                for m in bl.read_metrics(metrics[i]):
                    if m.get("event") == "eval" and m["accuracy"] >= a.target:
                        reach[i] = (spawn_wall[i] + m["t"], m["step"])
                        last[i] = nl.status(bed, i, binary)
                        break
            if len(reach) == a.nodes:
                break
            time.sleep(0.5)
        t0 = bl.train_start(logs, min(spawn_wall.values()))
        res["reached"] = len(reach) == a.nodes
        if res["reached"]:
            res["seconds"] = max(w for w, _ in reach.values()) - t0
            res["steps"] = bl.mean([s for _, s in reach.values()])
            sent = [s["params_bytes_sent"] for s in last.values() if s]
            res["mb"] = bl.mean(sent) / 1e6 if sent else None
            rounds = [s for s in last.values() if s]
            res["sync_every"] = [s.get("sync_every") for s in rounds]
        bed.close()
        res["emulator"] = bed.emulator_report()
    return res


def main():
    a = parse_args()
    binary, emu, code = bl.netbed_setup(a.bin, a.task)
    if code is not None:
        return code
    logdir = bl.make_logdir("meshtrain-netbed-compression-")
    print(f"logs: {logdir}", flush=True)
    settings = [s for s in a.settings.split(",") if s]
    results = {s: [] for s in settings}
    for rep in range(a.repeat):
        for s in settings:
            wd = os.path.join(logdir, f"{s.replace('/', '_').replace(':', '')}-{rep + 1}")
            r = run_one(a, binary, emu, wd, s)
            results[s].append(r)
            print(f"  {s} run {rep + 1}: reached {r['reached']} in {bl.fmt(r.get('seconds'), '.1f')}"
                  f" s, steps {bl.fmt(r.get('steps'), '.0f')}, {bl.fmt(r.get('mb'), '.1f')} MB/node,"
                  f" sync_every {r.get('sync_every')}", flush=True)
    base = [r["seconds"] for r in results.get(settings[0], []) if r.get("seconds")]
    base_s = bl.median(base) if base else None
    rows = []
    for s, reps in results.items():
        secs = [r["seconds"] for r in reps if r.get("seconds")]
        med = bl.median(secs) if secs else None
        mbs = [r["mb"] for r in reps if r.get("mb") is not None]
        steps = [r["steps"] for r in reps if r.get("steps") is not None]
        rows.append([s, f"{sum(1 for r in reps if r['reached'])}/{len(reps)}", bl.fmt(med, ".1f"),
                     bl.fmt(None if not (med and base_s) else med / base_s, ".2f"),
                     bl.fmt(bl.median(steps) if steps else None, ".0f"),
                     bl.fmt(bl.median(mbs) if mbs else None, ".1f")])
    print()
    print(f"{a.nodes} hosts on the namespace bed, {a.rate:g} Mbit/s links both ways, "
          f"{a.rtt:g} ms RTT; {bl.workload_text(a)}, {a.barrier} (β 2, s 4), random fanout 2; "
          f"medians of {a.repeat}")
    print(bl.table(["setting", "reached", f"s to {a.target}", f"vs {settings[0]}", "steps",
                    "param MB/node"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
