#!/usr/bin/env bash
# The whole test suite from a fresh Debian machine: installs dependencies, builds, and runs
#   1. the release build (gcc, -Wall -Wextra -Werror, unity batches, line tables only);
#   2. every CTest test of that build but the network-namespace ones (unit, virtual-time
#      simulation, transport, multi-process integration, fault-injection and packaging tests, and
#      the lint: source limits, `mypy --strict` of the Python client),
#      while the sanitizer build (clang, ASan + UBSan, with the libFuzzer targets) compiles beside
#      them at low priority: the multi-process tests mostly wait on agents, the compiler fills
#      the cores;
#   3. a short bounded run of every libFuzzer target (tests/fuzz) from the sanitizer build;
#   4. the network-namespace tests (netbed) of the release build, then those with the sanitizer
#      build's agents, then netbed/test_capacity alone, release build only (its emulated links
#      want the CPU, and it measures rates). The unit, simulation and transport tests under ASan + UBSan run from the end of
#      the sanitizer build on, in its session, beside the other stages (the netbed tests mostly
#      wait on emulated links); the script waits for them before test_capacity.
# Both builds compile through ccache (scripts/build.sh): a second run on the same machine
# recompiles only what changed; the summary says how many compiles the cache answered.
# MESHTRAIN_SKIP_ASAN=1 skips the sanitizer build and its stages. The integration and fault
# tests assert wall-clock bounds and RSS growth, which the sanitizers' slowdown and quarantine
# memory distort; run them there by hand with `ctest --test-dir build-asan -L "integration|faults"`.
# Prints each stage's wall time, and at the end one line "tests: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
last=$start
last_name=""
times=()
stage() {
  local now
  now=$(date +%s)
  [ -n "$last_name" ] && times+=("$(printf '%-58s %5d s' "$last_name" $((now - last)))")
  last=$now
  last_name="$*"
  [ -n "$*" ] && { echo; echo "== $* ($((now - start)) s) =="; }
  return 0
}
summary() {
  echo
  echo "== stage times (wall) =="
  printf '%s\n' "${times[@]}"
  printf '%-58s %5d s\n' "total" $(($(date +%s) - start))
}
# One background job at a time, in its own session (so its own process group, which an early
# exit ends by its id). With the kernel's autogroup scheduling (sched_autogroup_enabled) a new
# session is a scheduling group of its own whose weight `nice` does not change: `low` lowers the
# group's own priority too (/proc/self/autogroup), so the job really yields to the tests. Call it
# with & only: it replaces the background subshell, so $! is the new session's (and group's) id.
bg_pid=""
low() {
  exec setsid bash -c 'echo 15 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 15 "$@"' \
    low "$@"
}
cleanup() { [ -n "$bg_pid" ] && kill -- "-$bg_pid" 2>/dev/null || true; }
trap cleanup EXIT

passed=0
failed=0
# Adds the counts of a ctest log to passed/failed (a ctest that printed none counts as one failure
# when its status was not 0).
count_ctest() {
  local log=$1 rc=$2 line total fail
  line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -n 1 || true)
  if [ -n "$line" ]; then
    total=$(echo "$line" | grep -oE "out of [0-9]+" | grep -oE "[0-9]+")
    fail=$(echo "$line" | grep -oE "[0-9]+ tests failed" | grep -oE "[0-9]+")
    passed=$((passed + total - fail))
    failed=$((failed + fail))
  elif [ "$rc" != 0 ]; then
    failed=$((failed + 1))
  fi
}
# Runs ctest with the given arguments, shown live and kept in LOG; returns ctest's status.
run_ctest() {
  local log=$1 rc
  shift
  set +e
  ctest "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  count_ctest "$log" "$rc"
  return "$rc"
}

asan=1
[ "${MESHTRAIN_SKIP_ASAN:-0}" = "1" ] && asan=0

