#!/usr/bin/env python3
"""Barrier policies on a compute-heterogeneous mesh: 6 agents on loopback training
the workload (default fmnist-cnn to 0.90, benchlib.WORKLOADS), each on its 1/6 shard, with
--slowdown 1,1,1,2,3,4. Per policy (bsp, ssp, dssp, pbsp, pssp, wbsp, asp, and pssp with
--batch auto; every agent --min-peers 5, so all train
from step 0): seconds from the common start of training (the first "starting to train" line)
until every node has an eval >= the target, then the mean over nodes of compute share
(compute time / wall time, status compute_share: wbsp's local steps count as compute), idle
share (time the trainer sat blocked on the barrier / wall) and barrier wait share
(status barrier_wait_s / wall), and steps/s. Policies are interleaved across repeats; the
table shows medians and each figure's ratio to bsp.

Exit status 0 when the runs completed (whatever the figures), 2 on a setup failure.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib as bl  # noqa: E402

POLICIES = {
    "bsp": ["--barrier", "bsp"],
    "ssp": ["--barrier", "ssp"],
    "dssp": ["--barrier", "dssp"],
    "pbsp": ["--barrier", "pbsp"],
    "pssp": ["--barrier", "pssp"],
    "wbsp": ["--barrier", "wbsp"],
    "asp": ["--barrier", "asp"],
    "pssp+batch-auto": ["--barrier", "pssp", "--batch", "auto"],
    # OSP off: the next step's barrier queries wait for the step to end (for the A/B).
    "pssp-no-overlap": ["--barrier", "pssp", "--overlap", "off"],
}
DEFAULT_POLICIES = ["bsp", "ssp", "dssp", "pbsp", "pssp", "wbsp", "asp", "pssp+batch-auto"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                   help=f"comma list of: {', '.join(POLICIES)}")
    p.add_argument("--slowdowns", default="1,1,1,2,3,4")
    bl.add_workload_args(p, steps_flag=None)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--extra", default="", help="extra agent options, space-separated")
    p.add_argument("--json", help="also write every run's figures to this file (for "
                   "bench/sim_policies.py --real)")
    bl.add_isolate_args(p)
    return bl.workload_resolve(p.parse_args())


def run_one(a, binary, workdir, policy, slowdowns):
    n = len(slowdowns)
    # --min-peers n-1: nobody trains until the whole mesh is up, so every policy runs from step 0
    # with all its stragglers (without it the first agent trained alone while the others loaded
    # their data, and the rest adopted its model, policy or not); t0 = the first "starting to
    # train" line.
    per = [["--profile", "local", *bl.workload_agent_args(a), "--shard", f"{i}/{n}",
            "--min-peers", str(n - 1)] +
           ([] if a.isolate else ["--slowdown", str(s)]) + POLICIES[policy] +
           a.extra.split() for i, s in enumerate(slowdowns)]
    cores = [a.isolate / s for s in slowdowns] if a.isolate else None
    res = {"policy": policy, "reached": False}
    with bl.Run(binary, workdir, per, [], **bl.isolate_kwargs(a, cores)) as run:
        run.start()
        started = time.monotonic()
        sts = {}
        cpu0 = None  # per agent: thread CPU and status once every agent has trained a step
        while time.monotonic() - started < a.timeout:
            run.check_alive()
            sts = run.statuses()
            if all(s is not None for s in sts.values()):
                if cpu0 is None and all(s.get("step", 0) >= 1 for s in sts.values()):
                    cpu0 = cpu_sample(run, sts)
                if all(run.reach_wall(ag, a.target) for ag in run.agents):
                    break
            time.sleep(0.5)
        cpu1 = cpu_sample(run, sts) if cpu0 is not None else None
        t0 = run.t0()
        reach = {ag.name: run.reach_wall(ag, a.target) for ag in run.agents}
        res["reached"] = all(r is not None for r in reach.values())
        res["seconds"] = max(w for w, _ in reach.values()) - t0 if res["reached"] else None
        ok = [s for s in sts.values() if s]
        res["compute_share"] = bl.mean([s["compute_share"] for s in ok])
        res["idle_share"] = bl.mean([s["idle_s"] / max(1e-9, s["uptime_s"]) for s in ok])
        res["wait_share"] = bl.mean([s["barrier_wait_s"] / max(1e-9, s["uptime_s"]) for s in ok])
        res["steps_per_s"] = bl.mean([s["steps_per_s"] for s in ok])
        res["batches"] = [s.get("batch") for s in ok]
        res["local_steps"] = sum(s.get("local_steps", 0) for s in ok)
        res.update(cpu_per_step(cpu0, cpu1))
    return res


def cpu_sample(run, sts):
    return {ag.name: (bl.thread_cpu(ag.proc.pid), sts[ag.name]) for ag in run.agents}


def cpu_per_step(cpu0, cpu1):
    """Trainer CPU ms per step it computed (global and wbsp local), the evaluator's and the
    agent's other threads' (its event loop: transfers, barrier) CPU ms per global step, over the
    agents, between the two samples (what the simulator's --step-time and --step-overhead stand
    for)."""
    train = evals = other = steps = computed = 0.0
    for name, (c1, s1) in (cpu1 or {}).items():
        c0, s0 = cpu0[name]
        d = {k: c1.get(k, 0.0) - c0.get(k, 0.0) for k in c1}
        train += d.get("mt-train", 0.0)
        evals += d.get("mt-eval", 0.0)
        other += sum(v for k, v in d.items() if k not in ("mt-train", "mt-eval"))
        global_steps = s1.get("step", 0) - s0.get("step", 0)
        steps += global_steps
        computed += global_steps + s1.get("local_steps", 0) - s0.get("local_steps", 0)
    if steps <= 0:
        return {"train_ms": None, "eval_ms": None, "other_ms": None}
    return {"train_ms": 1000 * train / computed, "eval_ms": 1000 * evals / steps,
            "other_ms": 1000 * other / steps}


def main():
    a = parse_args()
    prepared = bl.prepare(a.bin, a.task, "meshtrain-bench-policies-")
    if prepared is None:
        return 2
    binary, logdir = prepared
    slowdowns = [float(x) for x in a.slowdowns.split(",")]
    policies = [p for p in a.policies.split(",") if p]
    for p in policies:
        if p not in POLICIES:
            print(f"unknown policy {p!r}; known: {', '.join(POLICIES)}", file=sys.stderr)
            return 2
    runs = {p: [] for p in policies}
    try:
        for k in range(a.repeat):
            for p in policies:
                wd = os.path.join(logdir, f"{p}-{k + 1}")
                r = bl.with_retries(lambda w: run_one(a, binary, w, p, slowdowns), wd, 1)
                runs[p].append(r)
                print(f"  {p} #{k + 1}: reached={r['reached']} s={bl.fmt(r['seconds'], '.1f')} "
                      f"compute={bl.fmt(r['compute_share'], '.2f')} "
                      f"idle={bl.fmt(r['idle_share'], '.2f')} "
                      f"wait={bl.fmt(r['wait_share'], '.2f')} batches={r['batches']} "
                      f"local={r['local_steps']} cpu_ms/step: train={bl.fmt(r['train_ms'], '.2f')} "
                      f"eval={bl.fmt(r['eval_ms'], '.2f')} "
                      f"loop={bl.fmt(r['other_ms'], '.2f')}", flush=True)
    except bl.SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        return 2
    med = {}
    for p in policies:
        secs = [r["seconds"] for r in runs[p] if r["seconds"] is not None]
        med[p] = {
            "seconds": bl.median(secs) if len(secs) == len(runs[p]) else None,
            "runs": " ".join(bl.fmt(r["seconds"], ".1f") for r in runs[p]),
            "compute": bl.median([r["compute_share"] for r in runs[p]]),
            "idle": bl.median([r["idle_share"] for r in runs[p]]),
            "wait": bl.median([r["wait_share"] for r in runs[p]]),
            "sps": bl.median([r["steps_per_s"] for r in runs[p]]),
            "cpu": [bl.median([r.get(k) for r in runs[p]])
                    for k in ("train_ms", "eval_ms", "other_ms")],
        }
    base = med.get("bsp", {}).get("seconds")
    rows = []
    for p in policies:
        m = med[p]
        ratio = m["seconds"] / base if base and m["seconds"] else None
        rows.append([p, m["runs"], bl.fmt(m["seconds"], ".1f"), bl.fmt(ratio, ".2f"),
                     bl.fmt(m["compute"], ".2f"), bl.fmt(m["idle"], ".2f"),
                     bl.fmt(m["wait"], ".2f"), bl.fmt(m["sps"], ".1f"),
                     " / ".join(bl.fmt(c, ".1f") for c in m["cpu"])])
    how = bl.isolate_text(a)
    print(f"\n{len(slowdowns)} agents {bl.workload_text(a)}, slowdowns {a.slowdowns} ({how}), "
          f"every node; medians of {a.repeat} (interleaved); logs in {logdir}")
    print(bl.table(["policy", "s to target (runs)", "median s", "x bsp", "compute share",
                    "idle share", "barrier wait share", "steps/s",
                    "CPU ms/step train / eval / loop"], rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"slowdowns": slowdowns, "target": a.target, "extra": a.extra,
                       "runs": runs}, f, indent=1)
        print(f"runs written to {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
