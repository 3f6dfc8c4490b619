"""The keyring persists in --data-dir: a key rotation survives a restart.

An agent started with --encrypt K1 --data-dir D rotates to K2 (`meshtrain keys --install K2`,
`--use K2`, `--remove K1`), leaves (SIGINT: exit 0), and is started again with the same stale
--encrypt K1. Checks that D/keyring holds one key with mode 0600, the agent warns that it uses the
persisted keyring, an agent that only knows K2 joins it, and one that only knows K1 cannot (its
datagrams are rejected as auth).
"""
import os
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import Mesh, parse_args, wait_until  # noqa: E402


def keygen(b):
    return subprocess.run([b, "keygen"], capture_output=True, text=True, check=True).stdout.strip()


def main():
    b = parse_args().bin
    k1, k2 = keygen(b), keygen(b)
    with Mesh(b, 3, ["--profile", "local", "--task", "none"], name_prefix="kr") as mesh:
        a, new, old = mesh.agents
        data = os.path.join(mesh.workdir, "a-data")
        a.extra += ["--encrypt", k1, "--data-dir", data]
        a.start()
        wait_until(lambda: a.status() is not None, 10, what="agent up")
        for op in (["--install", k2], ["--use", k2], ["--remove", k1]):
            r = a.cli("keys", *op)
            assert r.returncode == 0, (op, r.stdout, r.stderr)
        a.signal(signal.SIGINT)
        assert a.proc.wait(timeout=20) == 0, a.log_tail()
        path = os.path.join(data, "keyring")
        mode = stat.S_IMODE(os.stat(path).st_mode)
        with open(path) as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        assert lines == [k2], "the keyring file should hold exactly the new key"
        assert mode == 0o600, oct(mode)
        print(f"keyring after rotation: {path}, 1 key (K2), mode {oct(mode)}")

        a.start()  # the same stale --encrypt K1
        wait_until(lambda: a.status() is not None, 10, what="agent restarted")
        assert "using the keyring in" in open(a.log_path).read(), a.log_tail()
        new.extra += ["--encrypt", k2]
        new.start(join=[a.addr])
        names = {a.name, new.name}

        def formed():
            m = a.members()
            return m is not None and {k for k, v in m.items() if v["status"] == "alive"} == names
        took, _ = wait_until(formed, 15, what="a K2-only agent joins the restarted agent")
        print(f"restarted with --encrypt K1: a K2-only agent joined in {took:.1f} s")

        old.extra += ["--encrypt", k1]
        old.start(join=[a.addr])
        wait_until(lambda: (a.status() or {}).get("rejected_by_reason", {}).get("auth", 0) > 0,
                   10, what="K1-only agent rejected")
        time.sleep(1)
        m = a.members()
        assert old.name not in m, m
        print(f"a K1-only agent cannot join: rejected as auth "
              f"{a.status()['rejected_by_reason']['auth']} times, absent from the members")
    print("PASS")


if __name__ == "__main__":
    main()
