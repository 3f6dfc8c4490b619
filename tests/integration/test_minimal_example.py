"""The minimal script a user copies (examples/torch_minimal.py: a model, its data, MeshOptimizer
with an outer torch optimizer and a CosineAnnealingLR, a checkpoint, finish) run the way the
README says: one `meshtrain run [agent options] -- python3 examples/torch_minimal.py CKPT` per
host, two hosts on loopback, the second joining the first. Checks that both commands exit 0,
that each script trained to step 300 (its progress lines come through run's log, prefixed),
wrote its checkpoint, and that both ended with the same consensus model of 2 nodes (the CRC-32
each finish() printed). Skips (77) without an interpreter with numpy and torch.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import numpy_python  # noqa: E402
from harness import free_port_block  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
EXAMPLE = os.path.join(REPO, "examples", "torch_minimal.py")
CONSENSUS = re.compile(r"consensus FinishResult\(models=(\d+), crc32=(\d+), step=(\d+)\)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP: no python3 with numpy and torch (install python3-numpy python3-torch)")
        sys.exit(77)
    with open(EXAMPLE) as f:
        lines = f.read().count("\n")
    assert lines <= 30, f"the minimal example has {lines} lines"
    workdir = tempfile.mkdtemp(prefix="meshtrain-minimal-")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    base = free_port_block(4)
    procs, logs = [], []
    try:
        for i in range(2):
            ckpt = os.path.join(workdir, f"m{i + 1}.pt")
            args = [a.bin, "run", "--name", f"m{i + 1}", "--bind", f"127.0.0.1:{base + 2 * i}",
                    "--rpc", f"127.0.0.1:{base + 2 * i + 1}", "--profile", "local",
                    "--min-peers", "1", "--select", "all", "--trainer-timeout", "120"]
            if i:  # started at once with the first: it may not listen yet
                args += ["--join", f"127.0.0.1:{base}", "--retry-join"]
            args += ["--", py, EXAMPLE, ckpt]
            logs.append(os.path.join(workdir, f"m{i + 1}.out"))
            with open(logs[-1], "wb") as out:
                procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=env))
        for p in procs:
            p.wait(timeout=240)
        results = []
        for i, (p, log) in enumerate(zip(procs, logs)):
            with open(log, errors="replace") as f:
                text = f.read()
            m = CONSENSUS.search(text)
            print(f"  m{i + 1}: exit {p.returncode}, "
                  f"{m.group(0) if m else 'no consensus line'}")
            assert p.returncode == 0 and m, text[-4000:]
            assert re.search(r"^train \| step 300 loss", text, re.M), text[-4000:]
            assert re.search(r"^agent \| .*left the mesh", text, re.M), text[-4000:]
            assert os.path.exists(os.path.join(workdir, f"m{i + 1}.pt"))
            results.append((int(m.group(1)), int(m.group(2))))
        assert results[0] == results[1] and results[0][0] == 2, results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    subprocess.run(["rm", "-rf", workdir])
    print("PASS")


if __name__ == "__main__":
    main()
