#!/usr/bin/env bash
# Issue #44: the measurements only a GPU can give, in priority order, in one device call. Works
# on an H100 or an H200 (the GPU's name picks the catalog kind). Every step runs under its own
# timeout, cut to what is left before the deadline (DEADLINE_S, default 660 s: the device call's
# 720 s less a margin for the results to come back), so the script always ends on time and
# writes what it has. The build (LibTorch, all cores) runs in the background from the start: the
# first steps need only Python's torch.
#
#   1. MoE allocator replay at full depth (decides tune's MoE answer): PyTorch FSDP2 +
#      transformers Qwen3-30B-A3B, 48 layers, rank 0 of 8 over the fake process group, micro-batch
#      2 x 4096 with full checkpointing (estimate on 8xH100: 71.1 GiB allocated, 113.7 GiB reserved
#      by the replay with no memory pressure), then micro-batch 8 (107.1 allocated; on 8xH200 the
#      replay's retry fits it in 139.9), two steps each: max_memory_allocated, max_memory_reserved
#      and the allocator's segments and cached free bytes (measure_fsdp2.py "allocator") beside
#      `shardtune estimate` of the same plan on this GPU's kind, once the build is done.
#   2. Attention as torchtitan's published runs ran it: SDPA forced to FlashAttention-2, cuDNN and
#      memory-efficient at Llama-3-8B's shape (B 2, 32 heads, 8 KV heads, S 8192 and 2048,
#      head_dim 128, causal), forward and backward; and a 30 s sustained bf16 8192^3 GEMM with the
#      SM clock and power from nvidia-smi beside it.
#   3. The executor against FSDP2 on the same GPU, minutes apart: Llama-3.2-1B world 1 at
#      micro-batch 1, 2, 4, 8 and with CPU offload, tokens/s and peaks for both (target: >= 1.25x
#      FSDP2's tokens/s, >= 1.0x under offload), and a --torch-profile trace of one executor step;
#      3b: the executor's verl activation offload on CUDA at micro-batch 4, and validate of it.
#   2c. TRL DPO's step in FSDP2 (policy, selective_log_softmax, a reference copy sharded on its
#      root only), beside `estimate --loss-kernel trl_logps --reference fsdp2_root`.
#   4. `ctest -L gpu` (the GPU kernel and runtime tests) when time remains.
#
# Usage: [DEADLINE_S=660] tests/bench/gpu_session.sh OUT_DIR
# Then, here: tests/bench/fsdp2_reference/compare_estimate.py reads OUT_DIR/*.jsonl again, and the
# figures go to tests/data/validation with the GPU, versions and date (OUT_DIR/env.txt).
set -u
out=${1:?out dir}
root=$(cd "$(dirname "$0")/../.." && pwd)
b=/tmp/shardtune_gpu_build
ref="$root/tests/bench/fsdp2_reference"
mkdir -p "$out" /tmp/gs
t0=$(date +%s)
deadline=${DEADLINE_S:-660}
el() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( deadline - $(el) )); }
# step NAME MAX_S COMMAND...: COMMAND under a timeout of min(MAX_S, what is left - 10 s), its
# output in OUT/NAME.log and its last lines here; skipped when under 20 s are left.
step() {
  local name=$1 max=$2
  shift 2
  local l=$(( $(left) - 10 ))
  if (( l < 20 )); then echo "== $name: skipped, ${l} s left"; return 0; fi
  (( max > l )) && max=$l
  echo "== $name (<= ${max} s, at $(el) s)"
  timeout -k 5 "$max" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc at $(el) s"
  tail -n 6 "$out/$name.log" | sed 's/^/   /'
  return 0
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm --format=csv
  python3 -c 'import torch,transformers;print("torch",torch.__version__,"cuda",torch.version.cuda,"cudnn",torch.backends.cudnn.version(),"nccl",torch.cuda.nccl.version(),"transformers",transformers.__version__)'
  date -u +%FT%TZ; } 2>&1 | tee "$out/env.txt"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu_name" in
  *H200*) kind=H200 ;;
  *H100*) kind=H100 ;;
  *) kind=H100; echo "unknown GPU \"$gpu_name\": estimates use the H100 catalog entry" ;;
