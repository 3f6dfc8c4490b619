"""PyTorch: MeshOptimizer, a ``torch.optim.Optimizer`` that trains a model across the mesh, and
the helpers beneath it.

    import meshtrain.torch
    inner = torch.optim.AdamW(model.parameters(), lr=3e-4)
    opt = meshtrain.torch.MeshOptimizer(inner, sync_every=50, model=model,
                                        outer_optimizer=lambda p: torch.optim.SGD(
                                            p, lr=0.7, momentum=0.9, nesterov=True))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()    # a local step; every 50th also publishes, waits for the barrier and mixes
        sched.step()
    opt.finish()      # the mesh's one model, the same bytes on every node

Every ``sync_every`` local steps the mesh mixes the models (parameters, and with ``model=`` the
floating-point buffers such as BatchNorm statistics) and the outer optimizer takes the
pseudo-gradient θ₀ − x̄ against the parameters θ₀ of its last step (DiLoCo). ``state_dict()``
holds everything needed to continue exactly: the inner and outer optimizers' states, the drift
corrections and the step counters. docs/python.md has the whole API.
"""
from __future__ import annotations

import copy
import os
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

import torch

from meshtrain._layout import Layout
from meshtrain._mesh import FinishResult, Mesh, connect
from meshtrain._outer import (DriftCorrection, GradientCorrection, OuterSpec, OuterStep,
                              TorchOuter, _ranges)
from meshtrain._protocol import MeshError
from meshtrain._sparse import SparseExchange, starts_of

__all__ = ["DriftCorrection", "GradientCorrection", "MeshOptimizer", "ModelAverage", "OuterStep",
           "TorchOuter", "load_checkpoint", "mixed_buffers", "optimizer_state",
           "save_checkpoint", "share_parameters", "shared"]

ModelLike = Union[torch.nn.Module, torch.Tensor, Iterable[torch.Tensor]]
_STATE_FORMAT = "meshtrain.MeshOptimizer/1"
_PHASES = ("prepare", "publish", "wait", "mix", "outer")


def _params(model_or_params: ModelLike) -> List[torch.Tensor]:
    if isinstance(model_or_params, torch.nn.Module):
        return list(model_or_params.parameters())
    if isinstance(model_or_params, torch.Tensor):
        return [model_or_params]
    return list(model_or_params)


def _check_placeable(tensors: List[torch.Tensor]) -> Optional[str]:
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


def shared(model_or_params: ModelLike, mesh: Mesh) -> bool:
    """True when every parameter is its span of ``mesh.params`` (placed by share_parameters)."""
    shm = mesh.params
    return shm is not None and Layout(_params(model_or_params)).aliases(shm)


def share_parameters(model_or_params: ModelLike, mesh: Mesh) -> List[torch.Tensor]:
    """Places the parameters in the agent's shared memory: afterwards each parameter's ``.data``
    is a view of ``mesh.params`` (in order: a model's ``parameters()``, or the given tensors),
    so steps copy no parameter bytes in Python and the agent mixes peers' models straight into
    the tensors (only while the trainer waits in ``mesh.step``). The Parameter objects stay the
    same, so an optimizer and its state remain valid.

    Attaches when the mesh is not attached yet (the tensors become ``mesh.layout``). Values: when
    the agent has a model for us (``mesh.resumed``) the parameters take the agent's values;
    otherwise the shared memory takes the model's. Every parameter must be a float32, contiguous,
    dense CPU tensor of its own (TypeError otherwise: MeshOptimizer(share_memory=False) and
    ``mesh.step`` copy instead). Returns the list of placed parameters.
    """
    tensors = _params(model_or_params)
    why = _check_placeable(tensors)
    if why:
        raise TypeError(f"cannot place the parameters in the mesh's shared memory: {why}")
    layout = Layout(tensors)
    if mesh.params is None:
        take_agent = mesh.attach(layout)
    elif mesh.num_params != layout.size:
        raise MeshError(f"the model has {layout.size} parameters, attached with "
                        f"{mesh.num_params}")
    else:
        take_agent = mesh.resumed
    shm = mesh.params
    assert shm is not None
    flat = torch.from_numpy(shm)
    off = 0
    with torch.no_grad():
        for t, done in zip(tensors, layout.placed(shm)):
            n = t.numel()
            if not done:
                part = flat[off:off + n].view(t.shape)
                if not take_agent:
                    part.copy_(t)
                t.data = part
            off += n
    mesh._mark_shared()
    return tensors


