"""meshtrain: train any model across a meshtrain mesh from your own process.

Start the script under its agent with one command per host::

    meshtrain run --name a --join host-b:7950 -- python3 train.py

    import meshtrain
    mesh = meshtrain.connect()        # the agent `meshtrain run` started ($MESHTRAIN_SOCKET)
    for batch in data:
        loss = train_step(model, batch)
        mesh.step(model)              # barrier, publish, mix: one call

The agent does membership, the PSP barrier and the SELMCAST multicast; this process computes.
Parameters travel through shared memory, never over the socket. ``model`` is a torch
``nn.Module``, a list of tensors, a float32 numpy vector or a :class:`Layout` (``mesh.params``
is the shared memory itself: a vector that *is* ``mesh.params`` costs no copy at all).
PyTorch users take ``meshtrain.torch.MeshOptimizer``, a ``torch.optim.Optimizer``.

Errors (the agent stopped, refused the trainer, or the socket broke) raise :class:`MeshError`.
Only the standard library and numpy are needed; torch is optional (see ``meshtrain.torch``).
"""
from meshtrain._layout import Layout
from meshtrain._mesh import FinishResult, Mesh, MixResult, connect
from meshtrain._protocol import PROTOCOL_VERSION, MeshError

__all__ = ["connect", "FinishResult", "Layout", "Mesh", "MeshError", "MixResult",
           "PROTOCOL_VERSION"]
