#!/usr/bin/env python3
"""Bring-your-own-model figures on a mesh: a layer-spec CNN across agents, and non-IID (label-skew)
shards.

`cnn`:  N agents (default 4), `--model fmnist-cnn`, pssp, each on its 1/N iid shard of
        Fashion-MNIST; the run ends when every node's test accuracy is >= --cnn-target
        (default 0.90) or at the time cap. Prints, per node, the seconds from the common start of
        training to its first eval at the target and the step of that eval.
`skew`: N agents `--model fmnist-mlp`, pssp, with `--shard-mode label-skew:ALPHA` (default
        0.1) and with iid shards, each run until every node is >= --skew-target (default 0.80);
        prints steps and seconds to the target for both and their ratio. Then every shard of the
        skewed split trained alone (`meshtrain train`, same steps as the mesh needed, or
        --alone-steps) and evaluated on the full test set: a node on its skewed shard by itself
        stays far below.

Agents are real `meshtrain agent` processes on loopback (bench/benchlib.py); time to accuracy
is measured from the earliest "starting to train" log line to the wall time of each node's
first eval at or above the target. Exit status 0 when the runs completed (whatever the
figures), 2 on setup failure.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--experiments", default="cnn,skew", help="comma-separated: cnn, skew")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--cnn-target", type=float, default=0.90)
    p.add_argument("--cnn-lr", type=float, default=0.01)
    p.add_argument("--cnn-eval-every", type=int, default=200)
    p.add_argument("--cnn-cap", type=float, default=1800, help="seconds before the CNN run stops")
    p.add_argument("--alpha", type=float, default=0.1, help="label-skew Dirichlet alpha")
    p.add_argument("--skew-target", type=float, default=0.80)
    p.add_argument("--skew-cap", type=float, default=600, help="seconds per skew run")
    p.add_argument("--alone-steps", type=int, default=0,
                   help="steps of the single-node runs (0: the skewed mesh's steps to target)")
    p.add_argument("--threads", type=int, default=1, help="agents' --threads")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def run_to_target(binary, workdir, n, common, target, cap, label):
    """Starts n agents (shard i/n, --min-peers n-1), waits until every node has an eval at or
    above `target` (or `cap` seconds), returns per-node [(name, seconds, step) or None] and
    the seconds waited."""
    per_agent = [["--shard", f"{i}/{n}", "--min-peers", str(n - 1)] for i in range(n)]
    with bl.Run(binary, workdir, per_agent, common, name_prefix=label) as run:
        run.start()
        t_start = time.time()
        last_print = t_start
        while time.time() - t_start < cap:
            run.check_alive()
            reached = [run.reach_wall(a, target) for a in run.agents]
            if all(reached):
                break
            if time.time() - last_print > 30:
                last_print = time.time()
                accs = []
                for a in run.agents:
                    ev = run.evals_wall(a)
                    accs.append(f"{ev[-1][1]}:{ev[-1][2]:.3f}" if ev else "-")
                print(f"  [{label}] {time.time() - t_start:.0f} s, step:accuracy {accs}",
                      flush=True)
            time.sleep(1)
        t0 = run.t0()
        out = []
        for a in run.agents:
            r = run.reach_wall(a, target)
            out.append((a.name, r[0] - t0, r[1]) if r else (a.name, None, None))
        finals = {a.name: (run.evals_wall(a) or [(0, 0, None, None)])[-1] for a in run.agents}
        return out, finals, time.time() - t_start


def report(title, out, finals, target):
    rows = []
    for name, secs, step in out:
        f = finals[name]
        rows.append([name, bl.fmt(secs, ".1f"), bl.fmt(step), bl.fmt(f[1]), bl.fmt(f[2], ".4f")])
    print(f"\n{title}")
    print(bl.table(["node", f"s to {target}", f"step at {target}", "last eval step",
                    "last accuracy"], rows))
    secs = [o[1] for o in out]
    steps = [o[2] for o in out]
    if all(s is not None for s in secs):
        print(f"every node at {target}: {max(secs):.1f} s, steps {min(steps)}..{max(steps)}")
        return max(secs), max(steps)
    print(f"NOT every node reached {target}")
    return None, None


def cnn(args, binary, logdir):
    common = ["--profile", "local", "--model", "fmnist-cnn", "--barrier", "pssp", "--lr",
              str(args.cnn_lr), "--eval-every", str(args.cnn_eval_every), "--threads",
              str(args.threads), "--seed", str(args.seed)]
    out, finals, _ = run_to_target(binary, os.path.join(logdir, "cnn"), args.nodes, common,
                                   args.cnn_target, args.cnn_cap, "cnn")
    report(f"{args.nodes} agents, fmnist-cnn, pssp, lr {args.cnn_lr}", out, finals,
           args.cnn_target)


def train_alone(binary, shard, mode, steps, seed):
    cmd = [binary, "train", "--model", "fmnist-mlp", "--shard", shard, "--shard-mode", mode,
           "--steps", str(steps), "--eval-every", str(steps), "--seed", str(seed),
           "--format", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise bl.SetupError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def skew(args, binary, logdir):
    results = {}
    for mode in (f"label-skew:{args.alpha}", "iid"):
        common = ["--profile", "local", "--model", "fmnist-mlp", "--barrier", "pssp",
                  "--shard-mode", mode, "--eval-every", "50", "--threads", str(args.threads),
                  "--seed", str(args.seed)]
        tag = "skew" if mode != "iid" else "iid"
        out, finals, _ = run_to_target(binary, os.path.join(logdir, tag), args.nodes, common,
                                       args.skew_target, args.skew_cap, tag)
        results[mode] = report(f"{args.nodes} agents, fmnist-mlp, pssp, shards {mode}", out,
                               finals, args.skew_target)
        if mode != "iid":
            for a in range(args.nodes):
                log = open(os.path.join(logdir, tag, f"{tag}{a + 1}.log"), errors="replace").read()
                for line in log.splitlines():
                    if "label histogram" in line:
                        print("  " + line.split("] ", 1)[-1])
    (s_secs, s_steps), (i_secs, i_steps) = results[f"label-skew:{args.alpha}"], results["iid"]
    if s_steps and i_steps:
        print(f"\nlabel-skew:{args.alpha} vs iid: steps {s_steps} vs {i_steps} "
              f"({s_steps / i_steps:.2f}x), seconds {s_secs:.1f} vs {i_secs:.1f} "
              f"({s_secs / i_secs:.2f}x)")
    steps = args.alone_steps or s_steps or 2000
    rows = []
    for i in range(args.nodes):
        r = train_alone(binary, f"{i}/{args.nodes}", f"label-skew:{args.alpha}", steps, args.seed)
        rows.append([f"{i}/{args.nodes}", steps, bl.fmt(r.get("accuracy"), ".4f")])
    print(f"\neach skewed shard trained alone ({steps} steps, full test set):")
    print(bl.table(["shard", "steps", "test accuracy"], rows))


def main():
    args = parse_args()
    prep = bl.prepare(args.bin, "fmnist-mlp", "meshtrain-user-model-")
    if prep is None:
        sys.exit(2)
    binary, logdir = prep
    try:
        for e in args.experiments.split(","):
            {"cnn": cnn, "skew": skew}[e](args, binary, logdir)
    except bl.SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
