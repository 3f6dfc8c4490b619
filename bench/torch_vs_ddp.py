#!/usr/bin/env python3
"""meshtrain vs PyTorch DDP on the same script: time until every node of 4 reaches
0.88 test accuracy with examples/torch_fmnist.py.

meshtrain: 4 agents (--trainer external, --barrier pssp by default, --min-peers 3) on loopback,
each with one torch_fmnist.py process attached over its socket (shard i/4, MeshOptimizer with
--sync-every H). A node's time is its first eval at or above the target; the mesh's time is the
last node's. DDP: the same script as 4 gloo ranks (init_method tcp://127.0.0.1:PORT), gradients
all-reduced every step, rank 0 evaluates (one model). Both clocks start when the trainer
processes are launched (torch import and data loading included on both sides), both evaluate
every --eval-every steps (on --eval-subset test images; a result at or above the target is
confirmed on the whole test set, and only that counts), and use --threads torch threads per
process. DDP's rank 0 evaluates its one model; meshtrain's nodes evaluate their own models in
turns (--eval-turns on: node i at steps k*E with k = i mod 4, so the mesh evaluates every E
steps too), and a node that meets the target hands its final model to the others (agent
--target-accuracy), which take it over and confirm it on the whole test set at once.
Two times per meshtrain run: until every node holds a model that met the target (its own
evaluation, or the finished peer's final model taken over bit for bit — the "taken" CRC equals
that peer's "reached" CRC: like DDP, where rank 0's one evaluation speaks for every rank's
identical model), and until every node's own evaluation on the whole test set confirmed it.
Prints both and the ratios meshtrain / DDP (the target: <= 1.0); --repeat R interleaves R
runs of each and prints medians. A bench, not a
test: several minutes on 2 cores. Needs /usr/bin/python3 with numpy and torch.
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
from harness import free_port_block  # noqa: E402  (tests/integration, on benchlib's path)

EXAMPLE = os.path.join(REPO, "examples", "torch_fmnist.py")


def wait_reached(procs, outs, need, max_time):
    """Waits until `need(i)` nodes have a "reached" event (or exit, or time runs out); returns
    every node's events."""
    deadline = time.time() + max_time
    while time.time() < deadline:
        events = [benchlib.read_events(path) for path in outs]
        if all(any(e["event"] == "reached" for e in events[i])
               for i in range(len(outs)) if need(i)):
            break
        if all(p.poll() is not None for p in procs):
            break
        time.sleep(0.5)
    return [benchlib.read_events(path) for path in outs]


def node_times(events, t0):
    """Per node: (own, holds, step) — seconds until its own evaluation on the whole test set met
    the target; seconds until it held a model that met the target (its own, or a finished
    peer's final model taken over bit for bit: the "taken" CRC equals that peer's "reached"
    CRC); the step of its own reached event. None where the node has no reached event."""
    reached = [next((e for e in ev if e["event"] == "reached"), None) for ev in events]
    out = []
    for i, ev in enumerate(events):
        r = reached[i]
        if r is None:
            out.append(None)
            continue
        others = {x["crc"] for j, x in enumerate(reached) if j != i and x and "crc" in x}
        taken = [e["t"] for e in ev if e["event"] == "taken" and e.get("crc") in others]
        out.append((r["t"] - t0, min([r["t"]] + taken) - t0, r["step"]))
    return out


def stop_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def trainer_args(a, seed):
    return ["--seed", str(seed), "--threads", str(a.threads), "--eval-every", str(a.eval_every), "--eval-subset",
            str(a.eval_subset), "--target",
            str(a.target), "--batch", str(a.batch), "--lr", str(a.lr), "--eval-average",
            str(a.eval_average)]


def run_mesh(a, binary, workdir, seed):
    # --target-accuracy: a node that meets it sends its final model to the peers still
    # training, whose trainers evaluate right after mixing it in (the built-in trainer's
    # mesh-wide stop).
    common = [*a.agent_args.split(), "--profile", "local", "--trainer", "external", "--barrier",
              a.barrier,
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
                         "--sync-every", str(a.sync_every), *trainer_args(a, seed),
                         *(["--eval-turns"] if a.eval_turns == "on" else [])],
                        stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            events = wait_reached(procs, outs, lambda i: True, a.max_time)
            status = [ag.status() or {} for ag in mesh.agents]
        finally:
            stop_all(procs)
    return node_times(events, t0), status


