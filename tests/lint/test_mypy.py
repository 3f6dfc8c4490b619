#!/usr/bin/env python3
"""The Python client type-checks: `mypy --strict` over python/meshtrain and its build backend
(Debian's python3-mypy, run by an interpreter that also has numpy and torch, whose annotations
it checks against, and python3-packaging, which torch imports). Exit 0 pass, 1 fail (also when no interpreter has mypy: scripts/install-deps.sh
installs it).

Usage: tests/lint/test_mypy.py [--root DIR] [--cache-dir DIR]

The cache (default ${XDG_CACHE_HOME:-~/.cache}/meshtrain-mypy, like ccache's outside the tree)
makes a second run on the machine take seconds instead of a minute or two: mypy checks its
entries against the sources' hashes, so a stale one is never trusted.
"""
import argparse
import os
import shutil
import subprocess
import sys


def interpreter():
    seen = set()
    for cand in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if not cand or cand in seen or not os.path.exists(cand):
            continue
        seen.add(cand)
        r = subprocess.run([cand, "-c", "import mypy, numpy, torch"], capture_output=True,
                           timeout=300)
        if r.returncode == 0:
            return cand
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--cache-dir", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "meshtrain-mypy"))
    a = ap.parse_args()
    py = interpreter()
    if py is None:
        print("FAIL: no python3 with mypy, numpy and torch (apt-get install python3-mypy "
              "python3-numpy python3-torch)")
        return 1
    python_dir = os.path.join(a.root, "python")
    args = [py, "-m", "mypy", "--strict", os.path.join(python_dir, "meshtrain"),
            os.path.join(python_dir, "backend")]
    os.makedirs(a.cache_dir, exist_ok=True)
    args += ["--cache-dir", a.cache_dir]
    print(" ".join(args), flush=True)
    # From python/: the repository root's packaging/ folder would pass for the `packaging`
    # module torch imports (python3-packaging, installed by scripts/install-deps.sh).
    r = subprocess.run(args, timeout=1200, cwd=python_dir)
    return 0 if r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
