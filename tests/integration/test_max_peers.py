"""--max-peers on real agents: 3 agents under bsp with --max-peers 2 train fmnist-mlp; a 4th, 50x
slower agent joins later. Checks that:
- the first three report it as an observer (status: max_peers 2, barrier_peers 2, observers
  [the slow one]) and are not held back by it: under bsp they run ahead of its step (waiting would hold them within one);
- it still syncs: it receives parameters, and its peers receive its parameters;
- when one of the first three leaves, the slow agent takes the free place in the others'
  barriers (observers empty, barrier_peers 2) and bsp then holds them: far ahead of it, they take
  at most one more step while it keeps stepping.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import Mesh, parse_args, wait_until  # noqa: E402

DATASET = "/usr/share/datasets/fashion-mnist"


def main():
    args = parse_args()
    if not os.path.exists(os.path.join(DATASET, "t10k-images-idx3-ubyte.gz")):
        print(f"SKIP: Fashion-MNIST not installed in {DATASET}")
        sys.exit(77)
    common = ["--profile", "local", "--task", "fmnist-mlp", "--barrier", "bsp",
              "--max-peers", "2", "--eval-every", "1000", "--select", "random", "--fanout", "3"]
    with Mesh(args.bin, 4, common, name_prefix="mp") as mesh:
        first, slow = mesh.agents[:3], mesh.agents[3]
        for i, a in enumerate(first):
            a.extra += ["--shard", f"{i}/4", "--min-peers", "2"]
        slow.extra += ["--shard", "3/4", "--slowdown", "50", "--join-state", "off"]
        seed = first[0].start()
        wait_until(lambda: seed.members() is not None, 15, what="seed up")
        for a in first[1:]:
            a.start(join=[seed.addr])

        def steps(agents):
            sts = [a.status() for a in agents]
            return None if any(s is None for s in sts) else sts
        wait_until(lambda: (lambda s: s and all(x["step"] >= 20 for x in s))(steps(first)), 60,
                   interval=0.2, what="the first three training")
        slow.start(join=[seed.addr])

        def observed():
            s = steps(first)
            return s if s and all(x["observers"] == [slow.name] for x in s) else None
        _, sts = wait_until(observed, 30, interval=0.2, what="the slow agent seen as observer")
        for x in sts:
            assert x["max_peers"] == 2 and x["barrier_peers"] == 2, x
        time.sleep(4)
        s_slow = slow.status()
        sts = steps(first)
        fast = [x["step"] for x in sts]
        print(f"with the slow agent observed: first three at steps {fast}, slow at "
              f"{s_slow['step']} (params received {s_slow['params_received']})")
        # bsp waiting for it would keep them within 1 step of it.
        assert min(fast) > s_slow["step"] + 10, (fast, s_slow["step"])
        assert s_slow["params_received"] > 0, s_slow
        # Its own barrier waits for two of its three peers; the third is its observer.
        assert len(s_slow["observers"]) == 1 and s_slow["barrier_peers"] == 2, s_slow
        received_before = [x["params_received"] for x in sts]

        # One of the first three leaves: the slow agent takes its place in the others' barriers.
        leaver = first[2]
        leaver.cli("leave")
        stay = first[:2]

        def promoted():
            s = steps(stay)
            return s if s and all(x["observers"] == [] and x["barrier_peers"] == 2
                                  for x in s) else None
        wait_until(promoted, 30, interval=0.2, what="the slow agent promoted")
        # bsp now holds the remaining two: they are far ahead of the slow agent, so from here on
        # they take at most one more step while it keeps stepping.
        time.sleep(1)
        sts0 = steps(stay + [slow])
        time.sleep(3)
        sts = steps(stay + [slow])
        moved = [b["step"] - a["step"] for a, b in zip(sts0, sts)]
        print(f"after {leaver.name} left: steps {[x['step'] for x in sts0]} -> "
              f"{[x['step'] for x in sts]} in 3 s, params received by the first two "
              f"{[x['params_received'] for x in sts[:2]]} (were {received_before[:2]})")
        assert all(m <= 1 for m in moved[:2]), (sts0, sts)
        assert moved[2] >= 1, (sts0, sts)
        assert all(x["params_received"] > r for x, r in zip(sts[:2], received_before)), sts
    print("PASS")


if __name__ == "__main__":
    main()
