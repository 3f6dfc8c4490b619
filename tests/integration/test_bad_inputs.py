"""Malformed user inputs: a truncated IDX file, a CSV with a text cell, an .npy with
the wrong dtype, one with the wrong shape, a label beyond the model's outputs and a model spec
with a typo. Each must stop `meshtrain agent` (and `meshtrain train`) before any training with
exit status 2 and one error line that names the file and where (line, byte offset, array) or the
spec token, and what was expected.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from harness import free_port_block, parse_args  # noqa: E402


def npy(descr, shape, payload):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def error_lines(text):
    return [line for line in text.splitlines() if "error" in line.lower()]


def main():
    args = parse_args()
    tmp = tempfile.mkdtemp(prefix="meshtrain-badinput-")
    try:
        d = lambda name: os.path.join(tmp, name)  # noqa: E731
        # IDX: 10 images of 4x4 announced, only 3 present; labels fine.
        images = struct.pack(">IIII", 0x803, 10, 4, 4) + bytes(3 * 16)
        write(d("bad-images-idx3-ubyte"), images)
        write(d("bad-labels-idx1-ubyte"), struct.pack(">II", 0x801, 10) + bytes(10))
        write(d("text.csv"), b"a,b,label\n0.5,1.0,1\n0.25,oops,0\n")
        write(d("labels.csv"), b"a,b,label\n0.5,1.0,1\n0.25,2.0,7\n0.1,0.2,0\n")
        x = npy("<f4", "(3, 2)", struct.pack("<6f", *range(6)))
        write(d("x.npy"), x)
        write(d("yfloat.npy"), npy("<f4", "(3,)", struct.pack("<3f", 0, 1, 2)))
        write(d("y2d.npy"), npy("<i8", "(3, 2)", struct.pack("<6q", *range(6))))
        cases = [
            ("truncated IDX", ["--train-data", d("bad-images-idx3-ubyte")],
             ["bad-images-idx3-ubyte", "offset"]),
            ("CSV text cell", ["--train-data", d("text.csv")], ["text.csv:3", "oops"]),
            (".npy wrong dtype", ["--train-data", d("x.npy") + "," + d("yfloat.npy")],
             ["yfloat.npy", "dtype"]),
            (".npy wrong shape", ["--train-data", d("x.npy") + "," + d("y2d.npy")],
             ["y2d.npy", "shape"]),
            ("label out of range", ["--train-data", d("labels.csv"), "--test-data",
                                    d("labels.csv")], ["labels.csv:3", "label 7", "4 outputs"]),
            ("model spec typo", ["--model", "cnov(16,5),relu,dense(4)"],
             ["cnov", "did you mean conv"]),
            ("eval average >= 1", ["--eval-average", "1"], ["--eval-average", "[0, 1)"]),
        ]
        base = free_port_block(1)
        failures = []
        for what, extra, needles in cases:
            if "--model" not in extra:
                extra = ["--model", "dense(4)"] + extra
            runs = {
                "agent": [args.bin, "agent", "--name", "bad", "--bind", f"127.0.0.1:{base}",
                          "--rpc", f"127.0.0.1:{base + 1}", "--profile", "local"] + extra,
                "train": [args.bin, "train", "--steps", "1"] + extra,
            }
            for kind, cmd in runs.items():
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                                   stdin=subprocess.DEVNULL)
                errs = error_lines(r.stderr)
                ok = (r.returncode == 2 and len(errs) == 1 and
                      all(n in errs[0] for n in needles) and "step" not in r.stdout)
                print(f"{what:>20} [{kind}]: exit {r.returncode}: {errs[0] if errs else r.stderr!r}")
                if not ok:
                    failures.append(f"{what} [{kind}]: exit {r.returncode}, stderr {r.stderr!r}")
        assert not failures, "\n".join(failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
