"""PyTorch helpers: copy tensors to and from the mesh's shared memory, place them in it, and
MeshOptimizer.

    opt = meshtrain.torch.MeshOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), mesh,
                                        sync_every=4)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()   # a local step; every 4th also publishes, waits for the barrier and mixes

With ``model=``, the model's floating-point buffers (BatchNorm running statistics) are mixed
beside the parameters (``mix_buffers=True``, the default); optimizer state is never mixed.

DiLoCo-style outer steps (``outer="nesterov", outer_lr=0.7, outer_momentum=0.9``): every
`sync_every` steps the model after the mesh step's mix, x̄, gives the pseudo-gradient
Δ = θ₀ − x̄ against the parameters θ₀ of the last outer step; nesterov: m ← μm + Δ,
θ ← θ₀ − lr (Δ + μm); sgd: θ ← θ₀ − lr Δ; avg (default): θ ← x̄. θ₀ ← θ. Models (not
pseudo-gradients) travel, so the mix also pulls the nodes together; momentum stays local.

MeshOptimizer places float32 CPU parameters in the agent's shared memory (share_parameters):
the tensors *are* ``mesh.params`` and a mesh step copies no parameter bytes in Python.

    average = meshtrain.torch.ModelAverage(model, decay=0.98, mesh=mesh)
    ...after each opt.step(): average.update()
    evaluate(average.model); mesh.report(loss, acc, model=average.model)

evaluates the moving average of the parameters instead (the agent's --eval-average rule).
"""
import copy
import math

import torch

__all__ = ["DriftCorrection", "GradientCorrection", "MeshOptimizer", "ModelAverage", "OuterStep",
           "mixed_buffers", "optimizer_state",
           "share_parameters", "shared", "tensor_view"]

# Parameter bytes tensor_view copied between tensors and the shared memory (both ways) in this
# process: stays put while the tensors are placed in the shared memory (share_parameters).
copied_bytes = 0


def _params(model_or_params):
    if hasattr(model_or_params, "parameters"):
        return list(model_or_params.parameters())
    if isinstance(model_or_params, torch.Tensor):
        return [model_or_params]
    return list(model_or_params)


def _placed(tensors, shm, sizes=None):
    """Per tensor: True when it is its own span of `shm` (the numpy shared vector) already."""
    addr = shm.__array_interface__["data"][0]
    f32 = torch.float32
    out = []
    for t, n in zip(tensors, sizes or [t.numel() for t in tensors]):
        # An address inside the host mapping is a CPU tensor's.
        out.append(n == 0 or (t.data_ptr() == addr and t.dtype is f32 and t.is_contiguous()))
        addr += 4 * n
    return out


def tensor_view(tensors):
    """A view that copies `tensors` (in order) into a flat float32 vector and back. A tensor
    that already is its span of the vector (share_parameters) is not copied."""
    from meshtrain import _View
    tensors = list(tensors)
    sizes = [t.numel() for t in tensors]
    total = sum(sizes)

    def spans(shm):
        flat = None
        off = 0
        for t, n, placed in zip(tensors, sizes, _placed(tensors, shm, sizes)):
            if not placed:
                if flat is None:
                    flat = torch.from_numpy(shm)
                yield t, flat[off:off + n]
            off += n

    def store(shm):
        global copied_bytes
        with torch.no_grad():
            for t, part in spans(shm):
                part.copy_(t.detach().reshape(-1))
                copied_bytes += 4 * part.numel()

    def load(shm):
        global copied_bytes
        with torch.no_grad():
            for t, part in spans(shm):
                t.copy_(part.view_as(t))
                copied_bytes += 4 * part.numel()

    def aliases(shm):
        return shm.size == total and all(_placed(tensors, shm, sizes))
    return _View(total, store, load, aliases)


