"""Helpers for the external-trainer tests: finding an interpreter with numpy (the
`python3` CTest runs may lack it), and starting ext_worker.py trainers that are ended by PID."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ext_worker.py")


def numpy_python(modules="numpy"):
    """An interpreter that imports `modules` (this one, Debian's, or python3 on PATH), or None."""
    seen = set()
    for cand in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if not cand or cand in seen or not os.path.exists(cand):
            continue
        seen.add(cand)
        r = subprocess.run([cand, "-c", f"import {modules}"], capture_output=True, timeout=120)
        if r.returncode == 0:
            return cand
    return None


def require_numpy_python():
    py = numpy_python()
    if py is None:
        print("SKIP: no python3 with numpy found (tried this interpreter, /usr/bin/python3 and "
              "python3 on PATH); install python3-numpy")
        sys.exit(77)
    return py


def external_mesh(binary, n, prefix, staleness):
    """n agents with --trainer external (sockets in the test's directory), ssp at `staleness`,
    every peer a receiver, training once 2 training peers are up. Start them with start_all."""
    from harness import Mesh
    common = ["--profile", "local", "--barrier", "ssp", "--staleness", str(staleness),
              "--select", "all", "--fanout", str(n - 1), "--min-peers", str(n - 1)]
    mesh = Mesh(binary, n, common, name_prefix=prefix)
    for a in mesh.agents:
        a.socket = os.path.join(mesh.workdir, f"{a.name}.sock")
        a.extra += ["--trainer", "external", "--trainer-socket", a.socket]
    return mesh


def start_all(mesh):
    """Starts the first agent, joins the others to it, waits until it sees every member."""
    from harness import wait_until
    seed = mesh.agents[0].start()
    wait_until(lambda: seed.members() is not None, 10, what="seed up")
    for a in mesh.agents[1:]:
        a.start(join=[seed.addr])
    n = len(mesh.agents)
    wait_until(lambda: (lambda m: m and len(m) == n)(seed.members()), 20, what=f"{n} members")


class Worker:
    """One ext_worker.py process; stdout goes to a file read back with lines()."""

    def __init__(self, python, agent, workdir, *args, tag="", script=WORKER):
        self.log = os.path.join(workdir, f"{agent.name}-worker{tag}.out")
        self.out = open(self.log, "wb")
        self.proc = subprocess.Popen([python, script, "--socket", agent.socket, *map(str, args)],
                                     stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def lines(self):
        import json
        out = []
        with open(self.log, "r", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        return out

    def text(self):
        with open(self.log, "r", errors="replace") as f:
            return f.read()

    def event(self, name):
        return next((x for x in self.lines() if x.get("event") == name), None)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.out.close()


class Workers(list):
    """Ends every worker by PID on exit, also on failure."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for w in self:
            w.stop()
        if exc[0] is not None:
            for w in self:
                print(f"---- {w.log} ----\n{w.text()[-2000:]}", file=sys.stderr)
        return False
