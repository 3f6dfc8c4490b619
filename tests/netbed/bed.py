"""A test bed of hosts as network namespaces joined by emulated links (stdlib only, needs root).

    with Bed(4, delay_ms=10, rate_mbit=20) as bed:       # 40 ms RTT between any two hosts
        p = bed.spawn(0, [binary, "agent", "--bind", f"{bed.addr(0)}:7950", ...], log_path)
        r = bed.run(1, [binary, "status", "--rpc", "127.0.0.1:7951"])

Layout: one namespace per host (mt<pid>-<tag>-h<i>) with loopback and eth0 = 10.213.17.<i+1>/24
(the subnet exists only inside these namespaces; no default route, so nothing leaves them), and
one switch namespace running tests/tools/linkemu, a user-space switch whose TAP ports become the
hosts' eth0. This kernel has tbf/htb but no netem, so delay, jitter, loss and per-direction rates
come from linkemu: one-way delay A->B = delay(A) + delay(B); every host link has its own rate both
ways. `set_link(i, ...)` changes a host's link at run time (loss=1 cuts it: a partition).
`trains()` says at what rate linkemu actually delivered the agents' link-capacity probe trains:
on a busy machine the emulator may not keep up with a fast link, and a test then judges the
agents' estimates against what the links delivered, not against their configured rates.

Cleanup, also on failure or SIGTERM: every process the bed spawned is killed by PID, linkemu is
stopped (its TAPs vanish with it), every namespace is deleted. `available()` says why a bed cannot
be built here (not root, no `ip`, no /dev/net/tun, no linkemu binary), for a clean skip.

NAT: `nat={i: "cone" | "symmetric"}` puts host i behind its own router. The namespace
mt...-h<i> then is the router (its eth0 keeps the public bed address 10.213.17.<i+1>), and the
host itself is an inner namespace mt...-n<i> on a private subnet 198.18.<i>.0/24 (inner address
198.18.<i>.2, router 198.18.<i>.1, joined by a veth pair; default route via the router). The
router forwards (ip_forward) and translates with nftables: "cone" = `masquerade` (Linux keeps
the source port when it is free: one public port per inner socket, the same for every
destination), "symmetric" = `masquerade random` (a random public port per destination). Its
forward and input policies drop, admitting from outside only packets of established or related
flows (ct state), so nothing outside can open a flow to an inner host. spawn/run/addr of host i
use the inner namespace; `public_addr(i)` is the router's address. `nat_available()` says why
NAT routers cannot be built (no `nft`, nft refused in a namespace).
"""
import atexit
import os
import shutil
import signal
import subprocess
import time

SUBNET = "10.213.17"
NAT_SUBNET = "198.18"
NAT_KINDS = ("cone", "symmetric")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          stdin=subprocess.DEVNULL, timeout=20)


def find_linkemu(binary):
    """linkemu next to the meshtrain binary's build tree (build/tests/linkemu)."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    return os.path.join(build, "tests", "linkemu")


def available(linkemu):
    """None when a bed can be built here, else the reason."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if not os.access(linkemu, os.X_OK):
        return f"no link emulator at {linkemu} (build the linkemu target)"
    probe = f"mtprobe{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _nat_ruleset(kind):
    random = " random" if kind == "symmetric" else ""
    return f"""
table ip nat {{
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname "eth0" masquerade{random}
  }}
}}
table inet filter {{
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname "lan0" oifname "eth0" accept
  }}
  chain input {{
    type filter hook input priority filter; policy drop;
    ct state established,related accept
    iifname "lo" accept
  }}
}}
"""


def nat_available():
    """None when NAT routers can be built here (after available() said a bed can), else why."""
    if shutil.which("nft") is None:
        return "no `nft` (nftables)"
    probe = f"mtnatprobe{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        r = subprocess.run(["ip", "netns", "exec", probe, "nft", "-f", "-"],
                           input=_nat_ruleset("cone"), capture_output=True, text=True,
                           timeout=20)
        if r.returncode != 0:
            return f"nft refused a NAT ruleset in a namespace: {r.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


