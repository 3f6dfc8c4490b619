"""MeshOptimizer(compress="sparse:F:B") in one process (no agent): compressed pseudo-gradients
with error feedback (python/meshtrain/_sparse.py).

Three nodes, each a thread with a MeshOptimizer over an in-process mesh (fake_mesh.FakeMesh: a
mesh step publishes, waits for all and leaves the mean over the published range). Node i
minimises 0.5·c_i·|x − a_i|² over 600 coordinates in two tensors with SGD; x* = (Σ c_i a_i)/Σ c_i.
Checked:
- compress_topk sends ceil(F n) values of largest magnitude at no more than 2^B distinct values;
- the published range is the outbox (never the model) and holds at most F of its parameter part
  nonzero; what was not sent stays in the node's model (sent + e = θ₀ − x, then x ← θ₀' − e);
- every node holds the same outer parameters θ₀ after every whole-model sync (as in DiLoCo);
- the nodes reach x* as the uncompressed run does (outer sgd; one fragment with the gradient
  drift correction, two with the parameter one); with two fragments, without error feedback,
  they do not (the top-k's bias stays);
- state_dict round-trips the error buffer; a replaced model clears it; overlap=K outside
  1..sync_every // fragments is refused.
Skips (77) without torch.
"""
import math
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import numpy_python  # noqa: E402
from fake_mesh import FakeMesh, run_nodes  # noqa: E402

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
CURV = (1.0, 2.0, 4.0)
N = 3


class CountingMesh(FakeMesh):
    """FakeMesh that records, per sync, the published range and its values."""

    def __init__(self, shared, barrier, i):
        super().__init__(shared, barrier, i)
        self.sent = []  # (span, values published in it)

    def step(self, layout, steps=1, span=None):
        import torch
        flat = torch.cat([t.detach().reshape(-1) for t in layout.tensors])
        lo, hi = span or (0, flat.numel())
        self.sent.append(((lo, hi), flat[lo:hi].clone()))
        return super().step(layout, steps, span)


def targets():
    import torch
    g = torch.Generator().manual_seed(7)
    return [torch.randn(600, generator=g) * (1 + i) for i in range(N)]


