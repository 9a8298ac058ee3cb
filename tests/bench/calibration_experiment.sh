#!/usr/bin/env bash
# The calibration accuracy experiment (issue #6) on CPU with Gloo, end to end: train a set of
# plans for real, calibrate on some of them, validate on *different* plans held out from the fit,
# and print predicted vs measured step time and peak memory for every held-out plan, with the
# default constants and with the calibrated profile. Targets: peak memory within 5 %, step time
# within 10 %.
#
#   tests/bench/calibration_experiment.sh [BUILD_DIR] [WORK_DIR]
#
# BUILD_DIR defaults to ./build (needs build/cli/shardtune), WORK_DIR to a fresh temporary
# folder. STEPS (default 8) sets the steps per run; NPROC (default 2) the ranks. Needs jq.
set -euo pipefail

build=${1:-build}
work=${2:-$(mktemp -d /tmp/shardtune-calibration.XXXXXX)}
st="$build/cli/shardtune"
steps=${STEPS:-8}
nproc=${NPROC:-2}
[[ -x "$st" ]] || { echo "error: $st not found; build the shardtune target first" >&2; exit 1; }
command -v jq >/dev/null || { echo "error: jq is required to print the table" >&2; exit 1; }
mkdir -p "$work"

# name | plan flags. The fit set varies micro-batch, sequence length (attention vs matmul
# work) and strategy; the held-out set uses shapes and settings the fit never saw.
fit_plans=(
  "fit-fs-mb1-s128|--strategy full_shard --micro-batch 1 --seq-len 128"
  "fit-fs-mb4-s64|--strategy full_shard --micro-batch 4 --seq-len 64"
  "fit-sgo-mb2-s256|--strategy shard_grad_op --micro-batch 2 --seq-len 256"
  "fit-ns-mb2-s128|--strategy no_shard --micro-batch 2 --seq-len 128"
)
heldout_plans=(
  "ho-fs-mb2-s192-ga2|--strategy full_shard --micro-batch 2 --seq-len 192 --grad-accum 2"
  "ho-sgo-mb1-s256|--strategy shard_grad_op --micro-batch 1 --seq-len 256"
  "ho-fs-mb3-s96-ckpt|--strategy full_shard --micro-batch 3 --seq-len 96 --checkpointing full"
)

run_plan() {  # name flags
  local name=$1 flags=$2
  if [[ ! -f "$work/$name/measurements.json" ]]; then
    # shellcheck disable=SC2086
    "$st" run --model tiny-llama --nproc "$nproc" --steps "$steps" --out "$work/$name" $flags \
      >"$work/$name.log" 2>&1 || { echo "error: run $name failed, see $work/$name.log" >&2; exit 1; }
  fi
  echo "$work/$name/measurements.json"
}

fit_files=() heldout_files=()
for p in "${fit_plans[@]}"; do fit_files+=("$(run_plan "${p%%|*}" "${p#*|}")"); done
for p in "${heldout_plans[@]}"; do heldout_files+=("$(run_plan "${p%%|*}" "${p#*|}")"); done
# The noise floor: the first held-out plan once more. No model can be closer to a measurement
# than two measurements of the same plan are to each other.
p=${heldout_plans[0]}
repeat_file=$(run_plan "${p%%|*}-repeat" "${p#*|}")

"$st" calibrate "${fit_files[@]}" --out "$work/profile.json" >"$work/calibrate.txt" 2>&1
cat "$work/calibrate.txt"
echo
"$st" validate --measurements "${heldout_files[@]}" --json >"$work/validate_default.json"
"$st" validate --measurements "${heldout_files[@]}" --profile "$work/profile.json" --json \
  >"$work/validate_calibrated.json"
"$st" validate --measurements "${fit_files[@]}" --profile "$work/profile.json" --json \
  >"$work/validate_fit.json"

table() {  # file label
  jq -r --arg lab "$2" '
    def pct: (. * 1000 | round / 10 | tostring) + " %";
    .runs[] as $r
    | ($r.rows[] | select(.name == "step time")) as $s
    | ($r.rows[] | select(.name == "peak allocated (tracked)")) as $m
    | [$lab, ($r.measurements | split("/") | .[-2]),
       ($s.predicted * 1000 | round | tostring) + " ms", ($s.measured * 1000 | round | tostring) + " ms",
       ($s.error | pct),
       ($m.predicted / 1048576 * 10 | round / 10 | tostring) + " MiB",
       ($m.measured / 1048576 * 10 | round / 10 | tostring) + " MiB", ($m.error | pct)]
    | @tsv' "$1"
}

summary() {  # file label
  jq -r --arg lab "$2" '
    def pct: (. * 1000 | round / 10 | tostring) + " %";
    "\($lab): step time median |error| \(.summary.step.median_abs_error | pct), worst \(.summary.step.worst_abs_error | pct); "
    + "peak memory (tracked + RSS) median \(.summary.memory.median_abs_error | pct), worst \(.summary.memory.worst_abs_error | pct); "
    + "compute spans median \(.summary.compute.median_abs_error | pct); collectives median \(.summary.collective.median_abs_error | pct)"' "$1"
}

echo "Held-out plans (not in the fit), $nproc ranks, tiny-llama, $steps steps each (step 1 excluded)"
{
  printf 'constants\tplan\tstep pred\tstep meas\tstep err\tpeak pred\tpeak meas\tpeak err\n'
  table "$work/validate_default.json" default
  table "$work/validate_calibrated.json" calibrated
  table "$work/validate_fit.json" "in-fit (calibrated)"
} | column -t -s $'\t'
echo
summary "$work/validate_default.json" "held-out, default constants"
summary "$work/validate_calibrated.json" "held-out, calibrated"
summary "$work/validate_fit.json" "fit set, calibrated"
jq -r -s '"noise floor: the same plan measured twice: step time \(.[0].summary.mean_step_time_s * 1000 | round) ms vs \(.[1].summary.mean_step_time_s * 1000 | round) ms (\((.[1].summary.mean_step_time_s / .[0].summary.mean_step_time_s - 1) * 1000 | round / 10) %), tracked peak \(.[0].memory.peak_tracked_bytes) vs \(.[1].memory.peak_tracked_bytes) bytes"' \
  "${heldout_files[0]}" "$repeat_file"
echo "load average now: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo "targets: peak memory within 5 %, step time within 10 %; files in $work"
