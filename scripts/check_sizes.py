#!/usr/bin/env python3
"""Size limits of the product sources: no file over 700 lines, no function over 100 lines.

Usage: scripts/check_sizes.py [--max-file N] [--max-function N] [ROOT]
Walks the product folders (everything but tests/, bench/, examples/ and build trees), prints each
file or function over its limit and exits 1 when there is one. Functions are found by brace
matching on the source with comments, strings and preprocessor lines blanked: a `{` that follows a
parameter list `(...)` (plus qualifiers, an initializer list or a trailing return type) opens a
function body, unless a control keyword (if, for, while, switch, catch) or a lambda's `]` owns it.
Option-declaration tables are exempt when the function carries the marker comment
`// size: option table` on the line before it.
"""
import argparse
import os
import re
import sys

PRODUCT_DIRS = ["base", "membership", "gossip", "wire", "transport", "sync", "learn", "node",
                "sim", "daemon", "cli"]
EXEMPT_MARK = "// size: option table"
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*$")
CONTROL_PAREN = re.compile(r"\b(if|for|while|switch|catch)\s*\($")


def blank(text):
    """Comments, string/char literals and preprocessor lines become spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    out.append(" \n")
                    j += 2
                    continue
                out.append(" ")
                j += 1
            i = j
            continue
        if c == "\n":
            at_line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, line count) of each outermost function body."""
    src = blank(text)
    lines_before = [0]
    for ch in src:
        lines_before.append(lines_before[-1] + (ch == "\n"))
    results = []
    stack = []  # (is_function_start, index, name)
    in_function = 0
    last_stmt = 0
    for i, ch in enumerate(src):
        if ch == "{":
            head = src[last_stmt:i]
            flat = " ".join(head.split())
            is_fn = False
            name = ""
            if in_function == 0 and "(" in flat:
                # strip qualifiers after the parameter list
                m = re.search(r"([~\w:<>]+)\s*\((.*)\)\s*((const|noexcept|override|final|mutable|"
                              r"->\s*[\w:<>,\s*&]+|:\s*.*)\s*)*$", flat)
                if m and not CONTROL.search(flat) and not CONTROL_PAREN.search(
                        flat[: flat.find("(") + 1]) and not re.search(r"\]\s*(\(.*\))?\s*"
                                                                      r"(mutable)?\s*$", flat):
                    kw = m.group(1).split("::")[-1]
                    if kw not in ("if", "for", "while", "switch", "catch", "return", "sizeof"):
                        is_fn = True
                        name = m.group(1)
            stack.append((is_fn, i, name))
            if is_fn:
                in_function += 1
            last_stmt = i + 1
        elif ch == "}":
            if stack:
                is_fn, start, name = stack.pop()
                if is_fn:
                    in_function -= 1
                    first = lines_before[start] + 1
                    last = lines_before[i] + 1
                    results.append((name, first, last - first + 1))
            last_stmt = i + 1
        elif ch == ";":
            last_stmt = i + 1
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--max-file", type=int, default=700)
    ap.add_argument("--max-function", type=int, default=100)
    args = ap.parse_args()
    bad = 0
    for d in PRODUCT_DIRS:
        for dirpath, _, names in os.walk(os.path.join(args.root, d)):
            for nm in sorted(names):
                if not nm.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, nm)
                rel = os.path.relpath(path, args.root)
                text = open(path, encoding="utf-8").read()
                nlines = text.count("\n")
                if nlines > args.max_file:
                    print(f"{rel}: {nlines} lines (limit {args.max_file})")
                    bad += 1
                src_lines = text.split("\n")
                for name, first, count in functions(text):
                    if count <= args.max_function:
                        continue
                    above = src_lines[first - 2] if first >= 2 else ""
                    if EXEMPT_MARK in above or (first >= 3 and EXEMPT_MARK in src_lines[first - 3]):
                        continue
                    print(f"{rel}:{first}: function {name}: {count} lines "
                          f"(limit {args.max_function})")
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
