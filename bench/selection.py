#!/usr/bin/env python3
"""Receiver selection under heterogeneous uplinks: random vs SELMCAST, on real `meshtrain agent`
processes on loopback.

Six agents (by default) train the workload (default fmnist-cnn to 0.90, benchlib.WORKLOADS)
under pssp, each on its own shard, two each at uplink 5, 20 and 80 MB/s (--uplink-limit; loopback itself is far faster). The mesh runs once with
`--select random --fanout 2` and once with `--select selmcast --fanout 2` (same seeds, same
shards). Every agent trains on (no --target-accuracy: a node stopped at the target would stop
multicasting and change the others' candidate sets); a run ends as soon as every agent's
metrics show an eval >= target (or the step cap, or --timeout). All figures cover the run up
to that moment.

Reported per selection policy:
  - sync-round time from the metrics files' "sync" events (`seconds`: from choosing the
    receivers to the last receiver's transfer closing): mean and p95 over all rounds of all
    nodes, and the mean over nodes of each node's mean (fast nodes run many more rounds, so the
    pooled mean is weighted towards them);
  - mean realized fanout (sync events' `fanout`, pooled over rounds; and per uplink class);
  - bytes sent per node (status `bytes_sent`, all traffic, at the end of the run);
  - seconds until every node reached the target (earliest training start to the last node's
    first eval >= target, wall clock; see benchlib);
  - the bandwidth estimates the mesh published (`members` of every node, sampled every few
    seconds), which is what SELMCAST plans with.

Exit status: 0 when the experiments ran (whatever the figures), 2 on setup failure.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help="meshtrain binary (default $MESHTRAIN_BIN or "
                   f"{bl.DEFAULT_BIN})")
    p.add_argument("--uplinks", default="5,5,20,20,80,80",
                   help="one --uplink-limit (MB/s) per agent; the count sets the node count")
    p.add_argument("--downlinks", default="same",
                   help="--downlink-limit (MB/s) per agent, same count as --uplinks; 'same' = "
                   "equal to the uplinks (each node has one link of that speed, both ways); "
                   "'none' = no downlink caps")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the policies this many times, interleaved; the verdict uses medians")
    p.add_argument("--selects", default="random,selmcast", help="selection policies to run")
    p.add_argument("--fanout", type=int, default=2)
    p.add_argument("--barrier", default="pssp")
    p.add_argument("--sample", type=int, default=2)
    p.add_argument("--staleness", type=int, default=4)
    p.add_argument("--sync-every", type=int, default=1)
    bl.add_workload_args(p)
    p.add_argument("--members-every", type=float, default=3.0,
                   help="seconds between samples of the published bandwidth estimates")
    p.add_argument("--retries", type=int, default=2,
                   help="re-runs of a mesh whose agents were signalled from outside")
    p.add_argument("--json", help="also write all results to this JSON file")
    a = bl.workload_resolve(p.parse_args())
    try:
        a.uplinks = [float(x) for x in a.uplinks.split(",") if x]
        if a.downlinks == "same":
            a.downlinks = list(a.uplinks)
        elif a.downlinks == "none":
            a.downlinks = []
        else:
            a.downlinks = [float(x) for x in a.downlinks.split(",") if x]
    except ValueError:
        p.error("--uplinks/--downlinks take comma-separated numbers")
    if len(a.uplinks) < 2:
        p.error("need at least two agents")
    if a.downlinks and len(a.downlinks) != len(a.uplinks):
        p.error("--downlinks needs one value per agent")
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    a.selects = [x for x in a.selects.split(",") if x]
    for s in a.selects:
        if s not in ("all", "random", "selmcast"):
            p.error(f"unknown selection {s!r}")
    return a


def run_one(a, binary, workdir, select):
    n = len(a.uplinks)
    per = []
    for i in range(n):
        x = ["--profile", "local", *bl.workload_agent_args(a), "--barrier", a.barrier,
             "--sample", str(a.sample), "--staleness", str(a.staleness),
             "--select", select, "--fanout", str(a.fanout), "--steps", str(a.max_steps),
             "--min-peers", str(n - 1),
             "--shard", f"{i}/{n}", "--uplink-limit", str(a.uplinks[i]),
             "--sync-every", str(a.sync_every), "--seed", str(1000 + i)]
        if a.downlinks:
            x += ["--downlink-limit", str(a.downlinks[i])]
        per.append(x)
    res = {"select": select, "workdir": workdir, "timed_out": False}
    with bl.Run(binary, workdir, per, [], name_prefix="n") as run:
        run.start()
        started = time.monotonic()
        last_members = 0.0
        bw_samples = []  # (seconds since start, observer, {name: (up, down)})
        sts = {}
        while True:
            run.check_alive()
            sts = run.statuses()
            ok = all(s is not None for s in sts.values())
            now = time.monotonic()
            if now - last_members >= a.members_every:
                last_members = now
                for ag in run.agents:
                    m = ag.members()
                    if m:
                        bw_samples.append((now - started, ag.name,
                                           {k: (v["uplink_mbps"], v["downlink_mbps"])
                                            for k, v in m.items()}))
            # Every node trains on (none stops at the target, so the mesh keeps its mixing
            # partners); the run ends when every node has reached the target or the step cap.
            if ok and (all(run.reach_wall(ag, a.target) for ag in run.agents) or
                       all(not s["training"] for s in sts.values())):
                break
            if now - started > a.timeout:
                res["timed_out"] = True
                break
            time.sleep(0.5)
        t0 = run.t0()
        nodes = {}
        all_secs, all_fan = [], []
        for i, ag in enumerate(run.agents):
            ms = run.metrics(ag)
            syncs = [m for m in ms if m.get("event") == "sync"]
            secs = [m["seconds"] for m in syncs]
            fans = [m["fanout"] for m in syncs]
            all_secs += secs
            all_fan += fans
            reach = run.reach_wall(ag, a.target)
            s = sts.get(ag.name) or {}
            nodes[ag.name] = {
                "uplink": a.uplinks[i],
                "rounds": len(syncs),
                "mean_round_s": bl.mean(secs),
                "p95_round_s": bl.percentile(secs, 95),
                "mean_fanout": bl.mean(fans),
                "bytes_sent": s.get("bytes_sent"),
                "params_received": s.get("params_received"),
                "step": s.get("step"),
                "barrier_wait_s": s.get("barrier_wait_s"),
                "reach_s": None if reach is None else reach[0] - t0,
                "reach_step": None if reach is None else reach[1],
                "best_acc": max([e[2] for e in run.evals_wall(ag)], default=None),
            }
        res["nodes"] = nodes
        res["rounds"] = len(all_secs)
        res["mean_round_s"] = bl.mean(all_secs)
        res["p95_round_s"] = bl.percentile(all_secs, 95)
        res["node_mean_round_s"] = bl.mean([v["mean_round_s"] for v in nodes.values()])
        res["mean_fanout"] = bl.mean(all_fan)
        res["bytes_per_node"] = bl.mean([v["bytes_sent"] for v in nodes.values()])
        reached = [v["reach_s"] for v in nodes.values()]
        res["all_reached"] = all(r is not None for r in reached)
        res["seconds_to_target"] = max(reached) if res["all_reached"] else None
        res["bandwidth_samples"] = bw_samples
        run.stop(graceful=False)
    return res


def bandwidth_summary(res, label):
    """Per node: the published (up, down) estimates as seen by the other nodes — mean over the
    samples taken in the second half of the run, and the last sample."""
    samples = res["bandwidth_samples"]
    if not samples:
        return []
    t_end = samples[-1][0]
    late = [s for s in samples if s[0] >= t_end / 2]
    names = sorted(res["nodes"])
    rows = []
    for i, name in enumerate(names):
        ups = [v[name][0] for _, obs, v in late if obs != name and name in v]
        downs = [v[name][1] for _, obs, v in late if obs != name and name in v]
        last = next((v[name] for _, obs, v in reversed(samples) if obs != name and name in v),
                    (None, None))
        rows.append([label(res), name, f"{res['nodes'][name]['uplink']:g}",
                     bl.fmt(bl.mean(ups), ".1f"), bl.fmt(bl.mean(downs), ".1f"),
                     bl.fmt(last[0], ".1f"), bl.fmt(last[1], ".1f")])
    return rows


def main():
    a = parse_args()
    prepared = bl.prepare(a.bin, a.task, "meshtrain-bench-sel-")
    if prepared is None:
        return 2
    binary, logdir = prepared
    results = []
    try:
        for rep in range(a.repeat):
            for select in a.selects:
                wd = os.path.join(logdir, select if a.repeat == 1 else f"{select}-{rep + 1}")
                print(f"running {wd} ...", flush=True)
                r = bl.with_retries(lambda w: run_one(a, binary, w, select), wd, a.retries)
                r["rep"] = rep + 1
                results.append(r)
                print(f"  rounds={r['rounds']} mean_round={bl.fmt(r['mean_round_s'], '.3f')} s "
                      f"fanout={bl.fmt(r['mean_fanout'], '.2f')} "
                      f"to_target={bl.fmt(r['seconds_to_target'], '.1f')} s", flush=True)
    except bl.SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        print(f"logs: {logdir}", file=sys.stderr)
        return 2

    n = len(a.uplinks)
    print()
    print(f"Receiver selection: {n} agents, {bl.workload_text(a)}, {a.barrier} (sample {a.sample}, staleness "
          f"{a.staleness}), fanout P={a.fanout}, uplinks {','.join(f'{u:g}' for u in a.uplinks)}"
          f" MB/s" + (f", downlinks {','.join(f'{d:g}' for d in a.downlinks)} MB/s"
                      if a.downlinks else "") + f", target {a.target}")
    label = (lambda r: r["select"]) if a.repeat == 1 else (lambda r: f"{r['select']} #{r['rep']}")
    rows = []
    for r in results:
        rows.append([label(r), r["rounds"], bl.fmt(r["mean_round_s"], ".3f"),
                     bl.fmt(r["p95_round_s"], ".3f"), bl.fmt(r["node_mean_round_s"], ".3f"),
                     bl.fmt(r["mean_fanout"], ".2f"),
                     bl.fmt(None if r["bytes_per_node"] is None else r["bytes_per_node"] / 1e6,
                            ".1f"),
                     bl.fmt(r["seconds_to_target"], ".1f") if r["all_reached"] else
                     ("timeout" if r["timed_out"] else "not reached")])
    if a.repeat > 1:
        for sel in a.selects:
            rs = [r for r in results if r["select"] == sel]
            reach = [r["seconds_to_target"] if r["all_reached"] else math.inf for r in rs]
            med = bl.median(reach)
            rows.append([f"{sel} median", bl.fmt(bl.median([r["rounds"] for r in rs]), ".0f"),
                         bl.fmt(bl.median([r["mean_round_s"] for r in rs]), ".3f"),
                         bl.fmt(bl.median([r["p95_round_s"] for r in rs]), ".3f"),
                         bl.fmt(bl.median([r["node_mean_round_s"] for r in rs]), ".3f"),
                         bl.fmt(bl.median([r["mean_fanout"] for r in rs]), ".2f"),
                         bl.fmt(bl.median([r["bytes_per_node"] / 1e6 for r in rs
                                           if r["bytes_per_node"] is not None]), ".1f"),
                         "not reached" if med == math.inf else f"{med:.1f}"])
    print(bl.table(["select", "rounds", "mean round s", "p95 round s", "mean of node means s",
                    "mean fanout", "MB sent/node", f"s until all >= {a.target}"], rows))

    print()
    print("Per uplink class (pooled over the two nodes of each class):")
    crow = []
    for r in results:
        classes = sorted({v["uplink"] for v in r["nodes"].values()})
        for u in classes:
            vs = [v for v in r["nodes"].values() if v["uplink"] == u]
            rounds = sum(v["rounds"] for v in vs)
            w_mean = (sum((v["mean_round_s"] or 0) * v["rounds"] for v in vs) / rounds
                      if rounds else None)
            w_fan = (sum((v["mean_fanout"] or 0) * v["rounds"] for v in vs) / rounds
                     if rounds else None)
            crow.append([label(r), f"{u:g}", rounds, bl.fmt(w_mean, ".3f"),
                         bl.fmt(max((v["p95_round_s"] or 0) for v in vs), ".3f"),
                         bl.fmt(w_fan, ".2f"),
                         bl.fmt(bl.mean([v["step"] for v in vs]), ".0f"),
                         bl.fmt(bl.mean([v["params_received"] / v["reach_s"] for v in vs
                                         if v["params_received"] and v["reach_s"]]), ".1f"),
                         bl.fmt(bl.mean([v["reach_s"] for v in vs]), ".1f")])
    print(bl.table(["select", "uplink MB/s", "rounds", "mean round s", "p95 round s (max)",
                    "mean fanout", "steps", "models received/s", "s to target"], crow))

    print()
    print("Published bandwidth estimates (MB/s) as the other nodes see them (`members`): mean "
          "over the second half of the run, and the last sample:")
    brows = []
    for r in results:
        brows += bandwidth_summary(r, label)
    print(bl.table(["select", "node", "uplink limit", "uplink est", "downlink est",
                    "last up", "last down"], brows))

    if len(results) >= 2:
        def combined(sel):
            # One run, or the medians over the repeats (a run that missed the target counts as
            # infinitely late).
            rs = [r for r in results if r["select"] == sel]
            if len(rs) == 1:
                return rs[0]
            reach = [r["seconds_to_target"] if r["all_reached"] else math.inf for r in rs]
            med = bl.median(reach)
            return {"mean_round_s": bl.median([r["mean_round_s"] for r in rs]),
                    "mean_fanout": bl.median([r["mean_fanout"] for r in rs]),
                    "all_reached": med != math.inf,
                    "seconds_to_target": None if med == math.inf else med}
        by = {r["select"]: combined(r["select"]) for r in results}
        if "random" in by and "selmcast" in by:
            rnd, sel = by["random"], by["selmcast"]
            print()
            print("Acceptance (selmcast vs random" +
                  (f", medians of {a.repeat} runs each" if a.repeat > 1 else "") + "):")
            if rnd["mean_round_s"] and sel["mean_round_s"] is not None:
                ratio = sel["mean_round_s"] / rnd["mean_round_s"]
                print(f"  mean sync-round time ratio {ratio:.2f} (bar <= 0.70): "
                      f"{'MET' if ratio <= 0.7 else 'NOT MET'}")
            if sel["mean_fanout"] is not None:
                print(f"  selmcast mean realized fanout {sel['mean_fanout']:.2f} (bar >= "
                      f"{a.fanout}): {'MET' if sel['mean_fanout'] >= a.fanout else 'NOT MET'}")
            def when(r):
                return (f"{r['seconds_to_target']:.1f} s" if r["all_reached"] else
                        "not reached by every node")
            if sel["all_reached"] and rnd["all_reached"]:
                verdict = "MET" if sel["seconds_to_target"] <= rnd["seconds_to_target"] else \
                    "NOT MET"
            elif sel["all_reached"]:
                verdict = "MET"
            elif rnd["all_reached"]:
                verdict = "NOT MET"
            else:
                verdict = "undecided (neither run got every node there)"
            print(f"  time to {a.target}: selmcast {when(sel)} vs random {when(rnd)}: {verdict}")
    if a.json:
        import json
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    print(f"\nlogs: {logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
