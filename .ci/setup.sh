#!/usr/bin/env bash
# Installs the Debian packages shardtune builds with, only those missing (apt-get update first
# when anything is). Safe to run again. Usage: bash .ci/setup.sh
set -euo pipefail
# libopenblas0-openmp: Debian's LibTorch calls whatever libblas.so.3 the alternatives system
# points at, and without it that is the reference BLAS (6 GFLOP/s on one core here, 17x slower
# CPU training). The OpenMP build, not the pthread one: LibTorch's intra-op pool is OpenMP, so
# both share one pool sized by --threads (README, "CPU runs and BLAS", has the measurement).
pkgs=(cmake g++ make ccache libtorch-dev libgloo-dev libeigen3-dev libboost-graph-dev
      libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev python3 python3-yaml
      libopenblas0-openmp
      clang libclang-rt-dev gdb)  # clang + libFuzzer: tests/fuzz; gdb: executor fault injection
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
