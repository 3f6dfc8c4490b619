#!/usr/bin/env python3
"""Overhead of one `mesh.step` on a torch model, copied vs placed in shared memory.

For each size in --params, a model of --tensors float32 nn.Parameter tensors (2-D, 1000 wide)
is stepped through real agents with --trainer external (--profile local) in two ways, measured in
the same mesh, round by round in turns:
  copied  the parameters are tensors of their own: mesh.step copies them into the shared memory
          before PUBLISH and back after a MIX that mixed something (meshtrain.Layout)
  shared  the same kind of model placed in the shared memory (meshtrain.torch.share_parameters):
          the tensors are views of mesh.params, mesh.step copies no parameter byte in Python
beside the floor, one copy of the model in this process (np.copyto, single-threaded as the
agent's; and torch's copy_). Whatever the variant, the agent copies the shared memory into the
snapshot it multicasts at PUBLISH (on its thread pool, while the trainer waits) and mixes peers'
models into it at MIX, so "shared" still costs about one model copy per step, in the agent.

--agents 1 (default): one agent, no peers: the barrier answers at once and MIX mixes nothing (so
"copied" copies once per step, into the shared memory). --agents 2: a second agent whose trainer
(a numpy loop on its own mesh.params, no compute, a subprocess of this script) steps as fast as
it can, ssp --staleness 2; MIX then mixes the peer's model (its chunks that arrived), "copied"
copies both ways, and the step time includes the agents' sending and mixing on a shared machine.

Prints per size: median (and p90) ms per mesh.step of both ways, the memcpy floor, and the
Python bytes copied per step (mesh.copied_bytes). Needs numpy and torch (re-executes
itself with /usr/bin/python3 when this interpreter lacks them). Memory: about 4 model copies
in this process plus 2 per agent (100 M parameters: ~1.6 GB + 0.8 GB per agent).
Example: /usr/bin/python3 bench/torch_step_overhead.py --params 1e6,1e7,1e8
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[2:]))
    p.add_argument("--bin", default=None, help="meshtrain binary (default: $MESHTRAIN_BIN, "
                   "else build/cli/meshtrain)")
    p.add_argument("--params", default="1e6,1e7,1e8",
                   help="comma-separated model sizes in float32 parameters (default %(default)s)")
    p.add_argument("--tensors", type=int, default=4, help="parameter tensors per model")
    p.add_argument("--agents", type=int, choices=(1, 2), default=1,
                   help="1: one agent, no peers (default); 2: a stepping peer, see below")
    p.add_argument("--steps", type=int, default=0,
                   help="timed mesh steps per way and size (default: 200 at 1M parameters, "
                        "fewer for larger models, at least 12)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--peer", default="", help=argparse.SUPPRESS)  # internal: the peer trainer
    p.add_argument("--peer-params", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args()


def peer(a):
    """The second agent's trainer: steps its shared vector as fast as the barrier lets it."""
    import meshtrain
    m = meshtrain.connect(a.peer, timeout=300)
    m.attach(a.peer_params)
    try:
        while m.training:
            m.params[::4096] *= 0.999  # touch it, so the models differ
            m.step(m.params)
    except meshtrain.MeshError:
        pass
    return 0


