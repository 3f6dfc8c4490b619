"""The Debian package: `cpack -G DEB` from this build dir, checked and unpacked into a
scratch root (dpkg-deb -x: no system install, no root needed), then run from there.

Checks that:
- cpack makes one meshtrain_VERSION-1_ARCH.deb with the project's version;
- its Depends name only non -dev Debian packages that are installed here (or provided by one),
  and cover the package of every shared library the packaged binary needs (readelf NEEDED,
  resolved with ldd); /etc/meshtrain/agent.env is a conffile; the maintainer scripts parse;
- SCRATCH/usr/bin/meshtrain version prints the version;
- the installed systemd unit runs SCRATCH's /usr/bin/meshtrain with the installed agent.env,
  and `systemd-analyze verify` (when present) has nothing to say about it;
- two agents started from the installed binary (the first with the unit's ExecStart command
  line, its data dir moved to the test's) list each other alive; each serves a trainer written
  with the installed Python package (PYTHONPATH=SCRATCH/usr/lib/python3/dist-packages, imported
  from there), which attaches, steps and mixes its peer's model; SIGINT (the unit's KillSignal)
  makes the first leave: the second lists it "left" and it exits 0.
The build dir is the test suite's (MESHTRAIN_NATIVE=ON): fine for testing the packaging rules
on this machine; real packages are built with -DMESHTRAIN_NATIVE=OFF (scripts/make-deb.sh).
Every process is ended by PID and the scratch directory removed, also on failure.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from harness import free_port_block, wait_until  # noqa: E402

TRAINER = r"""
import json, os, sys, time
import numpy as np
import meshtrain
sock, target, steps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
mesh = meshtrain.connect(sock, timeout=30)
x = np.zeros(256, np.float32)
mesh.attach(x.size)
while mesh.step_count < steps and mesh.training:
    x -= 0.1 * (x - target)
    time.sleep(0.01)  # "compute": peers' models arrive between steps
    mesh.step(x)
print(json.dumps({"module": meshtrain.__file__, "step": mesh.step_count,
                  "mixed": mesh.mixed_total, "mean": float(x.mean())}), flush=True)
