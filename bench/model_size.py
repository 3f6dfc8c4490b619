#!/usr/bin/env python3
"""Real-size models through the streamed parameter path (docs/design.md "The parameter path").

For each model size (float32 parameters) and compression, N agents on loopback (pssp, the
default lan profile, --trainer external) each serve a numpy trainer process (bench/
model_size_worker.py) whose model lives in the agent's shared memory; every step "computes" for
--step-ms (touches a slice of the model, then sleeps the rest) and calls mesh.step. While they
train, a poller asks every agent for `meshtrain status` every 200 ms and times each answer.

Per setting it prints, over the nodes (worst node where it says max):
  overhead ms     median time of one mesh.step (publish, barrier, mix) in the trainer
  memcpy ms       one copy of the model in the trainer process (the floor of any step)
  rss MB / x      the agents' peak RSS (VmHWM), and as a multiple of the model's size
  budget          3 x model + 100 MB, the bound on an agent's peak RSS
  status max ms   the slowest `meshtrain status` answer (CLI process included)
  rpc max ms      the slowest status answer asked straight on the RPC endpoint (the agent's own)
  lag p99/max     the event loop's tick lag from status (loop.lag_p99_ms / lag_max_ever_ms)
  suspicions      SWIM suspicions raised by any agent (all agents stay alive: none is right)
  MB/s/node       parameter bytes sent per second per node (params_bytes_sent / training time)
  mixed/step      peer models mixed per step, in whole models (status models_mixed / steps)
  mixed           the least models_mixed of any node (target: >= 10 in 40 steps)
The JSON lines add encoded_per_sent (chunks encoded per chunk sent: 0.5 at fanout 2 when both
receivers of a round share every encoding), status_p50_ms / status_p99_ms over every CLI answer,
and status_worst_usage (the slowest CLI process's own CPU ms, page faults and involuntary
switches: what of its time was its own work); each agent's final status is kept in the log
directory (status.json).

Memory-heavy: 250 M parameters need ~3 GB per agent plus 1 GB per trainer.
Example: python3 bench/model_size.py --params 1e6,1e7,1e8,2.5e8 --compress none,int8
"""
import argparse
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

WORKER = os.path.join(HERE, "model_size_worker.py")


