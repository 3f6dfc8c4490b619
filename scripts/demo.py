#!/usr/bin/env python3
"""The main job: a local mesh of meshtrain agents on loopback, shown live.

Starts N agents on 127.0.0.1 (distinct ports), joins them through the first, prints a live
view of every agent (membership and, with a training task, step / loss / accuracy) until the
run ends, then has every agent leave gracefully and prints each node's final state.
Every process started here is ended by its PID.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from harness import free_port_block  # noqa: E402


def cli(binary, rpc, *args):
    r = subprocess.run([binary, *args, "--rpc", rpc], capture_output=True, text=True,
                       timeout=20, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "cli", "meshtrain"))
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--task", default="fmnist-mlp")
    p.add_argument("--barrier", default="pssp")
    p.add_argument("--select", default="random")
    p.add_argument("--steps", type=int, default=0, help="training steps per node (0: task default)")
    p.add_argument("--target-accuracy", type=float, default=0.0)
    p.add_argument("--duration", type=float, default=0,
                   help="seconds to run (default: until every node stops training, or 20 s "
                        "with --task none)")
    p.add_argument("--timeout", type=float, default=900, help="hard limit on the run, seconds")
    p.add_argument("--extra", default="", help="extra agent options, space-separated")
    p.add_argument("--http", default="127.0.0.1:7952",
                   help="dashboard and /metrics address of the first agent ('' = off)")
    args = p.parse_args()

    if args.task != "none" and args.steps == 0 and args.target_accuracy == 0:
        args.target_accuracy = 0.85
    if args.task == "none" and args.duration == 0:
        args.duration = 20

    workdir = tempfile.mkdtemp(prefix="meshtrain-demo-")
    base = free_port_block(args.nodes)
    agents = []
    print(f"meshtrain demo: {args.nodes} agents on 127.0.0.1:{base}.., task {args.task}, "
          f"barrier {args.barrier}, select {args.select}; logs in {workdir}")
    try:
        for i in range(args.nodes):
            name = f"node{i + 1}"
            port, rpc = base + 2 * i, base + 2 * i + 1
            cmd = [args.bin, "agent", "--name", name, "--bind", f"127.0.0.1:{port}",
                   "--rpc", f"127.0.0.1:{rpc}", "--profile", "local", "--task", args.task,
                   "--barrier", args.barrier, "--select", args.select,
                   "--metrics-file", os.path.join(workdir, f"{name}.metrics.jsonl")]
            if args.task != "none":
                cmd += ["--shard", f"{i}/{args.nodes}"]
            if args.steps:
                cmd += ["--steps", str(args.steps)]
            if args.target_accuracy:
                cmd += ["--target-accuracy", str(args.target_accuracy)]
            if i > 0:
                cmd += ["--join", f"127.0.0.1:{base}", "--retry-join", "--retry-interval", "2s"]
            elif args.http:
                cmd += ["--http", args.http]
            cmd += args.extra.split()
            log = open(os.path.join(workdir, f"{name}.log"), "wb")
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            agents.append({"name": name, "rpc": f"127.0.0.1:{rpc}", "proc": proc})
            time.sleep(0.2)
        if args.http:
            print(f"live dashboard: http://{args.http}/  (Prometheus metrics: "
                  f"http://{args.http}/metrics)", flush=True)

        start = time.monotonic()
        final = {}
        while time.monotonic() - start < args.timeout:
            time.sleep(1.0)
            elapsed = time.monotonic() - start
            rows = []
            training = 0
            for a in agents:
                if a["proc"].poll() is not None:
                    rows.append(f"  {a['name']:<8} exited with {a['proc'].returncode}")
                    continue
                st = cli(args.bin, a["rpc"], "status", "--format", "json")
                mem = cli(args.bin, a["rpc"], "members", "--format", "json")
                if st is None or mem is None:
                    rows.append(f"  {a['name']:<8} (not answering yet)")
                    continue
                final[a["name"]] = st
                training += 1 if st.get("training") else 0
                view = " ".join(f"{m['name']}:{m['status'][0]}" for m in mem["members"])
                acc = st.get("accuracy")
                loss = st.get("loss")
                rows.append(f"  {a['name']:<8} step {st.get('step', 0):>6}  "
                            f"loss {loss if loss is None else round(loss, 3)!s:>6}  "
                            f"acc {acc if acc is None else round(acc, 4)!s:>6}  "
                            f"peers {st.get('peers_alive')}  "
                            f"wait {st.get('barrier_wait_s', 0):.1f}s  view [{view}]")
            print(f"t={elapsed:5.1f}s")
            print("\n".join(rows), flush=True)
            if args.duration and elapsed >= args.duration:
                break
            if not args.duration and args.task != "none" and final and training == 0:
                break
    finally:
        for a in agents:
            if a["proc"].poll() is None:
                os.kill(a["proc"].pid, signal.SIGTERM)
        for a in agents:
            try:
                a["proc"].wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(a["proc"].pid, signal.SIGKILL)
                a["proc"].wait(timeout=10)

    print("\nfinal state:")
    for name, st in sorted(final.items()):
        print(f"  {name}: step {st.get('step')}, accuracy {st.get('accuracy')}, "
              f"loss {st.get('loss')}, bytes sent {st.get('bytes_sent')}, "
              f"rejected packets {st.get('rejected_packets')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
