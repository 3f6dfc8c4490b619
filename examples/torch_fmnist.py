#!/usr/bin/env python3
"""A PyTorch CNN on Fashion-MNIST, trained across a meshtrain mesh.

One process per agent: start each agent with `--trainer external --trainer-socket PATH`, then

    python3 examples/torch_fmnist.py --socket PATH --shard 0/4

(or both at once: `meshtrain run AGENT-OPTIONS -- python3 examples/torch_fmnist.py --shard 0/4`)
trains on shard 0 of 4 and, through meshtrain.torch.MeshOptimizer, publishes its parameters,
waits for the agent's barrier and mixes the peers' models every --sync-every steps. The same
script runs without a mesh (no --socket: one process on all the data) or under PyTorch DDP
(--ddp RANK/WORLD --ddp-port P: gloo on loopback, init_method tcp://127.0.0.1:P, gradients
all-reduced every step), so bench/torch_vs_ddp.py can compare the two.

Data: the Debian package dataset-fashion-mnist (IDX .gz files in --data). Output: one JSON line
per evaluation ({"event":"eval","step","loss","accuracy","samples","t","elapsed","eval_total":
seconds spent evaluating so far}), {"event":"reached",...,"crc"} the first time the accuracy on
the whole test set reaches --target (the script then stops unless --keep-going; "crc": CRC-32 of
the parameters), and {"event":"taken","step","crc","t"} when a finished peer's final model
replaced the parameters (mesh with agent --target-accuracy). Periodic
evaluations use the first --eval-subset test images and confirm on the whole set.
With --eval-average D the evaluated (and reported, final) model is the moving average of the
parameters along training, as with the agent's own --eval-average for its built-in trainer.
With --eval-turns the nodes of a mesh evaluate in turns (the mesh as a whole every
--eval-every steps); a node that meets the target hands its final model to the others (agent
--target-accuracy), which take it over and confirm it with their own evaluation at once.
Needs numpy and torch (Debian: python3-numpy, python3-torch).
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack_from(">II", data)
    if magic == 2051:
        rows, cols = struct.unpack_from(">II", data, 8)
        return np.frombuffer(data, np.uint8, n * rows * cols, 16).reshape(n, 1, rows, cols)
    if magic == 2049:
        return np.frombuffer(data, np.uint8, n, 8)
    raise ValueError(f"{path}: not an IDX image or label file")


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = load_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = load_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    """conv3x3(16) relu pool, conv3x3(32) relu pool, dense 64, dense 10: 106 k parameters."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.f1 = nn.Linear(32 * 7 * 7, 64)
        self.f2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def evaluate(model, x, y):
    """Summed loss and number correct over (x, y)."""
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            out = model(x[i:i + 1000])
            loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
    model.train()
    return loss, correct


