"""A finished node is killed and restarted. 3 agents train fmnist-mlp under pssp with
checkpoints; el1 has --target-accuracy 0.80, the others a target they do not reach in this test.
Checks that:
- el1 finishes (training: false) and the others keep training (0.80 is not their goal);
- after `kill -9` of el1 nobody stalls: the others take >= 50 steps in the next 5 s;
- el1 restarted with the same --data-dir rejoins from whichever is newer, its checkpoint or the
  mesh: the mesh has moved on by hundreds of steps, so it fetches a peer's model (log "adopted
  the model of") and continues near the others' step (their step when it restarted; it may stop
  again at once, the adopted model being past its target) instead of at its checkpoint's.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import Mesh, parse_args, wait_until  # noqa: E402

DATASET = "/usr/share/datasets/fashion-mnist"


def main():
    args = parse_args()
    if not os.path.exists(os.path.join(DATASET, "t10k-images-idx3-ubyte.gz")):
        print(f"SKIP: Fashion-MNIST not installed in {DATASET}")
        sys.exit(77)
    common = ["--profile", "local", "--task", "fmnist-mlp", "--barrier", "pssp", "--sample", "2",
              "--staleness", "4", "--select", "random", "--fanout", "2", "--eval-every", "50",
              "--min-peers", "2", "--checkpoint-every", "100"]
    with Mesh(args.bin, 3, common, name_prefix="er") as mesh:
        for i, a in enumerate(mesh.agents):
            a.extra += ["--shard", f"{i}/3", "--data-dir", os.path.join(mesh.workdir, a.name),
                        "--target-accuracy", "0.80" if i == 0 else "0.999"]
        done, rest = mesh.agents[0], mesh.agents[1:]
        done.start()
        wait_until(lambda: done.members() is not None, 15, what="seed up")
        for a in rest:
            a.start(join=[done.addr])
        dt, st = wait_until(lambda: (lambda s: s if s and not s["training"] else None)(
            done.status()), 120, interval=0.5, what=f"{done.name} reaches 0.80")
        print(f"{done.name} finished at step {st['step']} (accuracy {st['accuracy']:.4f}) after "
              f"{dt:.1f} s")
        time.sleep(2)
        for a in rest:
            s = a.status()
            assert s["training"], s
        done.signal(signal.SIGKILL)
        done.proc.wait(timeout=10)
        before = [a.status()["step"] for a in rest]
        time.sleep(5)
        after = [a.status()["step"] for a in rest]
        print(f"after killing {done.name}: the others went {before} -> {after} in 5 s")
        assert all(y >= x + 50 for x, y in zip(before, after)), (before, after)
        # The mesh's step when el1 comes back: steps only grow, so el1 (which may stop again at
        # once: the adopted model is past its 0.80 target) must be at least near this.
        others = [a.status()["step"] for a in rest]
        done.start(join=[rest[0].addr])

        def rejoined():
            log = open(done.log_path, errors="replace").read()
            return log if "adopted the model of" in log else None
        dt, log = wait_until(rejoined, 60, interval=0.5, what=f"{done.name} rejoins from the mesh")
        # The trainer takes the model over at its next step boundary: poll its step (bounded).
        _, s = wait_until(lambda: (lambda st: st if st and st["step"] >= min(others) - 100
                                   else None)(done.status()), 20, interval=0.2,
                          what=f"{done.name} continues near the others' step")
        resumed = [ln for ln in log.splitlines() if "resum" in ln or "checkpoint" in ln]
        print(f"{done.name} restarted: {resumed[-1:] if resumed else 'no checkpoint line'}; "
              f"adopted the mesh's model, now at step {s['step']} (others at its restart {others})")
        assert s["step"] >= min(others) - 100, (s["step"], others)
    print("PASS")


if __name__ == "__main__":
    main()
