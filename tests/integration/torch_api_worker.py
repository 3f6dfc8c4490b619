"""A trainer for tests/integration/test_torch_checkpoint.py: a small MLP with BatchNorm on fixed
synthetic data (batch i is the same in every run), AdamW inside MeshOptimizer(sync_every=4,
model=net: parameters, BatchNorm statistics and the default gradient correction travel), an
outer step (--outer: a torch SGD with Nesterov momentum given as an optimizer, or the
"nesterov" shortcut), and a CosineAnnealingLR driving the inner lr through the MeshOptimizer.

Trains local steps [--start, --start + --steps); --load restores the model, the optimizer and
the scheduler from a checkpoint first, --save writes them at the end. Prints one JSON line:
"done" with the parameters' CRC-32 before finish, the lr after every step, the losses, the
bytes the mesh copied and what finish() returned (mesh.finish(model): the module alone, while
the trainer attached parameters, buffers and corrections).
"""
import argparse
import json
import math
import os
import zlib

import torch

import meshtrain
import meshtrain.torch as mt

p = argparse.ArgumentParser()
p.add_argument("--socket", required=True)
p.add_argument("--steps", type=int, required=True)
p.add_argument("--start", type=int, default=0)
p.add_argument("--total", type=int, default=20, help="the scheduler's T_max")
p.add_argument("--outer", choices=["torch", "named"], default="torch")
p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
p.add_argument("--node", type=int, default=0)
p.add_argument("--save")
p.add_argument("--load")
a = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(7)
dtype = getattr(torch, a.dtype)
net = torch.nn.Sequential(torch.nn.Linear(6, 24), torch.nn.BatchNorm1d(24), torch.nn.Tanh(),
                          torch.nn.Linear(24, 3)).to(dtype)
inner = torch.optim.AdamW(net.parameters(), lr=1e-2)
if a.outer == "torch":
    outer = dict(outer_optimizer=torch.optim.SGD(net.parameters(), lr=0.7, momentum=0.9,
                                                 nesterov=True))
else:
    outer = dict(outer="nesterov", outer_lr=0.7, outer_momentum=0.9)
mesh = meshtrain.connect(a.socket, timeout=30)
opt = mt.MeshOptimizer(inner, mesh, sync_every=4, model=net, **outer)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.total)
if a.load:
    ckpt = torch.load(a.load)
    net.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    sched.load_state_dict(ckpt["sched"])

g = torch.Generator().manual_seed(11 + a.node)
xs = torch.randn(64, 6, generator=g)
ys = (xs[:, 0] > 0).long() + (xs[:, 1] > 0.5 * a.node).long()


def batch(i):
    idx = torch.randperm(64, generator=torch.Generator().manual_seed(1000 + i))[:16]
    return xs[idx].to(dtype), ys[idx]


def full_loss():
    net.eval()
    with torch.no_grad():
        loss = float(torch.nn.functional.cross_entropy(net(xs.to(dtype)).float(), ys))
    net.train()
    return loss


def crc(tensors):
    return zlib.crc32(torch.cat([t.detach().reshape(-1).float() for t in tensors]).numpy()
                      .tobytes())


loss0 = full_loss()
lrs = []
for i in range(a.start, a.start + a.steps):
    x, y = batch(i)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x).float(), y).backward()
    opt.step()
    sched.step()
    lrs.append(inner.param_groups[0]["lr"])
out = {"event": "done", "is_optimizer": isinstance(opt, torch.optim.Optimizer),
       "crc": crc(list(net.parameters()) + list(net.buffers())), "lrs": lrs, "loss0": loss0,
       "loss": full_loss(), "shared": opt.shared, "layout": opt.layout.size,
       "num_params": sum(q.numel() for q in net.parameters()), "syncs": opt.syncs,
       "cosine": [0.5 * 1e-2 * (1 + math.cos(math.pi * (t + 1) / a.total))
                  for t in range(a.start, a.start + a.steps)]}
if a.save:
    torch.save({"model": net.state_dict(), "opt": opt.state_dict(),
                "sched": sched.state_dict()}, a.save + ".tmp")
    os.replace(a.save + ".tmp", a.save)
out["copied_bytes"] = mesh.copied_bytes
try:  # another arrangement of the vector than the one attached: refused, naming both
    mesh.report(0.5, 0.5, model=torch.nn.Linear(3, 3))
    out["other_layout"] = "accepted"
except meshtrain.MeshError as e:
    out["other_layout"] = str(e)
res = mesh.finish(net)  # the module alone: bound to what the trainer attached
out["finish"] = {"models": res.models, "crc32": res.crc32, "step": res.step}
out["crc_finished"] = crc(net.parameters())
mesh.detach()
print(json.dumps(out), flush=True)