class Bed:
    def __init__(self, n, linkemu, delay_ms=0.0, rate_mbit=0.0, loss=0.0, jitter_ms=0.0,
                 links=None, tag="bed", queue_ms=200, nat=None):
        """links: optional list of per-host dicts overriding delay_ms/rate_mbit/loss/jitter_ms;
        nat: optional {host index: "cone" | "symmetric"} (see the module's notes)."""
        if n < 2 or n > 200:
            raise ValueError("a bed has 2..200 hosts")
        self.nat = dict(nat or {})
        for i, kind in self.nat.items():
            if not 0 <= i < n or kind not in NAT_KINDS:
                raise ValueError(f"bad NAT spec {i}: {kind!r}")
        self.n = n
        self.linkemu_path = linkemu
        self.prefix = f"mt{os.getpid()}-{tag}"
        self.switch_ns = f"{self.prefix}-sw"
        self.hosts = [f"{self.prefix}-h{i}" for i in range(n)]
        # Where host i's processes run: its inner namespace when it is behind NAT.
        self.inner = {i: f"{self.prefix}-n{i}" for i in self.nat}
        self.links = []
        for i in range(n):
            p = {"delay_ms": delay_ms, "rate_mbit": rate_mbit, "loss": loss, "jitter_ms": jitter_ms}
            if links and i < len(links) and links[i]:
                p.update(links[i])
            self.links.append(p)
        self.queue_ms = queue_ms
        self.procs = []
        self.emu = None
        self.made = []
        self.hosts_files = []
        self.seen_trains = []
        self._closed = False

    def addr(self, i):
        """Host i's own address: the private inner one behind NAT."""
        return f"{NAT_SUBNET}.{i}.2" if i in self.nat else self.public_addr(i)

    def public_addr(self, i):
        """The bed address of host i's port (its router's, behind NAT)."""
        return f"{SUBNET}.{i + 1}"

    def ns(self, i):
        """The namespace host i's processes run in."""
        return self.inner.get(i, self.hosts[i])

    def __enter__(self):
        atexit.register(self.close)
        self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _on_term(self, signum, frame):
        self.close()
        raise SystemExit(128 + signum)

    def _port_spec(self, i):
        p = self.links[i]
        return (f"t{i}:{p['delay_ms']}:{p['rate_mbit']}:{p['loss']}:{p['jitter_ms']}")

    def _build(self):
        for ns in [self.switch_ns] + self.hosts:
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        # The wire runs at real-time priority (SCHED_FIFO): on real hosts the network is other
        # hardware, here it shares the cores with the agents, and a starved switch capped every
        # link at 20-35 Mbit/s while six agents trained (the kernel's RT throttling still leaves
        # the agents 5 % of each core should it spin).
        rt = ["chrt", "-f", "20"] if shutil.which("chrt") else []
        args = ["ip", "netns", "exec", self.switch_ns, *rt, self.linkemu_path,
                "--queue-ms", str(self.queue_ms)]
        for i in range(self.n):
            args += ["--port", self._port_spec(i)]
        self.emu = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        line = self.emu.stdout.readline().strip()
        if line != "ready":
            err = self.emu.stderr.read() if self.emu.poll() is not None else ""
            raise RuntimeError(f"linkemu did not start: {line!r} {err.strip()}")
        for i, ns in enumerate(self.hosts):
            _ip("-n", self.switch_ns, "link", "set", f"t{i}", "netns", ns)
            _ip("-n", ns, "link", "set", f"t{i}", "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.public_addr(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        for i, kind in sorted(self.nat.items()):
            self._build_nat(i, kind)

    def _build_nat(self, i, kind):
        router, inner = self.hosts[i], self.inner[i]
        _ip("netns", "add", inner)
        self.made.append(inner)
        _ip("-n", inner, "link", "set", "lo", "up")
        _ip("-n", router, "link", "add", "lan0", "type", "veth", "peer", "name", "eth0",
            "netns", inner)
        _ip("-n", router, "addr", "add", f"{NAT_SUBNET}.{i}.1/24", "dev", "lan0")
        _ip("-n", router, "link", "set", "lan0", "up")
        _ip("-n", inner, "addr", "add", f"{NAT_SUBNET}.{i}.2/24", "dev", "eth0")
        _ip("-n", inner, "link", "set", "eth0", "up")
        _ip("-n", inner, "route", "add", "default", "via", f"{NAT_SUBNET}.{i}.1")
        subprocess.run(["ip", "netns", "exec", router, "sysctl", "-qw",
                        "net.ipv4.ip_forward=1"], check=True, capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "exec", router, "nft", "-f", "-"],
                       input=_nat_ruleset(kind), check=True, capture_output=True, text=True,
                       timeout=20)

    def nat_table(self, i):
        """The router's conntrack-visible rules and counters (`nft list ruleset`), for logs."""
        return subprocess.run(["ip", "netns", "exec", self.hosts[i], "nft", "list", "ruleset"],
                              capture_output=True, text=True, timeout=20).stdout

    def set_hosts_file(self, entries):
        """Per-namespace /etc/hosts (ip netns exec bind-mounts /etc/netns/<ns>/hosts):
        entries = {name: host index}."""
        text = "127.0.0.1 localhost\n" + "".join(
            f"{self.public_addr(i)} {name}\n" for name, i in sorted(entries.items()))
        for ns in self.hosts + list(self.inner.values()):
            d = os.path.join("/etc/netns", ns)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "hosts"), "w") as f:
                f.write(text)
            self.hosts_files.append(d)

    def set_link(self, i, delay_ms=None, rate_mbit=None, loss=None, jitter_ms=None):
        p = self.links[i]
        for k, v in (("delay_ms", delay_ms), ("rate_mbit", rate_mbit), ("loss", loss),
                     ("jitter_ms", jitter_ms)):
            if v is not None:
                p[k] = v
        self.emu.stdin.write(f"set t{i} {p['delay_ms']} {p['rate_mbit']} {p['loss']} "
                             f"{p['jitter_ms']}\n")
        self.emu.stdin.flush()
        ack = self.emu.stdout.readline().strip()
        if ack != f"ok t{i}":
            raise RuntimeError(f"linkemu did not take the change: {ack!r}")

    def trains(self):
        """The link-capacity probe trains linkemu saw finish since the last call, as dicts:
        src/dst host index, flow, datagrams read (n_in) and written (n_out), the rates they were
        read (in_mbit) and written at (out_mbit: what the receiver's kernel saw), how late the
        emulator wrote them at worst (late_ms), the longest pause between two of them as written
        (gap_ms) and how many pauses of 100 ms or more (pauses: a receiver may have taken one for
        the train's end), and `at` (time.monotonic() of the last one).
        All of them so far are in self.seen_trains."""
        self.emu.stdin.write("trains\n")
        self.emu.stdin.flush()
        now = time.monotonic()
        got = []
        while True:
            line = self.emu.stdout.readline()
            if not line:
                raise RuntimeError("linkemu went away")
            f = line.split()
            if f == ["end"]:
                break
            if len(f) != 12 or f[0] != "train":
                raise RuntimeError(f"linkemu: unexpected {line!r}")
            port = {f"t{i}": i for i in range(self.n)}
            got.append({"src": port.get(f[1]), "dst": port.get(f[2]), "flow": f[3],
                        "n_in": int(f[4]), "n_out": int(f[5]), "in_mbit": float(f[6]),
                        "out_mbit": float(f[7]), "late_ms": float(f[8]),
                        "gap_ms": float(f[9]), "pauses": int(f[10]),
                        "at": now - float(f[11]) / 1e3})
        self.seen_trains.extend(got)
        return got

    def spawn(self, i, argv, log_path, env=None):
        """Starts argv in host i's namespace (stdout+stderr to log_path); ended by close()."""
        log = open(log_path, "ab")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(i), *argv], stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        log.close()
        self.procs.append(p)
        return p

    def run(self, i, argv, timeout=20):
        return subprocess.run(["ip", "netns", "exec", self.ns(i), *argv], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def stop(self, p, sig=signal.SIGKILL, timeout=10):
        if p.poll() is None:
            try:
                os.kill(p.pid, sig)
                if sig == signal.SIGKILL:
                    os.kill(p.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)

    def emulator_report(self):
        return self._report if hasattr(self, "_report") else ""

    def close(self):
        if self._closed:
            return
        self._closed = True
        for p in self.procs:
            try:
                self.stop(p)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.emu is not None and self.emu.poll() is None:
            self.emu.send_signal(signal.SIGTERM)
            try:
                _, err = self.emu.communicate(timeout=10)
                self._report = err
            except subprocess.TimeoutExpired:
                self.emu.kill()
                self.emu.wait(timeout=10)
        for ns in reversed(self.made):
            # Anything still inside (a process spawned around the bed) is killed by PID first.
            r = _ip("netns", "pids", ns, check=False)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)
        for d in self.hosts_files:
            shutil.rmtree(d, ignore_errors=True)
        try:
            signal.signal(signal.SIGTERM, self._old_term)
        except (AttributeError, ValueError):
            pass