def mixed_buffers(model: torch.nn.Module) -> List[torch.Tensor]:
    """The model's buffers that are mixed beside its parameters: persistent floating-point ones
    (BatchNorm running means and variances; not integer counters such as num_batches_tracked,
    nor non-persistent buffers such as a causal mask, which are constants, not state)."""
    out = []
    for module in model.modules():
        skip: Set[str] = getattr(module, "_non_persistent_buffers_set", set())
        for name, b in module.named_buffers(recurse=False):
            if b is not None and b.is_floating_point() and name not in skip:
                out.append(b)
    return out


def optimizer_state(optimizer: torch.optim.Optimizer,
                    params: List[torch.Tensor]) -> List[torch.Tensor]:
    """The state tensors of `params` in a torch Adam, AdamW or SGD (momentum) optimizer, made now
    (zeros, as the optimizer's first step would) so that they can be placed in the shared memory
    and mixed like parameters. TypeError for other optimizers."""
    out: List[torch.Tensor] = []
    for g in optimizer.param_groups:
        for p in g["params"]:
            if not any(p is q for q in params):
                continue
            st = optimizer.state[p]
            if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                if not st:
                    st["step"] = torch.tensor(0.0)
                    for k in ("exp_avg", "exp_avg_sq") + (
                            ("max_exp_avg_sq",) if g.get("amsgrad") else ()):
                        st[k] = torch.zeros_like(p, memory_format=torch.preserve_format)
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


def _drift_kind(drift_correction: Union[bool, str, None], sync_every: int,
                fragments: int, overlap: bool = False) -> str:
    if drift_correction not in (False, None, True, "params", "gradient", "auto"):
        raise ValueError('drift_correction must be "auto", False, True ("params") or '
                         '"gradient"')
    if drift_correction == "auto":
        # Local steps drift towards each node's own shard; the gradient correction removes that
        # at one model-sized buffer more per sync (docs/python.md).
        # overlap takes none: its outer step comes a sync late, the corrections' bookkeeping not.
        return "gradient" if sync_every > 1 and fragments == 1 and not overlap else "none"
    if drift_correction == "gradient":
        if fragments != 1:
            raise ValueError('drift_correction="gradient" needs fragments=1')
        return "gradient"
    return "params" if drift_correction else "none"


