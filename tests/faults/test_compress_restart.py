"""Compressed parameter exchange on real agents, with a receiver that loses its state.

3 agents train fmnist-softmax (7850 parameters, one chunk a transfer) under pssp with
`--compress topk:0.05` — the keyed scheme: each transfer is the change since what the receiver
acknowledged last (full snapshots as int8), so both sides keep a reference (none, fp16 and int8
stream full snapshots and keep none) — random selection with fanout 2 (so every node
receives from both others). Checks that:
- parameters travel compressed: every node's status shows params_received > 0 and a
  compression_ratio >= 3.5 (changes are 5 % of the values as (index, value) pairs, full
  snapshots int8: 1 byte a value plus a 4-byte scale per 256 values, ~3.9x of float32), and the
  metrics file's sync lines carry raw_bytes > 3 x bytes;
- a receiver killed with SIGKILL and restarted without its state gets changes against a
  reference it no longer has: it refuses them (status params_need_full > 0, nothing mixed),
  the senders fall back to full snapshots, and it receives parameters again;
- nobody stalls: the other two keep stepping throughout.
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from harness import Mesh, parse_args, wait_until  # noqa: E402

DATASET = "/usr/share/datasets/fashion-mnist"


def main():
    args = parse_args()
    if not os.path.exists(os.path.join(DATASET, "t10k-images-idx3-ubyte.gz")):
        print(f"SKIP: Fashion-MNIST not installed in {DATASET} (dataset-fashion-mnist)")
        sys.exit(77)
    common = ["--profile", "local", "--task", "fmnist-softmax", "--barrier", "pssp",
              "--sample", "1", "--staleness", "8", "--select", "random", "--fanout", "2",
              "--compress", "topk:0.05", "--eval-every", "200", "--min-peers", "2"]
    with Mesh(args.bin, 3, common, name_prefix="cz") as mesh:
        for i, a in enumerate(mesh.agents):
            a.extra += ["--shard", f"{i}/3", "--metrics-file",
                        os.path.join(mesh.workdir, f"{a.name}.jsonl")]
        seed = mesh.agents[0].start()
        wait_until(lambda: seed.members() is not None, 15, what="seed up")
        for a in mesh.agents[1:]:
            a.start(join=[seed.addr])

        def all_received(n=20):
            sts = [a.status() for a in mesh.agents]
            if any(s is None for s in sts):
                return None
            return sts if all(s["params_received"] >= n for s in sts) else None
        dt, sts = wait_until(all_received, 90, interval=0.5,
                             what="every node received 20 compressed snapshots")
        print(f"every node received >= 20 snapshots after {dt:.1f} s")
        for s in sts:
            print(f"  {s['name']}: step {s['step']} compress {s['compress']} ratio "
                  f"{s['compression_ratio']:.2f} sent {s['params_bytes_sent']} raw "
                  f"{s['params_bytes_raw']} need_full {s['params_need_full']}")
            assert s["compress"] == "topk:0.05", s
            assert s["compression_ratio"] >= 3.5, s
            assert s["params_need_full"] == 0, s
        victim = mesh.agents[2]
        victim.signal(signal.SIGKILL)
        victim.proc.wait(timeout=10)
        before = {a.name: a.status()["step"] for a in mesh.agents[:2]}
        os.remove(os.path.join(mesh.workdir, f"{victim.name}.jsonl"))
        victim.start(join=[seed.addr])

        def recovered():
            s = victim.status()
            if s is None:
                return None
            return s if s["params_need_full"] >= 1 and s["params_received"] >= 5 else None
        dt, s = wait_until(recovered, 90, interval=0.5,
                           what=f"{victim.name} refused a change and then received full models")
        print(f"restarted {victim.name}: need_full {s['params_need_full']}, params_received "
              f"{s['params_received']} after {dt:.1f} s")
        for a in mesh.agents[:2]:
            st = a.status()
            assert st["step"] > before[a.name], (a.name, before[a.name], st["step"])
        for a in mesh.agents[:2]:
            lines = [json.loads(x) for x in open(os.path.join(mesh.workdir, f"{a.name}.jsonl"))]
            syncs = [x for x in lines if x["event"] == "sync" and x["fanout"] > 0]
            assert syncs, a.name
            assert all(x["raw_bytes"] > 3 * x["bytes"] for x in syncs), syncs[:3]
    print("PASS")


if __name__ == "__main__":
    main()
