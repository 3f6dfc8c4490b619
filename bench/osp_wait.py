#!/usr/bin/env python3
"""Barrier wait in steady state on a homogeneous mesh (OSP): 4 agents on loopback train
fmnist-mlp under pssp (β 2, s 4, each on its 1/4 shard) with --overlap on and off, interleaved.
Each run warms up, then measures one window of --window seconds from two status samples:
barrier wait share = Δ barrier_wait_s / Δ wall, idle share = Δ idle_s / Δ wall (the trainer
blocked, asking for a permit), steps/s, and early permits per step. Means over the 4 nodes;
the table shows medians over --repeat runs and the on/off ratios.

--slowdown S (all nodes) makes every step S times its compute time by sleeping, so that the
4 agents do not oversubscribe the machine's cores: then what is left is the protocol's wait.
--isolate C instead gives each agent a CPU quota of C/S cores of its own (cgroup, root): four
hosts of equal speed, which agents sharing two cores at the scheduler's whim are not.

Exit status 0 when the runs completed (whatever the figures), 2 on a setup failure.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib as bl  # noqa: E402

SETTINGS = {"on": ["--overlap", "on"], "off": ["--overlap", "off"]}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--slowdowns", default="1,4",
                   help="comma-separated --slowdown values, each measured (same for all nodes)")
    p.add_argument("--warmup", type=float, default=4, help="seconds of training before the window")
    p.add_argument("--window", type=float, default=10, help="seconds measured")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--extra", default="", help="extra agent options, space-separated")
    bl.add_isolate_args(p)
    return p.parse_args()


def window(run, seconds):
    """Two status samples `seconds` apart; per node the deltas."""
    first = run.statuses()
    t0 = time.monotonic()
    time.sleep(seconds)
    second = run.statuses()
    dt = time.monotonic() - t0
    out = []
    for name, a in first.items():
        b = second.get(name)
        if not a or not b:
            continue
        steps = b["step"] - a["step"]
        out.append({
            "wait": (b["barrier_wait_s"] - a["barrier_wait_s"]) / dt,
            "idle": (b["idle_s"] - a["idle_s"]) / dt,
            "sps": steps / dt,
            "early": (b.get("early_permits", 0) - a.get("early_permits", 0)) / max(1, steps),
        })
    return out


def run_one(a, binary, workdir, setting, slowdown):
    n = a.nodes
    per = [["--profile", "local", "--task", "fmnist-mlp", "--shard", f"{i}/{n}",
            "--barrier", "pssp", "--sample", "2", "--staleness", "4", "--min-peers", str(n - 1),
            "--eval-every", "1000000"] +
           ([] if a.isolate else ["--slowdown", str(slowdown)]) + SETTINGS[setting] +
           a.extra.split() for i in range(n)]
    cores = [a.isolate / slowdown] * n if a.isolate else None
    with bl.Run(binary, workdir, per, [], **bl.isolate_kwargs(a, cores)) as run:
        run.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run.check_alive()
            sts = run.statuses()
            if all(s and s["step"] > 0 for s in sts.values()):
                break
            time.sleep(0.2)
        else:
            raise bl.SetupError("the mesh did not start training within 60 s")
        time.sleep(a.warmup)
        nodes = window(run, a.window)
        run.check_alive()
    if len(nodes) != n:
        raise bl.SetupError(f"status of {n - len(nodes)} node(s) missing")
    return {k: bl.mean([x[k] for x in nodes]) for k in ("wait", "idle", "sps", "early")}


def main():
    a = parse_args()
    prepared = bl.prepare(a.bin, "fmnist-mlp", "meshtrain-bench-osp-")
    if prepared is None:
        return 2
    binary, logdir = prepared
    slowdowns = [float(x) for x in a.slowdowns.split(",") if x]
    runs = {(s, k): [] for s in slowdowns for k in SETTINGS}
    try:
        for r in range(a.repeat):
            for s in slowdowns:
                for k in SETTINGS:
                    wd = os.path.join(logdir, f"slow{s:g}-{k}-{r + 1}")
                    res = bl.with_retries(lambda w: run_one(a, binary, w, k, s), wd, 1)
                    runs[(s, k)].append(res)
                    print(f"  slowdown {s:g} overlap {k} #{r + 1}: wait={res['wait']:.3f} "
                          f"idle={res['idle']:.3f} steps/s={res['sps']:.1f} "
                          f"early/step={res['early']:.2f}", flush=True)
    except bl.SetupError as e:
        print(f"setup failure: {e}", file=sys.stderr)
        return 2
    rows = []
    for s in slowdowns:
        med = {k: {m: bl.median([x[m] for x in runs[(s, k)]]) for m in ("wait", "idle", "sps",
                                                                          "early")}
               for k in SETTINGS}
        for k in SETTINGS:
            m = med[k]
            rows.append([f"{s:g}", k, bl.fmt(m["wait"], ".3f"), bl.fmt(m["idle"], ".3f"),
                         bl.fmt(m["sps"], ".1f"), bl.fmt(m["early"], ".2f"),
                         bl.fmt(m["sps"] / max(1e-9, med["off"]["sps"]), ".2f")])
    how = bl.isolate_text(a)
    print(f"\n{a.nodes} agents fmnist-mlp pssp β2 s4 ({how}), window {a.window:g} s after "
          f"{a.warmup:g} s of training; medians of {a.repeat} (interleaved); logs in {logdir}")
    print(bl.table(["slowdown", "overlap", "barrier wait share", "idle share", "steps/s",
                    "early permits/step", "steps/s vs off"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
