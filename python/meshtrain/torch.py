"""PyTorch helpers: copy tensors to and from the mesh's shared memory, and MeshOptimizer.

    opt = meshtrain.torch.MeshOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), mesh,
                                        sync_every=4)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()   # a local step; every 4th also publishes, waits for the barrier and mixes

Only parameters are mixed (not buffers such as BatchNorm statistics, nor optimizer state).

    average = meshtrain.torch.ModelAverage(model, decay=0.98, mesh=mesh)
    ...after each opt.step(): average.update()
    evaluate(average.model); mesh.report(loss, acc, model=average.model)

evaluates the moving average of the parameters instead (the agent's --eval-average rule).
"""
import copy

import torch

__all__ = ["MeshOptimizer", "ModelAverage", "tensor_view"]


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
