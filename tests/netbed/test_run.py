"""`meshtrain run` as it is deployed: two hosts of the namespace bed, each started with one
`meshtrain run --restart 2 <agent options> -- python3 run_worker.py` (a numpy vector model
trained through the Python client at $MESHTRAIN_SOCKET; tests/integration/run_worker.py).
Checks that:
- both scripts train (their steps advance) and each agent sees 2 alive members;
- --restart: the script of h2 killed with SIGKILL comes back (a new PID, `train#2 | `) and its
  first step continues at the mesh's step (resumed, at or past the last step it printed
  before the kill), not from 0; the agent stayed up;
- SIGINT to h2's `run`: within 3 s h1's `meshtrain members` lists h2 as `left`, and every
  process of h2 (run, agent, script: by PID) is gone; run exits 130 (the script's death by
  SIGINT); SIGTERM to h1's run then ends it with 143.
Skips (exit 77) where no bed can be built (not root, no namespaces or /dev/net/tun) or no
python3 with numpy is found.
"""
import argparse
import json
import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from bed import Bed, available, find_linkemu  # noqa: E402
from external_lib import numpy_python  # noqa: E402
import netbed_lib as nl  # noqa: E402

REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
WORKER = os.path.join(REPO, "tests", "integration", "run_worker.py")
LINE = re.compile(r"^(train(?:#\d+)?) \| (\{.*\})$")
LEFT_WITHIN_S = 3.0


def events(log):
    out = []
    with open(log, errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if m:
                try:
                    out.append((m.group(1), json.loads(m.group(2))))
                except ValueError:
                    pass
    return out


def started_pids(log):
    """{what: pid} of the children run reported starting (agent, train, train#2, ...)."""
    with open(log, errors="replace") as f:
        return {m.group(1): int(m.group(2)) for m in
                re.finditer(r"^run \| (\S+) started \(pid (\d+)\)", f.read(), re.M)}


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for(pred, timeout, what, interval=0.2):
    start = time.monotonic()
    for _ in range(int(timeout / interval) + 2):
        got = pred()
        if got:
            return got
        if time.monotonic() - start > timeout:
            break
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def last_step(log, who=None):
    steps = [e["step"] for w, e in events(log)
             if e["event"] in ("step", "attached") and (who is None or w == who)]
    return steps[-1] if steps else None


def run_host(bed, i, binary, py, log):
    argv = [binary, "run", "--restart", "2", "--name", f"h{i + 1}",
            "--bind", f"{bed.addr(i)}:{nl.PORT}", "--rpc", nl.RPC, "--min-peers", "1",
            "--barrier", "ssp", "--staleness", "4"]
    if i > 0:
        argv += ["--join", f"{bed.addr(0)}:{nl.PORT}", "--retry-join", "--retry-interval", "1s"]
    argv += ["--", py, WORKER, "--sleep", "0.02"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MESHTRAIN_") and k != "XDG_RUNTIME_DIR"}
    env["PYTHONPATH"] = os.path.join(REPO, "python")
    env["TMPDIR"] = os.path.dirname(log)  # run's socket directory: in the test's own
    return bed.spawn(i, argv, log, env=env)


def check_restart(log):
    """Kills h2's script with SIGKILL; returns (old pid, new attach event)."""
    old = started_pids(log)["train"]
    before = wait_for(lambda: (lambda s: s if s and s > 20 else None)(last_step(log, "train")),
                      60, "h2's script past step 20")
    os.kill(old, signal.SIGKILL)
    back = wait_for(lambda: next((e for w, e in events(log)
                                  if w == "train#2" and e["event"] == "attached"), None),
                    60, "h2's script restarted")
    assert back["pid"] != old and back["resumed"], back
    assert back["step"] >= before > 0, (before, back)
    wait_for(lambda: (lambda s: s if s and s > back["step"] else None)(last_step(log, "train#2")),
             60, "the restarted script steps on")
    print(f"h2's script (pid {old}) killed at step >= {before}: restarted as pid {back['pid']}, "
          f"resumed at the mesh's step {back['step']}")


def check_sigint(bed, binary, proc, log):
    """SIGINT to h2's run: h1 sees h2 `left` within LEFT_WITHIN_S, h2's processes are gone."""
    pids = started_pids(log)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    left_after = None
    for _ in range(200):
        view = nl.members(bed, 0, binary)
        if view and view.get("h2", {}).get("status") == "left":
            left_after = time.monotonic() - t0
            break
        if time.monotonic() - t0 > 30:
            break
        time.sleep(0.05)
    assert left_after is not None, f"h1 never saw h2 leave: {nl.members(bed, 0, binary)}"
    rc = proc.wait(timeout=40)
    gone_after = time.monotonic() - t0
    alive = [f"{k} {p}" for k, p in pids.items() if pid_alive(p)]
    print(f"SIGINT to h2's run: h1 lists h2 left after {left_after:.2f} s; run exited {rc} "
          f"after {gone_after:.2f} s; processes still there: {alive or 'none'}")
    assert left_after <= LEFT_WITHIN_S, f"left after {left_after:.2f} s"
    assert not alive, alive
    assert rc == 130, f"run exited {rc}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    a = p.parse_args()
    why = available(find_linkemu(a.bin))
    if why:
        print(f"SKIP: no network-namespace bed here: {why}")
        sys.exit(77)
    py = numpy_python()
    if py is None:
        print("SKIP: no python3 with numpy")
        sys.exit(77)
    with nl.workdir("meshtrain-netbed-run-") as work:
        with Bed(2, find_linkemu(a.bin), delay_ms=1, tag="run") as bed:
            logs = [os.path.join(work, f"h{i + 1}.log") for i in range(2)]
            try:
                procs = [run_host(bed, i, a.bin, py, logs[i]) for i in range(2)]
                start = time.monotonic()
                for i in range(2):
                    wait_for(lambda: (lambda v: v and sum(m["status"] == "alive"
                                                          for m in v.values()) == 2)(
                        nl.members(bed, i, a.bin)), 60, f"h{i + 1} sees 2 alive members")
                steps0 = [wait_for(lambda: last_step(lg), 60, "a step") for lg in logs]
                time.sleep(2)
                steps1 = [last_step(lg) for lg in logs]
                print(f"mesh of 2 up after {time.monotonic() - start:.1f} s; steps {steps0} -> "
                      f"{steps1} in 2 s")
                assert all(b > s for s, b in zip(steps0, steps1)), (steps0, steps1)
                check_restart(logs[1])
                assert procs[1].poll() is None and procs[0].poll() is None
                check_sigint(bed, a.bin, procs[1], logs[1])
                assert procs[0].poll() is None, "h1's run exited"
                procs[0].send_signal(signal.SIGTERM)  # h1 stopped as h2 was (also its files)
                rc = procs[0].wait(timeout=40)
                assert rc == 128 + signal.SIGTERM, f"h1's run exited {rc} after SIGTERM"
            except BaseException:
                for lg in logs:
                    with open(lg, errors="replace") as f:
                        print(f"---- {lg} ----\n{f.read()[-3000:]}", file=sys.stderr)
                raise
    print("PASS")


if __name__ == "__main__":
    main()
