#!/usr/bin/env python3
"""Goodput under churn: the language model (examples/torch_charlm.py) on N hosts of the
network-namespace bed (tests/netbed/bed.py; needs root), once without faults and once with a
seeded schedule of one fault every --fault-every seconds, same seed, same data, same bed.

Each host runs an agent (--trainer external, its own --data-dir) and a PyTorch trainer
(MeshOptimizer, shard i/N, --max-steps steps, then `finish()`: the mesh's one model). The faults,
one at a time, on a host the seeded schedule picks (never the same host twice in a row), kinds
dealt in shuffled rounds of three:
  kill       kill -9 of the host's agent and trainer; after --down seconds both are started
             again with the same name, port and --data-dir (the agent joins every other host);
  stop       SIGSTOP of the host's agent and trainer for --stop-for seconds, then SIGCONT;
  partition  the host's link drops everything (linkemu loss 1) for --partition-for seconds.
No coordinator: nothing in the mesh is special, any host may be hit. A fault due once a trainer
has ended (the end-of-training consensus has begun) is skipped and reported as such.

Figures per run: seconds from the trainers' launch until every host has evaluated a model at or
below the target validation loss (bits per character; --target-bpc, or by default the worst
host's loss of the fault-free run at the evaluation nearest --target-at of its steps); seconds
to the end (every host holds the one model); steps trained (the trainers' local steps, summed
over hosts and incarnations) and steps lost against the fault-free run; for each kill the step
the host had reached before it and the step its restarted trainer resumed at; the one model's
validation loss (every host's `finish()`, and whether all hosts hold the same CRC-32); the bytes
each host's eth0 sent from the launch to the end (everything: models, gossip, TCP). Ratios:
time to target fault-free / churn (the goodput), consensus loss churn / fault-free - 1.

On this bed the hosts share the machine's cores: a killed or stopped host's trainer leaves its
CPU to the others, which then step faster than they would on hosts of their own.

--short: the CI variant (tests/netbed/test_churn.py): 3 hosts, a one-layer model, a kill, a stop
and a partition (in that order) in ~35 s of training (700 steps at --slowdown 10); no fault-free
run unless --with-fault-free.

Exit status 0 when the runs completed (whatever the figures), 1 when a run failed (a host
without the one model at the end), 2 on setup failure, 77 when no bed can be built here.
Every namespace and process the bed made is removed, also on failure.
"""
import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "netbed"))
import benchlib as bl  # noqa: E402
import netbed_lib as nl  # noqa: E402
from bed import Bed, available, find_linkemu  # noqa: E402
from netbed_charlm import TxSampler  # noqa: E402

EXAMPLE = os.path.join(REPO, "examples", "torch_charlm.py")
KINDS = ("kill", "stop", "partition")
FULL_MODEL = ("--layers 2 --d-model 64 --heads 4 --context 64 --batch 8 --val-windows 64 "
              "--lr 3e-3 --warmup 20")
