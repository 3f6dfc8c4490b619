"""Multi-process test harness: starts real `meshtrain agent` processes on loopback, queries
them through the real CLI, and ends every process it started by PID (never by name).

Every wait is bounded in time; helpers raise AssertionError with what was last seen.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True, help="path to the meshtrain binary")
    return p.parse_args()


def free_port_block(n, host="127.0.0.1", start=None):
    """Finds n consecutive port pairs (agent port, rpc port) free for UDP and TCP."""
    import random
    rng = random.Random(os.getpid() ^ int(time.time()))
    for _ in range(200):
        # Stay below the ephemeral range (32768+) so outgoing connections never hold our ports.
        base = start or rng.randrange(10000, 32000 - 2 * n, 2)
        ok = True
        for port in range(base, base + 2 * n):
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                s = socket.socket(socket.AF_INET, kind)
                try:
                    s.bind((host, port))
                except OSError:
                    ok = False
                finally:
                    s.close()
                if not ok:
                    break
            if not ok:
                break
        if ok:
            return base
        start = None
    raise RuntimeError("no free port block found")


class Agent:
    def __init__(self, mesh, name, port, rpc_port, extra):
        self.mesh = mesh
        self.name = name
        self.port = port
        self.addr = f"127.0.0.1:{port}"
        self.rpc = f"127.0.0.1:{rpc_port}"
        self.extra = list(extra)
        self.proc = None
        self.log_path = os.path.join(mesh.workdir, f"{name}.log")

    def start(self, join=None):
        args = [self.mesh.bin, "agent", "--name", self.name, "--bind", self.addr,
                "--rpc", self.rpc] + self.mesh.common + self.extra
        for j in join or []:
            args += ["--join", j]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self):
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def cli(self, *args, timeout=20):
        r = subprocess.run([self.mesh.bin, *args, "--rpc", self.rpc], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return r

    def members(self):
        r = self.cli("members", "--format", "json")
        if r.returncode != 0:
            return None
        return {m["name"]: m for m in json.loads(r.stdout)["members"]}

    def status(self):
        r = self.cli("status", "--format", "json")
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


class Mesh:
    """A set of agents; use as a context manager so every process is ended by PID."""

    def __init__(self, binary, n, common=None, name_prefix="n"):
        self.bin = binary
        self.common = common or []
        self.workdir = tempfile.mkdtemp(prefix="meshtrain-it-")
        # Removed when the test passes, kept (and named) when it fails, or with
        # MESHTRAIN_KEEP_TEST_DIRS=1.
        self.keep_workdir = bool(os.environ.get("MESHTRAIN_KEEP_TEST_DIRS"))
        base = free_port_block(n)
        self.agents = [Agent(self, f"{name_prefix}{i + 1}", base + 2 * i, base + 2 * i + 1, [])
                       for i in range(n)]

    def __enter__(self):
        return self

    def start_joined(self, timeout=15):
        """Starts the first agent, waits for its RPC, then the others joining it; returns it."""
        seed = self.agents[0].start()
        wait_until(lambda: seed.members() is not None, timeout, what="seed up")
        for a in self.agents[1:]:
            a.start(join=[seed.addr])
        return seed

    def wait_finished(self, steps, timeout):
        """Waits until every agent reports training: false at step >= `steps`; returns
        (seconds, [status of each agent])."""
        def done():
            sts = [a.status() for a in self.agents]
            if any(s is None for s in sts):
                return None
            return sts if all(not s["training"] and s["step"] >= steps for s in sts) else None
        return wait_until(done, timeout, interval=0.5, what="all agents finish training")

    def wait_consensus(self, timeout):
        """Waits until every agent holds the mesh's one model at the end of training (status
        consensus serving or adopted) and has evaluated it; returns [status of each agent]."""
        def done():
            sts = [a.status() for a in self.agents]
            if any(s is None for s in sts):
                return None
            ok = all(s["consensus"]["state"] in ("serving", "adopted") and
                     s["params_crc32"] == s["consensus"]["crc32"] for s in sts)
            return sts if ok else None
        return wait_until(done, timeout, interval=0.2, what="the consensus model on every agent")[1]

    def __exit__(self, *exc):
        for a in self.agents:
            if a.proc is not None and a.proc.poll() is None:
                # Resume paused agents first so SIGKILL is delivered promptly.
                try:
                    os.kill(a.proc.pid, signal.SIGCONT)
                    os.kill(a.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if a.proc is not None:
                try:
                    a.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        if exc[0] is not None:
            for a in self.agents:
                print(f"---- log of {a.name} ----\n{a.log_tail()}", file=sys.stderr)
            print(f"logs, metrics and data dirs kept in {self.workdir}", file=sys.stderr)
        elif not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return False


def wait_until(pred, timeout, interval=0.1, what="condition"):
    """Polls pred() until it returns a truthy value or timeout seconds pass (bounded)."""
    start = time.monotonic()
    last = None
    polls = int(timeout / interval) + 2
    for _ in range(polls):
        last = pred()
        if last:
            return time.monotonic() - start, last
        if time.monotonic() - start > timeout:
            break
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