def _check_placeable(tensors):
    """None when every tensor can become a view of the shared memory, else why not."""
    if not tensors:
        return "the model has no parameters"
    seen, spans = set(), []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            return f"parameter {i} is a {type(t).__name__}, not a tensor"
        if id(t) in seen:
            return f"parameter {i} ({tuple(t.shape)}) is listed twice"
        seen.add(id(t))
        if t.dtype != torch.float32:
            return f"parameter {i} ({tuple(t.shape)}) is {t.dtype}, not torch.float32"
        if t.device.type != "cpu" or t.layout != torch.strided:
            return f"parameter {i} ({tuple(t.shape)}) is not a dense CPU tensor ({t.device})"
        if not t.is_contiguous():
            return f"parameter {i} ({tuple(t.shape)}) is not contiguous"
        if t.numel():
            spans.append((t.data_ptr(), t.data_ptr() + 4 * t.numel(), i))
    spans.sort()
    for (_, end, i), (start, _, j) in zip(spans, spans[1:]):
        if start < end:
            return f"parameters {i} and {j} share memory"
    return None


def shared(model_or_params, mesh):
    """True when every parameter is its span of ``mesh.params`` (placed by share_parameters)."""
    if mesh.params is None:
        return False
    return tensor_view(_params(model_or_params)).aliases(mesh.params)


def share_parameters(model_or_params, mesh):
    """Places the parameters in the agent's shared memory: afterwards each parameter's ``.data``
    is a view of ``mesh.params`` (in order: a model's ``parameters()``, or the given tensors),
    so ``mesh.step(model)``, ``MeshOptimizer`` and ``mesh.report(..., model=model)`` copy no
    parameter bytes in Python and the agent mixes peers' models straight into the tensors (only
    while the trainer waits in ``mesh.step``). The Parameter objects stay the same, so an
    optimizer and its state (momentum, Adam moments) remain valid.

    Attaches when the mesh is not attached yet. Values: when the agent has a model for us
    (``mesh.resumed``: this trainer restarted, or joined with state) the parameters take the
    agent's values, as ``mesh.step``'s first call does; otherwise the shared memory takes the
    model's. Every parameter must be a float32, contiguous, dense CPU tensor of its own
    (TypeError otherwise: use ``MeshOptimizer(share_memory=False)`` or ``mesh.step`` alone for
    other models, which copy). Moving the model afterwards (``model.to(...)``,
    ``model.share_memory()``) takes it out of the shared memory again: steps then copy as
    before (correct, just not free). Returns the list of placed parameters.
    """
    tensors = _params(model_or_params)
    why = _check_placeable(tensors)
    if why:
        raise TypeError(f"cannot place the parameters in the mesh's shared memory: {why}")
    total = sum(t.numel() for t in tensors)
    from meshtrain import MeshError
    if mesh.params is None:
        take_agent = mesh.attach(total)
    elif mesh.num_params != total:
        raise MeshError(f"the model has {total} parameters, attached with {mesh.num_params}")
    else:
        take_agent = mesh.resumed
    placed = _placed(tensors, mesh.params)
    if all(placed):
        mesh.shared = True
        return tensors
    flat = torch.from_numpy(mesh.params)
    off = 0
    with torch.no_grad():
        for t, done in zip(tensors, placed):
            n = t.numel()
            if not done:
                part = flat[off:off + n].view(t.shape)
                if not take_agent:
                    part.copy_(t)
                t.data = part
            off += n
    mesh.shared = True
    return tensors


