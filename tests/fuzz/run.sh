#!/usr/bin/env bash
# Builds (tests/fuzz/build.sh) and runs every libFuzzer target, then prints how many inputs each
# one executed. Exits non-zero if any target crashed, leaked, hit a sanitizer report or an
# oracle (crash inputs are kept under BUILD/crashes/).
#
# Usage: tests/fuzz/run.sh [--runs N | --seconds S] [--build DIR] [--parallel P] [--no-build]
#                          [TARGET...]
#   --runs N       executions per target (default 1000000)
#   --seconds S    run each target for S seconds instead
#   --build DIR    fuzz build directory (default: build-fuzz in the repository, git-ignored)
#   --parallel P   targets run at once (default 1)
#   --no-build     reuse an existing build
# Each target starts from BUILD/corpus/<target> (seeded from make_corpus's output, and grown by
# earlier runs), so repeated campaigns keep their coverage.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${FUZZ_BUILD_DIR:-$here/../../build-fuzz}"
limit=(-runs=1000000)
limit_text="1000000 runs"
parallel=1
do_build=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) limit=(-runs="$2"); limit_text="$2 runs"; shift 2 ;;
    --seconds) limit=(-max_total_time="$2"); limit_text="$2 s"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --parallel) parallel="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ "$do_build" = 1 ] && FUZZ_BUILD_DIR="$build" "$here/build.sh" "$build" >/dev/null
build="$(cd "$build" && pwd)"
[ ${#targets[@]} -eq 0 ] && mapfile -t targets < <(grep -v '^$' "$build/fuzz_targets.txt")
mkdir -p "$build/logs" "$build/crashes"

run_one() {
  local t="$1" corpus="$build/corpus/$1"
  mkdir -p "$corpus"
  [ -d "$build/seeds/$t" ] && cp -n "$build/seeds/$t"/* "$corpus"/ 2>/dev/null || true
  local start=$(date +%s.%N)
  local rc=0
  ASAN_OPTIONS="abort_on_error=1:detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1" \
    "$build/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$t-" "$corpus" >"$build/logs/$t.log" 2>&1 || rc=$?
  local secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/logs/$t.log" |
                grep -o '[0-9]*$' || echo 0)
  printf '%s %s %s %s %s\n' "$t" "${execs:-0}" "$secs" "$(ls "$corpus" | wc -l)" "$rc" \
    >"$build/logs/$t.result"
}

echo "fuzzing ${#targets[@]} targets, $limit_text each (build: $build)"
running=0
for t in "${targets[@]}"; do
  [ -x "$build/$t" ] || { echo "run.sh: no target $t in $build" >&2; exit 2; }
  rm -f "$build/logs/$t.result"
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true

failed=0
printf '%-22s %12s %10s %10s %8s  %s\n' target executions seconds exec/s corpus status
for t in "${targets[@]}"; do
  read -r name execs secs corpus rc <"$build/logs/$t.result"
  status=ok
  if [ "$rc" != 0 ]; then status="FAILED (rc $rc, see $build/logs/$t.log)"; failed=1; fi
  rate=$(awk -v n="$execs" -v s="$secs" 'BEGIN { printf "%d", n / (s + 0.001) }')
  printf '%-22s %12s %10.1f %10s %8s  %s\n' "$name" "$execs" "$secs" "$rate" "$corpus" "$status"
done
exit "$failed"
