#!/usr/bin/env python3
"""Compressed parameter exchange (--compress, --sync-every): bytes, time and accuracy, on real
`meshtrain agent` processes on loopback.

For every setting the script runs N agents (the workload, default fmnist-cnn, benchlib.WORKLOADS;
each on its 1/N shard, pssp, random selection, --min-peers N-1) for a fixed budget of steps, and reads from the agents:
  - MB/node to target: parameter bytes each node sent (status `params_bytes_sent`: acknowledged
    transfers, on the wire after compression, incl. frame overhead) until every node had reached
    the target accuracy, averaged over nodes (sampled by polling `status` every 0.5 s, the poll at
    or just before the moment the last node reached it);
  - raw MB/node: the same transfers as plain float32 (`params_bytes_raw`), and their ratio;
  - s to target: from the common start of training to the first eval >= target of the last node;
  - final accuracy: every node's last eval at the step budget (they all stop there), mean.
Settings are interleaved across repeats (A B C A B C ...) so that machine load hits them alike;
the table shows medians. Exit status 0 when the runs completed (whatever the figures), 2 on setup
failure.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

DEFAULT_SETTINGS = "none,fp16,int8,topk:0.01,int8/4,none/auto,int8/auto"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--settings", default=DEFAULT_SETTINGS,
                   help="comma-separated COMPRESS[/SYNC_EVERY] (SYNC_EVERY a number or auto; "
                   "default 1)")
    p.add_argument("--nodes", type=int, default=4)
    bl.add_workload_args(p, steps_flag="--budget")
    p.add_argument("--sample", type=int, default=2)
    p.add_argument("--staleness", type=int, default=4)
    p.add_argument("--fanout", type=int, default=2)
    p.add_argument("--select", default="random")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--retries", type=int, default=2)
    a = p.parse_args()
    if a.budget is None:
        a.budget = bl.WORKLOADS[a.workload]["budget"]
    a = bl.workload_resolve(a)
    a.settings = [s for s in a.settings.split(",") if s]
    if a.nodes < 2:
        p.error("--nodes must be at least 2")
    return a


def split_setting(s):
    comp, _, sync = s.partition("/")
    return comp, (sync or "1")


def run_one(a, binary, workdir, setting):
    comp, sync = split_setting(setting)
    per = []
    for i in range(a.nodes):
        per.append(["--profile", "local", *bl.workload_agent_args(a), "--barrier", "pssp",
                    "--sample", str(a.sample), "--staleness", str(a.staleness),
                    "--select", a.select, "--fanout", str(a.fanout), "--steps", str(a.budget),
                    "--min-peers", str(a.nodes - 1), "--shard", f"{i}/{a.nodes}",
                    "--compress", comp, "--sync-every", sync])
    res = {"setting": setting, "reached": False, "timed_out": False, "workdir": workdir}
    with bl.Run(binary, workdir, per, []) as run:
        run.start()
        started = time.monotonic()
        timeline = {ag.name: [] for ag in run.agents}
        while True:
            run.check_alive()
            sts = run.statuses()
            now = time.time()
            for name, st in sts.items():
                timeline[name].append((now, st))
            if all(s is not None and not s["training"] for s in sts.values()):
                break
            if time.monotonic() - started > a.timeout:
                res["timed_out"] = True
                break
            time.sleep(0.5)
        t0 = run.t0()
        reach = {ag.name: run.reach_wall(ag, a.target) for ag in run.agents}
        res["reached"] = all(r is not None for r in reach.values())
        at = max(w for w, _ in reach.values()) if res["reached"] else None
        res["seconds"] = at - t0 if at else None
        sent, raw = [], []
        for ag in run.agents:
            st = None
            for w, s in timeline[ag.name]:
                if s is not None and (at is None or w <= at or st is None):
                    st = s
            if st is not None:
                sent.append(st.get("params_bytes_sent", 0))
                raw.append(st.get("params_bytes_raw", 0))
        res["mb_to_target"] = bl.mean(sent) / 1e6 if sent and at else None
        res["raw_mb_to_target"] = bl.mean(raw) / 1e6 if raw and at else None
        finals = []
        for ag in run.agents:
            ev = run.evals_wall(ag)
            if ev:
                finals.append(ev[-1][2])
        res["final_accuracy"] = bl.mean(finals) if finals else None
        res["final_min"] = min(finals) if finals else None
        last = {n: (tl[-1][1] if tl and tl[-1][1] else {}) for n, tl in timeline.items()}
        res["sync_every"] = [s.get("sync_every") for s in last.values()]
        res["ratio"] = bl.mean([s.get("compression_ratio", 1.0) for s in last.values()])
        run.stop(graceful=False)
    return res


def main():
    a = parse_args()
    prep = bl.prepare(a.bin, a.task, "meshtrain-compression-")
    if prep is None:
        return 2
    binary, logdir = prep
    results = {s: [] for s in a.settings}
    try:
        for rep in range(a.repeat):
            for s in a.settings:
                wd = os.path.join(logdir, f"{s.replace('/', '_').replace(':', '')}-{rep + 1}")
                r = bl.with_retries(lambda w: run_one(a, binary, w, s), wd, a.retries)
                results[s].append(r)
                print(f"  {s} run {rep + 1}: to {a.target} "
                      f"{bl.fmt(r['seconds'], '.1f')} s, {bl.fmt(r['mb_to_target'], '.1f')} MB/node"
                      f", final acc {bl.fmt(r['final_accuracy'], '.4f')}, sync_every "
                      f"{r['sync_every']}", flush=True)
    except bl.SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        return 2
    finally:
        print_table(a, results)
    return 0


def med(vals):
    vals = [v for v in vals if v is not None]
    return bl.median(vals) if vals else None


def print_table(a, results):
    base = results.get("none") or []
    base_mb = med([r["mb_to_target"] for r in base])
    base_s = med([r["seconds"] for r in base])
    base_acc = med([r["final_accuracy"] for r in base])
    rows = []
    for s, reps in results.items():
        if not reps:
            continue
        mb = med([r["mb_to_target"] for r in reps])
        raw = med([r["raw_mb_to_target"] for r in reps])
        secs = med([r["seconds"] for r in reps])
        acc = med([r["final_accuracy"] for r in reps])
        reached = sum(1 for r in reps if r["reached"])
        rows.append([s, f"{reached}/{len(reps)}", bl.fmt(mb, ".1f"), bl.fmt(raw, ".1f"),
                     bl.fmt(None if not (mb and base_mb) else mb / base_mb, ".3f"),
                     bl.fmt(secs, ".1f"),
                     bl.fmt(None if not (secs and base_s) else secs / base_s, ".2f"),
                     bl.fmt(acc, ".4f"),
                     bl.fmt(None if acc is None or base_acc is None else acc - base_acc, "+.4f")])
    print()
    print(f"{a.nodes} agents, {a.task}, pssp (sample {a.sample}, staleness {a.staleness}), "
          f"select {a.select} fanout {a.fanout}, budget {a.budget} steps, target {a.target}, "
          f"medians of {a.repeat}")
    print(bl.table(["setting (compress/sync-every)", "reached", "MB/node to target",
                    "raw MB/node", "bytes vs none", "s to target", "time vs none",
                    f"final acc @{a.budget}", "acc vs none"], rows))


if __name__ == "__main__":
    sys.exit(main())
