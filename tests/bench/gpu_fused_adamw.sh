#!/usr/bin/env bash
# Session 18's third GPU command (#21): the executor's fused AdamW (--optimizer-impl fused,
# at::_fused_adamw_) against its op-by-op AdamW on Llama-3.2-1B, mb 4 x 2048 on one H100, with
# FSDP2 + HF (fused AdamW) right after it; and the fused AdamW's GPU test.
# Usage: gpu_fused_adamw.sh OUT_DIR
set -u
out=${1:?out dir}; mkdir -p "$out" /tmp/gfa; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
root=$(cd "$(dirname "$0")/../.." && pwd); b=/tmp/shardtune_gpu_build
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
{ cmake -S "$root" -B "$b" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DSHARDTUNE_SANITIZER_TESTS=OFF &&
  cmake --build "$b" -j "$(nproc)" --target shardtune shardtune-exec kernels_gpu_test; } >/tmp/gfa/build.log 2>&1
echo "build rc=$? at $(el) s"; grep -E "error" /tmp/gfa/build.log | head -20
"$b/tests/executor/kernels_gpu_test" --gtest_filter='FusedAdamW*' 2>&1 | tail -4
st="$b/cli/shardtune"
for impl in foreach fused foreach fused; do
  timeout 60 "$st" run --model llama3.2-1b --device cuda --seq-len 2048 --micro-batch 4 --steps 8 --optimizer-impl $impl \
    --no-trace --no-checkpoints --out /tmp/gfa/$impl >/tmp/gfa/$impl.log 2>&1
  echo "run $impl rc=$? at $(el) s"; grep -E "^step [5-8]/" /tmp/gfa/$impl.log | tr '\n' ' '; echo
  cp /tmp/gfa/$impl.log "$out/run_$impl.log"
done
timeout 80 python3 "$root/tests/bench/fsdp2_reference/measure_fsdp2.py" --mb 4 --steps 8 --optim fused --root-reshard default \
  >"$out/fsdp2_fused_mb4.json" 2>/tmp/gfa/ms.err || tail -3 /tmp/gfa/ms.err
python3 -c "import json;d=json.load(open('$out/fsdp2_fused_mb4.json'));print('FSDP2 fused mb4: step', round(d['steady_step_time_s_median'],4), 'tok/s', round(d['tokens_per_s_per_gpu']))"
echo "done at $(el) s"
