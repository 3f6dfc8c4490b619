#!/usr/bin/env python3
"""Dashboard browser test: headless Chromium (Debian `chromium`) loads the dashboard of a 4-node
training mesh twice, some seconds apart, and saves a screenshot. It fails if any node is missing
from the members table or the curves, if a node's accuracy curve does not advance between the
loads, if the page did not refresh itself, or if the plan graph is empty. Skips (exit 77) when
chromium is not installed. The screenshot goes to MESHTRAIN_ARTIFACTS (default: the build
directory, next to the binary's folder) as dashboard.png."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run_browser(browser, profile, url, extra, timeout=90):
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars",
           "--window-size=1400,1100", "--virtual-time-budget=5000"] + extra + [url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"chromium failed ({r.returncode}): {r.stderr[-2000:]}"
    return r.stdout


def page_facts(dom):
    rows = dict(re.findall(r'<tr data-node="([^"]+)" data-step="(\d+)"', dom))
    acc = re.search(r'<svg id="acc-chart"[^>]*>(.*?)</svg>', dom, re.S)
    curves = {}
    for m in re.finditer(r'<polyline [^>]*data-node="([^"]+)" data-points="(\d+)" '
                         r'data-last-t="([0-9.]+)"', acc.group(1) if acc else ""):
        curves[m.group(1)] = (int(m.group(2)), float(m.group(3)))
    updates = re.search(r'<body data-updates="(\d+)"', dom)
    edges = re.search(r'<svg id="plan" data-edges="(\d+)"', dom)
    return rows, curves, int(updates.group(1)) if updates else 0, int(edges.group(1)) if edges else 0


def main():
    args = harness.parse_args()
    browser = chromium()
    if not browser:
        print("SKIP: chromium is not installed (Debian package `chromium`)")
        sys.exit(77)
    artifacts = os.environ.get("MESHTRAIN_ARTIFACTS") or os.path.dirname(
        os.path.dirname(os.path.abspath(args.bin)))
    shot = os.path.join(artifacts, "dashboard.png")
    n = 4
    with harness.Mesh(args.bin, n, common=["--profile", "local", "--task", "fmnist-mlp",
                                           "--barrier", "pssp", "--eval-every", "20",
                                           "--slowdown", "3"]) as mesh:
        http = f"127.0.0.1:{harness.free_port_block(1, start=mesh.agents[0].port + 2 * n)}"
        for i, a in enumerate(mesh.agents):
            a.extra = ["--shard", f"{i}/{n}"] + (["--http", http] if i == 0 else [])
            a.start(join=[mesh.agents[0].addr] if i else None)
        names = {a.name for a in mesh.agents}
        url = f"http://{http}/"
        profile = tempfile.mkdtemp(prefix="meshtrain-chromium-")
        try:
            def loaded():
                rows, curves, _, _ = page_facts(run_browser(browser, profile, url, ["--dump-dom"]))
                return (rows, curves) if set(rows) == names and set(curves) == names else None
            took, (rows1, curves1) = harness.wait_until(loaded, 90, 1.0,
                                                        "every node in the table and the curves")
            print(f"first load with all {n} nodes after {took:.1f} s: steps {rows1}, "
                  f"curve points {curves1}")
            time.sleep(6)
            rows2, curves2, updates, edges = page_facts(
                run_browser(browser, profile, url, ["--dump-dom"]))
            assert set(rows2) == names, f"nodes missing from the table: {names - set(rows2)}"
            assert set(curves2) == names, f"nodes missing from the curves: {names - set(curves2)}"
            for name in names:
                assert curves2[name][1] > curves1[name][1], \
                    f"{name}'s curve did not advance: {curves1[name]} -> {curves2[name]}"
                assert int(rows2[name]) > int(rows1[name]), f"{name}'s step did not advance"
            assert updates >= 2, f"the page refreshed itself {updates} times in 5 s"
            assert edges >= n, f"plan graph has {edges} edges"
            print(f"second load: steps {rows2}, curve points {curves2}, {updates} self-refreshes, "
                  f"{edges} plan edges")
            run_browser(browser, profile, url, [f"--screenshot={shot}"])
            assert os.path.getsize(shot) > 10000, "screenshot is empty"
            print(f"screenshot: {shot} ({os.path.getsize(shot)} bytes)")
        finally:
            shutil.rmtree(profile, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
