"""Mesh: one trainer's connection to its agent (docs/python.md)."""
from __future__ import annotations

import math
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

import numpy as np

from meshtrain import _protocol as p
from meshtrain._layout import Layout, Vector, bind
from meshtrain._protocol import MeshError

SOCKET_ENV = "MESHTRAIN_SOCKET"


@dataclass(frozen=True)
class MixResult:
    """What a MIX did. ``mixed``: peer models mixed in. ``adopted``: the agent replaced the
    parameters (and the step) with a peer's — a more advanced peer's model (a join with state)
    or a finished peer's final model; ``peer_finished`` tells the latter (the peer met the
    agent's --target-accuracy with it: evaluate now, the model in hand may meet it too).
    ``step``: the mesh step of the parameters in hand afterwards."""
    mixed: int
    adopted: bool
    peer_finished: bool
    step: int


@dataclass(frozen=True)
class FinishResult:
    """The mesh's one model: ``models`` final models averaged, the CRC-32 of its float32 bytes
    (the same on every node), and its step."""
    models: int
    crc32: int
    step: int


def connect(path: Optional[str] = None, timeout: float = 60.0) -> "Mesh":
    """Connects to the agent serving ``--trainer-socket path``; attach happens on first use.
    Without ``path``, the socket ``meshtrain run`` hands over in $MESHTRAIN_SOCKET."""
    if path is None:
        path = os.environ.get(SOCKET_ENV)
        if not path:
            raise MeshError(f"no agent socket: pass connect(path), or start the script under "
                            f"`meshtrain run ... -- COMMAND` (it sets ${SOCKET_ENV})")
    return Mesh(path, timeout=timeout)


