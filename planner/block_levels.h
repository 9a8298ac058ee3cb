// The per-block activation policy search (issue #46): each transformer block of a plan keeps its
// activations, reruns whole in backward, runs the model's selective recompute, or (where op-level
// SAC applies, model::BlockActivations::HasOpSac) keeps the outputs of a chosen set of its ops and
// reruns the rest. Each choice is a level with the bytes a block keeps until its backward and the
// time its backward pays to rerun what it did not keep. For n alike blocks and a budget of kept
// bytes, the cheapest mix of levels is a multiple-choice knapsack over identical items; it is
// solved exactly here (CheapestMix), and the planner (checkpoint_refine.cc) turns the budget into
// the plan's replayed peak and confirms the answer on the caching-allocator replay.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/cost_model.h"

namespace shardtune::planner {

struct BlockLevel {
  model::BlockRun::Kind kind = model::BlockRun::Kind::kKeep;
  model::SacSave save = model::kTorchtitanSacSave;  // kSac: the save set
  double bytes = 0;   // bytes one block keeps from its forward to its backward, one micro-batch
  double rerun_s = 0; // its backward's rerun of what it did not keep, one micro-batch
};

// What a block's rerun costs, per unit of work, under the plan's constants (the walk's rates:
// FLOPs at the dtype's peak times matmul_efficiency / attention_efficiency, bytes at the memory
// bandwidth times memory_efficiency).
struct RerunRates {
  double matmul_s_per_flop = 0;
  double attention_s_per_flop = 0;
  double memory_s_per_byte = 0;
};

// The levels of block `b` for `tokens` tokens a micro-batch: keep, full (its input only, its whole
// forward again), the model's selective rule where it keeps less than keep (`selective`), and,
// where op-level SAC applies, every save set on the lower-left Pareto front of (bytes, rerun
// time) of the 2^8 sets (a set that keeps no less and reruns no less than another is never
// chosen). `attention_flops_per_token` and `matmul_flops_per_token`: the block's forward
// (model::AttentionForwardFlopsPerToken, the rest of model::BlockForwardFlopsPerToken). Sorted by
// bytes, ascending (so by rerun time, descending); ties in bytes keep the cheaper level only.
std::vector<BlockLevel> BlockLevels(const model::BlockActivations& b, double tokens,
                                    double attention_flops_per_token, double matmul_flops_per_token,
                                    const RerunRates& rates, bool selective);

// A plan's block, its work and its rates, as the walk costs them: the block's activations
// (model::ComputeBlockActivations at the plan's options, a full fine-tune), the tokens of one
// micro-batch, the forward's attention and matmul FLOPs per token (model::
// AttentionForwardFlopsPerToken at the plan's attention length, the rest of model::
// MeanBlockForwardFlopsPerToken), and the rates under sim::PlanConstants (the measured tables'
// efficiencies where the profile has them) at the plan's compute dtype.
struct PlanBlock {
  model::BlockActivations block;
  double tokens = 0;
  double attention_flops_per_token = 0, matmul_flops_per_token = 0;
  RerunRates rates;
  // BlockLevels of it (the model's selective rule included where it keeps less than keep).
  std::vector<BlockLevel> Levels() const;
  // The bytes text block `index` keeps and the seconds its backward reruns, one micro-batch,
  // under `plan`'s checkpointing (model::BlockCheckpointed, BlockSelective, BlockSacSave), at
  // the levels' rates.
  BlockLevel Under(const model::Plan& plan, int index) const;
};
PlanBlock PlanBlockOf(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const model::Plan& plan,
                      const sim::CostConstants& costs);

// The assignment of levels to `blocks` alike blocks with the least total rerun time whose kept
// bytes sum to at most `budget_bytes`: the count of blocks at each level (levels' order). Exact:
// a dynamic programme over the blocks keeping, for each number of blocks placed, the Pareto front
// of (bytes, seconds) of the multisets placed so far (no multiset off the front can be completed
// into a better answer, since the remaining blocks add the same choices to each). nullopt when
// even the fewest bytes (the first level everywhere) exceed the budget. Ties: fewer bytes.
std::optional<std::vector<int>> CheapestMix(const std::vector<BlockLevel>& levels, int blocks,
                                            double budget_bytes);

// The least total rerun time of m alike blocks whose kept bytes sum to at most `budget_bytes`, for
// every m from 0 to `blocks` (index m; infinity where even the fewest bytes exceed the budget): the
// figures CheapestMix(levels, m, budget_bytes) reaches, from its one dynamic programme (which
// places the blocks one at a time under the same budget).
std::vector<double> LeastRerunByCount(const std::vector<BlockLevel>& levels, int blocks, double budget_bytes);

// CheapestMix restricted to at most two distinct levels (k blocks at one, the rest at another,
// over every pair and k): the linear relaxation's shape, rounded. Counts as CheapestMix's.
std::optional<std::vector<int>> CheapestTwoLevelMix(const std::vector<BlockLevel>& levels, int blocks,
                                                    double budget_bytes);

// The kBlocks runs for `counts` (CheapestMix's): the levels that rerun most first (as first:K
// puts its whole reruns first: the blocks backward reaches last, while every later block's
// activations are already freed, pay the rerun's transient), the keeping ones last. Levels with a
// count of 0 are skipped.
std::vector<model::BlockRun> RunsOf(const std::vector<BlockLevel>& levels, const std::vector<int>& counts);

}  // namespace shardtune::planner