class MeshOptimizer:
    """Wraps a torch optimizer: every `sync_every` local steps, one mesh.step (barrier, publish
    and mix) on the optimizer's parameters. Attaches at construction, so a restarted trainer
    continues from the agent's model (and `mesh.step_count`) before its first step.

    `share_memory`: True places the parameters in the agent's shared memory (share_parameters;
    TypeError when they cannot be: not float32, not on the CPU, ...), False copies them to and
    from it at every mesh step, None (default) places them when they can be and copies
    otherwise. `self.shared` tells which.

    `outer`: "avg" (default: the mix is the new model), "sgd" or "nesterov" (DiLoCo's outer
    step on the mixed model, see the module doc; `outer_lr` default 0.7 for nesterov and 1.0
    for sgd, `outer_momentum` default 0.9). `model`: the module, so that its floating-point
    buffers are mixed too (`mix_buffers`, default True). After a join with state or a finished
    peer's model taken over, the outer step restarts from the adopted model. `mix_state=True`:
    the inner optimizer's moments (Adam/AdamW, SGD momentum; optimizer_state) are mixed too.
    `fragments=F`
    (dividing `sync_every`; Streaming DiLoCo): every sync_every/F steps one of F contiguous
    fragments of the model goes out, in turn, and takes its outer step; each sync moves 1/F.

    `drift_correction="auto"` (default): "gradient" (below) when sync_every > 1 and
    fragments == 1, else off. On label-skewed shards H local steps drift towards each node's own
    classes, which averaging the models does not undo; the gradient correction does, at one
    model-sized buffer more per sync (2x the bytes). False turns it off (shards alike: half the
    bytes).
    `drift_correction=True` (SCAFFOLD-style, serverless; for skewed shards with a large
    `sync_every`): at each sync the node learns how far its own model ended from the mix,
    d = x̄ − x_local, and adds c ← c + d / sync_every to a per-parameter correction c that
    every later local step adds to the parameters. With SGD this is SCAFFOLD's control-variate
    correction η(c_i − c) in parameter space; it cancels the steady pull of a node's own shard.
    One extra model-sized vector; reset when the agent replaces the model.
    `drift_correction="gradient"` corrects the gradients instead (SCAFFOLD with control
    variates in gradient space, the shape that suits Adam): each node averages its own raw
    gradients over a sync interval (c_i), the c_i travel and mix beside the parameters (one
    model-sized buffer more in the shared memory: 2x the bytes), and every local step feeds the
    inner optimizer g − c_i + c̄, so its moments see the mesh's gradient rather than its own
    shard's. Needs fragments=1 and an optimizer stepped without a closure."""

    def __init__(self, optimizer, mesh, sync_every=1, params=None, share_memory=None,
                 outer="avg", outer_lr=None, outer_momentum=None, model=None, mix_buffers=True,
                 fragments=1, mix_state=False, drift_correction="auto"):
        if sync_every < 1:
            raise ValueError("sync_every must be >= 1")
        if fragments < 1 or sync_every % fragments:
            raise ValueError("fragments must be >= 1 and divide sync_every")
        self.fragments = int(fragments)
        self.syncs = 0  # mesh steps taken (fragment k % fragments goes out at the k-th)
        self.outer = OuterStep(outer, outer_lr, outer_momentum)
        self.optimizer = optimizer
        self.mesh = mesh
        self.sync_every = int(sync_every)
        self.params = list(params) if params is not None else [
            p for g in optimizer.param_groups for p in g["params"]]
        self.buffers = mixed_buffers(model) if model is not None and mix_buffers else []
        if mix_state:  # the inner optimizer's moments travel and mix with the parameters
            self.buffers += optimizer_state(optimizer, self.params)
        if drift_correction not in (False, None, True, "params", "gradient", "auto"):
            raise ValueError('drift_correction must be "auto", False, True ("params") or '
                             '"gradient"')
        self.drift_default = drift_correction == "auto"
        if self.drift_default:
            # Local steps drift towards each node's own shard; the gradient correction removes
            # that at one model-sized buffer more per sync (docs/python.md).
            drift_correction = "gradient" if sync_every > 1 and fragments == 1 else False
        self.drift = self.gradient_drift = None
        if drift_correction == "gradient":
            if self.fragments != 1:
                raise ValueError('drift_correction="gradient" needs fragments=1')
            self.gradient_drift = GradientCorrection(self.params)
            self.buffers.append(self.gradient_drift.mixed)  # c_i out, the mesh's c̄ back
        elif drift_correction:
            self.drift = DriftCorrection(self.params, self.sync_every)
        self.local_steps = 0
        tensors = self.params + self.buffers
        self.shared = bool(share_memory) or (
            share_memory is None and _check_placeable(tensors) is None)
        if self.shared:
            share_parameters(tensors, mesh)
        else:
            view = tensor_view(tensors)
            if mesh.params is None and mesh.attach(view.size):
                view.load(mesh.params)
        self.outer.reset(self.params)
        self._adoptions = mesh.adoptions
        drift = "gradient" if self.gradient_drift is not None else \
            "params" if self.drift is not None else "none"
        mesh.configure(self.sync_every, self.fragments, self.outer.kind, self.outer.lr,
                       self.outer.momentum, drift)
        if mesh.step_count == 0:
            # Start together: the barrier of the first step holds until the agent's --min-peers
            # train, so every peer is there to receive the first sync's models.
            mesh.wait_permit(1)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def training(self):
        """False once the agent says training is over (e.g. its --target-accuracy was met)."""
        return self.mesh.training

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        if self.gradient_drift is not None:
            if closure is not None:
                raise ValueError('drift_correction="gradient"' +
                                 (" (the default with sync_every > 1)" if self.drift_default
                                  else "") + " needs step() without a closure; pass "
                                 "drift_correction=False or True to step with one")
            self.gradient_drift.before_step(self.params)
        loss = self.optimizer.step(closure)
        if self.drift is not None:
            self.drift.apply(self.params)
        self.local_steps += 1
        every = self.sync_every // self.fragments
        if self.local_steps % every == 0:
            tensors = self.params + self.buffers
            span = None
            if self.fragments > 1:
                total = sum(t.numel() for t in tensors)
                f = self.syncs % self.fragments
                span = (total * f // self.fragments, total * (f + 1) // self.fragments)
            self.syncs += 1
            if self.drift is not None:
                self.drift.before_mix(self.params, *(span or (0, None)))
            if self.gradient_drift is not None:
                self.gradient_drift.before_mix()
            self.mesh.step(tensors, steps=every, span=span)
            if self.mesh.adoptions != self._adoptions:
                # The agent replaced the model (a join with state, a finished peer's model):
                # the outer step starts again from it, momentum cleared.
                self._adoptions = self.mesh.adoptions
                self.outer.reset(self.params)
                for d in (self.drift, self.gradient_drift):
                    if d is not None:
                        d.reset()
            else:
                if self.drift is not None:
                    self.drift.after_mix(self.params)
                if self.gradient_drift is not None:
                    self.gradient_drift.after_mix()
                self.outer.step(self.params, *(span or (0, None)))
        return loss

    def finish(self, timeout=None):
        """Ends training: waits for the mesh's one model (``Mesh.finish``) and loads it into
        the parameters (and mixed buffers). Returns what ``Mesh.finish`` returns."""
        return self.mesh.finish(self.params + self.buffers, timeout=timeout)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)


