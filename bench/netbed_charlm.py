#!/usr/bin/env python3
"""The language model (examples/torch_charlm.py) over slow links: PyTorch DDP (gloo) against
meshtrain agents with the outer optimizer, side by side on the network-namespace bed
(tests/netbed/bed.py; needs root): N hosts (default 4), every host link RATE Mbit/s both ways
(default 100), RTT ms between any two hosts (default 20). One trainer process per host.

1. DDP: rank i on host i (init_method tcp://<host 0>:29500), gradients all-reduced every step,
   --ddp-steps steps; rank 0 evaluates every --eval-every steps. The target is the validation
   loss (bits per character, the example's fixed validation windows) DDP reached at its last
   evaluation; DDP's time is its first evaluation at or below it.
2. Per --settings entry OUTER[@LR[@M]]/H[/COMPRESS][/fF][/overlap[K]] (e.g. nesterov/50/int8/f5,
   sgd@1.0/200/sparse:0.02:2/f4; LR: this setting's outer lr instead of --outer-lr, M its
   nesterov momentum instead of --outer-momentum): an agent
   per host (--trainer external, --compress COMPRESS, --agent-args), joined before the trainers
   start (COMPRESS sparse:F:B: the trainers send the top F of each pseudo-gradient at B bits,
   MeshOptimizer(compress=...), through agents with --compress sparse; overlap: each sync's
   exchange runs during the next local steps, MeshOptimizer(overlap=True), and is mixed at the
   next sync; overlapK: K local steps after it, MeshOptimizer(overlap=K));
   trainer i on shard i/N with MeshOptimizer(sync_every=H, outer=OUTER, fragments=F; nesterov: lr
   --outer-lr, momentum --outer-momentum) stops at its first evaluation at or below the target
   (--target-bpc) or after --mesh-steps. The mesh's time is the last node's first evaluation at
   or below the target (every node then holds such a model).

Both clocks start when the trainer processes are launched (torch import, data loading and
DDP's rendezvous included). Bytes per node: what the host's eth0 sent from the launch until
that time (sampled every second in each namespace: everything, gradients, models, membership
gossip and TCP overhead), mean over hosts; for meshtrain also the agents' params_bytes_sent at
the end, and the compute utilisation: each trainer's time computing (forward, backward and the
inner optimizer's step; the time in mesh steps is not) over its wall time outside evaluations,
up to its target (the lowest node's; the share of forward and backward alone is printed
beside it, and the utilisation from the first step on, without the start-up). Ratios are
meshtrain / DDP.

Exit status 0 when the runs completed (whatever the figures), 2 on setup failure, 77 when no bed
can be built here. Every namespace and process the bed made is removed, also on failure.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "netbed"))
import benchlib as bl  # noqa: E402
import netbed_lib as nl  # noqa: E402
from bed import Bed, available, find_linkemu  # noqa: E402

EXAMPLE = os.path.join(REPO, "examples", "torch_charlm.py")
DDP_PORT = 29500


# Link profiles. One-way delay A->B is delay(A) + delay(B) on the bed, so a host's delay is RTT/4;
# jitter and loss are per host link, so a path between two hosts sees both ends' (the path's loss
# is about twice a link's).
PROFILES = {
    "lan": {"about": "100 Mbit/s, 20 ms RTT", "rate": 100.0, "rtt": 20.0, "jitter": 0.0,
            "loss": 0.0, "slow": None},
    "wan": {"about": "20 Mbit/s, 100 ms RTT, up to 10 ms jitter and 0.1 %% loss a path, the last "
                     "host at 5 Mbit/s", "rate": 20.0, "rtt": 100.0, "jitter": 2.5,
            "loss": 0.0005, "slow": 5.0},
}


def link_profile(a):
    """Bed keyword arguments for a's links (--profile, with --rate and --rtt over it)."""
    prof = PROFILES[a.profile]
    rate = a.rate if a.rate is not None else prof["rate"]
    rtt = a.rtt if a.rtt is not None else prof["rtt"]
    links = None
    if prof["slow"] is not None:
        links = [None] * (a.nodes - 1) + [{"rate_mbit": prof["slow"]}]
    return {"delay_ms": rtt / 4, "rate_mbit": rate, "jitter_ms": prof["jitter"],
            "loss": prof["loss"], "links": links}


