#!/usr/bin/env bash
# Issue #17/#20/#21's GPU checks of session 18 in one command (device time is scarce):
#  1. with the machine otherwise idle (no build running: host timings are the point):
#     fsdp2_reference/host_costs.py (the host's per-launch and per-hook costs of FSDP2 + HF,
#     untraced) for Llama-3.2-1B at world 1 and 8 and Llama-3-8B (8 layers) at world 8, then
#     measure_fsdp2.py at real shapes (its untraced per-phase host issue times);
#  2. builds shardtune and the GPU tests against the machine's Python torch;
#  3. `run --torch-profile` of the executor (Llama-3.2-1B, mb 1 and 4: the Kineto trace of its
#     own kernels, issue #21's breakdown), ctest -L gpu (the CUDA kernels' first GPU run), and a
#     torchtitan-style expert-parallel run (Qwen3-30B-A3B cut to 2 layers, rank 0 of 8, ep 8)
#     validated against the estimate (#20), while DEADLINE_S allows.
# Writes at most 8 files into OUT_DIR. Usage: DEADLINE_S=540 gpu_host_session.sh OUT_DIR
set -u
out=${1:?out dir}
mkdir -p "$out" /tmp/ghs
t0=$(date +%s)
deadline=$(( t0 + ${DEADLINE_S:-540} ))
left() { echo $(( deadline - $(date +%s) )); }
el() { echo $(( $(date +%s) - t0 )); }
root=$(cd "$(dirname "$0")/../.." && pwd)
ref="$root/tests/bench/fsdp2_reference"
b=/tmp/shardtune_gpu_build
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch,transformers;print("torch",torch.__version__,"cuda",torch.version.cuda,"nccl",torch.cuda.nccl.version(),"transformers",transformers.__version__)'
  grep -m1 "model name" /proc/cpuinfo; nproc; date -u +%FT%TZ; } >"$out/env.txt" 2>&1
cat "$out/env.txt"

# 1. Host costs, machine idle.
hc() {
  timeout 150 python3 "$ref/host_costs.py" "$@" >>"$out/host_costs.jsonl" 2>/tmp/ghs/hc.err ||
    { echo "host_costs $* failed"; tail -5 /tmp/ghs/hc.err; }
  echo "host_costs $* at $(el) s"
}
hc --model llama3.2-1b --world 1
hc --model llama3.2-1b --world 8
hc --model llama3-8b --layers 8 --world 8
ms() {
  timeout 150 python3 "$ref/measure_fsdp2.py" "$@" --root-reshard default >>"$out/fsdp2_host.jsonl" 2>/tmp/ghs/ms.err ||
    { echo "measure_fsdp2 $* failed"; tail -3 /tmp/ghs/ms.err; }
  echo "measure_fsdp2 $* at $(el) s"
}
ms --mb 1 --steps 8
ms --mb 2 --steps 8
ms --mb 4 --steps 6
ms --world 8 --model llama3-8b --mb 1 --steps 6
python3 - "$out/host_costs.jsonl" "$out/fsdp2_host.jsonl" <<'PY'
import json, statistics, sys
for l in open(sys.argv[1]):
    d = json.loads(l); c = d["config"]
    print(f"host_costs {c['model']} L{d['layers']} w{c['world']}:", json.dumps(d["derived"]))
    for k in ("plain", "fsdp2"):
        print("  ", k, {p: (round(d[k][p]["host_s"] * 1e3, 2), d[k][p]["launches"],
                         round((d[k][p]["per_launch_s"] or 0) * 1e6, 2)) for p in ("forward", "backward", "optimizer", "zero_grad")})
for l in open(sys.argv[2]):
    d = json.loads(l); c = d["config"]; s = d["steps"][2:]
    f = lambda k: statistics.median(x[k] for x in s) * 1e3
    print(f"fsdp2 {c['model']} w{c['world']} mb{c['mb']}: step {d['steady_step_time_s_median']*1e3:.1f} ms, host fwd {f('host_forward_s'):.1f} bwd {f('host_backward_s'):.1f} opt {f('host_optimizer_s'):.1f} ms")