def _ranges(params, lo, hi):
    """(flat view of p, [a, b) within it, [a, b) within the whole) for each tensor of `params`
    that overlaps the flat range [lo, hi)."""
    off = 0
    for p in params:
        n = p.numel()
        a, b = max(lo, off), min(hi, off + n)
        if a < b:
            yield p.view(-1), a - off, b - off, a, b
        off += n


class DriftCorrection:
    """MeshOptimizer's drift_correction (see there): c += (x̄ − x_local) / H at each sync, over
    the range synced; c added to the parameters after every local step."""

    def __init__(self, params, sync_every):
        self.h = float(sync_every)
        self.total = sum(p.numel() for p in params)
        self.c = torch.zeros(self.total, dtype=torch.float32)
        self.local = None
        self.span = (0, self.total)
        self.active = False

    def reset(self):
        self.c.zero_()
        self.active = False
        self.local = None

    def apply(self, params):
        if not self.active:
            return
        with torch.no_grad():
            for v, a, b, fa, fb in _ranges(params, 0, self.total):
                v[a:b].add_(self.c[fa:fb].to(v.dtype))

    def before_mix(self, params, lo=0, hi=None):
        hi = self.total if hi is None else min(hi, self.total)
        self.span = (lo, hi)
        with torch.no_grad():
            self.local = torch.cat([v[a:b].detach().float().clone()
                                    for v, a, b, _, _ in _ranges(params, lo, hi)])

    def after_mix(self, params):
        if self.local is None:
            return
        lo, hi = self.span
        with torch.no_grad():
            mixed = torch.cat([v[a:b].detach().float() for v, a, b, _, _ in
                               _ranges(params, lo, hi)])
            self.c[lo:hi].add_(mixed - self.local, alpha=1.0 / self.h)
        self.local = None
        self.active = True