def sizes_of(total, k):
    base = [total // k] * k
    base[-1] += total - sum(base)
    return [(n // 1000, 1000) if n % 1000 == 0 else (n,) for n in base]


def measure(a, binary, total):
    import numpy as np
    import torch

    import benchlib
    import meshtrain
    import meshtrain.torch as mt
    steps = a.steps or max(12, min(200, int(2e8 / total)))
    workdir = tempfile.mkdtemp(prefix="meshtrain-torchstep-")
    peer_proc = None
    if a.agents == 1:
        mesh = benchlib.Mesh(binary, 1, ["--profile", "local", "--trainer", "external"])
    else:
        from external_lib import external_mesh
        mesh = external_mesh(binary, 2, "tso", 2)
    try:
        with mesh:
            for ag in mesh.agents:
                ag.socket = os.path.join(mesh.workdir, f"{ag.name}.sock")
            if a.agents == 1:
                mesh.agents[0].extra += ["--trainer-socket", mesh.agents[0].socket]
                mesh.agents[0].start()
            else:
                from external_lib import start_all
                start_all(mesh)
            for ag in mesh.agents:
                benchlib.wait_until(lambda: os.path.exists(ag.socket), 10, what="socket")
            if a.agents == 2:
                log = open(os.path.join(workdir, "peer.out"), "wb")
                peer_proc = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--peer", mesh.agents[1].socket,
                     "--peer-params", str(total)], stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)
                log.close()
            m = meshtrain.connect(mesh.agents[0].socket, timeout=300)
            shapes = sizes_of(total, a.tensors)
            gen = torch.Generator().manual_seed(0)
            copied = [torch.nn.Parameter(torch.randn(*s, generator=gen) * 0.01) for s in shapes]
            shared = [torch.nn.Parameter(torch.randn(*s, generator=gen) * 0.01) for s in shapes]
            m.attach(total)
            mt.share_parameters(shared, m)
            assert mt.shared(shared, m)
            ways = {"copied": copied, "shared": shared}
            times = {k: [] for k in ways}
            nbytes = {k: 0 for k in ways}
            mixed = {k: 0 for k in ways}
            for model in ways.values():  # warm-up
                for _ in range(3):
                    m.step(model)
            per_round = max(1, steps // 6)
            done = 0
            while done < steps:
                k = min(per_round, steps - done)
                for name, model in ways.items():
                    for _ in range(k):
                        b0, t0 = m.copied_bytes, time.perf_counter()
                        mixed[name] += bool(m.step(model).mixed)
                        times[name].append((time.perf_counter() - t0) * 1000)
                        nbytes[name] += m.copied_bytes - b0
                done += k
            m.detach()
            st = mesh.agents[0].status() or {}
    finally:
        if peer_proc is not None:
            if peer_proc.poll() is None:
                peer_proc.kill()
            peer_proc.wait(timeout=30)
        subprocess.run(["rm", "-rf", workdir])
    # The floor: one copy of the model in this process.
    src = np.random.default_rng(0).standard_normal(total, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # faults the pages in
    floor_np, floor_torch = [], []
    ts, td = torch.from_numpy(src), torch.from_numpy(dst)
    for _ in range(max(5, min(50, steps))):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        floor_np.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        td.copy_(ts)
        floor_torch.append((time.perf_counter() - t0) * 1000)

    def med(v):
        v = sorted(v)
        return v[len(v) // 2]

    def p90(v):
        v = sorted(v)
        return v[int(len(v) * 0.9)]
    return {"total": total, "steps": steps, "times": times, "bytes": nbytes, "mixed": mixed,
            "floor_np": med(floor_np), "floor_torch": med(floor_torch), "agent": st,
            "med": med, "p90": p90}


def main():
    a = parse()
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError:
        if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
            os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
        print("torch_step_overhead: numpy and torch are needed (python3-numpy python3-torch)",
              file=sys.stderr)
        return 2
    if a.peer:
        return peer(a)
    import benchlib
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        binary = benchlib.find_binary(a.bin)
        totals = [int(float(x)) for x in a.params.split(",") if x.strip()]
    except (benchlib.SetupError, ValueError) as e:
        print(f"torch_step_overhead: {e}", file=sys.stderr)
        return 2
    rows = []
    for total in totals:
        r = measure(a, binary, total)
        med, p90 = r["med"], r["p90"]
        c, s = r["times"]["copied"], r["times"]["shared"]
        row = [f"{total:,}", f"{total * 4 / 1e6:.0f}", r["steps"],
               f"{med(c):.2f} / {p90(c):.2f}", f"{med(s):.2f} / {p90(s):.2f}",
               f"{r['floor_np']:.2f}", f"{r['floor_torch']:.2f}",
               f"{med(s) / r['floor_np']:.2f}",
               f"{r['bytes']['copied'] / r['steps'] / 1e6:.0f} / "
               f"{r['bytes']['shared'] / r['steps'] / 1e6:.0f}"]
        if a.agents == 2:
            row.append(f"{r['mixed']['copied']} / {r['mixed']['shared']}")
        rows.append(row)
        print(f"  {total:,} parameters done (agent step {r['agent'].get('step')}, rejected "
              f"{r['agent'].get('rejected_packets')})", flush=True)
    head = ["params", "MB", "steps", "copied ms med/p90", "shared ms med/p90",
            "memcpy ms (numpy)", "memcpy ms (torch)", "shared / memcpy", "MB copied/step c/s"]
    if a.agents == 2:
        head.append("steps that mixed c/s")
    peers = "one agent, no peers" if a.agents == 1 else "2 agents (ssp, staleness 2)"
    print(f"mesh.step on a torch model of {a.tensors} float32 tensors; {peers}; torch threads "
          f"{torch.get_num_threads()}")
    print(benchlib.table(head, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
