// BlockLevels, CheapestMix, RunsOf (block_levels.h).
#include "planner/block_levels.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>

#include "model/module_tree.h"
#include "simulator/kernel_time.h"

namespace shardtune::planner {
namespace {

// Keeps the lower-left Pareto front of `v` (bytes ascending, seconds strictly descending); of
// points equal in bytes (to a relative 1e-12) the cheapest.
template <typename T, typename Bytes, typename Secs>
void KeepFront(std::vector<T>* v, Bytes bytes, Secs secs) {
  std::sort(v->begin(), v->end(), [&](const T& a, const T& b) {
    return std::make_tuple(bytes(a), secs(a)) < std::make_tuple(bytes(b), secs(b));
  });
  std::vector<T> out;
  for (const T& p : *v) {
    if (!out.empty() && !(secs(p) < secs(out.back()))) continue;  // dominated (or a tie in bytes)
    out.push_back(p);
  }
  *v = std::move(out);
}

}  // namespace

std::vector<BlockLevel> BlockLevels(const model::BlockActivations& b, double tokens,
                                    double attention_flops_per_token, double matmul_flops_per_token,
                                    const RerunRates& rates, bool selective) {
  using Kind = model::BlockRun::Kind;
  const double elem_s = tokens * b.full.elementwise_traffic_per_token * rates.memory_s_per_byte;
  const double attn_s = tokens * attention_flops_per_token * rates.attention_s_per_flop;
  std::vector<BlockLevel> levels;
  levels.push_back({Kind::kKeep, model::kTorchtitanSacSave, tokens * b.full.saved_per_token, 0.0});
  // Full: the whole forward again (the walk's re_mm = re_elem = 1, and the attention core).
  levels.push_back({Kind::kFull, model::kTorchtitanSacSave, tokens * b.checkpoint_input_per_token,
                    elem_s + attn_s + tokens * matmul_flops_per_token * rates.matmul_s_per_flop});
  if (selective) {
    // The model's own rule (torchtitan's op SAC, or the per-piece recompute): the walk's re_elem = 1,
    // re_sac, re_attn.
    levels.push_back({Kind::kSac, model::kTorchtitanSacSave, tokens * b.selective_per_token,
                      elem_s + b.selective_recompute_attention * attn_s +
                          tokens * b.selective_recompute_matmul_flops_per_token * rates.matmul_s_per_flop});
  }
  if (b.HasOpSac()) {
    for (model::SacSave s = 0; s <= model::kSacAll; ++s) {
      if (!b.sac_sdpa && (s & model::kSacSdpaBit) != 0) continue;  // eager: nothing of the core to keep
      levels.push_back({Kind::kSac, s, tokens * b.SacSavedPerToken(s),
                        elem_s + b.SacRecomputeAttention(s) * attn_s +
                            tokens * b.SacRecomputeMatmulFlopsPerToken(s) * rates.matmul_s_per_flop});
    }
  }
  // Keep the front; between equal levels the first listed (keep, full, the model's rule) wins, as
  // the stable sort leaves them ahead of a save set of the same bytes and time.
  std::stable_sort(levels.begin(), levels.end(), [](const BlockLevel& x, const BlockLevel& y) {
    return std::make_tuple(x.bytes, x.rerun_s) < std::make_tuple(y.bytes, y.rerun_s);
  });
  std::vector<BlockLevel> front;
  for (const BlockLevel& l : levels) {
    if (!front.empty() && !(l.rerun_s < front.back().rerun_s)) continue;
    front.push_back(l);
  }
  return front;
}

PlanBlock PlanBlockOf(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const model::Plan& plan,
                      const sim::CostConstants& costs) {
  PlanBlock out;
  const int64_t seq = plan.ResolvedSeqLen(spec.max_seq_len);
  out.block = model::ComputeBlockActivations(spec, model::ActivationOptionsFor(plan, seq));
  sim::CostConstants storage;
  const sim::CostConstants& k = sim::PlanConstants(costs, spec, plan, cluster.gpu, &storage);
  const double peak = sim::DensePeak(cluster.gpu, plan.param_dtype).count();
  out.rates.matmul_s_per_flop = 1.0 / (peak * k.matmul_efficiency);
  out.rates.attention_s_per_flop = 1.0 / (peak * k.attention_efficiency);
  out.rates.memory_s_per_byte = 1.0 / (cluster.gpu.memory_bandwidth.count() * k.memory_efficiency);
  const int64_t attn_seq = plan.AttentionSeqLen(seq);
  out.attention_flops_per_token = model::AttentionForwardFlopsPerToken(spec, attn_seq).count();
  out.matmul_flops_per_token = model::MeanBlockForwardFlopsPerToken(spec, attn_seq).count() - out.attention_flops_per_token;
  // This rank's tokens (the walk's tokens_: Ulysses splits each sequence over cp ranks).
  out.tokens = static_cast<double>(plan.micro_batch) * static_cast<double>(seq / std::max(1, plan.cp));
  return out;
}

std::vector<BlockLevel> PlanBlock::Levels() const {
  return BlockLevels(block, tokens, attention_flops_per_token, matmul_flops_per_token, rates,
                     block.selective_per_token < block.full.saved_per_token);
}

BlockLevel PlanBlock::Under(const model::Plan& plan, int index) const {
  using Kind = model::BlockRun::Kind;
  const double elem_s = tokens * block.full.elementwise_traffic_per_token * rates.memory_s_per_byte;
  const double attn_s = tokens * attention_flops_per_token * rates.attention_s_per_flop;
  if (model::BlockCheckpointed(plan, index, 0)) {
    return {Kind::kFull, model::kTorchtitanSacSave, tokens * block.checkpoint_input_per_token,
            elem_s + attn_s + tokens * matmul_flops_per_token * rates.matmul_s_per_flop};
  }
  if (!model::BlockSelective(plan, index, 0)) return {Kind::kKeep, model::kTorchtitanSacSave, tokens * block.full.saved_per_token, 0.0};
  const model::SacSave save = model::BlockSacSave(plan, index, 0);
  if (save != model::kTorchtitanSacSave && block.HasOpSac()) {
    return {Kind::kSac, save, tokens * block.SacSavedPerToken(save),
            elem_s + block.SacRecomputeAttention(save) * attn_s +
                tokens * block.SacRecomputeMatmulFlopsPerToken(save) * rates.matmul_s_per_flop};
  }
  return {Kind::kSac, model::kTorchtitanSacSave, tokens * block.selective_per_token,
          elem_s + block.selective_recompute_attention * attn_s +
              tokens * block.selective_recompute_matmul_flops_per_token * rates.matmul_s_per_flop};
}

namespace {

struct MixPoint {
  double bytes = 0, secs = 0;
  int32_t prev = -1;  // index in the previous step's front
  int32_t level = -1;
};

// CheapestMix's dynamic programme: fronts[m] is the Pareto front of (bytes, seconds) of the
// multisets of m levels within `budget_bytes`, for m = 0 up to `blocks` or the first m with none
// (the fronts stop there: a partial mix over the budget stays over it, every level keeps >= 0
// bytes).
std::vector<std::vector<MixPoint>> MixFronts(const std::vector<BlockLevel>& levels, int blocks, double budget_bytes) {
  const auto bytes = [](const MixPoint& p) { return p.bytes; };
  const auto secs = [](const MixPoint& p) { return p.secs; };
  std::vector<std::vector<MixPoint>> steps;
  steps.reserve(static_cast<size_t>(std::max(blocks, 0)) + 1);
  steps.push_back({MixPoint{}});
  for (int k = 1; k <= blocks && !levels.empty(); ++k) {
    const std::vector<MixPoint>& prev = steps.back();
    std::vector<MixPoint> next;
    next.reserve(prev.size() * levels.size());
    for (size_t i = 0; i < prev.size(); ++i) {
      for (size_t l = 0; l < levels.size(); ++l) {
        const double b = prev[i].bytes + levels[l].bytes;
        if (b > budget_bytes) continue;
        next.push_back({b, prev[i].secs + levels[l].rerun_s, static_cast<int32_t>(i), static_cast<int32_t>(l)});
      }
    }
    if (next.empty()) break;
    KeepFront(&next, bytes, secs);
    steps.push_back(std::move(next));
  }
  return steps;
}

}  // namespace

std::optional<std::vector<int>> CheapestMix(const std::vector<BlockLevel>& levels, int blocks,
                                            double budget_bytes) {
  if (levels.empty() || blocks < 1) return std::nullopt;
  const std::vector<std::vector<MixPoint>> steps = MixFronts(levels, blocks, budget_bytes);
  if (steps.size() <= static_cast<size_t>(blocks)) return std::nullopt;
  // The front's last point is the fastest within the budget (seconds descend as bytes ascend).
  std::vector<int> counts(levels.size(), 0);
  int32_t at = static_cast<int32_t>(steps[static_cast<size_t>(blocks)].size()) - 1;
  for (int k = blocks; k >= 1; --k) {
    const MixPoint& p = steps[static_cast<size_t>(k)][static_cast<size_t>(at)];
    ++counts[static_cast<size_t>(p.level)];
    at = p.prev;
  }
  return counts;
}

std::vector<double> LeastRerunByCount(const std::vector<BlockLevel>& levels, int blocks, double budget_bytes) {
  std::vector<double> out(static_cast<size_t>(std::max(blocks, 0)) + 1, std::numeric_limits<double>::infinity());
  const std::vector<std::vector<MixPoint>> steps = MixFronts(levels, blocks, budget_bytes);
  for (size_t m = 0; m < steps.size() && m < out.size(); ++m) out[m] = steps[m].back().secs;
  return out;
}

std::optional<std::vector<int>> CheapestTwoLevelMix(const std::vector<BlockLevel>& levels, int blocks,
                                                    double budget_bytes) {
  std::optional<std::vector<int>> best;
  double best_s = 0, best_bytes = 0;
  for (size_t i = 0; i < levels.size(); ++i) {
    for (size_t j = i; j < levels.size(); ++j) {
      // k blocks at i, blocks - k at j (k = blocks: i alone).
      for (int k = (i == j ? blocks : 1); k <= blocks; ++k) {
        const double bytes = k * levels[i].bytes + (blocks - k) * levels[j].bytes;
        const double secs = k * levels[i].rerun_s + (blocks - k) * levels[j].rerun_s;
        if (bytes > budget_bytes) continue;
        if (best && !(secs < best_s || (secs == best_s && bytes < best_bytes))) continue;
        best = std::vector<int>(levels.size(), 0);
        (*best)[i] += k;
        (*best)[j] += blocks - k;
        best_s = secs;
        best_bytes = bytes;
      }
    }
  }
  return best;
}

std::vector<model::BlockRun> RunsOf(const std::vector<BlockLevel>& levels, const std::vector<int>& counts) {
  std::vector<size_t> order;
  for (size_t l = 0; l < levels.size(); ++l) {
    if (counts[l] > 0) order.push_back(l);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return levels[a].rerun_s > levels[b].rerun_s; });
  std::vector<model::BlockRun> runs;
  int next = 0;
  for (size_t l : order) {
    model::BlockRun r;
    r.first = next;
    r.last = next + counts[l] - 1;
    r.kind = levels[l].kind;
    r.save = levels[l].save;
    next = r.last + 1;
    runs.push_back(r);
  }
  return runs;
}

}  // namespace shardtune::planner
