#!/usr/bin/env bash
# Issue #17's GPU session in one command (device time is scarce):
#  1. builds shardtune and the GPU tests against the machine's Python torch; while it builds (CPU
#     only), the 2026-architecture FSDP2 memory references run on the GPU (allocations do not
#     depend on CPU contention; their step times are not used);
#  2. with the machine otherwise idle: `shardtune probe --device cuda` for Llama-3.2-1B's and
#     Llama-3-8B's shapes (the H100 profile the catalog ships), then PyTorch profiler traces of
#     FSDP2 + HF runs for `shardtune calibrate --trace`;
#  3. while DEADLINE_S (from the start) allows: ctest -L gpu and the executor benchmark (w1_mb4).
# Writes at most 8 files into OUT_DIR (traces in two archives, each under 16 MiB). Usage: DEADLINE_S=520 gpu_probe_session.sh OUT_DIR
set -u
out=${1:?out dir}
mkdir -p "$out" /tmp/gps
t0=$(date +%s)
deadline=$(( t0 + ${DEADLINE_S:-520} ))
left() { echo $(( deadline - $(date +%s) )); }
el() { echo $(( $(date +%s) - t0 )); }
root=$(cd "$(dirname "$0")/../.." && pwd)
ref="$root/tests/bench/fsdp2_reference"
data="$root/tests/data/model"
b=/tmp/shardtune_gpu_build
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c 'import torch,transformers;print("torch",torch.__version__,"cuda",torch.version.cuda,"nccl",torch.cuda.nccl.version(),"transformers",transformers.__version__)'
  nproc; date -u +%FT%TZ; } 2>&1

# 1. Build in the background, the architecture references in the foreground.
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
gen=(); keep=(); command -v ninja >/dev/null && { gen=(-G Ninja); keep=(-- -k 0); }
( cmake -S "$root" -B "$b" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$b" -j "$(nproc)" --target shardtune shardtune-exec executor_gpu_test "${keep[@]}"
  echo "rc=$?"; date +%s >/tmp/gps/build_end ) >/tmp/gps/build.log 2>&1 &
bpid=$!
arch() {  # one architecture reference unless the build ended more than 20 s ago
  if [[ -s /tmp/gps/build_end ]] && (( $(date +%s) > $(cat /tmp/gps/build_end) + 20 )); then echo "arch $* skipped"; return; fi
  local err=/tmp/gps/arch_err.txt
  if line=$(timeout 75 python3 "$ref/measure_fsdp2.py" "$@" 2>$err); then echo "$line" >>"$out/arch2026.jsonl"
  else python3 -c 'import json,sys; print(json.dumps({"config_args": sys.argv[2:], "error": open(sys.argv[1]).read()[-1500:]}))' $err "$@" >>"$out/arch2026.jsonl"; fi
  echo "arch $* done at $(el) s"
}
arch --world 8 --hf-config "$data/qwen3-30b-a3b.config.json" --layers 4 --mb 1 --seq 4096 --steps 3
arch --world 8 --hf-config "$data/gpt-oss-20b.config.json" --layers 4 --mb 1 --seq 4096 --attn eager --steps 3
arch --world 8 --hf-config "$data/deepseek-v2-lite.config.json" --layers 4 --mb 1 --seq 4096 --steps 3
arch --world 8 --hf-config "$data/gemma-3-27b.config.json" --layers 6 --mb 1 --seq 4096 --steps 3
arch --world 8 --hf-config "$data/phi-4.config.json" --layers 4 --mb 1 --seq 4096 --steps 3
arch --world 8 --hf-config "$data/qwen3-30b-a3b.config.json" --layers 4 --mb 2 --seq 4096 --ckpt full --steps 3
arch --world 8 --hf-config "$data/olmo2-13b.config.json" --layers 4 --mb 1 --seq 4096 --steps 3
wait $bpid
wait
echo "build: $(tail -1 /tmp/gps/build.log) at $(el) s"
grep -E "error|FAILED" /tmp/gps/build.log | head -30
tail -c 200000 /tmp/gps/build.log >"$out/build.log"
st="$b/cli/shardtune"

# 2. The probe (two models' shapes) and the FSDP2 traces, nothing else on the machine.
if [[ -x $st ]]; then
  "$st" probe --device cuda --model llama3.2-1b --budget-s 45 --name "H100 (llama3.2-1b shapes)" --out "$out/probe_h100_1b.json" 2>&1 | tail -4
  "$st" probe --device cuda --model llama3-8b --tokens 2048,4096,8192 --dtypes bf16 --budget-s 35 --name "H100 (llama3-8b shapes)" --out "$out/probe_h100_8b.json" 2>&1 | tail -4
  echo "probes done at $(el) s"
fi
mkdir -p /tmp/gps/traces
tr() {  # name, measure_fsdp2 flags
  local name=$1; shift
  (( $(left) > 60 )) || { echo "trace $name skipped (time)"; return; }
  timeout 100 python3 "$ref/measure_fsdp2.py" "$@" --steps 3 --root-reshard default --trace "/tmp/gps/traces/$name.json" \
    >>/tmp/gps/traces/timing.jsonl 2>/tmp/gps/traces/$name.err || tail -3 /tmp/gps/traces/$name.err
  echo "trace $name at $(el) s ($(du -h /tmp/gps/traces/$name.json 2>/dev/null | cut -f1))"
}
tr llama3.2-1b_w1_mb4 --mb 4
tr llama3-8b_w8_mb1 --world 8 --model llama3-8b --mb 1
tr llama3.2-1b_w1_mb1 --mb 1
tr llama3.2-1b_w1_mb8 --mb 8
(cd /tmp/gps/traces && tar czf "$out/fsdp2_traces.tar.gz" timing.jsonl *.err llama3.2-1b_w1_mb4.json llama3-8b_w8_mb1.json 2>/dev/null
 tar czf "$out/fsdp2_traces2.tar.gz" llama3.2-1b_w1_mb1.json llama3.2-1b_w1_mb8.json 2>/dev/null)
ls -la "$out"

# 3. Optional, while time is left.
if [[ -x $st ]] && (( $(left) > 100 )); then
  timeout $(( $(left) - 40 )) ctest --test-dir "$b" -L gpu --output-on-failure >"$out/ctest_gpu.log" 2>&1
  echo "ctest -L gpu rc=$? at $(el) s"; grep -E "tests passed|Failed|\*\*\*" "$out/ctest_gpu.log" | head -12
fi
if [[ -x $st ]] && (( $(left) > 45 )); then
  ONLY="w1_mb4" timeout $(( $(left) - 10 )) bash "$root/tests/bench/gpu_executor_bench.sh" "$b" /tmp/gps/bench
  cp /tmp/gps/bench/w1_mb4.json "$out/exec_w1_mb4.json" 2>/dev/null
fi
echo "all done at $(el) s"