mesh.detach()
"""


def skip(msg):
    print(f"SKIP: {msg}")
    sys.exit(77)


def run(cmd, timeout=60, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, **kw)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def cache_value(build, name):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(rf"^{re.escape(name)}(:[A-Z]+)?=(.*)$", line.rstrip("\n"))
            if m:
                return m.group(2)
    return None


def dep_names(field):
    """Package names of a Depends field: 'a (>= 1), b | c' -> [a, b, c]."""
    names = []
    for clause in filter(None, (c.strip() for c in field.split(","))):
        for alt in clause.split("|"):
            names.append(re.match(r"\s*([a-z0-9][a-z0-9+.-]+)", alt).group(1))
    return names


def owner_package(path):
    """The installed package that holds this library file (merged /usr: try both spellings)."""
    cands = [path, os.path.realpath(path)]
    for p in list(cands):
        if p.startswith("/usr/lib/"):
            cands.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            cands.append("/usr" + p)
    for p in cands:
        r = subprocess.run(["dpkg-query", "-S", p], capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


def installed_packages():
    """{name: installed packages satisfying it}: each installed package, and each virtual
    package an installed one provides (libspdlog1.10 provides libspdlog1.10-fmt9)."""
    out = run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}|${Package}|${Provides}\\n"])
    sat = {}
    for line in out.splitlines():
        status, pkg, provides = line.split("|", 2)
        if not status.startswith("ii"):
            continue
        sat.setdefault(pkg, set()).add(pkg)
        for prov in filter(None, (x.strip() for x in provides.split(","))):
            sat.setdefault(prov.split()[0], set()).add(pkg)
    return sat


def numpy_python():
    for cand in ("/usr/bin/python3", sys.executable, shutil.which("python3")):
        if cand and os.path.exists(cand):
            r = subprocess.run([cand, "-c", "import numpy"], capture_output=True, timeout=60)
            if r.returncode == 0:
                return cand
    return None


class Procs(list):
    """Started processes, each ended by its PID on exit (also on failure)."""

    def start(self, argv, log_path, **kw):
        with open(log_path, "ab") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, **kw)
        p.log_path = log_path
        self.append(p)
        return p

    def end_all(self):
        for p in self:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def cli(binary, rpc, *args):
    r = subprocess.run([binary, *args, "--rpc", rpc], capture_output=True, text=True,
                       timeout=20, stdin=subprocess.DEVNULL)
    return json.loads(r.stdout) if r.returncode == 0 else None


def member_status(binary, rpc):
    m = cli(binary, rpc, "members", "--format", "json")
    return None if m is None else {x["name"]: x["status"] for x in m["members"]}


def check_package(build, out, deb_dir):
    t0 = time.monotonic()
    run(["cpack", "-G", "DEB", "--config", os.path.join(build, "CPackConfig.cmake"),
         "-B", deb_dir], timeout=300, cwd=out)
    debs = glob.glob(os.path.join(deb_dir, "meshtrain_*.deb"))
    assert len(debs) == 1, f"expected one meshtrain_*.deb in {deb_dir}: {os.listdir(deb_dir)}"
    deb = debs[0]
    print(f"cpack: {os.path.basename(deb)}, {os.path.getsize(deb) / 1e6:.1f} MB, "
          f"{time.monotonic() - t0:.1f} s")
    fields = {}
    for f in ("Package", "Version", "Architecture", "Depends", "Recommends", "Section",
              "Maintainer"):
        fields[f] = run(["dpkg-deb", "-f", deb, f]).strip()
    version = cache_value(build, "CMAKE_PROJECT_VERSION")
    assert fields["Package"] == "meshtrain", fields
    assert fields["Version"] == f"{version}-1", (fields["Version"], version)
    assert fields["Architecture"] == run(["dpkg", "--print-architecture"]).strip(), fields
    assert fields["Maintainer"] and fields["Section"], fields
    print(f"Depends: {fields['Depends']}\nRecommends: {fields['Recommends']}")
    deps = dep_names(fields["Depends"])
    assert deps, "empty Depends"
    sat = installed_packages()
    satisfying = set()
    for d in deps:
        assert not d.endswith("-dev"), f"Depends names a -dev package: {d}"
        assert d in sat, f"Depends names {d}, which no installed Debian package is or provides"
        satisfying |= sat[d]
    return deb, version, satisfying


def check_shlibs(binary, satisfying):
    """The package of every shared library the binary needs (DT_NEEDED) is in Depends (or
    provides a name that is). Libraries those load in turn are their packages' business."""
    if shutil.which("readelf") is None:
        print("ldd check: skipped (no readelf; package binutils)")
        return
    dynamic = run(["readelf", "-d", binary])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert needed, "readelf shows no NEEDED libraries"
    paths = dict(re.findall(r"^\s*(\S+)\s+=>\s+(/\S+)", run(["ldd", binary]), re.M))
    owners = {}
    for lib in needed:
        assert lib in paths, f"ldd does not resolve {lib}"
        pkg = owner_package(paths[lib])
        assert pkg is not None, f"{paths[lib]} belongs to no Debian package"
        owners[lib] = pkg
    missing = {lib: p for lib, p in owners.items() if p not in satisfying}
    assert not missing, f"libraries whose packages are missing from Depends: {missing}"
    print(f"needed: {len(owners)} libraries from {sorted(set(owners.values()))}, all in Depends")


def check_control(deb, ctrl):
    run(["dpkg-deb", "-e", deb, ctrl])
    with open(os.path.join(ctrl, "conffiles")) as f:
        conffiles = f.read().split()
    assert "/etc/meshtrain/agent.env" in conffiles, conffiles
    for script in ("postinst", "prerm", "postrm"):
        path = os.path.join(ctrl, script)
        assert os.access(path, os.X_OK), f"{script} missing or not executable"
        run(["sh", "-n", path])


