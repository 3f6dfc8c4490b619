#!/usr/bin/env python3
"""Overhead of one `mesh.step` of the external trainer: one agent with --trainer external and no
peers (the barrier answers at once), a numpy model of --params float32 values (default 1 M). Per
step: copy the model into shared memory, PUBLISH (the agent copies the snapshot), WAIT_PERMIT, MIX.

Three variants, measured side by side in one run:
  separate vector  mesh.step(x) with x a numpy array of its own (one 4 MB copy in)
  shared vector    mesh.step(mesh.params): the model lives in the shared memory (no copy)
  round trip       one WAIT_PERMIT for an already-permitted step (the socket's floor)
Prints median, p90 and mean per step in ms. Needs an interpreter with numpy (re-executes itself
with /usr/bin/python3 when this one lacks it).
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


def main():
    try:
        import numpy as np
    except ImportError:
        if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
            os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
        print("external_overhead: numpy is missing (install python3-numpy)", file=sys.stderr)
        return 2
    import benchlib
    import meshtrain
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=None)
    p.add_argument("--params", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=2000)
    a = p.parse_args()
    binary = benchlib.find_binary(a.bin)
    workdir = tempfile.mkdtemp(prefix="meshtrain-overhead-")
    sock = os.path.join(workdir, "t.sock")
    with benchlib.Mesh(binary, 1, ["--profile", "local", "--trainer", "external",
                                    "--trainer-socket", sock]) as mesh:
        agent = mesh.agents[0].start()
        benchlib.wait_until(lambda: os.path.exists(sock), 10, what="socket")
        m = meshtrain.connect(sock)
        x = np.random.default_rng(0).standard_normal(a.params).astype(np.float32)
        m.attach(x.size)

        def timed(fn):
            for _ in range(50):  # warm-up
                fn()
            out = []
            for _ in range(a.steps):
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1000)
            return out
        rows = []
        for name, fn in (("separate vector", lambda: m.step(x)),
                         ("shared vector", lambda: m.step(m.params)),
                         ("round trip", lambda: m.wait_permit(m.step_count))):
            ms = sorted(timed(fn))
            rows.append([name, f"{ms[len(ms) // 2]:.3f}", f"{ms[int(len(ms) * 0.9)]:.3f}",
                         f"{sum(ms) / len(ms):.3f}"])
        m.detach()
        st = agent.status()
        print(f"one agent, no peers, {a.params} float32 parameters, {a.steps} steps per variant "
              f"(agent at step {st['step']}, rejected {st['rejected_packets']})")
        print(benchlib.table(["mesh.step on", "median ms", "p90 ms", "mean ms"], rows))
        print(f"bar: median < 1 ms -> {'met' if float(rows[0][1]) < 1 else 'NOT met'} "
              f"(separate vector)")
    subprocess.run(["rm", "-rf", workdir])
    return 0


if __name__ == "__main__":
    sys.exit(main())