def run_ddp(a, workdir, seed):
    port = free_port_block(1)
    procs, outs = [], []
    t0 = time.time()
    try:
        for i in range(a.nodes):
            outs.append(os.path.join(workdir, f"ddp-{i}.out"))
            with open(outs[-1], "wb") as f:
                procs.append(subprocess.Popen(
                    [a.python, EXAMPLE, "--ddp", f"{i}/{a.nodes}", "--ddp-port", str(port),
                     *trainer_args(a, seed)],
                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        events = wait_reached(procs, outs, lambda i: i == 0, a.max_time)
    finally:
        stop_all(procs)
    return node_times(events[:1], t0)[0]


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
    p.add_argument("--eval-turns", choices=["on", "off"], default="on",
                   help="meshtrain's nodes evaluate in turns (examples/torch_fmnist.py "
                        "--eval-turns): the mesh as a whole evaluates every --eval-every steps, "
                        "as DDP's rank 0 does; off: every node every --eval-every steps")
    p.add_argument("--max-time", type=float, default=1500, help="seconds per run at most")
    p.add_argument("--only", choices=["mesh", "ddp"], help="run one side only")
    p.add_argument("--repeat", type=int, default=1,
                   help="interleaved runs of each; run r uses --seed + r on both sides (model "
                        "initialisation and sample order); medians")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-average", type=float, default=0, metavar="D",
                   help="both sides evaluate the moving average of the parameters "
                   "(examples/torch_fmnist.py --eval-average)")
    p.add_argument("--agent-args", default="",
                   help="more agent options, e.g. '--staleness 2 --sample 2'")
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
    def load(tag):
        print(f"  load average {tag}: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
              "(other processes on the machine skew the comparison: compare runs at equal load)",
              flush=True)
    mesh_own, mesh_holds, ddp_ts, rows = [], [], [], []
    for rep in range(a.repeat):
        if a.only != "ddp":
            load(f"before meshtrain, run {rep + 1}")
            per, status = run_mesh(a, binary, workdir, a.seed + rep)
            if all(per):
                mesh_own.append(max(x[0] for x in per))
                mesh_holds.append(max(x[1] for x in per))
            rows.append([f"meshtrain {a.barrier} H={a.sync_every} {a.agent_args} "
                         f"seed {a.seed + rep}",
                         " ".join(f"{x[1]:.1f}" if x else "-" for x in per),
                         f"{max(x[1] for x in per):.1f}" if all(per) else "not reached",
                         " ".join(f"{x[0]:.1f}" if x else "-" for x in per),
                         f"{max(x[0] for x in per):.1f}" if all(per) else "not reached",
                         " ".join(str(x[2]) if x else "-" for x in per)])
            for s in status:
                if s:
                    print(f"  {s.get('name')}: step {s.get('step')} rounds {s.get('rounds')} "
                          f"params_received {s.get('params_received')} barrier_wait_s "
                          f"{s.get('barrier_wait_s', 0):.2f} idle_s {s.get('idle_s', 0):.1f}")
        if a.only != "mesh":
            load(f"before DDP, run {rep + 1}")
            r = run_ddp(a, workdir, a.seed + rep)
            if r:
                ddp_ts.append(r[0])
            t = f"{r[0]:.1f}" if r else "not reached"
            rows.append([f"PyTorch DDP (gloo) seed {a.seed + rep}", f"{t} (one model)", t, f"{t} (rank 0)", t,
                         str(r[2]) if r else "-"])
    print(benchlib.table(["run", "per node: holds a model that met the target (s)",
                          "every node holds one (s)", "per node: own evaluation met it (s)",
                          "every node's own (s)", "steps at own"], rows))
    if mesh_holds and ddp_ts:
        m_h, m_o, d = (benchlib.median(v) for v in (mesh_holds, mesh_own, ddp_ts))
        print(f"medians of {len(ddp_ts)}: meshtrain every node holds a model that met "
              f"{a.target}: {m_h:.1f} s; every node's own evaluation confirmed it: {m_o:.1f} s; "
              f"DDP (rank 0's evaluation of the one model): {d:.1f} s")
        print(f"ratio meshtrain / DDP = {m_h / d:.2f} (holds, like for like with DDP's one "
              f"model), {m_o / d:.2f} (every node's own evaluation) (goal <= 1.0)")
    print(f"workdir {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
