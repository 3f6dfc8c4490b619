"""A large model through the streamed parameter path: the event loop moves buffers only
(docs/design.md "The parameter path").

3 agents with --trainer external, each serving large_worker.py, a numpy trainer whose model of
PARAMS float32 values (48 MB) lives in the agent's shared memory; ssp, every peer a receiver, so
each agent streams its snapshot to both others every round and folds both others' chunks into
its running sum. Run twice: --compress none and --compress int8. Checks that:
- no pass over a whole model ran on any agent's event loop: status loop.model_passes == 0. The
  agents count every pass of the finite scan, mixing, the running sum, compression, the
  checksum and the transfer assembler over more than 1 Mi floats on the loop thread
  (base/loop_guard.h; tests/learn/mixing_test.cc shows each of them is counted), so this fails
  as soon as one of them moves onto the loop;
- the mesh still works: every trainer ends its steps with finite parameters and peer models
  mixed in (trainer `mixed` and status param_streams.models_mixed > 0), nothing rejected,
  every agent alive.
Timings (the slowest `status` answer, loop lag, the loop's CPU between ticks) are printed, not
asserted: the machine is shared (bench/model_size.py measures them).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, external_mesh, require_numpy_python, start_all  # noqa: E402
from harness import parse_args, wait_until  # noqa: E402

PARAMS = 12_000_000
STEPS = 15
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "large_worker.py")


def one(binary, py, compress):
    with external_mesh(binary, 3, "lg" + compress[:2], 4) as mesh, Workers() as workers:
        for a in mesh.agents:
            a.extra += ["--compress", compress]
        start_all(mesh)
        for i, a in enumerate(mesh.agents):
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            workers.append(Worker(py, a, mesh.workdir, "--params", PARAMS, "--steps", STEPS,
                                  "--sleep", 0.1, "--value", float(i), script=WORKER))
        wait_until(lambda: all(w.event("attached") for w in workers), 60, what="all attached")
        worst = 0.0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(w.proc.poll() is None for w in workers):
            for a in mesh.agents:
                t0 = time.monotonic()
                a.status()
                worst = max(worst, time.monotonic() - t0)
            time.sleep(0.2)
        for w in workers:
            w.proc.wait(timeout=60)
        for a, w in zip(mesh.agents, workers):
            done = w.event("done")
            assert done is not None, w.text()
            st = a.status()
            loop = st["loop"]
            ps = st["param_streams"]
            print(f"  {compress} {a.name}: step {done['step']} mixed {done['mixed']} "
                  f"(models {ps['models_mixed']:.2f}, chunks dropped {ps['mix_chunks_dropped']}) "
                  f"slowest mesh.step {done['step_max_s'] * 1000:.0f} ms; loop passes "
                  f"{loop['model_passes']} (largest {loop['model_pass_largest_floats']} floats), "
                  f"lag p99 {loop['lag_p99_ms']:.1f} max {loop['lag_max_ever_ms']:.1f} ms, "
                  f"tick cpu max {loop['tick_cpu_max_ms']:.1f} ms; suspicions "
                  f"{st['membership']['suspicions_raised']}")
            assert done["finite"], done
            assert done["step"] >= STEPS, done
            assert loop["model_passes"] == 0, (
                f"{a.name}: {loop['model_passes']} passes over a whole model on the event loop "
                f"(largest {loop['model_pass_largest_floats']} floats)")
            assert done["mixed"] > 0 and ps["models_mixed"] > 0, (done, ps)
            assert st["rejected_by_reason"] == {}, st["rejected_by_reason"]
            assert a.alive(), f"{a.name} exited"
        print(f"  {compress}: slowest status answer {worst * 1000:.0f} ms")


def main():
    args = parse_args()
    py = require_numpy_python()
    for compress in ("none", "int8"):
        one(args.bin, py, compress)
    print("PASS")


if __name__ == "__main__":
    main()
