#!/usr/bin/env python3
"""--log-format json (issue 19): two agents on loopback, every stderr line of the json one is
a JSON object with ts/level/node/msg; a bad value exits 2 with a one-line error."""
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
             "--join", BIND1] + common,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # Bounded wait until j1 sees j2 alive.
        deadline = time.time() + 60
        seen = False
        while time.time() < deadline and not seen:
            out = subprocess.run([binary, "members", "--rpc", RPC1, "--format", "json"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and '"j2"' in out.stdout:
                seen = True
            else:
                time.sleep(0.5)
        assert seen, "j2 never appeared in j1's members"
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
