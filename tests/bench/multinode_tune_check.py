#!/usr/bin/env python3
"""Benchmark (not a test): how the collective model changes `tune`'s answer on multi-node jobs.

Runs `shardtune tune --json` for the communication-bound cases of issue #47 with one or two
shardtune binaries (e.g. a build of the commit before a change and the current one) and prints,
per case, the winner's plan, step time and exposed communication, and the fastest plan of each
strategy, so a change in the winner comes with its reason.

Cases:
  - llama2-70b on 16x8xH100-ib400 (a NIC per GPU), global batch 512 x 4096
  - llama2-70b on 16x8xH100-ib400/node (one NIC per node), same job
  - llama3-8b on 4 nodes of 8 A100-80G with 4 x 200 Gb/s and with 8 x 200 Gb/s NICs per node
    (tests/bench/clusters/*.json), global batch 256 x 4096

Usage: python3 tests/bench/multinode_tune_check.py [BINARY ...]   (default build/cli/shardtune)
"""
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CASES = [
    ("llama2-70b", "16x8xH100-ib400", 512, 4096),
    ("llama2-70b", "16x8xH100-ib400/node", 512, 4096),
    ("llama3-8b", os.path.join(HERE, "clusters", "4x8xA100-4x200G.json"), 256, 4096),
    ("llama3-8b", os.path.join(HERE, "clusters", "4x8xA100-8x200G.json"), 256, 4096),
]


def describe(p):
    plan = p["plan"]
    wrap = plan.get("wrap", "?")
    if isinstance(wrap, dict):
        wrap = str(wrap.get("policy", "?")) + ("+embedding" if wrap.get("embedding_unit") else "") + (
            "+head" if wrap.get("head_unit") else "")
    return (f"{plan['strategy']}"
            + (f" group {plan['shard_group_size']}" if plan.get("shard_group_size") else "")
            + f" wrap={wrap} mb={plan['micro_batch']} accum={plan['grad_accum']}"
            f" ckpt={plan['checkpointing']} offload={plan['offload']}")


def run(binary, model, cluster, batch, seq):
    cmd = [binary, "tune", "--model", model, "--cluster", cluster, "--global-batch", str(batch),
           "--seq-len", str(seq), "--top", "40", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
    return json.loads(out.stdout), ""


def main():
    binaries = sys.argv[1:] or [os.path.join(ROOT, "build", "cli", "shardtune")]
    print(f"tune winners on multi-node jobs, {datetime.date.today().isoformat()}")
    for model, cluster, batch, seq in CASES:
        name = os.path.basename(cluster).replace(".json", "") if cluster.endswith(".json") else cluster
        print(f"\n{model} on {name}, global batch {batch} x {seq}")
        for b in binaries:
            j, err = run(b, model, cluster, batch, seq)
            label = os.path.relpath(b, ROOT)
            if j is None:
                print(f"  [{label}] error: {err}")
                continue
            plans = j.get("plans") or j.get("top") or []
            if not plans:
                print(f"  [{label}] no plan fits")
                continue
            w = plans[0]
            print(f"  [{label}] winner: {describe(w)}: step {w['step_time_s']:.3f} s, "
                  f"{w['tokens_per_s']:.0f} tokens/s, exposed comm {w.get('exposed_comm_s', 0):.3f} s")
            best = {}
            for p in plans:
                s = p["plan"]["strategy"]
                if s not in best:
                    best[s] = p
            for s, p in best.items():
                if p is w:
                    continue
                print(f"      best {s}: {describe(p)}: step {p['step_time_s']:.3f} s, "
                      f"exposed comm {p.get('exposed_comm_s', 0):.3f} s")


if __name__ == "__main__":
    main()
