// Dynamic programming over unit boundaries for a non-uniform wrap policy.
#include "planner/wrap_partition.h"

#include <algorithm>
#include <limits>

#include "model/activations.h"
#include "model/errors.h"
#include "model/module_tree.h"
#include "profiles/topology.h"

namespace shardtune::planner {
namespace {

double Gather(int s, const PartitionCosts& c) { return c.gather_latency_s + s * c.gather_block_s; }

// Exposure between adjacent units (sizes a then b in forward order): b's forward all-gather
// behind a's forward, a's backward all-gather behind b's backward.
double Pair(int a, int b, const PartitionCosts& c) {
  return std::max(0.0, Gather(b, c) - a * c.forward_block_s) +
         std::max(0.0, Gather(a, c) - b * c.backward_block_s);
}

}  // namespace

double ExposedGatherTime(const std::vector<int>& sizes, const PartitionCosts& c) {
  if (sizes.empty()) return 0;
  double t = Gather(sizes.front(), c) + Gather(sizes.back(), c);
  for (size_t i = 1; i < sizes.size(); ++i) t += Pair(sizes[i - 1], sizes[i], c);
  return t;
}

std::vector<std::pair<int, int>> OptimalPartition(int L, const PartitionCosts& c) {
  SHARDTUNE_CHECK(L >= 1) << L;
  int K = std::max(1, std::min(c.max_blocks_per_unit, L));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[i][s]: least exposure of a partition of blocks [0, i) whose last unit has s blocks,
  // without the final backward boundary term; units[i][s]: its unit count (for ties).
  std::vector<std::vector<double>> best(static_cast<size_t>(L + 1), std::vector<double>(static_cast<size_t>(K + 1), kInf));
  std::vector<std::vector<int>> units(best.size(), std::vector<int>(static_cast<size_t>(K + 1), 0));
  std::vector<std::vector<int>> prev(best.size(), std::vector<int>(static_cast<size_t>(K + 1), 0));
  for (int s = 1; s <= K && s <= L; ++s) {
    best[static_cast<size_t>(s)][static_cast<size_t>(s)] = Gather(s, c);
    units[static_cast<size_t>(s)][static_cast<size_t>(s)] = 1;
  }
  for (int i = 1; i <= L; ++i) {
    for (int s = 1; s <= K; ++s) {
      double base = best[static_cast<size_t>(i)][static_cast<size_t>(s)];
      if (base == kInf) continue;
      for (int t = 1; t <= K && i + t <= L; ++t) {
        double v = base + Pair(s, t, c);
        auto ni = static_cast<size_t>(i + t);
        auto nt = static_cast<size_t>(t);
        int nu = units[static_cast<size_t>(i)][static_cast<size_t>(s)] + 1;
        if (v < best[ni][nt] || (v == best[ni][nt] && nu < units[ni][nt])) {
          best[ni][nt] = v;
          units[ni][nt] = nu;
          prev[ni][nt] = s;
        }
      }
    }
  }
  int last = 1;
  double bestv = kInf;
  for (int s = 1; s <= K; ++s) {
    double v = best[static_cast<size_t>(L)][static_cast<size_t>(s)] + Gather(s, c);
    if (v < bestv) { bestv = v; last = s; }
  }
  std::vector<int> sizes;
  for (int i = L, s = last; i > 0;) {
    sizes.push_back(s);
    int p = prev[static_cast<size_t>(i)][static_cast<size_t>(s)];
    i -= s;
    s = p;
  }
  std::reverse(sizes.begin(), sizes.end());
  std::vector<std::pair<int, int>> ranges;
  int b = 0;
  for (int s : sizes) {
    ranges.push_back({b, b + s - 1});
    b += s;
  }
  return ranges;
}

PartitionCosts PartitionCostsFor(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                 const model::Plan& plan, int64_t seq, const sim::CostConstants& k) {
  PartitionCosts c;
  // A rank's tokens: S / cp with Ulysses (attention keeps the full S for its heads / cp).
  double tokens =
      static_cast<double>(plan.micro_batch) * static_cast<double>(seq / std::max(1, plan.cp));
  // Attention spans one sequence of a packed row (Plan::AttentionSeqLen).
  const int64_t attn_seq = plan.AttentionSeqLen(seq);
  double attn = model::AttentionForwardFlopsPerToken(spec, attn_seq).count();
  // The mean block: a dense prefix (moe.first_dense_layers) differs from the MoE blocks.
  double mm = model::MeanBlockForwardFlopsPerToken(spec, attn_seq).count() - attn;
  auto block = model::ComputeBlockActivations(spec, model::ActivationOptionsFor(plan, seq));
  double elem = block.full.elementwise_traffic_per_token * tokens;
  c.forward_block_s = sim::ComputeTime(mm * tokens, attn * tokens, elem, cluster.gpu, plan.param_dtype, k).count();
  c.backward_block_s = sim::ComputeTime(2 * mm * tokens, 2.5 * attn * tokens, 2 * elem, cluster.gpu, plan.param_dtype, k).count();
  int n = plan.Sharded() ? plan.ResolvedShardGroup(cluster.world_size(), cluster.gpus_per_node) : 1;
  if (n > 1) {
    profiles::Topology topo(cluster);
    sim::GroupLink g = sim::DescribeGroup(topo, cluster, {topo.ShardGroup(n, 0)}, k);
    const model::ParameterCounts pc = model::CountParameters(spec);
    const int dense = spec.DenseLayers();
    const double mean_block = (static_cast<double>(pc.block) * (spec.num_layers - dense) +
                               static_cast<double>(pc.dense_block) * dense) /
                              spec.num_layers;
    double per_block_bytes =
        mean_block * static_cast<double>(model::BytesPerElement(plan.param_dtype));
    const sim::CollectiveTerms t = sim::CollectiveCost(
        profiles::Collective::kAllGather, Bytes::Of(static_cast<int64_t>(std::max(1.0, per_block_bytes))), g);
    c.gather_block_s = t.bus_bytes / t.bus_bandwidth.count();
    c.gather_latency_s = t.latency.count();
  }
  c.max_blocks_per_unit = std::max(1, std::min(8, spec.num_layers / 2));
  return c;
}

}  // namespace shardtune::planner
