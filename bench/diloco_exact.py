#!/usr/bin/env python3
"""DiLoCo over the mesh against exact DiLoCo: the language model of examples/torch_charlm.py,
N agents on loopback (--trainer external, --barrier bsp, --select all), trainer i on shard i/N
with MeshOptimizer(sync_every=H, outer=OUTER), the last one --slowdown times slower per step,
every trainer ending with opt.finish(); beside it the same recipe in one process with exact
averages (examples/torch_charlm.py --diloco N: the same initial model, shards, batches and outer
step). The mesh's cost is read as mesh - exact.

    /usr/bin/python3 bench/diloco_exact.py --runs 1 --steps 600 --sync-every 50

Printed per run: the exact run's final bpc; per node its bpc before finish() and the consensus
model's bpc; the syncs (status `syncs`: how many mixed fewer peers than they waited for, in part,
or stopped waiting); the model copies sent by all agents from the first trainer's finish on (status polled every 0.5 s:
final models and the consensus), against the bound 2 x (N - 1); the spread of the trainers'
finish times (--spread-steps K: the last node trains K steps more). Acceptance (docs/benchmarks.md): consensus within 0.01 bpb of exact, 0 short syncs,
every node's pre-finish model within noise of the others, end copies <= 2 x (N - 1).

A bench (minutes on 2 cores), not a test. Needs torch and numpy (Debian's /usr/bin/python3) and
the fortunes package (the example's text).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from external_lib import external_mesh, start_all  # noqa: E402
from harness import wait_until  # noqa: E402

EXAMPLE = os.path.join(REPO, "examples", "torch_charlm.py")


def event(path, name):
    evs = [x for x in benchlib.read_events(path) if x.get("event") == name]
    return evs[-1] if evs else None


def recipe(a):
    r = ["--layers", a.layers, "--d-model", a.d_model, "--heads", a.heads, "--context",
         a.context, "--batch", a.batch, "--max-steps", a.steps, "--eval-every", a.sync_every, "--sync-every",
         a.sync_every, "--outer", a.outer, "--seed", a.seed, "--warmup", a.warmup,
         "--schedule", a.schedule, "--lr", a.lr, "--shard-mode", a.shard_mode, "--drift",
         a.drift]
    return [str(x) for x in r]


def exact(a, py, workdir):
    log = os.path.join(workdir, f"exact-{a.seed}.out")
    with open(log, "wb") as out:
        subprocess.run([py, EXAMPLE, "--diloco", str(a.nodes), *recipe(a)], stdout=out,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=a.timeout,
                       check=True)
    return event(log, "final")


def mesh(a, binary, py, workdir):
    m = external_mesh(binary, a.nodes, f"dx{a.seed}", 0)
    m.common[m.common.index("--barrier") + 1] = "bsp"
    m.common += ["--trainer-timeout", "600"]
    procs, logs = [], []
    with m:
        start_all(m)
        for i, ag in enumerate(m.agents):
            wait_until(lambda: os.path.exists(ag.socket), 10, what=f"{ag.socket} exists")
            logs.append(os.path.join(workdir, f"mesh-{a.seed}-{i}.out"))
            last = i == a.nodes - 1
            # The last node: slower, and with --spread-steps it trains on after the others.
            more = ["--max-steps", str(a.steps + a.spread_steps)] if last else []
            with open(logs[-1], "wb") as out:
                procs.append(subprocess.Popen(
                    [py, EXAMPLE, "--socket", ag.socket, "--shard", f"{i}/{a.nodes}", "--finish",
                     "--slowdown", str(a.slowdown if last else 1.0), *recipe(a), *more],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        try:
            deadline = time.monotonic() + a.timeout
            at_first_finish = None  # parameter bytes sent by all when a trainer first finished
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.5)
                if at_first_finish is None:
                    sts = [ag.status() for ag in m.agents]
                    if all(sts) and any(not s["training"] and s["step"] > 0 for s in sts):
                        at_first_finish = sum(s["params_bytes_raw"] for s in sts)
            for p in procs:
                p.wait(timeout=max(1, deadline - time.monotonic()))
            sts = [ag.status() for ag in m.agents]
            sts[0]["at_first_finish"] = at_first_finish
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return [(event(x, "final"), event(x, "consensus")) for x in logs], sts


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--runs", type=int, default=1, help="seeds 0..RUNS-1")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--sync-every", type=int, default=50)
    ap.add_argument("--outer", default="nesterov", choices=["avg", "sgd", "nesterov"])
    ap.add_argument("--drift", default="auto", choices=["auto", "none", "gradient"],
                    help="MeshOptimizer's drift_correction, in both runs (auto: its default)")
    ap.add_argument("--slowdown", type=float, default=2.0, help="the last node's slowdown")
    ap.add_argument("--spread-steps", type=int, default=0,
                    help="the last node trains this many steps more (its finish comes later; "
                    "the mesh then is no longer the exact run's recipe)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--schedule", default="cosine", choices=["constant", "cosine"])
    ap.add_argument("--shard-mode", default="contiguous", choices=["contiguous", "interleaved"])
    ap.add_argument("--timeout", type=float, default=3600)
    a = ap.parse_args()
    if a.nodes < 2 or a.steps % a.sync_every:
        ap.error("--nodes must be >= 2 and --sync-every divide --steps")
    binary = benchlib.find_binary(a.bin)
    workdir = tempfile.mkdtemp(prefix="meshtrain-diloco-")
    rows, ok = [], True
    for seed in range(a.runs):
        a.seed = seed
        t0 = time.monotonic()
        # With --spread-steps the recipes differ: no exact run to compare with.
        ref = exact(a, a.python, workdir) if not a.spread_steps else {"val_bpc": float("nan")}
        t1 = time.monotonic()
        outs, sts = mesh(a, binary, a.python, workdir)
        t2 = time.monotonic()
        before = [o[0]["val_bpc"] for o in outs]
        cons = [o[1]["val_bpc"] for o in outs]
        crcs = {o[1]["crc32"] for o in outs}
        syncs = [s["syncs"] for s in sts]
        short = sum(s["short"] for s in syncs)
        partial = sum(s["partial"] for s in syncs)
        timeouts = sum(s["timeouts"] for s in syncs)
        # A copy: the floats the trainer shares (the model, and the drift correction's buffer
        # when it travels too); chunk headers add 0.15 %.
        model_bytes = 4.0 * sts[0]["params"]
        first = sts[0]["at_first_finish"]
        end = (sum(s["params_bytes_raw"] for s in sts) - first) / model_bytes if first else -1
        finish = [o[0]["t"] for o in outs if o[0] and "t" in o[0]]
        spread = max(finish) - min(finish) if finish else 0
        gap = cons[0] - ref["val_bpc"]
        # With --spread-steps the last node trains on alone: no exact run, its model differs.
        same = a.spread_steps or (abs(gap) <= 0.01 and max(before) - min(before) <= 0.01)
        good = same and short == 0 and len(crcs) == 1 and round(end) <= 2 * (a.nodes - 1)
        ok = ok and good
        rows.append([seed, f"{t1 - t0:.0f}/{t2 - t1:.0f}", f"{ref['val_bpc']:.4f}",
                     " ".join(f"{x:.4f}" for x in before), f"{cons[0]:.4f}", f"{gap:+.4f}",
                     f"{short}/{partial}/{timeouts}", f"{end:.1f} (<= {2 * (a.nodes - 1)})",
                     f"{spread:.1f}", "yes" if good else "NO"])
        print(" | ".join(map(str, rows[-1])), flush=True)
    print(benchlib.table(["seed", "wall s exact/mesh", "exact bpc", "mesh before finish",
                          "consensus", "mesh - exact", "short/partial/timeouts", "end copies",
                          "finish spread s", "ok"], rows))
    print(f"logs in {workdir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