esac
echo "GPU $gpu_name -> catalog kind $kind"

# The build, in the background on every core.
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
( { cmake -S "$root" -B "$b" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
      -DSHARDTUNE_SANITIZER_TESTS=OFF &&
    cmake --build "$b" -j "$(nproc)" --target shardtune shardtune-exec executor_gpu_test kernels_gpu_test; } \
    >/tmp/gs/build.log 2>&1
  echo $? >/tmp/gs/build.rc ) &
build_pid=$!
built() {  # waits for the build (at most what is left) and says whether it succeeded
  local l=$(( $(left) - 10 ))
  while kill -0 "$build_pid" 2>/dev/null && (( l > 0 )); do sleep 2; l=$(( $(left) - 10 )); done
  [[ -f /tmp/gs/build.rc && $(cat /tmp/gs/build.rc) == 0 ]]
}

# 1. MoE at full depth, rank 0 of 8.
moe=(python3 "$ref/measure_fsdp2.py" --hf-config "$root/tests/data/model/qwen3-30b-a3b.config.json"
     --world 8 --seq 4096 --ckpt full --steps 2 --root-reshard default)
step moe_mb2 240 "${moe[@]}" --mb 2 --tag moe_mb2
step moe_mb8 180 "${moe[@]}" --mb 8 --tag moe_mb8
cat "$out"/moe_mb*.log | grep '^{' >"$out/moe_fsdp2.jsonl"

# 2. Attention backends and sustained GEMM.
step sdpa_backends 90 python3 "$root/tests/bench/sdpa_backends.py" 8192 2048
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 1000 \
  >"$out/smi_sustained.csv" 2>&1 &
smi=$!
step sustained_gemm 45 python3 "$root/tests/bench/sustained_gemm.py"
kill $smi 2>/dev/null

# 2b. TRL's chunked NLL head (LossKernel trl_chunked_nll, model/activations.cc TrlChunkedNllHead):
# the fp32 GEMM rate at its chunk shape under torch's default allow_tf32 False (replaces
# kFp32GemmEfficiency, simulator/cost_model.h) and the head's forward+backward peak above what was
# live before it, at Qwen2.5-7B's head (H 3584, V 152064) over 8192 tokens. The loop is written
# here after TRL's _chunked_cross_entropy_loss (trl@f2cd577): gather, 256-row chunks under
# non-reentrant checkpointing, fp32 logits from fp32 copies.
step trl_chunked_head 60 python3 - <<'EOF'
import time, torch, torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
torch.backends.cuda.matmul.allow_tf32 = False
H, V, T, C = 3584, 152064, 8192, 256
dev = "cuda"
h = torch.randn(C, H, device=dev); w = torch.randn(V, H, device=dev)
for _ in range(3): h @ w.t()
torch.cuda.synchronize(); t = time.time(); n = 10
for _ in range(n): h @ w.t()
torch.cuda.synchronize(); dt = (time.time() - t) / n
print(f"fp32 GEMM [{C},{H}]x[{H},{V}]: {2*C*H*V/dt/1e12:.1f} TFLOP/s")
del h, w
def chunk(x, wt, lbl):
    logits = x.float() @ wt.float().t()
    logp = F.log_softmax(logits, dim=-1)
    loss = F.nll_loss(logp, lbl, reduction="sum")
    ent = (-(logp.exp() * logp).sum(-1)).sum()
    return loss, ent
wb = torch.nn.Parameter(torch.randn(V, H, device=dev, dtype=torch.bfloat16) * 0.02)
hs = torch.randn(T, H, device=dev, dtype=torch.bfloat16, requires_grad=True)
labels = torch.randint(0, V, (T,), device=dev)
torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
t = time.time()
order = (labels != -100).to(torch.int8).argsort(descending=True, stable=True)
g = hs[order]; lb = labels[order]; total = 0
for s in range(0, T, C):
    l, e = checkpoint(chunk, g[s:s+C], wb, lb[s:s+C], use_reentrant=False)
    total = total + l
