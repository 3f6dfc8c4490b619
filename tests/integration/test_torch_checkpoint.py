"""MeshOptimizer as a torch optimizer, its checkpoints and other dtypes, through real agents
(--trainer external, loopback), with tests/integration/torch_api_worker.py as the trainer:

1. One-node meshes (four agents, each alone): 20 local steps uninterrupted (sync_every 4, AdamW,
   the default gradient correction, BatchNorm statistics mixed, an outer torch SGD with
   Nesterov momentum, CosineAnnealingLR on the MeshOptimizer); the same with the outer step by
   name (outer="nesterov"); and 10 steps, a checkpoint (model, optimizer, scheduler: torch.save),
   then a fresh trainer on a fresh agent that loads it and takes the other 10. Checks:
   - isinstance(opt, torch.optim.Optimizer), and the scheduler sets the inner lr along the
     cosine at every step;
   - the outer torch optimizer gives the same bytes as outer="nesterov" (the same rule);
   - the restored run ends with the same bytes as the uninterrupted one (CRC-32 of parameters
     and buffers): the checkpoint kept the inner and outer states, the corrections and the
     step counters, mid-way between two syncs;
   - mesh.finish(net) with the module alone works although the trainer attached parameters,
     buffers and the correction (one layout; the call binds to it), and a report with a model
     of another arrangement is refused with both named.
2. Two agents, each a bfloat16 copy of the model on its own data: the model trains through
   the mesh (the loss falls on both), both end with the same model, and the float32 shared
   memory is filled by conversion: whole copies of the layout, counted in mesh.copied_bytes.
Skips (77) without an interpreter with numpy and torch.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import Worker, Workers, numpy_python  # noqa: E402
from harness import Mesh, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
WORKER = os.path.join(HERE, "torch_api_worker.py")
COMMON = ["--profile", "local", "--trainer", "external", "--trainer-timeout", "120"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True)
    return p.parse_args()


def run_workers(py, mesh, jobs):
    """Starts one worker per (agent, args), waits for all; returns their "done" events."""
    with Workers() as workers:
        for i, (agent, args) in enumerate(jobs):
            wait_until(lambda: os.path.exists(agent.socket), 15, what=f"{agent.socket}")
            workers.append(Worker(py, agent, mesh.workdir, *args, tag=f"-{i}", script=WORKER))
        for w in workers:
            w.proc.wait(timeout=300)
        outs = []
        for w in workers:
            r = w.event("done")
            assert w.proc.returncode == 0 and r, w.text()[-3000:]
            outs.append(r)
        return outs


def with_sockets(mesh):
    for a in mesh.agents:
        a.socket = os.path.join(mesh.workdir, f"{a.name}.sock")
        a.extra += ["--trainer-socket", a.socket]


def one_node(py, binary):
    with Mesh(binary, 4, COMMON + ["--min-peers", "0"], name_prefix="ck") as mesh:
        with_sockets(mesh)
        for a in mesh.agents:
            a.start()
        ckpt = os.path.join(mesh.workdir, "ckpt.pt")
        full, named, first = run_workers(py, mesh, [
            (mesh.agents[0], ["--steps", 20]),
            (mesh.agents[1], ["--steps", 20, "--outer", "named"]),
            (mesh.agents[2], ["--steps", 10, "--save", ckpt])])
        (second,) = run_workers(py, mesh, [
            (mesh.agents[3], ["--steps", 10, "--start", 10, "--load", ckpt])])
    print(f"  uninterrupted {full['crc']:#010x}, outer by name {named['crc']:#010x}, "
          f"restored at step 10 {second['crc']:#010x}; loss {full['loss0']:.3f} -> "
          f"{full['loss']:.3f}")
    assert full["is_optimizer"] and full["syncs"] == 5, full
    for r in (full, first, second):
        assert max(abs(x - y) for x, y in zip(r["lrs"], r["cosine"])) < 1e-12, r
    assert full["loss"] < full["loss0"], full
    assert named["crc"] == full["crc"], (named, full)
    assert second["crc"] == full["crc"], (second, full)
    assert first["crc"] != full["crc"], "the first half should differ from the end"
    assert "attached 630 parameters in 9 tensors" in full["other_layout"], full
    for r in (full, second):
        assert r["finish"]["models"] == 1 and r["crc_finished"] != 0, r
        # parameters + BatchNorm statistics (mean, var) + the gradient correction
        assert r["layout"] == 2 * r["num_params"] + 2 * 24, r
    print("  MeshOptimizer is a torch optimizer, the scheduler drives it, the outer optimizer "
          "equals outer=\"nesterov\", a checkpoint resumes to the same bytes")


def bfloat16(py, binary):
    common = COMMON + ["--min-peers", "1", "--select", "all", "--barrier", "ssp",
                       "--staleness", "0"]
    with Mesh(binary, 2, common, name_prefix="bf") as mesh:
        with_sockets(mesh)
        seed = mesh.start_joined()
        wait_until(lambda: (lambda m: m and len(m) == 2)(seed.members()), 20, what="2 members")
        outs = run_workers(py, mesh, [
            (a, ["--steps", 40, "--total", 40, "--dtype", "bfloat16", "--node", i])
            for i, a in enumerate(mesh.agents)])
    for r in outs:
        print(f"  bfloat16: loss {r['loss0']:.3f} -> {r['loss']:.3f}, copied "
              f"{r['copied_bytes']} bytes ({r['copied_bytes'] / (4 * r['layout']):.0f} layouts),"
              f" finish {r['finish']}")
        layout_bytes = 4 * r["layout"]
        assert not r["shared"], r  # bfloat16 parameters cannot live in the float32 memory
        assert r["loss"] < 0.9 * r["loss0"], r
        # At least one conversion in per sync, each a whole layout.
        assert r["copied_bytes"] % layout_bytes == 0, r
        assert r["copied_bytes"] >= r["syncs"] * layout_bytes and r["syncs"] == 10, r
        assert r["finish"]["models"] == 2, r
    assert outs[0]["finish"]["crc32"] == outs[1]["finish"]["crc32"], outs
    assert outs[0]["crc_finished"] == outs[1]["crc_finished"], outs
    print("  a bfloat16 model trains through the mesh and ends as one model")


def main():
    args = parse_args()
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP: no python3 with numpy and torch (install python3-numpy python3-torch)")
        sys.exit(77)
    os.environ["PYTHONPATH"] = PYTHON_DIR  # for the workers
    one_node(py, args.bin)
    bfloat16(py, args.bin)
    print("PASS")


if __name__ == "__main__":
    main()