PY

# 2. Build.
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
gen=(); keep=(); command -v ninja >/dev/null && { gen=(-G Ninja); keep=(-- -k 0); }
{ cmake -S "$root" -B "$b" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DSHARDTUNE_SANITIZER_TESTS=OFF &&
  cmake --build "$b" -j "$(nproc)" --target shardtune shardtune-exec "${keep[@]}"; } >/tmp/ghs/build.log 2>&1
echo "build rc=$? at $(el) s"
# The GPU tests apart: a target this configuration lacks must not stop the binaries' build.
for t in kernels_gpu_test executor_gpu_test; do
  cmake --build "$b" -j "$(nproc)" --target $t >>/tmp/ghs/build.log 2>&1; echo "$t rc=$? at $(el) s"
done
grep -E "error|FAILED" /tmp/ghs/build.log | head -30
tail -c 100000 /tmp/ghs/build.log >"$out/build.log"
st="$b/cli/shardtune"
[[ -x $st ]] || { echo "no shardtune binary"; exit 1; }

# 3. The executor's own profile, the GPU tests, expert parallelism.
mkdir -p /tmp/ghs/prof
for mb in 1 4; do
  (( $(left) > 90 )) || { echo "profile mb$mb skipped (time)"; continue; }
  timeout 120 "$st" run --model llama3.2-1b --device cuda --seq-len 2048 --micro-batch $mb --steps 5 \
    --no-checkpoints --no-trace --torch-profile --out /tmp/ghs/run_mb$mb >/tmp/ghs/run_mb$mb.log 2>&1
  echo "run --torch-profile mb$mb rc=$? at $(el) s"; tail -4 /tmp/ghs/run_mb$mb.log
  cp /tmp/ghs/run_mb$mb/torch_trace.json /tmp/ghs/prof/executor_mb$mb.json 2>/dev/null
  cp /tmp/ghs/run_mb$mb/measurements.json /tmp/ghs/prof/executor_mb$mb.measurements.json 2>/dev/null
  cp /tmp/ghs/run_mb$mb.log /tmp/ghs/prof/ 2>/dev/null
done
(cd /tmp/ghs/prof && tar czf "$out/executor_profiles.tar.gz" . )
if (( $(left) > 100 )); then
  timeout $(( $(left) - 70 )) ctest --test-dir "$b" -L gpu --output-on-failure >"$out/ctest_gpu.log" 2>&1
  echo "ctest -L gpu rc=$? at $(el) s"; grep -E "tests passed|Failed|\*\*\*" "$out/ctest_gpu.log" | head -12
fi
if (( $(left) > 50 )); then
  python3 - "$root/tests/data/model/qwen3-30b-a3b.config.json" /tmp/ghs/q3.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["num_hidden_layers"] = 2
if isinstance(d.get("mlp_only_layers"), list): d["mlp_only_layers"] = [i for i in d["mlp_only_layers"] if i < 2]
json.dump(d, open(sys.argv[2], "w"))
PY
  timeout $(( $(left) - 15 )) "$st" run --model /tmp/ghs/q3.json --device cuda --modeling torchtitan --emulate-world 8 --ep 8 \
    --seq-len 2048 --micro-batch 1 --precision bf16 --steps 4 --no-checkpoints --no-trace --out /tmp/ghs/ep >/tmp/ghs/ep.log 2>&1
  echo "ep run rc=$? at $(el) s"; tail -5 /tmp/ghs/ep.log
  "$st" validate --measurements /tmp/ghs/ep/measurements.json --model /tmp/ghs/q3.json >"$out/ep_validate.txt" 2>&1
  cat /tmp/ghs/ep.log >>"$out/ep_validate.txt"; grep -iE "peak|step time" "$out/ep_validate.txt" | head -12
fi
ls -la "$out"; echo "done at $(el) s"
