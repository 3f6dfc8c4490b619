"""Helpers shared by the fault-injection tests (CTest label `faults`).

Builds on tests/integration/harness.py (Mesh/Agent/wait_until): real `meshtrain agent`
processes on loopback, every wait bounded, every process ended by PID. Adds

- Sampler: one thread per agent polling `meshtrain status` and `meshtrain members` every
  ~100 ms, so a paused (SIGSTOP) agent only delays its own samples;
- stall and detection measurements over those samples;
- the common agent options for a short synthetic training run.

A "stall" is a period in which a live, training agent's step does not advance: measured as the
time between the first sample showing step s and the first sample showing a larger step, so it
over-estimates by at most one sampling interval.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from harness import Agent, Mesh, free_port_block, parse_args, wait_until  # noqa: E402,F401

SKIP_CODE = 77  # CTest SKIP_RETURN_CODE of the faults tests

# Membership timing for the faults suite: the `local` profile with a 500 ms probe interval so a
# kill is detected in a few seconds. Push-pull every 5 s helps views converge after a partition.
PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 0.2
GOSSIP_INTERVAL_S = 0.1
SUSPICION_MULT = 3
SUSPICION_MAX_MULT = 6  # memberlist's SuspicionMaxTimeoutMult (membership::Config default)
MEMBERSHIP = ["--profile", "local", "--probe-interval", str(int(PROBE_INTERVAL_S * 1000)),
              "--probe-timeout", str(int(PROBE_TIMEOUT_S * 1000)),
              "--suspicion-mult", str(SUSPICION_MULT), "--gossip-interval",
              str(int(GOSSIP_INTERVAL_S * 1000)),
              "--push-pull-interval", "5"]


AWARENESS_MAX = 8  # Lifeguard's local health cap (membership::Config awareness_max_multiplier)


def detection_bound(n, dead=1):
    """Worst-case failure detection for a mesh of n agents with these timings (SWIM with Lifeguard,
    docs/contract.md "Membership"): the dead member is probed within one randomized round-robin pass
    over the other n - 1 members, the probe times out, and the suspicion timeout runs at its
    maximum, SuspicionMaxTimeoutMult x SuspicionMult x max(1, log10 n) x ProbeInterval (no
    confirmations to shorten it); then the news reaches the other observers (a few gossip intervals)
    and the sampler sees it. With `dead` members failing at once, a probe of another dead member
    first raises the prober's Lifeguard health score, which stretches its following probe intervals:
    the pass may take up to `dead` times as long."""
    import math
    suspicion_max = SUSPICION_MAX_MULT * SUSPICION_MULT * max(1.0, math.log10(n)) * \
        PROBE_INTERVAL_S
    probe_pass = (n - 1) * PROBE_INTERVAL_S * min(dead, AWARENESS_MAX)
    spread = 3 * GOSSIP_INTERVAL_S + 0.1
    return probe_pass + PROBE_TIMEOUT_S + suspicion_max + spread


DETECTION_BOUND_S = detection_bound(6)  # 12.1 s; the suite's meshes have at most 6 agents

# Synthetic linear regression (accuracy = R^2), stretched by a small learning rate: without
# momentum, R^2 passes 0.999 after ~2/lr steps (lr 0.001: ~2000 steps, lr 0.00025: ~8000).
# Six agents step at a rate bounded by synchronisation (on a 2-core machine ~65-300 steps/s
# under bsp depending on the agent version, ~650-1300 under pssp), so a run lasts ~10-30 s and
# faults are injected at a given R^2, not at a given time. --slowdown is not
# used: it stretches each step to F times its measured compute time, so a 5 ms preemption of a
# ~5 us step turns into a 5 s sleep at F = 1000 — a fake stall that would swamp the measurement.
TARGET = 0.999
MID_ACCURACY = 0.8  # "mid-training": every agent past this R^2 (~1/4 of the run), below TARGET
LR = {"bsp": "0.001", "pssp": "0.00025"}


def training_args(barrier, extra=None, lr=None, target=TARGET):
    """Agent options for the synthetic run. Under bsp every node multicasts to all peers, so
    each step's progress reaches every barrier at once (with a random fanout a bsp node learns
    most peers' steps only from membership piggybacks, ~1 step/s); pssp uses its progress
    queries (sample 2, staleness 4) and a random fanout of 2."""
    select = ["--select", "all"] if barrier in ("bsp", "ssp") else \
        ["--select", "random", "--fanout", "2", "--sample", "2", "--staleness", "4"]
    stop = ["--target-accuracy", str(target)] if target else []  # None: train until killed
    return (MEMBERSHIP + ["--task", "synthetic", "--barrier", barrier,
                          "--lr", lr or LR.get(barrier, "0.0005"), "--momentum", "0",
                          "--batch", "32", "--eval-every", "50", "--log-level", "info"]
            + stop + select + (extra or []))


def wait_mid_training(sampler, agents, accuracy=MID_ACCURACY, timeout=60):
    """Waits until every agent's R^2 is past `accuracy` (and all still train)."""
    def mid():
        sampler.assert_running([a.name for a in agents])
        sts = [sampler.latest(a.name) for a in agents]
        return all(st is not None and st["training"] and (st["accuracy"] or 0) >= accuracy
                   for st in sts)
    return wait_until(mid, timeout, interval=0.05, what=f"R^2 >= {accuracy} everywhere")


