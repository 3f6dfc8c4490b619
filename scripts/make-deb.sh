#!/usr/bin/env bash
# Builds the Debian package: a portable binary (-DMESHTRAIN_NATIVE=OFF: x86-64 baseline, not the
# build machine's -march=native), then `cpack -G DEB`. Prints the path of the .deb.
#   bash scripts/make-deb.sh            # build dir build-deb (or $BUILD_DIR), .deb in out/
#   sudo apt install ./out/meshtrain_*.deb
# Extra args go to cmake configure.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-deb}
OUT_DIR=${OUT_DIR:-out}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHTRAIN_NATIVE=OFF \
  -DMESHTRAIN_TESTS=OFF "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target meshtrain
mkdir -p "$OUT_DIR"
if ! log=$(cpack -G DEB --config "$BUILD_DIR/CPackConfig.cmake" -B "$OUT_DIR" 2>&1); then
  echo "$log" >&2
  exit 1
fi
rm -rf "$OUT_DIR/_CPack_Packages"
deb=$(ls -t "$OUT_DIR"/meshtrain_*.deb | head -n 1)
echo "$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")"
