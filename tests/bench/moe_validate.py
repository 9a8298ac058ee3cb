#!/usr/bin/env python3
"""Benchmark (not a test): `shardtune validate` on CPU MoE runs, predicted vs measured memory.

Runs on this machine's CPU (Gloo ranks) and prints the date and, per run, the peak allocated
rows of `shardtune validate` (the estimate for the run's own plan against the executor's
measured peaks):
  1. micro-qwen-moe, fp32, 2 ranks, --modeling torchtitan --ep 2;
  2. mid-moe (hidden 256, 8 experts top 2), bf16, micro-batch 2 x 256, 2 ranks, torchtitan, ep 2;
  3. the same under --modeling hf (transformers' MoE: every expert on every rank);
  4. micro-gpt-oss, bf16, micro-batch 2 x 64, 2 ranks, eager sink attention, under --modeling
     hf and under torchtitan with ep 2;
  5. micro-llama-v8k, fp32, 1 rank (a one-rank FSDP2 mesh).
The executor/README.md figures of expert parallelism and the one-rank mesh are this output.

Usage: python3 tests/bench/moe_validate.py [build/cli/shardtune]
"""
import datetime
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "executor", "data")

RUNS = [
    ("micro-qwen-moe fp32, 2 ranks, torchtitan, ep 2", "micro-qwen-moe.model.json",
     ["--seq-len", "32", "--global-batch", "4", "--precision", "fp32", "--nproc", "2",
      "--modeling", "torchtitan", "--ep", "2"]),
    ("mid-moe bf16 mb 2x256, 2 ranks, torchtitan, ep 2", "mid-moe.model.json",
     ["--seq-len", "256", "--global-batch", "8", "--micro-batch", "2", "--precision", "bf16",
      "--nproc", "2", "--modeling", "torchtitan", "--ep", "2"]),
    ("mid-moe bf16 mb 2x256, 2 ranks, hf", "mid-moe.model.json",
     ["--seq-len", "256", "--global-batch", "8", "--micro-batch", "2", "--precision", "bf16",
      "--nproc", "2"]),
    ("micro-gpt-oss bf16 mb 2x64, 2 ranks, hf (eager sinks)", "micro-gpt-oss.model.json",
     ["--seq-len", "64", "--global-batch", "4", "--micro-batch", "2", "--precision", "bf16",
      "--nproc", "2", "--attention", "eager"]),
    ("micro-gpt-oss bf16 mb 2x64, 2 ranks, torchtitan, ep 2", "micro-gpt-oss.model.json",
     ["--seq-len", "64", "--global-batch", "4", "--micro-batch", "2", "--precision", "bf16",
      "--nproc", "2", "--attention", "eager", "--modeling", "torchtitan", "--ep", "2"]),
    ("micro-llama-v8k fp32 mb 2x64, 1 rank", "micro-llama-v8k.model.json",
     ["--seq-len", "64", "--global-batch", "4", "--micro-batch", "2", "--precision", "fp32"]),
]


def main():
    shardtune = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "cli", "shardtune")
    print(f"moe_validate, {datetime.date.today().isoformat()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, model, flags) in enumerate(RUNS):
            out = os.path.join(tmp, str(i))
            path = os.path.join(DATA, model)
            run = [shardtune, "run", "--model", path, "--steps", "3", "--threads", "1",
                   "--strategy", "full_shard", "--out", out] + flags
            subprocess.run(run, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            v = subprocess.run([shardtune, "validate", "--measurements",
                                os.path.join(out, "measurements.json"), "--model", path],
                               check=True, capture_output=True, text=True).stdout
            rows = [l.strip() for l in v.splitlines()
                    if "peak allocated" in l or "step 0 peak" in l or "steady peak" in l]
            print(f"\n{name}")
            for r in rows:
                print("  " + " ".join(r.split()))


if __name__ == "__main__":
    main()
