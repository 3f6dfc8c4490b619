"""MeshOptimizer(compress="sparse:F:B") (docs/python.md "Compressed syncs"): each sync sends the
top F of the pseudo-gradient θ₀ − x (plus what earlier syncs left out) at B bits a value, instead
of the model, and the outer step takes the mesh's mean of them.

The compressed pseudo-gradients travel through an *outbox*: one float32 vector after the
parameters and buffers in the shared memory, the same size as both. A sync writes its fragment
of the outbox and publishes just that range; the agent (``--compress sparse``, which sends such
mostly-zero, few-valued ranges losslessly as gaps and codes) mixes the peers' ranges into it, so
after the mix the outbox holds the mean Δ̄ of the nodes' compressed pseudo-gradients, and the
parameters are set to θ₀ − Δ̄ for the outer step, as if the models had been averaged. The model
itself stays in the parameters: a joining peer fetches a model, not a pseudo-gradient. Buffers
(``model=`` buffers, moments, drift corrections) travel as values in their own part of the
outbox, and are mixed as they were.

Error feedback lives in the model: what C left out of a sync's pseudo-gradient, e = Δ − C(Δ),
stays in this node's parameters, x ← θ₀' − e after the outer step, so the node loses none of its
local progress and the next sync's pseudo-gradient θ₀' − x carries e again (the nodes share θ₀
and differ by their own e). The buffer e (float32, one value a parameter) holds it only between
a sync's publish and its outer step (with overlap, across the next local steps); it is saved by
``state_dict`` and cleared when the node takes a peer's model.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import torch

from meshtrain._outer import _put, _ranges

Params = Sequence[torch.Tensor]


def parse_sparse(spec: str) -> Tuple[float, int]:
    """"sparse", "sparse:F" or "sparse:F:B" -> (F, B); F in (0, 1], B in 1..8 (defaults 0.02
    and 2)."""
    parts = spec.split(":")
    if parts[0] != "sparse" or len(parts) > 3:
        raise ValueError(f'compress must be "sparse", "sparse:F" or "sparse:F:B", not {spec!r}')
    try:
        fraction = float(parts[1]) if len(parts) > 1 else 0.02
        bits = int(parts[2]) if len(parts) > 2 else 2
    except ValueError:
        raise ValueError(f"compress {spec!r}: F must be a number and B an integer") from None
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise ValueError(f"compress {spec!r}: F (the share of values sent) must be in (0, 1]")
    if not 1 <= bits <= 8:
        raise ValueError(f"compress {spec!r}: B (bits a value) must be in 1..8")
    return fraction, bits


def top_magnitudes(a: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(a, k, sorted=True) of a flat tensor of magnitudes (values descending, their
    indices; among equal values either may be taken), three times faster on large tensors: the
    k-th largest lies above a threshold read from every (n / 8192)-th value, so topk runs on the
    values above it only, or on all of them when fewer than k are (the threshold missed)."""
    n = a.numel()
    if n < 1 << 15 or 16 * k > n:
        top = torch.topk(a, k, sorted=True)
        return top.values, top.indices
    sample = a[::n // 8192]
    m = sample.numel()
    # 30 % more than the sample's share of k: a threshold a little below the k-th largest
    ks = min(m, math.ceil(1.3 * k * m / n) + 8)
    threshold = torch.topk(sample, ks, sorted=False).values.min()
    candidates = torch.nonzero(a >= threshold).squeeze(1)
    if candidates.numel() < k:
        top = torch.topk(a, k, sorted=True)
        return top.values, top.indices
    top = torch.topk(a[candidates], k, sorted=True)
    return top.values, candidates[top.indices]


def compress_topk(d: torch.Tensor, fraction: float, bits: int) -> torch.Tensor:
    """C(d): the ceil(F n) values of d of largest magnitude, each replaced by its sign times the
    mean magnitude of its group, where the sent magnitudes (in order) form 2^(B-1) groups of equal
    count; zeros elsewhere. Hence at most 2^B distinct nonzero values: B bits a value on the wire.
    """
    n = d.numel()
    out = torch.zeros_like(d)
    if n == 0:
        return out
    k = min(n, max(1, math.ceil(fraction * n)))
    values, indices = top_magnitudes(d.abs(), k)  # descending magnitudes
    q = torch.empty_like(values)
    levels = min(k, 1 << (bits - 1))
    for g in range(levels):
        a, b = k * g // levels, k * (g + 1) // levels
        q[a:b] = values[a:b].mean()
    out[indices] = torch.sign(d[indices]) * q
    return out


class SparseExchange:
    """The outbox and error buffer of compress="sparse:F:B" for `params` and `buffers` (the
    tensors MeshOptimizer mixes, in layout order)."""

    def __init__(self, spec: str, params: Params, buffers: Params) -> None:
        self.spec = spec
        self.fraction, self.bits = parse_sparse(spec)
        self.n_params = sum(p.numel() for p in params)
        self.n_buffers = sum(b.numel() for b in buffers)
        self.outbox = torch.zeros(self.n_params + self.n_buffers, dtype=torch.float32)
        self.err = torch.zeros(self.n_params, dtype=torch.float32)

    def reset(self) -> None:
        self.err.zero_()

    def before_publish(self, params: Params, starts: Params, buffers: Params, lo: int,
                       hi: int) -> None:
        """Writes the outbox's [lo, hi): C(θ₀ − x) for the parameters (tensor by tensor, `starts`
        holding θ₀ in the parameters' shapes), the buffers' values beyond them; e = what C left
        out."""
        with torch.no_grad():
            for (v, a, b, fa, fb), (s, sa, sb, _, _) in zip(
                    _ranges(params, lo, hi), _ranges(starts, lo, hi)):
                d = s[sa:sb].float() - v[a:b].float()
                sent = compress_topk(d, self.fraction, self.bits)
                self.outbox[fa:fb] = sent
                self.err[fa:fb] = d - sent
            for v, a, b, fa, fb in _ranges(buffers, max(lo, self.n_params) - self.n_params,
                                           hi - self.n_params):
                self.outbox[self.n_params + fa:self.n_params + fb] = v[a:b].float()

    def after_mix(self, params: Params, starts: Params, buffers: Params, lo: int,
                  hi: int) -> None:
        """The outbox's [lo, hi) holds the mesh's mean: the parameters become θ₀ − Δ̄ (the
        outer step then takes Δ̄ as its pseudo-gradient), the buffers their mixed values."""
        with torch.no_grad():
            for (v, a, b, fa, fb), (s, sa, sb, _, _) in zip(
                    _ranges(params, lo, hi), _ranges(starts, lo, hi)):
                v[a:b] = (s[sa:sb].float() - self.outbox[fa:fb]).to(v.dtype)
            for v, a, b, fa, fb in _ranges(buffers, max(lo, self.n_params) - self.n_params,
                                           hi - self.n_params):
                v[a:b] = self.outbox[self.n_params + fa:self.n_params + fb].to(v.dtype)

    def keep_residual(self, params: Params, lo: int, hi: int) -> None:
        """After the outer step (the parameters hold θ₀'): x ← θ₀' − e over [lo, hi), so what was
        not sent stays in this node's model, and the next sync's θ₀' − x carries it again."""
        with torch.no_grad():
            for v, a, b, fa, fb in _ranges(params, lo, hi):
                v[a:b] -= self.err[fa:fb].to(v.dtype)
                self.err[fa:fb] = 0

    def clear_outbox(self) -> None:
        """Zeros the outbox (before FINISH: the final model's outbox then costs nothing on the
        wire under --compress sparse)."""
        with torch.no_grad():
            self.outbox.zero_()

    def state_dict(self) -> Dict[str, Any]:
        return {"spec": self.spec, "err": self.err.clone()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("spec") != self.spec:
            raise ValueError(f"state_dict: saved with compress={state.get('spec')!r}, this "
                             f"optimizer has {self.spec!r}")
        _put(self.err, state["err"], "the error buffer")


def starts_of(outer: Any, params: Params) -> List[torch.Tensor]:
    """θ₀ in the parameters' shapes: views of OuterStep's flat float32 start, or TorchOuter's
    masters."""
    masters = getattr(outer, "masters", None)
    if masters is not None:
        return list(masters)
    start = outer.start
    if start is None:
        raise RuntimeError("the outer step has no outer parameters (outer='avg')")
    return [t.view(p.shape) for t, p in zip(start.split([p.numel() for p in params]), params)]
