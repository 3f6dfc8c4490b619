"""What MeshOptimizer does around the mesh's mix (docs/python.md "PyTorch"): DiLoCo's outer step
(OuterStep for the string shortcuts, TorchOuter for any torch optimizer) and the two drift
corrections. Each keeps float32 state and can save and restore it exactly (state_dict)."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

Params = Sequence[torch.Tensor]
OuterSpec = Union[torch.optim.Optimizer, Callable[[List[torch.nn.Parameter]],
                                                  torch.optim.Optimizer]]


def _ranges(params: Params, lo: int, hi: int
            ) -> Iterator[Tuple[torch.Tensor, int, int, int, int]]:
    """(flat view of p, [a, b) within it, [a, b) within the whole) for each tensor of `params`
    that overlaps the flat range [lo, hi)."""
    off = 0
    for p in params:
        n = p.numel()
        a, b = max(lo, off), min(hi, off + n)
        if a < b:
            yield p.view(-1), a - off, b - off, a, b
        off += n


def _flat(params: Params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float() for p in params])


def _copy(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.detach().clone()


def _put(dst: Optional[torch.Tensor], src: Optional[torch.Tensor], what: str
         ) -> Optional[torch.Tensor]:
    """Restores a saved tensor into its live counterpart (in place when both exist)."""
    if src is None:
        return None
    if dst is None:
        return src.detach().clone().float()
    if dst.shape != src.shape:
        raise ValueError(f"state_dict: {what} has shape {tuple(src.shape)}, this optimizer's "
                         f"{tuple(dst.shape)}")
    with torch.no_grad():
        dst.copy_(src)
    return dst


class OuterStep:
    """The outer optimizer of DiLoCo by name: ``avg`` keeps the mix, ``sgd`` and ``nesterov``
    step from the last outer parameters θ₀ along the pseudo-gradient Δ = θ₀ − x̄ (nesterov:
    m ← μm + Δ, θ ← θ₀ − lr (Δ + μm); sgd: θ ← θ₀ − lr Δ), θ₀ ← θ. Defaults: nesterov lr 0.7,
    momentum 0.9; sgd lr 1.0 (= avg). θ₀ and m are float32."""

    KINDS = ("avg", "sgd", "nesterov")

    def __init__(self, kind: str = "avg", lr: Optional[float] = None,
                 momentum: Optional[float] = None) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"outer must be one of {', '.join(self.KINDS)}, not {kind!r}")
        if kind == "avg" and (lr is not None or momentum is not None):
            raise ValueError('outer_lr and outer_momentum need outer="sgd" or "nesterov"')
        if kind == "sgd" and momentum not in (None, 0, 0.0):
            raise ValueError('outer_momentum needs outer="nesterov"')
        self.kind = kind
        self.lr = float(lr if lr is not None else (0.7 if kind == "nesterov" else 1.0))
        self.momentum = float(momentum if momentum is not None else 0.9) \
            if kind == "nesterov" else 0.0
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError("outer_lr must be > 0")
        if not 0 <= self.momentum < 1:
            raise ValueError("outer_momentum must be in [0, 1)")
        self.start: Optional[torch.Tensor] = None
        self.buf: Optional[torch.Tensor] = None

    def reset(self, params: Params) -> None:
        """The parameters in hand become the outer parameters; momentum is cleared."""
        if self.kind == "avg":
            return
        with torch.no_grad():
            self.start = _flat(params)
            self.buf = torch.zeros_like(self.start) if self.momentum else None

    def step(self, params: Params, lo: int = 0, hi: Optional[int] = None) -> None:
        """One outer step: `params` hold the mixed model x̄ and receive θ. With [lo, hi) (flat
        float indices over `params` in order: a streaming fragment) only that range steps."""
        if self.kind == "avg" or self.start is None:
            return
        hi = self.start.numel() if hi is None else min(hi, self.start.numel())
        with torch.no_grad():
            for v, a, b, fa, fb in _ranges(params, lo, hi):
                x = v[a:b]
                s = self.start[fa:fb]
                delta = s - x  # the pseudo-gradient θ₀ − x̄
                if self.buf is not None:
                    m = self.buf[fa:fb]
                    m.mul_(self.momentum).add_(delta)
                    delta.add_(m, alpha=self.momentum)
                s.sub_(delta, alpha=self.lr)
                x.copy_(s)

    def state_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "start": _copy(self.start), "buf": _copy(self.buf)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"state_dict: the outer step was {state.get('kind')!r}, this "
                             f"optimizer's is {self.kind!r}")
        self.start = _put(self.start, state["start"], "the outer parameters")
        self.buf = _put(self.buf, state["buf"], "the outer momentum")


class TorchOuter:
    """The outer step by a torch optimizer (``MeshOptimizer(outer_optimizer=...)``), as DiLoCo
    prescribes it: the optimizer steps float32 outer parameters θ₀ (``masters``, one per
    parameter) with the pseudo-gradient θ₀ − x̄ as their gradient, and the model takes θ. Given
    an optimizer instance (built on the model's parameters, as with torchft), its param_groups
    are pointed at the masters; given a factory, it is called with the masters."""

    kind = "optimizer"

    def __init__(self, spec: OuterSpec, params: Params) -> None:
        self.masters = [torch.nn.Parameter(p.detach().float().clone()) for p in params]
        if isinstance(spec, torch.optim.Optimizer):
            ours = {id(p): m for p, m in zip(params, self.masters)}
            theirs = [q for g in spec.param_groups for q in g["params"]]
            if {id(q) for q in theirs} != set(ours) or len(theirs) != len(ours):
                raise ValueError("outer_optimizer must be built on the same parameters as the "
                                 "inner optimizer (or pass a factory: lambda params: ...)")
            if spec.state:
                raise ValueError("outer_optimizer must not have stepped yet")
            for g in spec.param_groups:
                g["params"] = [ours[id(q)] for q in g["params"]]
            self.optimizer = spec
        elif callable(spec):
            made = spec(self.masters)
            if not isinstance(made, torch.optim.Optimizer):
                raise TypeError("the outer_optimizer factory must return a torch.optim."
                                f"Optimizer, not {type(made).__name__}")
            self.optimizer = made
        else:
            raise TypeError("outer_optimizer must be a torch.optim.Optimizer or a factory "
                            "taking the parameters")

    def describe(self) -> Tuple[str, float, float]:
        """(outer kind, lr, momentum) for the agent's status: nesterov for SGD with Nesterov
        momentum, sgd for any other optimizer (with its first group's lr and momentum)."""
        g = self.optimizer.param_groups[0]
        lr = float(g.get("lr", 1.0))
        momentum = float(g.get("momentum", 0.0) or 0.0)
        kind = "nesterov" if g.get("nesterov") and momentum > 0 else "sgd"
        return kind, (lr if math.isfinite(lr) and 0 < lr <= 1e3 else 1.0), \
            (momentum if 0 <= momentum < 1 else 0.0)

    def reset(self, params: Params) -> None:
        with torch.no_grad():
            for m, p in zip(self.masters, params):
                m.copy_(p)
        self.optimizer.state.clear()

    def step(self, params: Params, lo: int = 0, hi: Optional[int] = None) -> None:
        with torch.no_grad():
            for m, p in zip(self.masters, params):
                m.grad = m.detach() - p.detach().float()  # the pseudo-gradient θ₀ − x̄
        self.optimizer.step()
        with torch.no_grad():
            for m, p in zip(self.masters, params):
                p.copy_(m)
                m.grad = None

    def state_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "masters": [m.detach().clone() for m in self.masters],
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("kind") != self.kind or len(state["masters"]) != len(self.masters):
            raise ValueError("state_dict: saved by a MeshOptimizer with another outer step")
        for i, (m, s) in enumerate(zip(self.masters, state["masters"])):
            _put(m, s, f"outer parameter {i}")
        self.optimizer.load_state_dict(state["optimizer"])


class DriftCorrection:
    """MeshOptimizer's drift_correction=True: c += (x̄ − x_local) / H at each sync, over the
    range synced; c added to the parameters after every local step."""

    def __init__(self, params: Params, sync_every: int) -> None:
        self.h = float(sync_every)
        self.total = sum(p.numel() for p in params)
        self.c = torch.zeros(self.total, dtype=torch.float32)
        self.local: Optional[torch.Tensor] = None
        self.span = (0, self.total)
        self.active = False

    def reset(self) -> None:
        self.c.zero_()
        self.active = False
        self.local = None

    def apply(self, params: Params) -> None:
        if not self.active:
            return
        with torch.no_grad():
            for v, a, b, fa, fb in _ranges(params, 0, self.total):
                v[a:b].add_(self.c[fa:fb].to(v.dtype))

    def before_mix(self, params: Params, lo: int = 0, hi: Optional[int] = None) -> None:
        hi = self.total if hi is None else min(hi, self.total)
        self.span = (lo, hi)
        with torch.no_grad():
            self.local = torch.cat([v[a:b].detach().float().clone()
                                    for v, a, b, _, _ in _ranges(params, lo, hi)])

    def after_mix(self, params: Params) -> None:
        if self.local is None:
            return
        lo, hi = self.span
        with torch.no_grad():
            mixed = torch.cat([v[a:b].detach().float() for v, a, b, _, _ in
                               _ranges(params, lo, hi)])
            self.c[lo:hi].add_(mixed - self.local, alpha=1.0 / self.h)
        self.local = None
        self.active = True

    def state_dict(self) -> Dict[str, Any]:
        return {"kind": "params", "c": self.c.clone(), "active": self.active}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("kind") != "params":
            raise ValueError("state_dict: saved with another drift correction")
        _put(self.c, state["c"], "the drift correction")
        self.active = bool(state["active"])
        self.local = None


class GradientCorrection:
    """MeshOptimizer's drift_correction="gradient". ``mixed`` is the buffer that travels: c_i
    before the mesh step, the mesh's c̄ after it."""

    def __init__(self, params: Params) -> None:
        self.total = sum(p.numel() for p in params)
        self.sum = torch.zeros(self.total, dtype=torch.float32)
        self.steps = 0
        self.own: Optional[torch.Tensor] = None
        self.delta: Optional[torch.Tensor] = None  # c̄ − c_i, added to every gradient until
        self.mixed = torch.zeros(self.total, dtype=torch.float32)  # the next sync

    def reset(self) -> None:
        self.sum.zero_()
        self.steps = 0
        self.own = self.delta = None

    def before_step(self, params: Params) -> None:
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

    def before_mix(self) -> None:
        self.own = self.sum / max(1, self.steps)
        with torch.no_grad():
            self.mixed.copy_(self.own)
        self.sum.zero_()
        self.steps = 0

    def after_mix(self) -> None:
        if self.own is not None:
            self.delta = self.mixed.detach().clone() - self.own

    def state_dict(self) -> Dict[str, Any]:
        return {"kind": "gradient", "sum": self.sum.clone(), "steps": self.steps,
                "own": _copy(self.own), "delta": _copy(self.delta), "mixed": self.mixed.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("kind") != "gradient":
            raise ValueError("state_dict: saved with another drift correction")
        _put(self.sum, state["sum"], "the gradient sum")
        _put(self.mixed, state["mixed"], "the mixed correction")
        self.steps = int(state["steps"])
        self.own = _put(None, state["own"], "c_i")
        self.delta = _put(None, state["delta"], "the correction")
