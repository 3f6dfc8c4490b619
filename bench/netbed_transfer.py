#!/usr/bin/env python3
"""One large model transfer against iperf3 on the same shaped link: two hosts
as network namespaces, 1000 Mbit/s links both ways, an external numpy trainer per agent holding a
--params float32 model (default 1e8: 400 MB), side by side with iperf3 in one run.

Hosts (--shaper):
  linkemu  the netbed (tests/netbed/bed.py): the user-space switch tests/tools/linkemu gives the
           rate and the delay (--rtt; this kernel has no netem). Its frames cost user-space CPU
           on the same 2 cores as everything else (it runs SCHED_FIFO).
  tc       two namespaces on a veth pair, tbf at --rate on each end (kernel shaping, no user-space
           switch); no delay can be added (no netem): --rtt is the veth's own (~0.05 ms).
Addresses come from 198.18.0.0/15 (benchmarking range) and exist only inside the namespaces.

Per repeat (interleaved, in one bed): iperf3 (server in host B, client in host A, -t
--iperf-seconds, JSON) then one meshtrain run: agent A (n1) and agent B (n2), --trainer external,
--barrier asp, --select all, --compress none; each serves bench/model_size_worker.py. B's worker
attaches and then sleeps (--step-ms far beyond the run), so B never publishes: the link carries
A -> B only, as iperf3's does (--both-ways: both workers step, both directions, iperf3 --bidir).
A's worker steps every --step-ms (default: 2.5 x the ideal transfer time), so each of its
snapshots goes out alone: --transfers rounds are timed, then the run ends.

What is timed, per transfer:
  round s      the metrics file's sync event: from the round's start (SendRound, before the first
               chunk is encoded) to B's ParamAck for the last chunk (the slowest receiver's
               acknowledgment). meshtrain Mbit/s = model bytes (params x 4) x 8 / round s:
               goodput of the model, framing not counted (iperf3's figure is TCP goodput too).
               The agents' metrics t is put on the wall clock by their "external trainer
               attached" log line (ms).
  wire span    from B's eth0 counters (/proc/PID/net/dev of the agent, every --sample-ms): from
               1 % to 99 % of the round's bytes, / 0.98; lead = round start -> 0.1 % of the bytes
               leaving A, tail = 99.9 % of them reaching B -> the ack at A.
  steady       B's rate between 10 % and 90 % of the round's bytes (the pipe while it is full),
               and the rate over each tenth of the bytes, both scaled to model bytes.
  A's socket   `ss -tin` every --ss-every s: app-limited samples, bytes not yet sent (notsent),
               and TCP_INFO's busy / rwnd_limited / sndbuf_limited times over the round; snd_cwnd
               from /proc/PID/net/tcp every 50 ms: stretches at <= 4 packets are BBR's PROBE_RTT.
CPU: per thread of each agent ("main" is the event loop; libuv's pool threads keep the name
meshtrain), linkemu, the workers, the machine (/proc/stat: busy, softirq) and the busiest other
processes (a build beside the bench shows there) over each transfer and each iperf3 run; before
each measurement the script waits up to --quiet-wait s for an idle machine. --perf adds a flat
profile of both agents per run.

Units: Mbit/s = 10^6 bit/s of payload (the model's bytes; iperf3's received bytes).

Exit status 0 when the runs completed (whatever the figures), 2 on setup failure, 77 when no bed
can be built here (not root, no `ip`/`tc`, no iperf3, no linkemu for --shaper linkemu).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "netbed"))
import benchlib as bl  # noqa: E402
import netbed_lib as nl  # noqa: E402
import bed as bedmod  # noqa: E402

WORKER = os.path.join(HERE, "model_size_worker.py")
SUBNET = "198.18.0"  # RFC 2544 benchmarking range; only inside the namespaces made here
IPERF_PORT = 5201
TICK = os.sysconf("SC_CLK_TCK")


def parse_args():
    class Fmt(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        pass

    p = argparse.ArgumentParser(description=__doc__, formatter_class=Fmt)
    p.add_argument("--bin", help=f"meshtrain binary (default $MESHTRAIN_BIN or {bl.DEFAULT_BIN})")
    p.add_argument("--shaper", choices=["linkemu", "tc"], default="linkemu")
    p.add_argument("--rate", type=float, default=1000, help="Mbit/s of each host link, both ways")
    p.add_argument("--rtt", type=float, default=1.0, help="ms between the hosts (linkemu only)")
    p.add_argument("--params", type=float, default=1e8, help="float32 parameters of the model")
    p.add_argument("--compress", default="none")
    p.add_argument("--repeat", type=int, default=3, help="iperf3 + meshtrain pairs, interleaved")
    p.add_argument("--transfers", type=int, default=3, help="timed snapshots per meshtrain run")
    p.add_argument("--iperf-seconds", type=float, default=10)
    p.add_argument("--step-ms", type=float, default=0,
                   help="A's step time (0: 2.5 x the ideal transfer time, at least 3000)")
    p.add_argument("--both-ways", action="store_true",
                   help="both agents publish every step; iperf3 --bidir")
    p.add_argument("--sample-ms", type=float, default=20, help="eth0 counter sampling period")
    p.add_argument("--ss-every", type=float, default=0.5,
                   help="seconds between `ss -tin` samples of A's parameter connection (0: off)")
    p.add_argument("--cc", help="TCP congestion control in the hosts' namespaces (default: "
                                "the kernel's; a namespace may only pick one of "
                                "net.ipv4.tcp_allowed_congestion_control, e.g. reno)")
    p.add_argument("--no-idle-restart", action="store_true",
                   help="net.ipv4.tcp_slow_start_after_idle=0 in the hosts' namespaces")
    p.add_argument("--queue-ms", type=float, default=200, help="link queue (linkemu, tbf)")
    p.add_argument("--quiet-wait", type=float, default=120,
                   help="before each measurement, wait up to this many seconds for the machine "
                        "to be at most 15 %% busy (0: do not wait)")
    p.add_argument("--timeout", type=float, default=240, help="seconds per meshtrain run, at most")
    p.add_argument("--perf", action="store_true",
                   help="profile both agents during each meshtrain run (perf record -e "
                        "cpu-clock, flat); prints their hottest symbols, perf-A.txt / perf-B.txt "
                        "in the logs")
    p.add_argument("--json", help="also write every measurement to this file")
    a = p.parse_args()
    a.params = int(a.params)
    a.model_bytes = a.params * 4
    ideal_s = a.model_bytes * 8 / (a.rate * 1e6)
    if a.step_ms <= 0:
        a.step_ms = max(3000.0, 2500.0 * ideal_s)
    return a


# ---- beds -----------------------------------------------------------------------------------

def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          stdin=subprocess.DEVNULL, timeout=20)


class TcBed(bedmod.Bed):
    """Two namespaces on a veth pair shaped by tbf on each end (the rest — spawn, run, stop,
    close: every process by PID, every namespace deleted — is the netbed's)."""

    def __init__(self, rate_mbit, queue_ms=200, tag="tc"):
        super().__init__(2, None, rate_mbit=rate_mbit, tag=tag, queue_ms=queue_ms)

    def _build(self):
        for ns in self.hosts:
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.hosts[0], "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
            "netns", self.hosts[1])
        rate = self.links[0]["rate_mbit"]
        # burst: 1 ms at the rate (and above a 64 KB GSO packet, so tbf need not split them).
        burst = max(int(rate * 1e6 / 8 / 1000), 96 * 1024)
        for i, ns in enumerate(self.hosts):
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0",
                                "root", "tbf", "rate", f"{rate:g}mbit", "burst", str(burst),
                                "latency", f"{self.queue_ms:g}ms"],
                               capture_output=True, text=True, stdin=subprocess.DEVNULL,
                               timeout=20)
            if r.returncode != 0:
                raise RuntimeError(f"tc tbf: {r.stderr.strip()}")

    def emulator_report(self):
        out = []
        for ns in self.hosts:
            r = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev",
                                "eth0"], capture_output=True, text=True, timeout=20,
                               stdin=subprocess.DEVNULL)
            out.append(f"{ns}: " + " ".join(r.stdout.split()))
        return "\n".join(out)


