"""An in-process mesh for MeshOptimizer tests without an agent: n nodes, a thread each."""
import threading


class FakeMesh:
    """n in-process nodes, a thread each: step() publishes, waits for all, mixes the mean."""

    def __init__(self, shared, barrier, i):
        self.shared, self.barrier, self.i = shared, barrier, i
        self.params = None
        self.layout = None
        self.adoptions = 0
        self.resumed = False

    def attach(self, layout):
        self.layout = layout
        return False

    step_count = 0

    def configure(self, *args, **kwargs):
        pass

    def wait_permit(self, step):
        return True

    def step(self, layout, steps=1, span=None):
        import torch
        tensors = layout.tensors
        flat = torch.cat([t.detach().reshape(-1) for t in tensors]).clone()
        self.shared[self.i] = flat
        self.barrier.wait()
        mixed = sum(self.shared) / len(self.shared)
        self.barrier.wait()
        lo, hi = span or (0, flat.numel())
        off = 0
        with torch.no_grad():
            for t in tensors:
                n = t.numel()
                a, b = max(lo, off), min(hi, off + n)
                if a < b:
                    t.view(-1)[a - off:b - off].copy_(mixed[a:b])
                off += n


def run_nodes(n, barrier, steps, timeout=120):
    """Runs steps(i) for every node i in a thread of its own; a node's exception aborts the
    barrier (the others stop too) and fails here, as does a thread that does not end (within
    `timeout` seconds a thread; None: waits)."""
    errors = []

    def node(i):
        try:
            steps(i)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=node, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a node thread did not end"
