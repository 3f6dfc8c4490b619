"""meshtrain: train any model across a meshtrain mesh from your own process.

Start an agent with an external trainer, then attach your training script to it::

    meshtrain agent --name a --trainer external --trainer-socket /tmp/a.sock --join ...

    import meshtrain
    mesh = meshtrain.connect("/tmp/a.sock")
    for batch in data:
        loss = train_step(model, batch)
        mesh.step(model)          # barrier, publish, mix: one call

The agent does membership, the PSP barrier and the SELMCAST multicast; this process computes.
Parameters travel through shared memory, never over the socket. ``model`` is a torch
``nn.Module``, a list of tensors, or a float32 numpy vector (``mesh.params`` is the shared
memory itself: a vector that *is* ``mesh.params`` costs no copy at all).

Errors (the agent stopped, refused the trainer, or the socket broke) raise :class:`MeshError`.
Only the standard library and numpy are needed; torch is optional (see ``meshtrain.torch``).
"""
import math
import mmap
import os
import socket
import struct

__all__ = ["connect", "Mesh", "MeshError", "PROTOCOL_VERSION"]

PROTOCOL_VERSION = 1
_MAGIC = 0x5452544D
_HEADER = struct.Struct("<IHHII")  # magic, version, type, seq, length
_MAX_BODY = 4096
ATTACH, WAIT_PERMIT, PUBLISH, MIX, EVAL, DETACH, FINISH, CONFIGURE = 1, 2, 3, 4, 5, 6, 7, 8
_OUTERS = ("avg", "sgd", "nesterov")
_DRIFTS = ("none", "params", "gradient")
_REPLY, _ERROR = 0x80, 0xFF
_DTYPE_FLOAT32 = 1


class MeshError(RuntimeError):
    """The agent refused a request, stopped, or the connection to it broke."""


def connect(path, timeout=60.0):
    """Connects to the agent serving ``--trainer-socket path``; attach happens on first use."""
    return Mesh(path, timeout=timeout)


