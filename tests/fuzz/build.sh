#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined) in their own build
# directory and writes the seed corpus there. The main build is untouched.
# Usage: tests/fuzz/build.sh [BUILD_DIR]     (default: build-fuzz next to the repository's build)
# Env: FUZZ_JOBS (parallel compile jobs, default 2).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-${FUZZ_BUILD_DIR:-$here/../../build-fuzz}}"
jobs="${FUZZ_JOBS:-2}"
command -v clang++ >/dev/null || { echo "build.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$build" -j"$jobs"
rm -rf "$build/seeds"
"$build/make_corpus" "$build/seeds" >/dev/null
echo "build.sh: targets in $build: $(tr '\n' ' ' < "$build/fuzz_targets.txt")"
