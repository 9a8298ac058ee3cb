#!/usr/bin/env python3
"""Benchmark (not a test): shardtune's per-block activation policy against PyTorch's automatic
selective activation checkpointing (issue #46), at equal budgets, on the same op table.

For each case, `build/tests/bench/sac_levels MODEL CLUSTER SEQ MB` prints one block's op table as
shardtune costs it (the bytes each op's output keeps, the seconds rerunning it costs, at the
walk's rates) and shardtune's answers (planner/block_levels.h: the exact per-block knapsack, and
the two-level mix `tune` answers with when it is within kSimplerPolicyTolerance of the exact one)
for budgets of total kept activation bytes from "every block fully checkpointed" to "no
checkpointing". On the same table this script runs PyTorch's auto-SAC
(tests/bench/pytorch_auto_sac.py: SACEstimator's greedy trade-off curve, its piecewise-linear fit,
sac_milp solved exactly, then get_optimal_checkpointing_policy_per_module and the greedy policy
per checkpointed block; PyTorch is not installed here, so its algorithm is reimplemented from its
source there, with citations). Printed per budget: the rerun seconds each pays per micro-batch
(all blocks), the bytes each keeps, and who wins.

    python3 tests/bench/sac_compare.py [--levels build/tests/bench/sac_levels]

Budgets are "sum over blocks of kept bytes" for both (sac_milp's root constraint; see
pytorch_auto_sac.py `pytorch_sac_ilp` for the mapping). Figures are predictions of both policies
under shardtune's cost model: what each would pay if shardtune's per-op costs are right.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_auto_sac as torch_sac  # noqa: E402

CASES = [
    # (model, cluster, seq_len, micro_batch): issue #46's Llama-3-8B and Qwen3-30B-A3B at 8192
    # tokens (the MoE block's w1, w3, w2 are its routed experts' grouped GEMMs, top 8 rows per
    # token; its router reruns on both sides), a Qwen3 dense block, and a longer sequence.
    ("llama3-8b", "8xH100", 8192, 1),
    ("qwen3-30b-a3b", "8xH100", 8192, 1),
    ("qwen3-8b", "8xH100", 8192, 1),
    ("llama3-8b", "8xH100", 32768, 1),
]


def gib(b):
    return b / 2 ** 30


def run_case(levels_bin, model, cluster, seq, mb, points):
    out = subprocess.run([levels_bin, model, cluster, str(seq), str(mb), str(points)], check=True,
                         capture_output=True, text=True).stdout
    table = json.loads(out)
    print(f"\n{model} on {cluster}, micro-batch {mb} x {seq} tokens, {table['blocks']} blocks "
          f"(torchtitan modeling, bf16, SDPA)")
    print("  op table (per block and micro-batch): " + ", ".join(
        f"{o['name']} {o['output_bytes'] / 2**20:.0f} MiB / {o['recompute_s'] * 1e3:.3f} ms"
        for o in table["ops"]) + f"; input {table['block_input_bytes'] / 2**20:.0f} MiB; "
          f"elementwise rerun {table['elementwise_recompute_s'] * 1e3:.3f} ms")
    hdr = (f"  {'budget GiB':>10} | {'shardtune s':>11} {'GiB':>6} | {'2-level s':>9} | "
           f"{'torch ILP s':>11} {'GiB':>6} | {'torch greedy s':>14} {'GiB':>6} | winner (vs ILP)   | shardtune policy")
    print(hdr)
    wins = {"shardtune": 0, "torch": 0, "tie": 0}
    ratios = []
    for a in table["shardtune"]:
        budget = a["budget_bytes"]
        ilp = torch_sac.pytorch_sac_ilp(table, budget)
        greedy = torch_sac.pytorch_sac_ilp(table, budget, policy="greedy")
        if "exact_s" not in a or not ilp["feasible"]:
            print(f"  {gib(budget):>10.2f} | infeasible for "
                  f"{'shardtune' if 'exact_s' not in a else 'torch'}")
            continue
        st, tl, ts, gs = a["exact_s"], a["two_level_s"], ilp["recompute_s"], greedy["recompute_s"]
        # Ties within 1e-9 s or 0.1%.
        if abs(st - ts) <= max(1e-9, 1e-3 * max(st, ts)):
            w = "tie"
        elif st < ts:
            w = "shardtune"
        else:
            w = "torch"
        wins[w] += 1
        if ts > 0:
            ratios.append(st / ts)
        note = " (torch over budget)" if ilp["actual_exceeds_budget"] else ""
        print(f"  {gib(budget):>10.2f} | {st:>11.5f} {gib(a['exact_bytes']):>6.2f} | {tl:>9.5f} | "
              f"{ts:>11.5f} {gib(ilp['saved_bytes']):>6.2f} | {gs:>14.5f} {gib(greedy['saved_bytes']):>6.2f} | "
              f"{w + note:<17} | {a['two_level_policy']}")
    ratios.sort()
    med = ratios[len(ratios) // 2] if ratios else float("nan")
    print(f"  summary: shardtune faster at {wins['shardtune']}, torch faster at {wins['torch']}, tie at "
          f"{wins['tie']} budgets; median rerun ratio shardtune / torch ILP {med:.3f} (over budgets where "
          f"torch reruns anything)")
    return wins


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--levels", default=os.path.join(here, "..", "..", "build", "tests", "bench", "sac_levels"))
    ap.add_argument("--points", type=int, default=13)
    args = ap.parse_args()
    print(f"sac_compare.py, {datetime.date.today().isoformat()}: rerun seconds per micro-batch "
          f"(all blocks) at equal budgets of kept activation bytes")
    for c in CASES:
        run_case(args.levels, *c, args.points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