def describe_links(a):
    kw = link_profile(a)
    text = f"{kw['rate_mbit']:g} Mbit/s, {4 * kw['delay_ms']:g} ms RTT"
    if kw["jitter_ms"]:
        text += f", jitter {4 * kw['jitter_ms']:g} ms a round trip"
    if kw["loss"]:
        text += f", {100 * 2 * kw['loss']:g} % loss a path"
    if kw["links"]:
        text += f", host {a.nodes} at {kw['links'][-1]['rate_mbit']:g} Mbit/s"
    return text


def utilisation(hit, parts, since):
    """Seconds in `parts` (eval-line totals) over the wall time outside evaluations, from the
    eval line `since` ({}: from the launch) to `hit`; None when a figure is missing."""
    if since is None or not all(k in hit for k in parts):
        return None
    wall = (hit["elapsed"] - since.get("elapsed", 0.0)) - (hit["eval_total"]
                                                          - since.get("eval_total", 0.0))
    return sum(hit[k] - since.get(k, 0.0) for k in parts) / wall if wall > 0 else None


def parse_setting(setting):
    """OUTER/H[/COMPRESS][/fF][/overlap[K]] -> (outer, H, compress, F, overlap: False, True
    or K as a string)."""
    parts = setting.split("/")
    overlap = len(parts) > 2 and parts[-1].startswith("overlap") and (
        parts[-1][7:] == "" or parts[-1][7:].isdigit())
    if overlap:
        overlap = parts.pop()[7:] or True
    frags = "1"
    if len(parts) > 2 and parts[-1].startswith("f") and parts[-1][1:].isdigit():
        frags = parts.pop()[1:]
    if len(parts) not in (2, 3) or not parts[1].isdigit():
        raise SystemExit(f"a setting is OUTER/H[/COMPRESS][/fF][/overlap[K]], not {setting!r}")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else "none", frags, overlap


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch")
    p.add_argument("--settings", default="nesterov/50,nesterov/50/int8",
                   help="comma-separated OUTER/H[/COMPRESS] (OUTER avg|sgd|nesterov)")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--profile", choices=sorted(PROFILES), default="lan",
                   help="the links: " + "; ".join(f"{k}: {v['about']}"
                                                  for k, v in sorted(PROFILES.items())))
    p.add_argument("--rate", type=float, help="Mbit/s of every host link (overrides the profile)")
    p.add_argument("--rtt", type=float, help="ms between any two hosts (overrides the profile)")
    p.add_argument("--ddp-steps", type=int, default=300)
    p.add_argument("--mesh-steps", type=int, default=900, help="meshtrain: steps at most")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--model", default="--layers 2 --d-model 64 --heads 4 --context 64 "
                   "--batch 16 --val-windows 64 --lr 3e-3 --warmup 20",
                   help="examples/torch_charlm.py options shared by both sides")
    p.add_argument("--ddp-extra", default="",
                   help="more example options for DDP only, after --model (e.g. '--lr 5e-4': "
                   "a learning rate tuned to DDP's N-times larger batch)")
    p.add_argument("--mesh-extra", default="",
                   help="more example options for the mesh's trainers only, after --model")
    p.add_argument("--shard-mode", choices=["contiguous", "interleaved"], default="contiguous",
                   help="how the training text is split among the hosts, for DDP and mesh alike "
                   "(the example's --shard-mode): contiguous pieces, each in its own style, or "
                   "4096-character blocks dealt out in turn")
    p.add_argument("--threads", type=int, default=1, help="torch threads per trainer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agent-args", default="--barrier pssp --sample 2 --staleness 1 "
                   "--select all --fanout 3 --capacity-probe-interval 0",
                   help="more agent options (capacity probes off by default: with --select "
                   "all nobody's receivers depend on the links' capacity)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run at most")
    p.add_argument("--only-ddp", action="store_true", help="run DDP only (prints the target)")
    p.add_argument("--target-bpc", type=float, help="skip DDP and use this target "
                   "(its time and bytes then come from --ddp-time and --ddp-bytes)")
    p.add_argument("--ddp-time", type=float)
    p.add_argument("--ddp-bytes", type=float)
    p.add_argument("--run-out", action="store_true",
                   help="the mesh's trainers run all --mesh-steps instead of stopping at the "
                   "target (the time and bytes to it come from the evaluations all the same; "
                   "the losses at the end compare settings)")
    p.add_argument("--ddp-measure", type=int, metavar="K",
                   help="with --target-bpc: run DDP for K steps only and extrapolate its time "
                   "and bytes to --ddp-target-step (for links where the whole run takes hours)")
    p.add_argument("--ddp-target-step", type=int, default=200,
                   help="the step at which DDP's full run first reaches --target-bpc")
    return p.parse_args()