# --slowdown 10: the one-layer model's forward and backward take a few ms on OpenBLAS; paced as
# on hosts ten times slower, its 700 steps span the ~35 s the short run's three faults need.
SHORT_MODEL = ("--layers 1 --d-model 32 --heads 4 --context 32 --batch 8 --val-windows 32 "
               "--lr 3e-3 --warmup 10 --slowdown 10")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch")
    p.add_argument("--short", action="store_true", help="the CI variant (see above)")
    p.add_argument("--nodes", type=int)
    p.add_argument("--faults", type=int, help="how many faults (default 10, short 3)")
    p.add_argument("--first-fault", type=float, help="seconds after the launch (30, short 5)")
    p.add_argument("--fault-every", type=float, help="seconds between faults (60, short 10)")
    p.add_argument("--down", type=float, help="a killed host's seconds down (10, short 5)")
    p.add_argument("--stop-for", type=float, help="seconds of SIGSTOP (10, short 5)")
    p.add_argument("--partition-for", type=float, help="seconds cut off (15, short 6)")
    p.add_argument("--max-steps", type=int, help="steps per trainer (2000, short 500)")
    p.add_argument("--sync-every", type=int, help="H local steps per sync (50, short 20)")
    p.add_argument("--eval-every", type=int, help="steps between evaluations (50, short 20)")
    p.add_argument("--checkpoint-every", type=int, help="agent checkpoints, steps (= H)")
    p.add_argument("--model", help="examples/torch_charlm.py options")
    p.add_argument("--outer", default="nesterov", choices=["avg", "sgd", "nesterov"])
    p.add_argument("--compress", default="int8")
    p.add_argument("--rate", type=float, default=100, help="Mbit/s of every host link")
    p.add_argument("--rtt", type=float, default=20, help="ms between any two hosts")
    p.add_argument("--threads", type=int, default=1, help="torch threads per trainer")
    p.add_argument("--seed", type=int, default=0, help="the model's and the fault schedule's")
    p.add_argument("--agent-args", default="--barrier pssp --sample 2 --staleness 1 "
                   "--select all --fanout 4 --capacity-probe-interval 0",
                   help="more agent options")
    p.add_argument("--target-bpc", type=float, help="the target (default: from the fault-free "
                   "run, see --target-at)")
    p.add_argument("--target-at", type=float, default=0.8,
                   help="fraction of the steps at whose evaluation the fault-free run sets the "
                   "target (its worst host's loss there)")
    p.add_argument("--repeat", type=int, default=1, help="fault-free/churn pairs, interleaved")
    p.add_argument("--no-fault-free", action="store_true", help="churn only (needs --target-bpc "
                   "for a time to target)")
    p.add_argument("--with-fault-free", action="store_true", help="--short: run it too")
    p.add_argument("--timeout", type=float, help="seconds per run at most (2400, short 240)")
    p.add_argument("--stall", type=float, help="end a run (not finished) when no trainer "
                   "wrote a line for this long (180 s, short 90 s)")
    p.add_argument("--json", help="write every run's figures to this file")
    p.add_argument("--logdir", help="where the runs' logs go (default: a new temporary one)")
    a = p.parse_args(argv)
    short = {"nodes": 3, "faults": 3, "first_fault": 5, "fault_every": 10, "down": 5,
             "stop_for": 5, "partition_for": 6, "max_steps": 700,
             "sync_every": 20, "eval_every": 20, "model": SHORT_MODEL, "timeout": 240,
             # Above the agents' consensus hold (--trainer-grace, 60 s): a partition that falls
             # on the end of training makes each side wait that long for the other, silently.
             "stall": 90}
    full = {"nodes": 5, "faults": 10, "first_fault": 30, "fault_every": 60, "down": 10,
            "stop_for": 10, "partition_for": 15, "max_steps": 2000, "sync_every": 50,
            "eval_every": 50, "model": FULL_MODEL, "timeout": 2400, "stall": 180}
    for k, v in (short if a.short else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.checkpoint_every is None:
        a.checkpoint_every = a.sync_every
    if a.short and not a.with_fault_free:
        a.no_fault_free = True
    return a


def fault_schedule(seed, nodes, count, first, every, shuffle=True):
    """[{at, kind, host}]: kinds dealt in rounds of the three (each round shuffled, or in KINDS'
    order: a kill first), hosts drawn at random, never the same twice in a row; deterministic
    given the seed."""
    rng = random.Random(seed)
    kinds = []
    while len(kinds) < count:
        round_ = list(KINDS)
        if shuffle:
            rng.shuffle(round_)
        kinds += round_
    out, prev = [], None
    for k in range(count):
        host = rng.choice([h for h in range(nodes) if h != prev])
        prev = host
        out.append({"at": first + k * every, "kind": kinds[k], "host": host})
    return out


class Mesh:
    """The agents and trainers of one run on a bed; every process ended by the bed (by PID)."""

    def __init__(self, a, binary, bed, workdir):
        self.a, self.binary, self.bed, self.work = a, binary, bed, workdir
        self.n = a.nodes
        self.agents = [None] * self.n
        self.trainers = [None] * self.n
        self.outs = [[] for _ in range(self.n)]  # each host's trainer output files, in order
        self.agent_from = [0] * self.n  # where the running agent's lines begin in its log

    def sock(self, i):
        return os.path.join(self.work, f"n{i + 1}.sock")

    def start_agent(self, i, join):
        a = self.a
        argv = [self.binary, "agent", "--name", f"n{i + 1}",
                "--bind", f"{self.bed.addr(i)}:{nl.PORT}", "--rpc", nl.RPC,
                "--trainer", "external", "--trainer-socket", self.sock(i),
                "--trainer-timeout", str(int(a.timeout)),
                "--min-peers", str(self.n - 1), "--compress", a.compress,
                "--data-dir", os.path.join(self.work, f"data{i + 1}"),
                "--checkpoint-every", str(a.checkpoint_every), *a.agent_args.split()]
        for j in join:
            argv += ["--join", f"{self.bed.addr(j)}:{nl.PORT}"]
        if join:
            argv += ["--retry-join", "--retry-interval", "1s"]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.sock(i))  # a killed agent's socket file: wait for the new one
        log = os.path.join(self.work, f"agent{i + 1}.log")
        self.agent_from[i] = os.path.getsize(log) if os.path.exists(log) else 0
        self.agents[i] = self.bed.spawn(i, argv, log)

    def start_trainer(self, i):
        a = self.a
        out = os.path.join(self.work, f"trainer{i + 1}.{len(self.outs[i])}.out")
        self.outs[i].append(out)
        outer = ["--outer", a.outer]
        argv = [a.python, EXAMPLE, "--socket", self.sock(i), "--shard", f"{i}/{self.n}",
                "--shard-mode", "interleaved", "--sync-every", str(a.sync_every), *outer,
                *a.model.split(), "--max-steps", str(a.max_steps),
                "--eval-every", str(a.eval_every), "--threads", str(a.threads),
                "--seed", str(a.seed), "--finish"]
        self.trainers[i] = self.bed.spawn(i, argv, out)

    def wait_socket(self, i, timeout=60):
        bl.wait_until(lambda: os.path.exists(self.sock(i)), timeout, interval=0.2,
                      what=f"{self.sock(i)}")

    def kill(self, i):
        for p in (self.agents[i], self.trainers[i]):
            self.bed.stop(p, signal.SIGKILL)

    def signal_host(self, i, sig):
        for p in (self.agents[i], self.trainers[i]):
            if p.poll() is None:
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass

    def done(self):
        return all(t is not None and t.poll() is not None for t in self.trainers)

    def any_done(self):
        return any(t is not None and t.poll() is not None for t in self.trainers)


