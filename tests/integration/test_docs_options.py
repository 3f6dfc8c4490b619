"""docs/guide.md's agent option tables list exactly the options `meshtrain agent --help` prints.
Checks that:
- every long option in the first column of the tables under "## Agent options" in
  docs/guide.md is an option of `meshtrain agent --help`;
- every long option `meshtrain agent --help` prints (except the built-ins in BUILTIN) has a row
  in those tables, in the first column.
Fails naming every option that is in one list but not in the other. `--guide FILE` checks
another copy of the guide (used to see the test fail on a guide with a row removed).
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GUIDE = os.path.join(HERE, "..", "..", "docs", "guide.md")

# Options every CLI11 subcommand has; the guide describes them once, under "Subcommands".
BUILTIN = {"--help", "--help-all", "--version"}

LONG = re.compile(r"--[a-z0-9][a-z0-9-]*")


def help_options(binary):
    """Long options of `meshtrain agent --help`: the first column of its "Options:" list."""
    out = subprocess.run([binary, "agent", "--help"], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: `meshtrain agent --help` exited {out.returncode}: {out.stderr}")
    opts = set()
    for line in out.stdout.splitlines():
        # An option line starts with two spaces then a dash ("  -h,--help", "  --name TEXT");
        # continuation lines of a long description are indented further and start otherwise.
        m = re.match(r"^  (-\S+)", line)
        if not m:
            continue
        for name in m.group(1).split(","):
            if name.startswith("--"):
                opts.add(LONG.match(name).group(0))
    return opts


def guide_options(path):
    """Long options in the first column of every table row under "## Agent options"."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Agent options\n(.*?)(?=^## )", text, re.M | re.S)
    if not m:
        raise SystemExit(f"FAIL: no '## Agent options' section in {path}")
    opts = set()
    rows = 0
    for line in m.group(1).splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        # Cells are split on unescaped pipes: `--barrier bsp\|ssp` is one cell.
        first = re.split(r"(?<!\\)\|", line)[1]
        if first.strip() == "option":
            continue
        rows += 1
        opts.update(LONG.findall(first))
    if rows == 0:
        raise SystemExit(f"FAIL: no option rows under '## Agent options' in {path}")
    return opts


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True, help="path to the meshtrain binary")
    p.add_argument("--guide", default=GUIDE, help="the guide to check (default docs/guide.md)")
    args = p.parse_args()

    in_help = help_options(args.bin) - BUILTIN
    in_guide = guide_options(args.guide)
    print(f"agent --help: {len(in_help)} options (without {sorted(BUILTIN)}); "
          f"guide tables: {len(in_guide)}")
    failures = []
    for opt in sorted(in_help - in_guide):
        failures.append(f"{opt} is in `meshtrain agent --help` but not in the guide's table")
    for opt in sorted(in_guide - in_help):
        failures.append(f"{opt} is in the guide's table but not in `meshtrain agent --help`")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("OK: the guide's agent option tables match `meshtrain agent --help`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