class TxSampler:
    """Every second: the bytes each host's eth0 has sent (one `ip -s -j link` per host)."""

    def __init__(self, bed):
        self.bed = bed
        self.samples = []  # (unix time, [tx bytes per host])
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def read(self):
        out = []
        for ns in self.bed.hosts:
            r = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", "eth0"],
                               capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL)
            out.append(json.loads(r.stdout)[0]["stats64"]["tx"]["bytes"])
        return out

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                self.samples.append((time.time(), self.read()))
            except (subprocess.SubprocessError, ValueError, KeyError, IndexError):
                pass
            self.stop_ev.wait(1.0)

    def __enter__(self):
        self.base = self.read()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.thread.join(timeout=20)
        return False

    def mean_sent_at(self, t, before=False):
        """Mean bytes per host sent from the start until the first sample at or after t (with
        `before`: the last sample at or before t, so that what follows t, e.g. the final models
        a run-out trainer sends right after its last evaluation, is not counted)."""
        if before:
            prior = [tx for ts, tx in self.samples if ts <= t]
            return sum(a - b for a, b in zip(prior[-1], self.base)) / len(prior[-1]) \
                if prior else None
        for ts, tx in self.samples:
            if ts >= t:
                return sum(a - b for a, b in zip(tx, self.base)) / len(tx)
        return None


