"""Bring your own data and model: 3 agents on loopback train a layer-spec model on a
generated data set with a known Bayes accuracy, once from CSV and once from a deflated .npz, and
reach it within 0.02; then the model round-trips through `meshtrain export` and
`meshtrain evaluate`, and the agent writes its final model to --data-dir at leave (the npz run
with --eval-average: the exported and written model is the average its evaluations measured).

The data: four isotropic Gaussian clusters (sigma 1) centred at (+-1, +-1), equal priors. The
Bayes classifier takes the quadrant, so its accuracy on any sample set is computed exactly from
the set itself (about Phi(1)^2 = 0.708); a linear softmax model (dense(4)) can reach it.
Written with the standard library only (no numpy needed).
"""
import io
import json
import os
import random
import signal
import struct
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import Mesh, parse_args  # noqa: E402

CENTRES = [(1.0, 1.0), (-1.0, 1.0), (-1.0, -1.0), (1.0, -1.0)]
STEPS = 1500
TOLERANCE = 0.02


def clusters(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randrange(4)
        cx, cy = CENTRES[label]
        rows.append((cx + rng.gauss(0, 1), cy + rng.gauss(0, 1), label))
    return rows


def bayes_accuracy(rows):
    def quadrant(x, y):
        return (0 if y >= 0 else 3) if x >= 0 else (1 if y >= 0 else 2)
    return sum(quadrant(x, y) == label for x, y, label in rows) / len(rows)


def write_csv(path, rows):
    with open(path, "w") as f:
        f.write("feature_a,label,feature_b\n")  # the label column in the middle, by name
        for x, y, label in rows:
            f.write(f"{x:.6f},{label},{y:.6f}\n")


def npy(descr, shape, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def write_npz(path, rows):
    x = b"".join(struct.pack("<ff", r[0], r[1]) for r in rows)
    y = b"".join(struct.pack("<q", r[2]) for r in rows)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", npy("<f4", f"({len(rows)}, 2)", x))
        z.writestr("y.npy", npy("<i8", f"({len(rows)},)", y))


def train_mesh(binary, train, test, extra, agent_extra=()):
    common = list(agent_extra) + ["--profile", "local", "--model", "dense(4)", "--train-data", train, "--test-data",
              test, "--barrier", "pssp", "--sample", "2", "--staleness", "4", "--select",
              "random", "--fanout", "2", "--steps", str(STEPS), "--eval-every", "500",
              "--min-peers", "2", "--lr", "0.05", "--batch", "32"] + extra
    with Mesh(binary, 3, common, name_prefix="usr") as mesh:
        for i, a in enumerate(mesh.agents):
            a.extra += ["--shard", f"{i}/3", "--data-dir", os.path.join(mesh.workdir, a.name)]
        mesh.start_joined()
        dt, _ = mesh.wait_finished(STEPS, 150)
        # Then the nodes agree on one model (the consensus), which each evaluates: the model
        # export and model.npz give.
        sts = mesh.wait_consensus(60)
        accs = {s["name"]: s["accuracy"] for s in sts}
        decay = float(agent_extra[agent_extra.index("--eval-average") + 1]) \
            if "--eval-average" in agent_extra else 0.0
        assert all(s["eval_average"] == decay for s in sts), [s["eval_average"] for s in sts]
        print(f"  3 agents, {STEPS} steps in {dt:.1f} s: accuracy " +
              ", ".join(f"{n} {a:.4f}" for n, a in sorted(accs.items())))
        # export -> evaluate on the same test file gives the agent's own figure.
        a0 = mesh.agents[0]
        out = os.path.join(mesh.workdir, "exported.npz")
        r = a0.cli("export", "--out", out)
        assert r.returncode == 0, r.stderr
        ev = subprocess.run([binary, "evaluate", "--model", out, "--test-data", test,
                             "--format", "json"] + extra, capture_output=True, text=True,
                            timeout=60)
        assert ev.returncode == 0, ev.stderr
        exported = json.loads(ev.stdout)
        print(f"  export + evaluate: accuracy {exported['accuracy']:.4f} at step "
              f"{exported['step']} (agent said {accs[a0.name]:.4f})")
        assert exported["step"] == STEPS, exported
        assert abs(exported["accuracy"] - accs[a0.name]) < 1e-6, (exported, accs)
        # At leave the agent writes its final model to --data-dir.
        a0.signal(signal.SIGTERM)
        a0.proc.wait(timeout=30)
        final = os.path.join(mesh.workdir, a0.name, "model.npz")
        assert os.path.exists(final), "no model.npz in --data-dir after leave"
        ev = subprocess.run([binary, "evaluate", "--model", final, "--test-data", test,
                             "--format", "json"] + extra, capture_output=True, text=True,
                            timeout=60)
        assert ev.returncode == 0, ev.stderr
        assert abs(json.loads(ev.stdout)["accuracy"] - accs[a0.name]) < 1e-6
        return accs


def main():
    args = parse_args()
    import tempfile
    tmp = tempfile.mkdtemp(prefix="meshtrain-userdata-")
    train_rows, test_rows = clusters(6000, 1), clusters(10000, 2)
    bayes = bayes_accuracy(test_rows)
    print(f"Bayes accuracy on the test set: {bayes:.4f}")
    csv_train, csv_test = os.path.join(tmp, "train.csv"), os.path.join(tmp, "test.csv")
    write_csv(csv_train, train_rows)
    write_csv(csv_test, test_rows)
    npz_train, npz_test = os.path.join(tmp, "train.npz"), os.path.join(tmp, "test.npz")
    write_npz(npz_train, train_rows)
    write_npz(npz_test, test_rows)
    try:
        # The npz run evaluates the parameters' moving average (--eval-average): export, model.npz
        # and the agent's evaluations must then all be that model.
        for kind, train, test, extra, agent_extra in [
                ("csv", csv_train, csv_test, ["--label-column", "label"], []),
                ("npz", npz_train, npz_test, [], ["--eval-average", "0.98"])]:
            print(f"{kind}:")
            accs = train_mesh(args.bin, train, test, extra, agent_extra)
            for name, acc in accs.items():
                assert acc >= bayes - TOLERANCE, f"{kind} {name}: {acc:.4f} < Bayes {bayes:.4f} - {TOLERANCE}"
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
