#!/usr/bin/env python3
"""Structured logs and tags on two agents on loopback: --log-format json (every stderr line of j1 is
a JSON object with ts/level/node/msg) and --tag (gossiped; j1's `members --format json` shows j2's
tags; `members --tag KEY=REGEX` filters; bad tags and bad regexes exit 2)."""
import argparse
import json
import subprocess
import sys
import tempfile
import time

BIND1, RPC1 = "127.0.0.1:24731", "127.0.0.1:24732"
BIND2, RPC2 = "127.0.0.1:24741", "127.0.0.1:24742"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    binary = ap.parse_args().bin

    bad = subprocess.run([binary, "agent", "--log-format", "xml"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2, bad
    assert "invalid --log-format" in bad.stderr, bad.stderr
    for tags in [["noequals"], ["bad key=1"], ["a=1", "a=2"], ["k=" + "v" * 65]]:
        args = [binary, "agent", "--task", "none"]
        for t in tags:
            args += ["--tag", t]
        r = subprocess.run(args, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "invalid --tag" in r.stderr, (tags, r)
    r = subprocess.run([binary, "members", "--rpc", RPC1, "--tag", "zone=(["], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "invalid --tag regex" in r.stderr, r

    common = ["--profile", "local", "--task", "none", "--log-level", "debug"]
    procs = []
    log = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a full pipe would block j1
    try:
        procs.append(subprocess.Popen(
            [binary, "agent", "--name", "j1", "--bind", BIND1, "--rpc", RPC1,
             "--log-format", "json"] + common,
            stdout=subprocess.DEVNULL, stderr=log))
        time.sleep(0.5)
        procs.append(subprocess.Popen(
            [binary, "agent", "--name", "j2", "--bind", BIND2, "--rpc", RPC2,
             "--join", BIND1, "--tag", "zone=eu-west-1", "--tag", "rack=r7 \u00e9"] + common,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # Bounded wait until j1 sees j2 alive.
        deadline = time.time() + 60
        seen = False
        while time.time() < deadline and not seen:
            out = subprocess.run([binary, "members", "--rpc", RPC1, "--format", "json"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and '"j2"' in out.stdout:
                seen = any(m["name"] == "j2" and m["tags"]
                           for m in json.loads(out.stdout)["members"])
            else:
                time.sleep(0.5)
        assert seen, "j2 never appeared with its tags in j1's members"

        def members(*args):
            out = subprocess.run([binary, "members", "--rpc", RPC1, "--format", "json"] +
                                 list(args), capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out
            return {m["name"]: m for m in json.loads(out.stdout)["members"]}

        every = members()
        assert every["j2"]["tags"] == {"zone": "eu-west-1", "rack": "r7 \u00e9"}, every
        assert every["j1"]["tags"] == {}, every
        assert set(members("--tag", "zone=eu-.*")) == {"j2"}
        assert set(members("--tag", "zone=eu")) == set()  # whole-value match
        assert set(members("--tag", "zone=eu-.*", "--tag", "rack=r[0-9] .+")) == {"j2"}
        assert set(members("--tag", "missing=.*")) == set()
        table = subprocess.run([binary, "members", "--rpc", RPC1], capture_output=True,
                               text=True, timeout=30)
        assert table.returncode == 0, table
        table = table.stdout
        assert "rack=r7 \u00e9,zone=eu-west-1" in table, repr(table)
        print("ok: tags round-trip through gossip and members --format json; filters work")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    log.seek(0)
    lines = [l for l in log.read().splitlines() if l.strip()]
    assert lines, "the json agent logged nothing"
    levels = set()
    for line in lines:
        obj = json.loads(line)  # raises on any non-JSON line
        assert set(obj) == {"ts", "level", "node", "msg"}, obj
        assert obj["node"] == "j1", obj
        assert obj["ts"].endswith("Z") and obj["ts"][10] == "T", obj
        levels.add(obj["level"])
    print(f"ok: {len(lines)} json log lines, levels {sorted(levels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
