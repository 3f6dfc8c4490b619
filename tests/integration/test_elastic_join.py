"""Join with state on real agents: 3 agents train fmnist-mlp; as soon as all of them
have passed 0.80 a 4th agent starts fresh and joins. Checks that:
- the joiner adopts a running node's model (its log says "adopted the model of") at a step near
  the others' instead of starting at 0;
- its first eval is >= 0.70 and the best of its first three >= 0.78 (its own initialisation
  would give ~0.10);
- no eval of the first three in the 10 s after the arrival (the seed lists the joiner) is more
  than 0.06 below its last eval before (progress-aware mixing: the joiner's model never pulls
  them back; a 50/50 mix with a fresh model would cost far more; single evals of fmnist-mlp at
  lr 0.05 swing by a few hundredths without any join);
- the first three keep stepping; their step rates over the 10 s before and after the join are
  printed.
`--join-at ACC` moves the join later (the plateau, where a drop would show).
`--acceptance` holds the run to the acceptance bars instead: the joiner at >= 0.83 within 5 s of
its start, no eval of the first three more than 0.01 below its last one before the join, and
under bsp the step rate after >= 0.8x the rate before. Measure them with `--policies bsp,pssp
--extra "--slowdown 8 --batch 256 --eval-average 0.98" --eval-every 25 --acceptance` (four
CPU-bound agents on two cores would otherwise make the 4th agent's CPU share, not the protocol,
decide the rates; single evaluations of the trained parameters swing by 0.01-0.02 from one to
the next without any join, their moving average by < 0.005). The suite runs pssp with the loose
checks.
"""
import argparse
import json
import os
import sys
import time
from statistics import mean

sys.path.insert(0, os.path.dirname(__file__))
from harness import Mesh, wait_until  # noqa: E402

DATASET = "/usr/share/datasets/fashion-mnist"


def evals(path):
    out = []
    try:
        for line in open(path):
            try:
                m = json.loads(line)
            except json.JSONDecodeError:
                continue
            if m.get("event") == "eval":
                out.append(m)
    except OSError:
        pass
    return out


