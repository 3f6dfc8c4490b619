#!/usr/bin/env python3
"""A character-level transformer language model on the text of Debian's fortunes package,
trained alone, as a PyTorch DDP rank (gloo) or across a meshtrain mesh.

Data: the plain-text fortune files in --data (default /usr/share/games/fortunes, package
`fortunes`; the .dat/.u8 index files are skipped), read in sorted name order and concatenated.
Backspace overstrikes are resolved, tabs become spaces, other bytes outside printable ASCII are
dropped: 96 symbols (newline and ASCII 32..126), so the vocabulary never depends on the data.
The last --val-fraction (5 %) of the text is the validation part; the rest is the training part,
which --shard I/N splits among N nodes. --shard-mode contiguous (default) cuts it into N
contiguous pieces (node I trains on piece I: the pieces come from different fortune files, so
the nodes' data differ in style, not only in sample order); --shard-mode interleaved cuts it
into blocks of 4096 characters and gives node I blocks I, I+N, I+2N, ... (as PyTorch's
DistributedSampler deals out shuffled samples: every node sees every style).
Validation loss: mean cross-entropy in bits per character over a fixed set of --val-windows
windows of --context characters spread evenly over the validation part (every position of a
window is predicted), the same windows in every run and every process.

Model: GPT-style, pre-LayerNorm, learned positions, causal self-attention, GELU MLP (4x),
output tied to the input embedding. Default 4 layers, d_model 256, 4 heads, context 128
(3.2 M parameters); --layers/--d-model/--heads/--context change it. Inner optimizer AdamW
(--lr, --weight-decay, linear warm-up over --warmup steps, then --schedule constant or cosine,
gradients clipped to norm 1).

Four modes, three as examples/torch_fmnist.py:
  alone   no --socket, no --ddp: one process on its shard (default all the training text).
  DDP     --ddp RANK/WORLD --ddp-addr HOST --ddp-port P: one rank of PyTorch DDP with gloo
          (init_method tcp://HOST:P, HOST = rank 0's address), gradients all-reduced every step;
          rank I trains on shard I/WORLD; rank 0 evaluates the one model and decides the stop.
          Across hosts, set GLOO_SOCKET_IFNAME to the interface that reaches the others (gloo
          otherwise binds to the address the host name resolves to, often loopback).
  mesh    --socket PATH (an agent started with --trainer external --trainer-socket PATH):
          meshtrain.torch.MeshOptimizer wraps AdamW; every --sync-every local steps one mesh
          step (publish, barrier, mix) and the --outer step (avg | sgd | nesterov with
          --outer-lr, --outer-momentum: DiLoCo). Every node evaluates its own model, reports it
          to its agent (loss in nats, next-character accuracy) and stops at --target-bpc.
          The trainer is silent towards its agent for H steps: start the agents with a
          --trainer-timeout longer than H steps take (the default 60 s detaches the trainer
          when H = 50 steps take over a minute).

  diloco  --diloco N: exact DiLoCo of N nodes in one process (shard i/N and mesh node i's
          batches for replica i, each with its own AdamW; every --sync-every steps the exact
          average takes the --outer step): the reference a mesh with the same recipe is held
          to (bench/diloco_exact.py).

Output: JSON lines on stdout.
  {"event":"start", "mode", "params", "train_chars", "val_chars", "shard", ...}
  {"event":"eval", "step", "val_bpc", "val_acc", "train_loss" (mean cross-entropy in nats of the
   training batches since the last eval), "elapsed" (s since start), "t" (unix time),
   "eval_total" (s spent evaluating), "compute_total" (s in forward and backward), "inner_total"
   (s in the inner optimizer's steps; a mesh step's time is not in it), and for DDP
   "allreduced_bytes" (gradient bytes handed to all-reduce so far by this rank: the payload; a
   ring all-reduce sends about 2 (W-1)/W of it per rank), for the mesh "sync_total" (s in mesh
   steps, MeshOptimizer.sync_seconds; "sync_phases" splits it: MeshOptimizer.sync_phases),
   "mesh_step" and "mixed" (peer models mixed in so far)}
  {"event":"reached", "step", "val_bpc", "elapsed", "t"} the first time val_bpc <= --target-bpc
  {"event":"final", "step", "val_bpc", "elapsed", "t", "crc" (CRC-32 of the parameters),
   "reached": bool}
Evaluations happen before the first step, every --eval-every steps (mesh: at the mesh step
count; make it a multiple of --sync-every to evaluate right after a sync) and at the end.
Deterministic given --seed and --threads (model initialisation, identical on every node, and
the batches' positions).
Needs numpy and torch (Debian: python3-numpy, python3-torch).
"""
import argparse
import json
import math
import os
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

