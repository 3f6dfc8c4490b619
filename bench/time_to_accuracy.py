#!/usr/bin/env python3
"""Time to accuracy of decentralized training under each barrier policy, with and without one
straggler, on real `meshtrain agent` processes on loopback.

For every policy the script runs N agents (each on its own 1/N shard of Fashion-MNIST, all
starting from the same parameters, --min-peers N-1 so they start together) until every
non-straggler has reached the target test accuracy, once without and once with one straggler
(--slowdown F on the last agent). By default every agent trains on (no --target-accuracy) and the
run ends as soon as the metrics files show every non-straggler at the target: were the nodes to
stop at the target (--stop-at-target, the agent's --target-accuracy), they would also stop
multicasting, and the last node would finish alone on its 1/N shard without anyone to mix with,
which measures that tail rather than the barrier policy. A one-agent baseline trains on the whole
set. Then a consensus run (pssp, no straggler, a fixed budget of steps, no target) checks that the
nodes' parameters agree: every agent is stopped gracefully, writes DIR/ckpt.bin, and the script
reports the largest relative distance ||x_i - x_j|| / mean(||x_i||, ||x_j||) between two nodes'
parameter vectors.

The workload (--workload, benchlib.WORKLOADS) is by default fmnist-cnn to 0.90 test accuracy,
about a minute for one agent alone; `--workload quick` is fmnist-mlp to 0.85 (about a second).

Columns: seconds until every non-straggler reached the target, measured from the common start
of training (earliest "starting to train" log line) to the wall time of the last non-straggler's
first eval >= target (metrics `t` + the agent's spawn wall time); steps = mean step of the
non-stragglers at that eval; MB sent per node = mean `bytes_sent` (status, all traffic) of the
non-stragglers when each reached the target; barrier wait share = mean over non-stragglers of
barrier_wait_s / their time to target (both sampled by polling `status` every 0.5 s).

Exit status: 0 when the experiments ran (whatever the figures), 2 on setup failure (the tables
of the runs that completed are still printed).
"""
import argparse
import itertools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

POLICIES = ["bsp", "ssp", "asp", "pbsp", "pssp", "dssp"]


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help="meshtrain binary (default $MESHTRAIN_BIN or "
                   f"{bl.DEFAULT_BIN})")
    p.add_argument("--nodes", type=int, default=4, help="agents per mesh")
    p.add_argument("--policies", default="bsp,asp,pssp",
                   help=f"comma-separated barrier policies, from {','.join(POLICIES)} "
                   "(or 'all')")
    p.add_argument("--stragglers", choices=["both", "no", "yes"], default="both",
                   help="run each policy without and/or with one straggler")
    p.add_argument("--slowdown", type=float, default=4.0, help="straggler's --slowdown")
    bl.add_workload_args(p)
    p.add_argument("--budget", type=int, default=800,
                   help="steps per agent in the consensus run")
    p.add_argument("--sample", type=int, default=2, help="PSP sample size beta")
    p.add_argument("--staleness", type=int, default=4)
    p.add_argument("--select", default="random", help="receiver selection")
    p.add_argument("--fanout", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per policy/straggler configuration; the table shows medians "
                   "and the range of the time to target (the machine is shared: single runs "
                   "vary by +-25%%)")
    p.add_argument("--stop-at-target", action="store_true",
                   help="give the non-stragglers --target-accuracy, so each stops training "
                   "(and multicasting) at the target; by default they train on and the run "
                   "ends once all reached it")
    p.add_argument("--retries", type=int, default=2,
                   help="re-runs of a mesh whose agents were signalled from outside")
    p.add_argument("--no-baseline", action="store_true", help="skip the one-agent baseline")
    p.add_argument("--no-consensus", action="store_true", help="skip the consensus run")
    p.add_argument("--json", help="also write all results to this JSON file")
    a = bl.workload_resolve(p.parse_args())
    a.policies = POLICIES if a.policies == "all" else [x for x in a.policies.split(",") if x]
    for pol in a.policies:
        if pol not in POLICIES:
            p.error(f"unknown policy {pol!r}")
    if a.nodes < 2:
        p.error("--nodes must be at least 2")
    return a


