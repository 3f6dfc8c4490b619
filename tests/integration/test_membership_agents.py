"""Membership acceptance on real agents: 5 agents on 127.0.0.1 with --profile local.

- after --join to one seed, every agent lists all 5 alive within 3 s;
- after kill -9 of one, every survivor lists it failed within 10 s;
- after `meshtrain leave` on another, every survivor lists it left within 3 s;
The 3 s bounds are read from the agents' own logs (when each agent learned the news, against
when the test started the agents or sent the leave), so that the time the test's status polling
takes on a loaded machine does not count; the polls only wait for the end, with room to spare.
- a burst of garbage datagrams and frames at a live agent is counted in rejected_packets and
  the agent keeps answering;
- `meshtrain members` with no agent running prints one line on stderr and exits non-zero.
"""
import datetime
import os
import random
import re
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import Mesh, parse_args, wait_until, free_port_block  # noqa: E402


def statuses(agent):
    m = agent.members()
    return None if m is None else {k: v["status"] for k, v in m.items()}


def all_see(agents, name, status):
    for a in agents:
        s = statuses(a)
        if s is None or s.get(name) != status:
            return False
    return True


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+) \[\w+\] \S+: "
                      r"member (\S+) (joined|left)")


def learned(agent, kind):
    """{member: wall-clock time the agent first logged it `kind`} (the agent logs local time)."""
    seen = {}
    with open(agent.log_path, errors="replace") as f:
        for line in f:
            m = LOG_LINE.match(line)
            if m and m.group(3) == kind:
                t = datetime.datetime.fromisoformat(m.group(1)).timestamp()
                seen.setdefault(m.group(2), t)
    return seen


def main():
    args = parse_args()

    # No agent: one-line error, non-zero exit.
    port = free_port_block(1)
    import subprocess
    r = subprocess.run([args.bin, "members", "--rpc", f"127.0.0.1:{port}"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode != 0, r
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    print(f"no-agent error (exit {r.returncode}): {r.stderr.strip()}")

    common = ["--profile", "local", "--task", "none", "--log-level", "info"]
    with Mesh(args.bin, 5, common) as mesh:
        seed = mesh.agents[0].start()
        wait_until(lambda: seed.members() is not None, 10, what="seed RPC up")
        started = {seed.name: time.time()}  # the seed is up: for it, a member's start counts
        t0 = time.monotonic()
        for a in mesh.agents[1:]:
            started[a.name] = time.time()
            a.start(join=[seed.addr])
        names = [a.name for a in mesh.agents]

        def full():
            return all(statuses(a) is not None and
                       all(statuses(a).get(n) == "alive" for n in names) for a in mesh.agents)
        wait_until(full, 20, interval=0.05, what="5 alive everywhere")
        t_polled = time.monotonic() - t0
        # Each agent learned each other member within 3 s of the later of the two starts.
        lag = max(learned(a, "joined")[n] - max(started[a.name], started[n])
                  for a in mesh.agents for n in names if n != a.name)
        print(f"full membership on all 5 agents: each learned each member within {lag:.2f} s of "
              f"their start (bound 3 s; the polls saw it after {t_polled:.2f} s)")
        assert lag <= 3.0, f"an agent learned a member {lag:.2f} s after their start"

        # Garbage at a live agent: counted, harmless.
        target = mesh.agents[1]
        before = target.status()["rejected_packets"]
        rng = random.Random(7)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sent = 0
        # In batches of 20, each counted before the next: the kernel drops datagrams that find
        # the agent's receive buffer full (a loaded machine), and those never reach the agent.
        for batch in range(100):
            for i in range(20):
                n = rng.choice([0, 1, 5, 40, 300, 1400, 1500, 9000])
                udp.sendto(bytes(rng.getrandbits(8) for _ in range(n)),
                           ("127.0.0.1", target.port))
                sent += 1
            wait_until(lambda: target.status()["rejected_packets"] - before >= sent - 1, 10,
                       interval=0.02, what=f"garbage batch {batch} counted")
        udp.close()
        frames = 0
        for i in range(20):
            s = socket.create_connection(("127.0.0.1", target.port), timeout=5)
            body = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 50, 500])))
            s.sendall(struct.pack(">I", len(body)) + body)
            s.close()
            frames += 1
        wait_until(lambda: target.status()["rejected_packets"] - before >= sent + frames - 10,
                   10, what="garbage counted")
        after = target.status()["rejected_packets"]
        print(f"garbage burst: sent {sent} datagrams + {frames} frames, "
              f"rejected_packets {before} -> {after}")
        assert target.alive()
        assert all_see([target], mesh.agents[2].name, "alive")

        # kill -9 one: failed everywhere within 10 s.
        victim = mesh.agents[4]
        victim.kill()
        t0 = time.monotonic()
        survivors = mesh.agents[:4]
        dt, _ = wait_until(lambda: all_see(survivors, victim.name, "failed"), 10 + 2,
                           interval=0.1, what=f"{victim.name} failed everywhere")
        print(f"kill -9 {victim.name}: failed on all survivors after {dt:.2f} s (bound 10 s)")
        assert dt <= 10.0

        # graceful leave: left everywhere within 3 s, and the agent exits 0.
        leaver = mesh.agents[3]
        t_cmd = time.time()
        r = leaver.cli("leave")
        assert r.returncode == 0, r.stderr
        survivors = mesh.agents[:3]
        dt, _ = wait_until(lambda: all_see(survivors, leaver.name, "left"), 20,
                           interval=0.05, what=f"{leaver.name} left everywhere")
        lag = max(learned(a, "left")[leaver.name] - t_cmd for a in survivors)
        print(f"leave {leaver.name}: every survivor logged it left {lag:.2f} s after the command "
              f"(bound 3 s; the polls saw it {dt:.2f} s after the command returned)")
        assert lag <= 3.0
        rc = leaver.proc.wait(timeout=10)
        assert rc == 0, f"leaving agent exited {rc}"

        # SIGTERM is a graceful leave too.
        term = mesh.agents[2]
        term.signal(signal.SIGTERM)
        dt, _ = wait_until(lambda: all_see(mesh.agents[:2], term.name, "left"), 5,
                           interval=0.05, what="SIGTERM leave")
        assert term.proc.wait(timeout=10) == 0
        print(f"SIGTERM {term.name}: left on survivors after {dt:.2f} s, exit 0")

        # force-leave turns the failed member into left.
        r = mesh.agents[0].cli("force-leave", victim.name)
        assert r.returncode == 0, r.stderr
        wait_until(lambda: all_see(mesh.agents[:2], victim.name, "left"), 5,
                   what="force-leave spread")
        print("force-leave: failed member shown as left on both survivors")
    print("PASS")


if __name__ == "__main__":
    main()