def first_eval(path):
    return next((e for e in bl.read_events(path) if e["event"] == "eval"), None)


def last_step(path):
    ev = [e for e in bl.read_events(path) if "step" in e]
    return ev[-1]["step"] if ev else None


def run_once(a, binary, emu, workdir, faults):
    """One run (faults may be []): returns the raw record (events read back by summarize)."""
    os.makedirs(workdir, exist_ok=True)
    applied, skipped, undo = [], [], []  # faults done, not done; (time, what, host) to undo
    with Bed(a.nodes, emu, delay_ms=a.rtt / 4, rate_mbit=a.rate,
             tag="chf" if faults else "ch0") as bed:
        m = Mesh(a, binary, bed, workdir)
        for i in range(a.nodes):
            m.start_agent(i, [0] if i else [])
        bl.wait_until(lambda: (lambda v: v and len(v) == a.nodes)(nl.members(bed, 0, binary)),
                      60, interval=0.5, what=f"{a.nodes} members")
        for i in range(a.nodes):
            m.wait_socket(i)
        pending = list(faults)
        with TxSampler(bed) as tx:
            t0 = time.time()
            for i in range(a.nodes):
                m.start_trainer(i)
            t_train = None  # when every host's trainer has evaluated its first model
            said, said_at = None, time.time()  # the trainers' output so far, when it last grew
            while not m.done():
                if time.time() - t0 > a.timeout:
                    break
                size = sum(os.path.getsize(o) for outs in m.outs for o in outs
                           if os.path.exists(o))
                if size != said:
                    said, said_at = size, time.time()
                elif time.time() - said_at > a.stall:
                    print(f"    no trainer output for {a.stall:g} s: the run is stuck",
                          flush=True)
                    break
                if t_train is None and all(first_eval(outs[0]) for outs in m.outs):
                    t_train = time.time()
                    print(f"    training from t={t_train - t0:.1f}s", flush=True)
                now = time.time() - (t_train or time.time())
                for at, act, i in sorted(undo):
                    if at <= now:
                        undo.remove((at, act, i))
                        act_done = undo_fault(m, bed, act, i)
                        applied[-1]["undone_at"] = time.time() - t_train
                        applied[-1].update(act_done)
                if t_train and pending and pending[0]["at"] <= now and not undo:
                    f = pending.pop(0)
                    if m.any_done():  # the end has begun: no fault in it (see the notes)
                        skipped.append(f)
                        continue
                    rec = dict(f, started_at=time.time() - t_train)
                    undo.append(apply_fault(a, m, bed, f, rec, t_train))
                    applied.append(rec)
                    print(f"    t={rec['started_at']:.0f}s {f['kind']} n{f['host'] + 1}",
                          flush=True)
                time.sleep(0.2)
            t_end = time.time()
            finished = m.done()
            # A fault still in effect when the trainers ended is undone (the record says when).
            for at, act, i in undo:
                undo_fault(m, bed, act, i)
            time.sleep(1.5)
            tx_end = tx.read()
        status = [nl.status(bed, i, binary) or {} for i in range(a.nodes)]
        # Each host's end: exit codes (None: still running) and what its agent said then.
        ends = [{"agent_rc": m.agents[i].poll(), "trainer_rc": m.trainers[i].poll(),
                 "step": status[i].get("step"), "training": status[i].get("training"),
                 "trainer": status[i].get("trainer"), "consensus": status[i].get("consensus")}
                for i in range(a.nodes)]
    return {"faults": applied, "skipped": skipped, "t0": t0, "t_train": t_train, "t_end": t_end,
            "finished": finished, "ends": ends,
            "outs": m.outs, "tx": [e - b for e, b in zip(tx_end, tx.base)], "status": status,
            "workdir": workdir, "samples": tx.samples, "tx_base": tx.base}


