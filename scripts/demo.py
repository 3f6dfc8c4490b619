#!/usr/bin/env python3
"""Why a mesh: a local mesh of meshtrain agents on loopback, shown live, beside single processes.

By default 4 agents (--nodes) train fmnist-mlp as a mesh, each on its own label-skewed shard of
Fashion-MNIST (--shard-mode label-skew:0.1: each shard holds mostly two to four of the ten
classes). In the same run, on the same machine, with the same settings and step count, agents
that join nobody train alone (--baselines): one on each mesh node's shard (what a node's data
gives by itself) and one on the whole training set (a single process with all the data).

A live view (every --refresh seconds) shows each agent's step and latest test accuracy, and the
mesh's mixed model: every --mix-every seconds the demo exports the mesh nodes' models, averages
them and evaluates the average with `meshtrain evaluate`. That mean is what the next mixing
round gives every node (4 nodes, fanout 3: each node mixes all three others' models, weight 1
at equal steps); each node's own evaluation comes after its latest local step on its skewed
shard and is lower. The first mesh agent serves the dashboard at --http.

When every agent has finished its steps, the demo evaluates the mixed model once more, has every
agent leave and ends with one line, e.g.

  mesh of 4 nodes, each holding mostly 2-4 of the 10 classes: 0.86 (mixed model; each node's
  own last evaluation 0.63-0.82) | one process on one node's data alone: 0.28-0.54 (mean 0.42) |
  one process on all the data: 0.85 | 1500 steps of 64 samples each, same run

--task none runs the membership-only demo (no training, no comparison) for --duration seconds.
Every process started here is ended by its PID, also on Ctrl-C or SIGTERM; every wait is
bounded (--timeout).
"""
import argparse
import array
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from harness import free_port_block  # noqa: E402

FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")
DEFAULT_DATASET_DIR = "/usr/share/datasets/fashion-mnist"
MAIN_CLASS_SHARE = 0.05  # a class counts as "held" by a shard from 5 % of its samples


class DemoError(Exception):
    pass


