#!/usr/bin/env python3
"""The sources keep the limits the docs set for them (docs/design.md "Layout"):

- no product source file over 700 lines and no function over 100 lines, except option tables
  (scripts/check_sizes.py);
- no citation a reader of a clone cannot resolve: a tracker number or the old specification's
  section signs; code and docs cite papers and docs/contract.md by section name instead.

Usage: tests/lint/test_sources.py [--root DIR]   (exit 0 pass, 1 fail)
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Built from pieces so that this file does not match itself.
CONTINUATION = re.compile(r"^\s*(//+|#+|\*|>)?\s*")
CITATION = re.compile(r"[Ii]ssue[ -]?[0-9]+|" + "SPEC" + r" §|\.\./" + "shared")
TEXT_SUFFIXES = (".cc", ".h", ".py", ".sh", ".md", ".txt", ".cmake", ".fbs", ".toml", ".service",
                 ".cfg", ".json", ".in", ".html", ".js")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        return [f for f in out if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, names in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names]
        return files


def citations(root):
    found = []
    for rel in tracked_files(root):
        base = os.path.basename(rel)
        if not (rel.endswith(TEXT_SUFFIXES) or base in ("CMakeLists.txt", "run")):
            continue
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                prev = ""
                for no, line in enumerate(f, 1):
                    # Also across a line break in a comment ("(issue" / "// 34; ...").
                    joined = prev[-24:] + " " + CONTINUATION.sub("", line, count=1)
                    if CITATION.search(line) or CITATION.search(joined):
                        found.append(f"{rel}:{no}: {line.strip()[:120]}")
                    prev = line.rstrip()
        except (OSError, UnicodeDecodeError):
            continue
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.normpath(os.path.join(HERE, "..", "..")))
    ap.add_argument("--bin", help="ignored (the script tests' common argument)")
    args = ap.parse_args()
    ok = True
    sizes = subprocess.run([sys.executable, os.path.join(args.root, "scripts", "check_sizes.py"),
                            args.root], capture_output=True, text=True)
    if sizes.returncode != 0:
        ok = False
        print("size limits exceeded:\n" + sizes.stdout + sizes.stderr)
    cites = citations(args.root)
    if cites:
        ok = False
        print(f"{len(cites)} unresolvable citations (cite papers or docs by section name):")
        print("\n".join(cites[:200]))
    print("sources: " + ("ok" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
