#!/usr/bin/env python3
"""The barrier policies of bench/policies.py in the simulator, beside the same policies on real
agents.

The simulator's 200-node preset has the heterogeneity of bench/policies.py: nodes with
--slowdowns 1,1,1,2,3,4 training fmnist-mlp (the real model on the real data; node i on shard
i mod 6, as agent i of the bench), grouped six to a host of two cores (the bench runs its six
agents on this two-core machine), evaluated as the bench's agents are (every 25 steps, the
moving average of the parameters, 0.98) and timed the same way: until every node had an
evaluation at accuracy 0.85. Each step costs the host CPU as the agents' threads do: the trainer's
compute (slowed by the node's factor, the rest a sleep, as --slowdown), the loop's work on the
step (transfers; the node learns of the step once it is done) and, every 25 steps, an
evaluation. Those three costs are the CPU ms per step that bench/policies.py measures on the real
agents; with --real they are taken from that run (its medians over policies), else the defaults.
The simulator's clock runs 10x slower than the agents' (1 virtual ms = 0.1 real ms: its events
are whole milliseconds), so its seconds are compared by rank, not by value.

Per policy (bsp, ssp, dssp, pbsp, pssp, wbsp, asp and pssp + --batch auto) and seed: virtual
seconds until every node met the target, compute share, barrier wait share; medians over seeds.
With --real FILE (bench/policies.py --json FILE) the two tables are printed side by side, with
the pairs of policies whose real runs do not overlap (separable pairs) and how many of them the
simulator orders the same way, and the rank correlation of the medians.
"""

import argparse
import concurrent.futures
import itertools
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib as bl  # noqa: E402

POLICIES = ["bsp", "ssp", "dssp", "pbsp", "pssp", "wbsp", "asp", "pssp+batch-auto"]
TIME_SCALE = 10  # virtual ms per real ms
EVAL_STEPS = 25


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--seeds", default="1,2,3", help="comma list: one simulation per seed")
    p.add_argument("--slowdowns", default="1,1,1,2,3,4")
    p.add_argument("--target", type=float, default=0.85, help="accuracy every node must reach")
    p.add_argument("--duration", type=float, default=300, help="virtual seconds, at most")
    p.add_argument("--real", help="bench/policies.py --json output to compare with (and to take "
                   "the CPU costs per step from)")
    p.add_argument("--train-ms", type=float, default=2.0,
                   help="real trainer CPU ms per step (without --real)")
    p.add_argument("--loop-ms", type=float, default=2.5,
                   help="real loop CPU ms per step (without --real)")
    p.add_argument("--eval-ms", type=float, default=2.5,
                   help="real evaluator CPU ms per step (without --real)")
    p.add_argument("--per-policy-costs", action="store_true",
                   help="with --real: give each policy the CPU costs measured for it (the "
                   "simulator does not model the CPU each message costs: bsp's loop does more "
                   "per step than asp's), instead of the medians over policies")
    p.add_argument("--jobs", type=int, default=1, help="simulations run at once (one core each)")
    p.add_argument("--extra", default="", help="extra simulate options, space-separated")
    return p.parse_args()


COST_KEYS = ("train_ms", "eval_ms", "other_ms")


def costs_from_real(real, policy=None):
    """CPU ms per step (train, eval, loop): the medians over the runs of `policy`, or over
    policies of the per-policy medians."""
    if policy is not None:
        return [bl.median([r.get(key) for r in real["runs"].get(policy, [])]) for key in COST_KEYS]
    return [bl.median([bl.median([r.get(key) for r in runs]) for runs in real["runs"].values()])
            for key in COST_KEYS]


def sim_command(a, binary, seed, barrier, batch_auto, costs):
    train_ms, eval_ms, loop_ms = costs
    n_slow = len(a.slowdowns.split(","))
    cmd = [binary, "simulate", "--nodes", str(a.nodes), "--duration", str(a.duration),
           "--barrier", barrier, "--slowdowns", a.slowdowns, "--node-cv", "0",
           "--task", "fmnist-mlp", "--shards", str(n_slow), "--batch", "64", "--lr", "0.05",
           # --eval-every: only the first and last sample evaluate every node (the time to
           # target comes from --eval-steps; the samples would double the run's wall time)
           "--eval-steps", str(EVAL_STEPS), "--eval-every", str(a.duration),
           "--eval-average", "0.98",
           "--target-error", f"{1 - a.target:.4f}", "--stop-at-target",
           "--nodes-per-host", str(n_slow), "--host-cores", "2",
           "--step-time", f"{TIME_SCALE * train_ms:.1f}",
           "--step-overhead", f"{TIME_SCALE * loop_ms:.1f}",
           "--eval-cost", f"{TIME_SCALE * eval_ms * EVAL_STEPS:.1f}",
           "--latency", "2", "--jitter", "1", "--bandwidth", "200",
           "--seed", str(seed), "--format", "json", "--no-wall"]
    if batch_auto:
        cmd.append("--batch-auto")
    return cmd + a.extra.split()


def run_sim(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise bl.SetupError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout)["policies"]


def separable_pairs(real_runs, sim_median):
    """[(faster, slower, sim agrees)] for the pairs whose real runs do not overlap."""
    out = []
    for p, q in itertools.combinations(sorted(real_runs), 2):
        rp, rq = real_runs[p], real_runs[q]
        if not rp or not rq or None in rp or None in rq:
            continue
        if max(rp) < min(rq):
            fast, slow = p, q
        elif max(rq) < min(rp):
            fast, slow = q, p
        else:
            continue
        sf, ss = sim_median.get(fast), sim_median.get(slow)
        out.append((fast, slow, sf is not None and ss is not None and sf < ss))
    return out