def now():
    return time.monotonic()


class Sampler:
    """Polls every agent's status (and members view) every `interval` s on its own thread."""

    def __init__(self, agents, interval=0.1, members=True):
        self.interval = interval
        self.members = members
        self.lock = threading.Lock()
        self.status = {a.name: [] for a in agents}   # name -> [(t, status dict)]
        self.views = {a.name: [] for a in agents}    # name -> [(t, {member: status})]
        self.stop_ev = threading.Event()
        self.threads = []
        self.agents = {a.name: a for a in agents}
        self.paused = set()  # names not to poll (SIGSTOPped): a poll would just time out
        for a in agents:
            a.expected_exit = False  # set by tests that kill or stop an agent on purpose
            self.add(a)

    def add(self, agent):
        self.agents[agent.name] = agent
        self.status.setdefault(agent.name, [])
        self.views.setdefault(agent.name, [])
        t = threading.Thread(target=self._run, args=(agent.name,), daemon=True)
        self.threads.append(t)
        t.start()

    def _run(self, name):
        next_t = now()
        while not self.stop_ev.is_set():
            a = self.agents[name]
            if name not in self.paused and a.alive():
                try:
                    st = a.status()
                    t = now()
                    if st is not None:
                        with self.lock:
                            self.status[name].append((t, st))
                    if self.members:
                        m = a.members()
                        t = now()
                        if m is not None:
                            with self.lock:
                                self.views[name].append(
                                    (t, {k: v["status"] for k, v in m.items()}))
                except (subprocess.TimeoutExpired, ValueError, KeyError):
                    pass
            next_t = max(next_t + self.interval, now())  # after a slow poll: no burst
            self.stop_ev.wait(max(0.0, next_t - now()))

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def assert_running(self, names=None):
        """Fails with a clear message when an agent the test did not stop has exited (e.g.
        a signal from outside the test), instead of timing out on a vague condition."""
        for name in names or list(self.agents):
            a = self.agents[name]
            if a.proc is not None and a.proc.poll() is not None and not a.expected_exit:
                raise AssertionError(
                    f"{name} (pid {a.proc.pid}) exited unexpectedly with code "
                    f"{a.proc.returncode}; last log lines:\n{a.log_tail(5)}")

    def latest(self, name):
        with self.lock:
            s = self.status[name]
            return s[-1][1] if s else None

    def steps(self, name, t0=None, t1=None, key="step"):
        with self.lock:
            return [(t, s[key], s["training"]) for t, s in self.status[name]
                    if (t0 is None or t >= t0) and (t1 is None or t <= t1)]

    def longest_stall(self, name, t0, t1=None, key="step"):
        """Longest time in [t0, t1] that `name` spent at one step while training: returns
        (seconds, start time of that stall, step). Measured from the first sample at a step to
        the first sample at a larger step; an ongoing stall at t1 counts up to t1. With
        key="rounds" the same for completed parameter multicast rounds."""
        samples = self.steps(name, t0, t1, key)
        best = (0.0, t0, None)
        if not samples:
            return best
        first_t, cur, training = samples[0]
        for t, step, tr in samples[1:]:
            if step != cur:
                if training and t - first_t > best[0]:
                    best = (t - first_t, first_t, cur)
                first_t, cur, training = t, step, tr
            else:
                training = training and tr
        end = samples[-1][0] if t1 is None else min(t1, samples[-1][0])
        if training and end - first_t > best[0]:
            best = (end - first_t, first_t, cur)
        return best

    def first_seen(self, observer, member, statuses, after):
        """First sample time >= after at which `observer` lists `member` in `statuses`."""
        with self.lock:
            for t, v in self.views[observer]:
                if t >= after and v.get(member) in statuses:
                    return t
        return None

    def first_step_after(self, name, after, min_step=None):
        """First sample time >= after at which `name` shows a step larger than at `after` (the
        last sample before it; or >= min_step when given)."""
        samples = self.steps(name, after)
        if not samples:
            return None
        # The step at `after` is the last one sampled before it (a node that moves on right
        # at `after` and then stops has no larger step after its first sample at/after it).
        before = self.steps(name, None, after)
        base = (before[-1][1] if before else samples[0][1]) if min_step is None else min_step - 1
        for t, step, _ in samples:
            if step > base:
                return t
        return None