def train(compress, fragments=1, drift="auto", h=10, rounds=80, lr=0.1, feedback=True):
    import torch
    import meshtrain.torch as mt
    a = targets()
    shared = [None] * N
    barrier = threading.Barrier(N, timeout=60)
    models = [[torch.nn.Parameter(torch.zeros(20, 20)), torch.nn.Parameter(torch.zeros(200))]
              for _ in range(N)]
    opts = [mt.MeshOptimizer(torch.optim.SGD(models[i], lr=lr), CountingMesh(shared, barrier, i),
                             sync_every=h, share_memory=False, outer="sgd",
                             fragments=fragments, drift_correction=drift, compress=compress)
            for i in range(N)]
    if not feedback:  # what a sync left out is dropped instead of kept in the model
        for o in opts:
            o.sparse.keep_residual = lambda params, lo, hi, o=o: o.sparse.err.zero_()
    synced = []

    def steps(i):
        for s in range(h * rounds):
            opts[i].zero_grad()
            x = torch.cat([p.reshape(-1) for p in models[i]])
            (0.5 * CURV[i] * ((x - a[i]) ** 2).sum()).backward()
            opts[i].step()
            if (s + 1) % (h // fragments) == 0:
                barrier.wait()  # every node has finished this sync: compare them
                if i == 0 and fragments == 1:  # the outer parameters θ₀ (whole)
                    flat = [o.outer.start for o in opts]
                    synced.append(max(float((f - flat[0]).abs().max()) for f in flat))
                barrier.wait()

    run_nodes(N, barrier, steps)
    xstar = sum(c * t for c, t in zip(CURV, a)) / sum(CURV)
    gap = max(float((torch.cat([p.reshape(-1) for p in m]).detach() - xstar).abs().max())
              for m in models)
    return gap, opts, synced


def check_topk():
    import torch
    from meshtrain._sparse import compress_topk, parse_sparse
    d = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    for fraction, bits in ((0.02, 2), (0.1, 1), (0.05, 4)):
        sent = compress_topk(d, fraction, bits)
        nz = sent.nonzero().reshape(-1)
        assert nz.numel() == math.ceil(fraction * 1000), (fraction, nz.numel())
        assert set(nz.tolist()) == set(d.abs().topk(nz.numel()).indices.tolist())
        assert len(set(sent[nz].tolist())) <= 2 ** bits, (bits, sent[nz].unique())
        assert bool((torch.sign(sent[nz]) == torch.sign(d[nz])).all())
    # top_magnitudes, the fast top-k of large tensors: the same values and set as torch.topk,
    # with a threshold from its sample that holds, and with one that misses (fewer values above
    # it than k: the large values sit exactly where the sample reads)
    from meshtrain._sparse import top_magnitudes
    n = 300_000
    big = torch.randn(n, generator=torch.Generator().manual_seed(2)).abs()
    missed = torch.ones(n)
    missed[::n // 8192] = 10.0
    for a, k in ((big, 9000), (big, 300), (missed, 9000)):
        values, indices = top_magnitudes(a, k)
        ref = torch.topk(a, k, sorted=True)
        assert torch.equal(values, ref.values) and torch.equal(a[indices], values), k
        assert set(indices.tolist()) == set(ref.indices.tolist()) or a is missed, k
    assert parse_sparse("sparse") == (0.02, 2) and parse_sparse("sparse:0.01:3") == (0.01, 3)
    for bad in ("sparse:0", "sparse:2", "sparse:0.1:9", "sparse:x", "topk:0.1", "sparse:1:2:3"):
        try:
            parse_sparse(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
    print("compress_topk: top ceil(F n), at most 2^B values, signs kept; bad specs refused")


def check_feedback():
    """One sync's outbox and error buffer: sent + e = θ₀ − x for the parameters, the buffers'
    values copied after them; after the outer step x ← θ₀' − e."""
    import torch
    from meshtrain._sparse import SparseExchange
    g = torch.Generator().manual_seed(2)
    params = [torch.randn(30, 10, generator=g), torch.randn(50, generator=g)]
    starts = [torch.randn(30, 10, generator=g), torch.randn(50, generator=g)]
    buffers = [torch.randn(7, generator=g)]
    ex = SparseExchange("sparse:0.1:2", params, buffers)
    ex.before_publish(params, starts, buffers, 0, 357)
    d = torch.cat([s.reshape(-1) for s in starts]) - torch.cat([p.reshape(-1) for p in params])
    assert torch.allclose(ex.outbox[:350] + ex.err, d, atol=1e-6)
    assert int((ex.outbox[:350] != 0).sum()) == 30 + 5
    assert torch.equal(ex.outbox[350:], buffers[0])
    before_err, before_out = ex.err.clone(), ex.outbox.clone()
    ex.before_publish(params, starts, buffers, 100, 200)  # a fragment: only its range changes
    assert torch.equal(ex.err[:100], before_err[:100]) and torch.equal(ex.err[200:],
                                                                         before_err[200:])
    assert torch.equal(ex.outbox[:100], before_out[:100])
    assert not torch.equal(ex.err[100:200], before_err[100:200])
    # After the outer step the node keeps what was not sent: x ← θ₀' − e, e cleared.
    e = ex.err.clone()
    new = [s.clone() for s in starts]
    ex.keep_residual(new, 0, 350)
    assert torch.equal(torch.cat([t.reshape(-1) for t in new]),
                       torch.cat([s.reshape(-1) for s in starts]) - e)
    assert float(ex.err.abs().max()) == 0
    print("error feedback: sent + e = θ₀ − x, then x ← θ₀' − e; buffers travel as values")


def check_published(opts, fraction):
    """Every sync published the outbox's range, at most F of its parameters nonzero, and the
    nodes kept what was not sent: their models are not θ₀."""
    import torch
    opt = opts[0]
    total = opt.sparse.n_params + opt.sparse.n_buffers
    nparams = opt.sparse.n_params
    for (lo, hi), values in opt.mesh.sent:
        assert lo >= total and hi <= 2 * total, (lo, hi, total)
        part = values[:max(0, min(hi, total + nparams) - lo)]
        assert int((part != 0).sum()) <= math.ceil(fraction * 400) + math.ceil(fraction * 200), \
            int((part != 0).sum())
    print(f"published: the outbox only ({len(opt.mesh.sent)} syncs), <= F of it nonzero")
    x = torch.cat([p.detach().reshape(-1) for p in opt.params])
    assert float((x - opt.outer.start).abs().max()) > 0, "nothing was left out: F not applied"
    return torch


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        py = numpy_python("torch")
        if py is not None and os.path.realpath(py) != os.path.realpath(sys.executable):
            os.execv(py, [py, *sys.argv])
        print("SKIP: no interpreter with torch")
        return 77
    sys.path.insert(0, PYTHON_DIR)
    import torch
    check_topk()
    check_feedback()

    # One fragment with the gradient drift correction (the default), and two fragments with the
    # parameter correction (the gradient one needs one fragment): x* either way, uncompressed
    # or at a fifth of the values and 2 bits.
    for fragments, drift in ((1, "auto"), (2, True)):
        dense, _, _ = train(None, fragments=fragments, drift=drift)
        gap, opts, synced = train("sparse:0.2:2", fragments=fragments, drift=drift)
        print(f"fragments {fragments}, drift correction {drift}: max |x - x*| uncompressed "
              f"{dense:.2e}, sparse:0.2:2 {gap:.2e}; θ₀ apart after syncs <= "
              f"{max(synced, default=0):.1e}")
        assert dense < 1e-2 and gap < 1e-2, (fragments, dense, gap)
        assert fragments > 1 or max(synced) < 1e-5, synced
        check_published(opts, 0.2)
    loose, _, _ = train("sparse:0.2:2", fragments=2, drift=True, feedback=False)
    print(f"the same without error feedback: max |x - x*| = {loose:.2e}")
    assert loose > 0.1, loose

    # The error buffer is node state: state_dict carries it, a replaced model clears it.
    _, opts, _ = train("sparse:0.2:2", rounds=2)
    opt = opts[0]
    opt.sparse.err.normal_()  # as between a publish and its outer step
    state = opt.state_dict()
    assert torch.equal(state["sparse"]["err"], opt.sparse.err)
    opt.sparse.err.zero_()
    opt.load_state_dict(state)
    assert torch.equal(opt.sparse.err, state["sparse"]["err"]) and float(
        opt.sparse.err.abs().max()) > 0
    opt._took_mesh_model()
    assert float(opt.sparse.err.abs().max()) == 0.0
    try:
        import meshtrain.torch as mt
        mt.MeshOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1),
                         FakeMesh([None], threading.Barrier(1), 0), sync_every=2,
                         share_memory=False, compress="sparse")
    except ValueError as e:
        assert "outer" in str(e), e
    else:
        raise AssertionError('compress="sparse" with outer="avg" was accepted')
    for k in (-1, 6):  # overlap=K: within 1..sync_every // fragments (here 4 // 2)
        try:
            mt.MeshOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1),
                             FakeMesh([None], threading.Barrier(1), 0), sync_every=4,
                             fragments=2, share_memory=False, outer="sgd", compress="sparse",
                             overlap=k)
        except ValueError as e:
            assert "overlap" in str(e), e
        else:
            raise AssertionError(f"overlap={k} with sync_every 4, fragments 2 was accepted")
    print("state_dict keeps the error buffer; a replaced model clears it; avg and overlap "
          "outside 1..H/F refused")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
