"""PyTorch helpers: copy tensors to and from the mesh's shared memory, and MeshOptimizer.

    opt = meshtrain.torch.MeshOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), mesh,
                                        sync_every=4)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()   # a local step; every 4th also publishes, waits for the barrier and mixes

Only parameters are mixed (not buffers such as BatchNorm statistics, nor optimizer state).
"""
import torch

__all__ = ["MeshOptimizer", "tensor_view"]


def tensor_view(tensors):
    """A view that copies `tensors` (in order) into a flat float32 vector and back."""
    from meshtrain import _View
    tensors = list(tensors)
    sizes = [t.numel() for t in tensors]
    total = sum(sizes)

    def spans(shm):
        flat = torch.from_numpy(shm)
        off = 0
        for t, n in zip(tensors, sizes):
            yield t, flat[off:off + n]
            off += n

    def store(shm):
        with torch.no_grad():
            for t, part in spans(shm):
                part.copy_(t.detach().reshape(-1))

    def load(shm):
        with torch.no_grad():
            for t, part in spans(shm):
                t.copy_(part.view_as(t))
    return _View(total, store, load)


class MeshOptimizer:
    """Wraps a torch optimizer: every `sync_every` local steps, one mesh.step (barrier, publish
    and mix) on the optimizer's parameters. Attaches at construction, so a restarted trainer
    continues from the agent's model (and `mesh.step_count`) before its first step."""

    def __init__(self, optimizer, mesh, sync_every=1, params=None):
        if sync_every < 1:
            raise ValueError("sync_every must be >= 1")
        self.optimizer = optimizer
        self.mesh = mesh
        self.sync_every = int(sync_every)
        self.params = list(params) if params is not None else [
            p for g in optimizer.param_groups for p in g["params"]]
        self.local_steps = 0
        view = tensor_view(self.params)
        if mesh.params is None and mesh.attach(view.size):
            view.load(mesh.params)

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
        loss = self.optimizer.step(closure)
        self.local_steps += 1
        if self.local_steps % self.sync_every == 0:
            self.mesh.step(self.params, steps=self.sync_every)
        return loss

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)
