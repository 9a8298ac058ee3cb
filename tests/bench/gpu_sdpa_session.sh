#!/usr/bin/env bash
# The next GPU session's first command (#17, #21), prepared in session 19 without a GPU:
#  1. builds shardtune, shardtune-exec and kernels_gpu_test against the machine's Python torch
#     (the probe's per-backend SDPA code, executor/probe/probe.cc SHARDTUNE_PROBE_SDPA_BACKENDS, was
#     never compiled before: LibTorch 1.13 where it was written);
#  2. the fused AdamW GPU test with its whole output (session 18's run cut the detail off);
#  3. `shardtune probe --device cuda` at Llama-3-8B's shapes: every SDPA backend the shape admits,
#     PyTorch's own choice marked (FlashAttention-2 vs cuDNN, the first suspect of the +44%
#     against torchtitan's published 8B figures);
#  4. a cross-check through Python: torch's SDPA forced to FLASH_ATTENTION and CUDNN_ATTENTION at
#     torchtitan's shape (B 2, 32 heads, 8 KV heads, S 8192, head_dim 128, causal), forward +
#     backward;
#  5. a sustained bf16 8192^3 matmul for 30 s with nvidia-smi's SM clock and power beside it:
#     whether the burst rate the probe measures holds under sustained load (the second suspect);
#  6. the executor's torchtitan op SAC over SDPA (never run on a GPU): selective vs none, validate;
#  7. the executor's world-1 mb 4 row of executor/README.md's H100 table again (session 21 changed
#     its backward prefetch depth, reduce-scatter order and the layers' shared rope constants);
#  8. transformers' default MoE experts implementation and its source (confirms on 5.17 what was
#     read from huggingface/transformers on 2026-11-28: grouped_mm_experts_forward);
#  9. CPU offload (session 22): the host AdamW bench (shardtune's one-pass kernel against
#     torch.optim.AdamW's CPU paths), FSDP2's offloaded step with its host optimizer time
#     (measure_fsdp2.py records host_optimizer_s: opt.step() on CPU tensors is synchronous) and the
#     executor's --offload all; step 3's probe now also writes the host_adamw_foreach table
#     that simulate's offloaded optimizer step reads (step_time_check.py's offload row, -50.7%
#     with the catalog's guessed 200 GB/s host);
# 10. FSDP2's hook costs under LoRA (host_costs.py --lora-rank 16, Llama-3-8B cut to 8 layers,
#     rank 0 of 8): the 8B LoRA reference ran in 0.215 s where simulate's host model, whose
#     per-hook cost was measured on full fine-tuning, predicts 0.328 s (step_time_check.py).
# 11. (when under 8 minutes have gone) the emulated expert-parallel run of gpu_host_session2.sh
#     again (Qwen3-30B-A3B cut to 2 layers, rank 0 of 8, --ep 8): 8.6 GiB measured vs 8.1
#     estimated before 2026-11-28, when the executor's torchtitan experts still ran one expert at
#     a time (a full-size zero gradient of the rows and of the [el, F, H] weights per expert in
#     backward); they run as one grouped GEMM since.
# 12. (run before 11) verl's log-prob head on the GPU (#45, session 25): tests/bench/
#     verl_logprob_memory.py with flash-attn's own cross_entropy_loss when it imports, at Qwen's
#     vocabulary: does the backward hold four [T, V] bf16 tensors (CopySlices of the in-place
#     division through a view), as the CPU run with an emulated loss measured (3.00 x 2VT above
#     the start of backward), which model/activations.cc VerlFlashCeHead charges?
# Usage: gpu_sdpa_session.sh OUT_DIR   (about 8 minutes on an H100 with 16 cores)
set -u
out=${1:?out dir}; mkdir -p "$out" /tmp/gss; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
root=$(cd "$(dirname "$0")/../.." && pwd); b=/tmp/shardtune_gpu_build
{ nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
  python3 -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda,"cudnn",torch.backends.cudnn.version())'
  date -u +%FT%TZ; } 2>&1 | tee "$out/env.txt"
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
{ cmake -S "$root" -B "$b" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DSHARDTUNE_SANITIZER_TESTS=OFF &&
  cmake --build "$b" -j "$(nproc)" --target shardtune shardtune-exec kernels_gpu_test host_optimizer_bench; } >/tmp/gss/build.log 2>&1
echo "build rc=$? at $(el) s"; grep -E "error" /tmp/gss/build.log | head -20
tail -c 100000 /tmp/gss/build.log >"$out/build.log"

