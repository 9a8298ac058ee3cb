#!/usr/bin/env bash
# Session 18's second GPU command: host_costs.py again (launches counted per phase window, the
# backward's autograd-thread launches included; three alternating repeats per configuration;
# FSDP2's fused AdamW), then the expert-parallel run of gpu_host_session.sh validated against
# the estimate with its cluster named. Usage: gpu_host_session2.sh OUT_DIR
set -u
out=${1:?out dir}; mkdir -p "$out" /tmp/ghs; t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
root=$(cd "$(dirname "$0")/../.." && pwd); ref="$root/tests/bench/fsdp2_reference"; b=/tmp/shardtune_gpu_build
export PYTHONUNBUFFERED=1
hc() {
  timeout 150 python3 "$ref/host_costs.py" "$@" >>"$out/host_costs2.jsonl" 2>/tmp/ghs/hc.err ||
    { echo "host_costs $* failed"; tail -5 /tmp/ghs/hc.err; }
  echo "host_costs $* at $(el) s"
}
hc --model llama3.2-1b --world 1 --repeats 3
hc --model llama3.2-1b --world 8 --repeats 3
hc --model llama3.2-1b --world 8 --repeats 2 --optim fused
hc --model llama3-8b --layers 8 --world 8 --repeats 2
python3 - "$out/host_costs2.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l); c = d["config"]
    print(f"{c['model']} L{d['layers']} w{c['world']} {c['optim']}:", json.dumps(d["derived"]))
    for k in ("plain", "fsdp2"):
        print("  ", k, {p: (round(d[k][p]["host_s"] * 1e3, 2), d[k][p]["launches"], d[k][p]["device_activities"],
                         round((d[k][p]["per_launch_s"] or 0) * 1e6, 2), [round(x * 1e3, 1) for x in d[k][p]["repeat_medians_s"]])
                     for p in ("forward", "backward", "optimizer")})
PY
prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
{ cmake -S "$root" -B "$b" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DSHARDTUNE_SANITIZER_TESTS=OFF &&
  cmake --build "$b" -j "$(nproc)" --target shardtune shardtune-exec; } >/tmp/ghs/build.log 2>&1
echo "build rc=$? at $(el) s"; grep -E "error" /tmp/ghs/build.log | head
st="$b/cli/shardtune"
python3 - "$root/tests/data/model/qwen3-30b-a3b.config.json" "$out/q3_2layers.config.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["num_hidden_layers"] = 2
json.dump(d, open(sys.argv[2], "w"))
PY
rm -rf /tmp/ghs/ep
timeout 120 "$st" run --model "$out/q3_2layers.config.json" --device cuda --modeling torchtitan --emulate-world 8 --ep 8 \
  --seq-len 2048 --micro-batch 1 --precision bf16 --steps 4 --no-checkpoints --no-trace --out /tmp/ghs/ep >/tmp/ghs/ep.log 2>&1
echo "ep run rc=$? at $(el) s"; tail -3 /tmp/ghs/ep.log
cp /tmp/ghs/ep/measurements.json "$out/ep_measurements.json"
"$st" validate --measurements /tmp/ghs/ep/measurements.json --model "$out/q3_2layers.config.json" --cluster 8xH100 >"$out/ep_validate.txt" 2>&1
grep -iE "memory|step time" "$out/ep_validate.txt" | head -12
echo "done at $(el) s"