class Mesh:
    """One trainer's connection to its agent. Not thread-safe: one training loop uses it.

    Read-only state: ``params`` (float32 numpy view of the shared memory once attached, else
    None), ``layout`` (what the trainer attached, when it attached a model), ``step_count`` (the
    mesh step of the parameters in hand), ``num_params``, ``training``, ``resumed`` (the agent
    had a model for this trainer at attach), ``mixed_total``, ``adoptions`` (MIXes that replaced
    the parameters), ``finals_taken`` (finished peers' final models taken over), ``shared``
    (the model lives in the shared memory: meshtrain.torch.share_parameters) and
    ``copied_bytes`` (bytes this connection copied between models and the shared memory).
    """

    def __init__(self, path: str, timeout: float = 60.0) -> None:
        self._path = path
        self._channel = p.Channel(path, timeout)
        self._map: Optional[mmap.mmap] = None
        self._params: Optional[Vector] = None
        self._layout: Optional[Layout] = None
        self._step = 0
        self._num_params = 0
        self._training = True
        self._resumed = False
        self._adopt_waiting = False
        self._mixed_total = 0
        self._adoptions = 0
        self._finals_taken = 0
        self._shared = False
        self._copied = 0

    # ---- read-only state ----------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def params(self) -> Optional[Vector]:
        return self._params

    @property
    def layout(self) -> Optional[Layout]:
        return self._layout

    @property
    def step_count(self) -> int:
        return self._step

    @property
    def num_params(self) -> int:
        return self._num_params

    @property
    def training(self) -> bool:
        return self._training

    @property
    def resumed(self) -> bool:
        return self._resumed

    @property
    def adopt_waiting(self) -> bool:
        """The last ``wait_permit`` said the agent holds a model to adopt (it joined a mesh that
        was further on): the next ``mix()`` hands it over, ``adopted``."""
        return self._adopt_waiting

    @property
    def mixed_total(self) -> int:
        return self._mixed_total

    @property
    def adoptions(self) -> int:
        return self._adoptions

    @property
    def finals_taken(self) -> int:
        return self._finals_taken

    @property
    def shared(self) -> bool:
        return self._shared

    @property
    def copied_bytes(self) -> int:
        return self._copied

    def _mark_shared(self) -> None:
        """meshtrain.torch.share_parameters placed the attached tensors in the shared memory."""
        self._shared = True

    def _store(self, layout: Layout) -> None:
        assert self._params is not None
        self._copied += layout.store(self._params)

    def _load(self, layout: Layout) -> None:
        assert self._params is not None
        self._copied += layout.load(self._params)

    def _attached(self) -> Vector:
        if self._params is None:
            raise MeshError("the trainer is not attached (no model yet)")
        return self._params

    # ---- protocol -----------------------------------------------------------------------

    def attach(self, model: Union[int, Layout, Any], resume_step: int = -1) -> bool:
        """Announces the model — a parameter count, or a model (a :class:`Layout`, torch module,
        list of tensors or float32 numpy vector), which becomes ``mesh.layout`` — and maps the
        shared memory. True when the agent had parameters for us (a re-attach after the trainer
        restarted, or a join with state): they are in ``mesh.params``, ``mesh.step_count`` is the
        step to continue from, and a model given here has not been changed (load it with
        ``mesh.layout`` / :meth:`step`)."""
        if self._params is not None:
            raise MeshError("already attached")
        layout = None if isinstance(model, int) else Layout.of(model)
        num = model if isinstance(model, int) else layout.size  # type: ignore[union-attr]
        body = struct.pack("<QHHIq", int(num), p.DTYPE_FLOAT32, 0, 0, int(resume_step))
        reply = self._channel.request(p.ATTACH, body)
        if len(reply) < 24:
            raise MeshError("short attach reply")
        step, n, have, plen = struct.unpack_from("<QQII", reply)
        path = reply[24:24 + plen].decode("utf-8")
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            self._map = mmap.mmap(fd, n * 4)
        finally:
            os.close(fd)
        self._params = np.frombuffer(self._map, dtype=np.float32, count=n)
        self._num_params = int(n)
        self._layout = layout
        self._step = int(step)
        self._resumed = bool(have)
        return self._resumed

    def configure(self, sync_every: int = 1, fragments: int = 1, outer: str = "avg",
                  outer_lr: float = 1.0, outer_momentum: float = 0.0,
                  drift: str = "none") -> None:
        """Tells the agent how this trainer syncs (MeshOptimizer does, after attaching): its
        ``status`` shows it, and with ``sync_every`` > 1 each mix waits until the whole models
        of the peers that reached the sync's step are in (docs/design.md "Mixing")."""
        self._attached()
        if outer not in p.OUTERS or drift not in p.DRIFTS:
            raise ValueError(f"outer must be one of {p.OUTERS}, drift one of {p.DRIFTS}")
        self._channel.request(p.CONFIGURE, struct.pack(
            "<IIHHIdd", int(sync_every), int(fragments), p.OUTERS.index(outer),
            p.DRIFTS.index(drift), 0, float(outer_lr), float(outer_momentum)))

    def wait_permit(self, step: int) -> bool:
        """Blocks until the barrier allows ``step``; False when the agent stopped training."""
        reply = self._channel.request(p.WAIT_PERMIT, struct.pack("<Q", step), timeout=None)
        _, training, flags = struct.unpack("<QII", reply)
        self._training = bool(training)
        self._adopt_waiting = bool(flags & 1)
        return self._training

    def publish(self, step: int, span: Optional[Tuple[int, int]] = None) -> None:
        """``mesh.params`` is the snapshot of ``step`` to multicast; with ``span=(begin, end)``
        only those floats go out (a streaming fragment, MeshOptimizer(fragments=F))."""
        self._attached()
        if span is None:
            self._channel.request(p.PUBLISH, struct.pack("<Q", step))
        else:
            begin, end = int(span[0]), int(span[1])
            if not 0 <= begin < end <= self._num_params:
                raise ValueError(f"fragment [{begin}, {end}) is not inside the model's "
                                 f"{self._num_params} parameters")
            self._channel.request(p.PUBLISH, struct.pack("<QQQ", step, begin, end))
        self._step = int(step)

    def mix(self) -> MixResult:
        """Mixes the models received since the last call into ``mesh.params``."""
        mixed, flags, step = struct.unpack("<IIQ", self._channel.request(p.MIX))
        adopted, finished = bool(flags & 1), bool(flags & 2)
        if adopted:
            self._step = int(step)
            self._adoptions += 1
        if finished:
            self._finals_taken += 1
        self._mixed_total += mixed
        return MixResult(int(mixed), adopted, finished, self._step)

    def report(self, loss: float, accuracy: float, step: Optional[int] = None,
               model: Any = None) -> bool:
        """Reports a test evaluation; True when it met the agent's --target-accuracy.

        A report that meets the target makes the shared memory the final model the agent offers
        to its peers: pass the evaluated ``model`` when it may differ from what the last
        :meth:`step` left there — the attached model, or a copy of its leading tensors such as a
        ``ModelAverage``'s (the shared memory is put back after the report when the trainer's
        model lives in it)."""
        loss, accuracy = float(loss), float(accuracy)
        if not (math.isfinite(loss) and loss >= 0 and 0 <= accuracy <= 1):
            raise ValueError("loss must be finite and >= 0, accuracy in [0, 1]")
        saved = None
        if model is not None and self._params is not None:
            layout = bind(model, self._layout, self._num_params, "report", prefix_ok=True)
            if self._shared and not layout.aliases(self._params):
                saved = self._params.copy()
            self._store(layout)
        step = self._step if step is None else int(step)
        try:
            stop, _ = struct.unpack("<II", self._channel.request(
                p.EVAL, struct.pack("<Qdd", step, loss, accuracy)))
        finally:
            if saved is not None and self._params is not None:
                self._params[:] = saved
        if stop:
            self._training = False
        return bool(stop)

    def finish(self, model: Any = None, timeout: Optional[float] = None) -> FinishResult:
        """Ends training and returns once this node holds the mesh's one model.

        ``model`` (default: the attached one) is this node's final model; when it is still the
        mix the last :meth:`step` left (and the node mixes every step), the agent offers the
        model that step published instead, before the mix, so that every node's last model
        counts once in the average (docs/design.md "One model at the end"). Once no live member
        trains any more, the finished nodes average their final models; the average (bit for bit
        the same on every node) is then in ``mesh.params`` and loaded into ``model`` (and into
        the attached layout: parameters, buffers, corrections). Waits up to ``timeout`` seconds
        (None: as long as peers train)."""
        shm = self._attached()
        layout = None if model is None and self._layout is None else bind(
            model, self._layout, self._num_params, "finish", prefix_ok=True)
        if layout is not None:
            self._store(layout)
        models, crc, step = struct.unpack("<IIQ", self._channel.request(p.FINISH,
                                                                        timeout=timeout))
        self._training = False
        for target in (layout, self._layout if self._layout is not layout else None):
            if target is not None:
                self._load(target)
        if zlib.crc32(shm.data.cast("B")) != crc:
            raise MeshError("the consensus model in the shared memory does not match its CRC")
        self._step = int(step)
        return FinishResult(int(models), int(crc), int(step))

    def detach(self) -> None:
        """Leaves the agent cleanly (it stops counting as training) and closes the socket."""
        if self._channel.closed:
            return
        try:
            self._channel.request(p.DETACH)
        finally:
            self.close()

    def close(self) -> None:
        self._channel.close()
        self._params = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a caller still holds a view of mesh.params; the mapping stays
            self._map = None

    def __enter__(self) -> "Mesh":
        return self

    def __exit__(self, kind: Optional[type], value: Optional[BaseException],
                 trace: Any) -> None:
        if kind is None:
            self.detach()
        else:
            self.close()

    # ---- one call per step --------------------------------------------------------------

    def step(self, model: Any, steps: int = 1,
             span: Optional[Tuple[int, int]] = None) -> MixResult:
        """Publish, barrier and mix for a model that just took ``steps`` local steps.

        ``model``: a torch ``nn.Module`` (its parameters), a list of tensors, a float32 numpy
        vector, or a :class:`Layout`. The first call attaches with it; if the agent already had a
        model (this trainer restarted), that model is loaded into ``model``, nothing is published
        and the result says ``adopted``. Later calls take the attached model (or tensors inside
        it); nothing is copied for tensors placed in the shared memory
        (meshtrain.torch.share_parameters) or for ``mesh.params`` itself. ``span=(begin, end)``:
        only those floats are multicast (a streaming fragment)."""
        if self._params is None:
            layout = Layout.of(model)
            if self.attach(layout):
                self._load(layout)
                return MixResult(0, True, False, self._step)
        else:
            layout = bind(model, self._layout, self._num_params, "step", prefix_ok=False)
        self._store(layout)
        nxt = self._step + int(steps)
        self.publish(nxt, span)
        self.wait_permit(nxt + 1)
        result = self.mix()
        if result.mixed or result.adopted:
            self._load(layout)
        return result
