"""Training through churn, short: bench/netbed_churn.py --short on 3 hosts of the namespace bed,
each an agent (--trainer external, its own --data-dir) and a PyTorch trainer of the character
language model (examples/torch_charlm.py, one layer, 700 steps paced as on hosts ten times
slower, then `finish()`). Once every trainer has evaluated its first model, one fault every
10 s: kill -9 of one host's agent and trainer (both started again 5 s later with the same name,
port and --data-dir), SIGSTOP of another host's for 5 s, a 6 s partition of a third (linkemu
drops all of its link).
Checks that:
- the run ends on every host (every trainer, restarted ones included, returns from finish());
- every host holds the one model: the same CRC-32 from finish() on all three;
- the kill was applied and the restarted node resumed past step 0 (the step its agent attached
  its trainer at, or the step of the model it took over from a peer: not a new start).
Prints the bench's table (time to the end, steps trained, the resumed step, bytes per host).
Skips (exit 77) where no bed can be built (not root, no namespaces or /dev/net/tun), or no
python3 with torch and numpy, or no fortunes text.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import netbed_churn  # noqa: E402
import netbed_lib as nl  # noqa: E402
from external_lib import numpy_python  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    a = p.parse_args()
    py = numpy_python("torch, numpy")
    if py is None:
        print("SKIP: no python3 with torch and numpy")
        sys.exit(77)
    with nl.workdir("meshtrain-netbed-churn-") as work:
        out = os.path.join(work, "figures.json")
        rc = netbed_churn.main(["--bin", a.bin, "--python", py, "--short", "--logdir", work,
                                "--json", out])
        if rc == 77:
            sys.exit(77)
        assert rc in (0, 1) and os.path.exists(out), f"the bench exited {rc}"
        with open(out) as f:
            churn = json.load(f)[0]["churn"]
        assert churn["finished"], "not every trainer ended (see the table)"
        crcs = [c and c["crc32"] for c in churn["consensus"]]
        assert churn["one_model"], f"not one model at the end: CRC-32s {crcs}"
        kinds = [f["kind"] for f in churn["faults"]]
        print(f"faults applied: {kinds}; skipped (the end had begun): "
              f"{[f['kind'] for f in churn.get('skipped', [])]}")
        assert "kill" in kinds and churn["kills"], f"no kill and restart: {churn['faults']}"
        for k in churn["kills"]:
            assert k["resumed_at"] is not None and k["resumed_at"] > 0, \
                f"n{k['host'] + 1} killed at step {k['step_before']} resumed at {k['resumed_at']}"
    print("PASS")


if __name__ == "__main__":
    main()