FORTUNES = "/usr/share/games/fortunes"
VOCAB = 96  # 0 = newline, 1..95 = ASCII 32..126
SHARD_BLOCK = 4096  # characters per block of --shard-mode interleaved


def fortune_files(data_dir):
    """The plain-text fortune files of data_dir, sorted (no index files, no subdirectories)."""
    out = []
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if name.endswith((".dat", ".u8")) or name.startswith(".") or not os.path.isfile(path):
            continue
        out.append(path)
    return out


def encode(raw):
    """Bytes -> symbol ids (uint8 numpy array): overstrikes (X BS Y) resolved to Y, tabs to a
    space, newline -> 0, ASCII 32..126 -> 1..95, anything else dropped."""
    out = bytearray()
    for b in raw:
        if b == 8:  # backspace: the next character replaces the last one
            if out:
                out.pop()
            continue
        if b == 9:
            b = 32
        if b == 10:
            out.append(0)
        elif 32 <= b <= 126:
            out.append(b - 31)
    return np.frombuffer(bytes(out), dtype=np.uint8)


def decode(ids):
    return "".join("\n" if i == 0 else chr(int(i) + 31) for i in ids)


def load_text(data_dir):
    files = fortune_files(data_dir)
    if not files:
        raise FileNotFoundError(f"no fortune text files in {data_dir} (install Debian's "
                                "`fortunes` package)")
    parts = []
    for path in files:
        with open(path, "rb") as f:
            parts.append(encode(f.read()))
    return np.concatenate(parts)


