"""`meshtrain run [options] [agent options] -- COMMAND` (docs/contract.md "Command line"): one
agent on loopback and its training script, started and stopped together. Checks that:
- `run --help` exits 0 and explains the agent options, the environment and the signals;
- usage errors exit 2 with one `error:` line and start nothing: no `-- COMMAND`, --trainer
  builtin, --trainer-socket against --socket, a bad agent option value;
- the script's exit status is run's (3), its output and the agent's come prefixed (`train | `,
  `agent | `), a partial last line included; the script sees MESHTRAIN_SOCKET and
  MESHTRAIN_RPC (the agent's --rpc); afterwards the agent is gone and the private socket
  directory (under $TMPDIR) removed, as it is after every other case below;
- SIGINT to run while the script trains (run_worker.py through the Python client): the script
  gets it, the agent leaves gracefully, run exits 130 promptly and both children are gone;
- --restart 1 with a script that crashes once: it runs twice (`train#2 | `), the second time
  resumed from the agent's step, and run exits 0 when it finishes;
- the agent killed (SIGKILL) under a training script: run stops the script and exits 1.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import require_numpy_python  # noqa: E402
from harness import free_port_block, parse_args, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
WORKER = os.path.join(HERE, "run_worker.py")
LINE = re.compile(r"^(train(?:#\d+)?) \| (\{.*\})$")


def env(work=None):
    """The caller's environment without an agent's address; run's socket directory under
    `work` (TMPDIR)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("MESHTRAIN_") and k != "XDG_RUNTIME_DIR"}
    e["PYTHONPATH"] = os.path.join(REPO, "python")
    if work:
        e["TMPDIR"] = work
    return e


