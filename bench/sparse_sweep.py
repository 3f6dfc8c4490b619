#!/usr/bin/env python3
"""The char-LM's mesh recipe in one process, no agents and no bed: N nodes (a thread each) with
MeshOptimizer over an in-process mesh whose sync leaves the exact mean of the published ranges
(tests/integration/fake_mesh.py), for choosing compress / H / fragments / outer lr and momentum
/ overlap before a bed run (bench/netbed_charlm.py): the same model, shards, batches and
schedule as netbed_charlm's command in docs/benchmarks.md, at a few minutes a setting.

Prints one JSON line: the nodes' mean validation loss (bpc) at every 300th step and the last,
and the loss of the mean of the nodes' final models ("consensus").
Example: /usr/bin/python3 bench/sparse_sweep.py --compress sparse:0.03:2 --h 100 --fragments 2 \\
           --outer-lr 1.2 --outer-momentum 0.6 --overlap 15
Needs numpy and torch (Debian: python3-numpy, python3-torch) and the fortunes text.
"""
import argparse
import copy
import json
import os
import sys
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
for sub in ("examples", "python", "tests/integration"):
    sys.path.insert(0, os.path.join(ROOT, sub))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import meshtrain.torch as mt  # noqa: E402
import torch_charlm as T  # noqa: E402
from fake_mesh import FakeMesh, run_nodes  # noqa: E402


class SharedFakeMesh(FakeMesh):
    """FakeMesh with the layout in a "shared memory" (a numpy vector) and the split publish / mix
    calls overlap=True|K makes: publish keeps the range, mix leaves the nodes' mean in it."""
    params = None
    resumed = False
    num_params = 0
    _step = 0

    def attach(self, layout):
        self.params = np.zeros(layout.size, np.float32)
        self.num_params = layout.size
        return False

    def _mark_shared(self):
        pass

    @property
    def step_count(self):
        return self._step

    def publish(self, step, span):
        self._step = step
        self.shared[self.i] = (span, self.params[span[0]:span[1]].copy())

    def mix(self):
        self.barrier.wait()  # every node published this sync
        (lo, hi), _ = self.shared[self.i]
        mean = sum(v for _, v in self.shared) / len(self.shared)
        self.barrier.wait()  # every node read the others' before any publishes again
        self.params[lo:hi] = mean


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--steps", type=int, default=900, help="local steps (the cosine's length)")
    p.add_argument("--compress", help="sparse:F:B (default: the models' mean, uncompressed)")
    p.add_argument("--h", type=int, default=200, help="sync_every")
    p.add_argument("--fragments", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4, help="inner AdamW lr")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--overlap", type=int, nargs="?", const=-1, default=0, metavar="K",
                   help="overlap=K (without K: overlap=True); needs --compress")
    s = p.parse_args()
    torch.set_num_threads(1)
    a = T.parse_args(["--layers", "4", "--d-model", "256", "--heads", "4", "--context", "32",
                      "--batch", "1", "--val-windows", "64", "--warmup", "20", "--schedule",
                      "cosine", "--shard-mode", "interleaved", "--lr", str(s.lr),
                      "--max-steps", str(s.steps)])
    text = T.load_text(a.data)
    n_val = int(len(text) * a.val_fraction)
    train, val = text[:len(text) - n_val], text[len(text) - n_val:]
    vx, vy = T.val_windows(val, a.val_windows, a.context)
    torch.manual_seed(a.seed)
    base = T.CharLM(a.layers, a.d_model, a.heads, a.context)
    models = [copy.deepcopy(base) for _ in range(s.nodes)]
    shared = [None] * s.nodes
    barrier = threading.Barrier(s.nodes, timeout=600)
    opts, scheds = [], []
    for i, m in enumerate(models):
        inner = torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=a.weight_decay)
        mesh = (SharedFakeMesh if s.overlap else FakeMesh)(shared, barrier, i)
        opts.append(mt.MeshOptimizer(
            inner, mesh, sync_every=s.h, fragments=s.fragments, share_memory=bool(s.overlap),
            outer="nesterov", outer_lr=s.outer_lr, outer_momentum=s.outer_momentum, model=m,
            compress=s.compress, overlap=True if s.overlap == -1 else s.overlap))
        scheds.append(torch.optim.lr_scheduler.LambdaLR(inner, lambda st: T.lr_factor(a, st)))
    data = [T.shard_sampler(a, train, i, s.nodes) for i in range(s.nodes)]
    gens = [torch.Generator().manual_seed(1000 * (a.seed + 1) + i) for i in range(s.nodes)]
    evals = {}
    t0 = time.time()

    def node(i):
        tr, starts_of, n_starts, _ = data[i]
        for step in range(1, s.steps + 1):
            opts[i].zero_grad()
            T.batch_loss(models[i], tr, starts_of, n_starts, gens[i], a).backward()
            torch.nn.utils.clip_grad_norm_(models[i].parameters(), 1.0)
            opts[i].step()
            scheds[i].step()
            if step % 300 == 0 or step == s.steps:
                evals.setdefault(step, {})[i] = T.evaluate(models[i], vx, vy)[0]

    run_nodes(s.nodes, barrier, node, timeout=None)
    mean = copy.deepcopy(base)
    with torch.no_grad():
        for q, *qs in zip(mean.parameters(), *(m.parameters() for m in models)):
            q.copy_(torch.stack([x.detach() for x in qs]).mean(0))
    print(json.dumps({**vars(s), "bpc": {k: round(sum(v.values()) / len(v), 4)
                                         for k, v in sorted(evals.items())},
                      "consensus": round(T.evaluate(mean, vx, vy)[0], 4),
                      "seconds": round(time.time() - t0, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
