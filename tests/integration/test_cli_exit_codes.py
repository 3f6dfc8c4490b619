"""The CLI's one error path (cli/exit_codes.h), walked over every subcommand:
- `--help` exits 0 and prints the subcommand's usage on stdout;
- a bad option exits 2 with one `error:` line on stderr;
- a bad enumerated value exits 2 with one `error:` line that names the option and every
  accepted value (the names come from one table per option, shown by --help too);
- a client of the agent pointed at an unreachable --rpc exits 1 (a runtime error).
No agent is started: the --rpc port is one nothing listens on.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import free_port_block, parse_args  # noqa: E402

# Subcommand -> arguments it needs besides the one under test.
SUBCOMMANDS = {
    "agent": [],
    "run": ["--", "true"],  # its unknown options are the agent's, checked before it starts
    "join": ["127.0.0.1:1"],
    "leave": [],
    "force-leave": ["somebody"],
    "members": [],
    "status": [],
    "keygen": [],
    "keys": ["--list"],
    "monitor": [],
    "version": [],
    "simulate": [],
    "train": [],
    "evaluate": ["--model", "/nonexistent.npz"],
    "export": ["--out", "/nonexistent/out.npz"],
}
CLIENTS = ["join", "leave", "force-leave", "members", "status", "keys", "monitor", "export"]

# (subcommand, option, bad value, the accepted values the error must name)
BARRIERS = ["asp", "bsp", "ssp", "pbsp", "pssp", "dssp", "wbsp"]
ENUMERATED = [
    ("agent", "--barrier", "bogus", BARRIERS),
    ("agent", "--select", "bogus", ["all", "random", "selmcast"]),
    ("agent", "--profile", "bogus", ["lan", "wan", "local"]),
    ("agent", "--outer", "bogus", ["avg", "sgd", "nesterov"]),
    ("agent", "--compress", "bogus", ["none", "fp16", "int8", "topk:F"]),
    ("agent", "--nat", "bogus", ["auto", "off"]),
    ("agent", "--serve-relay", "bogus", ["on", "off"]),
    ("agent", "--overlap", "bogus", ["on", "off"]),
    ("agent", "--join-state", "bogus", ["on", "off"]),
    ("agent", "--trainer", "bogus", ["builtin", "external"]),
    ("agent", "--log-level", "bogus", ["trace", "debug", "info", "warn", "error"]),
    ("agent", "--log-format", "bogus", ["text", "json"]),
    ("members", "--format", "bogus", ["table", "json"]),
    ("status", "--format", "bogus", ["table", "json"]),
    ("monitor", "--log-level", "bogus", ["trace", "debug", "info", "warn", "error"]),
    ("simulate", "--barrier", "pssp,bogus", BARRIERS),
    ("simulate", "--select", "bogus", ["all", "random", "selmcast"]),
    ("simulate", "--profile", "bogus", ["lan", "wan", "local"]),
    ("simulate", "--dist", "bogus", ["gamma", "exp", "const"]),
    ("simulate", "--format", "bogus", ["table", "json"]),
    ("simulate", "--progress", "bogus", ["auto", "always", "never"]),
    ("train", "--format", "bogus", ["table", "json"]),
    ("evaluate", "--format", "bogus", ["table", "json"]),
]


def run(binary, args, env=None):
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=env)


def error_lines(text):
    return [line for line in text.splitlines() if line.strip()]


def main():
    args = parse_args()
    if not os.access(args.bin, os.X_OK):
        print(f"SKIP: {args.bin} is not executable")
        sys.exit(77)
    # Neither an agent's address nor its token from the caller's environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHTRAIN_")}
    dead_rpc = f"127.0.0.1:{free_port_block(1) + 1}"
    failures = []

    def check(cond, what, r):
        status = "ok  " if cond else "FAIL"
        print(f"{status} {what}: exit {r.returncode}, stderr {r.stderr.strip()[:160]!r}")
        if not cond:
            failures.append(f"{what}: exit {r.returncode}, stderr {r.stderr!r}")

    for sub in SUBCOMMANDS:
        r = run(args.bin, [sub, "--help"], env)
        check(r.returncode == 0 and sub in r.stdout and "--help" in r.stdout,
              f"{sub} --help exits 0", r)
        r = run(args.bin, [sub, "--no-such-option"] + SUBCOMMANDS[sub], env)
        errs = error_lines(r.stderr)
        check(r.returncode == 2 and len(errs) == 1 and errs[0].startswith("error:") and
              "--no-such-option" in errs[0] and r.stdout == "",
              f"{sub} --no-such-option exits 2", r)

    for sub, option, value, names in ENUMERATED:
        r = run(args.bin, [sub, option, value] + SUBCOMMANDS[sub], env)
        errs = error_lines(r.stderr)
        check(r.returncode == 2 and len(errs) == 1 and errs[0].startswith("error:") and
              option in errs[0] and all(n in errs[0] for n in names) and r.stdout == "",
              f"{sub} {option} {value} exits 2 naming {', '.join(names)}", r)
        helped = run(args.bin, [sub, "--help"], env)
        check(all(n.split(":")[0] in helped.stdout for n in names),
              f"{sub} --help lists the {option} names", helped)

    # The same table reads the config file (it becomes command-line arguments).
    conf = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"meshtrain-exit-{os.getpid()}.toml")
    with open(conf, "w") as f:
        f.write('barrier = "bogus"\n')
    try:
        r = run(args.bin, ["agent", "--config", conf], env)
        errs = error_lines(r.stderr)
        check(r.returncode == 2 and len(errs) == 1 and "--barrier" in errs[0] and
              all(n in errs[0] for n in BARRIERS), "agent --config with a bad barrier exits 2", r)
    finally:
        os.remove(conf)

    for sub in CLIENTS:
        r = run(args.bin, [sub, "--rpc", dead_rpc] + SUBCOMMANDS[sub], env)
        errs = error_lines(r.stderr)
        check(r.returncode == 1 and len(errs) == 1 and errs[0].startswith("error:"),
              f"{sub} --rpc {dead_rpc} (nothing there) exits 1", r)

    # Usage errors found before calling the agent are usage errors too.
    for extra in (["--status", "["], ["--tag", "k=["], ["--tag", "noequals"]):
        r = run(args.bin, ["members", "--rpc", dead_rpc] + extra, env)
        check(r.returncode == 2, f"members {' '.join(extra)} exits 2", r)
    r = run(args.bin, ["keys", "--rpc", dead_rpc], env)
    check(r.returncode == 2, "keys without an operation exits 2", r)
    r = run(args.bin, [], env)
    check(r.returncode == 2, "no subcommand exits 2", r)

    if failures:
        print(f"{len(failures)} check(s) failed:\n" + "\n".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
