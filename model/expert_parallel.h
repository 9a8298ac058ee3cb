// Expert parallelism as torchtitan runs it beside FSDP2 (parallelism.expert_parallel_degree):
// the checks that need the model, and the all-to-all sizes of one MoE layer. Sources:
// torchtitan/distributed/parallel_dims.py (the ep mesh borrows dp_shard x cp ranks, efsdp =
// dp_shard x cp / ep), torchtitan/distributed/fsdp.py apply_fsdp (routed experts sharded over the
// efsdp mesh, Shard(1) when efsdp x ep > num_experts) and models/common/token_dispatcher.py
// AllToAllTokenDispatcher (dispatch: token counts exchanged and synced to the host, tokens by
// all_to_all_single, permuted to expert-major order; combine: unpermute, all-to-all back, fp32
// score product, scatter_add). Legend: T tokens of the rank's micro-batch, k top_k, H hidden,
// e bytes of the compute dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"

namespace shardtune::model {

// Problems of plan.ep for this model, each "where:/expert_parallel_degree: expected ..., got ...":
// ep > 1 needs an MoE model, divides its num_experts (each rank holds E / ep whole experts), runs
// torchtitan's model code (--modeling torchtitan) or, under --modeling hf, ROLL's ExpertParallel
// around transformers 5's experts (no expert biases: not GPT-OSS), and is not combined with
// per-expert FSDP units (--wrap-experts: the routed experts are one efsdp unit per layer, as
// torchtitan and ROLL's moe_experts class wrap them). Empty when ep is 1 or Plan::Problems
// already rejects it.
std::vector<std::string> EpProblems(const ModelSpec& spec, const Plan& plan, const std::string& where);

// The expert-parallel all-to-alls of one MoE layer on one rank, as total sizes S in the
// nccl-tests sense (this rank's input; (ep-1)/ep of it leaves the rank). All zero when ep is 1.
struct ExpertAllToAll {
  // Forward dispatch: routed_input [T·k, H] to the ranks holding the chosen experts; forward
  // combine: the experts' outputs back. Backward runs the inverse of each (same sizes). Sized by
  // the busiest rank, which receives T·k x load_factor rows and sends them back (an all-to-all
  // ends with its slowest rank).
  int64_t dispatch_bytes = 0;  // received_rows·H·e
  int64_t combine_bytes = 0;   // received_rows·H·e
  // Rows this rank's local experts receive: T·k x the load factor of the busiest rank.
  int64_t received_rows = 0;
  // The token-count exchange before each dispatch (E int64 counts, an all_to_all_single whose
  // result .tolist() syncs the host with the GPU: _sync_token_count_exchange).
  int64_t count_bytes = 0;  // E·8
  // all_to_all_single calls per layer: forward 3 (counts, dispatch, combine), backward 2.
  int forward_calls = 0;
  int backward_calls = 0;
};

// `tokens`: T, this rank's tokens per micro-batch; `load_factor`: the busiest rank's load as a
// multiple of the balanced T·k (SimOptions::moe_capacity_factor).
ExpertAllToAll ExpertAllToAllPerLayer(const ModelSpec& spec, const Plan& plan, int64_t tokens,
                                      double load_factor);

}  // namespace shardtune::model