def ranks(values):
    """Ranks (1 = smallest; ties get their mean rank) of a {key: value} dict."""
    order = sorted(values, key=lambda k: values[k])
    out, i = {}, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            out[k] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x, y):
    keys = [k for k in x if k in y and x[k] is not None and y[k] is not None]
    if len(keys) < 3:
        return None
    rx, ry = ranks({k: x[k] for k in keys}), ranks({k: y[k] for k in keys})
    mx, my = bl.mean(list(rx.values())), bl.mean(list(ry.values()))
    cov = sum((rx[k] - mx) * (ry[k] - my) for k in keys)
    vx = sum((rx[k] - mx) ** 2 for k in keys)
    vy = sum((ry[k] - my) ** 2 for k in keys)
    return cov / (vx * vy) ** 0.5 if vx > 0 and vy > 0 else None


def main():
    a = parse_args()
    try:
        binary = bl.find_binary(a.bin)
        bl.check_dataset("fmnist-mlp")
    except bl.SetupError as e:
        print(e, file=sys.stderr)
        return 2
    real = None
    costs = [a.train_ms, a.eval_ms, a.loop_ms]
    if a.real:
        with open(a.real) as f:
            real = json.load(f)
        measured = costs_from_real(real)
        if None not in measured:
            costs = measured
    seeds = [int(s) for s in a.seeds.split(",") if s]
    sims = {p: [] for p in POLICIES}
    if real and a.per_policy_costs:
        print(f"CPU ms per real step, per policy, from {a.real}:")
        for p in POLICIES:
            c = costs_from_real(real, p)
            print(f"  {p}: train {bl.fmt(c[0], '.2f')}, eval {bl.fmt(c[1], '.2f')}, "
                  f"loop {bl.fmt(c[2], '.2f')}")
    else:
        print(f"CPU ms per real step: train {costs[0]:.2f}, eval {costs[1]:.2f}, "
              f"loop {costs[2]:.2f}{' (from ' + a.real + ')' if a.real else ''}", flush=True)
    # One simulation per seed and barrier (each prints as it finishes; --jobs run at once).
    work = [(seed, p == "pssp+batch-auto", "pssp" if p == "pssp+batch-auto" else p)
            for seed in seeds for p in POLICIES]
    started = time.monotonic()

    def one(item):
        seed, batch_auto, barrier = item
        own = costs
        if real and a.per_policy_costs:
            measured = costs_from_real(real, "pssp+batch-auto" if batch_auto else barrier)
            own = costs if None in measured else measured
        cmd = sim_command(a, binary, seed, barrier, batch_auto, own)
        t0 = time.monotonic()
        return item, run_sim(cmd)[0], time.monotonic() - t0, cmd

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            for (seed, batch_auto, _), r, secs, cmd in pool.map(one, work):
                name = "pssp+batch-auto" if batch_auto else r["barrier"]
                sims[name].append(r)
                print(f"  seed {seed} {name}: t_all={bl.fmt(r['time_to_target_all_s'], '.1f')} "
                      f"compute={r['compute_share']:.2f} wait={r['wait_share']:.2f} "
                      f"steps median {r['steps_median']} ({secs:.0f} s wall, "
                      f"{time.monotonic() - started:.0f} s in all)", flush=True)
        print(f"  last command: {' '.join(cmd)}")
    except bl.SetupError as e:
        print(f"simulation failed: {e}", file=sys.stderr)
        return 2

    sim_med = {p: bl.median([r["time_to_target_all_s"] for r in sims[p]]) for p in POLICIES}
    real_runs = {}
    if real:
        real_runs = {p: [r.get("seconds") for r in runs] for p, runs in real["runs"].items()}
    real_med = {p: bl.median(v) if None not in v else None for p, v in real_runs.items()}
    sim_rank = ranks({p: v for p, v in sim_med.items() if v is not None})
    real_rank = ranks({p: v for p, v in real_med.items() if v is not None})
    rows = []
    for p in sorted(POLICIES, key=lambda k: (sim_med[k] is None, sim_med[k] or 0)):
        rows.append([p, " ".join(bl.fmt(r["time_to_target_all_s"], ".1f") for r in sims[p]),
                     bl.fmt(sim_med[p], ".1f"), bl.fmt(sim_rank.get(p), "g"),
                     bl.fmt(bl.median([r["compute_share"] for r in sims[p]]), ".2f"),
                     " ".join(bl.fmt(v, ".1f") for v in real_runs.get(p, [])),
                     bl.fmt(real_med.get(p), ".1f"), bl.fmt(real_rank.get(p), "g")])
    print(f"\nsimulator: {a.nodes} nodes, slowdowns {a.slowdowns}, six to a 2-core host, "
          f"fmnist-mlp, every node to {a.target} (virtual s; 10x the agents' clock); "
          f"seeds {a.seeds}; CPU costs {'per policy' if a.per_policy_costs else 'one for all'}")
    print(bl.table(["policy", "sim s (seeds)", "sim median", "sim rank", "sim compute share",
                    "real s (runs)", "real median", "real rank"], rows))
    if real:
        pairs = separable_pairs(real_runs, sim_med)
        agree = sum(1 for _, _, ok in pairs if ok)
        print(f"\nseparable real pairs (runs do not overlap): {len(pairs)}; the simulator orders "
              f"{agree} of them the same way")
        for fast, slow, ok in pairs:
            print(f"  {fast} < {slow}: {'same' if ok else 'DIFFERENT'}")
        rho = spearman(sim_med, real_med)
        print(f"rank correlation of the medians (Spearman): {bl.fmt(rho, '.2f')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
