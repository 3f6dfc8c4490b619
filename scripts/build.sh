#!/usr/bin/env bash
# Configures and builds meshtrain into build/ (or $BUILD_DIR). Extra args go to cmake configure,
# e.g. scripts/build.sh -DMESHTRAIN_SANITIZE=ON with BUILD_DIR=build-asan.
# Env: BUILD_TYPE (default RelWithDebInfo); JOBS (default: the number of cores); BUILD_TARGET
# builds that target only (e.g. meshtrain, the binary, as scripts/demo.sh does). A new build
# directory uses Ninja (faster scheduling than make), an existing one keeps its generator.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/install-deps.sh
gen=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
