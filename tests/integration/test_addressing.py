"""Multi-host addressing on loopback.

- an agent joins by host name (`localhost:PORT`) with --retry-join before its target exists;
  the target comes up 2.5 s later and the mesh forms (names are resolved on every retry);
  `meshtrain join HOST:PORT` resolves names too;
- an agent bound to 0.0.0.0 advertises the address routing to its join peer (the banner says
  so) and its peers list it there;
- two agents on IPv6 loopback ([::1]:PORT) form a mesh, and an agent bound to [::] (dual
  stack) joins an IPv4 agent (skipped without IPv6 on lo);
- --retry-max: an agent whose peers never answer gives up and exits 1;
- advertising loopback to a non-loopback peer is refused with one line and exit 2.
"""
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import Mesh, parse_args, wait_until  # noqa: E402

COMMON = ["--profile", "local", "--task", "none"]


def alive_names(agent):
    m = agent.members()
    return None if m is None else {k for k, v in m.items() if v["status"] == "alive"}


def have_ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


def pair(b, prefix, seed_bind, joiner_bind, joiner_listed, what):
    """A seed bound to seed_bind and a joiner bound to joiner_bind ("{}" = port) form a mesh;
    the seed lists the joiner at joiner_listed."""
    with Mesh(b, 2, COMMON, name_prefix=prefix) as mesh:
        seed, joiner = mesh.agents
        seed.addr = seed_bind.format(seed.port)
        joiner.addr = joiner_bind.format(joiner.port)
        seed.start()
        wait_until(lambda: seed.members() is not None, 10, what=f"{what}: seed up")
        joiner.start(join=[seed.addr])
        names = {seed.name, joiner.name}
        wait_until(lambda: alive_names(seed) == names and alive_names(joiner) == names, 15,
                   what=what)
        listed = seed.members()[joiner.name]["addr"]
        assert listed == joiner_listed.format(joiner.port), listed
        print(f"{what}: {joiner.addr} joined {seed.addr}, listed at {listed}")


def run_short(b, args, timeout):
    return subprocess.run([b, "agent", *COMMON, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def main():
    b = parse_args().bin
    with Mesh(b, 3, COMMON, name_prefix="ad") as mesh:
        seed, late, wild = mesh.agents
        # 1. The join target comes up late; the joiner names it `localhost`.
        late.extra += ["--retry-join", "--retry-interval", "1s"]
        late.start(join=[f"localhost:{seed.port}"])
        time.sleep(2.5)
        assert late.alive(), late.log_tail()
        seed.start()
        took, _ = wait_until(lambda: alive_names(late) == {seed.name, late.name} and
                             alive_names(seed) == {seed.name, late.name}, 15,
                             what="late target joined by host name")
        log = open(late.log_path).read()
        assert "retry-join" in log, log
        print(f"join by name: localhost:{seed.port} joined {took:.1f} s after the target "
              f"came up (started 2.5 s before it)")
        r = late.cli("join", f"localhost:{seed.port}")
        assert r.returncode == 0 and "contacting 1 nodes" in r.stdout, (r.stdout, r.stderr)
        r = late.cli("join", "no-such-host.invalid:7950")
        assert r.returncode != 0 and "no-such-host.invalid" in r.stderr, (r.stdout, r.stderr)
        print("meshtrain join localhost:PORT: ok; an unresolvable name: one error line")

        # 2. Bound to 0.0.0.0: advertises the route's source address, 127.0.0.1 here.
        wild.addr = f"0.0.0.0:{wild.port}"
        wild.start(join=[f"localhost:{seed.port}"])
        names = {a.name for a in mesh.agents}
        wait_until(lambda: all(alive_names(a) == names for a in mesh.agents), 15,
                   what="0.0.0.0 agent in the mesh")
        banner = f"advertise: 127.0.0.1:{wild.port} (route to 127.0.0.1:{seed.port})"
        assert banner in open(wild.log_path).read(), wild.log_tail()
        assert seed.members()[wild.name]["addr"] == f"127.0.0.1:{wild.port}"
        print(f"bind 0.0.0.0: banner '{banner}', peers list it at 127.0.0.1:{wild.port}")

    # 3. IPv6 literals in brackets; a dual-stack agent ([::]) in an IPv4 mesh advertises its
    # IPv4 route address and sends to IPv4 peers through mapped addresses.
    if have_ipv6_loopback():
        pair(b, "v6-", "[::1]:{}", "[::1]:{}", "[::1]:{}", "IPv6 mesh")
        pair(b, "ds-", "127.0.0.1:{}", "[::]:{}", "127.0.0.1:{}", "dual-stack agent, IPv4 seed")
    else:
        print("IPv6 part skipped: no ::1 on this host")

    # 4. --retry-max: nobody answers at the join address; the agent gives up and exits 1.
    with Mesh(b, 2, COMMON, name_prefix="rm") as mesh:
        lone, absent = mesh.agents
        lone.extra += ["--retry-join", "--retry-interval", "300ms", "--retry-max", "3"]
        lone.start(join=[f"localhost:{absent.port}"])
        start = time.monotonic()
        rc = lone.proc.wait(timeout=30)
        took = time.monotonic() - start
        log = open(lone.log_path).read()
        assert rc == 1, (rc, log)
        assert "--retry-max" in log and "3 attempts" in log, log
        print(f"--retry-max 3: gave up and exited {rc} after {took:.1f} s")

    # 5. Loopback advertised to a remote peer: refused, one line, exit 2.
    r = run_short(b, ["--bind", "127.0.0.1:29997", "--rpc", "127.0.0.1:29998", "--join",
                      "192.0.2.1:7950"], 20)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "loopback" in lines[0], r.stderr
    print(f"loopback to a remote peer: exit 2, '{lines[0].split('] ', 1)[-1][:80]}...'")
    print("PASS")


if __name__ == "__main__":
    main()
