#!/usr/bin/python3
"""CPU training step time of `shardtune run` on each BLAS this Debian machine has, for the choice
.ci/setup.sh makes (issue #22). A benchmark, not a test: it prints a table.

    python3 tests/bench/blas_choice.py [--shardtune build/cli/shardtune] [--steps 5]
        [--layouts 2x1,1x2] [--include-reference]

For each libblas.so.3 alternative installed under /usr/lib/<triplet>/{blas,openblas-pthread,
openblas-openmp}/ it runs the issue's case: a 20.8M-parameter Llama-layout HF config (hidden 512,
intermediate 1376, 4 layers, 8 heads, vocab 8000), full_shard, micro-batch 4 x 256 tokens, global
batch 8, fp32, eager attention, Gloo, once per ranks x threads layout (LD_LIBRARY_PATH selects the
BLAS; `shardtune env` in each confirms what was bound and its single-core GFLOP/s). Prints the
median step time over the steps after the first. The reference BLAS takes ~30 s a step: it runs
only with --include-reference (3 steps). Install what you compare first, e.g.
`apt-get install libopenblas0-pthread libopenblas0-openmp` (the higher-priority one becomes the
system default; remove the one you do not want afterwards).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LIBDIR = "/usr/lib/x86_64-linux-gnu"
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
    "intermediate_size": 1376, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 8, "vocab_size": 8000, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": False, "torch_dtype": "float32",
}


def env_of(shardtune, blas_dir):
    e = dict(os.environ, LD_LIBRARY_PATH=os.path.join(LIBDIR, blas_dir))
    r = subprocess.run([shardtune, "env", "--json"], env=e, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"shardtune env failed: {r.stderr}")
    return json.loads(r.stdout)["blas"], e


def run(shardtune, env, config, nproc, threads, steps, tmp):
    out = os.path.join(tmp, f"run_{nproc}x{threads}_{time.monotonic_ns()}")
    cmd = [shardtune, "run", "--model", config, "--nproc", str(nproc), "--threads", str(threads),
           "--strategy", "full_shard", "--micro-batch", "4", "--seq-len", "256",
           "--global-batch", "8", "--precision", "fp32", "--attention", "eager",
           "--steps", str(steps), "--no-trace", "--no-checkpoints", "--out", out]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"shardtune run failed ({r.returncode}): {r.stderr[-2000:]}")
    with open(os.path.join(out, "measurements.json")) as f:
        m = json.load(f)
    times = [s["time_s"] for s in m["steps"]]
    return statistics.median(times[1:] if len(times) > 1 else times), m["environment"].get("blas", "")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shardtune", default="build/cli/shardtune")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layouts", default="2x1,1x2", help="ranks x threads per rank, comma-separated")
    p.add_argument("--include-reference", action="store_true")
    a = p.parse_args()
    dirs = [d for d in ("openblas-openmp", "openblas-pthread") if os.path.isdir(os.path.join(LIBDIR, d))]
    if a.include_reference:
        dirs.append("blas")
    if not dirs:
        sys.exit("no OpenBLAS build installed: apt-get install libopenblas0-openmp libopenblas0-pthread")
    layouts = [tuple(int(x) for x in l.split("x")) for l in a.layouts.split(",")]
    print(f"# 20.8M Llama layout, full_shard, mb 4 x 256, global batch 8, fp32, eager, Gloo; "
          f"median step time over steps 2..N; {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    print(f"{'blas':<20}{'threading':<11}{'1-core GFLOP/s':>15}" +
          "".join(f"{f'{n} ranks x {t} thr (s)':>22}" for n, t in layouts))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "llama21m.json")
        with open(cfg, "w") as f:
            json.dump(CONFIG, f)
        for d in dirs:
            blas, env = env_of(a.shardtune, d)
            steps = 3 if d == "blas" else a.steps
            cells = []
            for n, t in layouts:
                s, recorded = run(a.shardtune, env, cfg, n, t, steps, tmp)
                if d not in recorded:
                    sys.exit(f"the run bound another BLAS than {d}: {recorded}")
                cells.append(s)
            print(f"{d:<20}{blas['threading']:<11}{blas['gflops_one_core']:>15.1f}" +
                  "".join(f"{c:>22.3f}" for c in cells))


if __name__ == "__main__":
    sys.exit(main())