class MeshOptimizer(torch.optim.Optimizer):
    """A torch optimizer that trains across the mesh: it wraps the inner (local) optimizer and,
    every ``sync_every`` local steps, takes one mesh step (publish, barrier, mix) and the outer
    step. Its ``param_groups`` and ``state`` are the inner optimizer's, so every
    ``torch.optim.lr_scheduler`` drives the inner learning rate through it. docs/python.md
    "PyTorch" describes every argument; in short:

    - ``mesh``: the agent connection (default ``meshtrain.connect()``: the socket ``meshtrain
      run`` hands over). Attaches at construction, so a restarted script continues from the
      agent's model before its first step.
    - ``outer_optimizer``: a torch optimizer built on the same parameters, or a factory taking
      the (float32 outer) parameters, e.g. ``lambda p: torch.optim.SGD(p, lr=0.7,
      momentum=0.9, nesterov=True)``; ``outer="nesterov"|"sgd"`` (with ``outer_lr``,
      ``outer_momentum``) is the same rule by name and the only one that steps ``fragments``.
    - ``model``: mix its floating-point buffers too (``mix_buffers``); ``mix_state``: mix the
      inner moments; ``drift_correction`` ("auto": "gradient" when ``sync_every`` > 1,
      ``fragments`` == 1 and no ``overlap``); ``fragments``: Streaming DiLoCo;
      ``share_memory``: place float32 CPU parameters in the shared memory (None: when they
      can be).
    - ``compress="sparse:F:B"``: send the top F of each pseudo-gradient at B bits with error
      feedback instead of the model (meshtrain._sparse; the agent runs ``--compress sparse``);
      ``overlap=True`` with it: a sync's exchange runs during the next local steps, its outer
      step is taken at the next sync; ``overlap=K`` (an int from 1 to ``sync_every //
      fragments``; 0 is False): K local steps after the sync (the exchange has K steps' time
      to arrive).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, mesh: Optional[Mesh] = None,
                 sync_every: int = 1, params: Optional[Iterable[torch.Tensor]] = None,
                 share_memory: Optional[bool] = None, outer: str = "avg",
                 outer_lr: Optional[float] = None, outer_momentum: Optional[float] = None,
                 model: Optional[torch.nn.Module] = None, mix_buffers: bool = True,
                 fragments: int = 1, mix_state: bool = False,
                 drift_correction: Union[bool, str, None] = "auto",
                 outer_optimizer: Optional[OuterSpec] = None,
                 compress: Optional[str] = None, overlap: Union[bool, int] = False) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, not "
                            f"{type(optimizer).__name__}")
        if sync_every < 1:
            raise ValueError("sync_every must be >= 1")
        if fragments < 1 or sync_every % fragments:
            raise ValueError("fragments must be >= 1 and divide sync_every")
        self._ready = False
        super().__init__(optimizer.param_groups, optimizer.defaults)
        # The same list and mapping: a scheduler setting lr here sets the inner optimizer's.
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.optimizer = optimizer
        self.mesh = mesh if mesh is not None else connect()
        self.sync_every, self.fragments = int(sync_every), int(fragments)
        self.params: List[torch.Tensor] = list(params) if params is not None else [
            p for g in optimizer.param_groups for p in g["params"]]
        if outer_optimizer is not None:
            if outer != "avg" or outer_lr is not None or outer_momentum is not None:
                raise ValueError("pass outer_optimizer or outer= (with outer_lr, "
                                 "outer_momentum), not both")
            if self.fragments != 1:
                raise ValueError('outer_optimizer steps the whole model: with fragments > 1 '
                                 'use outer="nesterov" or "sgd"')
            self.outer: Union[OuterStep, TorchOuter] = TorchOuter(outer_optimizer, self.params)
        else:
            self.outer = OuterStep(outer, outer_lr, outer_momentum)
        buffers = mixed_buffers(model) if model is not None and mix_buffers else []
        if mix_state:  # the inner optimizer's moments travel and mix with the parameters
            buffers += optimizer_state(optimizer, self.params)
        drift = _drift_kind(drift_correction, self.sync_every, self.fragments, bool(overlap))
        self.drift_default = drift_correction == "auto"
        self.drift: Optional[DriftCorrection] = None
        self.gradient_drift: Optional[GradientCorrection] = None
        if drift == "gradient":
            self.gradient_drift = GradientCorrection(self.params)
            buffers.append(self.gradient_drift.mixed)  # c_i out, the mesh's c̄ back
        elif drift == "params":
            self.drift = DriftCorrection(self.params, self.sync_every)
        self.buffers = buffers
        self.sparse: Optional[SparseExchange] = None
        if compress is not None:
            if self.outer.kind == "avg":
                raise ValueError('compress="sparse" sends pseudo-gradients: it needs an outer '
                                 'step (outer="sgd" or "nesterov", or outer_optimizer)')
            self.sparse = SparseExchange(compress, self.params, buffers)
        # overlap: the sync published last and not mixed yet ([lo, hi) and the parameters there
        # as published), completed overlap_steps local steps later (every: at the next sync).
        every = self.sync_every // self.fragments
        if isinstance(overlap, bool) or overlap == 0:
            self.overlap_steps = every if overlap else 0
        elif not 1 <= int(overlap) <= every:
            raise ValueError(f"overlap={overlap}: the local steps a sync's exchange runs "
                             f"during must be in 1..sync_every // fragments ({every})")
        else:
            self.overlap_steps = int(overlap)
        self.overlap = self.overlap_steps > 0
        self._pending: Optional[Tuple[int, int, torch.Tensor]] = None
        self._local_steps = 0  # local steps this optimizer took (the sync cadence)
        self._syncs = 0  # mesh steps taken (fragment k % fragments goes out at the k-th)
        self._sync_seconds = 0.0  # wall time step() spent in mesh steps
        self._phases = dict.fromkeys(_PHASES, 0.0)  # ... split by what it waited for
        self._attach(share_memory)
        # The steps the model in hand has taken: the agent's step when it gave us its model.
        self._model_steps = self.mesh.step_count
        kind, lr, momentum = self.outer.describe() if isinstance(self.outer, TorchOuter) else (
            self.outer.kind, self.outer.lr, self.outer.momentum)
        if self.overlap and (self.sparse is None or not self.shared or drift != "none"):
            raise ValueError("overlap=True needs compress=\"sparse...\", the parameters in the "
                             "shared memory and no drift correction (drift_correction=False)")
        self.mesh.configure(self.sync_every, self.fragments, kind, lr, momentum, drift)
        self._ready = True
        if self.mesh.step_count == 0:
            # Start together: the barrier of the first step holds until the agent's --min-peers
            # train, so every peer is there to receive the first sync's models.
            self.mesh.wait_permit(1)
        else:
            self._catch_up()

    def _catch_up(self) -> None:
        """A trainer that resumed at the agent's step (a restart) asks for its next step before it
        trains: an agent that finds the mesh further on fetches a peer's model first (a join with
        state), and the model is taken now, not after a round of local steps from the older one."""
        self.mesh.wait_permit(self.mesh.step_count + 1)
        if not self.mesh.adopt_waiting:
            return
        if self.mesh.mix().adopted:
            self.mesh._load(self.layout)
            self._syncs = self._syncs_at(self.mesh.step_count)
            self._took_mesh_model()

    def _syncs_at(self, step: int) -> int:
        """The mesh steps a model of the agent's step `step` has taken (fragments in turn)."""
        return step * self.fragments // self.sync_every

    def _took_mesh_model(self) -> None:
        """The agent replaced the model (a join with state, a finished peer's model): the outer
        step starts again from it, momentum and corrections cleared."""
        self._adoptions = self.mesh.adoptions
        self._model_steps = self.mesh.step_count
        self._restart_outer()

    def _attach(self, share_memory: Optional[bool]) -> None:
        tensors = self.params + self.buffers
        if self.sparse is not None:
            tensors.append(self.sparse.outbox)  # last: the model's offsets stay as without it
        self.shared = bool(share_memory) or (
            share_memory is None and _check_placeable(tensors) is None)
        if self.shared:
            share_parameters(tensors, self.mesh)
        else:
            layout = Layout(tensors)
            if self.mesh.params is None and self.mesh.attach(layout):
                self.mesh._load(layout)
        # A restarted script continues from the agent's model: its fragments in turn from there.
        self._syncs = self._syncs_at(self.mesh.step_count)
        self.outer.reset(self.params)
        self._adoptions = self.mesh.adoptions

    @property
    def step_count(self) -> int:
        """The local steps the model in hand has taken: counted from 0, from the agent's step
        when it gave this trainer its model (a restart, an adoption), or from a checkpoint."""
        return self._model_steps

    @property
    def local_steps(self) -> int:
        """Local steps this optimizer took since it was made (or restored): every
        ``sync_every // fragments``-th is a mesh step."""
        return self._local_steps

    @property
    def syncs(self) -> int:
        """Mesh steps taken (the k-th sends fragment k % fragments)."""
        return self._syncs

    @property
    def sync_seconds(self) -> float:
        """Wall seconds step() spent in mesh steps (compression, publishing, waiting for the
        barrier and the peers' models, the mix, the outer step) since this optimizer was made:
        the rest of step() is the inner optimizer's."""
        return self._sync_seconds

    @property
    def sync_phases(self) -> Dict[str, float]:
        """``sync_seconds`` split by phase (seconds since this optimizer was made): "prepare"
        (the pseudo-gradient and its compression, the drift corrections, before publishing),
        "publish" (the agent's PUBLISH: it copies the shared memory, a large layout's once its
        one snapshot buffer is free), "wait" (the barrier's permit), "mix" (the agent's MIX: it
        waits for the peers' models of the sync, with an exact exchange, and mixes them into
        the shared memory), "outer" (after the mix: the outer step, error feedback,
        corrections). Without overlap, publish, wait and mix are one ``mesh.step``, counted
        under "wait"."""
        return dict(self._phases)

    def _phase(self, name: str, t0: float) -> float:
        now = time.monotonic()
        self._phases[name] += now - t0
        return now

    @property
    def layout(self) -> Layout:
        """What this optimizer attached: parameters, then mixed buffers, moments, corrections."""
        layout = self.mesh.layout
        if layout is None:
            raise MeshError("the trainer is not attached")
        return layout

    @property
    def training(self) -> bool:
        """False once the agent says training is over (e.g. its --target-accuracy was met)."""
        return self.mesh.training

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        if getattr(self, "_ready", True):
            raise RuntimeError("MeshOptimizer attached its parameters at construction: add the "
                               "group to the inner optimizer before wrapping it")
        super().add_param_group(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        """One local step of the inner optimizer; every ``sync_every // fragments`` steps also a
        mesh step and the outer step."""
        if self.gradient_drift is not None:
            if closure is not None:
                raise ValueError('drift_correction="gradient"' +
                                 (" (the default with sync_every > 1)" if self.drift_default
                                  else "") + " needs step() without a closure; pass "
                                 "drift_correction=False or True to step with one")
            self.gradient_drift.before_step(self.params)
        loss: Optional[float] = self.optimizer.step(closure)
        if self.drift is not None:
            self.drift.apply(self.params)
        self._local_steps += 1
        self._model_steps += 1
        every = self.sync_every // self.fragments
        # overlap=K < every: the exchange published K steps ago completes now (at K = every the
        # next sync completes it before it publishes).
        due = self._pending is not None and self._local_steps % every == self.overlap_steps
        if due or self._local_steps % every == 0:
            t0 = time.monotonic()
            if due:
                self._complete_pending()
            else:
                self._sync(every)
            self._sync_seconds += time.monotonic() - t0
        return loss

    def _sync(self, every: int) -> None:
        tensors = self.params + self.buffers
        span: Optional[Tuple[int, int]] = None
        if self.fragments > 1:
            total = sum(t.numel() for t in tensors)
            f = self._syncs % self.fragments
            span = (total * f // self.fragments, total * (f + 1) // self.fragments)
        self._syncs += 1
        if self.overlap:
            self._overlapped_sync(every, span)
            return
        t = time.monotonic()
        lo, hi = span if span is not None else (0, None)
        if self.drift is not None:
            self.drift.before_mix(self.params, lo, hi)
        if self.gradient_drift is not None:
            self.gradient_drift.before_mix()
        if self.sparse is not None:  # the outbox's range goes out instead of the model's
            total = self.sparse.n_params + self.sparse.n_buffers
            a, b = span if span is not None else (0, total)
            starts = starts_of(self.outer, self.params)
            self.sparse.before_publish(self.params, starts, self.buffers, a, b)
            span = (total + a, total + b)
        t = self._phase("prepare", t)
        self.mesh.step(self.layout, steps=every, span=span)
        t = self._phase("wait", t)
        if self.mesh.adoptions != self._adoptions:
            self._took_mesh_model()
            return
        if self.sparse is not None:
            self.sparse.after_mix(self.params, starts, self.buffers, a, b)
        if self.drift is not None and self.sparse is None:
            self.drift.after_mix(self.params)
        if self.gradient_drift is not None:
            self.gradient_drift.after_mix()
        self.outer.step(self.params, lo, hi)
        if self.sparse is not None:
            self.sparse.keep_residual(self.params, a, b)
            if self.drift is not None:  # against the model the node goes on from, e kept
                self.drift.after_mix(self.params)
        self._phase("outer", t)

    def _overlapped_sync(self, every: int, span: Optional[Tuple[int, int]]) -> None:
        """overlap=True (Streaming DiLoCo's overlapping variant): completes the previous sync
        (its mix and outer step), then publishes this one and returns at once, so the exchange
        runs while the next local steps compute; its outer step comes at the next sync."""
        if not self._complete_pending():
            return
        assert self.sparse is not None
        t = time.monotonic()
        total = self.sparse.n_params + self.sparse.n_buffers
        a, b = span if span is not None else (0, total)
        self.sparse.before_publish(self.params, starts_of(self.outer, self.params),
                                   self.buffers, a, b)
        published = self._flat_range(a, b)
        t = self._phase("prepare", t)
        self.mesh.publish(self.mesh.step_count + every, (total + a, total + b))
        self._phase("publish", t)
        self._pending = (a, b, published)

    def _complete_pending(self) -> bool:
        """Mixes the pending sync and takes its outer step, keeping what it did not send and the
        local progress made since it was published: x ← θ₀' − e + (x − x_published). False
        when the agent replaced the model instead (the outer step starts again from it)."""
        if self._pending is None:
            return True
        a, b, published = self._pending
        self._pending = None
        t = time.monotonic()
        self.mesh.wait_permit(self.mesh.step_count + 1)
        t = self._phase("wait", t)
        self.mesh.mix()
        t = self._phase("mix", t)
        if self.mesh.adoptions != self._adoptions:
            self._took_mesh_model()
            return False
        assert self.sparse is not None
        progress = self._flat_range(a, b) - published
        self.sparse.after_mix(self.params, starts_of(self.outer, self.params), self.buffers, a,
                              b)
        self.outer.step(self.params, a, b)
        self.sparse.keep_residual(self.params, a, b)
        with torch.no_grad():
            for v, va, vb, fa, fb in _ranges(self.params, a, b):
                v[va:vb] += progress[fa - a:fb - a].to(v.dtype)
        self._phase("outer", t)
        return True

    def _flat_range(self, a: int, b: int) -> torch.Tensor:
        """The parameters' floats [a, b) (of the whole layout's order) as one float32 copy."""
        parts = [v[va:vb].detach().float() for v, va, vb, _, _ in _ranges(self.params, a, b)]
        return torch.cat(parts) if parts else torch.zeros(0)

    def _restart_outer(self) -> None:
        self._pending = None
        self.outer.reset(self.params)
        for d in (self.drift, self.gradient_drift, self.sparse):
            if d is not None:
                d.reset()

    def finish(self, timeout: Optional[float] = None) -> FinishResult:
        """Ends training: waits for the mesh's one model (``Mesh.finish``) and loads it into the
        parameters and mixed buffers."""
        self._complete_pending()
        if self.sparse is not None:
            self.sparse.clear_outbox()
        return self.mesh.finish(self.layout, timeout=timeout)

    # ---- checkpoints --------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Everything needed to continue exactly: the inner optimizer's state, the outer step's
        (outer parameters, momentum or the outer optimizer's state), the drift corrections and
        the step counters. The model's parameters are the model's state_dict."""
        drift = self.gradient_drift or self.drift
        return {"format": _STATE_FORMAT, "inner": self.optimizer.state_dict(),
                "outer": self.outer.state_dict(),
                "drift": drift.state_dict() if drift is not None else None,
                "sparse": self.sparse.state_dict() if self.sparse is not None else None,
                "pending": None if self._pending is None else (
                    self._pending[0], self._pending[1], self._pending[2].clone()),
                "local_steps": self._local_steps, "syncs": self._syncs,
                "step_count": self._model_steps,
                "sync_every": self.sync_every, "fragments": self.fragments}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` saved. When the agent gave this trainer its model
        (``mesh.resumed``: the script restarted beside a running agent, or joined a live mesh
        with state) the mesh's model stays, with the inner optimizer's state from the
        checkpoint; the outer step and the corrections start again from the model in hand.
        A plain torch optimizer state dict (an older checkpoint) restores the inner state only.
        """
        if state_dict.get("format") != _STATE_FORMAT:
            if "state" in state_dict and "param_groups" in state_dict:
                self._load_inner(state_dict)
                return
            raise ValueError("not a MeshOptimizer state_dict")
        for key in ("sync_every", "fragments"):
            if state_dict[key] != getattr(self, key):
                raise ValueError(f"state_dict: saved with {key}={state_dict[key]}, this "
                                 f"optimizer has {getattr(self, key)}")
        self._load_inner(state_dict["inner"])
        drift = self.gradient_drift or self.drift
        if (state_dict["drift"] is None) != (drift is None):
            raise ValueError("state_dict: saved with another drift_correction")
        if (state_dict.get("sparse") is None) != (self.sparse is None):
            raise ValueError("state_dict: saved with another compress")
        if self.mesh.resumed:
            self._restart_outer()
            return
        self.outer.load_state_dict(state_dict["outer"])
        if self.sparse is not None:
            self.sparse.load_state_dict(state_dict["sparse"])
        pending = state_dict.get("pending")
        self._pending = None if pending is None or not self.overlap else (
            int(pending[0]), int(pending[1]), pending[2].detach().clone().float())
        if drift is not None:
            drift.load_state_dict(state_dict["drift"])
        self._local_steps = int(state_dict["local_steps"])
        self._model_steps = int(state_dict["step_count"])
        self._syncs = int(state_dict["syncs"])

    def _load_inner(self, state: Dict[str, Any]) -> None:
        # Moments placed in the shared memory (mix_state) must stay where they are: copy the
        # loaded values into them.
        placed = {id(b) for b in self.buffers}
        keep = {(id(p), k): v for p, st in self.optimizer.state.items() for k, v in st.items()
                if isinstance(v, torch.Tensor) and id(v) in placed}
        self.optimizer.load_state_dict(state)
        with torch.no_grad():
            for p, st in self.optimizer.state.items():
                for k, v in list(st.items()):
                    old = keep.get((id(p), k))
                    if old is not None:
                        old.copy_(v)
                        st[k] = old
        # torch's load_state_dict makes new param_groups: share them again (a scheduler sets lr
        # through this optimizer).
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state


def save_checkpoint(path: str, model: torch.nn.Module, optimizer: MeshOptimizer,
                    *others: Any) -> None:
    """Writes the model's, the optimizer's and ``others``' (schedulers, ...) state_dicts to
    ``path`` with torch.save, atomically (a crash leaves the previous checkpoint whole)."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "others": [o.state_dict() for o in others]}
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str, model: torch.nn.Module, optimizer: MeshOptimizer,
                    *others: Any) -> bool:
    """Restores what save_checkpoint wrote, when ``path`` exists (False otherwise). When the
    agent gave this trainer its model (``mesh.resumed``: a restart beside a running agent) the
    mesh's model stays and the rest is restored (MeshOptimizer.load_state_dict)."""
    if not os.path.exists(path):
        return False
    state = torch.load(path)
    if not optimizer.mesh.resumed:
        model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if len(state["others"]) != len(others):
        raise ValueError(f"{path} holds {len(state['others'])} more state_dicts, not "
                         f"{len(others)}")
    for o, s in zip(others, state["others"]):
        o.load_state_dict(s)
    return True


class ModelAverage:
    """Exponential moving average of a model's parameters along training (Polyak averaging),
    the rule of the agent's --eval-average for its built-in trainer: after each step
    avg <- d avg + (1 - d) x with d = min(decay, (1 + n) / (10 + n)) for the n-th update since the
    last reset. Evaluate ``average.model`` and hand it to ``mesh.report(..., model=...)`` so the
    final model a finished node offers is the one evaluated. With ``mesh``, an update after the
    mesh replaced the parameters (``mesh.adoptions`` grew) restarts the average at them. Buffers
    (e.g. BatchNorm statistics) are copied from the model at each update.
    """

    def __init__(self, model: torch.nn.Module, decay: float = 0.98,
                 mesh: Optional[Mesh] = None) -> None:
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

    def reset(self) -> None:
        """Restarts the average at the model's current parameters."""
        with torch.no_grad():
            for e, p in zip(self.model.parameters(), self.source.parameters()):
                e.copy_(p)
        self._copy_buffers()
        self.n = 0

    def update(self) -> None:
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

    def _copy_buffers(self) -> None:
        with torch.no_grad():
            for e, b in zip(self.model.buffers(), self.source.buffers()):
                e.copy_(b)