def cli(binary, rpc, *args, timeout=5):
    """Runs `meshtrain ARGS --rpc RPC`; returns its JSON output, or None if it failed."""
    try:
        r = subprocess.run([binary, *args, "--rpc", rpc], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def option_value(words, name):
    """The value of `--name VALUE` or `--name=VALUE` in a list of words, or None."""
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(name + "="):
            return w[len(name) + 1:]
    return None


def check_prerequisites(args, extra):
    if not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        raise DemoError(f"no meshtrain binary at {args.bin}: build it first "
                        f"(bash scripts/build.sh), or pass --bin PATH")
    uses_fmnist = (args.task.startswith("fmnist") and option_value(extra, "--train-data") is None)
    if uses_fmnist:
        ddir = option_value(extra, "--dataset-dir") or DEFAULT_DATASET_DIR
        missing = [f for f in FMNIST_FILES if not (os.path.exists(os.path.join(ddir, f)) or
                                                   os.path.exists(os.path.join(ddir, f + ".gz")))]
        if missing:
            raise DemoError(f"Fashion-MNIST is missing in {ddir} ({', '.join(missing)}): install "
                            f"it with `apt-get install dataset-fashion-mnist` (or bash "
                            f"scripts/install-deps.sh), or pass --extra '--dataset-dir DIR'")


# --- .npz models (as `meshtrain export` writes them; see learn/model_file.cc) -------------------

def read_npy(data):
    if data[:6] != b"\x93NUMPY":
        raise DemoError("not an .npy member")
    major = data[6]
    if major == 1:
        hlen = int.from_bytes(data[8:10], "little")
        start = 10 + hlen
    else:
        hlen = int.from_bytes(data[8:12], "little")
        start = 12 + hlen
    header = data[start - hlen:start].decode("latin1")
    return header, start


def average_models(paths, out):
    """Writes to `out` the model whose params are the mean of the models in `paths`."""
    members, total, count = None, None, 0
    for path in paths:
        with zipfile.ZipFile(path) as z:
            items = [(info.filename, z.read(info.filename)) for info in z.infolist()]
        params = dict(items)["params.npy"]
        header, start = read_npy(params)
        if "'<f4'" not in header:
            raise DemoError(f"{path}: params are not little-endian float32 ({header.strip()})")
        vec = array.array("f")
        vec.frombytes(params[start:])
        if sys.byteorder != "little":
            vec.byteswap()
        if total is None:
            members, total = items, [0.0] * len(vec)
        elif len(vec) != len(total):
            raise DemoError(f"{path}: {len(vec)} parameters, the others have {len(total)}")
        total = [t + v for t, v in zip(total, vec)]
        count += 1
    mean = array.array("f", (t / count for t in total))
    if sys.byteorder != "little":
        mean.byteswap()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            if name == "params.npy":
                _, start = read_npy(data)
                data = data[:start] + mean.tobytes()
            z.writestr(name, data)
    with open(out, "wb") as f:
        f.write(buf.getvalue())


# --- agents -------------------------------------------------------------------------------------

class Agent:
    def __init__(self, name, role, port, rpc_port, cmd, workdir):
        self.name = name
        self.metrics_path = os.path.join(workdir, f"{name}.metrics.jsonl")
        self.metrics_offset = 0
        self.eval = None  # (step, accuracy) of the evaluation at the highest step so far
        self.stopped_at = None  # when status first said the agent no longer trains
        self.role = role  # "mesh", "alone" or "pooled"
        self.label = name
        self.rpc = f"127.0.0.1:{rpc_port}"
        self.cmd = cmd
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.proc = None
        self.status = None
        self.histogram = None
        self.last_good = None  # last status with a step, kept after the agent stops answering
        self.members = None  # `members --format json`, polled with --task none only
        self.want_members = False

    def start(self):
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def poll(self, binary):
        if not self.alive():
            self.status = None
            return
        self.status = cli(binary, self.rpc, "status", "--format", "json")
        if self.status is not None:
            self.last_good = self.status
            if self.stopped_at is None and self.status.get("step", 0) > 0 and \
                    not self.status.get("training"):
                self.stopped_at = time.monotonic()
        self.read_evals()
        if self.want_members:
            self.members = cli(binary, self.rpc, "members", "--format", "json")
        if self.histogram is None:
            self.histogram = read_histogram(self.log_path)

    def read_evals(self):
        """Reads the evaluations the agent appended to its metrics file since the last call.

        The comparison takes accuracies from here rather than from `status`: status may say
        that training stopped before the evaluation of the last step is recorded, and an
        earlier step's evaluation, run on the evaluator thread, may land after a later one."""
        try:
            with open(self.metrics_path, "rb") as f:
                f.seek(self.metrics_offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # complete lines only
        self.metrics_offset += end
        for line in data[:end].splitlines():
            if b'"event":"eval"' not in line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if self.eval is None or e["step"] >= self.eval[0]:
                self.eval = (e["step"], e["accuracy"])

    def accuracy(self):
        return None if self.eval is None else self.eval[1]

    def finished(self):
        """Training over and its last step evaluated (or 10 s have passed since it stopped)."""
        st = self.last_good
        if st is None or st.get("step", 0) == 0 or st.get("training"):
            return False
        return ((self.eval is not None and self.eval[0] >= st["step"]) or
                time.monotonic() - self.stopped_at > 10)

    def log_tail(self, lines=5):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def stop(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGTERM)

    def reap(self):
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


HIST_RE = re.compile(r"label histogram \[([0-9,]+)\]")


def read_histogram(path):
    try:
        with open(path, errors="replace") as f:
            m = HIST_RE.search(f.read(65536))
    except OSError:
        return None
    return [int(x) for x in m.group(1).split(",")] if m else None


def main_classes(hist):
    total = sum(hist)
    return [c for c, n in enumerate(hist) if total and n >= MAIN_CLASS_SHARE * total]


def classes_text(hist):
    """'4 5 +1 rare': the classes holding >= 5 % of a shard, and how many others appear."""
    if not hist:
        return ""
    main = main_classes(hist)
    if len(main) == len(hist):
        return f"all {len(hist)}"
    rare = sum(1 for n in hist if n > 0) - len(main)
    return " ".join(map(str, main)) + (f" +{rare} rare" if rare else "")


def bar(acc, width=10):
    if acc is None:
        return " " * width
    full = int(round(max(0.0, min(1.0, acc)) * width))
    return "#" * full + "." * (width - full)


def fmt_acc(acc):
    return "-" if acc is None else f"{acc:.3f}"


def span(values):
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


class Mixer:
    """The mesh's mixed model: exports every mesh node's model, averages them and evaluates the
    average with `meshtrain evaluate` (on a background thread during the run, every `interval`
    seconds; once more at the end)."""

    def __init__(self, binary, mesh, workdir, eval_args, interval):
        self.binary = binary
        self.mesh = mesh
        self.workdir = workdir
        self.eval_args = eval_args
        self.interval = interval
        self.result = None  # (min step, max step, accuracy)
        self.error = None
        self._stop = threading.Event()
        self._thread = None

    def measure(self, tag):
        # The exports run at once (a model is ~1 MB over the RPC port); every one is bounded.
        self.error = None
        paths = [os.path.join(self.workdir, f"{a.name}.{tag}.npz") for a in self.mesh]
        procs = [subprocess.Popen([self.binary, "export", "--rpc", a.rpc, "--out", path],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL) for a, path in zip(self.mesh, paths)]
        steps, errors = [], []
        deadline = time.monotonic() + 30
        for a, proc in zip(self.mesh, procs):
            try:
                out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.communicate()
                errors.append(f"export of {a.name} timed out")
                continue
            if proc.returncode != 0:
                errors.append(f"export of {a.name} failed: {err.strip()}")
                continue
            m = re.search(r"at step (\d+)", out)
            steps.append(int(m.group(1)) if m else 0)
        if errors:
            self.error = "; ".join(errors)
            return None
        if not steps:
            return None
        out = os.path.join(self.workdir, f"mixed.{tag}.npz")
        average_models(paths, out)
        try:
            ev = subprocess.run([self.binary, "evaluate", "--model", out, "--format", "json",
                                 *self.eval_args], capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.error = "evaluating the mixed model timed out"
            return None
        if ev.returncode != 0:
            self.error = f"evaluating the mixed model failed: {ev.stderr.strip()}"
            return None
        self.result = (min(steps), max(steps), json.loads(ev.stdout)["accuracy"])
        return self.result

    def _run(self):
        while not self._stop.wait(self.interval):
            if all((a.last_good or {}).get("step", 0) > 0 for a in self.mesh):
                self.measure("live")

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)


class View:
    """The live view: redrawn in place on a terminal, printed every few refreshes otherwise."""

    def __init__(self, tty):
        self.tty = tty
        self.lines = 0

    def show(self, text):
        if self.tty:
            # Lines cut to the terminal's width, so that none wraps and the redraw stays in place.
            width = shutil.get_terminal_size().columns
            text = "\n".join(line[:width - 1] for line in text.split("\n"))
        if self.tty and self.lines:
            sys.stdout.write(f"\x1b[{self.lines}F\x1b[J")
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        self.lines = text.count("\n") + 1


def render(agents, mixer, elapsed, args, training_task):
    out = [f"t={elapsed:5.1f}s" + (f"   dashboard: http://{args.http}/" if args.http else "")]
    if not training_task:
        for a in agents:
            st = a.status or a.last_good
            if a.proc.poll() is not None:
                out.append(f"  {a.name:<8} exited with {a.proc.returncode}")
                continue
            if st is None:
                out.append(f"  {a.name:<8} (starting)")
                continue
            view = " ".join(f"{m['name']}:{m['status'][0]}"
                            for m in (a.members or {}).get("members", []))
            out.append(f"  {a.name:<8} peers {st.get('peers_alive')}  bytes sent "
                       f"{st.get('bytes_sent'):>8}  view [{view}]")
        return "\n".join(out)
    out.append(ROW.format("", "classes held", "step", "acc.", "", ""))
    for a in agents:
        out.append(agent_row(a))
        if mixer is not None and a is mixer.mesh[-1]:
            out.append(mixer_row(mixer))
    return "\n".join(out)


ROW = "  {:<21} {:<15} {:>5}  {:<5} {:<10} {}"  # under 80 columns


def agent_row(a):
    if a.proc.poll() is not None and not a.finished():
        return f"  {a.label:<21} exited with {a.proc.returncode} (log {a.log_path})"
    st = a.status or a.last_good
    if st is None:
        return f"  {a.label:<21} (starting)"
    acc = a.accuracy()
    note = []
    if a.role == "mesh":
        note.append(f"peers {st.get('peers_alive')}")
    if a.finished():
        note.append("done")
    classes = "all 10" if a.role == "pooled" else classes_text(a.histogram)
    return ROW.format(a.label, classes, st.get("step", 0), fmt_acc(acc), bar(acc), " ".join(note))


def mixer_row(mixer):
    res = mixer.result
    acc = res[2] if res else None
    return ROW.format("mesh: mixed model", "all (together)", "" if res is None else res[1],
                      fmt_acc(acc), bar(acc), f"mean of {len(mixer.mesh)} nodes")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "cli", "meshtrain"))
    p.add_argument("--nodes", type=int, default=4, help="mesh agents (default 4)")
    p.add_argument("--task", default="fmnist-mlp",
                   help="fmnist-mlp (default), another --task of the agent, or none "
                        "(membership only)")
    p.add_argument("--shard-mode", default="label-skew:0.1",
                   help="how the mesh nodes split the training set: label-skew:ALPHA (default "
                        "label-skew:0.1: mostly 2-4 classes per shard) or iid")
    p.add_argument("--barrier", default="pssp")
    p.add_argument("--select", default="random")
    p.add_argument("--steps", type=int, default=1500,
                   help="training steps per agent, mesh and single processes alike (default "
                        "1500; 0: until --target-accuracy)")
    p.add_argument("--eval-every", type=int, default=100,
                   help="steps between test evaluations of each agent (default 100)")
    p.add_argument("--target-accuracy", type=float, default=0.0,
                   help="agents also stop at this test accuracy (default: off)")
    p.add_argument("--baselines", choices=("all", "node1", "off"), default="all",
                   help="single processes run in the same run, joined to nobody: 'all' (default) "
                        "one alone on each mesh node's shard plus one on all the data; 'node1' "
                        "alone on node1's shard plus all the data; 'off' none")
    p.add_argument("--mix-every", type=float, default=2.0,
                   help="seconds between live evaluations of the mesh's mixed model (0: only at "
                        "the end)")
    p.add_argument("--duration", type=float, default=0,
                   help="seconds to run (default: until every agent has finished its steps, or "
                        "20 s with --task none)")
    p.add_argument("--timeout", type=float, default=600, help="hard limit on the run, seconds")
    p.add_argument("--refresh", type=float, default=1.0, help="seconds between view updates")
    p.add_argument("--extra", default="", help="extra agent options, space-separated")
    p.add_argument("--http", default="127.0.0.1:7952",
                   help="dashboard and /metrics address of the first agent ('' = off)")
    args = p.parse_args()

    training_task = args.task != "none"
    if training_task and args.steps == 0 and args.target_accuracy == 0:
        p.error("--steps 0 needs --target-accuracy")
    if not training_task and args.duration == 0:
        args.duration = 20
    if args.nodes < 1:
        p.error("--nodes must be at least 1")
    extra = shlex.split(args.extra)
    try:
        check_prerequisites(args, extra)
    except DemoError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 2

    # Ctrl-C and SIGTERM (e.g. from a CI runner) end the demo through the `finally` below. SIGINT
    # is caught even where the shell started us ignoring it (a background job): the agents
    # always catch it, so the demo must too, rather than find them gone.
    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    baselines = args.baselines if training_task else "off"
    alone_shards = {"all": list(range(args.nodes)), "node1": [0], "off": []}[baselines]
    count = args.nodes + len(alone_shards) + (0 if baselines == "off" else 1)
    workdir = tempfile.mkdtemp(prefix="meshtrain-demo-")
    base = free_port_block(count)
    agents = []
    common = ["--profile", "local", "--task", args.task, "--barrier", args.barrier,
              "--select", args.select]
    if training_task:
        common += ["--eval-every", str(args.eval_every)]
        if args.steps:
            common += ["--steps", str(args.steps)]
        if args.target_accuracy:
            common += ["--target-accuracy", str(args.target_accuracy)]
    shard_opts = ["--shard-mode", args.shard_mode] if training_task else []

    def add(name, role, label, opts):
        index = len(agents)
        port, rpc = base + 2 * index, base + 2 * index + 1
        cmd = [args.bin, "agent", "--name", name, "--bind", f"127.0.0.1:{port}",
               "--rpc", f"127.0.0.1:{rpc}", *common, *opts,
               "--metrics-file", os.path.join(workdir, f"{name}.metrics.jsonl"), *extra]
        a = Agent(name, role, port, rpc, cmd, workdir)
        a.label = label
        a.want_members = not training_task
        agents.append(a)

    for i in range(args.nodes):
        opts = []
        if training_task:
            opts += ["--shard", f"{i}/{args.nodes}", *shard_opts]
        if i > 0:
            opts += ["--join", f"127.0.0.1:{base}", "--retry-join", "--retry-interval", "1s"]
        elif args.http:
            opts += ["--http", args.http]
        add(f"node{i + 1}", "mesh", f"mesh: node{i + 1}", opts)
    for i in alone_shards:
        add(f"alone{i + 1}", "alone", f"alone on node{i + 1}'s data",
            ["--shard", f"{i}/{args.nodes}", *shard_opts])
    if baselines != "off":
        add("pooled", "pooled", "alone on all the data", [])
    mesh = [a for a in agents if a.role == "mesh"]
    alone = [a for a in agents if a.role == "alone"]
    pooled = next((a for a in agents if a.role == "pooled"), None)
    ddir = option_value(extra, "--dataset-dir")
    mixer = (Mixer(args.bin, mesh, workdir, [f"--dataset-dir={ddir}"] if ddir else [],
                   args.mix_every) if training_task and option_value(extra, "--train-data") is None
             else None)

    print(f"meshtrain demo: {args.nodes} agents in a mesh on 127.0.0.1:{base}.., task "
          f"{args.task}" + (f", shards {args.shard_mode}, {args.steps} steps each"
                            if training_task and args.steps else "") +
          f", barrier {args.barrier}, select {args.select}; logs in {workdir}")
    if baselines != "off":
        print("in the same run, joined to nobody, same settings and steps: "
              + ("one agent alone on each mesh node's shard" if baselines == "all"
                 else "one agent alone on node1's shard")
              + " and one on the whole training set")
    tty = sys.stdout.isatty()
    view = View(tty)
    final_line, summary, failed = None, [], False
    try:
        for a in agents:
            a.start()
            time.sleep(0.1)
        if args.http:
            print(f"live dashboard of the mesh: http://{args.http}/  (Prometheus metrics: "
                  f"http://{args.http}/metrics)", flush=True)
        if mixer is not None and args.mix_every > 0:
            mixer.start()

        start = time.monotonic()
        last_print = -1e9
        while True:
            time.sleep(args.refresh)
            elapsed = time.monotonic() - start
            for a in agents:
                a.poll(args.bin)
            dead = [a for a in agents if a.proc.poll() is not None and not a.finished()]
            if tty or elapsed - last_print >= 5 * args.refresh:
                view.show(render(agents, mixer, elapsed, args, training_task))
                last_print = elapsed
            if dead:
                a = dead[0]
                tail = a.log_tail()
                hint = ("\n(another dashboard port: --http 127.0.0.1:PORT; none: --http '')"
                        if "cannot serve HTTP" in tail else "")
                raise DemoError(f"{a.name} exited with {a.proc.returncode}; the end of its log "
                                f"({a.log_path}):\n{tail}{hint}")
            if args.duration and elapsed >= args.duration:
                break
            if training_task and not args.duration and all(a.finished() for a in mesh):
                # The single processes end with the mesh, once they have taken as many steps
                # (with --target-accuracy, one alone may never reach the target).
                mesh_step = max((a.last_good or {}).get("step", 0) for a in mesh)
                if all(a.finished() or (a.last_good or {}).get("step", 0) >= mesh_step
                       for a in agents):
                    break
            if elapsed >= args.timeout:
                print(f"demo: --timeout {args.timeout:g} s reached; stopping", flush=True)
                break
        if training_task:
            mixed = None
            if mixer is not None:
                mixer.stop()
                mixer.result = None  # the live figure is not the final one
                mixed = mixer.measure("final")
            view.show(render(agents, mixer, time.monotonic() - start, args, training_task))
            final_line, summary = compare(args, workdir, mesh, alone, pooled, mixed,
                                          mixer.error if mixer else None)
    except KeyboardInterrupt:
        failed = True
        print("\ninterrupted; stopping the agents", flush=True)
    except DemoError as e:
        failed = True
        print(f"demo: {e}", file=sys.stderr, flush=True)
    finally:
        # A second Ctrl-C must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for a in agents:
            a.stop()
        for a in agents:
            a.reap()
        if mixer is not None:
            mixer.stop()  # its exports fail at once now; bounded by their timeouts anyway
            for name in os.listdir(workdir):
                if name.endswith(".live.npz"):  # the final models stay
                    os.unlink(os.path.join(workdir, name))

    if failed:
        return 1
    if not training_task:
        print("\nfinal state:")
        for a in agents:
            st = a.last_good or {}
            print(f"  {a.name}: peers {st.get('peers_alive')}, bytes sent "
                  f"{st.get('bytes_sent')}, rejected packets {st.get('rejected_packets')}")
    if summary:
        print("\n" + "\n".join(summary))
    if final_line:
        print("\n" + final_line, flush=True)
    return 0