def check_unit(root, work):
    unit = os.path.join(root, "usr/lib/systemd/system/meshtrain-agent.service")
    with open(unit) as f:
        text = f.read()
    assert not re.search(r"@[A-Z_]+@", text), f"unfilled template variable in {unit}"
    keys = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys[k] = v
    exec_start = shlex.split(keys["ExecStart"])
    assert exec_start[0] == "/usr/bin/meshtrain", keys["ExecStart"]
    assert keys["EnvironmentFile"] == "/etc/meshtrain/agent.env", keys["EnvironmentFile"]
    assert os.path.exists(root + keys["EnvironmentFile"]), "agent.env not installed"
    print(f"unit: ExecStart={keys['ExecStart']}")
    if shutil.which("systemd-analyze"):
        # A copy whose paths point into the scratch root (verify wants ExecStart to exist).
        copy = os.path.join(work, "meshtrain-agent.service")
        with open(copy, "w") as f:
            f.write(text.replace("ExecStart=/usr/bin/", f"ExecStart={root}/usr/bin/")
                    .replace("EnvironmentFile=/", f"EnvironmentFile={root}/"))
        r = subprocess.run(["systemd-analyze", "verify", copy], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        notes = [ln for ln in (r.stdout + r.stderr).splitlines() if "meshtrain-agent" in ln]
        assert r.returncode == 0 and not notes, f"systemd-analyze verify: {r.stdout}{r.stderr}"
        print("unit: systemd-analyze verify: no complaints")
    return exec_start


def check_python_import(root, work, py):
    site = os.path.join(root, "usr/lib/python3/dist-packages")
    env = dict(os.environ, PYTHONPATH=site, PYTHONDONTWRITEBYTECODE="1")
    out = run([py or sys.executable, "-c",
               "import meshtrain; print(meshtrain.__file__, meshtrain.PROTOCOL_VERSION)"],
              env=env, cwd=work)
    path = out.split()[0]
    assert path.startswith(site + os.sep), f"meshtrain imported from {path}, not {site}"
    print(f"python: import meshtrain -> {os.path.relpath(path, root)}")
    return env


def run_mesh(root, work, exec_start, env, py, procs):
    binary = root + exec_start[0]
    base = free_port_block(2)
    names = ["deb1", "deb2"]
    binds = [f"127.0.0.1:{base}", f"127.0.0.1:{base + 2}"]
    rpcs = [f"127.0.0.1:{base + 1}", f"127.0.0.1:{base + 3}"]
    socks = [os.path.join(work, f"{n}.sock") for n in names]
    data = os.path.join(work, "state")
    os.mkdir(data)
    # The unit's command line: binary, subcommand, --data-dir /var/lib/meshtrain (the test's
    # directory here); $MESHTRAIN_ARGS becomes this test's options.
    argv0 = [binary] + [data if a == "/var/lib/meshtrain" else a for a in exec_start[1:]
                        if a != "$MESHTRAIN_ARGS"]
    assert "$MESHTRAIN_ARGS" in exec_start and "agent" in argv0, exec_start
    common = ["--profile", "local", "--trainer", "external", "--barrier", "ssp",
              "--staleness", "2", "--select", "all", "--min-peers", "1"]
    agents = []
    for i, name in enumerate(names):
        argv = (argv0 if i == 0 else [binary, "agent"]) + [
            "--name", name, "--bind", binds[i], "--rpc", rpcs[i],
            "--trainer-socket", socks[i]] + common
        if i == 1:
            argv += ["--join", binds[0]]
        agents.append(procs.start(argv, os.path.join(work, f"{name}.log")))
        if i == 0:
            wait_until(lambda: member_status(binary, rpcs[0]) is not None, 15, what="deb1 up")
    t0 = time.monotonic()

    def both_alive():
        sts = [member_status(binary, r) for r in rpcs]
        return all(s and all(s.get(n) == "alive" for n in names) for s in sts)
    wait_until(both_alive, 20, interval=0.1, what="deb1 and deb2 list each other alive")
    print(f"mesh: both agents list each other alive after {time.monotonic() - t0:.2f} s")

    if py is None:
        print("python trainers: skipped (no python3 with numpy; install python3-numpy)")
    else:
        steps, targets = 40, [0.0, 4.0]
        wait_until(lambda: all(os.path.exists(s) for s in socks), 10, what="trainer sockets")
        trainers = [procs.start([py, "-c", TRAINER, socks[i], str(targets[i]), str(steps)],
                                os.path.join(work, f"{n}-trainer.out"), env=env, cwd=work)
                    for i, n in enumerate(names)]
        for t in trainers:
            t.wait(timeout=60)
        mid = sum(targets) / 2
        for t, tgt in zip(trainers, targets):
            with open(t.log_path) as f:
                text = f.read()
            assert t.returncode == 0, f"trainer exited {t.returncode}:\n{text}"
            res = json.loads(text.strip().splitlines()[-1])
            assert res["module"].startswith(root + os.sep), res
            assert res["step"] >= steps and res["mixed"] > 0, res
            # Alone, each model would sit at its own target; mixing pulls it towards the middle.
            assert abs(res["mean"] - mid) < abs(tgt - mid) * 0.75, (res, tgt)
            print(f"python trainer (target {tgt}): step {res['step']}, mixed {res['mixed']}, "
                  f"model mean {res['mean']:.2f}")

    # The unit's KillSignal=SIGINT: a graceful leave.
    t0 = time.monotonic()
    agents[0].send_signal(signal.SIGINT)
    wait_until(lambda: (member_status(binary, rpcs[1]) or {}).get(names[0]) == "left", 20,
               interval=0.1, what="deb2 lists deb1 left")
    rc = agents[0].wait(timeout=30)
    assert rc == 0, f"deb1 exited {rc} after SIGINT"
    print(f"SIGINT: deb1 left (seen by deb2) and exited 0 after {time.monotonic() - t0:.2f} s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", required=True, help="the CMake build dir to package")
    a = p.parse_args()
    build = os.path.abspath(a.build_dir)
    for tool in ("cpack", "dpkg-deb", "dpkg-query", "ldd"):
        if shutil.which(tool) is None:
            skip(f"{tool} not found (cpack: package cmake; dpkg-deb: dpkg; ldd: libc-bin)")
    if (cache_value(build, "MESHTRAIN_SANITIZE") or "OFF").upper() in ("ON", "1", "TRUE"):
        skip("sanitizer build: packages are made from a normal build")
    if not os.path.exists(os.path.join(build, "cli", "meshtrain")):
        raise AssertionError(f"{build}/cli/meshtrain is not built")
    start = time.monotonic()
    work = tempfile.mkdtemp(prefix="meshtrain-deb-")
    procs = Procs()
    ok = False
    try:
        deb_dir, root = os.path.join(work, "deb"), os.path.join(work, "root")
        deb, version, satisfying = check_package(build, work, deb_dir)
        run(["dpkg-deb", "-x", deb, root])
        check_control(deb, os.path.join(work, "control"))
        binary = os.path.join(root, "usr/bin/meshtrain")
        assert os.access(binary, os.X_OK), f"{binary} missing or not executable"
        check_shlibs(binary, satisfying)
        out = run([binary, "version"]).strip()
        assert out.startswith(f"meshtrain {version}"), out
        print(f"version: {out}")
        exec_start = check_unit(root, work)
        py = numpy_python()
        env = check_python_import(root, work, py)
        run_mesh(root, work, exec_start, env, py, procs)
        ok = True
    finally:
        procs.end_all()
        if not ok:
            for p in procs:
                try:
                    with open(p.log_path, errors="replace") as f:
                        tail = "".join(f.readlines()[-20:])
                except OSError:
                    tail = ""
                print(f"---- {p.log_path} ----\n{tail}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    print(f"PASS ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
