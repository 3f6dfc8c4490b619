#!/usr/bin/env bash
# Installs the Debian packages meshtrain builds and runs with (docs/contract.md "Dependencies").
# Idempotent: skips apt entirely when every package is already installed.
set -euo pipefail
PKGS=(build-essential cmake pkg-config libuv1-dev libeigen3-dev libflatbuffers-dev
      flatbuffers-compiler catch2 libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
      libsodium-dev zlib1g-dev dataset-fashion-mnist iproute2 nftables procps python3
      clang libclang-rt-14-dev libmicrohttpd-dev chromium prometheus curl
      python3-numpy python3-torch python3-mypy python3-packaging iperf3 ninja-build ccache
      fortunes libopenblas0-openmp)
# libopenblas0-openmp: Debian's python3-torch does its matrix products through libblas.so.3, which
# is the reference BLAS unless an optimised one is installed (the char-LM's forward and backward
# take 6x as long with it); the OpenMP build shares torch's OpenMP threads (torch.set_num_threads)
# and is safe from several threads at once, which the serial build is not.
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