stage "dependencies"
bash scripts/install-deps.sh
use_ccache=0
[ "${MESHTRAIN_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null && use_ccache=1
[ "$use_ccache" = 1 ] && ccache --zero-stats >/dev/null

stage "build (gcc RelWithDebInfo -g1, unity, -Wall -Wextra -Werror)"
BUILD_DIR=build bash scripts/build.sh -DMESHTRAIN_WERROR=ON -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"

if [ "$asan" = 1 ]; then
  # clang, so that the libFuzzer targets build in the same tree; -O1 and line tables only: the
  # sanitizers need frames and lines, not full debug info.
  # Once built, the unit, simulation and transport tests run under ASan + UBSan in the same
  # session, back at normal priority (a fair share beside the release tests: at low priority
  # another busy process on the machine starved them for minutes).
  echo "sanitizer build and its unit tests start in the background (build-asan.log," \
    "build-asan/ctest-unit.log)"
  rm -f build-asan.rc build-asan/ctest-unit.rc
  # shellcheck disable=SC2016
  CC=clang CXX=clang++ BUILD_DIR=build-asan JOBS=2 low bash -c '
    bash scripts/build.sh "$@" >build-asan.log 2>&1
    rc=$?
    echo "$rc" >build-asan.rc
    [ "$rc" = 0 ] || exit "$rc"
    echo 0 >/proc/self/autogroup 2>/dev/null || true
    renice -n 0 -p $$ >/dev/null 2>&1 || true
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j2 --timeout 900 \
      -LE "integration|faults|packaging|netbed|lint" >build-asan/ctest-unit.log 2>&1
    echo $? >build-asan/ctest-unit.rc' asan \
    -DMESHTRAIN_SANITIZE=ON -DMESHTRAIN_FUZZ=ON -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" &
  bg_pid=$!
fi

stage "tests (release build) but netbed"
rc=0
run_ctest build/ctest.log --test-dir build --output-on-failure -j2 --timeout 600 -LE netbed || rc=1

if [ "$asan" = 1 ]; then
  stage "sanitizer build (what was left of it after the tests)"
  # Bounded by the background session's life (and an hour).
  for _ in $(seq 1800); do
    [ -f build-asan.rc ] || ! kill -0 "$bg_pid" 2>/dev/null && break
    sleep 2
  done
  if [ "$(cat build-asan.rc 2>/dev/null)" != 0 ]; then
    tail -n 60 build-asan.log
    echo "sanitizer build failed (build-asan.log)"
    exit 1
  fi

  stage "fuzz targets, short run"
  rm -rf build-asan/seeds
  build-asan/make_corpus build-asan/seeds >/dev/null
  # A smoke run (4 000 inputs a target, about half a minute): the decoders' mutation fuzz of the
  # release build (tests/wire) puts 100 000 corrupted inputs a kind through them.
  bash tests/fuzz/run.sh --no-build --build build-asan --runs 4000 --parallel 2 || rc=1

  stage "netbed tests (release, then ASan + UBSan build) beside the rest of the ASan unit tests"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # test_capacity times probe trains at up to 640 Mbit/s: it runs alone, after the ASan tests
  # (beside them a 640 Mbit/s host was once measured at 179).
  run_ctest build/ctest-netbed.log --test-dir build --output-on-failure --timeout 600 -L netbed \
    -E netbed/test_capacity || rc=1
  run_ctest build-asan/ctest-netbed.log --test-dir build-asan --output-on-failure --timeout 900 \
    -L netbed -E netbed/test_capacity || rc=1
  wait "$bg_pid" || true
  bg_pid=""
  echo
  echo "-- ASan + UBSan: unit, simulation and transport tests --"
  cat build-asan/ctest-unit.log
  asan_rc=$(cat build-asan/ctest-unit.rc 2>/dev/null || echo 1)
  count_ctest build-asan/ctest-unit.log "$asan_rc"
  [ "$asan_rc" = 0 ] || rc=1
  echo
  # Release only: it measures link rates, which the sanitizers' slowdown bends, and the ASan
  # agents of the other netbed tests run the same probe trains (their status capacity_probes).
  stage "netbed/test_capacity alone (release build)"
  run_ctest build/ctest-capacity.log --test-dir build --output-on-failure --timeout 600 \
    -R netbed/test_capacity || rc=1
else
  stage "netbed tests (release build)"
  run_ctest build/ctest-netbed.log --test-dir build --output-on-failure --timeout 600 -L netbed \
    || rc=1
fi
stage ""
summary
if [ "$use_ccache" = 1 ]; then
  echo "ccache: $(ccache --print-stats | awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" {h += $2} $1 == "cache_miss" {m = $2} END {printf "%d of %d compiles from the cache", h, h + m}')"
fi
echo "tests: $passed passed, $failed failed"
exit "$rc"
