"""Layout: the one description of what a trainer attaches to its agent.

The agent's shared memory is one flat float32 vector. A Layout says what it holds, in order: the
floating-point tensors of a torch model (parameters, then whatever else travels beside them:
buffers, optimizer moments, drift corrections) or one float32 numpy vector. ``Mesh.step``,
``Mesh.finish`` and ``Mesh.report`` all resolve their ``model`` argument against the layout the
trainer attached with (``Mesh.layout``), so no call can pass another arrangement of the vector.

A tensor that already is its span of the vector (``meshtrain.torch.share_parameters``) is never
copied; any other one is copied in and out (converted, for float16/bfloat16 tensors: the shared
memory is always float32). Every copy is counted (``Mesh.copied_bytes``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from meshtrain._protocol import MeshError

if TYPE_CHECKING:
    import torch

Vector = npt.NDArray[np.float32]


def _is_tensor(x: object) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _address(shm: Vector) -> int:
    return int(shm.__array_interface__["data"][0])


class Layout:
    """An ordered list of floating-point tensors, or one float32 numpy vector, laid end to end
    in the shared memory. Build one with :meth:`of`."""

    def __init__(self, tensors: Sequence["torch.Tensor"] = (),
                 vector: Optional[Vector] = None) -> None:
        if vector is not None:
            if tensors:
                raise TypeError("a Layout holds tensors or one numpy vector, not both")
            if vector.dtype != np.float32 or not vector.flags.c_contiguous:
                raise TypeError("a numpy model must be a contiguous float32 array")
            self._vector: Optional[Vector] = vector.reshape(-1)
            self._tensors: Tuple["torch.Tensor", ...] = ()
            self._sizes: Tuple[int, ...] = (int(self._vector.size),)
            self._shapes: Tuple[Tuple[int, ...], ...] = ((int(self._vector.size),),)
            return
        for i, t in enumerate(tensors):
            if not _is_tensor(t):
                raise TypeError(f"part {i} of the model is a {type(t).__name__}, not a tensor")
            if not t.is_floating_point():
                raise TypeError(f"part {i} of the model ({tuple(t.shape)}) is {t.dtype}: only "
                                "floating-point tensors travel")
        if not tensors:
            raise TypeError("the model has no parameters")
        self._vector = None
        self._tensors = tuple(tensors)
        self._sizes = tuple(int(t.numel()) for t in self._tensors)
        self._shapes = tuple(tuple(int(d) for d in t.shape) for t in self._tensors)

    @staticmethod
    def of(model: Union["Layout", Vector, "torch.nn.Module", Iterable["torch.Tensor"]]
           ) -> "Layout":
        """The layout of ``model``: itself when it is one; a numpy float32 vector; a torch
        ``nn.Module`` (its ``parameters()``, in order); or a sequence of tensors."""
        if isinstance(model, Layout):
            return model
        if isinstance(model, np.ndarray):
            return Layout(vector=model)
        params = getattr(model, "parameters", None)
        if callable(params):
            return Layout(list(params()))
        if _is_tensor(model):
            return Layout([model])  # type: ignore[list-item]
        return Layout(list(model))  # type: ignore[arg-type]

    @property
    def size(self) -> int:
        """Floats in the layout."""
        return sum(self._sizes)

    @property
    def tensors(self) -> Tuple["torch.Tensor", ...]:
        """The tensors, in order (empty for a numpy vector)."""
        return self._tensors

    @property
    def shapes(self) -> Tuple[Tuple[int, ...], ...]:
        return self._shapes

    def __len__(self) -> int:
        return len(self._sizes)

    def __repr__(self) -> str:
        kind = "numpy vector" if self._vector is not None else f"{len(self._tensors)} tensors"
        return f"Layout({kind}, {self.size} floats)"

    # ---- how two layouts relate ------------------------------------------------------------

    def same(self, other: "Layout") -> bool:
        """The same tensors (or the same numpy memory) in the same order."""
        if self is other:
            return True
        if self._vector is not None or other._vector is not None:
            return (self._vector is not None and other._vector is not None and
                    _address(self._vector) == _address(other._vector) and
                    self.size == other.size)
        return len(self._tensors) == len(other._tensors) and all(
            a is b for a, b in zip(self._tensors, other._tensors))

    def within(self, other: "Layout") -> bool:
        """Every tensor of this layout is one of ``other``'s (e.g. a module's parameters inside
        what MeshOptimizer attached: parameters, buffers, corrections)."""
        ids = {id(t) for t in other._tensors}
        return bool(self._tensors) and all(id(t) in ids for t in self._tensors)

    def leads(self, other: "Layout") -> bool:
        """This layout has the shapes of ``other``'s first tensors (e.g. a copy of the model,
        such as a moving average, against the attached parameters and buffers)."""
        if self._vector is not None or other._vector is not None:
            return self._vector is not None and other._vector is not None and \
                self.size <= other.size
        return self._shapes == other._shapes[:len(self._shapes)]

    # ---- copies ----------------------------------------------------------------------------

    def placed(self, shm: Vector) -> List[bool]:
        """Per tensor: True when it is its own span of ``shm`` already (a float32, contiguous CPU
        tensor at that address), so that nothing needs copying."""
        addr = _address(shm)
        if self._vector is not None:
            return [_address(self._vector) == addr and self.size <= shm.size]
        out = []
        for t, n in zip(self._tensors, self._sizes):
            out.append(n == 0 or (t.data_ptr() == addr and str(t.dtype) == "torch.float32" and
                                  t.is_contiguous()))
            addr += 4 * n
        return out

    def aliases(self, shm: Vector) -> bool:
        """The whole layout is ``shm`` itself: store and load copy nothing."""
        return self.size == shm.size and all(self.placed(shm))

    def _spans(self, shm: Vector) -> Iterator[Tuple["torch.Tensor", "torch.Tensor"]]:
        import torch
        flat: Optional[torch.Tensor] = None
        off = 0
        for t, n, done in zip(self._tensors, self._sizes, self.placed(shm)):
            if not done:
                if flat is None:
                    flat = torch.from_numpy(shm)
                yield t, flat[off:off + n]
            off += n

    def store(self, shm: Vector) -> int:
        """Copies the layout into the start of ``shm``; returns the bytes copied."""
        self._check(shm)
        if self._vector is not None:
            if self.placed(shm)[0]:
                return 0
            np.copyto(shm[:self.size], self._vector)
            return 4 * self.size
        import torch
        copied = 0
        with torch.no_grad():
            for t, part in self._spans(shm):
                part.copy_(t.detach().reshape(-1))
                copied += 4 * part.numel()
        return copied

    def load(self, shm: Vector) -> int:
        """Copies the start of ``shm`` into the layout; returns the bytes copied."""
        self._check(shm)
        if self._vector is not None:
            if self.placed(shm)[0]:
                return 0
            np.copyto(self._vector, shm[:self.size])
            return 4 * self.size
        import torch
        copied = 0
        with torch.no_grad():
            for t, part in self._spans(shm):
                t.copy_(part.view_as(t))
                copied += 4 * part.numel()
        return copied

    def _check(self, shm: Vector) -> None:
        if self.size > shm.size:
            raise ValueError(f"a layout of {self.size} floats does not fit a shared memory of "
                             f"{shm.size}")


def describe(layout: Optional[Layout], num_params: int) -> str:
    """How an error message names what the trainer attached."""
    if layout is None:
        return f"{num_params} parameters"
    return f"{layout.size} parameters in {len(layout)} tensor{'s' if len(layout) != 1 else ''}"


def bind(model: Any, attached: Optional[Layout], num_params: int, what: str,
         prefix_ok: bool) -> Layout:
    """Resolves ``model`` against the attached layout: the attached layout itself when
    ``model`` is it or names only tensors inside it; ``model``'s own layout when nothing was
    attached as a layout and it has the attached size, or (``prefix_ok``) when it has the shapes
    of the attached layout's first tensors (a copy such as a moving average). Anything else is a
    MeshError naming both."""
    if attached is not None and (model is attached or model is None):
        return attached
    mine = Layout.of(model)
    if attached is None:
        if mine.size == num_params or (prefix_ok and mine.size <= num_params):
            return mine
    elif mine.same(attached) or mine.within(attached):
        return attached
    elif prefix_ok and mine.leads(attached):
        return mine
    raise MeshError(f"{what}: the model has {describe(mine, mine.size)}, but the trainer "
                    f"attached {describe(attached, num_params)}; pass the model the trainer "
                    "attached with (e.g. the MeshOptimizer's model, or opt.layout)")
