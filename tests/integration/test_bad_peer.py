"""A bad peer does not wreck the honest nodes under robust mixing (docs/design.md "Robust
mixing"): the bad-peer bed (bad_peer_lib.py) with 5 agents, --robust on, the synthetic task
(no dataset), node 5 publishing 100x its parameters (a trainer whose loss exploded) from step 30
of 200 on, every trainer calling finish().

Checks that:
- every trainer ends with the same consensus model (one CRC), and the honest nodes' final model
  has accuracy at least ACCURACY and loss at most LOSS (a clean run: 0.95 and 0.23; robust off,
  the plain average with the exploded model in it: 0.95 and 258, docs/benchmarks.md "Bad
  peers");
- every honest agent's `members` flags the bad node, and no honest one;
- status robust says on, and counts the refusals.
Skips (77) without an interpreter that has torch.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from bad_peer_lib import run  # noqa: E402
from external_lib import numpy_python  # noqa: E402
from harness import parse_args  # noqa: E402

STEPS = 200
ACCURACY = 0.85
LOSS = 0.5


def main():
    args = parse_args()
    py = numpy_python("numpy, torch")
    if py is None:
        print("SKIP: no python3 with numpy and torch")
        sys.exit(77)
    workdir = tempfile.mkdtemp(prefix="meshtrain-badpeer-")
    r = run(args.bin, py, workdir, "exploded", True, task="synth", steps=STEPS, bad_from=30,
            lr=3e-3, timeout=300, prefix="bp")
    print(r)
    assert len(r["crcs"]) == 1, f"the trainers ended with different models: {r['crcs']}"
    for acc, loss in zip(r["accuracy"], r["loss"]):
        assert acc >= ACCURACY, f"an honest node ended at accuracy {acc} < {ACCURACY}: {r}"
        assert loss <= LOSS, f"an honest node ended at loss {loss} > {LOSS}: {r}"
    for i, names in enumerate(r["flagged"]):
        assert names == [r["culprit"]], f"agent {i + 1} flags {names}, not [{r['culprit']}]"
    for st in r["robust_status"][:4]:
        assert st.get("on") is True and st.get("refused", 0) > 0, st
        assert st.get("flagged") == [r["culprit"]], st
    shutil.rmtree(workdir, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
