#!/usr/bin/env bash
# Benchmark (not a test): how much a probed profile moves the step-time prediction for a real CPU
# run. Trains tiny-llama on 2 Gloo ranks (fp32, eager attention, micro-batch 4 x 256), probes
# this machine with the same 2 ranks, and prints `validate`'s step and compute rows without a
# profile (catalog constants) and with the probe's tables. Prints the date and the machine.
# Usage: bash tests/bench/probe_cpu_check.sh [path/to/shardtune] [WORKDIR]
set -euo pipefail
bin=${1:-build/cli/shardtune}
work=${2:-$(mktemp -d)}
[ -x "$bin" ] || { echo "probe_cpu_check.sh: $bin: expected the shardtune binary (build it first)" >&2; exit 1; }
echo "probe vs catalog on a CPU run, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
mkdir -p "$work"
rm -rf "$work/run"
"$bin" run --model tiny-llama --nproc 2 --micro-batch 4 --seq-len 256 --global-batch 8 \
  --precision fp32 --attention eager --steps 4 --out "$work/run" > "$work/run.log" 2>&1
"$bin" probe --device cpu --nproc 2 --out "$work/probe.json" > "$work/probe.log" 2>&1
for profile in none "$work/probe.json"; do
  args=(validate --measurements "$work/run/measurements.json")
  [ "$profile" = none ] || args+=(--profile "$profile")
  echo "--- profile: $profile"
  "$bin" "${args[@]}" 2>/dev/null | grep -E "^  (step|phase) |^  compute +model.layers.0 |^  compute +lm_head "
done
