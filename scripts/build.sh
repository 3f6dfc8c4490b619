#!/usr/bin/env bash
# Configures and builds meshtrain into build/ (or $BUILD_DIR). Extra args go to cmake configure,
# e.g. scripts/build.sh -DMESHTRAIN_SANITIZE=ON with BUILD_DIR=build-asan. BUILD_TARGET=meshtrain
# builds that target only (the binary, as scripts/demo.sh does) instead of everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/install-deps.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