total.backward(); torch.cuda.synchronize()
print(f"chunked head fwd+bwd: {time.time()-t:.3f} s; peak above the start "
      f"{(torch.cuda.max_memory_allocated()-base)/2**30:.2f} GiB (weight [V,H] bf16 {V*H*2/2**30:.2f} GiB)")
EOF

# 2c. TRL DPO's step (estimate --loss-kernel trl_logps --reference ...): Llama-3.2-1B, rank 0 of 8,
# 2 pairs = 4 rows x 1024, full checkpointing, the policy's root left to FSDP2's default; a frozen
# bf16 copy sharded on its root only (TRL's prepare_fsdp with FSDP2) against no reference.
dpo=(python3 "$ref/measure_fsdp2.py" --world 8 --mb 4 --seq 1024 --ckpt full --steps 3 --root-reshard default)
step dpo_ref_root 60 "${dpo[@]}" --dpo-reference fsdp2_root --tag dpo_ref_root
step dpo_ref_none 45 "${dpo[@]}" --dpo-reference none --tag dpo_ref_none
cat "$out"/dpo_ref_*.log 2>/dev/null | grep '^{' >"$out/dpo_fsdp2.jsonl"

# The estimates of step 1's runs, now that shardtune is built (GPU-free).
if built; then
  echo "build done at $(el) s"
  python3 - "$b/cli/shardtune" "$kind" "$out/moe_fsdp2.jsonl" <<'EOF' 2>&1 | tee "$out/moe_compare.txt"
import json, subprocess, sys
exe, kind, path = sys.argv[1:4]
G = 2**30
for line in open(path):
    d = json.loads(line); c = d["config"]; s = d["steps"][-1]
    cmd = [exe, "estimate", "--model", "qwen3-30b-a3b", "--cluster", f"{c['world']}x{kind}", "--seq-len", str(c["seq"]),
           "--micro-batch", str(c["mb"]), "--checkpointing", c["ckpt"], "--json"]
    e = json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout)["per_rank"]
    print(f"mb {c['mb']}: allocated {max(x['peak_allocated'] for x in d['steps'])/G:.1f} GiB measured vs "
          f"{e['peak_bytes']/G:.1f} estimated; reserved {max(x['max_reserved'] for x in d['steps'])/G:.1f} measured vs "
          f"{e['reserved_bytes']/G:.1f} replayed; allocator {s.get('allocator')}")
EOF
  python3 - "$b/cli/shardtune" "$kind" "$out/dpo_fsdp2.jsonl" <<'EOF' 2>&1 | tee "$out/dpo_compare.txt"
import json, subprocess, sys
exe, kind, path = sys.argv[1:4]
G = 2**30
for line in open(path):
    d = json.loads(line); c = d["config"]
    cmd = [exe, "estimate", "--model", "llama3.2-1b", "--cluster", f"{c['world']}x{kind}", "--seq-len", str(c["seq"]),
           "--micro-batch", str(c["mb"]), "--checkpointing", c["ckpt"], "--loss-kernel", "trl_logps",
           "--reference", "fsdp2_root" if c["dpo_reference"] == "fsdp2_root" else "none", "--frozen-dtype", "bf16", "--json"]
    e = json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout)["per_rank"]
    meas = max(s["peak_allocated"] for s in d["steps"][1:])
    print(f"DPO reference {c['dpo_reference']}: peak {meas/G:.2f} GiB measured vs {e['peak_bytes']/G:.2f} estimated "
          f"({(e['peak_bytes']/meas-1)*100:+.1f}%); forward peak {max(s['forward_peak_allocated'] for s in d['steps'][1:])/G:.2f} GiB")
EOF
else
  echo "build failed or unfinished at $(el) s"; grep -E "error" /tmp/gs/build.log | head -20
fi
tail -c 100000 /tmp/gs/build.log >"$out/build.log"

