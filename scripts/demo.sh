#!/usr/bin/env bash
# Why a mesh, from a fresh Debian machine: installs the dependencies, builds the meshtrain binary,
# then runs a local mesh of 4 agents on loopback, each on a label-skewed shard of Fashion-MNIST,
# beside single processes on one node's data and on all of it, shown live and ending with one
# line that compares them (options: bash scripts/demo.sh --help; details in scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  case "$arg" in
    -h | --help) exec python3 scripts/demo.py --help ;;
  esac
done
BUILD_DIR=build BUILD_TARGET=meshtrain bash scripts/build.sh
exec python3 scripts/demo.py --bin build/cli/meshtrain "$@"