def detection_time(sampler, observers, victim, statuses, t_event, timeout):
    """Waits (bounded) until every observer lists `victim` in `statuses`; returns the seconds
    from t_event until the last observer did, and the per-observer times."""
    def seen():
        sampler.assert_running(observers)
        ts = {o: sampler.first_seen(o, victim, statuses, t_event) for o in observers}
        return ts if all(v is not None for v in ts.values()) else None
    _, ts = wait_until(seen, timeout, interval=0.1,
                       what=f"{victim} {'/'.join(statuses)} on {', '.join(observers)}")
    per = {o: t - t_event for o, t in ts.items()}
    return max(per.values()), per


def wait_all_done(agents, target, timeout):
    """Waits until every agent has stopped training at accuracy >= target; returns statuses."""
    def done():
        for a in agents:
            if not a.alive():
                raise AssertionError(f"{a.name} exited unexpectedly with code "
                                     f"{a.proc.returncode}; last log lines:\n{a.log_tail(5)}")
        sts = [a.status() for a in agents]
        if any(s is None for s in sts):
            return None
        if all(not s["training"] and (s["accuracy"] or 0) >= target for s in sts):
            return sts
        return None
    return wait_until(done, timeout, interval=0.25,
                      what=f"{', '.join(a.name for a in agents)} reach accuracy {target}")


def with_data_dirs(mesh):
    """Gives every agent of `mesh` a data dir (checkpoints, peer snapshot) and a metrics file in
    the mesh's work dir, as agent.data_dir and agent.metrics."""
    for a in mesh.agents:
        a.data_dir = os.path.join(mesh.workdir, f"{a.name}-data")
        a.metrics = os.path.join(mesh.workdir, f"{a.name}.jsonl")
        a.extra += ["--data-dir", a.data_dir, "--metrics-file", a.metrics]


def start_mesh(mesh, timeout=15):
    """Starts the first agent, then the others joining it; waits until all see all alive."""
    seed = mesh.agents[0].start()
    wait_until(lambda: seed.members() is not None, 10, what="seed RPC up")
    for a in mesh.agents[1:]:
        a.start(join=[seed.addr])
    names = [a.name for a in mesh.agents]

    def full():
        for a in mesh.agents:
            m = a.members()
            if m is None or any(m.get(n, {}).get("status") != "alive" for n in names):
                return False
        return True
    dt, _ = wait_until(full, timeout, interval=0.1, what="full membership")
    return dt


def fmt_s(x):
    return "n/a" if x is None else f"{x:.2f} s"


def kill9(agent):
    """SIGKILL by PID and reap; returns the monotonic time of the kill."""
    agent.expected_exit = True
    t = now()
    os.kill(agent.proc.pid, signal.SIGKILL)
    agent.proc.wait(timeout=10)
    return t


def read_metrics(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    except OSError:
        pass
    return out


CKPT_HEADER = 48  # learn/checkpoint.h: magic, version, sizes, CRCs


def checkpoint_step(path):
    """The training step stored in a checkpoint file (learn/checkpoint.h format: 48-byte
    header, then u32 task-name length, the name, i64 step), or None when absent/unreadable.
    Reads the file only; validity (CRCs) is the agent's business."""
    import struct
    try:
        with open(path, "rb") as f:
            head = f.read(CKPT_HEADER + 4)
            if len(head) < CKPT_HEADER + 4 or head[:6] != b"MTCKPT":
                return None
            (name_len,) = struct.unpack("<I", head[CKPT_HEADER:])
            f.seek(CKPT_HEADER + 4 + name_len)
            raw = f.read(8)
            return struct.unpack("<q", raw)[0] if len(raw) == 8 else None
    except OSError:
        return None


def events(path, kind):
    return [e for e in read_metrics(path) if e.get("event") == kind]


def _die_with_parent():
    """In the child before exec: SIGKILL it when the test process dies (e.g. a CTest timeout),
    so an agent inside a namespace never outlives the test that would delete the namespace."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class NsAgent(Agent):
    """An agent (and every CLI call to it) run inside network namespace `ns` with
    `ip netns exec`, which execs the program in place, so the PID we hold is the agent's."""

    def __init__(self, mesh, name, ns, ip, port, rpc_port):
        super().__init__(mesh, name, port, rpc_port, [])
        self.ns = ns
        self.addr = f"{ip}:{port}"
        self.rpc = f"127.0.0.1:{rpc_port}"

    def start(self, join=None):
        args = ["ip", "netns", "exec", self.ns, self.mesh.bin, "agent", "--name", self.name,
                "--bind", self.addr, "--rpc", self.rpc] + self.mesh.common + self.extra
        for j in join or []:
            args += ["--join", j]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        return self

    def cli(self, *args, timeout=20):
        return subprocess.run(["ip", "netns", "exec", self.ns, self.mesh.bin, *args, "--rpc",
                               self.rpc], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


def run_cmd(*cmd, stdin=None):
    """Runs a setup command (bounded); returns (ok, combined output)."""
    try:
        r = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return r.returncode == 0, (r.stdout + r.stderr).strip()


def skip(reason):
    print(f"SKIP: {reason}")
    sys.stdout.flush()
    sys.exit(SKIP_CODE)