# 3. Executor vs FSDP2, minutes apart.
if [[ -x $b/cli/shardtune-exec ]]; then
  for mb in 1 2 4 8; do
    step "exec_mb$mb" 60 "$b/cli/shardtune-exec" run --model llama3.2-1b --device cuda --seq-len 2048 \
      --micro-batch $mb --steps 6 --no-trace --no-checkpoints --out "/tmp/gs/exec_mb$mb"
    step "fsdp2_mb$mb" 90 python3 "$ref/measure_fsdp2.py" --mb $mb --steps 8 --root-reshard default --tag "mb$mb"
  done
  step exec_offload 90 "$b/cli/shardtune-exec" run --model llama3.2-1b --device cuda --seq-len 2048 \
    --micro-batch 4 --steps 4 --offload all --no-trace --no-checkpoints --out /tmp/gs/exec_offload
  step fsdp2_offload 120 python3 "$ref/measure_fsdp2.py" --mb 4 --steps 5 --offload 1 --root-reshard default --tag offload
  # 3b. verl's activation offload in the executor on CUDA (its streams and pinned copies, untested
  # on CPU ranks): micro-batch 4 as exec_mb4, peak and step time beside it, and validate's figure.
  step exec_act_offload 60 "$b/cli/shardtune-exec" run --model llama3.2-1b --device cuda --seq-len 2048 \
    --micro-batch 4 --steps 4 --activation-offload verl_async --no-trace --no-checkpoints --out /tmp/gs/exec_act_offload
  [[ -f /tmp/gs/exec_act_offload/measurements.json ]] && step exec_act_offload_validate 30 "$b/cli/shardtune" validate \
    --model llama3.2-1b --cluster "1x$kind" --measurements /tmp/gs/exec_act_offload/measurements.json
  step exec_profile 60 "$b/cli/shardtune-exec" run --model llama3.2-1b --device cuda --seq-len 2048 \
    --micro-batch 4 --steps 3 --no-checkpoints --torch-profile --out /tmp/gs/exec_prof
  [[ -f /tmp/gs/exec_prof/torch_trace.json ]] && gzip -c /tmp/gs/exec_prof/torch_trace.json >"$out/exec_mb4_torch_trace.json.gz"
  for d in /tmp/gs/exec_mb1 /tmp/gs/exec_mb2 /tmp/gs/exec_mb4 /tmp/gs/exec_mb8 /tmp/gs/exec_offload /tmp/gs/exec_act_offload; do
    [[ -f $d/measurements.json ]] && cp "$d/measurements.json" "$out/$(basename "$d").measurements.json"
  done
  cat "$out"/fsdp2_*.log 2>/dev/null | grep '^{' >"$out/fsdp2_llama1b.jsonl"
  python3 - "$out" <<'EOF' 2>&1 | tee "$out/exec_vs_fsdp2.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
fs = {}
for line in open(os.path.join(out, "fsdp2_llama1b.jsonl")):
    d = json.loads(line); fs[d["config"]["tag"]] = d["tokens_per_s_per_gpu"]
for name in ("mb1", "mb2", "mb4", "mb8", "offload", "act_offload"):
    p = os.path.join(out, f"exec_{name}.measurements.json")
    if not os.path.exists(p): continue
    d = json.load(open(p)); s = d["steps"]
    t = statistics.median(x["time_s"] for x in s[1:]) if len(s) > 1 else s[0]["time_s"]
    tps = d["run"]["tokens_per_step"] / max(1, d["run"]["data_parallel_ranks"]) / t
    ratio = f"{tps / fs[name]:.2f}x FSDP2's {fs[name]:,.0f}" if name in fs else "no FSDP2 run"
    print(f"{name}: executor {tps:,.0f} tok/s/GPU, {ratio}; peak {d['memory']['peak_tracked_bytes']/2**30:.2f} GiB")
EOF
fi

# 4. The GPU tests.
[[ -d $b ]] && step ctest_gpu 150 ctest --test-dir "$b" -L gpu --output-on-failure
echo "all done at $(el) s"