# 2. The fused AdamW test, every line of a failure kept.
"$b/tests/executor/kernels_gpu_test" --gtest_filter='FusedAdamW*' >"$out/fused_adamw_test.txt" 2>&1
echo "fused AdamW test rc=$? at $(el) s"; grep -E "Failure|max \||OK|FAILED|PASSED" "$out/fused_adamw_test.txt" | head -20

# 3. The probe, every SDPA backend at Llama-3-8B's shapes.
exe="$b/cli/shardtune-exec"; [[ -x $exe ]] || exe="$b/cli/shardtune"
timeout 150 "$exe" probe --device cuda --model llama3-8b --tokens 2048,8192 --dtypes bf16 --budget-s 60 \
  --name "H100 (llama3-8b shapes, SDPA backends)" --out "$out/probe_h100_8b_sdpa.json" 2>&1 | tail -4
echo "probe done at $(el) s"
python3 - "$out/probe_h100_8b_sdpa.json" <<'EOF' 2>&1 || true
import json, sys
d = json.load(open(sys.argv[1]))
for a in d["kernels"]["attention"]:
    f = 4 * a["seq_len"] ** 2 * a["heads"] * a["head_dim"] / 2 * a["batch"]  # causal forward FLOPs
    print(a["backend"], a["dtype"], a["seq_len"], a["head_dim"], "default" if a.get("pytorch_default") else "forced",
          "fwd %.0f TFLOP/s, bwd %.0f" % (f / a["forward_s"] / 1e12, 2.5 * f / a["backward_s"] / 1e12))
EOF

# 4. The same through Python, at torchtitan's shape.
timeout 90 python3 "$root/tests/bench/sdpa_backends.py" 8192 2>&1 | tee "$out/sdpa_python.txt"
echo "sdpa python done at $(el) s"

# 5. Sustained GEMM rate with the SM clock and power beside it.
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 1000 >"$out/smi_sustained.csv" 2>&1 &
smi=$!
timeout 60 python3 "$root/tests/bench/sustained_gemm.py" 2>&1 | tee "$out/sustained_gemm.txt"
kill $smi 2>/dev/null

# 6. torchtitan's op SAC in the executor over SDPA (session 20; the taped SDPA path compiles on
#    LibTorch >= 2.5 only): selective vs none on llama3.2-1b, losses and the step peak, then
#    validate against the estimate (which counts 63.6 KB/token/block for 8B's shape).
for ck in none selective; do
  timeout 90 "$exe" run --model llama3.2-1b --device cuda --seq-len 2048 --micro-batch 2 --steps 4 \
    --modeling torchtitan --attention sdpa --checkpointing $ck --no-trace --no-checkpoints \
    --out "$out/op_sac_$ck" >"$out/op_sac_$ck.log" 2>&1
  echo "op SAC run $ck rc=$? at $(el) s"; tail -3 "$out/op_sac_$ck.log"
  timeout 60 "$exe" validate --measurements "$out/op_sac_$ck/measurements.json" 2>&1 | head -12 | tee "$out/op_sac_${ck}_validate.txt"
done

# 7. The executor's llama3.2-1b world-1 mb 4 row (executor/README.md, 2026-11-26: 0.236 s, 39.85 GiB
#    peak allocated) after session 21's prefetch / reduce-scatter / shared-rope changes.
timeout 120 "$exe" run --model llama3.2-1b --device cuda --seq-len 2048 --micro-batch 4 --steps 6 \
  --no-trace --no-checkpoints --out "$out/exec_mb4" >"$out/exec_mb4.log" 2>&1
echo "executor mb 4 rc=$? at $(el) s"; tail -3 "$out/exec_mb4.log"
timeout 60 "$exe" validate --measurements "$out/exec_mb4/measurements.json" 2>&1 | head -30 | tee "$out/exec_mb4_validate.txt"

# 8. Which MoE experts code transformers runs by default. Read from huggingface/transformers on
#    2026-11-28 (get_correct_experts_implementation: "grouped_mm" when torch has _grouped_mm);
#    the executor and model/activations.cc follow it since. This records the installed 5.17's
#    default and source, to confirm.
python3 - >"$out/transformers_moe.txt" 2>&1 <<'PYEOF'
import inspect, transformers
print("transformers", transformers.__version__)
try:
    from transformers import AutoConfig
    c = AutoConfig.for_model("qwen3_moe")
    print("config _experts_implementation:", getattr(c, "_experts_implementation", None))
    import torch
    from transformers import AutoModelForCausalLM
    c.num_hidden_layers = 1
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(c)
    print("model built on meta, _experts_implementation:", getattr(m.config, "_experts_implementation", None))
