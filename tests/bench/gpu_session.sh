#!/usr/bin/env bash
# A GPU session's executor checks in one command (device time is scarce): builds shardtune and
# the GPU tests against the machine's Python torch, runs `ctest -L gpu`, the executor benchmark
# (gpu_executor_bench.sh) and PyTorch FSDP2 step-time references on the same GPU right after it
# (ratios from one session), and packs the results into OUT_DIR (at most a few files).
# Usage: [ONLY="bench runs"] [FSDP2_MBS="4 8"] tests/bench/gpu_session.sh OUT_DIR
set -u
out=${1:?out dir}
root=$(cd "$(dirname "$0")/../.." && pwd)
b=/tmp/shardtune_gpu_build
mkdir -p "$out" /tmp/gs
t0=$(date +%s)
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
{ cmake -S "$root" -B "$b" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DSHARDTUNE_SANITIZER_TESTS=OFF &&
  cmake --build "$b" -j "$(nproc)" --target shardtune executor_gpu_test; } >/tmp/gs/build.log 2>&1
rc=$?
echo "build rc=$rc in $(( $(date +%s) - t0 )) s"
grep -E "error|shardtune:" /tmp/gs/build.log | head -40
cp /tmp/gs/build.log "$out/build.log"
[[ $rc == 0 ]] || exit 1
ctest --test-dir "$b" -L gpu --output-on-failure >"$out/ctest_gpu.log" 2>&1
echo "ctest -L gpu rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "tests passed|Failed|Passed|Skipped" "$out/ctest_gpu.log" | head -20
bash "$root/tests/bench/gpu_executor_bench.sh" "$b" /tmp/gs/bench
echo "bench done ($(( $(date +%s) - t0 )) s)"
ref="$root/tests/bench/fsdp2_reference"
for mb in ${FSDP2_MBS-4 8}; do  # FSDP2_MBS="" skips the references
  timeout 150 python3 "$ref/measure_fsdp2.py" --mb $mb --steps 8 --root-reshard default >>/tmp/gs/fsdp2_timing.jsonl 2>/tmp/gs/fsdp2_err.log ||
    tail -3 /tmp/gs/fsdp2_err.log
done
[[ -s /tmp/gs/fsdp2_timing.jsonl ]] && python3 - /tmp/gs/fsdp2_timing.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(f"FSDP2 mb{d['config']['mb']}: {d['tokens_per_s_per_gpu']:,.0f} tok/s/GPU, MFU {100*d['mfu_989']:.1f}%, "
          f"step {d['steady_step_time_s_median']:.3f} s, peak {max(s['peak_allocated'] for s in d['steps'])/2**30:.2f} GiB")
PY
[[ -s /tmp/gs/fsdp2_timing.jsonl ]] && cp /tmp/gs/fsdp2_timing.jsonl "$out/"
tar czf "$out/bench.tar.gz" -C /tmp/gs bench
echo "all done ($(( $(date +%s) - t0 )) s)"