def apply_fault(a, m, bed, f, rec, t0):
    """Starts fault f; returns (when to undo it, what, host)."""
    i, kind = f["host"], f["kind"]
    if kind == "kill":
        st = nl.status(bed, i, m.binary) or {}
        rec["trainer_step"] = last_step(m.outs[i][-1])
        rec["agent_step"] = st.get("step")
        m.kill(i)
        return (time.time() - t0 + a.down, "restart", i)
    if kind == "stop":
        m.signal_host(i, signal.SIGSTOP)
        return (time.time() - t0 + a.stop_for, "cont", i)
    bed.set_link(i, loss=1.0)
    return (time.time() - t0 + a.partition_for, "heal", i)


def undo_fault(m, bed, act, i):
    if act == "cont":
        m.signal_host(i, signal.SIGCONT)
        return {}
    if act == "heal":
        bed.set_link(i, loss=0.0)
        return {}
    m.start_agent(i, [j for j in range(m.n) if j != i])
    m.wait_socket(i)
    m.start_trainer(i)
    return {"restarted_out": m.outs[i][-1],
            "agent_log": (os.path.join(m.work, f"agent{i + 1}.log"), m.agent_from[i])}


ATTACHED = re.compile(r"external trainer attached \(pid \d+, \d+ parameters\), "
                      r"(?:starting|resuming from the agent's model) at step (\d+)")
JOINED = re.compile(r"fetching the model of \S+ \(step \d+\), continuing after step (\d+)")
GAVE_UP = re.compile(r"no model from \S+ in time|could not fetch the model of")


def resume_step(log, offset):
    """The step a restarted agent's trainer continued from (its agent's log lines from offset,
    up to the next trainer's attach): the step it attached at, or the step of the model it then
    fetched from a peer (a node joining a running mesh), unless that fetch was given up; None
    before the attach."""
    step, fetched = None, None
    try:
        with open(log, errors="replace") as f:
            f.seek(offset)
            for line in f:
                if ATTACHED.search(line):
                    if step is not None:
                        break  # the next incarnation's trainer
                    step = int(ATTACHED.search(line).group(1))
                elif JOINED.search(line):
                    fetched = int(JOINED.search(line).group(1))
                elif GAVE_UP.search(line):
                    fetched = None
    except OSError:
        return None
    return fetched if fetched is not None else step


