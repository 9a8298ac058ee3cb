#!/usr/bin/env bash
# Runs measure_fsdp2.py over the reference configurations, one process each, appending one JSON
# object per line to $1 (default fsdp2_sweep.jsonl); a failed configuration appends
# {"config_args": ..., "error": <last lines of its stderr>}. Needs one CUDA GPU, torch >= 2.6
# and transformers. Usage: sweep.sh OUT.jsonl [SET]   (SET: all | w1 | fake | timing | peft |
# offload | traces | arch2026)
set -u
out=${1:-fsdp2_sweep.jsonl}
set_=${2:-all}
here=$(cd "$(dirname "$0")" && pwd)
run() {
  local err; err=$(mktemp)
  if line=$(timeout "${SWEEP_TIMEOUT:-150}" python3 "$here/measure_fsdp2.py" "$@" 2>"$err"); then
    echo "$line" >>"$out"
  else
    python3 -c 'import json,sys; print(json.dumps({"config_args": sys.argv[2:], "error": open(sys.argv[1]).read()[-1500:]}))' "$err" "$@" >>"$out"
  fi
  rm -f "$err"
}
if [[ $set_ == all || $set_ == w1 ]]; then
  run --mb 1
  run --mb 2
  run --mb 4
  run --mb 8
  run --mb 8 --ckpt full
  run --mb 16 --ckpt full
  run --mb 4 --reshard 0
  run --mb 4 --optim fused
  run --mb 2 --accum 2
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run --mb 4 --tag expandable
fi
if [[ $set_ == timing ]]; then  # no other work on the machine: reference step times
  for mb in 1 2 4 8; do run --mb $mb --steps 8 --root-reshard default; done
  run --mb 8 --ckpt full --steps 8 --root-reshard default
  run --mb 4 --reshard 0 --steps 8
  run --mb 4 --optim fused --steps 8 --root-reshard default
  run --world 8 --model llama3-8b --mb 1 --steps 5 --root-reshard default
fi
if [[ $set_ == traces ]]; then  # profiler traces for `shardtune calibrate --trace` (TRACE_DIR)
  dir=${TRACE_DIR:-fsdp2_traces}; mkdir -p "$dir"
  for mb in 1 4 8; do run --mb $mb --steps 4 --root-reshard default --trace "$dir/llama3.2-1b_w1_mb$mb.json"; done
  run --world 8 --model llama3-8b --mb 1 --steps 4 --root-reshard default --trace "$dir/llama3-8b_w8_mb1.json"
fi
if [[ $set_ == arch2026 ]]; then  # issue #20: the 2026 architectures, cut to 4 layers, as rank 0 of 8
  data=$(cd "$here/../../data/model" && pwd)
  run --world 8 --hf-config "$data/qwen3-30b-a3b.config.json" --layers 4 --mb 1 --seq 4096
  run --world 8 --hf-config "$data/qwen3-30b-a3b.config.json" --layers 4 --mb 2 --seq 4096 --ckpt full
  run --world 8 --hf-config "$data/phi-4.config.json" --layers 4 --mb 1 --seq 4096
  run --world 8 --hf-config "$data/olmo2-13b.config.json" --layers 4 --mb 1 --seq 4096
  run --world 8 --hf-config "$data/gemma-3-27b.config.json" --layers 6 --mb 1 --seq 4096
  run --world 8 --hf-config "$data/gpt-oss-20b.config.json" --layers 4 --mb 1 --seq 4096 --attn eager
fi
if [[ $set_ == all || $set_ == fake ]]; then
  run --world 8 --mb 1
  run --world 8 --mb 4
  run --world 2 --mb 2
  run --world 8 --mb 4 --reshard 0
  run --world 8 --model llama3-8b --mb 1
  run --world 8 --model llama3-8b --mb 2 --ckpt full
  run --world 4 --model llama3-8b --mb 1 --seq 4096 --ckpt full
fi
if [[ $set_ == peft ]]; then  # frozen layers and PEFT LoRA (peft.get_peft_model before fully_shard)
  run --mb 4 --lora-rank 16 --lora-targets q_proj,v_proj
  run --mb 4 --lora-rank 16 --lora-targets q_proj,v_proj --base-dtype bf16
  run --mb 4 --lora-rank 16 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj --base-dtype bf16
  run --mb 8 --lora-rank 16 --lora-targets q_proj,v_proj --base-dtype bf16 --ckpt full
  run --mb 4 --freeze-layers 8
  run --mb 4 --freeze-layers 15
  run --world 8 --model llama3-8b --mb 1 --lora-rank 16 --lora-targets q_proj,v_proj --base-dtype bf16
  run --world 8 --model llama3-8b --mb 2 --freeze-layers 16
fi
if [[ $set_ == offload ]]; then  # CPUOffloadPolicy(pin_memory=True): params, grads, AdamW on the host
  run --mb 4 --offload 1 --steps 3
  run --world 8 --model llama3-8b --mb 1 --offload 1 --steps 3
fi
