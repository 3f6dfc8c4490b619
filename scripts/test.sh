#!/usr/bin/env bash
# The whole test suite from a fresh Debian machine: installs dependencies, builds, runs every
# CTest test (unit, simulation, integration, fault injection), then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer (skip with MESHTRAIN_SKIP_ASAN=1).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
BUILD_DIR=build bash scripts/build.sh -DMESHTRAIN_WERROR=ON
ctest --test-dir build --output-on-failure -j2 --timeout 600
if [ "${MESHTRAIN_SKIP_ASAN:-0}" != "1" ]; then
  echo "== sanitizer build (ASan + UBSan) =="
  BUILD_DIR=build-asan bash scripts/build.sh -DMESHTRAIN_SANITIZE=ON
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2 --timeout 900 -LE bench
fi
echo "test suite finished in $(( $(date +%s) - start )) s"