class Mesh:
    """One trainer's connection to its agent (not thread-safe: one training loop uses it)."""

    def __init__(self, path, timeout=60.0):
        self.path = path
        self.timeout = timeout
        self._seq = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(path)
        except OSError as e:
            self._sock.close()
            raise MeshError(f"cannot connect to the meshtrain agent at {path}: {e}") from None
        self._map = None
        self.params = None  # numpy float32 view of the shared memory once attached
        self.step_count = 0  # the mesh step of the parameters in hand
        self.num_params = 0
        self.training = True
        self.resumed = False
        self.mixed_total = 0
        self.peer_finished = False  # set by mix(): a finished peer's final model was taken
        self.adoptions = 0  # mix() calls that replaced the parameters (join, finished peer)
        # The trainer's model lives in mesh.params (meshtrain.torch.share_parameters): report()
        # with another model puts the shared memory back afterwards.
        self.shared = False

    # ---- framing ----------------------------------------------------------------------------

    def _request(self, kind, body=b"", timeout="default"):
        if self._sock is None:
            raise MeshError("the connection to the agent is closed")
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        try:
            self._sock.settimeout(self.timeout if timeout == "default" else timeout)
            try:
                self._sock.sendall(_HEADER.pack(_MAGIC, PROTOCOL_VERSION, kind, self._seq,
                                                len(body)) + body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the agent refused us at once: read its ERROR frame below
            header = self._recv_exact(_HEADER.size)
            magic, version, rtype, seq, length = _HEADER.unpack(header)
            if magic != _MAGIC or version != PROTOCOL_VERSION or length > _MAX_BODY:
                raise MeshError("the agent answered with a malformed frame")
            reply = self._recv_exact(length)
        except socket.timeout:
            self._fail()
            raise MeshError(f"the agent did not answer within {self.timeout} s") from None
        except (ConnectionError, BrokenPipeError, OSError) as e:
            self._fail()
            raise MeshError(f"lost the connection to the meshtrain agent ({e}): "
                            "it stopped or was killed") from None
        if rtype == _ERROR:
            self._fail()
            raise MeshError("the agent refused the request: " +
                            reply.decode("utf-8", "replace"))
        if rtype != (kind | _REPLY) or seq != self._seq:
            self._fail()
            raise MeshError(f"unexpected reply type {rtype} to request {kind}")
        return reply

    def _recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self._sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the agent closed the connection")
            out += chunk
        return bytes(out)

    def _fail(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # ---- protocol ---------------------------------------------------------------------------

    def attach(self, num_params, resume_step=-1):
        """Announces a model of ``num_params`` float32 parameters; maps the shared memory.

        Returns True when the agent had parameters for us (a re-attach after the trainer
        restarted, or a join with state): they are in ``mesh.params`` and ``mesh.step_count``
        is the step to continue from.
        """
        import numpy as np
        if self.params is not None:
            raise MeshError("already attached")
        body = struct.pack("<QHHIq", int(num_params), _DTYPE_FLOAT32, 0, 0, int(resume_step))
        reply = self._request(ATTACH, body)
        if len(reply) < 24:
            raise MeshError("short attach reply")
        step, n, have, plen = struct.unpack_from("<QQII", reply)
        path = reply[24:24 + plen].decode("utf-8")
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            self._map = mmap.mmap(fd, n * 4)
        finally:
            os.close(fd)
        self.params = np.frombuffer(self._map, dtype=np.float32, count=n)
        self.num_params = n
        self.step_count = step
        self.resumed = bool(have)
        return self.resumed

    def configure(self, sync_every=1, fragments=1, outer="avg", outer_lr=1.0,
                  outer_momentum=0.0, drift="none"):
        """Tells the agent how this trainer syncs (MeshOptimizer does, after attaching): its
        ``status`` shows it, and with ``sync_every`` > 1 each mix waits until the whole models
        of the peers that reached the sync's step are in (the exact exchange of
        docs/design.md "Mixing")."""
        if self.params is None:
            raise MeshError("configure() before the trainer attached")
        if outer not in _OUTERS or drift not in _DRIFTS:
            raise ValueError(f"outer must be one of {_OUTERS}, drift one of {_DRIFTS}")
        self._request(CONFIGURE, struct.pack("<IIHHIdd", int(sync_every), int(fragments),
                                             _OUTERS.index(outer), _DRIFTS.index(drift), 0,
                                             float(outer_lr), float(outer_momentum)))

    def wait_permit(self, step):
        """Blocks until the barrier allows ``step``; False when the agent stopped training."""
        reply = self._request(WAIT_PERMIT, struct.pack("<Q", step), timeout=None)
        _, training, _ = struct.unpack("<QII", reply)
        self.training = bool(training)
        return self.training

    def publish(self, step, span=None):
        """``mesh.params`` is the snapshot of ``step`` to multicast; with ``span=(begin, end)``
        only those floats go out (a streaming fragment, MeshOptimizer(fragments=F))."""
        if span is None:
            self._request(PUBLISH, struct.pack("<Q", step))
        else:
            begin, end = int(span[0]), int(span[1])
            if not 0 <= begin < end <= self.num_params:
                raise ValueError(f"fragment [{begin}, {end}) is not inside the model's "
                                 f"{self.num_params} parameters")
            self._request(PUBLISH, struct.pack("<QQQ", step, begin, end))
        self.step_count = step

    def mix(self):
        """Mixes the models received since the last call into ``mesh.params``.

        Returns (models mixed, adopted): ``adopted`` means the agent replaced the parameters (and
        ``mesh.step_count``) with a peer's: a more advanced peer's model and step (a join with
        state), or a finished peer's final model. Sets ``mesh.peer_finished`` in the latter
        case (the peer met the agent's --target-accuracy with that model; it is taken once per
        peer and step): evaluate now, the model in hand may meet the target too.
        """
        mixed, flags, step = struct.unpack("<IIQ", self._request(MIX))
        adopted = bool(flags & 1)
        if adopted:
            self.step_count = step
            self.adoptions += 1
        if flags & 2:
            self.peer_finished = True
        self.mixed_total += mixed
        return mixed, adopted

    def report(self, loss, accuracy, step=None, model=None):
        """Reports a test evaluation; True when it met the agent's --target-accuracy.

        A report that meets the target makes the parameters in shared memory the final model
        the agent offers to its peers: pass the evaluated ``model`` (as for :meth:`step`) when it
        may differ from what the last :meth:`step` left there (e.g. local steps since). When
        the trainer's model lives in the shared memory (``mesh.shared``) and ``model`` is
        another one (e.g. a moving average), the shared memory is put back after the report.
        """
        loss, accuracy = float(loss), float(accuracy)
        if not (math.isfinite(loss) and loss >= 0 and 0 <= accuracy <= 1):
            raise ValueError("loss must be finite and >= 0, accuracy in [0, 1]")
        saved = None
        if model is not None and self.params is not None:
            view = _View.of(model)
            if self.shared and not view.aliases(self.params):
                saved = self.params.copy()
            view.store(self.params)
        step = self.step_count if step is None else int(step)
        try:
            stop, _ = struct.unpack("<II", self._request(EVAL, struct.pack("<Qdd", step, loss,
                                                                          accuracy)))
        finally:
            if saved is not None and self.params is not None:
                self.params[:] = saved
        if stop:
            self.training = False
        return bool(stop)

    def finish(self, model=None, timeout=None):
        """Ends training and returns once this node holds the mesh's one model.

        ``model`` (as for :meth:`step`; default: what the shared memory holds) is this node's
        final model. The agent offers it to peers still training and, once no live member trains
        any more, the finished nodes average their final models; the average (bit for bit the
        same on every node) is then in ``mesh.params`` and loaded into ``model``. Waits up to
        ``timeout`` seconds (None: as long as peers train). Returns
        ``{"models": nodes averaged, "crc32": CRC-32 of the parameters, "step": step}``.
        """
        import zlib
        view = _View.of(model) if model is not None else None
        if self.params is None:
            raise MeshError("finish() before the trainer attached (no model)")
        if view is not None:
            if view.size != self.num_params:
                raise MeshError(f"the model has {view.size} parameters, attached with "
                                f"{self.num_params}")
            view.store(self.params)
        models, crc, step = struct.unpack("<IIQ", self._request(FINISH, timeout=timeout))
        self.training = False
        if view is not None:
            view.load(self.params)
        if zlib.crc32(memoryview(self.params).cast("B")) != crc:
            raise MeshError("the consensus model in the shared memory does not match its CRC")
        return {"models": models, "crc32": crc, "step": step}

    def detach(self):
        """Leaves the agent cleanly (it stops counting as training) and closes the socket."""
        if self._sock is None:
            return
        try:
            self._request(DETACH)
        finally:
            self.close()

    def close(self):
        self._fail()
        self.params = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a caller still holds a view of mesh.params; the mapping stays
            self._map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.detach()
        else:
            self.close()

    # ---- one call per step ------------------------------------------------------------------

    def step(self, model, steps=1, span=None):
        """Publish, barrier and mix for a model that just took ``steps`` local steps.

        ``model``: a torch ``nn.Module`` (its parameters), a list of tensors, or a numpy array
        (float32 is copied in place; ``mesh.params`` itself is not copied at all, nor are torch
        parameters placed in it by ``meshtrain.torch.share_parameters``). On the first
        call the trainer attaches; if the agent already had a model (this trainer restarted),
        that model is loaded into ``model`` and nothing is published. Returns the number of
        peer models mixed in. ``span=(begin, end)``: only those floats are multicast (a
        streaming fragment). Raises MeshError when the agent goes away.
        """
        view = _View.of(model)
        if self.params is None:
            if self.attach(view.size):
                view.load(self.params)
                return 0
        elif view.size != self.num_params:
            raise MeshError(f"the model has {view.size} parameters, attached with "
                            f"{self.num_params}")
        view.store(self.params)
        nxt = self.step_count + int(steps)
        self.publish(nxt, span)
        self.wait_permit(nxt + 1)
        mixed, adopted = self.mix()
        if mixed or adopted:
            view.load(self.params)
        return mixed


class _View:
    """Copies between a model and the flat shared vector; aliases(shm): the model is that
    vector already (store and load copy nothing)."""

    def __init__(self, size, store, load, aliases=None):
        self.size, self.store, self.load = size, store, load
        self.aliases = aliases or (lambda shm: False)

    @staticmethod
    def of(model):
        import numpy as np
        if isinstance(model, np.ndarray):
            if model.dtype != np.float32 or not model.flags.c_contiguous:
                raise TypeError("a numpy model must be a contiguous float32 array")
            flat = model.reshape(-1)
            addr = flat.__array_interface__["data"][0]

            def same(shm):  # the model is mesh.params itself: nothing to copy
                return addr == shm.__array_interface__["data"][0] and flat.size == shm.size

            def store(shm):
                if not same(shm):
                    np.copyto(shm, flat)

            def load(shm):
                if not same(shm):
                    np.copyto(flat, shm)
            return _View(flat.size, store, load, same)
        tensors = list(model.parameters()) if hasattr(model, "parameters") else list(model)
        if not tensors:
            raise TypeError("the model has no parameters")
        from meshtrain.torch import tensor_view
        return tensor_view(tensors)
