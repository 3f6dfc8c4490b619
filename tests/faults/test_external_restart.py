"""Restarts and dead trainers with external trainers (ext_worker.py, numpy), each agent with its
own --data-dir (the trainer's parameters checkpointed every CKPT_EVERY steps):

1. A node restarted mid-run and again as the mesh finishes: 4 agents train to STEPS and call
   finish(). n4's agent and trainer are killed -9 mid-run and restarted 2 s later with the same
   name, port and data dir: its trainer attaches resuming from the agent's checkpoint (step > 0)
   and the node steps on from the mesh's step. Then n4 is killed again just before the others
   finish and restarted once they have, waiting for it (it failed while training: `consensus`
   `awaiting` names it): it resumes (not at 0), its trainer finishes, and all four agents end
   with one consensus model (same crc32, 4 participants), the one every trainer's finish()
   returned.
2. Trainers that end for good at step DIE_AT of DEAD_STEPS on 2 of 5 nodes (their agents stay
   up, --trainer-grace GRACE_S): one refused (it published NaN parameters), one that exits. The
   other three finish with one consensus model of 3 within END_S of the last finish() call (the
   grace ran out long before); the two agents say `trainer_absent`, their peers list them
   `absent` and their consensus `left_out` names them.
3. A whole-mesh restart: 3 agents and their trainers killed -9 at once at step >= KILL_AT, all
   restarted: every trainer resumes at >= the newest checkpoint of its agent (not 0), and the run
   ends with one consensus model. The same for the built-in trainer (the synthetic task).
"""
import json
import os
import sys
import time

from faults_lib import (Mesh, checkpoint_step, events, kill9, parse_args, wait_until,
                        with_data_dirs)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from external_lib import (Worker, Workers, external_mesh, require_numpy_python,  # noqa: E402
                          start_all)

STEPS = 600
CKPT_EVERY = 50
DIE_AT = 70
DEAD_STEPS = 1000
GRACE_S = 3
KILL_AT = 500
# The consensus after the last node finished: gossip of `training: false` and `absent`, the
# final transfers and the reduce (a few seconds on a busy machine; the grace comes on top).
END_S = 60


def worker_args(steps=STEPS, *extra):
    return ["--steps", steps, "--sleep", "0.02", "--dim", 2000, "--finish", *extra]


def restart(agent):
    """Starts a killed agent again (same name, port, data dir) and waits until it serves."""
    agent.start()
    wait_until(lambda: os.path.exists(agent.socket) and agent.status() is not None, 30,
               what=f"{agent.name} serving again")


def attached(w):
    ev = w.event("attached")
    return ev and ev["step"]


def statuses(agents):
    return {a.name: a.status() for a in agents}


def consensus_of(st):
    c = st["consensus"]
    return c["state"], c["crc32"], c["participants"]


def wait_consensus(agents, n, timeout):
    def done():
        sts = statuses(agents)
        if any(s is None for s in sts.values()):
            return None
        cs = [consensus_of(s) for s in sts.values()]
        ok = all(st in ("serving", "adopted") and parts == n for st, _, parts in cs) and \
            len({crc for _, crc, _ in cs}) == 1
        return sts if ok else None
    return wait_until(done, timeout, interval=0.3, what=f"one consensus model of {n} nodes")


def start(mesh):
    """start_all, then until every agent serves its trainer socket."""
    start_all(mesh)
    wait_until(lambda: all(os.path.exists(getattr(a, "socket", "")) or not hasattr(a, "socket")
                           for a in mesh.agents), 20, what="the trainer sockets")


def on_disk(agent):
    """The newest checkpoint's step in the agent's data dir (a kill between the rotation's two
    renames leaves only the previous file, which the agent then resumes from)."""
    steps = [checkpoint_step(os.path.join(agent.data_dir, f)) for f in ("ckpt.bin", "ckpt.prev.bin")]
    return max((x for x in steps if x is not None), default=None)


def step_of(agent):
    st = agent.status()
    return st["step"] if st else 0


