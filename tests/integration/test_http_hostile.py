#!/usr/bin/env python3
"""Malformed HTTP against an agent's --http endpoint never stops the agent or its
gossip. Two training agents; against n1's endpoint: huge headers, bad and unknown methods, a
garbage request line, a body on GET, a path that does not exist, then a slowloris attack (20
connections from 127.0.0.9 trickling header bytes for 30 s). Meanwhile n1 must keep answering
/metrics to a client on another address, keep its peer alive, and keep stepping. Prints what
each request got (the figures for the closing note)."""
import os
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

SLOW_SOURCE = "127.0.0.9"


def raw(host, port, payload, timeout=5.0, source=None):
    """Sends payload, returns the status line (or what happened)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        if source:
            s.bind((source, 0))
        s.connect((host, port))
        s.sendall(payload)
        data = b""
        while b"\r\n" not in data and len(data) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        if not data:
            return "connection closed without a response"
        return data.split(b"\r\n", 1)[0].decode(errors="replace")
    except (ConnectionResetError, BrokenPipeError):
        return "connection reset"
    except socket.timeout:
        return "no answer (timeout)"
    finally:
        s.close()


def main():
    args = harness.parse_args()
    with harness.Mesh(args.bin, 2, common=["--profile", "local", "--task", "fmnist-mlp",
                                           "--barrier", "pssp", "--eval-every", "50",
                                           "--slowdown", "3"]) as mesh:
        port = harness.free_port_block(1, start=mesh.agents[0].port + 4)
        n1, n2 = mesh.agents
        n1.extra = ["--shard", "0/2", "--http", f"127.0.0.1:{port}"]
        n2.extra = ["--shard", "1/2"]
        n1.start()
        n2.start(join=[n1.addr])
        harness.wait_until(lambda: (n1.members() or {}).get("n2", {}).get("status") == "alive",
                           30, 0.2, "n2 alive at n1")

        def metrics_ok():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.status == 200 and b"meshtrain_step" in r.read()

        assert metrics_ok()
        cases = [
            ("huge headers (200 KiB)", b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " +
             b"a" * 200000 + b"\r\n\r\n"),
            ("10 000 small headers", b"GET / HTTP/1.1\r\nHost: x\r\n" +
             b"".join(b"X-%d: v\r\n" % i for i in range(10000)) + b"\r\n"),
            ("POST with a body", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
             b"\r\nhello"),
            ("DELETE", b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n"),
            ("unknown method BREW", b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n"),
            ("garbage request line", b"\x00\xff\xfeNOT HTTP AT ALL\r\n\r\n"),
            ("HTTP/9.9", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n"),
            ("GET with a body", b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"),
            ("unknown path", b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"),
            ("negative Content-Length", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
        ]
        results = []
        for what, payload in cases:
            got = raw("127.0.0.1", port, payload)
            results.append((what, got))
            assert not got.startswith("HTTP/1.1 200") or what == "GET with a body", (what, got)
            assert n1.alive(), f"agent died after: {what}"
        for what, got in results:
            print(f"  {what:28s} -> {got}")
        assert "405" in dict(results)["DELETE"] and "405" in dict(results)["POST with a body"]
        assert "404" in dict(results)["unknown path"]
        assert metrics_ok()

        # Slowloris: 20 connections from another source address trickle one header byte each
        # every 2 s for 30 s.
        step0 = n1.status()["step"]
        socks, refused = [], 0
        for _ in range(20):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(3)
            try:
                s.bind((SLOW_SOURCE, 0))
                s.connect(("127.0.0.1", port))
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                refused += 1
                s.close()
        deadline = time.monotonic() + 30
        served, slowest, closed = 0, 0.0, 0
        n = 0
        while time.monotonic() < deadline and n < 100:
            n += 1
            for s in list(socks):
                try:
                    s.sendall(b"X")
                except OSError:
                    closed += 1
                    socks.remove(s)
                    s.close()
            t0 = time.monotonic()
            assert metrics_ok(), "the agent stopped serving /metrics to other clients"
            slowest = max(slowest, time.monotonic() - t0)
            served += 1
            m = n1.members() or {}
            assert m.get("n2", {}).get("status") == "alive", f"gossip disturbed: {m}"
            time.sleep(2)
        held = len(socks)
        for s in socks:
            s.close()
        step1 = n1.status()["step"]
        assert step1 > step0, f"n1 stopped stepping under slowloris ({step0} -> {step1})"
        print(f"  slowloris (20 conns from {SLOW_SOURCE}, 30 s): {refused} refused at connect, "
              f"{closed} closed by the agent, {held} still open at the end (per-address limit "
              f"16); /metrics from 127.0.0.1 answered {served}/{served}, slowest {slowest:.3f} s;"
              f" n2 alive throughout; n1 stepped {step0} -> {step1}")
        st = n1.status()
        print(f"  agent after the attacks: alive, step {st['step']}, peers_alive "
              f"{st['peers_alive']}")
    print("ok")


if __name__ == "__main__":
    main()