def agent_args(a, n, policy, lr, steps, target, straggler_index=None, data_dirs=None):
    per = []
    for i in range(n):
        x = ["--profile", "local", *bl.workload_agent_args(a, lr), "--barrier", policy,
             "--staleness", str(a.staleness), "--sample", str(a.sample),
             "--select", a.select, "--fanout", str(a.fanout), "--steps", str(steps),
             "--min-peers", str(n - 1), "--log-level", "info"]
        if n > 1:
            x += ["--shard", f"{i}/{n}"]
        if straggler_index == i:
            # The straggler keeps training to the step cap: were it to stop at the target, it
            # would leave every barrier and the others would no longer feel it.
            x += ["--slowdown", str(a.slowdown)]
        elif target is not None:
            x += ["--target-accuracy", str(target)]
        if data_dirs:
            x += ["--data-dir", data_dirs[i], "--checkpoint-every", str(10 ** 9)]
        per.append(x)
    return per


def status_at(timeline, wall):
    """The last status sampled at or before `wall` (else the first one), or None."""
    best = None
    for w, st in timeline:
        if st is None:
            continue
        if w <= wall or best is None:
            best = st
        if w > wall:
            break
    return best


def run_mesh(a, binary, workdir, n, policy, lr, target, steps, timeout, straggler=False,
             consensus=False):
    """Runs one mesh; returns a result dict (reached=False if the target was not reached).

    Default mode: no agent has --target-accuracy; the run ends as soon as every non-straggler's
    metrics show an eval >= target (or the step cap / timeout). With --stop-at-target the
    non-stragglers stop at the target (the agent's --target-accuracy) and the run ends when all
    of them stopped. Consensus mode: every agent runs exactly `steps`, then graceful stop and
    checkpoint comparison."""
    straggler_index = n - 1 if straggler else None
    data_dirs = [os.path.join(workdir, f"data{i + 1}") for i in range(n)] if consensus else None
    agent_target = target if (a.stop_at_target and not consensus) else None
    per = agent_args(a, n, policy, lr, steps, agent_target, straggler_index, data_dirs)
    res = {"policy": policy, "nodes": n, "straggler": straggler, "lr": lr, "target": target,
           "workdir": workdir, "reached": False, "timed_out": False,
           "mode": "consensus" if consensus else ("stop-at-target" if agent_target else
                                                  "train-on")}
    with bl.Run(binary, workdir, per, [], name_prefix="n") as run:
        run.start()
        fast = [ag for i, ag in enumerate(run.agents) if i != straggler_index]
        started = time.monotonic()
        timeline = {ag.name: [] for ag in run.agents}  # (wall, status) every poll
        sts = {}
        while True:
            run.check_alive()
            sts = run.statuses()
            now_wall = time.time()
            for name, st in sts.items():
                timeline[name].append((now_wall, st))
            ok = all(s is not None for s in sts.values())
            if consensus:
                done = ok and all(not s["training"] for s in sts.values())
            elif agent_target is not None:
                # Every non-straggler stopped: at the target, or at the step cap.
                done = ok and all(not sts[ag.name]["training"] for ag in fast)
            else:
                done = ok and (all(run.reach_wall(ag, target) for ag in fast) or
                               all(not sts[ag.name]["training"] for ag in fast))
            if done:
                break
            if time.monotonic() - started > timeout:
                res["timed_out"] = True
                break
            time.sleep(0.5)
        t0 = run.t0()
        reach = {ag.name: run.reach_wall(ag, target) for ag in fast}
        res["reached"] = all(r is not None for r in reach.values())
        if res["reached"]:
            res["seconds"] = max(w for w, _ in reach.values()) - t0
            res["steps"] = bl.mean([s for _, s in reach.values()])
        else:
            res["seconds"] = None
            res["steps"] = bl.mean([sts[ag.name]["step"] for ag in fast if sts.get(ag.name)])
        res["best_accuracy"] = {ag.name: max([e[2] for e in run.evals_wall(ag)], default=None)
                                for ag in run.agents}
        res["final_step"] = {k: (s or {}).get("step") for k, s in sts.items()}
        # Traffic and barrier wait of each non-straggler as sampled when it reached the target
        # (the poll at or just before that moment, i.e. up to 0.5 s early).
        sent, shares, fans = [], [], []
        for ag in fast:
            at = reach[ag.name][0] if reach[ag.name] else time.time()
            st = status_at(timeline[ag.name], at)
            if st is None:
                continue
            sent.append(st["bytes_sent"])
            fans.append(st["mean_fanout"])
            if at - t0 > 0:
                shares.append(st["barrier_wait_s"] / (at - t0))
        res["bytes_sent"] = bl.mean(sent)
        res["wait_share"] = bl.mean(shares)
        res["mean_fanout"] = bl.mean(fans)
        if straggler:
            s = sts.get(run.agents[straggler_index].name)
            res["straggler_step"] = s["step"] if s else None
        if consensus:
            res["reach_per_node"] = {k: (None if v is None else
                                         {"seconds": v[0] - t0, "step": v[1]})
                                     for k, v in reach.items()}
            run.stop(graceful=True, timeout=10)
            params = {}
            for ag, d in zip(run.agents, data_dirs):
                path = os.path.join(d, "ckpt.bin")
                try:
                    ck = bl.read_checkpoint(path)
                except (OSError, ValueError) as e:
                    raise bl.SetupError(f"cannot read the checkpoint of {ag.name}: {e}")
                params[ag.name] = ck
            res["ckpt_steps"] = {k: v["step"] for k, v in params.items()}
            dists = {}
            for x, y in itertools.combinations(sorted(params), 2):
                dists[f"{x}-{y}"] = bl.relative_distance(params[x]["params"],
                                                         params[y]["params"])
            res["pair_distances"] = dists
            res["max_rel_distance"] = max(dists.values()) if dists else None
        else:
            run.stop(graceful=False)
    return res