class Block(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        # A plain attribute, not a buffer: MeshOptimizer would mix a float buffer (and refuses
        # -inf) and gloo cannot broadcast a bool one (DDP syncs buffers at the start).
        self.mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))).masked_fill(
            self.mask[:t, :t], float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharLM(nn.Module):
    def __init__(self, layers=4, d=256, heads=4, context=128):
        super().__init__()
        if d % heads:
            raise ValueError("--d-model must be a multiple of --heads")
        self.context = context
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.zeros(context, d))
        self.blocks = nn.ModuleList(Block(d, heads, context) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        for blk in self.blocks:  # residual projections scaled down with depth (GPT-2)
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * layers))
            nn.init.normal_(blk.out.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.tok.weight.t()  # tied output layer


def val_windows(val, n, context):
    """n fixed windows (inputs, targets) spread evenly over the validation part."""
    span = len(val) - context - 1
    if span < 1:
        raise ValueError("the validation part is shorter than one window")
    starts = np.linspace(0, span, num=min(n, span + 1)).astype(np.int64)
    x = np.stack([val[s:s + context] for s in starts]).astype(np.int64)
    y = np.stack([val[s + 1:s + context + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def evaluate(model, vx, vy, batch=32):
    """(bits per character, next-character accuracy) over the validation windows."""
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(vx), batch):
            out = model(vx[i:i + batch])
            loss += F.cross_entropy(out.reshape(-1, VOCAB), vy[i:i + batch].reshape(-1),
                                    reduction="sum").item()
            correct += (out.argmax(-1) == vy[i:i + batch]).sum().item()
    model.train()
    n = vy.numel()
    return loss / n / math.log(2), correct / n


def model_crc(model):
    """CRC-32 of the parameters (float32, in order): names one exact model across processes."""
    return zlib.crc32(b"".join(t.detach().reshape(-1).numpy().tobytes()
                               for t in model.parameters()))


def shard_sampler(a, train, shard, shards):
    """Shard I/N of the training text (--shard-mode): (the text the windows are cut from as a
    tensor, starts_of(idx) mapping sample indices to window starts, how many starts, the shard's
    characters)."""
    if a.shard_mode == "contiguous":
        piece = len(train) // shards
        train = train[shard * piece:(shard + 1) * piece]
        if len(train) <= a.context + 1:
            sys.exit("the shard is shorter than one window")
        # window starts: every position whose window fits in the piece
        def starts_of(idx):
            return idx
        n_starts = len(train) - a.context - 1
        shard_chars = len(train)
    else:
        # window starts in the node's blocks (a window may run on into the next block: the text
        # there is real, not a seam between blocks)
        blocks = np.arange(shard, (len(train) - a.context - 1) // SHARD_BLOCK, shards)
        if len(blocks) == 0:
            sys.exit("the training text has fewer blocks than --shard's N")
        block_ids = torch.from_numpy(blocks.astype(np.int64))

        def starts_of(idx):
            return block_ids[idx // SHARD_BLOCK] * SHARD_BLOCK + idx % SHARD_BLOCK
        n_starts = len(blocks) * SHARD_BLOCK
        shard_chars = n_starts
    return torch.from_numpy(train.astype(np.int64)), starts_of, n_starts, shard_chars


def batch_loss(model, train, starts_of, n_starts, gen, a):
    """The loss of one batch of --batch windows drawn with `gen`."""
    offs = torch.arange(a.context + 1)
    starts = starts_of(torch.randint(0, n_starts, (a.batch,), generator=gen))
    chunk = train[starts[:, None] + offs]
    out = model(chunk[:, :-1])
    return F.cross_entropy(out.reshape(-1, VOCAB), chunk[:, 1:].reshape(-1))


def run_diloco(a, text, vx, vy):
    """--diloco N: exact DiLoCo in this one process, the reference the mesh is held to. N
    replicas of the initial model, replica i with its own AdamW (and schedule) on shard i/N and
    the batches mesh node i draws; every --sync-every steps the exact average of the N models
    takes the --outer step (meshtrain.torch.OuterStep, as MeshOptimizer does) and every replica
    continues from the result. Evaluates that model every --eval-every steps and at the end
    (JSON lines as the other modes, "mode": "diloco")."""
    import copy
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from meshtrain.torch import GradientCorrection, OuterStep
    n = a.diloco
    torch.manual_seed(a.seed)
    base = CharLM(a.layers, a.d_model, a.heads, a.context)
    reps = [copy.deepcopy(base) for _ in range(n)]
    opts = [torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=a.weight_decay) for m in reps]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: lr_factor(a, s)) for o in opts]
    data = [shard_sampler(a, text, i, n) for i in range(n)]
    gens = [torch.Generator().manual_seed(1000 * (a.seed + 1) + i) for i in range(n)]
    outer = OuterStep(a.outer, a.outer_lr, a.outer_momentum)
    outer.reset(list(base.parameters()))
    # The gradient drift correction as MeshOptimizer runs it (its default with H > 1), with the
    # exact mean of the nodes' mean gradients in place of the mesh's mix.
    drift = a.drift == "gradient" or (a.drift == "auto" and a.sync_every > 1)
    corr = [GradientCorrection(list(m.parameters())) for m in reps] if drift else []
    start = time.time()
    print(json.dumps({"event": "start", "mode": "diloco", "nodes": n,
                      "params": sum(p.numel() for p in base.parameters()),
                      "sync_every": a.sync_every, "outer": a.outer, "t": start}), flush=True)
    bpc = None
    for step in range(0, a.max_steps + 1):
        if step > 0:
            for m, o, sc, (train, starts_of, n_starts, _), g in zip(reps, opts, scheds, data,
                                                                    gens):
                o.zero_grad()
                batch_loss(m, train, starts_of, n_starts, g, a).backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                if corr:
                    corr[reps.index(m)].before_step(list(m.parameters()))
                o.step()
                sc.step()
            if step % a.sync_every == 0:
                if corr:
                    for c in corr:
                        c.before_mix()
                    mean_c = torch.stack([c.mixed for c in corr]).mean(0)
                    for c in corr:
                        c.mixed.copy_(mean_c)
                        c.after_mix()
                with torch.no_grad():
                    for p, *qs in zip(base.parameters(), *(m.parameters() for m in reps)):
                        p.copy_(torch.stack([q.detach() for q in qs]).mean(0))
                    outer.step(list(base.parameters()))
                    for m in reps:
                        for p, q in zip(base.parameters(), m.parameters()):
                            q.copy_(p)
        if step % a.eval_every == 0 or step == a.max_steps:
            bpc, acc = evaluate(base, vx, vy)
            print(json.dumps({"event": "eval", "step": step, "val_bpc": round(bpc, 4),
                              "val_acc": round(acc, 4),
                              "elapsed": round(time.time() - start, 2)}), flush=True)
    print(json.dumps({"event": "final", "step": a.max_steps, "val_bpc": round(bpc, 4),
                      "elapsed": round(time.time() - start, 2), "crc": model_crc(base)}),
          flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("mode")
    g.add_argument("--socket", default=os.environ.get("MESHTRAIN_SOCKET"),
                   help="mesh mode: the agent's --trainer-socket (default: $MESHTRAIN_SOCKET, "
                   "which `meshtrain run` sets)")
    g.add_argument("--ddp", metavar="RANK/WORLD", help="DDP mode: this process is rank RANK of "
                   "WORLD (gloo); trains on shard RANK/WORLD")
    g.add_argument("--ddp-addr", default="127.0.0.1", help="DDP: rank 0's address (default "
                   "%(default)s; on the namespace bed rank 0's host address)")
    g.add_argument("--ddp-port", type=int, default=29500, help="DDP: rank 0's TCP port")
    g.add_argument("--diloco", type=int, metavar="N", default=0,
                   help="exact DiLoCo of N nodes in this one process (the mesh's reference: "
                   "the same recipe, shards and batches, exact averages; --sync-every, "
                   "--outer)")
    g = p.add_argument_group("data")
    g.add_argument("--data", default=FORTUNES, help="directory of fortune text files "
                   "(default %(default)s)")
    g.add_argument("--shard", default="0/1", metavar="I/N",
                   help="train on the I-th of N pieces of the training text (see "
                   "--shard-mode)")
    g.add_argument("--shard-mode", choices=["contiguous", "interleaved"], default="contiguous",
                   help="contiguous: N contiguous pieces (the nodes' text differs in style); "
                   "interleaved: blocks of 4096 characters dealt out in turn (default "
                   "%(default)s)")
    g.add_argument("--val-fraction", type=float, default=0.05,
                   help="the last fraction of the text that is validation (default 0.05)")
    g.add_argument("--val-windows", type=int, default=128,
                   help="validation windows of --context characters (default 128)")
    g = p.add_argument_group("model")
    g.add_argument("--layers", type=int, default=4)
    g.add_argument("--d-model", type=int, default=256)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--context", type=int, default=128, help="characters per window")
    g = p.add_argument_group("training")
    g.add_argument("--batch", type=int, default=32, help="windows per step and process")
    g.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    g.add_argument("--weight-decay", type=float, default=0.01)
    g.add_argument("--warmup", type=int, default=100, help="steps of linear learning-rate "
                   "warm-up")
    g.add_argument("--schedule", choices=["constant", "cosine"], default="constant",
                   help="learning rate after the warm-up: constant, or a cosine from --lr down "
                   "to --min-lr-ratio x --lr at --max-steps")
    g.add_argument("--min-lr-ratio", type=float, default=0.1,
                   help="cosine: the last step's learning rate as a fraction of --lr")
    g.add_argument("--max-steps", type=int, default=5000, help="stop after this many steps")
    g.add_argument("--target-bpc", type=float, default=0.0,
                   help="stop once the validation loss is at or below this many bits per "
                   "character (0: never; train --max-steps)")
    g.add_argument("--eval-every", type=int, default=100, help="steps between evaluations")
    g.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    g.add_argument("--seed", type=int, default=0, help="model initialisation (the same on "
                   "every node) and batch positions (different per shard)")
    g = p.add_argument_group("mesh")
    g.add_argument("--sync-every", type=int, default=1, metavar="H",
                   help="local steps per mesh step")
    g.add_argument("--outer", choices=["avg", "sgd", "nesterov"], default="avg",
                   help="outer step after each mix (meshtrain.torch.MeshOptimizer)")
    g.add_argument("--outer-lr", type=float, help="outer learning rate (nesterov 0.7, sgd 1.0)")
    g.add_argument("--outer-momentum", type=float, help="nesterov momentum (0.9)")
    g.add_argument("--drift", choices=["auto", "none", "gradient"], default="auto",
                   help="MeshOptimizer's drift_correction (auto: the gradient correction when "
                   "--sync-every > 1 with one fragment; none: off, half the bytes)")
    g.add_argument("--finish", action="store_true",
                   help="mesh: end with MeshOptimizer.finish() (the mesh's one model, "
                   "evaluated: a \"consensus\" line)")
    g.add_argument("--slowdown", type=float, default=1.0, metavar="F",
                   help="emulate an F-times slower host: each step's compute takes F times as "
                   "long (sleeps)")
    g.add_argument("--fragments", type=int, default=1, metavar="F",
                   help="streaming fragments (Streaming DiLoCo): the model in F parts, one "
                   "synced every H/F steps in turn (F must divide H)")
    g.add_argument("--compress", metavar="sparse[:F[:B]]",
                   help="mesh: send the top F of each sync's pseudo-gradient at B bits, with "
                   "error feedback (MeshOptimizer(compress=...); defaults F 0.02, B 2); run the "
                   "agent with --compress sparse")
    g.add_argument("--overlap", nargs="?", type=int, const=True, default=False, metavar="K",
                   help="mesh, with --compress: each sync's exchange runs during the next local "
                   "steps, and is mixed K steps later (MeshOptimizer(overlap=K); without K at "
                   "the next sync, overlap=True); --drift auto is then none")
    a = p.parse_args(argv)
    if sum(bool(x) for x in (a.socket, a.ddp, a.diloco)) > 1:
        p.error("--socket, --ddp and --diloco exclude each other")
    if a.diloco and a.fragments != 1:
        p.error("--diloco runs whole-model syncs (--fragments 1)")
    if a.diloco < 0 or a.slowdown < 1:
        p.error("--diloco must be >= 1 nodes and --slowdown >= 1")
    if a.outer == "avg" and (a.outer_lr is not None or a.outer_momentum is not None):
        p.error("--outer-lr/--outer-momentum need --outer sgd or nesterov")
    if a.warmup < 0:
        p.error("--warmup must be at least 0")
    if not 0.0 <= a.min_lr_ratio <= 1.0:
        p.error("--min-lr-ratio must be within [0, 1]")
    if a.fragments < 1 or a.sync_every % a.fragments:
        p.error("--fragments must be at least 1 and divide --sync-every")
    return a


def lr_factor(a, s):
    """The learning rate of step s (0-based) as a fraction of --lr: linear warm-up over
    --warmup steps, then constant or a cosine down to --min-lr-ratio at --max-steps."""
    if s < a.warmup:
        return (s + 1) / a.warmup
    if a.schedule == "constant":
        return 1.0
    span = max(1, a.max_steps - a.warmup)
    done = min(1.0, (s - a.warmup) / span)
    return a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * done))


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    rank, world = 0, 1
    if a.ddp:
        rank, world = (int(v) for v in a.ddp.split("/"))
        a.shard = f"{rank}/{world}"
    shard, shards = (int(v) for v in a.shard.split("/"))
    if not 0 <= shard < shards:
        sys.exit("--shard I/N needs 0 <= I < N")
    text = load_text(a.data)
    n_val = int(len(text) * a.val_fraction)
    train, val = text[:len(text) - n_val], text[len(text) - n_val:]
    if a.diloco:
        return run_diloco(a, train, *val_windows(val, a.val_windows, a.context))
    train, starts_of, n_starts, shard_chars = shard_sampler(a, train, shard, shards)
    vx, vy = val_windows(val, a.val_windows, a.context)

    torch.manual_seed(a.seed)  # one initial model on every node
    model = CharLM(a.layers, a.d_model, a.heads, a.context)
    base = model
    n_params = sum(p.numel() for p in model.parameters())
    mode = "ddp" if a.ddp else "mesh" if a.socket else "alone"
    start = time.time()
    allreduced = [0]
    mesh = None
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://{a.ddp_addr}:{a.ddp_port}",
                                rank=rank, world_size=world)
        model = nn.parallel.DistributedDataParallel(model)

        def counting_allreduce(state, bucket):
            buf = bucket.buffer()
            allreduced[0] += buf.numel() * buf.element_size()
            fut = dist.all_reduce(buf.div_(world), async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])
        model.register_comm_hook(None, counting_allreduce)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    stepper = opt
    if a.socket:
        import meshtrain
        import meshtrain.torch
        mesh = meshtrain.connect(a.socket)
        stepper = meshtrain.torch.MeshOptimizer(
            opt, mesh, sync_every=a.sync_every, outer=a.outer, outer_lr=a.outer_lr,
            outer_momentum=a.outer_momentum, model=base, fragments=a.fragments,
            drift_correction={"none": False}.get(a.drift, a.drift), compress=a.compress,
            overlap=a.overlap)
    # A trainer restarted beside its agent (or joining a running mesh) continues the learning-rate
    # schedule at the mesh's step, not from its warm-up.
    step0 = mesh.step_count if mesh else 0
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(a, s + step0))
    if rank == 0:
        print(json.dumps({"event": "start", "mode": mode, "params": n_params,
                          "train_chars": shard_chars, "val_chars": int(n_val),
                          "shard": a.shard, "shard_mode": a.shard_mode, "layers": a.layers, "d_model": a.d_model,
                          "heads": a.heads, "context": a.context, "batch": a.batch,
                          "sync_every": a.sync_every if mesh else None,
                          "outer": a.outer if mesh else None, "t": time.time()}), flush=True)

    gen = torch.Generator().manual_seed(1000 * (a.seed + 1) + shard)
    step = mesh.step_count if mesh else 0
    # compute_total: wall seconds in forward and backward; inner_total: in the inner optimizer's
    # steps (together the utilisation's numerator).
    eval_total, compute_total, inner_total, loss_sum, loss_n = 0.0, 0.0, 0.0, 0.0, 0
    reached, last_bpc = False, None
    first = True  # the initial model is evaluated before the first step
    while True:
        done = step >= a.max_steps
        if not done and not first:
            # --slowdown's clock only when asked: on a host whose cores are all busy this
            # system call became where the scheduler preempts the trainer (1.5 ms a step, 3 %
            # of the wall time, outside compute).
            t_step = time.process_time() if a.slowdown > 1 else 0.0
            t_compute = time.time()
            stepper.zero_grad()
            loss = batch_loss(model, train, starts_of, n_starts, gen, a)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            compute_total += time.time() - t_compute
            if a.slowdown > 1:  # an F-times slower host: the step's compute, F - 1 times more
                time.sleep((a.slowdown - 1) * (time.process_time() - t_step))
            t_inner, synced = time.time(), getattr(stepper, "sync_seconds", 0.0)
            stepper.step()
            # the inner optimizer's share of the step (a mesh step's time is the mesh's)
            inner_total += time.time() - t_inner - (getattr(stepper, "sync_seconds", 0.0) - synced)
            sched.step()
            loss_sum += loss.item()
            loss_n += 1
            # the mesh counts H / F steps per mesh step (one fragment's sync)
            step = (mesh.step_count + stepper.local_steps % (a.sync_every // a.fragments)
                    if mesh else step + 1)
            done = step >= a.max_steps or (mesh is not None and not mesh.training)
        due = first or done or step % a.eval_every == 0
        first = False
        if not due:
            continue
        stop = torch.zeros(1)
        if rank == 0:
            t_eval = time.time()
            bpc, acc = evaluate(base, vx, vy)
            now = time.time()
            eval_total += now - t_eval
            last_bpc = bpc
            ev = {"event": "eval", "step": step, "val_bpc": round(bpc, 4),
                  "val_acc": round(acc, 4),
                  "train_loss": round(loss_sum / loss_n, 4) if loss_n else None,
                  "elapsed": round(now - start, 2), "t": now, "eval_total": round(eval_total, 2),
                  "compute_total": round(compute_total, 2), "inner_total": round(inner_total, 2)}
            if a.ddp:
                ev["allreduced_bytes"] = allreduced[0]
            if mesh:
                ev["sync_total"] = round(stepper.sync_seconds, 2)
                ev["sync_phases"] = {k: round(v, 4) for k, v in stepper.sync_phases.items()}
                ev["mesh_step"] = mesh.step_count
                ev["mixed"] = mesh.mixed_total
            print(json.dumps(ev), flush=True)
            loss_sum, loss_n = 0.0, 0
            if mesh and mesh.params is not None:
                mesh.report(bpc * math.log(2), acc, step=mesh.step_count, model=base)
            if a.target_bpc > 0 and bpc <= a.target_bpc and not reached:
                reached = True
                print(json.dumps({"event": "reached", "step": step, "val_bpc": round(bpc, 4),
                                  "elapsed": round(now - start, 2), "t": now}), flush=True)
                stop[0] = 1
            if done:
                stop[0] = 1
        if a.ddp:
            import torch.distributed as dist
            dist.all_reduce(stop)  # rank 0 decides for every rank (one model)
        if stop[0] > 0:
            break
    if rank == 0:
        now = time.time()
        print(json.dumps({"event": "final", "step": step, "val_bpc": round(last_bpc, 4),
                          "elapsed": round(now - start, 2), "t": now, "crc": model_crc(base),
                          "reached": reached,
                          **({"allreduced_bytes": allreduced[0]} if a.ddp else {})}),
              flush=True)
    if mesh and a.finish:
        # The mesh's one model: the average of every node's final model.
        res = stepper.finish()
        bpc, acc = evaluate(base, vx, vy)
        print(json.dumps({"event": "consensus", "models": res.models, "crc32": res.crc32,
                          "val_bpc": round(bpc, 4), "val_acc": round(acc, 4),
                          "syncs": stepper.syncs, "t": time.time()}), flush=True)
    if mesh:
        mesh.detach()
    if a.ddp:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