def first_reach(events, target):
    return next((e for e in events if e["event"] == "eval" and e["val_bpc"] <= target), None)


def summarize(raw, target):
    """The figures of one run (see the module's notes)."""
    n = len(raw["outs"])
    per_host = [[e for out in outs for e in bl.read_events(out)] for outs in raw["outs"]]
    res = {"faults": raw["faults"], "skipped": raw["skipped"], "finished": raw["finished"],
           "workdir": raw["workdir"], "ends": raw["ends"]}
    kills, resumed = [], {}
    for f in raw["faults"]:
        if f["kind"] != "kill" or "restarted_out" not in f:
            continue
        ev = [e for e in bl.read_events(f["restarted_out"]) if e["event"] == "eval"]
        at = resume_step(*f["agent_log"])
        resumed[f["restarted_out"]] = at
        kills.append({"host": f["host"], "at": round(f["started_at"]),
                      "step_before": f.get("trainer_step"), "agent_step": f.get("agent_step"),
                      "resumed_at": at, "trainer_first_eval": ev[0]["step"] if ev else None})
    res["kills"] = kills
    trained = 0  # local steps: from where each incarnation started (or resumed) to its last
    for outs in raw["outs"]:
        for out in outs:
            steps = [e["step"] for e in bl.read_events(out) if e["event"] in ("eval", "final")]
            if steps:
                trained += max(steps) - max(min(steps), resumed.get(out) or 0)
    res["steps_trained"] = trained
    cons = [next((e for e in reversed(ev) if e["event"] == "consensus"), None) for ev in per_host]
    res["consensus"] = cons
    res["one_model"] = all(cons) and len({c["crc32"] for c in cons}) == 1
    res["consensus_bpc"] = cons[0]["val_bpc"] if res["one_model"] else None
    ends = [c["t"] for c in cons if c]
    res["seconds_end"] = max(ends) - raw["t0"] if len(ends) == n else None
    res["tx_mb"] = [b / 1e6 for b in raw["tx"]]
    res["target"] = target
    if target is not None:
        reach = [first_reach(ev, target) for ev in per_host]
        res["reached"] = sum(1 for r in reach if r)
        if all(reach):
            res["seconds_target"] = max(r["t"] for r in reach) - raw["t0"]
            res["step_target"] = max(r["step"] for r in reach)
    return res


def default_target(raw, frac, max_steps, eval_every):
    """The fault-free run's worst host's loss at the evaluation nearest frac of the steps."""
    at = round(frac * max_steps / eval_every) * eval_every
    worst = None
    for outs in raw["outs"]:
        ev = [e for out in outs for e in bl.read_events(out)
              if e["event"] == "eval" and e["step"] == at]
        if not ev:
            return None
        worst = max(worst or 0.0, ev[0]["val_bpc"])
    return worst


def describe(res, ff=None):
    k = "; ".join(f"n{x['host'] + 1} at {x['at']} s: step {x['step_before']} -> resumed at "
                  f"{x['resumed_at']}" for x in res["kills"])
    print(f"    {'finished' if res['finished'] else 'NOT finished'}; one model: "
          f"{res['one_model']} (crc {[c and c['crc32'] for c in res['consensus']]}); "
          f"consensus {res['consensus_bpc']} bpc; to target {bl.fmt(res.get('seconds_target'), '.1f')}"
          f" s, to end {bl.fmt(res['seconds_end'], '.1f')} s; steps trained "
          f"{res['steps_trained']}; MB sent per host "
          f"{', '.join(f'{x:.1f}' for x in res['tx_mb'])}" + (f"; kills: {k}" if k else ""),
          flush=True)
    if not (res["finished"] and res["one_model"]):
        for i, e in enumerate(res["ends"]):
            print(f"    n{i + 1} at the end: {json.dumps(e)}", flush=True)