def run_baseline(a, binary, workdir, lr, target, max_steps, timeout):
    per = [["--profile", "local", *bl.workload_agent_args(a, lr), "--steps", str(max_steps),
            "--target-accuracy", str(target), "--select", a.select]]
    res = {"policy": "single", "nodes": 1, "straggler": False, "lr": lr, "target": target,
           "workdir": workdir, "reached": False, "timed_out": False}
    with bl.Run(binary, workdir, per, [], name_prefix="solo") as run:
        run.start()
        ag = run.agents[0]
        started = time.monotonic()
        st = None
        while True:
            run.check_alive()
            st = ag.status()
            if st is not None and not st["training"]:
                break
            if time.monotonic() - started > timeout:
                res["timed_out"] = True
                break
            time.sleep(0.5)
        t0 = run.t0()
        r = run.reach_wall(ag, target)
        res["reached"] = r is not None
        res["seconds"] = r[0] - t0 if r else None
        res["steps"] = r[1] if r else (st or {}).get("step")
        res["bytes_sent"] = (st or {}).get("bytes_sent")
        res["wait_share"] = 0.0
        res["best_accuracy"] = {ag.name: max([e[2] for e in run.evals_wall(ag)], default=None)}
        run.stop(graceful=False)
    return res


def combine(reps):
    """One table row from repeated runs of a configuration: medians, and the range of the
    time to target."""
    if len(reps) == 1:
        return reps[0]
    out = dict(reps[0])
    out["runs"] = reps
    out["reached"] = all(r["reached"] for r in reps)
    out["timed_out"] = any(r["timed_out"] for r in reps)
    secs = [r["seconds"] for r in reps if r["seconds"] is not None]
    out["seconds"] = median(secs) if out["reached"] else None
    out["seconds_range"] = (min(secs), max(secs)) if secs else None
    for k in ("steps", "bytes_sent", "wait_share"):
        vals = [r[k] for r in reps if r.get(k) is not None]
        out[k] = median(vals) if vals else None
    best = {}
    for r in reps:
        for name, v in r["best_accuracy"].items():
            if v is not None:
                best[name] = v if name not in best else min(best[name], v)
    out["best_accuracy"] = best
    return out


def median(values):
    return bl.median(values)


def row(r, ref_seconds=None):
    secs = bl.fmt(r["seconds"], ".1f") if r["reached"] else (
        "timeout" if r["timed_out"] else "not reached")
    if r["reached"] and r.get("seconds_range"):
        secs += f" ({r['seconds_range'][0]:.1f}-{r['seconds_range'][1]:.1f})"
    ratio = "-"
    if ref_seconds and r["reached"]:
        ratio = f"{r['seconds'] / ref_seconds:.2f}x"
    best = [v for v in r["best_accuracy"].values() if v is not None]
    return [r["policy"], r["nodes"], "yes" if r["straggler"] else "no", secs, ratio,
            bl.fmt(r.get("steps"), ".0f"),
            bl.fmt(None if r.get("bytes_sent") is None else r["bytes_sent"] / 1e6, ".1f"),
            bl.fmt(r.get("wait_share"), ".2f"),
            bl.fmt(min(best) if best else None, ".3f")]