class GradientCorrection:
    """MeshOptimizer's drift_correction="gradient" (see there). `mixed` is the buffer that
    travels: c_i before the mesh step, the mesh's c̄ after it."""

    def __init__(self, params):
        self.total = sum(p.numel() for p in params)
        self.sum = torch.zeros(self.total, dtype=torch.float32)
        self.steps = 0
        self.own = None
        self.delta = None  # c̄ − c_i, added to every gradient until the next sync
        self.mixed = torch.zeros(self.total, dtype=torch.float32)

    def reset(self):
        self.sum.zero_()
        self.steps = 0
        self.own = self.delta = None

    def before_step(self, params):
        with torch.no_grad():
            off = 0
            for p in params:
                n = p.numel()
                if p.grad is not None:
                    g = p.grad.view(-1)
                    self.sum[off:off + n].add_(g.float())
                    if self.delta is not None:
                        g.add_(self.delta[off:off + n].to(g.dtype))
                off += n
        self.steps += 1

    def before_mix(self):
        self.own = self.sum / max(1, self.steps)
        with torch.no_grad():
            self.mixed.copy_(self.own)
        self.sum.zero_()
        self.steps = 0

    def after_mix(self):
        if self.own is not None:
            self.delta = self.mixed.detach().clone() - self.own