def run(binary, policy, acceptance, extra=(), control=False, eval_every=50, join_at=0.80):
    common = list(extra) + ["--profile", "local", "--task", "fmnist-mlp", "--barrier", policy,
              "--sample", "2", "--staleness", "4", "--select", "random", "--fanout", "2",
              "--eval-every", str(eval_every)]
    with Mesh(binary, 4, common, name_prefix="el") as mesh:
        first, joiner = mesh.agents[:3], mesh.agents[3]
        for i, a in enumerate(mesh.agents):
            a.extra += ["--metrics-file", os.path.join(mesh.workdir, f"{a.name}.jsonl")]
            if i < 3:
                a.extra += ["--shard", f"{i}/3", "--min-peers", "2"]
            else:
                a.extra += ["--shard", "0/3"]
        seed = first[0].start()
        wait_until(lambda: seed.members() is not None, 15, what="seed up")
        for a in first[1:]:
            a.start(join=[seed.addr])

        def metrics(a):
            return evals(os.path.join(mesh.workdir, f"{a.name}.jsonl"))

        # Step samples of the first three, every 0.25 s, for the rates before and after.
        samples = []

        def sample():
            st = [a.status() for a in first]
            if all(st):
                samples.append((time.monotonic(), [s["step"] for s in st]))

        def passed(acc):
            sample()
            ev = [metrics(a) for a in first]
            return all(any(m["accuracy"] >= acc for m in e) for e in ev) or None
        # The 4th joins once the three have passed 0.80.
        wait_until(lambda: passed(join_at), 150, interval=0.25,
                   what=f"the first three at {join_at}")
        t_join = time.monotonic()
        at_join = samples[-1][1]
        # Rate before: the last 10 s before the join, from when all three were stepping.
        running = [(t, st) for t, st in samples if min(st) > 0 and t >= t_join - 10]
        t_b, st_b = running[0] if len(running) > 1 else samples[0]
        rate_before = [(y - x) / max(1e-9, t_join - t_b) for x, y in zip(st_b, at_join)]
        joined_wall = time.time()
        if not control:
            joiner.start(join=[seed.addr])
        first_eval = None
        # The arrival: when the seed lists the joiner (under load its process may take seconds
        # to start; the first three's evals until then cannot owe anything to it). The control
        # run takes the moment it was (not) started.
        last_before = n_before = t_member = None

        def arrived():
            nonlocal last_before, n_before, t_member
            if last_before is None and (control or joiner.name in (seed.members() or {})):
                evs = [metrics(a) for a in first]
                last_before = [e[-1]["accuracy"] for e in evs]
                n_before = [len(e) for e in evs]
                t_member = time.monotonic()
            return last_before is not None
        # 10 s of step rates after the join, and 10 s of evals after the arrival; on a loaded
        # machine the joiner's first evaluation (model fetch, then an eval of 10k images) may
        # take longer: wait for it up to 60 s.
        while time.monotonic() - t_join < 60:
            sample()
            if arrived() and time.monotonic() - max(t_join, t_member) >= 10 and (
                    control or first_eval is not None):
                break
            if not control and first_eval is None:
                ev = metrics(joiner)
                if ev:
                    first_eval, since = ev[0], time.time() - joined_wall
            time.sleep(0.25)
        assert last_before is not None, "the seed did not list the joiner within 60 s"
        after = samples[-1]
        rate_after = [(y - x) / (after[0] - t_join) for x, y in zip(at_join, after[1])]
        ratio = min(b and a / b for a, b in zip(rate_after, rate_before))
        # Every eval of the first three after the arrival, against its last eval before it.
        drops = []
        for a, n0, last0 in zip(first, n_before, last_before):
            later = [m["accuracy"] for m in metrics(a)[n0:]]
            drops.append(max([last0 - x for x in later], default=0.0))
        others_now = [metrics(a)[-1]["accuracy"] for a in first]
        rates = (f"step rates 10 s before/after {['%.1f' % r for r in rate_before]} / "
                 f"{['%.1f' % r for r in rate_after]} (ratio {ratio:.2f})")
        drop_text = (f"the first three at {['%.4f' % x for x in last_before]} when it joined, "
                     f"{['%.4f' % x for x in others_now]} 10 s later; largest drop of an eval "
                     f"below the last one before {max(drops):.4f}")
        if control:
            print(f"{policy} control (no joiner): {drop_text}; {rates}")
            return
        assert first_eval is not None, "the joiner did not evaluate within 60 s"
        log = open(joiner.log_path, errors="replace").read()
        adopted = "adopted the model of" in log
        # Evals carry "t": seconds since the agent started.
        early = [(round(m["accuracy"], 4), round(m["t"], 1)) for m in metrics(joiner)[:5]]
        within5 = [m["accuracy"] for m in metrics(joiner) if m["t"] <= 5.0]
        print(f"{policy}: joiner adopted={adopted}, first eval step {first_eval['step']} accuracy "
              f"{first_eval['accuracy']:.4f} ({since:.1f} s after it was started; the first "
              f"three at steps {at_join}), best within 5 s {max(within5, default=0):.4f}; "
              f"{drop_text}; {rates}; its first evals (accuracy, s) {early}")
        assert adopted, log[-2000:]
        assert first_eval["step"] >= min(at_join) - 60, (first_eval, at_join)
        # Its own initialisation would give ~0.10; single evals swing by a few hundredths.
        assert first_eval["accuracy"] >= 0.70, first_eval
        assert max(m["accuracy"] for m in metrics(joiner)[:3]) >= 0.78, early
        assert all(r > 0 for r in rate_after), rate_after
        if acceptance:
            # The acceptance bars (measured by hand with --slowdown so that four agents do not
            # share two cores; see main()).
            assert max(within5, default=0) >= 0.83, early
            assert max(drops) <= 0.01, drops
            if policy == "bsp":
                assert ratio >= 0.8, (rate_before, rate_after)
        else:
            assert max(drops) <= 0.06, drops


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--policies", default="pssp")
    p.add_argument("--extra", default="",
                   help="more agent options, e.g. '--slowdown 3' so that 4 agents do not compete "
                   "for 2 cores and the step rates show the protocol, not the CPU")
    p.add_argument("--control", action="store_true",
                   help="also run each policy without the joiner (same window) and print how "
                   "much the first three's evals and step rates move without one")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--join-at", type=float, default=0.80,
                   help="the 4th agent joins once each of the first three has evaluated at "
                   "this accuracy (default 0.80; later, e.g. 0.86, joins on the plateau "
                   "where a drop would show)")
    p.add_argument("--acceptance", action="store_true",
                   help="hold the runs to the acceptance bars (>= 0.83 within 5 s, drops <= 0.01, "
                   "bsp rate >= 0.8x); use with --extra '--slowdown 8'")
    a = p.parse_args()
    if not os.path.exists(os.path.join(DATASET, "t10k-images-idx3-ubyte.gz")):
        print(f"SKIP: Fashion-MNIST not installed in {DATASET}")
        sys.exit(77)
    for pol in a.policies.split(","):
        run(a.bin, pol, a.acceptance, extra=a.extra.split(), eval_every=a.eval_every,
            join_at=a.join_at)
        if a.control:
            run(a.bin, pol, False, extra=a.extra.split(), control=True, eval_every=a.eval_every,
                join_at=a.join_at)
    print("PASS")


if __name__ == "__main__":
    main()
