#!/usr/bin/env bash
# Benchmark (not a test): how long the README's test command takes from a fresh clone, and then
# the tests it leaves to .ci/run (label `extended`: the sanitizer tree and the fuzzers). Prints
# the date, the seconds of each part and the 15 slowest tests of the README command.
#
# Usage: bash tests/bench/test_command_time.sh [CLONE_DIR]   (default /tmp/shardtune_fresh)
# The clone is of this checkout's HEAD; ccache, when present, is whatever this machine has.
set -uo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-/tmp/shardtune_fresh}"
rm -rf "$dir" && git clone -q "$src" "$dir" && cd "$dir" || exit 1
log="$dir.logs" && rm -rf "$log" && mkdir -p "$log"
echo "test command from a fresh clone of $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(nproc) cores"
t0=$(date +%s)
bash .ci/setup.sh >"$log/setup.log" 2>&1 && cmake -S . -B build >"$log/cmake.log" 2>&1 &&
  cmake --build build -j2 >"$log/build.log" 2>&1
rc=$?
t1=$(date +%s)
echo "setup + configure + build: $((t1 - t0)) s (exit $rc)"
ctest --test-dir build -j2 -LE extended --output-on-failure >"$log/ctest.log" 2>&1
rc=$?
t2=$(date +%s)
echo "README test command in all: $((t2 - t0)) s (ctest $((t2 - t1)) s, exit $rc; $(grep -E 'tests passed' "$log/ctest.log"))"
echo "15 slowest tests of the README command:"
grep -E "Test +#[0-9]+: " "$log/ctest.log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+).* ([0-9.]+) sec.*/  \2 s  \1/' |
  sort -rn | head -15
ctest --test-dir build -j2 -L extended --output-on-failure >"$log/extended.log" 2>&1
rc=$?
t3=$(date +%s)
echo "extended tests (.ci/run after the README command): $((t3 - t2)) s (exit $rc; $(grep -E 'tests passed' "$log/extended.log"))"
echo ".ci/run in all: $((t3 - t0)) s"
