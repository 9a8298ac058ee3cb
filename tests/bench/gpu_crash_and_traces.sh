#!/usr/bin/env bash
# GPU session helper: build with line tables, back-trace a crashing `shardtune run` under
# cuda-gdb (the image has no gdb), record FSDP2 profiler traces; while building, more
# architecture memory references. Usage: gpu_crash_and_traces.sh OUT_DIR
set -u
out=${1:?out}; mkdir -p "$out" /tmp/g2/traces; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
root=$(cd "$(dirname "$0")/../.." && pwd); ref="$root/tests/bench/fsdp2_reference"; data="$root/tests/data/model"
b=/tmp/stb2; prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
( cmake -S "$root" -B "$b" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g1 &&
  cmake --build "$b" -j 16 --target shardtune shardtune-exec -- -k 0; echo "rc=$?"; date +%s >/tmp/g2/build_end ) >/tmp/g2/build.log 2>&1 &
arch() {
  if [[ -s /tmp/g2/build_end ]]; then echo "arch $* skipped"; return; fi
  if line=$(timeout 70 python3 "$ref/measure_fsdp2.py" "$@" 2>/tmp/g2/err); then echo "$line" >>"$out/arch2026b.jsonl"
  else python3 -c 'import json,sys; print(json.dumps({"config_args": sys.argv[2:], "error": open(sys.argv[1]).read()[-1500:]}))' /tmp/g2/err "$@" >>"$out/arch2026b.jsonl"; fi
  echo "arch $* at $(el) s"
}
arch --world 8 --hf-config "$data/olmo2-13b.config.json" --layers 4 --mb 1 --seq 4096 --steps 3
arch --world 8 --hf-config "$data/deepseek-v2-lite.config.json" --layers 4 --mb 2 --seq 4096 --ckpt full --steps 3
arch --world 8 --hf-config "$data/phi-4.config.json" --layers 4 --mb 2 --seq 4096 --ckpt full --steps 3
arch --world 8 --hf-config "$data/gemma-3-27b.config.json" --layers 6 --mb 2 --seq 4096 --ckpt full --steps 3
arch --world 8 --hf-config "$data/deepseek-v3.config.json" --layers 4 --mb 1 --seq 4096 --steps 3
wait
echo "build $(tail -1 /tmp/g2/build.log) at $(el) s"; grep -E "error:|FAILED" /tmp/g2/build.log | head
x="$b/cli/shardtune-exec"
for dev in cpu cuda; do
  "$x" run --model tiny-llama --micro-batch 2 --seq-len 64 --steps 2 --no-trace --no-checkpoints --device $dev --out /tmp/g2/r_$dev >/tmp/g2/r_$dev.log 2>&1
  echo "run --device $dev rc=$?"; tail -4 /tmp/g2/r_$dev.log
  timeout 60 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt -ex "info sharedlibrary" --args "$x" run --model tiny-llama --micro-batch 2 --seq-len 64 --steps 2 --no-trace --no-checkpoints --device $dev --out /tmp/g2/g_$dev 2>&1 | grep -v "^\[New Thread\|^\[Thread" | head -80
done >"$out/crash.txt"
grep -A25 "SIGSEGV" "$out/crash.txt" | head -40
tr() { local n=$1; shift
  timeout 90 python3 "$ref/measure_fsdp2.py" "$@" --steps 3 --root-reshard default --trace "/tmp/g2/traces/$n.json" >>/tmp/g2/traces/timing.jsonl 2>/tmp/g2/traces/$n.err || tail -3 /tmp/g2/traces/$n.err
  echo "trace $n at $(el) s ($(du -h /tmp/g2/traces/$n.json 2>/dev/null | cut -f1))"; }
tr llama3.2-1b_w1_mb4 --mb 4
tr llama3-8b_w8_mb1 --world 8 --model llama3-8b --mb 1
tr llama3.2-1b_w1_mb1 --mb 1
cd /tmp/g2/traces && { tar czf "$out/fsdp2_traces.tar.gz" timing.jsonl *.err llama3.2-1b_w1_mb4.json llama3.2-1b_w1_mb1.json; tar czf "$out/fsdp2_traces_8b.tar.gz" llama3-8b_w8_mb1.json; }
ls -la "$out"; echo "done at $(el) s"
