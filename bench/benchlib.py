"""Shared plumbing for the meshtrain experiment scripts in bench/ (stdlib only).

Agents are real `meshtrain agent` processes on loopback, started and ended by PID through the
integration harness (tests/integration/harness.py: Mesh/Agent/free_port_block/wait_until),
which this module imports rather than copies.

Time axis: everything is put on the wall clock (time.time()). An agent's metrics-file `t` is
seconds since that agent's process started; we add the wall time recorded just before the
process was spawned (error: exec + start-up, a few ms). Training start is read from the agent's
log line "... training peers alive: starting to train" (spdlog wall-clock timestamp, ms), so
"time to accuracy" excludes data loading and mesh formation.
"""
import array
import datetime
import json
import math
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from harness import Mesh, wait_until  # noqa: E402,F401

DEFAULT_BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "build", "cli", "meshtrain")


class SetupError(Exception):
    """Something needed to run the experiment is missing or broke; the script exits 2."""


class ExternalSignal(SetupError):
    """An agent was ended by a signal this script did not send (e.g. another session's cleanup
    by process name). The run is worth retrying."""


def with_retries(fn, workdir, retries):
    """Calls fn(workdir) and, when an agent was ended from outside, retries it in a fresh
    directory (workdir-retryK) up to `retries` times."""
    for attempt in range(retries + 1):
        wd = workdir if attempt == 0 else f"{workdir}-retry{attempt}"
        try:
            return fn(wd)
        except ExternalSignal as e:
            if attempt == retries:
                raise
            print(f"  {e.args[0].splitlines()[0]}; retrying in {workdir}-retry{attempt + 1}",
                  flush=True)
    raise AssertionError("unreachable")


def prepare(binary, task, prefix):
    """Common start of a bench script: the binary (see find_binary), the data set for `task`
    and a fresh log dir, whose path is printed. Returns (binary, logdir), or None after a
    one-line reason on stderr (the script then exits 2)."""
    try:
        binary = find_binary(binary)
        check_dataset(task)
    except SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        return None
    logdir = make_logdir(prefix)
    print(f"logs: {logdir}", flush=True)
    return binary, logdir


