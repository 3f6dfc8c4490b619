#!/usr/bin/env bash
# The main job from a fresh Debian machine: installs dependencies, builds, and runs a local mesh
# of agents on loopback training Fashion-MNIST, shown live (see scripts/demo.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build bash scripts/build.sh
exec python3 scripts/demo.py --bin build/cli/meshtrain "$@"
