"""External trainers under faults, 3 agents (ssp staleness 2; --trainer-timeout 3 on
the third):

- kill -9 a trainer mid-run: its agent stays alive and stops counting as training (status
  training: false), the other two keep stepping well past the staleness bound;
- restart it: it re-attaches with the agent's model and resumes at the agent's step, then steps;
- SIGSTOP a trainer: after --trainer-timeout it is detached, the others keep stepping;
- malformed frames (garbage, an oversized length, a wrong version, requests before attach, a bad
  attach, a NaN eval, a wrong parameter count) are answered with an ERROR frame and counted in
  rejected_by_reason (trainer_frame / trainer_message); the agent stays up and a good trainer
  attaches afterwards;
- as root: a process of another user (nobody) cannot connect through the 0600 socket, and when
  the socket is made world-writable it is still refused by the SO_PEERCRED check (trainer_peer);
  a second trainer of the same user is refused while one is attached (trainer_busy);
- kill -9 an agent: its trainer fails with a clear MeshError instead of hanging.
"""
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from external_lib import (Worker, Workers, external_mesh, require_numpy_python,  # noqa: E402
                          start_all)
from harness import parse_args, wait_until  # noqa: E402

STALENESS = 2
HDR = struct.Struct("<IHHII")
MAGIC = 0x5452544D


def frame(kind, body=b"", version=1, length=None, seq=1):
    return HDR.pack(MAGIC, version, kind, seq, len(body) if length is None else length) + body