def restart_mid_run_and_at_end(py, binary):
    with external_mesh(binary, 4, "rr", staleness=4) as mesh, Workers() as ws:
        for a in mesh.agents:
            a.extra += ["--checkpoint-every", str(CKPT_EVERY)]
        with_data_dirs(mesh)
        start(mesh)
        for a in mesh.agents:
            ws.append(Worker(py, a, mesh.workdir, *worker_args()))
        victim, others = mesh.agents[3], mesh.agents[:3]
        wait_until(lambda: checkpoint_step(os.path.join(victim.data_dir, "ckpt.bin")), 60,
                   what="n4's first checkpoint")
        wait_until(lambda: step_of(victim) >= 2 * CKPT_EVERY, 60, what="n4 past two checkpoints")
        kill9(victim)
        ws[3].stop()
        ckpt = on_disk(victim)
        time.sleep(2)
        restart(victim)
        ws.append(Worker(py, victim, mesh.workdir, *worker_args(), tag="-2"))
        first = wait_until(lambda: attached(ws[-1]) is not None and ws[-1].event("attached"), 30,
                           what="the restarted trainer attached")[1]
        print(f"restart 1: killed past step {2 * CKPT_EVERY}, checkpoint on disk at {ckpt}; "
              f"trainer attached at step {first['step']} (resumed {first['resumed']})")
        assert first["resumed"] and first["step"] >= ckpt > 0, first
        # Again just before the others finish; back once they have.
        wait_until(lambda: min(step_of(a) for a in others) >= STEPS - 60, 120, interval=0.05,
                   what="the others near the end")
        kill9(victim)
        ws[-1].stop()
        ckpt = on_disk(victim)
        # They finish and wait for n4 (up to --trainer-grace, 60 s): no consensus without it.
        wait_until(lambda: all((st := a.status()) and st["consensus"]["awaiting"] == [victim.name]
                               for a in others), 120, what="the other three waiting for n4")
        assert all(w.proc.poll() is None for w in ws[:3]), "a trainer's finish() returned early"
        restart(victim)
        ws.append(Worker(py, victim, mesh.workdir, *worker_args(), tag="-3"))
        wait_until(lambda: ws[-1].proc.poll() is not None, 120, what="the restarted trainer done")
        last = ws[-1].event("attached")
        done = ws[-1].event("done")
        print(f"restart 2 (the others finished): checkpoint at {ckpt}; attached at step "
              f"{last['step']}, done at step {done and done['step']}")
        assert last["resumed"] and last["step"] >= ckpt > 0, last
        assert done and done["step"] >= STEPS and done.get("consensus_models") == 4, done
        took, sts = wait_consensus(mesh.agents, 4, END_S)
        print(f"one consensus model of 4 on every agent, {took:.1f} s after n4's trainer ended")
        # Every trainer's finish() returned that model: none a result replaced afterwards.
        wait_until(lambda: all(w.proc.poll() is not None for w in ws[:3]), END_S,
                   what="the other three trainers done")
        crcs = {w.event("done").get("consensus_crc32") for w in (ws[0], ws[1], ws[2], ws[-1])}
        models = {w.event("done").get("consensus_models") for w in (ws[0], ws[1], ws[2], ws[-1])}
        assert len(crcs) == 1 and models == {4}, (crcs, models)


def dead_trainer(py, binary):
    with external_mesh(binary, 5, "dt", staleness=4) as mesh, Workers() as ws:
        for a in mesh.agents:
            a.extra += ["--trainer-grace", str(GRACE_S)]
        start(mesh)
        for i, a in enumerate(mesh.agents):
            extra = {3: ["--poison-at", DIE_AT], 4: ["--die-at", DIE_AT]}.get(i, [])
            ws.append(Worker(py, a, mesh.workdir, *worker_args(DEAD_STEPS, *extra)))
        wait_until(lambda: ws[3].proc.poll() is not None and ws[4].proc.poll() is not None, 60,
                   what="dt4's trainer refused and dt5's dead")
        assert ws[3].event("refused") and ws[3].proc.returncode == 4, ws[3].text()[-2000:]
        assert ws[4].event("dying"), ws[4].text()[-2000:]
        wait_until(lambda: all(w.proc.poll() is not None for w in ws[:3]), 180,
                   what="the three trainers done (finish returned)")
        t_done = time.monotonic()
        for w in ws[:3]:
            d = w.event("done")
            assert d and d["step"] >= DEAD_STEPS and d["consensus_models"] == 3, w.text()[-1000:]
        _, sts = wait_consensus(mesh.agents[:3], 3, END_S)
        dones = [w.event("done") for w in ws[:3]]
        wait_s = max(d["finish_returned"] for d in dones) - max(d["finish_called"] for d in dones)
        print(f"dt4's trainer refused at step {DIE_AT}, dt5's killed at step {DIE_AT}: the three "
              f"others finished at {DEAD_STEPS} with one consensus model of 3 (crc32 "
              f"{sts['dt1']['consensus']['crc32']}), {wait_s:.1f} s after the last finish() call")
        assert wait_s < END_S and t_done > 0, wait_s
        for a in mesh.agents[3:]:
            st = a.status()
            assert st["trainer_absent"] and not st["training"], st
        for a in mesh.agents[:3]:
            assert sts[a.name]["consensus"]["left_out"] == ["dt4", "dt5"], sts[a.name]["consensus"]
            m = a.members()
            assert m["dt4"]["absent"] and m["dt5"]["absent"], m