HEADERS = ["policy", "nodes", "straggler", "s to target, all non-stragglers (range)",
           "vs no-straggler", "steps", "MB sent/node", "barrier wait share",
           "min best acc (all nodes)"]


def report(a, results, consensus):
    print(f"Time to {a.target} test accuracy: {bl.workload_text(a)}, {a.nodes} agents on loopback "
          f"(sample {a.sample}, staleness {a.staleness}, select {a.select} fanout "
          f"{a.fanout}, eval every {a.eval_every}), straggler = one agent at "
          f"--slowdown {a.slowdown}")
    no_strag = {r["policy"]: r["seconds"] for r in results
                if not r["straggler"] and r["reached"]}
    rows = [row(r, no_strag.get(r["policy"]) if r["straggler"] else None) for r in results]
    print(bl.table(HEADERS, rows))
    if consensus is None:
        return
    print()
    print(f"Consensus: pssp, {a.nodes} agents, {a.budget} steps each, no straggler")
    reach = consensus["reach_per_node"]
    crow = []
    for name in sorted(consensus["best_accuracy"]):
        rr = reach.get(name)
        crow.append([name, consensus["ckpt_steps"].get(name),
                     bl.fmt(consensus["best_accuracy"][name], ".4f"),
                     bl.fmt(rr["seconds"], ".1f") if rr else "not reached",
                     rr["step"] if rr else "-"])
    print(bl.table(["node", "ckpt step", "best acc", f"s to {a.target}",
                    f"step at {a.target}"], crow))
    print(f"every node reached {a.target}: {'yes' if consensus['reached'] else 'NO'}"
          f"; all nodes at {a.target} after {bl.fmt(consensus['seconds'], '.1f')} s")
    print(f"largest relative parameter distance between two nodes after {a.budget} steps: "
          f"{consensus['max_rel_distance']:.3e}  (||x_i - x_j|| / mean(||x_i||, ||x_j||))")


def main():
    a = parse_args()
    prepared = bl.prepare(a.bin, a.task, "meshtrain-bench-tta-")
    if prepared is None:
        return 2
    binary, logdir = prepared
    results = []
    consensus = None
    failure = None
    try:
        if not a.no_baseline:
            wd = os.path.join(logdir, "baseline")
            print(f"running {wd} ...", flush=True)
            results.append(bl.with_retries(
                lambda w: run_baseline(a, binary, w, a.lr, a.target, a.max_steps,
                                       a.timeout), wd, a.retries))
        variants = {"both": [False, True], "no": [False], "yes": [True]}[a.stragglers]
        for policy in a.policies:
            for straggler in variants:
                wd = os.path.join(logdir, f"{policy}-{'straggler' if straggler else 'even'}")
                print(f"running {wd} ...", flush=True)
                reps = []
                for k in range(a.repeat):
                    wdk = wd if a.repeat == 1 else f"{wd}-{k + 1}"
                    r = bl.with_retries(
                        lambda w: run_mesh(a, binary, w, a.nodes, policy, a.lr, a.target,
                                           a.max_steps, a.timeout, straggler=straggler),
                        wdk, a.retries)
                    reps.append(r)
                    print(f"  reached={r['reached']} seconds={bl.fmt(r['seconds'], '.1f')}",
                          flush=True)
                results.append(combine(reps))
        if not a.no_consensus:
            wd = os.path.join(logdir, "consensus-pssp")
            print(f"running {wd} ...", flush=True)
            consensus = bl.with_retries(
                lambda w: run_mesh(a, binary, w, a.nodes, "pssp", a.lr, a.target, a.budget,
                                   a.timeout, consensus=True), wd, a.retries)
    except bl.SetupError as e:
        failure = e
    if results or consensus is not None:
        print()
        if failure is not None:
            print("(partial: the runs below completed before the failure)")
        report(a, results, consensus)
    if a.json:
        import json
        with open(a.json, "w") as f:
            json.dump(results + ([consensus] if consensus else []), f, indent=1, default=str)
    if failure is not None:
        print(f"setup failed: {failure}", file=sys.stderr)
        print(f"logs: {logdir}", file=sys.stderr)
        return 2
    print(f"\nlogs: {logdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
