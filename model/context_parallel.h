// Ulysses context parallelism (Jacobs et al. 2023, "DeepSpeed Ulysses", arXiv 2309.14509) as verl
// runs it: the checks that need the model, KV-head repetition, and the all-to-all sizes of one
// attention layer. Shape legend: B micro-batch, S sequence, a heads, a_kv KV heads, d head_dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"

namespace shardtune::model {

// How many times each KV head is repeated before the all-to-all: max(cp / a_kv, 1), so each rank
// receives whole KV heads (verl/models/transformers/monkey_patch.py
// _ulysses_flash_attention_forward: repeats = max(ulysses_sp_size // key_states.size(2), 1);
// repeat_kv). REQUIRES: cp >= 1, spec.num_kv_heads >= 1.
int KvRepeat(const ModelSpec& spec, int cp);

// Problems of plan.cp for this model and world, each "where:/key: expected ..., got ...":
// cp divides num_heads; num_kv_heads % cp == 0 or cp % num_kv_heads == 0 (verl's
// apply_monkey_patch asserts both); and cp x dp_shard x dp_replicate = world: with
// cp_fsdp_mesh dp_cp FSDP's shard group spans whole cp groups (torchtitan flattens
// dp_shard x cp), so cp divides the resolved shard group; with dp the shard group tiles
// world / cp (checked by Plan::Problems). Empty when cp is 1 or Plan::Problems already rejects cp.
std::vector<std::string> CpProblems(const ModelSpec& spec, const Plan& plan, int world,
                                    int gpus_per_node, const std::string& where);

// The all-to-alls of one attention layer on one rank, as total sizes S in the nccl-tests sense
// (the bytes of this rank's input tensor; each rank sends (cp-1)/cp of it away). Forward: q, k,
// v from [B, S/cp, heads, d] to [B, S, heads/cp, d] (gather_seq_scatter_heads), the output back
// (gather_heads_scatter_seq). Backward: the gradients of the same four, same sizes
// (verl/utils/ulysses.py SeqAllToAll.backward runs the inverse all-to-all). All zero when cp 1.
struct UlyssesAllToAll {
  int64_t q_bytes = 0;  // B·(S/cp)·a·d·e
  int64_t k_bytes = 0;  // B·(S/cp)·a_kv·KvRepeat·d·e (KV heads repeated first when cp > a_kv)
  int64_t v_bytes = 0;  // as k_bytes
  int64_t out_bytes = 0;  // B·(S/cp)·a·d·e
  int calls = 0;          // all-to-all calls per layer per direction pass: 4 (q, k, v, out)
  int64_t forward_bytes() const { return q_bytes + k_bytes + v_bytes + out_bytes; }
};
// REQUIRES: plan.cp >= 1 divides seq_len.
UlyssesAllToAll UlyssesAllToAllPerLayer(const ModelSpec& spec, const Plan& plan, int64_t seq_len);

}  // namespace shardtune::model
