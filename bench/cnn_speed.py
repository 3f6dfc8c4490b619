#!/usr/bin/env python3
"""Single-process CNN training speed: meshtrain (Eigen) against PyTorch CPU, side by side.

The same network (fmnist-cnn: conv(16,5),relu,maxpool(2),conv(32,5),relu,maxpool(2),flatten,
dense(128),relu,dense(10)), the same batch, SGD with momentum, Fashion-MNIST from the Debian
package. Runs alternate (meshtrain, torch, meshtrain, torch, ...) so that machine noise hits both;
each run reports training samples/s over --steps steps (after --warmup steps that are not
timed for torch; meshtrain's figure covers all its steps, which only favours torch).

    /usr/bin/python3 bench/cnn_speed.py [--threads 1,2] [--steps 300] [--repeat 3] [--batch 64]

Prints a table with the median samples/s of each and the ratio meshtrain / torch per thread count
(the target: >= 0.7). Needs python3-torch and python3-numpy (scripts/install-deps.sh).
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist"


def torch_run(threads, steps, warmup, batch):
    """Runs in a child process (torch thread settings are per process)."""
    code = f"""
import gzip, json, time, numpy as np, torch, torch.nn as nn
torch.set_num_threads({threads})
torch.manual_seed(1)
def idx(path, off):
    with gzip.open(path) as f: return np.frombuffer(f.read(), np.uint8, offset=off)
x = idx('{FMNIST}/train-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
y = idx('{FMNIST}/train-labels-idx1-ubyte.gz', 8).astype(np.int64)
x = (x - x.mean()) / x.std()
x, y = torch.from_numpy(x), torch.from_numpy(y)
net = nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
                    nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
perm = torch.randperm(x.shape[0])
def step(i):
    idx = perm[(i * {batch}) % (x.shape[0] - {batch}):][:{batch}]
    opt.zero_grad(); loss = loss_fn(net(x[idx]), y[idx]); loss.backward(); opt.step()
for i in range({warmup}): step(i)
t = time.perf_counter()
for i in range({steps}): step({warmup} + i)
dt = time.perf_counter() - t
print(json.dumps({{"samples_per_s": {steps} * {batch} / dt}}))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def meshtrain_run(binary, threads, steps, batch):
    out = subprocess.run([binary, "train", "--model", "fmnist-cnn", "--steps", str(steps),
                          "--batch", str(batch), "--threads", str(threads), "--lr", "0.05",
                          "--format", "json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "cli", "meshtrain"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("cnn_speed: PyTorch is missing (apt-get install python3-torch; run with /usr/bin/python3)")
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        mesh, torch_sps = [], []
        for r in range(args.repeat):
            mesh.append(meshtrain_run(args.binary, threads, args.steps, args.batch))
            torch_sps.append(torch_run(threads, args.steps, args.warmup, args.batch))
            print(f"threads {threads} run {r + 1}: meshtrain {mesh[-1]:.0f} samples/s, "
                  f"torch {torch_sps[-1]:.0f} samples/s", file=sys.stderr, flush=True)
        m, t = statistics.median(mesh), statistics.median(torch_sps)
        rows.append((threads, m, t, m / t))
    print(f"\nfmnist-cnn training, batch {args.batch}, {args.steps} steps, median of {args.repeat}")
    print(f"{'threads':>7} {'meshtrain samples/s':>20} {'torch samples/s':>16} {'ratio':>6}")
    for threads, m, t, ratio in rows:
        print(f"{threads:>7} {m:>20.0f} {t:>16.0f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