def optimizer_state(optimizer, params):
    """The state tensors of `params` in a torch Adam, AdamW or SGD (momentum) optimizer, made now
    (zeros, as the optimizer's first step would) so that they can be placed in the shared memory
    and mixed like parameters: averaging the moments gives every node the mesh's view of the
    gradients (on skewed shards each node's own Adam moments point at its own classes).
    TypeError for other optimizers."""
    out = []
    for g in optimizer.param_groups:
        for p in g["params"]:
            if not any(p is q for q in params):
                continue
            st = optimizer.state[p]
            if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                if not st:
                    st["step"] = torch.tensor(0.0)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    if g.get("amsgrad"):
                        st["max_exp_avg_sq"] = torch.zeros_like(
                            p, memory_format=torch.preserve_format)
                keys = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if g.get("amsgrad") else [])
            elif isinstance(optimizer, torch.optim.SGD):
                if not g.get("momentum"):
                    continue
                if st.get("momentum_buffer") is None:
                    st["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                keys = ["momentum_buffer"]
            else:
                raise TypeError("mix_state supports torch.optim.Adam, AdamW and SGD, not "
                                f"{type(optimizer).__name__}")
            out += [st[k] for k in keys]
    return out


def mixed_buffers(model):
    """The model's buffers that are mixed beside its parameters: persistent floating-point ones
    (BatchNorm running means and variances; not integer counters such as num_batches_tracked,
    nor non-persistent buffers such as a causal mask, which are constants, not state)."""
    out = []
    for module in model.modules():
        skip = getattr(module, "_non_persistent_buffers_set", set())
        for name, b in module.named_buffers(recurse=False):
            if b is not None and b.is_floating_point() and name not in skip:
                out.append(b)
    return out


class OuterStep:
    """The outer optimizer of DiLoCo applied to the mixed model (see the module doc): ``avg``
    keeps the mix, ``sgd`` and ``nesterov`` step from the last outer parameters along the
    pseudo-gradient. Defaults: nesterov lr 0.7, momentum 0.9; sgd lr 1.0 (= avg)."""

    KINDS = ("avg", "sgd", "nesterov")

    def __init__(self, kind="avg", lr=None, momentum=None):
        if kind not in self.KINDS:
            raise ValueError(f"outer must be one of {', '.join(self.KINDS)}, not {kind!r}")
        if kind == "avg" and (lr is not None or momentum is not None):
            raise ValueError('outer_lr and outer_momentum need outer="sgd" or "nesterov"')
        if kind == "sgd" and momentum not in (None, 0, 0.0):
            raise ValueError('outer_momentum needs outer="nesterov"')
        self.kind = kind
        self.lr = float(lr if lr is not None else (0.7 if kind == "nesterov" else 1.0))
        self.momentum = float(momentum if momentum is not None else 0.9) if kind == "nesterov" \
            else 0.0
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError("outer_lr must be > 0")
        if not (0 <= self.momentum < 1):
            raise ValueError("outer_momentum must be in [0, 1)")
        self.start = None
        self.buf = None

    def reset(self, params):
        """The parameters in hand become the outer parameters; momentum is cleared."""
        if self.kind == "avg":
            return
        with torch.no_grad():
            self.start = torch.cat([p.detach().reshape(-1) for p in params]).float()
            self.buf = torch.zeros_like(self.start) if self.momentum else None

    def step(self, params, lo=0, hi=None):
        """One outer step: `params` hold the mixed model x̄ and receive θ. With [lo, hi) (flat
        float indices over `params` in order: a streaming fragment) only that range steps."""
        if self.kind == "avg":
            return
        hi = self.start.numel() if hi is None else min(hi, self.start.numel())
        off = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                a, b = max(lo, off), min(hi, off + n)
                if a < b:
                    x = p.view(-1)[a - off:b - off]
                    s = self.start[a:b]
                    delta = s - x  # the pseudo-gradient θ₀ − x̄
                    if self.buf is not None:
                        m = self.buf[a:b]
                        m.mul_(self.momentum).add_(delta)
                        delta.add_(m, alpha=self.momentum)
                    s.sub_(delta, alpha=self.lr)
                    x.copy_(s)
                off += n


class ModelAverage:
    """Exponential moving average of a model's parameters along training (Polyak averaging),
    the rule of the agent's --eval-average for its built-in trainer: after each step
    avg <- d avg + (1 - d) x with d = min(decay, (1 + n) / (10 + n)) for the n-th update since the
    last reset. SGD at a constant learning rate keeps jumping around its minimum; evaluations of
    the average neither swing from one to the next nor trail the trained model by more than about
    1 / (1 - decay) steps, and usually score higher.

    ``model``: the trained module (its parameters are read, never written). ``average.model`` is
    a copy holding the average: evaluate it and hand it to ``mesh.report(..., model=...)`` so the
    final model a finished node offers is the one evaluated. With ``mesh``, an update after the
    mesh replaced the parameters (a join with state, a finished peer's final model taken over:
    ``mesh.adoptions`` grew) restarts the average at them instead of averaging across.
    Buffers (e.g. BatchNorm statistics) are copied from the model at each update.
    """

    def __init__(self, model, decay=0.98, mesh=None):
        if not 0 <= decay < 1:
            raise ValueError("decay must be in [0, 1)")
        self.source = model
        self.model = copy.deepcopy(model)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.decay = float(decay)
        self.mesh = mesh
        self.n = 0
        self._adoptions = mesh.adoptions if mesh is not None else 0

    def reset(self):
        """Restarts the average at the model's current parameters."""
        with torch.no_grad():
            for e, p in zip(self.model.parameters(), self.source.parameters()):
                e.copy_(p)
        self._copy_buffers()
        self.n = 0

    def update(self):
        """Call after each optimizer step."""
        if self.mesh is not None and self.mesh.adoptions != self._adoptions:
            self._adoptions = self.mesh.adoptions
            self.reset()
            return
        self.n += 1
        d = min(self.decay, (1 + self.n) / (10 + self.n))
        with torch.no_grad():
            for e, p in zip(self.model.parameters(), self.source.parameters()):
                e.mul_(d).add_(p.detach(), alpha=1 - d)
        self._copy_buffers()

    def _copy_buffers(self):
        with torch.no_grad():
            for e, b in zip(self.model.buffers(), self.source.buffers()):
                e.copy_(b)