except Exception as e:
    print("config:", e)
try:
    import transformers.integrations.moe as moe
    print(inspect.getsource(moe))
except Exception as e:
    print("integrations.moe:", e)
from transformers.models.qwen3_moe import modeling_qwen3_moe as q
for name in ("Qwen3MoeExperts", "Qwen3MoeSparseMoeBlock"):
    if hasattr(q, name):
        print(inspect.getsource(getattr(q, name)))
PYEOF
echo "transformers MoE source saved ($(wc -l <"$out/transformers_moe.txt") lines) at $(el) s"

# 9. CPU offload: the host optimizer alone, then FSDP2's and the executor's offloaded steps.
timeout 90 "$b/tests/bench/host_optimizer_bench" --elements 268435456 --iters 3 2>&1 | tee "$out/host_optimizer_bench.txt"
python3 -c "import json;d=json.load(open('$out/probe_h100_8b_sdpa.json'));print([m for m in d['kernels']['memory'] if m['kernel']=='host_adamw_foreach'])" 2>&1 | tee "$out/probe_host_adamw.txt"
timeout 120 python3 "$root/tests/bench/fsdp2_reference/measure_fsdp2.py" --mb 4 --steps 4 --offload 1 --root-reshard explicit \
  >"$out/fsdp2_offload.json" 2>"$out/fsdp2_offload.err"
echo "FSDP2 offload rc=$? at $(el) s"
python3 -c "import json;d=json.load(open('$out/fsdp2_offload.json'));print([(s['step'],round(s['time_s'],3),round(s.get('host_optimizer_s',-1),3)) for s in d['steps']])" 2>&1 | tail -2
timeout 120 "$exe" run --model llama3.2-1b --device cuda --seq-len 2048 --micro-batch 4 --steps 4 --offload all \
  --no-trace --no-checkpoints --out "$out/exec_offload" >"$out/exec_offload.log" 2>&1
echo "executor offload rc=$? at $(el) s"; tail -4 "$out/exec_offload.log"

# 10. FSDP2 hooks under LoRA (compare with fsdp2_h100_host_costs2.jsonl's llama3-8b/8/8 row).
timeout 150 python3 "$root/tests/bench/fsdp2_reference/host_costs.py" --model llama3-8b --layers 8 --world 8 \
  --lora-rank 16 --repeats 2 >"$out/host_costs_lora.jsonl" 2>"$out/host_costs_lora.err"
echo "host costs LoRA rc=$? at $(el) s"; tail -2 "$out/host_costs_lora.err"
python3 -c "import json;[print(json.loads(l)['derived']) for l in open('$out/host_costs_lora.jsonl')]" 2>&1 | tail -2

# 12. verl's log-prob head on CUDA (max_memory_allocated), flash-attn's loss when installed.
timeout 90 python3 "$root/tests/bench/verl_logprob_memory.py" --vocab 151936 --hidden 4096 --tokens 8192 \
  2>&1 | tee "$out/verl_logprob_memory.txt" | tail -5
echo "verl log-prob head rc=$? at $(el) s"

# 11. The emulated ep 8 run, if time allows.
if [ "$(el)" -lt 480 ]; then
  python3 - "$root/tests/data/model/qwen3-30b-a3b.config.json" /tmp/gss/q3_2layers.config.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["num_hidden_layers"] = 2
json.dump(d, open(sys.argv[2], "w"))
PY
  timeout 120 "$exe" run --model /tmp/gss/q3_2layers.config.json --device cuda --modeling torchtitan --emulate-world 8 \
    --ep 8 --seq-len 2048 --micro-batch 1 --precision bf16 --steps 4 --no-checkpoints --no-trace --out "$out/ep8" \
    >"$out/ep8.log" 2>&1
  echo "ep 8 run rc=$? at $(el) s"; tail -3 "$out/ep8.log"
  timeout 60 "$exe" validate --measurements "$out/ep8/measurements.json" --model /tmp/gss/q3_2layers.config.json \
    --cluster 8xH100 2>&1 | grep -iE "memory|step time" | head -8 | tee "$out/ep8_validate.txt"
fi
echo "done at $(el) s"