def peak_rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def rpc_status(addr, timeout=30):
    """One `status` request straight to the agent's RPC endpoint (a length-prefixed JSON frame):
    the agent's own answer time, without the CLI process's start-up."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        body = json.dumps({"cmd": "status"}).encode()
        s.sendall(struct.pack(">I", len(body)) + body)
        head = b""
        while len(head) < 4:
            part = s.recv(4 - len(head))
            if not part:
                raise OSError("closed")
            head += part
        n = struct.unpack(">I", head)[0]
        got = 0
        while got < n:
            part = s.recv(min(65536, n - got))
            if not part:
                raise OSError("closed")
            got += len(part)


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Poller(threading.Thread):
    """Every `interval` s, times `meshtrain status` (the CLI, as a user runs it) and a status
    request straight to the RPC endpoint on every agent, until stopped."""

    def __init__(self, run, interval=0.2):
        super().__init__(daemon=True)
        self.run_ = run
        self.interval = interval
        self.stop_ = threading.Event()
        self.worst = 0.0
        self.worst_rpc = 0.0
        self.samples = 0
        self.failures = 0
        self.last = {}
        self.times = []  # every CLI answer time, s
        self.worst_usage = {}  # the slowest CLI process's own CPU time and page faults

    def run(self):
        while not self.stop_.is_set():
            for a in self.run_.agents:
                u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.monotonic()
                r = a.cli("status", "--format", "json", timeout=30)
                dt = time.monotonic() - t0
                u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if r.returncode == 0:
                    if dt > self.worst:
                        # The trainers are reaped only at the end, so the delta is this CLI's.
                        self.worst_usage = {
                            "cpu_ms": round((u1.ru_utime + u1.ru_stime - u0.ru_utime -
                                             u0.ru_stime) * 1000, 1),
                            "majflt": u1.ru_majflt - u0.ru_majflt,
                            "minflt": u1.ru_minflt - u0.ru_minflt,
                            "nivcsw": u1.ru_nivcsw - u0.ru_nivcsw}
                    self.worst = max(self.worst, dt)
                    self.times.append(dt)
                    self.samples += 1
                    self.last[a.name] = json.loads(r.stdout)
                else:
                    self.failures += 1
                t0 = time.monotonic()
                try:
                    rpc_status(a.rpc)
                    self.worst_rpc = max(self.worst_rpc, time.monotonic() - t0)
                except OSError:
                    self.failures += 1
            self.stop_.wait(self.interval)


def one(binary, py, params, compress, nodes, steps, step_ms, workdir):
    common = ["--barrier", "pssp", "--trainer", "external", "--compress", compress,
              "--min-peers", str(nodes - 1), "--log-level", "info"]
    per = []
    socks = []
    for i in range(nodes):
        sock = os.path.join(workdir, f"t{i}.sock")
        socks.append(sock)
        per.append(["--trainer-socket", sock])
    workers = []
    with benchlib.Run(binary, workdir, per, common, name_prefix="ms") as run:
        run.start()
        benchlib.wait_until(
            lambda: all(a.members() and len(a.members()) == nodes for a in run.agents), 30,
            what=f"{nodes} members")
        for i, sock in enumerate(socks):
            benchlib.wait_until(lambda s=sock: os.path.exists(s), 10, what="trainer socket")
            out = open(os.path.join(workdir, f"w{i}.json"), "w")
            workers.append((subprocess.Popen(
                [py, WORKER, "--socket", sock, "--params", str(params), "--steps", str(steps),
                 "--step-ms", str(step_ms), "--seed", str(i)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), out))
        poller = Poller(run)
        poller.start()
        deadline = time.monotonic() + 600 + steps * step_ms / 1000.0 * 4
        try:
            for p, _ in workers:
                p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        finally:
            for p, out in workers:
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()
                out.close()
        time.sleep(0.5)
        poller.stop_.set()
        poller.join(timeout=40)
        statuses = {a.name: a.status() for a in run.agents}
        with open(os.path.join(workdir, "status.json"), "w") as f:
            json.dump(statuses, f, indent=1)
        rss = [peak_rss_mb(a.proc.pid) for a in run.agents]
    res = []
    for i in range(nodes):
        path = os.path.join(workdir, f"w{i}.json")
        lines = [x for x in open(path).read().splitlines() if x.startswith("{")]
        if not lines:
            raise benchlib.SetupError(f"trainer {i} wrote no result: {open(path).read()[-2000:]}")
        res.append(json.loads(lines[-1]))
    sts = [s for s in statuses.values() if s]
    model_mb = params * 4 / 1e6
    train_s = max(r["train_s"] for r in res)
    steps_done = min(r["steps"] for r in res)
    mixed = [s["param_streams"]["models_mixed"] for s in sts]
    return {
        "params": params, "compress": compress, "model_mb": model_mb,
        "overhead_ms": benchlib.median([r["step_overhead_ms_median"] for r in res]),
        "memcpy_ms": benchlib.median([r["memcpy_ms"] for r in res]),
        "rss_mb": max(rss), "rss_x": max(rss) / model_mb,
        "budget_mb": 3 * model_mb + 100,
        "status_max_ms": poller.worst * 1000, "rpc_max_ms": poller.worst_rpc * 1000,
        "status_p50_ms": 1000 * percentile(poller.times, 0.5),
        "status_p99_ms": 1000 * percentile(poller.times, 0.99),
        "status_worst_usage": poller.worst_usage,
        "status_samples": poller.samples,
        "status_failures": poller.failures,
        "lag_p99_ms": max(s["loop"]["lag_p99_ms"] for s in sts),
        "lag_max_ms": max(s["loop"]["lag_max_ever_ms"] for s in sts),
        "tick_cpu_max_ms": max(s["loop"]["tick_cpu_max_ms"] for s in sts),
        "suspicions": sum(s["membership"]["suspicions_raised"] for s in sts),
        "mbps_node": sum(s["params_bytes_sent"] for s in sts) / len(sts) / train_s / 1e6,
        "mixed_per_step": sum(mixed) / len(mixed) / max(1, steps_done),
        "mixed_min": min(mixed), "steps": steps_done, "train_s": train_s,
        "dropped": sum(s["param_streams"]["mix_chunks_dropped"] for s in sts),
        "loop_passes": sum(s["loop"]["model_passes"] for s in sts),
        "encoded_per_sent": sum(s["param_streams"]["chunks_encoded"] for s in sts) /
        max(1, sum(s["param_streams"]["chunks_sent"] for s in sts)),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=None)
    p.add_argument("--params", default="1e6,1e7,1e8,2.5e8",
                   help="comma-separated model sizes in float32 parameters")
    p.add_argument("--compress", default="none,int8", help="comma-separated --compress values")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-ms", type=float, default=100)
    p.add_argument("--json", default=None, help="also write the rows to this file")
    a = p.parse_args()
    binary = benchlib.find_binary(a.bin)
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    logdir = benchlib.make_logdir("meshtrain-model-size-")
    rows = []
    for params in [int(float(x)) for x in a.params.split(",")]:
        for comp in a.compress.split(","):
            wd = os.path.join(logdir, f"{params}-{comp}")
            r = one(binary, py, params, comp, a.nodes, a.steps, a.step_ms, wd)
            rows.append(r)
            print(json.dumps(r), flush=True)
    headers = ["params", "compress", "overhead ms", "memcpy ms", "rss MB", "rss x", "budget MB",
               "status max ms", "rpc max ms", "lag p99/max ms", "suspicions", "MB/s/node",
               "mixed/step", "mixed min"]
    table = [[f"{r['params']:.3g}", r["compress"], f"{r['overhead_ms']:.1f}",
              f"{r['memcpy_ms']:.1f}", f"{r['rss_mb']:.0f}", f"{r['rss_x']:.2f}",
              f"{r['budget_mb']:.0f}", f"{r['status_max_ms']:.0f}", f"{r['rpc_max_ms']:.0f}",
              f"{r['lag_p99_ms']:.1f}/{r['lag_max_ms']:.0f}", r["suspicions"],
              f"{r['mbps_node']:.1f}", f"{r['mixed_per_step']:.2f}", f"{r['mixed_min']:.1f}"]
             for r in rows]
    print(benchlib.table(headers, table))
    print(f"logs: {logdir}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