def find_binary(path):
    path = path or os.environ.get("MESHTRAIN_BIN") or DEFAULT_BIN
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SetupError(f"meshtrain binary not found at {path}: build it with "
                         "`bash scripts/build.sh` or pass --bin")
    r = subprocess.run([path, "version"], capture_output=True, text=True, timeout=10,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SetupError(f"{path} version failed: {r.stderr.strip() or r.stdout.strip()}")
    return path


def check_dataset(task, dataset_dir="/usr/share/datasets/fashion-mnist"):
    if not task.startswith("fmnist"):
        return
    need = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
            "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    missing = [n for n in need if not os.path.exists(os.path.join(dataset_dir, n))]
    if missing:
        raise SetupError(f"Fashion-MNIST files missing in {dataset_dir}: {', '.join(missing)} "
                         "(install dataset-fashion-mnist)")


# The workloads the timed benches train to a target. `long` is the default: one agent alone
# needs about a minute for it (fmnist-cnn, lr 0.02, evaluations of the parameters' moving
# average, decay 0.99: 0.90 test accuracy after ~3250 steps of 64, 59 s at 3500 samples/s), so
# time and byte ratios measure training rather than start-up. `quick` is the model one agent
# takes to 0.85 in ~1 s (fmnist-mlp), for smoke runs. steps: a step cap for runs that end at the
# target; budget: the steps of runs that train a fixed count (compression).
WORKLOADS = {
    "long": {"task": "fmnist-cnn", "target": 0.90, "lr": 0.02, "eval_average": 0.99,
             "eval_every": 150, "steps": 12000, "timeout": 900, "budget": 2500},
    "quick": {"task": "fmnist-mlp", "target": 0.85, "lr": 0.05, "eval_average": 0.0,
              "eval_every": 50, "steps": 4000, "timeout": 240, "budget": 800},
}


def add_workload_args(p, steps_flag="--max-steps", timeout_flag="--timeout"):
    """--workload long|quick and the flags it sets (each may be given on its own: --task,
    --target, --lr, --eval-average, --eval-every, and the step cap and per-run timeout under the names the
    script uses). Call workload_resolve(a) after parse_args()."""
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="long",
                   help="long: fmnist-cnn to 0.90 (lr 0.02, --eval-average 0.99; about a "
                   "minute for one agent alone); quick: fmnist-mlp to 0.85 (about a second)")
    p.add_argument("--task", default=None, help="model (default: the workload's)")
    p.add_argument("--target", type=float, default=None,
                   help="test accuracy every node must reach (default: the workload's)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the workload's)")
    p.add_argument("--eval-average", type=float, default=None,
                   help="the agents' --eval-average (default: the workload's)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="steps between evaluations (default: the workload's; an fmnist-cnn "
                   "evaluation of the 10 000 test images costs about 50 steps' time)")
    if steps_flag:
        p.add_argument(steps_flag, type=int, default=None,
                       help="step cap per agent (default: the workload's)")
    if timeout_flag:
        p.add_argument(timeout_flag, type=float, default=None,
                       help="seconds per run, at most (default: the workload's)")
    p.set_defaults(_workload_steps=steps_flag, _workload_timeout=timeout_flag)


def workload_resolve(a):
    """Fills the workload flags left unset from --workload."""
    w = WORKLOADS[a.workload]
    for key in ("task", "target", "lr", "eval_average", "eval_every"):
        if getattr(a, key) is None:
            setattr(a, key, w[key])
    for flag, key in ((a._workload_steps, "steps"), (a._workload_timeout, "timeout")):
        if flag:
            dest = flag.lstrip("-").replace("-", "_")
            if getattr(a, dest) is None:
                setattr(a, dest, w[key])
    return a


def workload_agent_args(a, lr=None):
    """The agent flags of the resolved workload: --task, --lr (`lr` when given), --eval-average,
    --eval-every."""
    x = ["--task", a.task, "--lr", str(a.lr if lr is None else lr),
         "--eval-every", str(a.eval_every)]
    if a.eval_average:
        x += ["--eval-average", str(a.eval_average)]
    return x


def workload_text(a):
    return (f"{a.task} to {a.target:g} (lr {a.lr:g}"
            + (f", eval-average {a.eval_average:g}" if a.eval_average else "") + ")")


def make_logdir(prefix):
    return tempfile.mkdtemp(prefix=prefix)


def netbed_setup(bin_arg, task="fmnist-mlp"):
    """(binary, linkemu, None) for a namespace-bed bench, or (None, None, exit status): 2 on a
    setup failure, 77 when no bed can be built here (tests/netbed must be on sys.path)."""
    from bed import available, find_linkemu
    try:
        binary = find_binary(bin_arg)
        check_dataset(task)
    except SetupError as e:
        print(f"setup failed: {e}", file=sys.stderr)
        return None, None, 2
    emu = find_linkemu(binary)
    why = available(emu)
    if why:
        print(f"SKIP: no network-namespace bed here: {why}")
        return None, None, 77
    return binary, emu, None


def train_start(log_paths, default):
    """Wall time of the earliest "starting to train" line among agent logs, else `default`."""
    starts = []
    for path in log_paths:
        with open(path, errors="replace") as f:
            for line in f:
                if "starting to train" in line:
                    starts.append(parse_log_time(line))
                    break
    starts = [s for s in starts if s]
    return min(starts) if starts else default


# ---- agents ------------------------------------------------------------------------------


class CpuSlices:
    """Each agent on a CPU of its own size: a cgroup per agent with a CFS bandwidth quota
    (the cgroup v1 `cpu` controller), so that agents on one machine behave like
    hosts with their own cores instead of sharing the machine's cores at the scheduler's whim.
    `cores[i]` is agent i's share in cores (0.4 = 40 % of one core, enforced every `period_ms`).
    Needs root and a writable cpu controller; `available()` says why not. The groups are removed
    on close() (after the agents have exited); names carry this process's PID."""

    ROOT = "/sys/fs/cgroup/cpu"

    @classmethod
    def available(cls):
        """None when CPU slices can be made here, else why not."""
        if not os.path.isfile(os.path.join(cls.ROOT, "cpu.cfs_quota_us")):
            return f"no cgroup v1 cpu controller at {cls.ROOT}"
        if not os.access(cls.ROOT, os.W_OK):
            return f"{cls.ROOT} is not writable (run as root)"
        return None

    def __init__(self, cores, period_ms=20):
        why = self.available()
        if why:
            raise SetupError(f"--isolate: {why}")
        self.base = os.path.join(self.ROOT, f"meshtrain-bench-{os.getpid()}-{time.monotonic_ns()}")
        os.mkdir(self.base)
        self.dirs = []
        period = int(period_ms * 1000)
        for i, c in enumerate(cores):
            d = os.path.join(self.base, f"a{i}")
            os.mkdir(d)
            self.dirs.append(d)
            # The kernel checks a quota against the group's period: set the period first.
            self._write(d, "cpu.cfs_period_us", str(period))
            self._write(d, "cpu.cfs_quota_us", str(max(1000, int(c * period))))

    @staticmethod
    def _write(d, name, value):
        with open(os.path.join(d, name), "w") as f:
            f.write(value)

    def add(self, i, pid):
        """Moves process `pid` (all its threads; the ones it starts later follow) into slice i."""
        self._write(self.dirs[i], "cgroup.procs", str(pid))

    def add_thread(self, i, pid, name, timeout=60):
        """Moves only the thread of process `pid` named `name` (its comm) into slice i, waiting up
        to `timeout` s for it to appear (cgroup v1 lets threads sit in their own group)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/comm") as f:
                        if f.read().strip() == name:
                            self._write(self.dirs[i], "tasks", tid)
                            return
            except OSError:
                pass  # the process went away, or a thread ended meanwhile
            time.sleep(0.05)
        raise SetupError(f"no thread named {name!r} in process {pid} after {timeout} s")

    def close(self):
        """Removes the groups; their processes must have exited (a group still holding one is
        left in place and named on stderr)."""
        for d in self.dirs + [self.base]:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                print(f"warning: could not remove cgroup {d}", file=sys.stderr)


def add_isolate_args(p):
    """--isolate CORES / --isolate-what for a bench with per-agent slowdowns (CpuSlices)."""
    p.add_argument("--isolate", type=float, default=0, metavar="CORES",
                   help="give each agent a CPU of its own (a cgroup CPU quota, root only): "
                        "CORES/slowdown cores, instead of --slowdown's sleeps on shared cores")
    p.add_argument("--isolate-what", choices=["trainer", "agent"], default="trainer",
                   help="what the quota holds: the trainer thread (the host's compute; the "
                        "agent's other threads share the rest) or the whole agent")


def isolate_kwargs(a, cores):
    """Run(...) keyword arguments for add_isolate_args' options and per-agent `cores`."""
    return {"cores": cores,
            "slice_thread": "mt-train" if a.isolate and a.isolate_what == "trainer" else None}


def isolate_text(a):
    return (f"{a.isolate_what} CPU quota {a.isolate:g} cores / slowdown" if a.isolate
            else "--slowdown sleeps, shared cores")


def thread_cpu(pid, per_thread=False):
    """CPU seconds (user + system) of each thread of process `pid`, summed by thread name
    (the agent names its trainer mt-train, its evaluator mt-eval, ...); {} once it is gone.
    per_thread: one entry per thread instead, "main" for the process's first thread (the
    agent's event loop) and "name:tid" for the others (libuv's pool threads keep the process
    name)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if per_thread:
            name = "main" if int(tid) == pid else f"{name}:{tid}"
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


class Run:
    """One mesh of agents whose files live in `workdir`. Use as a context manager: on exit every
    agent still running is ended by PID (SIGTERM, then SIGKILL through the harness)."""

    def __init__(self, binary, workdir, per_agent_args, common, name_prefix="n", cores=None,
                 slice_thread=None):
        """cores: optional per-agent CPU shares (CpuSlices), one per agent, for the whole agent
        or, with slice_thread (a thread name, e.g. "mt-train"), for that thread alone."""
        os.makedirs(workdir, exist_ok=True)
        self.slices = CpuSlices(cores) if cores else None
        self.slice_thread = slice_thread
        self.mesh = Mesh(binary, len(per_agent_args), common, name_prefix=name_prefix)
        # The harness made its own temp dir; keep everything of this run under ours instead.
        try:
            os.rmdir(self.mesh.workdir)
        except OSError:
            pass
        self.mesh.workdir = workdir
        self.mesh.keep_workdir = True  # the bench's logs are its output
        self.workdir = workdir
        self.spawn_wall = {}
        for a, extra in zip(self.mesh.agents, per_agent_args):
            a.log_path = os.path.join(workdir, f"{a.name}.log")
            a.metrics_path = os.path.join(workdir, f"{a.name}.jsonl")
            a.extra = list(extra) + ["--metrics-file", a.metrics_path]

    @property
    def agents(self):
        return self.mesh.agents

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop(graceful=False)
        self.mesh.__exit__(None, None, None)
        if self.slices:
            for a in self.agents:
                if a.proc is not None:
                    try:
                        a.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
            self.slices.close()
        return False

    def _spawned(self, i):
        if self.slices and not self.slice_thread:
            self.slices.add(i, self.agents[i].proc.pid)

    def start(self, timeout=30):
        """Starts the first agent, waits for its RPC, then starts the others joining it."""
        seed = self.agents[0]
        self.spawn_wall[seed.name] = time.time()
        seed.start()
        self._spawned(0)
        try:
            wait_until(lambda: (not seed.alive()) or seed.members() is not None, timeout,
                       interval=0.1, what=f"{seed.name} RPC up")
        except AssertionError as e:
            raise SetupError(f"{e}\n{seed.log_tail()}")
        if not seed.alive():
            raise SetupError(f"agent {seed.name} exited at start:\n{seed.log_tail()}")
        for i, a in enumerate(self.agents[1:], start=1):
            self.spawn_wall[a.name] = time.time()
            a.start(join=[seed.addr])
            self._spawned(i)
        if self.slices and self.slice_thread:
            for i, a in enumerate(self.agents):
                self.slices.add_thread(i, a.proc.pid, self.slice_thread)

    def check_alive(self):
        for a in self.agents:
            if not a.alive():
                tail = a.log_tail()
                msg = (f"agent {a.name} exited (rc {a.proc.returncode}); log "
                       f"{a.log_path}:\n{tail}")
                if "received SIGTERM" in tail or "received SIGINT" in tail or \
                        a.proc.returncode in (-9, -15):
                    raise ExternalSignal("an agent was signalled from outside this script "
                                         f"({a.name}, not by us)\n{msg}")
                raise SetupError(msg)

    def statuses(self):
        return {a.name: a.status() for a in self.agents}

    def stop(self, graceful=True, timeout=8):
        """Graceful: SIGTERM each agent (it leaves and writes its final checkpoint) and wait up
        to `timeout` s for all; whatever is left is killed by PID."""
        if graceful:
            for a in self.agents:
                a.signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for a in self.agents:
                if a.proc is None:
                    continue
                try:
                    a.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for a in self.agents:
            if a.alive():
                a.kill()

    # ---- reading what the agents wrote ----

    def metrics(self, agent):
        return read_metrics(agent.metrics_path)

    def train_start_wall(self, agent):
        """Wall time the agent started training (log line), or None."""
        try:
            with open(agent.log_path, "r", errors="replace") as f:
                for line in f:
                    if "starting to train" in line:
                        return parse_log_time(line)
        except OSError:
            return None
        return None

    def t0(self):
        """Common start of training: the earliest agent's training start; falls back to the
        last spawn when no agent logged it."""
        starts = [s for s in (self.train_start_wall(a) for a in self.agents) if s is not None]
        return min(starts) if starts else max(self.spawn_wall.values())

    def evals_wall(self, agent):
        """[(wall_time, step, accuracy, loss)] of the agent's eval lines."""
        base = self.spawn_wall[agent.name]
        return [(base + m["t"], m["step"], m["accuracy"], m["loss"])
                for m in self.metrics(agent) if m.get("event") == "eval"]

    def reach_wall(self, agent, target):
        """(wall time, step) of the agent's first eval at or above `target`, or None."""
        for w, step, acc, _ in self.evals_wall(agent):
            if acc >= target:
                return w, step
        return None


def parse_log_time(line):
    """spdlog prefix '2026-11-21T13:39:50.045 [info] ...' (local time) -> epoch seconds."""
    stamp = line.split(" ", 1)[0]
    try:
        dt = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        return None
    return time.mktime(dt.timetuple()) + dt.microsecond / 1e6


def read_events(path):
    """The JSON lines (starting with "{") of a process's output file; [] when it is missing."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def read_metrics(path):
    out = []
    try:
        with open(path, "r", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line being written right now
    except OSError:
        pass
    return out


# ---- checkpoints (format of learn/checkpoint.h) -------------------------------------------

_CKPT_MAGIC = b"MTCKPT\x00\x01"


def read_checkpoint(path):
    """Parses and validates a checkpoint: returns {"task", "step", "params" (array of float32),
    "metadata"}. Raises ValueError on any format or checksum error."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 48 or data[:8] != _CKPT_MAGIC:
        raise ValueError(f"{path}: not a meshtrain checkpoint")
    version, header_size, payload_size, n_params, n_vel, crc_payload, crc_header = \
        struct.unpack_from("<IIQQQII", data, 8)
    if version != 1 or header_size != 48:
        raise ValueError(f"{path}: unsupported version {version} / header size {header_size}")
    if zlib.crc32(data[:44]) & 0xFFFFFFFF != crc_header:
        raise ValueError(f"{path}: header checksum mismatch")
    payload = data[48:]
    if len(payload) != payload_size:
        raise ValueError(f"{path}: payload is {len(payload)} bytes, header says {payload_size}")
    if zlib.crc32(payload) & 0xFFFFFFFF != crc_payload:
        raise ValueError(f"{path}: payload checksum mismatch")
    pos = 0
    (name_len,) = struct.unpack_from("<I", payload, pos)
    pos += 4
    task = payload[pos:pos + name_len].decode()
    pos += name_len
    (step,) = struct.unpack_from("<q", payload, pos)
    pos += 8
    params = array.array("f")
    params.frombytes(payload[pos:pos + 4 * n_params])
    if sys.byteorder != "little":
        params.byteswap()
    pos += 4 * (n_params + n_vel)
    (n_meta,) = struct.unpack_from("<I", payload, pos)
    pos += 4
    meta = {}
    for _ in range(n_meta):
        (kl,) = struct.unpack_from("<I", payload, pos)
        k = payload[pos + 4:pos + 4 + kl].decode()
        pos += 4 + kl
        (vl,) = struct.unpack_from("<I", payload, pos)
        v = payload[pos + 4:pos + 4 + vl].decode()
        pos += 4 + vl
        meta[k] = v
    return {"task": task, "step": step, "params": params, "metadata": meta}


def norm(v):
    return math.sqrt(math.fsum(x * x for x in v))


def relative_distance(a, b):
    """||a - b|| / mean(||a||, ||b||)."""
    d = math.sqrt(math.fsum((x - y) * (x - y) for x, y in zip(a, b)))
    scale = (norm(a) + norm(b)) / 2
    return d / scale if scale > 0 else 0.0


# ---- output -------------------------------------------------------------------------------


def fmt(v, spec=""):
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "-"
    return format(v, spec)


def table(headers, rows):
    """Aligned plain-text table (also valid Markdown)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in cells[1:]:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(lines)


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(values):
    """Median of the values that are not None (None if there are none); math.inf allowed."""
    s = sorted(v for v in values if v is not None)
    if not s:
        return None
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    lo, hi = s[mid - 1], s[mid]
    return math.inf if math.inf in (lo, hi) else (lo + hi) / 2


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None