def model_crc(model):
    """CRC-32 of the parameters (float32, in order): names one exact model across processes."""
    return zlib.crc32(b"".join(t.detach().reshape(-1).numpy().tobytes()
                               for t in model.parameters()))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--socket", default=os.environ.get("MESHTRAIN_SOCKET"),
                   help="the agent's --trainer-socket (default: $MESHTRAIN_SOCKET, which "
                        "`meshtrain run` sets; neither: no mesh)")
    p.add_argument("--ddp", metavar="RANK/WORLD", help="run as one rank of PyTorch DDP (gloo)")
    p.add_argument("--ddp-port", type=int, default=29500)
    p.add_argument("--shard", default="0/1", help="train on shard I of N (I/N)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--sync-every", type=int, default=1, help="local steps per mesh.step")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-turns", action="store_true",
                   help="mesh: the nodes evaluate in turns, so that the mesh as a whole evaluates "
                        "every --eval-every steps: node I of N (--shard I/N) at the steps that "
                        "are multiples of N x eval-every plus I x eval-every (a finished peer's "
                        "model, taken over, is evaluated at once whatever the turn)")
    p.add_argument("--eval-subset", type=int, default=2000,
                   help="periodic evaluations use the first N test images; the whole test set "
                        "confirms a result at or above --target (0 = always the whole set)")
    p.add_argument("--eval-average", type=float, default=0, metavar="D",
                   help="evaluate (and report as the final model) the moving average of the "
                   "parameters, decay D per step, e.g. 0.98; 0 = the parameters as trained")
    p.add_argument("--target", type=float, default=0.88)
    p.add_argument("--keep-going", action="store_true", help="train on after --target")
    p.add_argument("--max-steps", type=int, default=20000)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0,
                   help="model initialisation (same everywhere) and sample order")
    return p.parse_args()


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    rank, world = 0, 1
    if a.ddp:
        rank, world = (int(v) for v in a.ddp.split("/"))
        a.shard = f"{rank}/{world}"
    shard, shards = (int(v) for v in a.shard.split("/"))
    x, y = load(a.data, "train")
    x, y = x[shard::shards], y[shard::shards]
    tx, ty = load(a.data, "test")
    torch.manual_seed(a.seed)  # one initial model on every node (gossip averaging assumes it)
    model = Net()
    if not 0 <= a.eval_average < 1:
        sys.exit("--eval-average: a decay in [0, 1)")
    base = model  # the module itself (DDP wraps it)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    mesh = None
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.ddp_port}", rank=rank,
                                world_size=world)
        model = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    elif a.socket:
        import meshtrain
        import meshtrain.torch
        mesh = meshtrain.connect(a.socket)
        opt = meshtrain.torch.MeshOptimizer(opt, mesh, sync_every=a.sync_every)
    average = None
    if a.eval_average > 0:
        import meshtrain.torch  # ModelAverage; the package needs no agent
        # With a mesh: restarted when the mesh replaced the parameters (mesh.adoptions).
        average = meshtrain.torch.ModelAverage(base, a.eval_average, mesh)
    gen = torch.Generator().manual_seed(1000 * (a.seed + 1) + shard)
    start = time.time()
    step = mesh.step_count if mesh else 0
    order, pos = torch.randperm(len(x), generator=gen), 0
    reached = False
    finals_seen = mesh.finals_taken if mesh else 0  # finished peers' models taken over
    eval_total = 0.0  # seconds spent evaluating (reported, so benches can leave it out)
    while step < a.max_steps:
        if pos + a.batch > len(x):
            order, pos = torch.randperm(len(x), generator=gen), 0
        idx = order[pos:pos + a.batch]
        pos += a.batch
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        step = mesh.step_count + opt.local_steps % a.sync_every if mesh else step + 1
        if average is not None:
            average.update()
        evaluated = average.model if average is not None else model
        # A finished peer's final model was taken over (agent --target-accuracy): evaluate now.
        finished_in = mesh is not None and mesh.finals_taken != finals_seen
        if finished_in:
            finals_seen = mesh.finals_taken
            # The parameters are now exactly the finished peer's evaluated model (the CRC in its
            # "reached" line); this node confirms it with its own evaluation below.
            now = time.time()
            print(json.dumps({"event": "taken", "step": step, "crc": model_crc(model), "t": now,
                              "elapsed": round(now - start, 2)}), flush=True)
        turn = step % a.eval_every == 0 and (
            not (mesh and a.eval_turns) or (step // a.eval_every) % shards == shard)
        if not turn and not finished_in:
            continue
        stop = torch.zeros(1)
        if rank == 0 or not a.ddp:
            t_eval = time.time()
            # A finished peer's model met the target on the whole set: check that at once.
            n = len(tx) if finished_in or not 0 < a.eval_subset < len(tx) else a.eval_subset
            loss_sum, correct = evaluate(evaluated, tx[:n], ty[:n])
            if n < len(tx) and correct / n >= a.target:
                # Confirm on the whole set: the subset's sums count, the rest is added.
                more_loss, more_correct = evaluate(evaluated, tx[n:], ty[n:])
                loss_sum, correct, n = loss_sum + more_loss, correct + more_correct, len(tx)
            test_loss, acc = loss_sum / n, correct / n
            now = time.time()
            eval_total += now - t_eval
            times = {"t": now, "elapsed": round(now - start, 2),
                     "eval_total": round(eval_total, 2)}
            print(json.dumps({"event": "eval", "step": step, "loss": round(test_loss, 4),
                              "accuracy": acc, "samples": n, **times}), flush=True)
            if mesh:
                mesh.report(test_loss, acc, step=mesh.step_count, model=evaluated)
            if acc >= a.target and n == len(tx) and not reached:
                reached = True
                print(json.dumps({"event": "reached", "step": step, "accuracy": acc,
                                  "crc": model_crc(evaluated), **times}), flush=True)
                if not a.keep_going:
                    stop[0] = 1
        if a.ddp:
            import torch.distributed as dist
            dist.all_reduce(stop)  # rank 0 decides for everyone (one model)
        if stop[0] > 0 or (mesh and not mesh.training):
            break
    if mesh:
        mesh.detach()
    if a.ddp:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
