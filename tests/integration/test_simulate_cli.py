"""`meshtrain simulate --progress`: the progress goes to stderr and changes nothing on stdout.
Checks that:
- `--progress always` prints a setup line and a final "N of N virtual s (100 %)" line for each
  run ("(1/2)", "(2/2)" with two barriers), and stdout is the same bytes as without it;
- the default (auto) prints nothing when stderr is not a terminal, nor does `--progress never`;
- a bad value exits non-zero with an error naming --progress, and nothing on stdout.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import parse_args  # noqa: E402

RUN = ["simulate", "--nodes", "40", "--duration", "6", "--barrier", "pssp,asp", "--format",
       "json", "--no-wall"]


def simulate(binary, extra):
    return subprocess.run([binary] + RUN + extra, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def main():
    args = parse_args()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    shown = simulate(args.bin, ["--progress", "always"])
    check(shown.returncode == 0, f"--progress always exits 0 (got {shown.returncode})")
    lines = shown.stderr.splitlines()
    print("stderr with --progress always:\n  " + "\n  ".join(lines))
    for k, label in ((1, "pssp"), (2, "asp")):
        mine = [ln for ln in lines if ln.startswith(f"simulate {label}") and f"({k}/2)" in ln]
        check(any("setting up 40 nodes" in ln for ln in mine), f"run {k}: a setup line")
        check(bool(mine) and "6 of 6 virtual s (100 %)" in mine[-1],
              f"run {k}: ends with the 100 % line")
    check(all(ln.startswith("simulate ") for ln in lines), "only progress lines on stderr")

    quiet = simulate(args.bin, [])
    never = simulate(args.bin, ["--progress", "never"])
    check(quiet.returncode == 0 and never.returncode == 0, "auto and never exit 0")
    check(quiet.stderr == "", f"auto with stderr a pipe prints nothing (got {quiet.stderr!r})")
    check(never.stderr == "", f"never prints nothing (got {never.stderr!r})")
    check(shown.stdout == quiet.stdout == never.stdout, "stdout is the same bytes in all three")
    out = json.loads(quiet.stdout)
    check([p["barrier"] for p in out["policies"]] == ["pssp", "asp"], "both runs' results")

    bad = simulate(args.bin, ["--progress", "sometimes"])
    check(bad.returncode != 0, "a bad --progress value exits non-zero")
    check("--progress" in bad.stderr, f"its error names --progress (got {bad.stderr!r})")
    check(bad.stdout == "", "nothing on stdout for a bad value")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
