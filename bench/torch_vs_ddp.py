#!/usr/bin/env python3
"""meshtrain vs PyTorch DDP on the same script (issue 16): time until every node of 4 reaches
0.88 test accuracy with examples/torch_fmnist.py.

meshtrain: 4 agents (--trainer external, --barrier pssp by default, --min-peers 3) on loopback,
each with one torch_fmnist.py process attached over its socket (shard i/4, MeshOptimizer with
--sync-every H). A node's time is its first eval at or above the target; the mesh's time is the
last node's. DDP: the same script as 4 gloo ranks (init_method tcp://127.0.0.1:PORT), gradients
all-reduced every step, rank 0 evaluates (one model). Both clocks start when the trainer
processes are launched (torch import and data loading included on both sides), both evaluate
every --eval-every steps (on --eval-subset test images; a result at or above the target is
confirmed on the whole test set, and only that counts), and use --threads torch threads per
process.
Prints both times and the ratio meshtrain / DDP (the issue's goal: <= 1.0), also without the
time each process spent evaluating (meshtrain: every node evaluates its own model; DDP: rank 0
evaluates the one model while the other ranks wait). A bench, not a
test: several minutes on 2 cores. Needs /usr/bin/python3 with numpy and torch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from harness import free_port_block  # noqa: E402  (tests/integration, on benchlib's path)

EXAMPLE = os.path.join(REPO, "examples", "torch_fmnist.py")


def read_events(path):
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def wait_reached(procs, outs, need, max_time, t0):
    """Waits until `need(i)` nodes have a "reached" event (or exit, or time runs out)."""
    deadline = time.time() + max_time
    reached = {}
    while time.time() < deadline:
        for i, path in enumerate(outs):
            if i in reached or not need(i):
                continue
            ev = next((e for e in read_events(path) if e["event"] == "reached"), None)
            if ev:
                reached[i] = (ev["t"] - t0, ev["step"], ev["accuracy"],
                              ev["t"] - t0 - ev.get("eval_total", 0))
        if all(i in reached for i in range(len(outs)) if need(i)):
            break
        if all(p.poll() is not None for p in procs):
            break
        time.sleep(0.5)
    return reached


def stop_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def trainer_args(a):
    return ["--threads", str(a.threads), "--eval-every", str(a.eval_every), "--eval-subset",
            str(a.eval_subset), "--target",
            str(a.target), "--batch", str(a.batch), "--lr", str(a.lr)]


def run_mesh(a, binary, workdir):
    # --target-accuracy: a node that meets it sends its final model to the peers still
    # training, whose trainers evaluate right after mixing it in (the built-in trainer's
    # mesh-wide stop of issue 14).
    common = ["--profile", "local", "--trainer", "external", "--barrier", a.barrier,
              "--target-accuracy", str(a.target),
              "--min-peers", str(a.nodes - 1), "--select", a.select, "--fanout",
              str(min(a.fanout, a.nodes - 1))]
    procs, outs = [], []
    with benchlib.Mesh(binary, a.nodes, common, name_prefix="tv") as mesh:
        mesh.keep_workdir = True  # agent logs stay for inspection
        print(f"agent logs in {mesh.workdir}")
        for ag in mesh.agents:
            ag.socket = os.path.join(workdir, f"{ag.name}.sock")
            ag.extra += ["--trainer-socket", ag.socket]
        mesh.agents[0].start()
        benchlib.wait_until(lambda: mesh.agents[0].members() is not None, 20, what="seed up")
        for ag in mesh.agents[1:]:
            ag.start(join=[mesh.agents[0].addr])
        benchlib.wait_until(lambda: (lambda m: m and len(m) == a.nodes)(
            mesh.agents[0].members()), 30, what="all members")
        t0 = time.time()
        try:
            for i, ag in enumerate(mesh.agents):
                outs.append(os.path.join(workdir, f"mesh-{i}.out"))
                with open(outs[-1], "wb") as f:
                    procs.append(subprocess.Popen(
                        [a.python, EXAMPLE, "--socket", ag.socket, "--shard", f"{i}/{a.nodes}",
                         "--sync-every", str(a.sync_every), *trainer_args(a)],
                        stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            reached = wait_reached(procs, outs, lambda i: True, a.max_time, t0)
            status = [ag.status() or {} for ag in mesh.agents]
        finally:
            stop_all(procs)
    return reached, status, outs


def run_ddp(a, workdir):
    port = free_port_block(1)
    procs, outs = [], []
    t0 = time.time()
    try:
        for i in range(a.nodes):
            outs.append(os.path.join(workdir, f"ddp-{i}.out"))
            with open(outs[-1], "wb") as f:
                procs.append(subprocess.Popen(
                    [a.python, EXAMPLE, "--ddp", f"{i}/{a.nodes}", "--ddp-port", str(port),
                     *trainer_args(a)],
                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        reached = wait_reached(procs, outs, lambda i: i == 0, a.max_time, t0)
    finally:
        stop_all(procs)
    return reached, outs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=None)
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--target", type=float, default=0.88)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-subset", type=int, default=2000,
                   help="periodic evals on this many test images, confirmed on all 10000")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--barrier", default="pssp")
    p.add_argument("--select", default="selmcast")
    p.add_argument("--fanout", type=int, default=3)
    p.add_argument("--sync-every", type=int, default=1)
    p.add_argument("--max-time", type=float, default=1500, help="seconds per run at most")
    p.add_argument("--only", choices=["mesh", "ddp"], help="run one side only")
    a = p.parse_args()
    try:
        binary = benchlib.find_binary(a.bin)
        r = subprocess.run([a.python, "-c", "import torch, numpy"], capture_output=True)
        if r.returncode != 0:
            raise benchlib.SetupError(f"{a.python} cannot import torch and numpy "
                                      "(install python3-torch python3-numpy)")
    except benchlib.SetupError as e:
        print(f"torch_vs_ddp: {e}", file=sys.stderr)
        return 2
    workdir = tempfile.mkdtemp(prefix="meshtrain-torch-vs-ddp-")
    print(f"workdir {workdir}")
    print(f"{a.nodes} processes, target {a.target}, eval every {a.eval_every} steps, batch "
          f"{a.batch}/process, lr {a.lr}, {a.threads} torch thread(s)/process, "
          f"{os.cpu_count()} cores")
    rows = []
    mesh_t = ddp_t = mesh_te = ddp_te = None
    def load(tag):
        print(f"  load average {tag}: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
              "(other processes on the machine skew the comparison: compare runs at equal load)",
              flush=True)
    if a.only != "ddp":
        load("before meshtrain")
        reached, status, outs = run_mesh(a, binary, workdir)
        load("after meshtrain")
        per = [reached.get(i) for i in range(a.nodes)]
        if all(per):
            mesh_t = max(x[0] for x in per)
            mesh_te = max(x[3] for x in per)
        rows.append([f"meshtrain {a.barrier} H={a.sync_every}",
                     " ".join(f"{x[0]:.1f}" if x else "-" for x in per),
                     f"{mesh_t:.1f}" if mesh_t else "not reached",
                     f"{mesh_te:.1f}" if mesh_t else "-",
                     " ".join(str(x[1]) if x else "-" for x in per)])
        for s in status:
            if s:
                print(f"  {s.get('name')}: step {s.get('step')} rounds {s.get('rounds')} "
                      f"params_received {s.get('params_received')} barrier_wait_s "
                      f"{s.get('barrier_wait_s', 0):.2f} idle_s {s.get('idle_s', 0):.1f}")
    if a.only != "mesh":
        load("before DDP")
        reached, outs = run_ddp(a, workdir)
        load("after DDP")
        if 0 in reached:
            ddp_t, ddp_te = reached[0][0], reached[0][3]
        rows.append(["PyTorch DDP (gloo)", f"{ddp_t:.1f} (one model)" if ddp_t else "-",
                     f"{ddp_t:.1f}" if ddp_t else "not reached",
                     f"{ddp_te:.1f}" if ddp_t else "-",
                     str(reached[0][1]) if 0 in reached else "-"])
    print(benchlib.table(["run", "per-node time to target (s)", "time, every node (s)",
                          "same without own evals (s)", "steps at target"], rows))
    if mesh_t and ddp_t:
        print(f"ratio meshtrain / DDP = {mesh_t / ddp_t:.2f} wall clock, "
              f"{mesh_te / ddp_te:.2f} without evaluation time (goal <= 1.0)")
    print(f"workdir {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
