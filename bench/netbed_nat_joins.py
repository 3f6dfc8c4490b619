#!/usr/bin/env python3
"""False suspicions while hosts behind NAT join: hosts as network namespaces
(tests/netbed/bed.py; needs root and nftables), some behind their own NAT routers, all agents
started within a second, counting the `member NAME suspect` and `member NAME failed` lines of
every agent's log.

Default layout (as tests/netbed/test_nat.py): 2 public hosts (h1, h2), 2 behind cone NAT
routers (h3, h4: nftables `masquerade`) and 1 behind a symmetric one (h5: `masquerade random`),
5 ms one-way delay a link (20 ms RTT host to host), 100 Mbit/s. Every agent
`--bind 0.0.0.0:7950 --join <h1>:7950 --retry-join --retry-interval 500ms` (h1 itself joins
nobody), `--task none` (membership only; `--task synthetic` or an fmnist task trains too).
Per run the start order is shuffled (seeded) and the agents start at offsets drawn uniformly
in [0, --spread) s, sorted; then the run lasts --duration seconds from the first start, and
every agent's log is read.

Prints one row per run: the start order, whether every agent listed all others alive at their
reachable addresses at the end (members, through the CLI), the suspect and failed lines (and
"alive again"), which members they named, and the failed probes that suspected nobody (the
agents' `status` → `nat.unconfirmed_holds`, summed: probes of an address not confirmed yet,
docs/design.md "NAT and relays"); then the totals.

With --load N, N busy loops (one core each) run beside the agents for all runs, started and
stopped by this bench (by PID). Each row also gives the 1-minute load average at the run's end.

Exit status 0 when the runs completed (whatever the counts), 2 on setup failure, 77 when no bed
can be built here.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "netbed"))
import benchlib as bl  # noqa: E402
import netbed_lib as nl  # noqa: E402
from bed import Bed, nat_available  # noqa: E402

FLAP = re.compile(r"member (\S+) (suspect|failed|alive again)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--duration", type=float, default=60, help="seconds a run lasts")
    p.add_argument("--spread", type=float, default=1.0,
                   help="the agents start within this many seconds")
    p.add_argument("--public", type=int, default=2, help="public hosts (the first is the seed)")
    p.add_argument("--cone", type=int, default=2, help="hosts behind cone NAT routers")
    p.add_argument("--symmetric", type=int, default=1, help="hosts behind symmetric NAT routers")
    p.add_argument("--delay", type=float, default=5, help="one-way ms per link")
    p.add_argument("--task", default="none", help="the agents' --task")
    p.add_argument("--profile", default="lan", help="the agents' --profile")
    p.add_argument("--seed", type=int, default=1, help="start orders and offsets")
    p.add_argument("--load", type=int, default=0,
                   help="CPU hogs (busy Python loops) this bench starts for the runs and stops "
                        "by PID after them, to see the agents under load")
    a = p.parse_args()
    if a.public < 1 or a.runs < 1 or a.duration <= 0 or a.spread < 0 or a.load < 0:
        p.error("need --public >= 1, --runs >= 1, --duration > 0, --spread >= 0, --load >= 0")
    return a


def formed(bed, binary, names, natted):
    """Every agent lists every other alive, the NATed ones at an address of their router."""
    for i in range(len(names)):
        v = nl.members(bed, i, binary)
        if not v:
            return False
        for j, n in enumerate(names):
            m = v.get(n)
            if m is None or m["status"] != "alive":
                return False
            if j in natted and not m["addr"].startswith(bed.public_addr(j) + ":"):
                return False
    return True


def run_one(a, binary, emu, workdir, rng, tag):
    os.makedirs(workdir, exist_ok=True)
    n = a.public + a.cone + a.symmetric
    names = [f"h{i + 1}" for i in range(n)]
    natted = {i: "cone" for i in range(a.public, a.public + a.cone)}
    natted.update({i: "symmetric" for i in range(a.public + a.cone, n)})
    order = list(range(n))
    rng.shuffle(order)
    offsets = sorted(rng.uniform(0, a.spread) for _ in range(n))
    logs = [os.path.join(workdir, f"{x}.log") for x in names]
    with Bed(n, emu, delay_ms=a.delay, rate_mbit=100, tag=tag, nat=natted) as bed:
        t0 = time.monotonic()
        for i, at in zip(order, offsets):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            argv = [binary, "agent", "--name", names[i], "--bind", f"0.0.0.0:{nl.PORT}",
                    "--rpc", nl.RPC, "--task", a.task, "--profile", a.profile]
            if i > 0:
                argv += ["--join", f"{bed.public_addr(0)}:{nl.PORT}", "--retry-join",
                         "--retry-interval", "500ms"]
            bed.spawn(i, argv, logs[i])
        started = time.monotonic() - t0
        time.sleep(max(0.0, t0 + a.duration - time.monotonic()))
        ok = formed(bed, binary, names, natted)
        holds = 0
        for i in range(n):
            st = nl.status(bed, i, binary)
            holds += (st or {}).get("nat", {}).get("unconfirmed_holds", 0)
        exited = [names[i] for i, p in enumerate(bed.procs) if p.poll() is not None]
    counts = {"suspect": 0, "failed": 0, "alive again": 0}
    about = set()
    for path in logs:
        with open(path, errors="replace") as f:
            for m in FLAP.finditer(f.read()):
                counts[m.group(2)] += 1
                if m.group(2) != "alive again":
                    about.add(m.group(1))
    return {"order": [names[i] for i in order], "started_s": started, "formed": ok,
            "exited": exited, "about": sorted(about), "holds": holds, "load": load_average(),
            **counts}


def load_average():
    """The 1-minute load average now (what else the machine ran), or None."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def start_hogs(n):
    """n busy loops (one core each), stopped by stop_hogs with their PIDs."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_hogs(hogs):
    for h in hogs:
        h.kill()
        h.wait()


def main():
    a = parse_args()
    binary, emu, code = bl.netbed_setup(a.bin, a.task)
    if code is not None:
        return code
    why = nat_available()
    if why:
        print(f"SKIP: no NAT routers here: {why}")
        return 77
    logdir = bl.make_logdir("meshtrain-netbed-nat-joins-")
    print(f"logs: {logdir}", flush=True)
    rng = random.Random(a.seed)
    rows, results = [], []
    hogs = start_hogs(a.load)
    try:
        for r in range(a.runs):
            res = run_one(a, binary, emu, os.path.join(logdir, f"run{r + 1}"), rng, f"nj{r}")
            results.append(res)
            row = [r + 1, " ".join(res["order"]), f"{res['started_s']:.2f}",
                   "yes" if res["formed"] else "NO", res["suspect"], res["failed"],
                   res["alive again"], ",".join(res["about"]) or "-", res["holds"],
                   ",".join(res["exited"]) or "-",
                   "-" if res["load"] is None else f"{res['load']:.1f}"]
            rows.append(row)
            print(f"  run {r + 1}: {row}", flush=True)
    finally:
        stop_hogs(hogs)
    print()
    print(f"{a.public} public, {a.cone} cone-NATed, {a.symmetric} symmetric-NATed hosts on the "
          f"namespace bed ({2 * (2 * a.delay):g} ms RTT, 100 Mbit/s), all started within "
          f"{a.spread:g} s, --task {a.task}, --profile {a.profile}; {a.runs} runs of "
          f"{a.duration:g} s (seed {a.seed}), {a.load} CPU hogs on {os.cpu_count()} cores")
    print(bl.table(["run", "start order", "last start s", "all alive at end", "suspect",
                    "failed", "alive again", "about", "probes held", "exited", "load 1 min"],
                   rows))
    tot = {k: sum(x[k] for x in results) for k in ("suspect", "failed", "alive again")}
    bad_runs = sum(1 for x in results if x["suspect"] or x["failed"])
    print(f"total: {tot['suspect']} suspect, {tot['failed']} failed, {tot['alive again']} alive "
          f"again lines; {bad_runs} of {a.runs} runs with any; "
          f"{sum(1 for x in results if x['formed'])} of {a.runs} formed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
