"""The exact exchange (docs/design.md "Mixing"): 3 agents with external trainers that sync every
H = 50 local steps (sync_worker.py: each pulls its model towards its own target), bsp (ssp at
staleness 0), the third trainer 2x slower per step, models of 200 000 floats (13 chunks: a
transfer takes a while, so a mix that did not wait for it would show).

Checks that:
- every sync mixed the whole models of the peers it waited for (status `syncs`: none short,
  none partial, no timeout), so every node holds, after each sync, the exact average of the three
  models — the float64 reference computed here — and the three agree before finish();
- the end costs at most 2 x (nodes - 1) model copies although one trainer finishes 3 s after the
  others (finished nodes send no final model to a peer still training; the consensus sends each
  participant's to the leader once, and the result back).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, external_mesh, require_numpy_python, start_all  # noqa: E402
from harness import parse_args, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = [0.0, 3.0, 9.0]
SYNCS, EVERY, LR, DIM = 6, 50, 0.02, 200000
SLEEP = [0.002, 0.002, 0.004]
LINGER = [0.0, 0.0, 3.0]  # seconds the third trainer waits before finish()


def reference():
    """The exact average after each sync, in float64."""
    x, out = 0.0, []
    keep = (1 - LR) ** EVERY
    for _ in range(SYNCS):
        x = sum(t + keep * (x - t) for t in TARGETS) / len(TARGETS)
        out.append(x)
    return out


def main():
    args = parse_args()
    py = require_numpy_python()
    with external_mesh(args.bin, 3, "exs", 0) as mesh, Workers() as workers:
        start_all(mesh)
        for a in mesh.agents:
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
        for i, a in enumerate(mesh.agents):
            workers.append(Worker(py, a, mesh.workdir, "--syncs", SYNCS, "--every", EVERY,
                                  "--dim", DIM, "--target", TARGETS[i], "--lr", LR,
                                  "--sleep", SLEEP[i], "--linger", LINGER[i],
                                  script=os.path.join(HERE, "sync_worker.py")))
        for w in workers:
            w.proc.wait(timeout=180)
        done = [w.event("done") for w in workers]
        for w, d in zip(workers, done):
            assert d is not None, w.text()
        ref = reference()
        for a, d in zip(mesh.agents, done):
            b = d["before"]
            print(f"  {a.name}: before finish mean {b['mean']:.6f} (min {b['min']:.6f}, max "
                  f"{b['max']:.6f}); reference {ref[-1]:.6f}; consensus of "
                  f"{d['consensus']['models']} crc {d['consensus']['crc32']:08x}")
            # Never part of a model: every coordinate got the same mixes.
            assert b["max"] - b["min"] < 1e-4, b
            for k, (got, want) in enumerate(zip(d["means"], ref)):
                assert abs(got - want) < 1e-4 * max(1.0, abs(want)), (a.name, k, got, want)
        means = [d["before"]["mean"] for d in done]
        assert max(means) - min(means) < 1e-5, means
        crcs = {d["consensus"]["crc32"] for d in done}
        assert len(crcs) == 1 and all(d["consensus"]["models"] == 3 for d in done), done
        sts = [a.status() for a in mesh.agents]
        copies = 0.0
        for a, st in zip(mesh.agents, sts):
            s = st["syncs"]
            print(f"  {a.name}: syncs {s['count']} (short {s['short']}, partial {s['partial']}, "
                  f"timeouts {s['timeouts']}, waited {s['wait_s']:.2f} s; last: "
                  f"{s['last']}), sync_every {st['sync_every']}, outer {st['outer']}, "
                  f"{st['params_bytes_raw']} parameter bytes sent")
            assert s["count"] == SYNCS and s["short"] == 0 and s["partial"] == 0, s
            # (A peer that finished right after the last sync is no longer waited for.)
            assert s["timeouts"] == 0 and s["last"]["mixed"] == 2, s
            assert st["sync_every"] == EVERY and s["configured"], st
            copies += st["params_bytes_raw"] / (4.0 * DIM)
        n = len(mesh.agents)
        training = n * SYNCS * (n - 1)
        end = round(copies) - training
        print(f"  model copies: {copies:.2f} in all, {training} for the syncs, {end} at the end "
              f"(bound {2 * (n - 1)})")
        assert end <= 2 * (n - 1), (copies, training)
        print("PASS")


if __name__ == "__main__":
    main()
