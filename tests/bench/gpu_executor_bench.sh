#!/usr/bin/env bash
# shardtune's own FSDP runtime on one GPU: Llama-3.2-1B at 2048 tokens per sequence, world 1
# over a one-rank NCCL communicator and rank 0 of an emulated 8-GPU world; prints tokens/s,
# MFU and the CUDA allocator's peaks next to `shardtune estimate` for the same plan.
# Usage: [ONLY="name ..."] gpu_executor_bench.sh BUILD_DIR OUT_DIR    (needs a CUDA LibTorch build and one GPU)
set -euo pipefail
B=${1:?build dir}/cli/shardtune
out=${2:?out dir}
mkdir -p "$out"
run() {  # name, extra flags... (MODEL=... picks another preset)
  local name=$1; shift
  [[ -z ${ONLY:-} || " $ONLY " == *" $name "* ]] || return 0  # ONLY="a b": just those runs
  rm -rf "/tmp/st_$name"
  "$B" run --model "${MODEL:-llama3.2-1b}" --device cuda --seq-len 2048 --no-trace --no-checkpoints \
    --out "/tmp/st_$name" "$@" >"$out/$name.log" 2>&1 || { echo "$name failed"; tail -5 "$out/$name.log"; return 0; }
  cp "/tmp/st_$name/measurements.json" "$out/$name.json"
  python3 - "$out/$name.json" "$name" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1])); m = d["memory"]; s = d["steps"]
t = statistics.median(x["time_s"] for x in s[1:]) if len(s) > 1 else s[0]["time_s"]
tok = d["run"]["tokens_per_step"] / max(1, d["run"]["data_parallel_ranks"])
tps = tok / t
mfu = tps * d["summary"]["model_flops_per_token"] / 989e12
G = 2**30
print(f"{sys.argv[2]:<12} step {t:.3f} s  {tps:,.0f} tok/s/GPU  MFU {100*mfu:.1f}%  "
      f"alloc peak {m['peak_tracked_bytes']/G:.2f} GiB  reserved {m.get('peak_device_reserved_bytes',0)/G:.2f} GiB  "
      f"device used {m.get('device_used_bytes',0)/G:.2f} GiB")
PY
}
run w1_mb4 --micro-batch 4 --steps 6
run w1_mb8 --micro-batch 8 --steps 6
run e8_mb4 --micro-batch 4 --steps 4 --emulate-world 8
run w1_mb4_offload_all --micro-batch 4 --steps 4 --offload all
run w1_mb4_offload_opt --micro-batch 4 --steps 4 --offload optimizer
MODEL=llama3-8b run e8_8b_mb1 --micro-batch 1 --steps 4 --emulate-world 8
