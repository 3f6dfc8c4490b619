"""An external trainer for the bad-peer bed (tests/integration/test_bad_peer.py,
bench/bad_peer.py): an MLP in PyTorch on label-skewed shards, honest, or publishing one of four
bad models from --bad-from on (run with an interpreter that has torch and numpy).

Honest (--bad none): each step is one Adam step on its shard, then mesh.step (publish, barrier,
mix) with the mixed model taken back; at the end opt.finish() and the consensus model evaluated.
Bad: the same until step --bad-from; from then on the node trains on in private (it no longer
takes the mix) and publishes, every step and as its final model, instead of its parameters x:
  exploded  100 x                          (a trainer whose loss exploded)
  noise     x + e, |e| = |x|, e Gaussian   (a trainer on corrupted data)
  stale     x_0, its step-0 parameters     (a trainer stuck replaying its first model)
  signflip  x_a - (x - x_a), x_a its parameters at --bad-from (its update since, sign-flipped)

--task fmnist: Fashion-MNIST classes 0-3 (the dataset-fashion-mnist package), 784-256-LayerNorm-
ReLU-4 (bench/skew_consensus.py's model); --task synth: a 4-class problem from a fixed random
teacher in 32 dimensions, 32-64-4 (no dataset; the CI test's). Prints one JSON line at the end:
accuracy and loss of the final (consensus) model on the test set of every class, its CRC-32.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import meshtrain  # noqa: E402

KINDS = ("none", "exploded", "noise", "stale", "signflip")


def idx(path):
    with gzip.open(path, "rb") as f:
        d = f.read()
    magic, n = struct.unpack_from(">II", d)
    if magic == 2051:
        return np.frombuffer(d, np.uint8, n * 784, 16).reshape(n, 784)
    return np.frombuffer(d, np.uint8, n, 8)


def fmnist(data, split, classes):
    pre = "train" if split == "train" else "t10k"
    x = idx(os.path.join(data, pre + "-images-idx3-ubyte.gz"))
    y = idx(os.path.join(data, pre + "-labels-idx1-ubyte.gz"))
    keep = np.isin(y, classes)
    return (torch.from_numpy(x[keep].astype(np.float32) / 255.0),
            torch.from_numpy(y[keep].astype(np.int64)))


def synth(split, classes):
    """Points in 32 dimensions labelled by a fixed random linear teacher (4 classes)."""
    g = torch.Generator().manual_seed(7)
    teacher = torch.randn(32, 4, generator=g)
    g = torch.Generator().manual_seed(11 if split == "train" else 13)
    x = torch.randn(8000, 32, generator=g)
    y = (x @ teacher).argmax(1)
    keep = torch.isin(y, torch.tensor(classes))
    return x[keep], y[keep]


def bad_model(kind, x, x0, anchor, g):
    if kind == "exploded":
        return 100.0 * x
    if kind == "noise":
        e = torch.randn(x.shape, generator=g)
        return x + e * (x.norm() / e.norm())
    if kind == "stale":
        return x0.clone()
    return 2.0 * anchor - x  # signflip


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--task", choices=["fmnist", "synth"], default="fmnist")
    p.add_argument("--classes", default="0,1,2,3")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--bad", choices=KINDS, default="none")
    p.add_argument("--bad-from", type=int, default=50)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(1)
    classes = [int(c) for c in a.classes.split(",")]
    if a.task == "fmnist":
        x, y = fmnist(a.data, "train", classes)
        xt, yt = fmnist(a.data, "test", [0, 1, 2, 3])
    else:
        x, y = synth("train", classes)
        xt, yt = synth("test", [0, 1, 2, 3])
    torch.manual_seed(a.seed)  # one initial model everywhere
    width = 256 if a.task == "fmnist" else 64
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], width), torch.nn.LayerNorm(width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 4))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    params = list(model.parameters())
    flat = torch.nn.utils.parameters_to_vector(params).detach()
    x0 = flat.clone()
    anchor = None
    g = torch.Generator().manual_seed(1000 + a.seed + 7 * classes[0])
    gn = torch.Generator().manual_seed(99)
    mesh = meshtrain.connect(a.socket, timeout=60)
    mesh.attach(flat.numel())
    shm = torch.from_numpy(mesh.params)  # the shared memory, as a tensor (no copy)
    step = 0
    while step < a.steps and mesh.training:
        i = torch.randint(0, len(x), (a.batch,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
        opt.step()
        step += 1
        with torch.no_grad():
            flat = torch.nn.utils.parameters_to_vector(params)
            bad = a.bad != "none" and step >= a.bad_from
            if bad and anchor is None:
                anchor = flat.clone()
            shm.copy_(bad_model(a.bad, flat, x0, anchor, gn) if bad else flat)
        mesh.publish(step)
        mesh.wait_permit(step + 1)
        mixed = mesh.mix().mixed
        if mixed and not bad:
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(shm.clone(), params)
    with torch.no_grad():
        flat = torch.nn.utils.parameters_to_vector(params)
        own_acc = float((model(xt).argmax(1) == yt).float().mean())
        if anchor is not None:
            shm.copy_(bad_model(a.bad, flat, x0, anchor, gn))
        else:
            shm.copy_(flat)
    res = mesh.finish()
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(shm.clone(), params)
        out = model(xt)
        loss = float(torch.nn.functional.cross_entropy(out, yt))
        acc = float((out.argmax(1) == yt).float().mean())
    print(json.dumps({"event": "done", "bad": a.bad, "step": step, "accuracy": acc, "loss": loss,
                      "accuracy_own": own_acc, "models": res.models,
                      "crc": zlib.crc32(mesh.params.tobytes())}), flush=True)
    mesh.detach()


if __name__ == "__main__":
    main()
