"""Helpers shared by the netbed tests and benches: agents in bed namespaces (RPC on each
namespace's own 127.0.0.1:7951), status/members through the real CLI, metrics-file events."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

RPC = "127.0.0.1:7951"
PORT = 7950
# Set by CTest for the sanitizer build's tests (tests/CMakeLists.txt): its agents train ~10x
# slower, so the scripts ask for less training there (the code paths are the same).
SANITIZED = os.environ.get("MESHTRAIN_SANITIZED") == "1"
CLI_TIMEOUT_S = 20


@contextlib.contextmanager
def workdir(prefix):
    """A temporary directory for logs: removed when the block succeeds (kept with
    MESHTRAIN_KEEP_LOGS=1), kept and named on stderr when it raises, so a failure leaves its
    evidence behind."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    except BaseException:
        print(f"logs kept in {work}", file=sys.stderr)
        raise
    if os.environ.get("MESHTRAIN_KEEP_LOGS") == "1":
        print(f"logs kept in {work}", file=sys.stderr)
        return
    shutil.rmtree(work, ignore_errors=True)


def cli_json(bed, i, binary, *args):
    """`meshtrain <args> --format json` in host i's namespace; None when the agent is not up, or
    did not answer twice in CLI_TIMEOUT_S. (On a busy machine a CLI process and the agent's
    answer can take seconds: a slow answer is asked again, not taken for a failure; a refused
    connection comes back at once.)"""
    for _ in range(2):
        try:
            r = bed.run(i, [binary, *args, "--rpc", RPC, "--format", "json"],
                        timeout=CLI_TIMEOUT_S)
            break
        except subprocess.TimeoutExpired:
            print(f"slow answer: `{' '.join(args)}` on host {i} took over {CLI_TIMEOUT_S} s",
                  file=sys.stderr)
    else:
        return None
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return None


def status(bed, i, binary):
    return cli_json(bed, i, binary, "status")


def members(bed, i, binary):
    """{name: member dict} or None."""
    m = cli_json(bed, i, binary, "members")
    return None if m is None else {x["name"]: x for x in m["members"]}


def metric_lines(path, kind):
    """The metrics file's lines of one event kind (docs/contract.md "Output formats": one JSON
    object per line)."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except json.JSONDecodeError:
                continue
            if j.get("event") == kind:
                out.append(j)
    return out


def probe_reject_slack(st):
    """How many probe datagrams an agent may refuse (rejected_by_reason capacity_probe) on a
    busy machine without anything being wrong: two per train it sent or answered (status
    capacity_probes sent + answered) and 16 more, at most 255. The races of a slow machine cost
    a stray datagram or two per train: a train paused mid-way for longer than its receiver's
    quiet timeout ends there for the receiver, which reports each part, and the sender refuses
    all but the first (a train paused twice: two); a report later than the sender waits for is
    refused; a receiver that handles a train's first datagram late may see the next train of
    that sender too soon. An ASan agent beside a busy loop refused 24 with 22 trains. A real
    refusal (a seal or header it cannot read) refuses whole trains, 256 datagrams or more each:
    above the slack however many trains there were."""
    cp = st["capacity_probes"]
    return min(255, 2 * (cp["sent"] + cp["answered"]) + 16)


def path_loss_to_link_loss(path_loss):
    """linkemu drops on the sender's link and again on the receiver's: the per-link loss that
    makes `path_loss` between two hosts."""
    return 1 - (1 - path_loss) ** 0.5


def first_reach(metrics_path, target):
    """(t, step, accuracy) of the first eval at or above target in a metrics file, or None."""
    for e in metric_lines(metrics_path, "eval"):
        if e.get("accuracy", 0) >= target:
            return e["t"], e["step"], e["accuracy"]
    return None


def wait_all_reach(metrics, names, target, start, timeout, stall_s, step_budget):
    """Polls the metrics files (one per node) until every node has an eval at or above target;
    returns {node index: first_reach}. Fails when the run exceeds `timeout` s since `start`
    (time.monotonic()), when no node's last eval step moves for `stall_s` s, or when a node
    passes `step_budget` steps without the target."""
    reached = {}
    last_steps, progress_at = None, time.monotonic()
    while len(reached) < len(metrics):
        assert time.monotonic() - start < timeout, f"not all at {target}: {reached}"
        evals = [metric_lines(m, "eval") for m in metrics]
        steps = [e[-1]["step"] if e else 0 for e in evals]
        if steps != last_steps:
            last_steps, progress_at = steps, time.monotonic()
        assert time.monotonic() - progress_at < stall_s, f"stalled at steps {steps}"
        for i in range(len(metrics)):
            if i not in reached and first_reach(metrics[i], target):
                reached[i] = first_reach(metrics[i], target)
            assert i in reached or steps[i] < step_budget, \
                f"{names[i]} at step {steps[i]} without {target}: {evals[i][-3:]}"
        time.sleep(1)
    return reached
