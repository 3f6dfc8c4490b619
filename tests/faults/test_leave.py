"""Fault injection: graceful `meshtrain leave` of an agent mid-training.

Five agents train the synthetic task under `bsp` (every step waits on every live peer, so a
leaver that the barriers kept waiting for would stop everyone). Mid-training one agent is told
to leave through the CLI. Checks, and prints:

- the leave spreads: every survivor lists the leaver `left` (not `failed`) within
  LEAVE_SPREAD_BOUND_S, and the leaver exits 0;
- no survivor stalls: from the leave command to the end of training no survivor's step stands
  still longer than STALL_BOUND_S — shorter than the fastest possible failure detection, so
  the barriers dropped the leaver on the `left` news, not by detecting its absence — or, on a
  machine so loaded that the news itself takes longer to spread, than that spread time plus
  SLACK_S (survivors resume as soon as they learn of the leave);
- all survivors reach the target accuracy.
"""
import time

from faults_lib import (PROBE_INTERVAL_S, PROBE_TIMEOUT_S, SUSPICION_MULT, TARGET, Mesh,
                        Sampler, now, parse_args, start_mesh, training_args, wait_all_done,
                        wait_mid_training)

# The leaver waits up to 3 s for the news to spread (`leave`, docs/contract.md "Command line").
LEAVE_SPREAD_BOUND_S = 3.0
# The fastest failure detection could ever drop the leaver: a probe times out and the suspicion
# timeout runs at its minimum (SuspicionMult x ProbeInterval). A bsp survivor that waited for
# the leaver until failure detection would stall at least this long; one that honoured the
# `left` news stalls no longer than scheduling noise (~0.2 s here; up to ~1.4 s measured under
# AddressSanitizer on an overloaded 2-core machine).
STALL_BOUND_S = PROBE_TIMEOUT_S + SUSPICION_MULT * PROBE_INTERVAL_S
SLACK_S = 0.5  # sampling interval, one step and RPC latency


def main():
    args = parse_args()
    t0 = time.monotonic()
    common = training_args("bsp", extra=["--min-peers", "4"])
    with Mesh(args.bin, 5, common, name_prefix="lv") as mesh:
        start_mesh(mesh)
        leaver, others = mesh.agents[1], [a for a in mesh.agents if a is not mesh.agents[1]]
        names = [a.name for a in others]
        with Sampler(mesh.agents) as s:
            wait_mid_training(s, mesh.agents)
            step_at_leave = s.latest(leaver.name)["step"]
            leaver.expected_exit = True
            t_leave = now()
            r = leaver.cli("leave")
            assert r.returncode == 0, r.stderr
            rc = leaver.proc.wait(timeout=10)
            t_exit = now()
            seen = {}
            deadline = t_leave + LEAVE_SPREAD_BOUND_S + 5
            while now() < deadline and len(seen) < len(names):
                for n in names:
                    if n not in seen:
                        t = s.first_seen(n, leaver.name, ("left",), t_leave)
                        if t is not None:
                            seen[n] = t - t_leave
                        else:
                            st = s.first_seen(n, leaver.name, ("failed",), t_leave)
                            assert st is None, f"{n} lists {leaver.name} failed, not left"
                time.sleep(0.05)
            assert len(seen) == len(names), f"left not seen everywhere: {seen}"
            spread = max(seen.values())
            dt_done, finals = wait_all_done(others, TARGET, 90)
            t_end = now()
            stalls = {a.name: s.longest_stall(a.name, t_leave, t_end) for a in others}
            pre = max(s.longest_stall(a.name, t_leave - 2, t_leave)[0] for a in others)

        print(f"{leaver.name} left at step {step_at_leave}; exit code {rc} after "
              f"{t_exit - t_leave:.2f} s")
        print(f"'left' on all 4 survivors after {spread:.2f} s (bound {LEAVE_SPREAD_BOUND_S} s): "
              + ", ".join(f"{k} {v:.2f}" for k, v in seen.items()))
        print(f"longest stall in the 2 s before the leave: {pre:.2f} s")
        for a in others:
            st, at, step = stalls[a.name]
            print(f"  {a.name}: longest stall after the leave {st:.2f} s at step {step} "
                  f"({at - t_leave:+.2f} s)")
        worst = max(v[0] for v in stalls.values())
        bound = max(STALL_BOUND_S, spread + SLACK_S)
        for f in finals:
            print(f"  {f['name']}: final step {f['step']} accuracy (R^2) {f['accuracy']:.5f}")
        print(f"SUMMARY leave bsp: detection (left spread) {spread:.2f} s, longest stall "
              f"{worst:.2f} s (bound {bound:.1f} s), final accuracy (min R^2) "
              f"{min(f['accuracy'] for f in finals):.5f}")
        assert rc == 0, f"leaving agent exited {rc}"
        assert spread <= LEAVE_SPREAD_BOUND_S
        assert worst <= bound, f"a survivor stalled {worst:.2f} s after the leave"
    print(f"PASS ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
