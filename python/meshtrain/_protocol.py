"""The trainer socket's framing (docs/python.md "The socket protocol"; the agent's side is
daemon/trainer/trainer_protocol.h): 16-byte little-endian headers, bodies of at most 4096 bytes,
one request answered at a time."""
from __future__ import annotations

import socket
import struct
from typing import Optional

PROTOCOL_VERSION = 1
MAGIC = 0x5452544D  # "MTRT"
HEADER = struct.Struct("<IHHII")  # magic, version, type, seq, length
MAX_BODY = 4096
ATTACH, WAIT_PERMIT, PUBLISH, MIX, EVAL, DETACH, FINISH, CONFIGURE = range(1, 9)
REPLY, ERROR = 0x80, 0xFF
DTYPE_FLOAT32 = 1
OUTERS = ("avg", "sgd", "nesterov")
DRIFTS = ("none", "params", "gradient")


class MeshError(RuntimeError):
    """The agent refused a request, stopped, or the connection to it broke."""


class _Default:
    pass


DEFAULT_TIMEOUT = _Default()


class Channel:
    """One connection to an agent's trainer socket: a request, then its reply."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.timeout = timeout
        self._seq = 0
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except OSError as e:
            sock.close()
            raise MeshError(f"cannot connect to the meshtrain agent at {path}: {e}") from None
        self._sock: Optional[socket.socket] = sock

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def request(self, kind: int, body: bytes = b"",
                timeout: "Optional[float] | _Default" = DEFAULT_TIMEOUT) -> bytes:
        """Sends one request and returns its reply's body; MeshError (and the connection closed)
        on an ERROR reply, a malformed or unexpected frame, a timeout or a broken socket."""
        sock = self._sock
        if sock is None:
            raise MeshError("the connection to the agent is closed")
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        wait = self.timeout if isinstance(timeout, _Default) else timeout
        try:
            sock.settimeout(wait)
            try:
                sock.sendall(HEADER.pack(MAGIC, PROTOCOL_VERSION, kind, self._seq, len(body)) +
                             body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the agent refused us at once: read its ERROR frame below
            magic, version, rtype, seq, length = HEADER.unpack(self._recv_exact(sock, HEADER.size))
            if magic != MAGIC or version != PROTOCOL_VERSION or length > MAX_BODY:
                raise MeshError("the agent answered with a malformed frame")
            reply = self._recv_exact(sock, length)
        except socket.timeout:
            self.close()
            raise MeshError(f"the agent did not answer within {wait} s") from None
        except OSError as e:
            self.close()
            raise MeshError(f"lost the connection to the meshtrain agent ({e}): "
                            "it stopped or was killed") from None
        except MeshError:
            self.close()
            raise
        if rtype == ERROR:
            self.close()
            raise MeshError("the agent refused the request: " + reply.decode("utf-8", "replace"))
        if rtype != (kind | REPLY) or seq != self._seq:
            self.close()
            raise MeshError(f"unexpected reply type {rtype} to request {kind}")
        return reply

    @staticmethod
    def _recv_exact(sock: socket.socket, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the agent closed the connection")
            out += chunk
        return bytes(out)
