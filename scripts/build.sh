#!/usr/bin/env bash
# Configures and builds meshtrain into build/ (or $BUILD_DIR). Extra args go to cmake configure,
# e.g. scripts/build.sh -DMESHTRAIN_SANITIZE=ON with BUILD_DIR=build-asan.
# Env: BUILD_TYPE (default RelWithDebInfo); JOBS (default: the number of cores); BUILD_TARGET
# builds that target only (e.g. meshtrain, the binary, as scripts/demo.sh does). A new build
# directory uses Ninja (faster scheduling than make), an existing one keeps its generator.
# Compiles go through ccache (its cache in ~/.cache/ccache, shared by every checkout on the
# machine: paths are hashed relative to the checkout); MESHTRAIN_CCACHE=0 compiles without it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/install-deps.sh
gen=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
launcher=()
if [ "${MESHTRAIN_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
elif [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  launcher=(-UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER)
fi
cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  "${launcher[@]}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
