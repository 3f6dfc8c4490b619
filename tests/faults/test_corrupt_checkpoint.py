"""Fault injection: a checkpoint file corrupted on disk before a restart (bit rot, a torn copy,
an operator's mistake).

Three agents train the synthetic task under `pssp`, checkpointing every CKPT_EVERY steps
(the data dir keeps ckpt.bin, the newest, and ckpt.prev.bin, the one before). Checks, and
prints:

1. newest checkpoint corrupted: the victim is killed with SIGKILL, 16 bytes in the middle of
   its ckpt.bin are flipped, and it is restarted with the same data dir. It must detect the
   damage (checksum), say so in its log, resume from ckpt.prev.bin at exactly that file's
   step, rejoin (peer snapshot, no --join) and converge with the others to the target;
2. every checkpoint corrupted: killed again, ckpt.bin truncated and ckpt.prev.bin bit-flipped,
   restarted: it must refuse to start (non-zero exit within START_BOUND_S, a one-line reason
   naming the data dir) rather than silently start from step 0, and leave the files in place.
"""
import os
import subprocess
import time

from faults_lib import (TARGET, Mesh, Sampler, checkpoint_step,
                        detection_bound, detection_time, events, kill9, now, parse_args, start_mesh,
                        training_args, wait_all_done, wait_mid_training, wait_until, with_data_dirs)

DETECTION_BOUND_S = detection_bound(3)  # worst-case failure detection for 3 agents

CKPT_EVERY = 200
REJOIN_BOUND_S = 8.0
START_BOUND_S = 10.0


def flip(path, offset, n=16):
    with open(path, "r+b") as f:
        f.seek(offset)
        data = bytearray(f.read(n))
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))
        f.flush()
        os.fsync(f.fileno())


def kill9_at_rest(agent, newest):
    """SIGKILL while no checkpoint is being written: the agent is paused (SIGSTOP) first, and
    killed only once `newest` exists and no temporary file does (a kill between the rotation's
    renames leaves no newest file to corrupt; the agent recovers from the previous one, which
    is not this test's case). Bounded: 100 pauses. Returns the monotonic time of the kill."""
    import signal
    tmp = newest + ".tmp"
    for _ in range(100):
        os.kill(agent.proc.pid, signal.SIGSTOP)
        if os.path.exists(newest) and not os.path.exists(tmp):
            t = kill9(agent)
            return t
        os.kill(agent.proc.pid, signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError(f"{agent.name} was writing a checkpoint at every one of 100 pauses")


def main():
    args = parse_args()
    t0 = time.monotonic()
    common = training_args("pssp", extra=["--min-peers", "2", "--checkpoint-every",
                                          str(CKPT_EVERY)])
    with Mesh(args.bin, 3, common, name_prefix="cc") as mesh:
        with_data_dirs(mesh)
        start_mesh(mesh)
        victim, others = mesh.agents[2], mesh.agents[:2]
        names = [a.name for a in others]
        newest = os.path.join(victim.data_dir, "ckpt.bin")
        prev = os.path.join(victim.data_dir, "ckpt.prev.bin")
        with Sampler(mesh.agents) as s:
            wait_mid_training(s, mesh.agents, accuracy=0.5)
            wait_until(lambda: checkpoint_step(prev), 20, what="two checkpoints on disk")

            # 1. Newest checkpoint corrupted: fall back to the previous one.
            t_kill = kill9_at_rest(victim, newest)
            step_new, step_prev = checkpoint_step(newest), checkpoint_step(prev)
            size = os.path.getsize(newest)
            flip(newest, size // 2)
            detect, _ = detection_time(s, names, victim.name, ("failed",), t_kill,
                                       DETECTION_BOUND_S + 5)
            t_restart = now()
            victim.start(join=None)
            victim.expected_exit = False
            wait_until(lambda: victim.status() is not None or not victim.alive(), 15,
                       what=f"{victim.name} RPC up after restart")
            assert victim.alive(), f"restart over a corrupt newest checkpoint failed:\n" \
                                   f"{victim.log_tail()}"
            resumes = events(victim.metrics, "resume")
            log = victim.log_tail(400)

            def back():
                views = [a.members() for a in mesh.agents]
                return views if all(v is not None and v.get(victim.name, {}).get("status") ==
                                    "alive" for v in views) else None
            rejoin, _ = wait_until(back, REJOIN_BOUND_S + 5, interval=0.1,
                                   what=f"{victim.name} alive again everywhere")
            dt_done, finals = wait_all_done(mesh.agents, TARGET, 90)

        skipped = [line for line in log.splitlines() if "skipped a bad checkpoint" in line]
        print(f"case 1: killed {victim.name}; ckpt.bin step {step_new} ({size} bytes, 16 bytes "
              f"flipped at {size // 2}), ckpt.prev.bin step {step_prev}")
        print(f"case 1: restarted; resume events {resumes}; log: "
              f"{skipped[0].split('] ', 1)[-1] if skipped else '(no skip line)'}")
        print(f"case 1: alive on all 3 {rejoin:.2f} s after the restart; detection of the "
              f"crash {detect:.2f} s")
        for f in finals:
            print(f"  {f['name']}: final step {f['step']} accuracy (R^2) {f['accuracy']:.5f}")
        assert step_new is not None and step_prev is not None and step_new > step_prev
        assert len(resumes) == 1 and resumes[0]["step"] == step_prev, \
            f"expected a resume at the previous checkpoint's step {step_prev}: {resumes}"
        assert skipped, "the agent did not report the corrupt checkpoint it skipped"
        assert rejoin <= REJOIN_BOUND_S

        # 2. Every checkpoint corrupted: refuse to start, keep the files.
        kill9_at_rest(victim, newest)
        with open(newest, "r+b") as f:
            f.truncate(os.path.getsize(newest) - 7)
        flip(prev, os.path.getsize(prev) // 2)
        before = sorted(os.listdir(victim.data_dir))
        t_start = now()
        victim.start(join=None)
        try:
            rc = victim.proc.wait(timeout=START_BOUND_S)
        except subprocess.TimeoutExpired:
            rc = None
        took = now() - t_start
        status = victim.status() if rc is None else None
        errors = [line for line in victim.log_tail(20).splitlines() if "[error]" in line]
        after = sorted(os.listdir(victim.data_dir))
        print(f"case 2: ckpt.bin truncated by 7 bytes, ckpt.prev.bin bit-flipped; restart "
              f"exited with code {rc} after {took:.2f} s")
        for line in errors:
            print(f"case 2: {line.split('] ', 1)[-1]}")
        print(f"SUMMARY corrupt-checkpoint pssp: detection {detect:.2f} s, resumed at step "
              f"{resumes[0]['step']} from ckpt.prev.bin (newest {step_new} corrupt), rejoin "
              f"{rejoin:.2f} s, final accuracy (min R^2) "
              f"{min(f['accuracy'] for f in finals):.5f}; all corrupt: exit {rc} in {took:.2f} s")
        assert rc is not None and rc != 0, \
            f"started over corrupt checkpoints instead of refusing (status {status})"
        assert errors and any(victim.data_dir in e for e in errors), \
            f"no error naming {victim.data_dir}: {victim.log_tail(20)}"
        assert before == after, f"data dir changed by the refused start: {before} -> {after}"
    print(f"PASS ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
