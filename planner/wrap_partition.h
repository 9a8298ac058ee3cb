// A non-uniform wrap policy: the partition of the block sequence into contiguous FSDP units
// that minimises the all-gather time left exposed in forward and backward, by dynamic
// programming over unit boundaries. The tuner adds it to the wraps it simulates; the event
// simulator, not this estimate, decides whether it wins.
#pragma once

#include <utility>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/cost_model.h"

namespace shardtune::planner {

// Per-block costs the partition trades off. A unit of s blocks all-gathers in
// gather_latency_s + s * gather_block_s, computes forward in s * forward_block_s and backward in
// s * backward_block_s.
struct PartitionCosts {
  double forward_block_s = 0;
  double backward_block_s = 0;
  double gather_block_s = 0;
  double gather_latency_s = 0;
  int max_blocks_per_unit = 8;  // bounds the gathered memory of a unit
};

// Exposed time of a partition (sizes in forward order): FSDP2 overlaps unit i's all-gather with
// unit i-1's forward and, in backward, with unit i+1's backward; the first forward and first
// backward all-gathers have nothing to hide behind.
double ExposedGatherTime(const std::vector<int>& sizes, const PartitionCosts& c);

// The partition of `num_layers` blocks minimising ExposedGatherTime (ties: fewer units, then
// smaller first unit), as inclusive block ranges. O(L x K^2). REQUIRES: num_layers >= 1.
std::vector<std::pair<int, int>> OptimalPartition(int num_layers, const PartitionCosts& c);

// Costs for this model, cluster and base plan from the simulator's cost models (a block's
// forward/backward compute, its all-gather over the shard group).
PartitionCosts PartitionCostsFor(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                 const model::Plan& plan, int64_t seq_len, const sim::CostConstants& k);

}  // namespace shardtune::planner
