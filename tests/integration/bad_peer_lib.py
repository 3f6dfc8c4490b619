"""The bad-peer bed (docs/benchmarks.md "Bad peers"): 5 agents with external trainers
(bad_peer_worker.py), every peer a receiver; nodes 0-3 honest on label-skewed shards (classes
{0,1}, {1,2}, {2,3}, {3,0}), node 4 on every class (or bad_classes), honest (kind none: the clean run) or
publishing a bad model from step --bad-from on. Every trainer calls finish(); run() returns the
honest nodes' final (consensus) models' accuracy and loss, the set of final CRCs, and which
members each honest agent's `members` flags. Kind "alone": the four honest nodes without a fifth.
Used by test_bad_peer.py and bench/bad_peer.py."""
import os
import subprocess

from external_lib import external_mesh, start_all
from harness import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "bad_peer_worker.py")
SHARDS = ["0,1", "1,2", "2,3", "3,0", "0,1,2,3"]
BAD = 4  # the index of the node that may be bad


def last_json(path):
    import json
    with open(path, errors="replace") as f:
        lines = [x for x in f if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def run(binary, py, workdir, kind, robust, task="fmnist", steps=500, seed=0, bad_from=50,
        lr=1e-3, timeout=900, prefix="bp", bad_classes=SHARDS[BAD]):
    # "alone": the four honest nodes without the fifth (where a mesh that lost it stands).
    mesh = external_mesh(binary, BAD if kind == "alone" else BAD + 1, prefix, 4)
    if robust:  # off is the default (and an agent that predates --robust runs off)
        mesh.common += ["--robust", "on"]
    procs, logs = [], []
    with mesh:
        start_all(mesh)
        try:
            for i, a in enumerate(mesh.agents):
                wait_until(lambda: os.path.exists(a.socket), 10, what=f"{a.socket} exists")
                logs.append(os.path.join(workdir, f"{prefix}-{kind}-{robust}-{i}.out"))
                classes = bad_classes if i == BAD else SHARDS[i]
                args = ["--socket", a.socket, "--task", task, "--classes", classes,
                        "--steps", steps, "--seed", seed, "--lr", lr,
                        "--bad", kind if i == BAD else "none", "--bad-from", bad_from]
                with open(logs[-1], "wb") as out:
                    procs.append(subprocess.Popen([py, WORKER, *map(str, args)], stdout=out,
                                                  stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL))
            for p in procs:
                p.wait(timeout=timeout)
            outs = [last_json(x) for x in logs]
            missing = [logs[i] for i, o in enumerate(outs) if o is None]
            if missing:
                tails = "".join(open(x, errors="replace").read()[-1500:] for x in missing)
                raise AssertionError(f"a trainer printed no result: {missing}\n{tails}")
            flagged = []
            for a in mesh.agents[:BAD]:
                rows = a.members() or {}
                flagged.append(sorted(n for n, m in rows.items() if m.get("flagged")))
            statuses = [a.status() for a in mesh.agents]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    honest = outs[:BAD]
    return {"kind": kind, "robust": robust,
            "accuracy": [o["accuracy"] for o in honest],
            "loss": [o["loss"] for o in honest],
            "crcs": {o["crc"] for o in outs},
            "models": [o["models"] for o in outs],
            "flagged": flagged,
            "culprit": mesh.agents[BAD].name if len(mesh.agents) > BAD else None,
            "robust_status": [s.get("robust", {}) for s in statuses]}