def wait_procs(procs, timeout, done=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(p.poll() is not None for p in procs) or (done and done()):
            return True
        time.sleep(1.0)
    return False


def run_ddp(a, emu, workdir, steps=None):
    """DDP for `steps` (default --ddp-steps) steps on the bed: its target (the last evaluation's
    loss), the time and bytes to its first evaluation at or below it, and its evaluations."""
    steps = steps or a.ddp_steps
    os.makedirs(workdir, exist_ok=True)
    outs = [os.path.join(workdir, f"ddp{i}.out") for i in range(a.nodes)]
    # gloo binds to the address the host name resolves to (loopback here): name the interface.
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0"}
    with Bed(a.nodes, emu, tag="lmd", **link_profile(a)) as bed:
        with TxSampler(bed) as tx:
            t0 = time.time()
            procs = [bed.spawn(i, [a.python, EXAMPLE, "--ddp", f"{i}/{a.nodes}", "--ddp-addr",
                                   bed.addr(0), "--ddp-port", str(DDP_PORT), *a.model.split(),
                                   *a.ddp_extra.split(),
                                   "--shard-mode", a.shard_mode,
                                   "--max-steps", str(steps), "--eval-every",
                                   str(min(a.eval_every, steps)), "--threads", str(a.threads),
                                   "--seed", str(a.seed)], outs[i], env=env)
                     for i in range(a.nodes)]
            finished = wait_procs(procs, a.timeout,
                                  lambda: any(p.poll() not in (None, 0) for p in procs))
            time.sleep(1.5)  # one more byte sample after the end
        ev = bl.read_events(outs[0])
        evals = [e for e in ev if e["event"] == "eval"]
        codes = [p.poll() for p in procs]
    if not finished or not evals or any(c != 0 for c in codes) or ev[-1]["event"] != "final":
        raise RuntimeError(f"DDP run failed (exit codes {codes}); logs in {workdir}")
    target = evals[-1]["val_bpc"]
    first = next(e for e in evals if e["val_bpc"] <= target)
    return {"target": target, "seconds": first["t"] - t0, "step": first["step"],
            "bytes": tx.mean_sent_at(first["t"]), "evals": evals,
            "allreduced": evals[-1].get("allreduced_bytes"),
            "t0": t0, "sent_at": tx.mean_sent_at}


def run_ddp_measured(a, emu, workdir):
    """--ddp-measure K: DDP for K steps only, on these links, and its time and bytes to the
    target step (--ddp-target-step: where the full run first reaches --target-bpc; DDP's loss
    per step does not depend on the links) extrapolated from them: the time to the first
    evaluation, K steps' rate, and one evaluation's time per --eval-every steps; the bytes
    likewise. For links so slow that the full run would take hours (the wan profile)."""
    k = a.ddp_measure
    r = run_ddp(a, emu, workdir, steps=k)
    e0, ek = r["evals"][0], r["evals"][-1]
    eval_s = ek["eval_total"] - e0["eval_total"]
    per_step = (ek["t"] - e0["t"] - eval_s) / k
    b0, bk = r["sent_at"](e0["t"]), r["sent_at"](ek["t"] - eval_s)
    n = a.ddp_target_step
    seconds = e0["t"] - r["t0"] + n * per_step + (n // a.eval_every) * eval_s
    nbytes = b0 + n * (bk - b0) / k if b0 is not None and bk is not None else None
    print(f"  DDP measured: {k} steps at {per_step:.2f} s and "
          f"{bl.fmt(nbytes and (bk - b0) / k / 1e6, '.2f')} MB/node a step, an evaluation "
          f"{eval_s:.1f} s, {e0['t'] - r['t0']:.1f} s to the first; to step {n}: "
          f"{seconds:.1f} s, {bl.fmt(nbytes and nbytes / 1e6, '.1f')} MB/node (extrapolated)",
          flush=True)
    return {"target": a.target_bpc, "seconds": seconds, "bytes": nbytes, "step": n,
            "extrapolated": True}


def mean_bpc(values):
    """The mean of the nodes' figures, or "-" when one is missing."""
    return "-" if not values or None in values else f"{sum(values) / len(values):.4f}"


def run_mesh(a, binary, emu, workdir, setting, target):
    os.makedirs(workdir, exist_ok=True)
    outer, h, comp, frags, overlap = parse_setting(setting)
    res = {"setting": setting}
    logs = [os.path.join(workdir, f"agent{i}.log") for i in range(a.nodes)]
    outs = [os.path.join(workdir, f"trainer{i}.out") for i in range(a.nodes)]
    with Bed(a.nodes, emu, tag="lmm", **link_profile(a)) as bed:
        for i in range(a.nodes):
            argv = [binary, "agent", "--name", f"n{i + 1}", "--bind", f"{bed.addr(i)}:{nl.PORT}",
                    "--rpc", nl.RPC, "--trainer", "external", "--trainer-socket",
                    os.path.join(workdir, f"n{i + 1}.sock"), "--min-peers", str(a.nodes - 1),
                    # sparse:F:B is the trainer's (MeshOptimizer(compress=...)); the agent
                    # sends its outbox with --compress sparse.
                    "--compress", comp.split(":")[0],
                    # H local steps pass between two of the trainer's requests: at H = 50 and
                    # ~1 s per step on a loaded machine the default 60 s detached trainers.
                    "--trainer-timeout", str(a.timeout),
                    # each sync's tally and the agent's counters, for a post-mortem
                    "--metrics-file", os.path.join(workdir, f"agent{i}.metrics"),
                    *a.agent_args.split()]
            if i > 0:
                argv += ["--join", f"{bed.addr(0)}:{nl.PORT}", "--retry-join",
                         "--retry-interval", "1s"]
            bed.spawn(i, argv, logs[i])
        bl.wait_until(lambda: (lambda m: m and len(m) == a.nodes)(nl.members(bed, 0, binary)),
                      60, interval=0.5, what=f"{a.nodes} members")
        for i in range(a.nodes):
            sock = os.path.join(workdir, f"n{i + 1}.sock")
            bl.wait_until(lambda: os.path.exists(sock), 20, what=f"{sock}")
        # OUTER@LR[@MOMENTUM]: this setting's own outer lr (and nesterov momentum)
        outer, _, lr = outer.partition("@")
        lr, _, momentum = lr.partition("@")
        outer_args = ["--outer", outer]
        if outer == "nesterov":
            outer_args += ["--outer-lr", lr or str(a.outer_lr), "--outer-momentum",
                           momentum or str(a.outer_momentum)]
        elif outer == "sgd":
            outer_args += ["--outer-lr", lr or str(a.outer_lr)]
        with TxSampler(bed) as tx:
            t0 = time.time()
            procs = [bed.spawn(i, [a.python, EXAMPLE, "--socket",
                                   os.path.join(workdir, f"n{i + 1}.sock"), "--shard",
                                   f"{i}/{a.nodes}", "--sync-every", h, "--fragments", frags,
                                   *outer_args,
                                   *(["--compress", comp] if comp.startswith("sparse") else []),
                                   *(["--overlap"] if overlap is True else
                                     ["--overlap", overlap] if overlap else []),
                                   *a.model.split(), *a.mesh_extra.split(),
                                   "--shard-mode", a.shard_mode,
                                   "--max-steps", str(a.mesh_steps),
                                   "--eval-every", str(a.eval_every),
                                   *([] if a.run_out else ["--target-bpc", str(target)]),
                                   "--finish", "--threads", str(a.threads), "--seed",
                                   str(a.seed)], outs[i]) for i in range(a.nodes)]
            wait_procs(procs, a.timeout)
            time.sleep(1.5)
        status = [nl.status(bed, i, binary) or {} for i in range(a.nodes)]
    for i, st in enumerate(status):  # each agent's status at the end, for a post-mortem
        with open(os.path.join(workdir, f"status{i}.json"), "w") as f:
            json.dump(st, f, indent=1)
    reach, last_t = [], []
    for i in range(a.nodes):
        events = bl.read_events(outs[i])
        evals = [e for e in events if e["event"] == "eval"]
        hit = next((e for e in evals if e["val_bpc"] <= target), None)
        if hit is not None and evals[0]["step"] == 0:
            hit = dict(hit, first=evals[0])  # the evaluation before the first step
        reach.append(hit)
        if evals and "sync_phases" in evals[-1]:
            res.setdefault("phases", []).append(evals[-1]["sync_phases"])
        last_t += [evals[-1]["t"]] if evals else []
        res.setdefault("last_bpc", []).append(evals[-1]["val_bpc"] if evals else None)
        cons = [e for e in events if e["event"] == "consensus"]
        res.setdefault("consensus_bpc", []).append(cons[-1]["val_bpc"] if cons else None)
    if last_t:  # what was sent over the whole run, reached or not
        res["bytes_run"] = tx.mean_sent_at(max(last_t))
    res["reached"] = sum(1 for r in reach if r)
    if all(reach):
        t_all = max(r["t"] for r in reach)
        res["seconds"] = t_all - t0
        res["steps"] = max(r["step"] for r in reach)
        res["bytes"] = tx.mean_sent_at(t_all, before=True)
        # Compute utilisation: time computing (forward, backward and the inner optimizer's
        # step) over the wall time outside the evaluations (which only measure), up to each
        # node's target; the lowest node's. "fb": forward and backward alone; "steady": from
        # the evaluation before the first step on (without the start-up: imports, data, the
        # agents' attach and the barrier that starts the trainers together).
        for key, parts, steady in (("util", ("compute_total", "inner_total"), False),
                                   ("util_fb", ("compute_total",), False),
                                   ("util_steady", ("compute_total", "inner_total"), True)):
            utils = [utilisation(r, parts, r.get("first") if steady else {}) for r in reach]
            res[key] = None if None in utils else min(utils)
    sent = [s.get("params_bytes_sent") for s in status if s.get("params_bytes_sent") is not None]
    res["params_bytes"] = sum(sent) / len(sent) if sent else None
    res["workdir"] = workdir
    return res


def main():
    a = parse_args()
    try:
        binary = bl.find_binary(a.bin)
    except bl.SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        return 2
    r = subprocess.run([a.python, "-c", "import torch, numpy"], capture_output=True)
    if r.returncode != 0:
        print(f"setup failed: {a.python} cannot import torch and numpy", file=sys.stderr)
        return 2
    if not os.path.exists("/usr/share/games/fortunes/fortunes"):
        print("setup failed: no fortunes text (install Debian's fortunes)", file=sys.stderr)
        return 2
    emu = find_linkemu(binary)
    why = available(emu)
    if why:
        print(f"SKIP: no network-namespace bed here: {why}")
        return 77
    logdir = bl.make_logdir("meshtrain-netbed-charlm-")
    print(f"logs: {logdir}", flush=True)
    print(f"{a.nodes} hosts, {describe_links(a)}; model {a.model}"
          + (f", DDP also {a.ddp_extra}" if a.ddp_extra else "")
          + (f", mesh also {a.mesh_extra}" if a.mesh_extra else "") + f", shards {a.shard_mode}; "
          f"{a.threads} torch thread(s)/trainer, {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    if a.ddp_measure:
        if a.target_bpc is None:
            print("setup failed: --ddp-measure needs --target-bpc", file=sys.stderr)
            return 2
        ddp = run_ddp_measured(a, emu, os.path.join(logdir, "ddp"))
    elif a.target_bpc is not None:
        ddp = {"target": a.target_bpc, "seconds": a.ddp_time, "bytes": a.ddp_bytes,
               "step": None}
    else:
        ddp = run_ddp(a, emu, os.path.join(logdir, "ddp"))
        print(f"  DDP: {a.ddp_steps} steps, final val {ddp['target']} bpc, first reached at "
              f"step {ddp['step']} after {ddp['seconds']:.1f} s, "
              f"{bl.fmt(ddp['bytes'] and ddp['bytes'] / 1e6, '.1f')} MB/node sent; evals "
              + ", ".join(f"{e['step']}:{e['val_bpc']}" for e in ddp["evals"]), flush=True)
        if a.only_ddp:
            return 0
    rows = [["DDP (gloo), all-reduce every step"
             + (f" (from {a.ddp_measure} steps)" if ddp.get("extrapolated") else ""), "1/1", bl.fmt(ddp["seconds"], ".1f"), "1.00",
             bl.fmt(ddp["step"]), bl.fmt(ddp["bytes"] and ddp["bytes"] / 1e6, ".2f"), "1", "-",
             "-", "-", bl.fmt(ddp["target"], ".4f"), "-"]]
    for run_no, s in enumerate((x for x in a.settings.split(",") if x), 1):
        # a directory per run: a setting given twice (repeated runs) must not share one
        wd = os.path.join(logdir, f"{run_no}-" + s.replace("/", "_"))
        m = run_mesh(a, binary, emu, wd, s, ddp["target"])
        print(f"  {s}: {m['reached']}/{a.nodes} nodes reached {ddp['target']} bpc, "
              f"{bl.fmt(m.get('seconds'), '.1f')} s, step {m.get('steps')}, "
              f"{bl.fmt(m.get('bytes') and m['bytes'] / 1e6, '.2f')} MB/node sent, "
              f"utilisation {bl.fmt(m.get('util'), '.3f')} (forward and backward "
              f"{bl.fmt(m.get('util_fb'), '.3f')}; from the first step "
              f"{bl.fmt(m.get('util_steady'), '.3f')}), "
              f"{bl.fmt(m.get('bytes_run') and m['bytes_run'] / 1e6, '.2f')} MB/node over the "
              f"run, agent param MB/node {bl.fmt(m.get('params_bytes') and m['params_bytes'] / 1e6, '.2f')}"
              f", last bpc "
              f"{m['last_bpc']}, consensus (finish()) bpc {m['consensus_bpc'][0]}", flush=True)
        if m.get("phases"):  # MeshOptimizer.sync_phases at each trainer's last evaluation
            keys = list(m["phases"][0])
            means = {k: sum(p.get(k, 0.0) for p in m["phases"]) / len(m["phases"]) for k in keys}
            print(f"    mesh steps over the run, s a node (mean of {len(m['phases'])}): "
                  f"{sum(means.values()):.2f} = "
                  + ", ".join(f"{k} {v:.2f}" for k, v in means.items()), flush=True)
        t_ratio = m.get("seconds") / ddp["seconds"] if m.get("seconds") and ddp["seconds"] \
            else None
        b_ratio = m.get("bytes") / ddp["bytes"] if m.get("bytes") and ddp["bytes"] else None
        rows.append([f"meshtrain {s}", f"{m['reached']}/{a.nodes}", bl.fmt(m.get("seconds"), ".1f"),
                     bl.fmt(t_ratio, ".2f"), bl.fmt(m.get("steps")),
                     bl.fmt(m.get("bytes") and m["bytes"] / 1e6, ".2f"),
                     f"1/{1 / b_ratio:.0f}" if b_ratio else "-",
                     bl.fmt(m.get("params_bytes") and m["params_bytes"] / 1e6, ".2f"),
                     bl.fmt(m.get("util"), ".2f"), bl.fmt(m.get("util_steady"), ".2f"),
                     mean_bpc(m["last_bpc"]),
                     mean_bpc(m["consensus_bpc"])])
    print()
    print(f"{a.nodes} hosts on the namespace bed, {describe_links(a)}; target "
          f"{ddp['target']} bpc ("
          + ("--target-bpc" if a.target_bpc is not None else f"DDP after {a.ddp_steps} steps")
          + (f"; DDP's time and bytes extrapolated from {a.ddp_measure} steps"
             if a.ddp_measure else "")
          + ")")
    print(bl.table(["run", "nodes reached", "s to target", "time vs DDP", "step",
                    "MB sent/node (eth0)", "bytes vs DDP", "agent param MB/node",
                    "utilisation", "from the first step", "bpc at the end (mean)",
                    "consensus bpc"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
