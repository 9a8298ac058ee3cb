#!/usr/bin/env bash
# Runs one libFuzzer binary of the sanitizer tree for a bounded time from the seed corpus
# (tests/fuzz/corpus/<target>/) plus the saved regressions; new inputs go to the build tree.
# A crash, a UB report, a leak, a timeout (10 s per input) or RSS > 2 GiB fails the test and
# leaves the input under BUILD/fuzz-artifacts/. Usage: run_fuzzer.sh SANITIZE_DIR TARGET SECONDS
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="$1"; target="$2"; seconds="$3"
work="$dir/fuzz-corpus/$target"; artifacts="$dir/fuzz-artifacts"
mkdir -p "$work" "$artifacts"
seeds=("$here/corpus/$target")
if [ -d "$here/regressions/$target" ]; then seeds+=("$here/regressions/$target"); fi
log="$dir/fuzz-$target.log"
set +e
"$dir/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -print_final_stats=1 -dict="$here/shardtune.dict" -artifact_prefix="$artifacts/$target-" \
  "$work" "${seeds[@]}" >"$log" 2>&1
rc=$?
set -e
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
echo "fuzz_$target: $runs inputs in ${seconds} s, exit $rc (log: $log)"
if [ "$rc" -ne 0 ]; then
  grep -E "^shardtune fuzz|runtime error|ERROR: |SUMMARY" "$log" | head -5
  ls -1 "$artifacts" | grep "^$target-" | sed "s|^|  input: $artifacts/|"
  exit 1
fi
