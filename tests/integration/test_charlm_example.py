"""The language-model example (examples/torch_charlm.py) in CI, with a tiny model
(1 layer, d_model 32, context 32) so that it takes seconds on a loaded 2-core machine:

1. alone, 40 steps: the validation loss in bits per character falls below the initial model's
   (and well below log2(96) = 6.6, the uniform guess), and a second run with the same seed ends
   with the same parameters (CRC);
2. through the mesh: 2 agents (--trainer external, loopback), each serving one torch_charlm.py
   on its half of the training text with MeshOptimizer(sync_every=5, outer="nesterov"); both
   finish their 30 steps, mix the other's models, their validation loss falls, and the agents
   count the trainer's steps and received parameters.

Skips (77) without a python3 that has numpy and torch, or without the fortunes text.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, external_mesh, numpy_python, start_all  # noqa: E402
from harness import parse_args, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch_charlm.py")
FORTUNES = "/usr/share/games/fortunes"
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--context", "32", "--batch", "16",
        "--val-windows", "32", "--lr", "3e-3", "--warmup", "5", "--threads", "1"]
MESH_STEPS = 30


def events(text):
    import json
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def alone(py, seed):
    r = subprocess.run([py, EXAMPLE, *TINY, "--max-steps", "40", "--eval-every", "20",
                        "--seed", str(seed)], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return events(r.stdout)


def main():
    args = parse_args()
    if not os.path.exists(os.path.join(FORTUNES, "fortunes")):
        print(f"SKIP: the fortunes text is not installed in {FORTUNES} (Debian package "
              "`fortunes`, installed by scripts/install-deps.sh)")
        sys.exit(77)
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP: no python3 with numpy and torch (install python3-numpy python3-torch)")
        sys.exit(77)

    # 1. alone
    first = alone(py, 3)
    evals = [e for e in first if e["event"] == "eval"]
    print("  alone: " + ", ".join(f"step {e['step']} {e['val_bpc']:.3f} bpc" for e in evals))
    assert [e["step"] for e in evals] == [0, 20, 40], evals
    assert evals[0]["val_bpc"] > 6.0, evals  # an untrained model guesses about uniformly
    assert evals[-1]["val_bpc"] < evals[0]["val_bpc"] - 0.5, evals
    final = [e for e in first if e["event"] == "final"]
    assert len(final) == 1 and final[0]["step"] == 40, first
    again = [e for e in alone(py, 3) if e["event"] == "final"]
    assert again and again[0]["crc"] == final[0]["crc"], (final, again)
    print(f"  same seed, same parameters: CRC {final[0]['crc']}")

    # the learning-rate schedule: warm-up, then constant or a cosine down to --min-lr-ratio
    check = ("import sys; sys.path.insert(0, sys.argv[1]); import torch_charlm as t\n"
             "for sched in ('constant', 'cosine'):\n"
             "    a = t.parse_args(['--warmup', '10', '--max-steps', '110', '--schedule', sched,"
             " '--min-lr-ratio', '0.1'])\n"
             "    print(sched, ' '.join(f'{t.lr_factor(a, s):.4f}' for s in (0, 9, 10, 60, 110,"
             " 200)))\n")
    r = subprocess.run([py, "-c", check, os.path.dirname(EXAMPLE)], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    factors = dict((ln.split()[0], [float(x) for x in ln.split()[1:]])
                   for ln in r.stdout.splitlines())
    assert factors["constant"] == [0.1, 1.0, 1.0, 1.0, 1.0, 1.0], factors
    # cosine: full lr after the warm-up, half way down at the middle, the floor at --max-steps
    assert factors["cosine"] == [0.1, 1.0, 1.0, 0.55, 0.1, 0.1], factors
    print(f"  lr schedules: {factors}")

    # 2. two agents, outer nesterov every 5 steps
    with external_mesh(args.bin, 2, "lm", 1) as mesh, Workers() as workers:
        start_all(mesh)
        for i, a in enumerate(mesh.agents):
            wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
            workers.append(Worker(py, a, mesh.workdir, *TINY, "--shard", f"{i}/2", "--max-steps",
                                  MESH_STEPS, "--eval-every", 15, "--sync-every", 5,
                                  "--outer", "nesterov", "--outer-lr", 0.7,
                                  "--outer-momentum", 0.9, "--seed", 0, script=EXAMPLE))
        for w in workers:
            w.proc.wait(timeout=300)
        for a, w in zip(mesh.agents, workers):
            ev = w.lines()
            evals = [e for e in ev if e.get("event") == "eval"]
            print(f"  {a.name}: exit {w.proc.returncode}, " + ", ".join(
                f"step {e['step']} {e['val_bpc']:.3f} bpc (mixed {e['mixed']})" for e in evals))
            assert w.proc.returncode == 0, w.text()[-2000:]
            assert [e["step"] for e in evals] == [0, 15, 30], evals
            assert evals[-1]["val_bpc"] < evals[0]["val_bpc"] - 0.3, evals
            assert evals[-1]["mixed"] > 0, evals
            assert any(e.get("event") == "final" for e in ev), ev
            st = wait_until(lambda: (lambda s: s if s and not s["training"] else None)(
                a.status()), 10, what=f"{a.name} not training after detach")[1]
            print(f"    agent: step {st['step']}, params received {st.get('params_received')}")
            assert st["step"] == MESH_STEPS, st
            assert st["params_received"] > 0, st
            assert a.alive(), f"{a.name} exited"
    print("PASS")


if __name__ == "__main__":
    main()
