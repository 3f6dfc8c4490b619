"""A PUBLISH of the exact exchange waits for a large layout's one snapshot buffer instead of
publishing nothing (daemon/trainer/external_mixing.cc, ExternalTrainer::PublishInto;
docs/design.md "The parameter path").

Two agents with external trainers: raw meshtrain.Mesh clients in this process, each attached
with 4.5M floats (18 MB: above the 16 MB line past which the agent keeps one snapshot buffer)
and configured with sync_every 2 (the exact exchange). Agent B is paused (SIGSTOP) before A
publishes step 2, so A's 18 MB transfer to B cannot end and A's buffer stays held. A then
publishes step 4: the request must not return until B runs again (resumed after PAUSE_S), and
A's status must say it published (syncs.unsent 0) after waiting (syncs.publish_wait_s). Before
this, the PUBLISH returned at once having published nothing, and every peer's MIX of that step
waited up to 30 s for a model that never left.
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from external_lib import external_mesh, require_numpy_python, start_all  # noqa: E402
from harness import parse_args, wait_until  # noqa: E402

FLOATS = 4_500_000
PAUSE_S = 1.5
PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def main():
    args = parse_args()
    py = require_numpy_python()
    if os.path.realpath(py) != os.path.realpath(sys.executable):
        os.execv(py, [py, *sys.argv])
    sys.path.insert(0, PYTHON_DIR)
    from meshtrain._mesh import connect
    with external_mesh(args.bin, 2, "pw", 1) as mesh:
        start_all(mesh)
        a, b = mesh.agents
        for ag in mesh.agents:
            wait_until(lambda: os.path.exists(ag.socket), 10, what=f"{ag.socket} exists")
        meshes = [connect(ag.socket) for ag in mesh.agents]
        try:
            for m in meshes:
                m.attach(FLOATS)
                m.configure(sync_every=2)
            # Both train (the first step's barrier holds until --min-peers do).
            permits = [threading.Thread(target=m.wait_permit, args=(1,)) for m in meshes]
            for t in permits:
                t.start()
            for t in permits:
                t.join(timeout=30)
            assert not any(t.is_alive() for t in permits), "the first permits did not come"
            b.signal(signal.SIGSTOP)
            try:
                meshes[0].publish(2)  # its transfer to the paused B cannot end
                took = []

                def second():
                    t0 = time.monotonic()
                    meshes[0].publish(4)
                    took.append(time.monotonic() - t0)

                t = threading.Thread(target=second)
                t.start()
                t.join(timeout=PAUSE_S)
                assert t.is_alive() and not took, \
                    f"PUBLISH returned in {took} s while the buffer was still being sent"
            finally:
                b.signal(signal.SIGCONT)
            t.join(timeout=40)
            assert took, "the PUBLISH did not return after the receiver ran again"
            syncs = a.status()["syncs"]
            print(f"PUBLISH waited {took[0]:.2f} s; A's syncs: unsent {syncs['unsent']}, "
                  f"publish_wait_s {syncs['publish_wait_s']:.2f}")
            assert took[0] >= PAUSE_S - 0.1, took
            assert syncs["unsent"] == 0, syncs
            assert syncs["publish_wait_s"] >= PAUSE_S - 0.1, syncs
        finally:
            for m in meshes:
                m.close()
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
