"""Hostile input against a live agent, on loopback, with and without --metrics-file.

A single plaintext datagram whose AliveUpdate name is not valid UTF-8 used to abort an agent (the
JSON event writer threw inside the libuv receive callback). This test sends that datagram and the
same trick in other places: SuspectUpdate.from, DeadUpdate.from, a push-pull frame with an invalid
member name and a parameter-chunk frame whose envelope sender is invalid (both over TCP), and RPC
requests with invalid UTF-8 in a force-leave member name and in join addresses. After each, the
agent must still be alive, answer `status`, and count the input in `rejected_packets` (and, for
RPC, in `rejected_by_reason.rpc`).

The hostile bytes come from tests/tools/hostile_packets (built next to the test binaries; path
overridable with MESHTRAIN_HOSTILE_PACKETS).
"""
import json
import os
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import Mesh, parse_args, wait_until  # noqa: E402


def hostile_tool(binary):
    env = os.environ.get("MESHTRAIN_HOSTILE_PACKETS")
    if env:
        return env
    build = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    return os.path.join(build, "tests", "hostile_packets")


def hostile_cases(tool):
    out = subprocess.run([tool], capture_output=True, text=True, check=True, timeout=30).stdout
    cases = []
    for line in out.splitlines():
        name, kind, hexbytes = line.split()
        cases.append((name, kind, bytes.fromhex(hexbytes)))
    assert {c[0] for c in cases} == {"alive_name", "suspect_from", "dead_from", "pushpull_name",
                                     "chunk_sender"}, cases
    return cases


def send_udp(addr, payload):
    host, port = addr.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(payload, (host, int(port)))
    finally:
        s.close()


def send_frame(addr, payload, want_reply=False):
    """Sends one length-prefixed frame; returns the reply frame's payload (or None)."""
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    try:
        s.sendall(struct.pack(">I", len(payload)) + payload)
        if not want_reply:
            # The agent aborts the connection after a rejected frame: wait for that.
            try:
                while s.recv(4096):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
            return None
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf[4:]
    finally:
        s.close()


def counters(agent):
    st = agent.status()
    assert st is not None, f"{agent.name} does not answer status"
    return st["rejected_packets"], st["rejected_by_reason"].get("rpc", 0)


def check_survives(agent, what, before, rpc=False):
    """The agent is alive, answers status, and its rejection counter grew."""
    def grown():
        if not agent.alive():
            raise AssertionError(f"agent died after {what} (exit {agent.proc.poll()}):\n"
                                 f"{agent.log_tail(10)}")
        c = agent.status()
        if c is None:
            return None
        now = (c["rejected_packets"], c["rejected_by_reason"].get("rpc", 0))
        ok = now[0] > before[0] and (not rpc or now[1] > before[1])
        return now if ok else None
    _, now = wait_until(grown, 10, interval=0.1, what=f"rejection of {what} counted")
    print(f"  {what}: alive, rejected_packets {before[0]} -> {now[0]}, rpc {before[1]} -> {now[1]}")
    return now


def run(binary, cases, metrics):
    with Mesh(binary, 1, ["--profile", "local", "--task", "none"], name_prefix="hostile") as mesh:
        agent = mesh.agents[0]
        if metrics:
            agent.extra += ["--metrics-file", os.path.join(mesh.workdir, "metrics.jsonl")]
        agent.start()
        wait_until(lambda: agent.status() is not None, 15, what="agent up")
        print(f"agent {'with' if metrics else 'without'} --metrics-file")
        before = counters(agent)
        # Capacity probe datagrams (marker 'P', daemon/link_prober.h) that are not probes.
        cases = list(cases) + [
            ("probe marker alone", "udp", b"P"),
            ("probe header length past the end", "udp", b"P\xff\xff" + b"\x00" * 40),
            ("probe junk header", "udp", b"P\x00\x20" + bytes(range(32)) + b"\x00" * 1000),
            ("probe sealed marker without key", "udp", b"P\x00\x30\xa1" + b"\x07" * 47),
        ]
        for name, kind, payload in cases:
            if kind == "udp":
                send_udp(agent.addr, payload)
            else:
                send_frame(agent.addr, payload)
            before = check_survives(agent, f"{kind} {name} ({len(payload)} bytes)", before)

        # RPC: raw invalid UTF-8 inside JSON strings, and a lone surrogate escape.
        requests = [
            ("force-leave name", b'{"cmd":"force-leave","name":"\xff\xfe\xfd"}'),
            ("force-leave surrogate", b'{"cmd":"force-leave","name":"\\udcff"}'),
            ("join addr", b'{"cmd":"join","addrs":["127.0.0.1:\xff\xfe\xfd"]}'),
            ("join overlong", b'{"cmd":"join","addrs":["\xc0\xaf127.0.0.1:1"]}'),
        ]
        for what, body in requests:
            reply = send_frame(agent.rpc, body, want_reply=True)
            assert reply, f"no RPC reply to {what}"
            r = json.loads(reply.decode("utf-8"))  # the reply itself is valid UTF-8 JSON
            assert r.get("ok") is False and r.get("error"), r
            before = check_survives(agent, f"rpc {what}", before, rpc=True)

        # The membership list has no trace of the hostile names.
        members = agent.members()
        assert members is not None and set(members) == {agent.name}, members
        if metrics:
            with open(os.path.join(mesh.workdir, "metrics.jsonl"), "rb") as f:
                for line in f:
                    json.loads(line.decode("utf-8"))  # every line is valid UTF-8 JSON
        assert agent.alive()


def main():
    args = parse_args()
    tool = hostile_tool(args.bin)
    assert os.access(tool, os.X_OK), f"missing {tool}: build the hostile_packets target"
    cases = hostile_cases(tool)
    for metrics in (True, False):
        run(args.bin, cases, metrics)
    print("hostile input: the agent survived every case and counted it")


if __name__ == "__main__":
    main()