def row(name, res, ff):
    t, te = res.get("seconds_target"), res["seconds_end"]
    ratio = ff["seconds_target"] / t if ff and ff.get("seconds_target") and t else None
    dloss = (res["consensus_bpc"] / ff["consensus_bpc"] - 1) * 100 \
        if ff and ff["consensus_bpc"] and res["consensus_bpc"] else None
    lost = ff["steps_trained"] - res["steps_trained"] if ff else None
    resumed = ", ".join(f"{x['step_before']}->{x['resumed_at']}" for x in res["kills"]) or "-"
    return [name, len(res["faults"]), f"{res.get('reached', '-')}/{len(res['consensus'])}",
            bl.fmt(t, ".1f"), bl.fmt(ratio, ".3f"), bl.fmt(te, ".1f"), res["steps_trained"],
            bl.fmt(lost), resumed, bl.fmt(res["consensus_bpc"]), bl.fmt(dloss, "+.2f"),
            "yes" if res["one_model"] else "NO", f"{bl.mean(res['tx_mb']):.1f}",
            " ".join(f"{x:.1f}" for x in res["tx_mb"])]


def main(argv=None):
    a = parse_args(argv)
    try:
        binary = bl.find_binary(a.bin)
    except bl.SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        return 2
    emu = find_linkemu(binary)
    why = available(emu)
    if why:
        print(f"SKIP: no network-namespace bed here: {why}")
        return 77
    r = subprocess.run([a.python, "-c", "import torch, numpy"], capture_output=True)
    if r.returncode != 0:
        print(f"SKIP: {a.python} cannot import torch and numpy")
        return 77
    if not os.path.exists("/usr/share/games/fortunes/fortunes"):
        print("SKIP: no fortunes text (install Debian's fortunes)")
        return 77
    logdir = a.logdir or bl.make_logdir("meshtrain-netbed-churn-")
    faults = fault_schedule(a.seed, a.nodes, a.faults, a.first_fault, a.fault_every,
                            shuffle=not a.short)
    print(f"logs: {logdir}\n{a.nodes} hosts, {a.rate:g} Mbit/s, {a.rtt:g} ms RTT; model "
          f"{a.model}; {a.max_steps} steps, {a.outer} H = {a.sync_every}, {a.compress}; "
          f"{os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\nfaults: "
          + ", ".join(f"{f['at']:g} s {f['kind']} n{f['host'] + 1}" for f in faults),
          flush=True)
    target, rows, runs, failed = a.target_bpc, [], [], False
    for rep in range(a.repeat):
        pair = {}
        for kind in ([] if a.no_fault_free else ["fault-free"]) + ["churn"]:
            print(f"  run {rep + 1} {kind} (load average "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}):", flush=True)
            raw = run_once(a, binary, emu, os.path.join(logdir, f"{kind}{rep + 1}"),
                           faults if kind == "churn" else [])
            if target is None and kind == "fault-free":
                target = default_target(raw, a.target_at, a.max_steps, a.eval_every)
                print(f"    target {target} bpc (worst host at step "
                      f"{round(a.target_at * a.max_steps / a.eval_every) * a.eval_every})")
            res = summarize(raw, target)
            res["raw"] = raw
            describe(res)
            pair[kind] = res
            failed |= not (res["finished"] and res["one_model"])
        ff = pair.get("fault-free")
        if ff:
            rows.append(row(f"run {rep + 1}: fault-free", ff, None))
        rows.append(row(f"run {rep + 1}: churn", pair["churn"], ff))
        runs.append(pair)
    print(f"\n{a.nodes} hosts on the namespace bed, {a.rate:g} Mbit/s, {a.rtt:g} ms RTT, "
          f"target {target} bpc; seed {a.seed}")
    print(bl.table(["run", "faults", "reached", "s to target", "ratio ff/churn", "s to end",
                    "steps trained", "steps lost", "killed: step -> resumed",
                    "consensus bpc", "vs ff %", "one model", "MB sent/host",
                    "MB sent per host"], rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{k: {kk: vv for kk, vv in v.items() if kk != "raw"}
                        for k, v in p.items()} for p in runs], f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