def exchange(path, payloads, timeout=10):
    """Sends each payload in turn on one connection; returns (reply types, closed by agent)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    types = []
    try:
        for p in payloads:
            try:
                s.sendall(p)
            except OSError:
                pass  # refused at once: the ERROR frame is still there to read
            hdr = b""
            while len(hdr) < HDR.size:
                chunk = s.recv(HDR.size - len(hdr))
                if not chunk:
                    return types, True
                hdr += chunk
            _, _, kind, _, length = HDR.unpack(hdr)
            body = b""
            while len(body) < length:
                chunk = s.recv(length - len(body))
                if not chunk:
                    break
                body += chunk
            types.append(kind)
        try:
            return types, s.recv(1) == b""
        except ConnectionResetError:
            return types, True
    finally:
        s.close()


def attach_body(n):
    return struct.pack("<QHHIq", n, 1, 0, 0, -1)


def step_of(agent):
    s = agent.status()
    return s["step"] if s else None


def main():
    args = parse_args()
    py = require_numpy_python()
    with external_mesh(args.bin, 3, "xf", STALENESS) as mesh, Workers() as workers:
        a1, a2, a3 = mesh.agents
        # The hang test runs on a3; the others keep the default timeout (60 s), so a trainer
        # starved of CPU on a loaded machine is not detached by mistake.
        a3.extra += ["--trainer-timeout", "3"]
        start_all(mesh)
        run = ["--steps", 10**9, "--sleep", 0.01]
        for a in mesh.agents:
            workers.append(Worker(py, a, mesh.workdir, *run))
        w1, w2, w3 = workers
        wait_until(lambda: all((step_of(a) or 0) > 20 for a in mesh.agents), 60,
                   what="every agent past step 20")

        # ---- kill -9 a trainer -------------------------------------------------------------
        w3.proc.kill()
        w3.proc.wait(timeout=10)
        st3 = wait_until(lambda: (lambda s: s if s and not s["training"] else None)(a3.status()),
                         10, what="a3 stops training after its trainer died")[1]
        dead_step = st3["step"]
        assert a3.alive() and not st3["trainer"]["attached"], st3
        wait_until(lambda: all((step_of(a) or 0) > dead_step + STALENESS + 20 for a in (a1, a2)),
                   60, what="the others keep stepping past the dead trainer's agent")
        print(f"trainer of a3 killed at step {dead_step}: a1/a2 went on to "
              f"{step_of(a1)}/{step_of(a2)}")

        # ---- restart it: re-attach, resume at the agent's step ------------------------------
        agent_step = step_of(a3)
        w3b = Worker(py, a3, mesh.workdir, *run, tag="b")
        workers.append(w3b)
        att = wait_until(lambda: w3b.event("attached"), 20, what="restarted trainer attaches")[1]
        assert att["resumed"] and att["step"] == agent_step, (att, agent_step)
        wait_until(lambda: (step_of(a3) or 0) > agent_step + 10, 30,
                   what="the restarted trainer steps")
        print(f"restarted trainer resumed at the agent's step {att['step']}, now at {step_of(a3)}")

        # ---- a hung trainer is detached after --trainer-timeout ----------------------------
        os.kill(w3b.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        wait_until(lambda: (lambda s: s and not s["training"])(a3.status()), 20,
                   what="a3 detaches its hung trainer")
        print(f"SIGSTOPped trainer detached after {time.monotonic() - t0:.1f} s (timeout 3 s)")
        hung_step = step_of(a3)
        wait_until(lambda: all((step_of(a) or 0) > hung_step + STALENESS + 10 for a in (a1, a2)),
                   60, what="the others keep stepping past the hung trainer's agent")
        os.kill(w3b.proc.pid, signal.SIGCONT)
        w3b.proc.wait(timeout=30)
        assert w3b.proc.returncode != 0 and "MeshError" in w3b.text(), w3b.text()

        # ---- malformed frames on a3 (no trainer attached) ----------------------------------
        cases = [
            ("garbage", [b"GET / HTTP/1.0\r\n\r\n"], "trainer_frame"),
            ("oversized", [frame(1, length=10**6)], "trainer_frame"),
            ("version 2", [frame(1, attach_body(1000), version=2)], "trainer_frame"),
            ("unknown type", [frame(9)], "trainer_frame"),
            ("wait before attach", [frame(2, struct.pack("<Q", 1))], "trainer_message"),
            ("zero params", [frame(1, attach_body(0))], "trainer_message"),
            ("short attach", [frame(1, attach_body(1000)[:10])], "trainer_message"),
            ("wrong param count", [frame(1, attach_body(999))], "trainer_message"),
            ("NaN eval", [frame(1, attach_body(1000)),
                          frame(5, struct.pack("<Qdd", 0, math.nan, 0.5), seq=2)],
             "trainer_message"),
            ("attach twice", [frame(1, attach_body(1000)), frame(1, attach_body(1000), seq=2)],
             "trainer_message"),
        ]
        want = {}
        for name, payloads, reason in cases:
            types, closed = exchange(a3.socket, payloads)
            assert types and types[-1] == 0xFF and closed, (name, types, closed)
            want[reason] = want.get(reason, 0) + 1
        st3 = a3.status()
        got = {k: v for k, v in st3["rejected_by_reason"].items() if k.startswith("trainer_")}
        print(f"malformed frames: {len(cases)} sent, rejected_by_reason {got}")
        assert got == want, (got, want)
        assert a3.alive()
        w3c = Worker(py, a3, mesh.workdir, *run, tag="c")
        workers.append(w3c)
        wait_until(lambda: w3c.event("attached"), 20, what="a good trainer attaches after them")

        # ---- other users and a second trainer on a2 ----------------------------------------
        assert w2.proc.poll() is None, w2.text()
        busy_types, _ = exchange(a2.socket, [frame(1, attach_body(1000))])
        assert busy_types == [0xFF], (busy_types, a2.status()["trainer"], w2.text()[-500:])
        if os.geteuid() == 0:
            os.chmod(mesh.workdir, 0o711)  # let nobody reach the socket's directory
            probe = "\n".join([
                "import socket, sys",
                "s = socket.socket(socket.AF_UNIX)",
                "try:",
                "    s.connect(sys.argv[1])",
                "except PermissionError:",
                "    print('EACCES')",
                "    sys.exit(0)",
                "try:",
                "    s.sendall(bytes.fromhex(sys.argv[2]))",
                "except OSError:",
                "    pass",
                "h = s.recv(16)",
                "print('closed' if not h else 'type%d' % h[6])",
            ])

            def as_nobody():
                os.setgid(65534)
                os.setuid(65534)
            payload = frame(1, attach_body(1000)).hex()
            r = subprocess.run([py, "-c", probe, a2.socket, payload],
                               preexec_fn=as_nobody, capture_output=True, text=True, timeout=20)
            assert r.stdout.strip() == "EACCES", (r.stdout, r.stderr)
            os.chmod(a2.socket, 0o666)
            r = subprocess.run([py, "-c", probe, a2.socket, payload],
                               preexec_fn=as_nobody, capture_output=True, text=True, timeout=20)
            os.chmod(a2.socket, 0o600)
            assert r.stdout.strip() == "type255", (r.stdout, r.stderr)
            rej = a2.status()["rejected_by_reason"]
            assert rej.get("trainer_peer") == 1 and rej.get("trainer_busy") == 1, rej
            print(f"user nobody: EACCES on the 0600 socket, refused by SO_PEERCRED on a 0666 one; "
                  f"a2 rejected_by_reason {rej}")
        else:
            print("not root: the other-user checks are skipped (busy check done)")
        assert w2.proc.poll() is None, "a2's trainer should be unaffected"

        # ---- kill -9 an agent: its trainer gets a clear error ------------------------------
        a1.kill()
        t0 = time.monotonic()
        w1.proc.wait(timeout=30)
        out = w1.text()
        print(f"agent a1 killed: its trainer exited after {time.monotonic() - t0:.2f} s with: "
              f"{out.strip().splitlines()[-1]}")
        assert w1.proc.returncode != 0 and "MeshError" in out, out
        assert a2.alive() and a3.alive()
    print("PASS")


if __name__ == "__main__":
    main()