def tc_available():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` (iproute2)"
    probe = f"mtprobe{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        r = _ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1",
                check=False)
        if r.returncode != 0:
            return f"no veth: {r.stderr.strip()}"
        r = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "p0",
                            "root", "tbf", "rate", "1000mbit", "burst", "131072", "latency",
                            "100ms"], capture_output=True, text=True, timeout=20,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            return f"no tbf: {r.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def make_bed(a, emu):
    if a.shaper == "tc":
        return TcBed(a.rate, queue_ms=a.queue_ms, tag="xt")
    return bedmod.Bed(2, emu, delay_ms=a.rtt / 4, rate_mbit=a.rate, tag="xe",
                      queue_ms=a.queue_ms)


def set_tcp(a, bed):
    """--cc / --no-idle-restart in both host namespaces (per-namespace sysctls)."""
    for i in range(2):
        for key, val in (("net.ipv4.tcp_congestion_control", a.cc),
                         ("net.ipv4.tcp_slow_start_after_idle",
                          "0" if a.no_idle_restart else None)):
            if val is None:
                continue
            r = bed.run(i, ["sysctl", "-q", "-w", f"{key}={val}"])
            if r.returncode != 0:
                raise bl.SetupError(f"sysctl {key}={val}: {r.stderr.strip()}")
    r = bed.run(0, ["sysctl", "-n", "net.ipv4.tcp_congestion_control"])
    return r.stdout.strip()


# ---- sampling -------------------------------------------------------------------------------

def eth0_bytes(pid):
    """(rx, tx) bytes of eth0 in the network namespace of process `pid`, or None."""
    try:
        with open(f"/proc/{pid}/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "eth0":
                    v = rest.split()
                    return int(v[0]), int(v[8])
    except OSError:
        pass
    return None


def tcp_hex(addr):
    """'198.18.0.2:7950' as /proc/net/tcp writes a remote address."""
    ip, port = addr.rsplit(":", 1)
    return "%08X:%04X" % (struct.unpack("<I", socket.inet_aton(ip))[0], int(port))


def tcp_cwnd(pid, remote_hex):
    """(snd_cwnd, tx_queue bytes) of the established connection to remote_hex with the largest
    tx queue, in the namespace of `pid` (/proc/PID/net/tcp), or None."""
    best = None
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            next(f)
            for line in f:
                v = line.split()
                if len(v) > 15 and v[2] == remote_hex and v[3] == "01":
                    txq = int(v[4].split(":")[0], 16)
                    if best is None or txq > best[1]:
                        best = (int(v[15]), txq)
    except (OSError, ValueError, StopIteration):
        pass
    return best


def proc_cpu(pid):
    """CPU seconds (user + system) of process `pid` (all threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    v = stat[stat.rindex(")") + 2:].split()
    return (int(v[11]) + int(v[12])) / TICK


def machine_cpu():
    """/proc/stat totals in seconds: (busy, softirq, total) over all cores."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = v[:7]
    steal = v[7] if len(v) > 7 else 0
    total = sum(v[:8])
    return ((total - idle - iowait) / TICK, softirq / TICK, total / TICK)


def all_procs():
    """{pid: (comm, CPU seconds)} of every process on the machine."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        v = stat[stat.rindex(")") + 2:].split()
        out[int(d)] = (stat[stat.index("(") + 1:stat.rindex(")")],
                       (int(v[11]) + int(v[12])) / TICK)
    return out


def machine_busy(seconds=1.0):
    """Busy share of the machine (0..1) over `seconds`."""
    a = machine_cpu()
    time.sleep(seconds)
    b = machine_cpu()
    return (b[0] - a[0]) / (b[2] - a[2]) if b[2] > a[2] else 0.0


def wait_quiet(max_wait, limit=0.15):
    """Waits (up to max_wait s) until the machine is at most `limit` busy over a second: a
    compile or test run beside the bench takes CPU from the agents and the switch, not from
    iperf3 alone. Returns the last busy share seen."""
    deadline = time.monotonic() + max_wait
    busy = machine_busy()
    while busy > limit and time.monotonic() < deadline:
        time.sleep(4)
        busy = machine_busy()
    return busy


class Sampler(threading.Thread):
    """Samples eth0 counters (every `net_s`) in the namespaces of `net_pids` and CPU (every
    `cpu_s`) of the processes in `procs` ({label: pid}; agents by thread) and of the machine."""

    def __init__(self, net_pids, procs, threads, net_s=0.01, cpu_s=0.1, cwnd=None, cwnd_s=0.05):
        """cwnd: optional (pid, remote hex) whose connection's snd_cwnd is sampled with the
        counters (BBR's PROBE_RTT shows as a cwnd of 4 packets)."""
        super().__init__(daemon=True)
        self.cwnd_of = cwnd
        self.cwnd_s = cwnd_s
        self.cwnd = []  # (t, (snd_cwnd, tx_queue) or None)
        self.net_pids = net_pids
        self.procs = procs
        self.threads = threads
        self.net_s = net_s
        self.cpu_s = cpu_s
        self.net = []  # (t, {label: (rx, tx)})
        self.cpu = []  # (t, {label: seconds or {thread: seconds}}, machine)
        self.full = []  # (t, all_procs()) every second: who else used the CPU
        self.stop_ = threading.Event()

    def cpu_sample(self):
        by = {}
        for label, pid in self.procs.items():
            by[label] = (bl.thread_cpu(pid, per_thread=True) if label in self.threads
                         else proc_cpu(pid))
        return time.time(), by, machine_cpu()

    def run(self):
        next_cpu = next_full = next_cwnd = 0.0
        while not self.stop_.is_set():
            t = time.time()
            self.net.append((t, {k: eth0_bytes(pid) for k, pid in self.net_pids.items()}))
            if self.cwnd_of and t >= next_cwnd:
                # /proc/net/tcp walks the namespace's whole socket table: not at every tick
                self.cwnd.append((t, tcp_cwnd(*self.cwnd_of)))
                next_cwnd = t + self.cwnd_s
            if t >= next_cpu:
                self.cpu.append(self.cpu_sample())
                next_cpu = t + self.cpu_s
            if t >= next_full:
                self.full.append((time.time(), all_procs()))
                next_full = t + 1.0
            self.stop_.wait(self.net_s)
        self.cpu.append(self.cpu_sample())
        self.full.append((time.time(), all_procs()))

    def others(self, t0, t1, n=3):
        """The processes other than the tracked ones that used the most CPU over about
        [t0, t1] (whole-second samples): [(comm, % of one core)]; this script is "bench"."""
        before = [s for s in self.full if s[0] <= t0] or self.full[:1]
        after = [s for s in self.full if s[0] >= t1] or self.full[-1:]
        if not before or not after or after[0][0] <= before[-1][0]:
            return []
        (ta, pa), (tb, pb) = before[-1], after[0]
        skip = set(self.procs.values())
        use = []
        for pid, (comm, c1) in pb.items():
            if pid in skip:
                continue
            c0 = pa.get(pid, (comm, 0.0))[1] if pid in pa else 0.0
            name = "bench" if pid == os.getpid() else comm
            if c1 - c0 > 0:
                use.append((name, 100 * (c1 - c0) / (tb - ta)))
        return sorted(use, key=lambda x: -x[1])[:n]

    def stop(self):
        self.stop_.set()
        self.join(timeout=10)

    def cpu_between(self, t0, t1):
        """{label: % of one core (by thread for agents)}, machine busy %, softirq % of the
        machine, and the span actually covered."""
        if len(self.cpu) < 2:
            return None
        before = [s for s in self.cpu if s[0] <= t0] or self.cpu[:1]
        after = [s for s in self.cpu if s[0] >= t1] or self.cpu[-1:]
        s0, s1 = before[-1], after[0]
        dt = s1[0] - s0[0]
        if dt <= 0:
            return None
        out = {}
        for label in self.procs:
            c0, c1 = s0[1].get(label), s1[1].get(label)
            if c0 is None or c1 is None:
                continue
            if isinstance(c1, dict):
                out[label] = {k: 100 * (c1[k] - c0.get(k, 0.0)) / dt for k in c1}
            else:
                out[label] = 100 * (c1 - c0) / dt
        m0, m1 = s0[2], s1[2]
        tot = m1[2] - m0[2]
        tracked = sum(sum(v.values()) if isinstance(v, dict) else v for v in out.values())
        return {"procs": out, "others": self.others(t0, t1),
                "busy_pct": 100 * (m1[0] - m0[0]) / tot if tot else None,
                "softirq_pct": 100 * (m1[1] - m0[1]) / tot if tot else None,
                # busy CPU (% of one core) outside the tracked processes and softirq: the
                # kernel's other work, this script, and anything else on the machine
                "untracked_pct": 100 * ((m1[0] - m0[0]) - (m1[1] - m0[1])) / dt - tracked,
                "cores": round(tot / dt), "span_s": dt}

    def small_cwnd(self, t0, t1, limit=4):
        """Stretches in [t0, t1] with snd_cwnd <= limit (PROBE_RTT): [(start, seconds)]."""
        out, since = [], None
        for t, v in self.cwnd:
            if not t0 <= t <= t1:
                continue
            small = v is not None and v[0] <= limit
            if small and since is None:
                since = t
            elif not small and since is not None:
                out.append((since, t - since))
                since = None
        if since is not None:
            out.append((since, t1 - since))
        return out

    def wire(self, label, field, t0, t1):
        """From the counter `field` (0 rx, 1 tx) of `label` in [t0, t1]: bytes, the 1-99 % span
        / 0.98 and the 10-90 % rate (Mbit/s), and the times of 1 % and 99 %."""
        pts = [(t, v[label][field]) for t, v in self.net if t0 <= t <= t1 and v.get(label)]
        if len(pts) < 3:
            return None
        base = pts[0][1]
        total = pts[-1][1] - base
        if total <= 0:
            return None

        def when(frac):
            goal = base + frac * total
            for (ta, va), (tb, vb) in zip(pts, pts[1:]):
                if vb >= goal:
                    return ta + (tb - ta) * ((goal - va) / (vb - va) if vb > va else 1.0)
            return pts[-1][0]

        t0_, t01, t10, t90, t99, t1_ = (when(0.001), when(0.01), when(0.10), when(0.90),
                                        when(0.99), when(0.999))
        marks = [t0_] + [when(k / 10) for k in range(1, 10)] + [t1_]
        deciles = [0.1 * total * 8 / 1e6 / (b - a_) if b > a_ else None
                   for a_, b in zip(marks, marks[1:])]
        return {"bytes": total, "first": t0_, "last": t1_, "decile_mbit": deciles,
                "wire_s": (t99 - t01) / 0.98,
                "steady_mbit": 0.8 * total * 8 / 1e6 / (t90 - t10) if t90 > t10 else None}


def ss_conns(bed, i):
    """Established TCP connections in host i's namespace (`ss -tin`): a list of dicts with
    local, peer, send_q, recv_q, app_limited and the key:value fields of TCP_INFO (busy,
    rwnd_limited, sndbuf_limited, notsent, bytes_acked, cwnd, delivery_rate, ...)."""
    r = bed.run(i, ["ss", "-tinH", "state", "established"], timeout=10)
    out, cur = [], None
    for line in r.stdout.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            f = line.split()
            if len(f) >= 4:
                cur = {"recv_q": int(f[0]), "send_q": int(f[1]), "local": f[2], "peer": f[3]}
                out.append(cur)
            continue
        if cur is None:
            continue
        cur["app_limited"] = " app_limited" in line
        for m in re.finditer(r"(\w+):([^\s]+)", line):
            cur.setdefault(m.group(1), m.group(2))
    return out


def ms_field(v):
    """'1500ms' or '120ms(12.3%)' -> milliseconds."""
    m = re.match(r"([0-9.]+)ms", v or "")
    return float(m.group(1)) if m else 0.0


class SsSampler(threading.Thread):
    """`ss -tin` in host `i`'s namespace every `every` s: the connection to `peer` with the most
    bytes acked (the parameter stream)."""

    def __init__(self, bed, i, peer, every=0.5):
        super().__init__(daemon=True)
        self.bed, self.i, self.peer, self.every = bed, i, peer, every
        self.samples = []
        self.stop_ = threading.Event()

    def conn(self):
        c = [x for x in ss_conns(self.bed, self.i) if x["peer"] == self.peer]
        return max(c, key=lambda x: int(x.get("bytes_acked", 0))) if c else None

    def run(self):
        while not self.stop_.is_set():
            try:
                c = self.conn()
            except (subprocess.SubprocessError, OSError):
                c = None
            if c:
                self.samples.append((time.time(), c))
            self.stop_.wait(self.every)

    def stop(self):
        self.stop_.set()
        self.join(timeout=15)


# ---- iperf3 ---------------------------------------------------------------------------------

def run_iperf(a, bed, workdir, rep):
    log = os.path.join(workdir, f"iperf3-server-{rep}.log")
    server = bed.spawn(1, ["iperf3", "-s", "-1", "--forceflush", "-B", bed.addr(1), "-p",
                             str(IPERF_PORT)], log)
    try:
        bl.wait_until(lambda: "listening" in open(log, errors="replace").read().lower()
                      or server.poll() is not None, 10, interval=0.05, what="iperf3 server")
        procs = {}
        if bed.emu is not None:
            procs["linkemu"] = bed.emu.pid
        sampler = Sampler({}, procs, set(), cpu_s=0.5)
        sampler.start()
        argv = ["iperf3", "-c", bed.addr(1), "-p", str(IPERF_PORT), "-t",
                f"{a.iperf_seconds:g}", "-J"]
        if a.both_ways:
            argv.append("--bidir")
        t0 = time.time()
        r = bed.run(0, argv, timeout=a.iperf_seconds + 30)
        t1 = time.time()
        sampler.stop()
    finally:
        bed.stop(server, sig=signal.SIGTERM)
        bed.procs.remove(server)
    with open(os.path.join(workdir, f"iperf3-{rep}.json"), "w") as f:
        f.write(r.stdout)
    if r.returncode != 0:
        raise bl.SetupError(f"iperf3 failed: {r.stderr.strip() or r.stdout[-500:]}")
    j = json.loads(r.stdout)
    end = j["end"]
    res = {"mbit": end["sum_received"]["bits_per_second"] / 1e6,
           "retransmits": end.get("sum_sent", {}).get("retransmits"),
           "cpu_client_pct": end["cpu_utilization_percent"]["host_total"],
           "cpu_server_pct": end["cpu_utilization_percent"]["remote_total"],
           "cpu": sampler.cpu_between(t0 + 1, t1 - 0.5)}
    if a.both_ways and "sum_received_bidir_reverse" in end:
        res["mbit_reverse"] = end["sum_received_bidir_reverse"]["bits_per_second"] / 1e6
    return res


# ---- meshtrain ------------------------------------------------------------------------------

def start_agent(a, bed, binary, workdir, i):
    name = f"n{i + 1}"
    sock = os.path.join(workdir, f"{name}.sock")
    metrics = os.path.join(workdir, f"{name}.jsonl")
    argv = [binary, "agent", "--name", name, "--bind", f"{bed.addr(i)}:{nl.PORT}",
            "--rpc", nl.RPC, "--trainer", "external", "--trainer-socket", sock,
            "--barrier", "asp", "--select", "all", "--compress", a.compress,
            "--min-peers", "1", "--metrics-file", metrics, "--log-level", "info"]
    if i > 0:
        argv += ["--join", f"{bed.addr(0)}:{nl.PORT}", "--retry-join", "--retry-interval", "1s"]
    wall = time.time()
    p = bed.spawn(i, argv, os.path.join(workdir, f"{name}.log"))
    # `ip netns exec` execs the command: the PID is the agent's.
    bl.wait_until(lambda: p.poll() is not None or _comm(p.pid) == "meshtrain", 5, interval=0.01,
                  what=f"{name} exec")
    return {"name": name, "proc": p, "sock": sock, "metrics": metrics, "wall": wall,
            "log": os.path.join(workdir, f"{name}.log")}


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def start_worker(a, py, ag, workdir, steps, step_ms, seed):
    out = open(os.path.join(workdir, f"w{ag['name']}.out"), "w")
    p = subprocess.Popen([py, WORKER, "--socket", ag["sock"], "--params", str(a.params),
                          "--steps", str(steps), "--step-ms", f"{step_ms:g}", "--seed", str(seed)],
                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out.close()
    return p


def stop_worker(p):
    if p is not None and p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    if p is not None:
        p.wait(timeout=30)


def stop_agent(bed, ag):
    """SIGTERM (graceful leave), SIGKILL after 10 s; then the agent's own shared-memory file, if
    its trainer never got to unlink it (a killed agent leaves it in /dev/shm)."""
    p = ag["proc"]
    pid = p.pid
    try:
        bed.stop(p, sig=signal.SIGTERM, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
    ag["exit"] = p.returncode
    if p in bed.procs:
        bed.procs.remove(p)
    for path in glob.glob(f"/dev/shm/meshtrain-{ag['name']}-{pid}-*"):
        try:
            os.unlink(path)
        except OSError:
            pass


def perf_summary(data, out_path, n=10):
    """The hottest symbols of one agent's profile (perf report, flat, whole process), written in
    full to out_path: [(percent of its samples, thread, symbol)]."""
    r = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort",
                        "comm,sym", "--percent-limit", "0.3"],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    with open(out_path, "w") as f:
        f.write(r.stdout)
    rows = []
    for line in r.stdout.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*)", line)
        if m:
            rows.append((float(m.group(1)), m.group(2), m.group(3).strip()))
    return sorted(rows, key=lambda x: -x[0])[:n]


def agent_wall0(ag):
    """Wall time of the agent's metrics t = 0: its log line "external trainer attached" (spdlog,
    wall clock, ms) minus the metrics file's `trainer` event t; else the spawn time (a few ms
    early: exec and start-up)."""
    ev = [e for e in nl.metric_lines(ag["metrics"], "trainer") if e.get("attached")]
    if ev:
        with open(ag["log"], errors="replace") as f:
            for line in f:
                if "external trainer attached" in line:
                    t = bl.parse_log_time(line)
                    if t:
                        return t - ev[0]["t"]
                    break
    return ag["wall"]


def tcp_between(samples, t0, t1):
    """A's parameter connection over [t0, t1] from `ss` samples: the share of samples with the
    socket app-limited, the median bytes in the socket not yet sent (notsent) and unacked
    (Send-Q), and the growth of TCP_INFO's busy / rwnd_limited / sndbuf_limited times (ms)."""
    inside = [c for t, c in samples if t0 <= t <= t1]
    before = [c for t, c in samples if t < t0]
    after = [c for t, c in samples if t > t1]
    if not inside:
        return None
    out = {"samples": len(inside),
           "app_limited": sum(1 for c in inside if c.get("app_limited")) / len(inside),
           "notsent_kb": bl.median([int(c.get("notsent", 0)) / 1024 for c in inside]),
           "send_q_kb": bl.median([c["send_q"] / 1024 for c in inside]),
           "cwnd": bl.median([int(c.get("cwnd", 0)) for c in inside])}
    if after:
        # No sample before: the connection was opened by this round (its counters start at 0).
        first = before[-1] if before and int(before[-1].get("bytes_acked", 0)) <= int(
            after[0].get("bytes_acked", 0)) else {}
        for k in ("busy", "rwnd_limited", "sndbuf_limited"):
            out[k + "_ms"] = ms_field(after[0].get(k)) - ms_field(first.get(k))
    return out


def sync_events(path):
    return nl.metric_lines(path, "sync")


def run_mesh(a, bed, binary, py, workdir, rep):
    os.makedirs(workdir, exist_ok=True)
    agents, workers = [], []
    res = {"transfers": []}
    try:
        agents.append(start_agent(a, bed, binary, workdir, 0))
        bl.wait_until(lambda: agents[0]["proc"].poll() is not None or
                      nl.status(bed, 0, binary) is not None, 20, interval=0.1, what="n1 RPC")
        agents.append(start_agent(a, bed, binary, workdir, 1))

        def both_alive():
            m = nl.members(bed, 0, binary)
            return m is not None and sum(1 for x in m.values() if x["status"] == "alive") == 2

        bl.wait_until(both_alive, 30, interval=0.2, what="2 members alive")
        # B: attaches, then sleeps through the run (never publishes) unless --both-ways.
        b_step = a.step_ms if a.both_ways else 3.6e6
        workers.append(start_worker(a, py, agents[1], workdir, 100000, b_step, 2))

        def b_training():
            m = nl.members(bed, 0, binary)
            return m is not None and m.get("n2", {}).get("training")

        bl.wait_until(b_training, 60, interval=0.2, what="n2 training (its trainer attached)")
        workers.append(start_worker(a, py, agents[0], workdir, 100000, a.step_ms, 1))
        pids = {"A": agents[0]["proc"].pid, "B": agents[1]["proc"].pid}
        procs = {"agentA": pids["A"], "agentB": pids["B"], "workerA": workers[1].pid,
                 "workerB": workers[0].pid}
        if bed.emu is not None:
            procs["linkemu"] = bed.emu.pid
        sampler = Sampler(pids, procs, {"agentA", "agentB"}, net_s=a.sample_ms / 1000,
                          cwnd=(pids["A"], tcp_hex(f"{bed.addr(1)}:{nl.PORT}")))
        sampler.start()
        ss = SsSampler(bed, 0, f"{bed.addr(1)}:{nl.PORT}", every=a.ss_every)
        if a.ss_every > 0:
            ss.start()
        perf = {}
        if a.perf:
            for who in ("A", "B"):
                perf[who] = subprocess.Popen(
                    ["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-p",
                     str(pids[who]), "-o", os.path.join(workdir, f"perf-{who}.data")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + a.timeout
        want = a.transfers
        try:
            while time.monotonic() < deadline:
                ev = [e for e in sync_events(agents[0]["metrics"]) if e.get("fanout", 0) >= 1]
                if len(ev) >= want:
                    break
                for ag in agents:
                    if ag["proc"].poll() is not None:
                        raise bl.SetupError(f"{ag['name']} exited: see {ag['log']}")
                for w in workers:
                    if w.poll() is not None:
                        raise bl.SetupError(f"a worker exited: see {workdir}/w*.out")
                time.sleep(0.2)
            time.sleep(max(0.6, a.ss_every * 1.5))  # the samplers see the last transfer's tail
        finally:
            sampler.stop()
            if a.ss_every > 0:
                ss.stop()
            for pp in perf.values():
                pp.send_signal(signal.SIGINT)
                try:
                    pp.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    pp.kill()
                    pp.wait()
        if perf:
            res["perf"] = {who: perf_summary(os.path.join(workdir, f"perf-{who}.data"),
                                             os.path.join(workdir, f"perf-{who}.txt"))
                           for who in perf}
        res["status"] = {ag["name"]: nl.status(bed, i, binary) for i, ag in enumerate(agents)}
        with open(os.path.join(workdir, "status.json"), "w") as f:
            json.dump(res["status"], f, indent=1)
        wall0 = agent_wall0(agents[0])
        evs = [e for e in sync_events(agents[0]["metrics"]) if e.get("fanout", 0) >= 1]
        for k, e in enumerate(evs[:want]):
            end = wall0 + e["t"]
            start = end - e["seconds"]
            # A tight window: the agents' capacity probes (UDP trains of up to ~1.4 MB every
            # few seconds) just outside it would move the 0.1 % / 99.9 % marks.
            wa = sampler.wire("A", 1, start - 0.05, end + 0.05)
            wb = sampler.wire("B", 0, start - 0.05, end + 0.05)
            lo = (wa or {}).get("first", start)
            hi = (wb or wa or {}).get("last", end)
            if wb:
                # B's counters count what crossed the link (after the switch's queue; A's count
                # what entered it), in the device's bytes (Ethernet headers, or GSO packets on
                # veth): scaled to model bytes, comparable with iperf3's goodput.
                scale = a.model_bytes / wb["bytes"]
                wb["steady_mbit"] = wb["steady_mbit"] and wb["steady_mbit"] * scale
                wb["decile_mbit"] = [d and d * scale for d in wb["decile_mbit"]]
            t = {"k": k, "seconds": e["seconds"], "bytes": e["bytes"],
                 "raw_bytes": e.get("raw_bytes"),
                 "mbit": a.model_bytes * 8 / 1e6 / e["seconds"],
                 "wire_mbit": e["bytes"] * 8 / 1e6 / e["seconds"],
                 "tx": wa, "rx": wb, "lead_s": lo - start, "tail_s": end - hi,
                 "cpu": sampler.cpu_between(lo, hi), "tcp": tcp_between(ss.samples, lo, hi),
                 "small_cwnd": [(round(t0_ - start, 3), round(d, 3))
                                for t0_, d in sampler.small_cwnd(lo, hi)],
                 "cwnd_max": max([v[0] for t_, v in sampler.cwnd if lo <= t_ <= hi and v]
                                 or [0])}
            res["transfers"].append(t)
        if len(evs) < want:
            res["error"] = f"only {len(evs)} of {want} rounds in {a.timeout:g} s"
    finally:
        for w in workers:
            stop_worker(w)
        for ag in agents:
            stop_agent(bed, ag)
        res["exit"] = {ag["name"]: ag.get("exit") for ag in agents}
    return res


# ---- report ---------------------------------------------------------------------------------

def fmt_others(cpu):
    return ", ".join(f"{k} {v:.0f}%" for k, v in (cpu or {}).get("others", [])) or "-"


def top_threads(cpu, label, n=4):
    th = (cpu or {}).get("procs", {}).get(label) or {}
    tot = sum(th.values())
    top = sorted(th.items(), key=lambda kv: -kv[1])[:n]
    return f"{tot:.0f}% (" + ", ".join(f"{k} {v:.0f}" for k, v in top if v >= 0.5) + ")"


def main():
    a = parse_args()
    try:
        binary = bl.find_binary(a.bin)
    except bl.SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        return 2
    emu = bedmod.find_linkemu(binary)
    why = tc_available() if a.shaper == "tc" else bedmod.available(emu)
    if not why and shutil.which("iperf3") is None:
        why = "no iperf3 (apt-get install iperf3)"
    if why:
        print(f"SKIP: no network-namespace bed here: {why}")
        return 77
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    bedmod.SUBNET = SUBNET  # the netbed's addr() reads it: 198.18.0.<i+1> in these namespaces
    logdir = bl.make_logdir("meshtrain-netbed-transfer-")
    print(f"logs: {logdir}", flush=True)
    print(f"{a.shaper} bed, 2 hosts, {a.rate:g} Mbit/s links both ways, "
          + (f"{a.rtt:g} ms RTT" if a.shaper == "linkemu" else "veth RTT (no delay)")
          + f"; model {a.params:.3g} floats ({a.model_bytes / 1e6:.0f} MB), --compress "
          f"{a.compress}, A steps every {a.step_ms / 1000:.1f} s, "
          + ("both ways" if a.both_ways else "A -> B only"), flush=True)
    try:
        return measure(a, binary, emu, py, logdir)
    except (bl.SetupError, AssertionError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"setup failed: {e} (logs in {logdir})", file=sys.stderr)
        return 2


def quiet(a, what):
    if a.quiet_wait <= 0:
        return
    busy = wait_quiet(a.quiet_wait)
    if busy > 0.15:
        print(f"  note: the machine is {busy * 100:.0f}% busy before {what} (waited "
              f"{a.quiet_wait:g} s): others' CPU use shows as 'untracked'", flush=True)


def measure(a, binary, emu, py, logdir):
    runs = []
    with make_bed(a, emu) as bed:
        a.cc_used = set_tcp(a, bed)
        print(f"TCP congestion control in the hosts: {a.cc_used}"
              + (", no slow start after idle" if a.no_idle_restart else ""), flush=True)
        for rep in range(a.repeat):
            quiet(a, "iperf3")
            ip = run_iperf(a, bed, logdir, rep + 1)
            print(f"  run {rep + 1}: iperf3 {ip['mbit']:.0f} Mbit/s"
                  + (f" (reverse {ip['mbit_reverse']:.0f})" if "mbit_reverse" in ip else "")
                  + f", retransmits {ip['retransmits']}, iperf3 CPU client "
                  f"{ip['cpu_client_pct']:.0f}% server {ip['cpu_server_pct']:.0f}%, machine busy "
                  f"{bl.fmt((ip['cpu'] or {}).get('busy_pct'), '.0f')}% of "
                  f"{(ip['cpu'] or {}).get('cores')} cores (softirq "
                  f"{bl.fmt((ip['cpu'] or {}).get('softirq_pct'), '.0f')}%), linkemu "
                  f"{bl.fmt((ip['cpu'] or {}).get('procs', {}).get('linkemu'), '.0f')}% of a "
                  f"core; top others: {fmt_others(ip['cpu'])}", flush=True)
            quiet(a, "meshtrain")
            ms = run_mesh(a, bed, binary, py, os.path.join(logdir, f"mesh-{rep + 1}"), rep + 1)
            for t in ms["transfers"]:
                c = t["cpu"] or {}
                print(f"  run {rep + 1} transfer {t['k'] + 1}: round {t['seconds']:.3f} s -> "
                      f"{t['mbit']:.0f} Mbit/s model goodput ({t['wire_mbit']:.0f} on the wire "
                      f"incl. framing, {t['bytes'] / 1e6:.1f} MB); wire span "
                      f"{bl.fmt((t['rx'] or {}).get('wire_s'), '.3f')} s, steady "
                      f"{bl.fmt((t['rx'] or {}).get('steady_mbit'), '.0f')} Mbit/s, lead "
                      f"{t['lead_s'] * 1000:.0f} ms, tail {t['tail_s'] * 1000:.0f} ms; "
                      f"machine busy {bl.fmt(c.get('busy_pct'), '.0f')}% (softirq "
                      f"{bl.fmt(c.get('softirq_pct'), '.0f')}%), A {top_threads(c, 'agentA')}, "
                      f"B {top_threads(c, 'agentB')}, linkemu "
                      f"{bl.fmt(c.get('procs', {}).get('linkemu'), '.0f')}%, workers "
                      f"{bl.fmt(c.get('procs', {}).get('workerA'), '.0f')}/"
                      f"{bl.fmt(c.get('procs', {}).get('workerB'), '.0f')}%, untracked "
                      f"{bl.fmt(c.get('untracked_pct'), '.0f')}% (top others: "
                      f"{fmt_others(c)})", flush=True)
                dec = (t["rx"] or {}).get("decile_mbit") or []
                if dec:
                    print("      Mbit/s per tenth of the bytes: "
                          + " ".join(bl.fmt(d, ".0f") for d in dec), flush=True)
                if t["small_cwnd"]:
                    print("      cwnd <= 4 packets (BBR PROBE_RTT) at "
                          + ", ".join(f"{x:.2f} s for {d * 1000:.0f} ms"
                                      for x, d in t["small_cwnd"])
                          + f" into the round (largest cwnd {t['cwnd_max']})", flush=True)
                tc = t.get("tcp") or {}
                if tc:
                    print(f"      A's socket: app-limited in {tc['app_limited'] * 100:.0f}% of "
                          f"{tc['samples']} samples, median notsent {tc['notsent_kb']:.0f} KB, "
                          f"Send-Q {tc['send_q_kb']:.0f} KB, cwnd {tc['cwnd']}; TCP busy "
                          f"{bl.fmt(tc.get('busy_ms'), '.0f')} ms, rwnd-limited "
                          f"{bl.fmt(tc.get('rwnd_limited_ms'), '.0f')} ms, sndbuf-limited "
                          f"{bl.fmt(tc.get('sndbuf_limited_ms'), '.0f')} ms", flush=True)
            if ms.get("error"):
                print(f"  run {rep + 1}: {ms['error']}", flush=True)
            for who, rows_ in (ms.get("perf") or {}).items():
                print(f"  run {rep + 1} perf, agent {who} (% of its samples, thread, symbol): "
                      + "; ".join(f"{p_:.1f}% {th} {sym}" for p_, th, sym in rows_), flush=True)
            st = ms.get("status", {})
            sa, sb = st.get("n1") or {}, st.get("n2") or {}
            ps = sa.get("param_streams") or {}
            print(f"  run {rep + 1} status: n1 params_bytes_sent {sa.get('params_bytes_sent')}, "
                  f"chunks encoded/sent {ps.get('chunks_encoded')}/{ps.get('chunks_sent')}, "
                  f"loop lag p99 {(sa.get('loop') or {}).get('lag_p99_ms')} ms; n2 params_received "
                  f"{sb.get('params_received')}, mix drops "
                  f"{(sb.get('param_streams') or {}).get('mix_chunks_dropped')}, loop lag p99 "
                  f"{(sb.get('loop') or {}).get('lag_p99_ms')} ms; agents' exit status after "
                  f"SIGTERM {ms.get('exit')}", flush=True)
            runs.append({"iperf3": ip, "mesh": ms})
        report = bed.emulator_report() if a.shaper == "tc" else None
    if a.shaper == "linkemu":
        report = bed.emulator_report()
    rows, ratios = [], []
    for rep, r in enumerate(runs):
        ts = r["mesh"]["transfers"]
        m = bl.median([t["mbit"] for t in ts]) if ts else None
        s = bl.median([(t["rx"] or {}).get("steady_mbit") for t in ts]) if ts else None
        ratio = m / r["iperf3"]["mbit"] if m else None
        ratios.append(ratio)
        rows.append([rep + 1, f"{r['iperf3']['mbit']:.0f}", bl.fmt(m, ".0f"), bl.fmt(s, ".0f"),
                     bl.fmt(ratio, ".3f"),
                     bl.fmt(bl.median([t["seconds"] for t in ts]) if ts else None, ".3f")])
    med_ip = bl.median([r["iperf3"]["mbit"] for r in runs])
    all_t = [t for r in runs for t in r["mesh"]["transfers"]]
    med_m = bl.median([t["mbit"] for t in all_t])
    med_s = bl.median([(t["rx"] or {}).get("steady_mbit") for t in all_t])
    rows.append(["median", bl.fmt(med_ip, ".0f"), bl.fmt(med_m, ".0f"), bl.fmt(med_s, ".0f"),
                 bl.fmt(bl.median(ratios), ".3f"),
                 bl.fmt(bl.median([t["seconds"] for t in all_t]), ".3f")])
    print()
    print(f"{a.shaper} bed, {a.rate:g} Mbit/s, "
          + (f"{a.rtt:g} ms RTT" if a.shaper == "linkemu" else "veth (no delay)")
          + f", TCP {a.cc_used}; {a.model_bytes / 1e6:.0f} MB model, --compress {a.compress}, "
          + ("both ways" if a.both_ways else "A -> B")
          + f"; iperf3 -t {a.iperf_seconds:g} and {a.transfers} transfers per run, interleaved")
    print(bl.table(["run", "iperf3 Mbit/s", "meshtrain Mbit/s", "steady Mbit/s",
                    "ratio", "round s"], rows))
    print("meshtrain Mbit/s: model bytes x 8 / round s (median of the run's transfers); steady: "
          "the rate between 10 and 90 % of the round's bytes on B's eth0, in model bytes")
    if report:
        print(report.strip())
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": runs}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
