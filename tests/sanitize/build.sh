#!/usr/bin/env bash
# Configures and builds the sanitizer tree (tests/sanitize/CMakeLists.txt) in $1, with Debian's
# clang when present (then the libFuzzer targets too), else the default C++ compiler.
# Usage: bash tests/sanitize/build.sh BUILD_DIR [JOBS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: build.sh BUILD_DIR [JOBS]}"
jobs="${2:-2}"
compiler=()
if command -v clang++ >/dev/null 2>&1; then compiler=(-DCMAKE_CXX_COMPILER="$(command -v clang++)"); fi
start=$(date +%s)
cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Debug "${compiler[@]}" >"$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log"; echo "sanitize: configure failed"; exit 1; }
cmake --build "$dir" -j "$jobs" >"$dir.build.log" 2>&1 ||
  { grep -E "error|Error" "$dir.build.log" | head -40; echo "sanitize: build failed (log: $dir.build.log)"; exit 1; }
echo "sanitize: built $dir in $(( $(date +%s) - start )) s"