def pid_alive(pid):
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Run:
    """One `meshtrain run` with its own ports and output file; ended by PID (and its children
    by theirs) on exit."""

    def __init__(self, binary, work, name, run_opts, command):
        base = free_port_block(1)
        self.rpc = f"127.0.0.1:{base + 1}"
        self.out_path = os.path.join(work, f"{name}.out")
        argv = [binary, "run", *run_opts, "--name", name, "--bind", f"127.0.0.1:{base}",
                "--rpc", self.rpc, "--profile", "local", "--data-dir", os.path.join(work, name),
                "--", *command]
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env(work),
                                         start_new_session=True)

    def text(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def events(self):
        out = []
        for line in self.text().splitlines():
            m = LINE.match(line)
            if m:
                out.append((m.group(1), json.loads(m.group(2))))
        return out

    def pids(self):
        """The PIDs run reported starting (agent and every script)."""
        return [int(p) for p in re.findall(r"^run \| \S+ started \(pid (\d+)\)", self.text(),
                                           re.M)]

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for pid in [self.proc.pid] + self.pids():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if exc[0] is not None:
            print(f"---- {self.out_path} ----\n{self.text()[-4000:]}", file=sys.stderr)
        return False


def check_usage(binary, work):
    r = subprocess.run([binary, "run", "--help"], capture_output=True, text=True, timeout=60,
                       env=env())
    assert r.returncode == 0, r
    for word in ("meshtrain agent --help", "MESHTRAIN_SOCKET", "MESHTRAIN_RPC", "--restart",
                 "--socket", "--stop-timeout", "SIGINT"):
        assert word in r.stdout, f"`run --help` does not mention {word}:\n{r.stdout}"
    cases = [
        (["--name", "x"], "`--`"),
        (["--name", "x", "--"], "`--`"),
        (["--trainer", "builtin", "--", "true"], "--trainer builtin"),
        (["--socket", f"{work}/a.sock", "--trainer-socket", f"{work}/b.sock", "--", "true"],
         "conflicts"),
        (["--barrier", "bogus", "--", "true"], "--barrier"),
        (["--restart", "-1", "--", "true"], "--restart"),
    ]
    for args, word in cases:
        r = subprocess.run([binary, "run", *args], capture_output=True, text=True, timeout=60,
                           env=env())
        errs = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(errs) == 1 and errs[0].startswith("error:") and \
            word in errs[0] and r.stdout == "", (args, r)
        print(f"run {' '.join(args)}: exit 2, {errs[0]}")


def check_exit_code(binary, work, py):
    code = ("import os, sys; print('socket', os.environ['MESHTRAIN_SOCKET']); "
            "print('rpc', os.environ['MESHTRAIN_RPC']); sys.stdout.write('partial'); "
            "sys.exit(3)")
    with Run(binary, work, "x1", [], [py, "-c", code]) as run:
        rc = run.wait(60)
        text = run.text()
        assert rc == 3, f"run exited {rc}, not the script's 3"
        assert re.search(r"^agent \| ", text, re.M) and "train | partial" in text, text
        sock = re.search(r"^train \| socket (\S+)$", text, re.M).group(1)
        assert sock.startswith(work + "/meshtrain-run-"), f"{sock}: not under $TMPDIR"
        assert f"train | rpc {run.rpc}" in text, text
        assert not os.path.exists(sock) and not os.path.exists(os.path.dirname(sock)), sock
        pids = run.pids()
        assert len(pids) == 2 and not any(pid_alive(p) for p in pids), pids
        print(f"exit status 3 passed through; prefixed output; {os.path.dirname(sock)} removed")


def check_sigint(binary, work, py):
    with Run(binary, work, "x2", [], [py, WORKER, "--sleep", "0.01"]) as run:
        wait_until(lambda: any(e["event"] == "step" and e["step"] >= 20 for _, e in run.events()),
                   60, what="the script steps")
        pids = run.pids()
        t0 = time.monotonic()
        os.kill(run.proc.pid, signal.SIGINT)
        rc = run.wait(40)
        took = time.monotonic() - t0
        text = run.text()
        assert rc == 130, f"run exited {rc} after SIGINT, not 130:\n{text[-2000:]}"
        assert "leaving the mesh" in text, text[-2000:]
        assert not any(pid_alive(p) for p in pids), pids
        print(f"SIGINT: run exited 130 {took:.2f} s later, agent and script gone")
        assert took < 20, f"run took {took:.1f} s to stop"


def check_restart(binary, work, py):
    marker = os.path.join(work, "crashed-once")
    cmd = [py, WORKER, "--steps", "40", "--crash-once", marker, "--crash-at", "15"]
    with Run(binary, work, "x3", ["--restart", "1"], cmd) as run:
        rc = run.wait(120)
        ev = run.events()
        text = run.text()
        assert rc == 0, f"run exited {rc}:\n{text[-3000:]}"
        attached = [(who, e) for who, e in ev if e["event"] == "attached"]
        crash = next(e for who, e in ev if e["event"] == "crash")
        assert [who for who, _ in attached] == ["train", "train#2"], attached
        again = attached[1][1]
        assert again["resumed"] and again["step"] >= crash["step"], (crash, again)
        assert "restarting it (restart 1 of 1)" in text, text
        assert any(who == "train#2" and e["event"] == "done" for who, e in ev), ev
        assert not any(pid_alive(p) for p in run.pids()), run.pids()
        print(f"--restart 1: crashed at step {crash['step']}, came back at step "
              f"{again['step']} (resumed), finished; run exited 0")


def check_agent_death(binary, work, py):
    with Run(binary, work, "x4", [], [py, WORKER]) as run:
        wait_until(lambda: any(e["event"] == "step" for _, e in run.events()), 60,
                   what="the script steps")
        agent, script = run.pids()
        os.kill(agent, signal.SIGKILL)
        rc = run.wait(40)
        assert rc == 1 and "the agent exited unexpectedly" in run.text(), (rc, run.text())
        assert not pid_alive(script), script
        print("agent killed: script stopped, run exited 1")


def main():
    args = parse_args()
    py = require_numpy_python()
    work = tempfile.mkdtemp(prefix="meshtrain-run-test-")
    ok = False
    try:
        check_usage(args.bin, work)
        check_exit_code(args.bin, work, py)
        check_sigint(args.bin, work, py)
        check_restart(args.bin, work, py)
        check_agent_death(args.bin, work, py)
        left = [d for d in os.listdir(work) if d.startswith("meshtrain-run-")]
        assert not left, f"socket directories left behind: {left}"
        ok = True
    finally:
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"files kept in {work}", file=sys.stderr)
    print("PASS")


if __name__ == "__main__":
    main()
