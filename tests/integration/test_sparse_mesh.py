"""Compressed pseudo-gradients through real agents (loopback): the language-model example
(examples/torch_charlm.py, a tiny model) on 3 agents with --compress sparse, each trainer with
MeshOptimizer(compress="sparse:0.05:2", outer="sgd", sync_every=10, fragments=2), once as is and
once with overlap=True (mixed at the next sync), once with overlap=2 (mixed two steps after
it), against the same run with models at int8 (--compress int8, no compress).

Each run: every trainer ends its 40 steps and exits 0, its validation loss falls, finish() gives
every node the same consensus model (one CRC); the sparse runs' agents sent at most a quarter of
the int8 run's bytes in their syncs (the agents' "sync" metrics lines of fragments; the final and
consensus models at the end are whole layouts, the same models either way), so the
pseudo-gradients went out compressed and no model did. MeshOptimizer.sync_phases (the eval
lines' "sync_phases") adds up to at most sync_seconds, with PUBLISH and MIX timed apart only
with overlap.

Skips (77) without a python3 that has numpy and torch, or without the fortunes text.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, external_mesh, numpy_python, start_all  # noqa: E402
from harness import parse_args, wait_until  # noqa: E402
# The example and its tiny model, as the example's own test runs them.
from test_charlm_example import EXAMPLE, FORTUNES, TINY  # noqa: E402

STEPS = 40
N = 3


def run(binary, py, compress, trainer_args):
    """One mesh of N agents with --compress `compress`; returns (per node: the eval events, the
    consensus event), and the agents' mean params_bytes_sent."""
    with external_mesh(binary, N, "sp", 1) as mesh, Workers() as workers:
        for a in mesh.agents:
            a.extra += ["--compress", compress, "--metrics-file",
                        os.path.join(mesh.workdir, f"{a.name}.metrics")]
        start_all(mesh)
        for i, a in enumerate(mesh.agents):
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            workers.append(Worker(py, a, mesh.workdir, *TINY, "--shard", f"{i}/{N}",
                                  "--max-steps", STEPS, "--eval-every", 20, "--sync-every", 10,
                                  "--fragments", 2, "--outer", "sgd", "--outer-lr", 1.0,
                                  "--finish", "--seed", 0, *trainer_args, script=EXAMPLE))
        for w in workers:
            w.proc.wait(timeout=600)
        out = []
        for a, w in zip(mesh.agents, workers):
            assert w.proc.returncode == 0, w.text()[-3000:]
            ev = w.lines()
            out.append(([e for e in ev if e.get("event") == "eval"],
                        next((e for e in ev if e.get("event") == "consensus"), None)))
        sent = []
        for a in mesh.agents:
            assert a.alive(), f"{a.name} is gone"
            sent.append(sync_bytes(os.path.join(mesh.workdir, f"{a.name}.metrics")))
    return out, sum(sent) / len(sent)


def sync_bytes(path):
    """The bytes of the agent's fragment rounds (its syncs while training): the rounds that
    carried half a layout, not the final and consensus models at the end, which carry all of
    it."""
    import json
    rounds = []
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "sync" and "raw_bytes" in e and e.get("fanout", 0) > 0:
                rounds.append((e["raw_bytes"] / e["fanout"], e["bytes"]))
    whole = max(raw for raw, _ in rounds)
    return sum(b for raw, b in rounds if raw < 0.75 * whole)


def check(name, out, overlap=False):
    crcs = set()
    for evals, consensus in out:
        assert [e["step"] for e in evals] == [0, 20, 40], evals
        # MeshOptimizer.sync_phases: parts of sync_seconds (sync_total rounded to 0.01 s);
        # PUBLISH and MIX are requests of their own only with overlap (else one mesh step)
        phases, total = evals[-1]["sync_phases"], evals[-1]["sync_total"]
        assert set(phases) == {"prepare", "publish", "wait", "mix", "outer"}, phases
        assert min(phases.values()) >= 0 and sum(phases.values()) <= total + 0.03, (phases,
                                                                                     total)
        assert (phases["publish"] + phases["mix"] > 0) == overlap, phases
        assert evals[-1]["val_bpc"] < evals[0]["val_bpc"] - 0.3, evals
        assert consensus is not None and consensus["models"] == N, consensus
        crcs.add(consensus["crc32"])
    assert len(crcs) == 1, f"{name}: the nodes ended with different models {crcs}"
    print(f"  {name}: bpc " + "; ".join(
        " -> ".join(f"{e['val_bpc']:.3f}" for e in ev) for ev, _ in out)
        + f"; consensus {out[0][1]['val_bpc']:.3f} bpc (CRC {crcs.pop()})")


def main():
    args = parse_args()
    if not os.path.exists(os.path.join(FORTUNES, "fortunes")):
        print(f"SKIP: the fortunes text is not installed in {FORTUNES}")
        sys.exit(77)
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP: no python3 with numpy and torch (install python3-numpy python3-torch)")
        sys.exit(77)
    dense, dense_bytes = run(args.bin, py, "int8", [])
    check("int8 models", dense)
    for label, extra in (("sparse", []), ("sparse, overlap", ["--overlap"]),
                         ("sparse, overlap 2 steps", ["--overlap", 2])):
        out, sent = run(args.bin, py, "sparse", ["--compress", "sparse:0.05:2", *extra])
        check(label, out, overlap=bool(extra))
        print(f"    sync bytes sent per agent: {sent:.0f} vs int8 models {dense_bytes:.0f} "
              f"({sent / dense_bytes:.3f})")
        assert sent < 0.25 * dense_bytes, (sent, dense_bytes)
    print("PASS")


if __name__ == "__main__":
    main()