def whole_mesh_restart_external(py, binary):
    with external_mesh(binary, 3, "wx", staleness=4) as mesh, Workers() as ws:
        for a in mesh.agents:
            a.extra += ["--checkpoint-every", str(CKPT_EVERY)]
        with_data_dirs(mesh)
        start(mesh)
        for a in mesh.agents:
            ws.append(Worker(py, a, mesh.workdir, *worker_args(900)))
        wait_until(lambda: min(step_of(a) for a in mesh.agents) >= KILL_AT, 120,
                   what=f"every node at step {KILL_AT}")
        at_kill = {a.name: step_of(a) for a in mesh.agents}
        for w in list(ws):
            w.stop()
        for a in mesh.agents:
            kill9(a)
        ckpts = {a.name: on_disk(a) for a in mesh.agents}
        start(mesh)
        for a in mesh.agents:
            ws.append(Worker(py, a, mesh.workdir, *worker_args(900), tag="-2"))
        for a, w in zip(mesh.agents, ws[3:]):
            ev = wait_until(lambda: w.event("attached"), 30, what=f"{a.name} attached")[1]
            print(f"whole-mesh restart (external): {a.name} at step {at_kill[a.name]} when killed, "
                  f"checkpoint at {ckpts[a.name]}, trainer attached at step {ev['step']}")
            assert ev["resumed"] and ev["step"] >= ckpts[a.name] >= KILL_AT - CKPT_EVERY, ev
            # Within a checkpoint interval (and the write in flight) of where it was.
            assert ckpts[a.name] >= at_kill[a.name] - 2 * CKPT_EVERY, (ckpts, at_kill)
        wait_until(lambda: all(w.proc.poll() is not None for w in ws[3:]), 120,
                   what="the restarted trainers done")
        wait_consensus(mesh.agents, 3, END_S)


def whole_mesh_restart_builtin(binary):
    common = ["--profile", "local", "--task", "synthetic", "--barrier", "ssp", "--staleness", "4",
              "--steps", "4000", "--checkpoint-every", str(CKPT_EVERY), "--min-peers", "2",
              "--select", "all"]
    with Mesh(binary, 3, common, name_prefix="wb") as mesh:
        with_data_dirs(mesh)
        start(mesh)
        wait_until(lambda: min(step_of(a) for a in mesh.agents) >= KILL_AT, 120,
                   what=f"every node at step {KILL_AT}")
        at_kill = {a.name: step_of(a) for a in mesh.agents}
        for a in mesh.agents:
            kill9(a)
        ckpts = {a.name: on_disk(a) for a in mesh.agents}
        start(mesh)
        for a in mesh.agents:
            res = wait_until(lambda: events(a.metrics, "resume"), 30, what=f"{a.name} resume")[1]
            step = res[-1]["step"]
            print(f"whole-mesh restart (built-in): {a.name} at step {at_kill[a.name]} when killed, "
                  f"checkpoint at {ckpts[a.name]}, resumed at step {step}")
            # (The synthetic task takes thousands of steps a second: the checkpoint writer, one
            # write at a time with its fsyncs, lags behind it by more than an interval here.)
            assert step >= ckpts[a.name] >= KILL_AT - CKPT_EVERY, (step, ckpts)
        wait_consensus(mesh.agents, 3, 120)


def main():
    args = parse_args()
    py = require_numpy_python()
    t0 = time.monotonic()
    restart_mid_run_and_at_end(py, args.bin)
    dead_trainer(py, args.bin)
    whole_mesh_restart_external(py, args.bin)
    whole_mesh_restart_builtin(args.bin)
    print(json.dumps({"ok": True, "seconds": round(time.monotonic() - t0, 1)}))


if __name__ == "__main__":
    main()
