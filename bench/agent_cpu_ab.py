#!/usr/bin/env python3
"""CPU seconds per step of one agent (fmnist-mlp, alone on loopback), two binaries interleaved,
the ratio A/B pair by pair (a refactor keeps it within noise).
Usage: bench/agent_cpu_ab.py BIN_A BIN_B [PAIRS] [STEPS]   (defaults 3, 2000)"""
import json, os, subprocess, sys, tempfile, time

def run(bin_, steps, port):
    d = tempfile.mkdtemp(prefix="agentcpu-")
    p = subprocess.Popen([bin_, "agent", "--name", "cpu", "--bind", f"127.0.0.1:{port}",
                          "--rpc", f"127.0.0.1:{port+1}", "--task", "fmnist-mlp",
                          "--steps", str(steps), "--eval-every", "100", "--seed", "7"],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "w"))
    t0 = time.time(); step = -1
    try:
        while time.time() - t0 < 600:
            time.sleep(0.5)
            r = subprocess.run([bin_, "status", "--rpc", f"127.0.0.1:{port+1}", "--format", "json"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                st = json.loads(r.stdout)
                step = st.get("step", -1)
                if step >= steps and not st.get("training", True):
                    break
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / tck
    finally:
        p.terminate(); p.wait(timeout=30)
    return cpu, step

a, b = sys.argv[1], sys.argv[2]
pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
ratios = []
for i in range(pairs):
    ca, sa = run(a, steps, 17950)
    cb, sb = run(b, steps, 17960)
    ratios.append((ca / sa) / (cb / sb))
    print(f"pair {i}: A {ca:.2f} s / {sa} steps = {1000*ca/sa:.3f} ms/step; "
          f"B {cb:.2f} s / {sb} steps = {1000*cb/sb:.3f} ms/step; A/B {ratios[-1]:.3f}", flush=True)
ratios.sort()
print(f"A/B CPU per step: median {ratios[len(ratios)//2]:.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f})")
