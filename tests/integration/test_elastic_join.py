"""Join with state on real agents (issue 14): 3 agents train fmnist-mlp; once all of them are at
>= 0.80 a 4th agent starts fresh and joins. Checks that:
- the joiner adopts a running node's model (its log says "adopted the model of") at a step near
  the others' instead of starting at 0;
- its first eval is >= 0.70 and the best of its first three >= 0.80 and within 0.03 of the
  others' latest accuracy (its own initialisation would give ~0.10; single evals swing);
- none of the first three loses more than 0.03 in a 3-eval moving average after the joiner arrived,
  against the average of its last 3 evals before (progress-aware mixing: the joiner's model never
  pulls them back; single evals of fmnist-mlp at lr 0.05 swing by 0.02-0.06 from one to the next
  without any join, so single evals are not compared: a CI run saw one at -0.057 with no harm);
- the first three keep stepping (reported: their step rate in the 10 s before and after the join).
`--policies bsp,pssp` runs both (the issue's acceptance figures; the suite runs pssp).
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


def run(binary, policy, strict, extra=(), control=False):
    common = list(extra) + ["--profile", "local", "--task", "fmnist-mlp", "--barrier", policy,
              "--sample", "2", "--staleness", "4", "--select", "random", "--fanout", "2",
              "--eval-every", "50"]
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

        def all_at(acc):
            ev = [metrics(a) for a in first]
            return all(e and e[-1]["accuracy"] >= acc for e in ev) or None
        wait_until(lambda: all_at(0.80), 150, interval=0.5, what="the first three at 0.80")
        before = [a.status()["step"] for a in first]
        time.sleep(10)
        at_join = [a.status()["step"] for a in first]
        rate_before = [(y - x) / 10 for x, y in zip(before, at_join)]
        acc_before = [mean([m["accuracy"] for m in metrics(a)[-3:]]) for a in first]
        last_before = [metrics(a)[-1]["accuracy"] for a in first]
        n_before = [len(metrics(a)) for a in first]
        t_join = time.time()
        if control:
            # No joiner: the same window, to show how much the evals move without one.
            time.sleep(10)
        else:
            joiner.start(join=[seed.addr])
            dt, ev = wait_until(lambda: metrics(joiner) or None, 60, interval=0.2,
                                what="the joiner's first eval")
            first_eval = ev[0]
            since = time.time() - t_join
            log = open(joiner.log_path, errors="replace").read()
            adopted = "adopted the model of" in log
            time.sleep(max(0.0, 10 - (time.time() - t_join)))
        after = [a.status()["step"] for a in first]
        rate_after = [(y - x) / (time.time() - t_join) for x, y in zip(at_join, after)]
        drops, single_drops = [], []
        for a, n0, acc0, last0 in zip(first, n_before, acc_before, last_before):
            later = [m["accuracy"] for m in metrics(a)[n0:]]
            windows = [mean(later[i:i + 3]) for i in range(max(0, len(later) - 2))]
            drops.append(max([acc0 - x for x in windows], default=0.0))
            single_drops.append(max([last0 - x for x in later], default=0.0))
        others_now = [metrics(a)[-1]["accuracy"] for a in first]
        rates = (f"step rates before/after {['%.1f' % r for r in rate_before]} / "
                 f"{['%.1f' % r for r in rate_after]} "
                 f"(ratio {min(b and a / b for a, b in zip(rate_after, rate_before)):.2f})")
        drop_text = (f"largest drop of the first three (3-eval averages) {max(drops):.4f}, "
                     f"single evals against the last one before {max(single_drops):.4f}")
        if control:
            print(f"{policy} control (no joiner): first three at "
                  f"{['%.4f' % x for x in others_now]}, {drop_text}; {rates}")
            return
        print(f"{policy}: joiner adopted={adopted}, first eval step {first_eval['step']} accuracy "
              f"{first_eval['accuracy']:.4f} (seen {since:.1f} s after its start), first three "
              f"at {['%.4f' % x for x in others_now]}, {drop_text} after the join; {rates}")
        assert adopted, log[-2000:]
        assert first_eval["step"] >= min(at_join) - 60, (first_eval, at_join)
        # Its own initialisation would give ~0.10. One eval of a node 40 steps after adopting
        # swings like any single eval (a CI run saw 0.8036 then 0.8732 half a second later):
        # the best of its first three evals is held to the others' level.
        early = [m["accuracy"] for m in metrics(joiner)[:3]]
        print(f"joiner's first three evals {['%.4f' % x for x in early]}")
        assert first_eval["accuracy"] >= 0.70, first_eval
        assert max(early) >= 0.80, early
        assert max(early) >= min(others_now) - 0.03, (early, others_now)
        if strict:
            assert max(drops) <= 0.03, drops
            assert all(r > 0 for r in rate_after), rate_after


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
    a = p.parse_args()
    if not os.path.exists(os.path.join(DATASET, "t10k-images-idx3-ubyte.gz")):
        print(f"SKIP: Fashion-MNIST not installed in {DATASET}")
        sys.exit(77)
    for pol in a.policies.split(","):
        run(a.bin, pol, strict=True, extra=a.extra.split())
        if a.control:
            run(a.bin, pol, strict=False, extra=a.extra.split(), control=True)
    print("PASS")


if __name__ == "__main__":
    main()
