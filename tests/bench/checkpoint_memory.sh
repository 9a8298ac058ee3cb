#!/usr/bin/env bash
# Prints the host memory of a checkpoint save and a resume on CPU ranks (issue #50), the figures
# the README and executor/README.md quote: qwen2.5-0.5b on 2 Gloo ranks, 256 tokens, a checkpoint
# after step 2, then a resume to step 3; each phase's worst-rank RSS and tracked peak from
# measurements.json, and validate's per-phase rows. Usage: tests/bench/checkpoint_memory.sh
# [BUILD_DIR] [WORK_DIR]. Needs about 14 GiB of RAM and 6 GiB of disk; takes about 3 minutes on
# 2 cores.
set -euo pipefail
build=${1:-build}
work=${2:-$(mktemp -d /tmp/shardtune-ckpt-memory.XXXXXX)}
mkdir -p "$work"
st="$build/cli/shardtune"
[[ -x "$st" ]] || { echo "error: $st not found; build the shardtune target first" >&2; exit 1; }
job=(--model qwen2.5-0.5b --nproc 2 --seq-len 256 --micro-batch 1 --global-batch 2 --no-trace)
echo "date: $(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
"$st" run "${job[@]}" --steps 2 --out "$work/run" > "$work/first.log" 2>&1
cp "$work/run/measurements.json" "$work/first.json"
"$st" run "${job[@]}" --steps 3 --out "$work/run" > "$work/resume.log" 2>&1
for f in "$work/first.json" "$work/run/measurements.json"; do
  python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["phases"]:
    print(f"  {p['name']:<16} tracked {p['peak_tracked_bytes'] / 2**30:6.2f} GiB   RSS {p['peak_rss_bytes'] / 2**30:6.2f} GiB")
PY
done
echo "validate (the resumed run):"
"$st" validate --measurements "$work/run/measurements.json" --model qwen2.5-0.5b | grep -E "memory: (save|resume|load|steady)"
rm -rf "$work/run/checkpoints"