def compare(args, workdir, mesh, alone, pooled, mixed, mix_error):
    """Returns (the one-line comparison, the lines of detail before it). `mixed`: (min step, max
    step, accuracy) of the mesh's mixed model, or None."""
    for a in mesh + alone + ([pooled] if pooled else []):
        a.read_evals()
    acc = Agent.accuracy
    summary = ["final state (test accuracy at each agent's last evaluation):"]
    for a in mesh + alone + ([pooled] if pooled else []):
        st = a.last_good or {}
        summary.append(f"  {a.label:<21} step {st.get('step', 0):>5}  accuracy {fmt_acc(acc(a))}"
                       + (f"  label histogram {a.histogram}" if a.histogram else ""))
    if mixed is not None:
        # With at most fanout + 1 nodes (default fanout 3), every node mixes every other's model
        # each round: at equal steps all weigh 1 and the mean is what each node then holds.
        every = len(mesh) <= 4 and option_value(shlex.split(args.extra), "--fanout") is None
        summary.append(f"  {'mesh: mixed model':<21} step {mixed[1]:>5}  accuracy "
                       f"{mixed[2]:.3f}  (the mean of the {len(mesh)} nodes' models"
                       + (": what the next mixing round gives each node)" if every else ")"))
    elif mix_error:
        summary.append(f"  mesh: mixed model: {mix_error}")
    summary.append(f"logs, metrics and models: {workdir}")

    held = [len(main_classes(a.histogram)) for a in mesh if a.histogram]
    held_text = ""
    if held and args.shard_mode != "iid":
        lo, hi = min(held), max(held)
        held_text = f", each holding mostly {lo if lo == hi else f'{lo}-{hi}'} of the 10 classes"
    own = [v for v in (acc(a) for a in mesh) if v is not None]
    mesh_text = f"mesh of {len(mesh)} nodes{held_text}: "
    if mixed is not None:
        mesh_text += f"{mixed[2]:.2f} (mixed model"
        if own:
            mesh_text += f"; each node's own last evaluation {span(own)}"
        mesh_text += ")"
    elif own:
        mesh_text += f"each node's own last evaluation {span(own)}"
    else:
        mesh_text += "no evaluation"
    parts = [mesh_text]
    lone = [v for v in (acc(a) for a in alone) if v is not None]
    if len(alone) == 1 and lone:
        parts.append(f"one process on node1's data alone: {lone[0]:.2f}")
    elif lone:
        parts.append(f"one process on one node's data alone: {span(lone)} "
                     f"(mean {sum(lone) / len(lone):.2f})")
    if pooled is not None and acc(pooled) is not None:
        parts.append(f"one process on all the data: {acc(pooled):.2f}")
    st = mesh[0].last_good or {}
    parts.append(f"{st.get('step', 0)} steps of {st.get('batch', '?')} samples each, same run")
    return " | ".join(parts), summary


if __name__ == "__main__":
    sys.exit(main())
