#!/usr/bin/env python3
"""Observability on 3 training agents on loopback, each with --http: every listed metric is in
/metrics with the right type and plausible values (and passes `promtool check metrics` when
Prometheus is installed); /api/state shows every node with accuracy curves and the SELMCAST
plan; `meshtrain monitor --log-level debug` shows a debug line from an agent running at info;
tags and published accuracies round-trip through `members --format json`."""
import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402

# name -> Prometheus type; the required list: members by status, step, loss, accuracy, barrier
# wait (histogram), bytes sent/received, rounds, fanout, rejected inputs by reason, health
# score, build info.
REQUIRED = {
    "meshtrain_members": "gauge",
    "meshtrain_step": "gauge",
    "meshtrain_loss": "gauge",
    "meshtrain_accuracy": "gauge",
    "meshtrain_barrier_wait_seconds": "histogram",
    "meshtrain_sent_bytes_total": "counter",
    "meshtrain_received_bytes_total": "counter",
    "meshtrain_rounds_total": "counter",
    "meshtrain_fanout": "gauge",
    "meshtrain_rejected_total": "counter",
    "meshtrain_health_score": "gauge",
    "meshtrain_build_info": "gauge",
}


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def parse_exposition(text):
    """{family: type}, [(name, {labels}, value)] from the text format (simple labels only)."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            head, value = line.rsplit(" ", 1)
            labels = {}
            if "{" in head:
                name, rest = head.split("{", 1)
                for part in rest.rstrip("}").split(","):
                    k, v = part.split("=", 1)
                    labels[k] = v.strip('"')
            else:
                name = head
            samples.append((name, labels, float(value)))
    return types, samples


def value(samples, name, **labels):
    for n, l, v in samples:
        if n == name and all(l.get(k) == x for k, x in labels.items()):
            return v
    return None


def check_metrics(text, n_nodes):
    types, samples = parse_exposition(text)
    for name, kind in REQUIRED.items():
        assert types.get(name) == kind, f"{name}: type {types.get(name)!r}, want {kind}"
    assert value(samples, "meshtrain_members", status="alive") == n_nodes
    assert value(samples, "meshtrain_step") > 0
    acc = value(samples, "meshtrain_accuracy")
    assert acc is not None and 0 < acc <= 1, acc
    assert value(samples, "meshtrain_loss") > 0
    for c in ("meshtrain_sent_bytes_total", "meshtrain_received_bytes_total",
              "meshtrain_rounds_total"):
        assert value(samples, c) > 0, c
    assert value(samples, "meshtrain_fanout") >= 1
    assert value(samples, "meshtrain_health_score") >= 0
    assert value(samples, "meshtrain_build_info") == 1
    buckets = [(l["le"], v) for n, l, v in samples if n == "meshtrain_barrier_wait_seconds_bucket"]
    assert len(buckets) >= 2 and buckets[-1][0] == "+Inf", buckets
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), f"histogram buckets not cumulative: {buckets}"
    assert counts[-1] == value(samples, "meshtrain_barrier_wait_seconds_count") > 0
    assert value(samples, "meshtrain_barrier_wait_seconds_sum") >= 0
    assert any(n == "meshtrain_rejected_total" for n, _, _ in samples)
    return samples


def main():
    args = harness.parse_args()
    n = 3
    with harness.Mesh(args.bin, n, common=["--profile", "local", "--task", "fmnist-mlp",
                                           "--barrier", "pssp", "--eval-every", "20",
                                           "--log-level", "info"]) as mesh:
        # Right after the mesh's own block (the same random start would collide with it).
        http_base = harness.free_port_block(n, start=mesh.agents[0].port + 2 * n)
        https = []
        for i, a in enumerate(mesh.agents):
            https.append(f"127.0.0.1:{http_base + 2 * i}")
            a.extra = ["--shard", f"{i}/{n}", "--http", https[-1], "--tag", f"rack=r{i + 1}"]
            a.start(join=[mesh.agents[0].addr] if i else None)

        def all_trained():
            for h in https:
                try:
                    _, _, text = get(f"http://{h}/metrics")
                except OSError:
                    return False
                _, samples = parse_exposition(text)
                acc = value(samples, "meshtrain_accuracy")
                if acc is None or math.isnan(acc) or not value(samples, "meshtrain_rounds_total"):
                    return False
                if value(samples, "meshtrain_members", status="alive") != n:
                    return False
            return True
        took, _ = harness.wait_until(all_trained, 120, 0.5, "every agent evaluated and synced")
        print(f"all {n} agents evaluated and synced after {took:.1f} s")

        promtool = shutil.which("promtool")
        for h in https:
            status, ctype, text = get(f"http://{h}/metrics")
            assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), ctype
            check_metrics(text, n)
            if promtool:
                r = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                                   capture_output=True, timeout=60)
                assert r.returncode == 0, f"promtool on {h}: {r.stdout}{r.stderr}"
        print("metrics: every listed family with the right type on all agents; promtool: " +
              ("passed" if promtool else "not installed, skipped"))

        # The dashboard's data: every node, curves per node, the plan.
        def state_complete():
            _, _, body = get(f"http://{https[0]}/api/state")
            s = json.loads(body)
            names = {m["name"] for m in s["members"]}
            curves = {k for k, v in s["history"].items() if v}
            return s if names == {a.name for a in mesh.agents} and curves == names else None
        _, s = harness.wait_until(state_complete, 60, 0.5, "a curve for every node")
        assert s["plan"]["policy"] == "selmcast" and s["plan"]["edges"], s["plan"]
        status, ctype, page = get(f"http://{https[0]}/")
        assert status == 200 and ctype.startswith("text/html") and "/api/state" in page
        print(f"api/state: {len(s['members'])} members, curves with "
              f"{[len(v) for v in s['history'].values()]} points, {len(s['plan']['edges'])} "
              "plan edges")

        # members --format json: tags and published accuracies of peers.
        members = mesh.agents[0].members()
        for i, a in enumerate(mesh.agents):
            assert members[a.name]["tags"] == {"rack": f"r{i + 1}"}, members[a.name]
            assert 0 < members[a.name]["accuracy"] <= 1, members[a.name]

        # monitor: a debug line from an agent running at info.
        out_path = os.path.join(mesh.workdir, "monitor.out")
        with open(out_path, "w") as out:
            mon = subprocess.Popen([args.bin, "monitor", "--rpc", mesh.agents[0].rpc,
                                    "--log-level", "debug"], stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            def debug_seen():
                with open(out_path) as f:
                    return [line for line in f if "[debug]" in line]
            _, lines = harness.wait_until(debug_seen, 30, 0.2, "a debug line from monitor")
            print(f"monitor: {lines[0].strip()}")
        finally:
            mon.kill()
            mon.wait(timeout=10)
        with open(mesh.agents[0].log_path, errors="replace") as f:
            own = f.read()
        assert "[debug]" not in own, "the agent's own log (at info) shows debug lines"
        # A bad level is refused with a clear error.
        r = subprocess.run([args.bin, "monitor", "--rpc", mesh.agents[0].rpc, "--log-level",
                            "loud"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "log-level" in r.stderr, r
    print("ok")


if __name__ == "__main__":
    main()
