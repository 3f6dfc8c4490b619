"""Fault injection: kill -9 an agent mid-training and restart it with the same --data-dir (a
host that crashed and rebooted).

Four agents train the synthetic task under `pssp`, each checkpointing to its own data dir
every CKPT_EVERY steps. Once training is under way and the victim has checkpointed, it is
killed with SIGKILL; after the others list it `failed` it is restarted with the same options
and data dir but without --join, so it must find the mesh through the peer snapshot in its
data dir. Checks, and prints:

- detection time of the crash, and the survivors' longest stall over the whole episode
  (never longer than the detection time);
- the restarted agent resumes at (or after) the step of the newest checkpoint on disk — never
  from step 0 — and says so (`resume` metrics event, log line);
- it rejoins through its peer snapshot: within REJOIN_BOUND_S every agent lists it alive;
- it converges with the rest: all four reach the target accuracy.
"""
import os
import time

from faults_lib import (TARGET, Mesh, Sampler, checkpoint_step,
                        detection_bound, detection_time, events, kill9, now, parse_args, start_mesh,
                        training_args, wait_all_done, wait_mid_training, wait_until, with_data_dirs)

DETECTION_BOUND_S = detection_bound(4)  # worst-case failure detection for 4 agents

CKPT_EVERY = 200
SLACK_S = 0.5
REJOIN_BOUND_S = 8.0


def main():
    args = parse_args()
    t0 = time.monotonic()
    common = training_args("pssp", extra=["--min-peers", "3", "--checkpoint-every",
                                          str(CKPT_EVERY)])
    with Mesh(args.bin, 4, common, name_prefix="rs") as mesh:
        with_data_dirs(mesh)
        start_mesh(mesh)
        victim, others = mesh.agents[3], mesh.agents[:3]
        names = [a.name for a in others]
        ckpt = os.path.join(victim.data_dir, "ckpt.bin")
        with Sampler(mesh.agents) as s:
            wait_mid_training(s, mesh.agents, accuracy=0.5)
            wait_until(lambda: checkpoint_step(ckpt), 20, what=f"a checkpoint of {victim.name}")
            t_kill = kill9(victim)
            step_at_kill = s.latest(victim.name)["step"]
            on_disk = checkpoint_step(ckpt)
            logged = [e["step"] for e in events(victim.metrics, "checkpoint")]
            detect, _ = detection_time(s, names, victim.name, ("failed",), t_kill,
                                       DETECTION_BOUND_S + 5)
            assert os.path.exists(os.path.join(victim.data_dir, "peers.json")), \
                "no peer snapshot in the data dir"

            t_restart = now()
            victim.start(join=None)  # same name, address, options and data dir; no --join
            victim.expected_exit = False
            wait_until(lambda: victim.status() is not None or not victim.alive(), 15,
                       what=f"{victim.name} RPC up after restart")
            assert victim.alive(), f"restart failed:\n{victim.log_tail()}"
            first = victim.status()
            resumes = events(victim.metrics, "resume")

            def back():
                views = [a.members() for a in mesh.agents]
                return views if all(v is not None and v.get(victim.name, {}).get("status") ==
                                    "alive" for v in views) else None
            rejoin, _ = wait_until(back, REJOIN_BOUND_S + 5, interval=0.1,
                                   what=f"{victim.name} alive again everywhere")
            dt_done, finals = wait_all_done(mesh.agents, TARGET, 90)
            t_end = now()
            stalls = {a.name: s.longest_stall(a.name, t_kill, t_end) for a in others}

        print(f"killed {victim.name} at step ~{step_at_kill}; newest checkpoint on disk: step "
              f"{on_disk}; checkpoint events logged before the kill: {logged[-3:]}")
        print(f"detection time (kill -> failed on the 3 others): {detect:.2f} s")
        print(f"restarted {now() - t_restart:.1f} s ago; first status step after restart "
              f"{first['step']}; resume events: {resumes}")
        print(f"rejoined through its peer snapshot: alive on all 4 {rejoin:.2f} s after the "
              f"restart (bound {REJOIN_BOUND_S:.1f} s)")
        for a in others:
            st, at, step = stalls[a.name]
            print(f"  {a.name}: longest stall {st:.2f} s at step {step} "
                  f"({at - t_kill:+.2f} s from the kill)")
        worst = max(v[0] for v in stalls.values())
        for f in finals:
            print(f"  {f['name']}: final step {f['step']} accuracy (R^2) {f['accuracy']:.5f}")
        print(f"SUMMARY restart-from-checkpoint pssp: detection {detect:.2f} s, longest stall "
              f"{worst:.2f} s, resumed at step {resumes[-1]['step'] if resumes else None} "
              f"(checkpoint {on_disk}), rejoin {rejoin:.2f} s, final accuracy (min R^2) "
              f"{min(f['accuracy'] for f in finals):.5f}")

        assert on_disk is not None and on_disk > 0 and on_disk % CKPT_EVERY == 0, on_disk
        assert len(resumes) == 1, f"expected one resume event, got {resumes}"
        assert resumes[0]["step"] >= on_disk, \
            f"resumed at step {resumes[0]['step']} < checkpointed step {on_disk}"
        assert first["step"] >= on_disk, f"first status after restart at step {first['step']}"
        assert f"resumed from" in victim.log_tail(400), "no 'resumed from' log line"
        assert detect <= DETECTION_BOUND_S
        assert rejoin <= REJOIN_BOUND_S
        assert worst <= detect + SLACK_S, \
            f"a survivor stalled {worst:.2f} s, longer than detection {detect:.2f} s"
    print(f"PASS ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
