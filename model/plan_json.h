// JSON glue for Plan (README.md "Conventions"): the "shardtune.plan" schema, version 1. Strict:
// unknown keys are errors naming their JSON pointer; enum values must be one of the names
// ToString() prints.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/plan.h"

namespace shardtune::model {

inline constexpr const char* kPlanSchema = "shardtune.plan";
inline constexpr int kPlanSchemaVersion = 1;

// Parses a "shardtune.plan" document; `file` prefixes messages ("plan.json:/wrap/every_k: ...").
// Every key is optional and defaults to the Plan struct's default, except
// reshard_after_forward, whose default is StrategyReshardsAfterForward(strategy). Keys: strategy,
// shard_group_size, wrap {policy "block"|"every"|"ranges"|"size", every_k, ranges [[0,7],[8,31]],
// min_num_params, embedding_unit, head_unit}, micro_batch, seq_len, grad_accum, no_sync,
// checkpointing "none"|"full"|"selective"|"every"|"first", checkpoint_every_k, checkpoint_first_k
// (the first k blocks of each stack), checkpoint_rest "none"|"selective" (with "first": what the
// other blocks run; absent: none), sac_save "wq+wv+w1+w2+sdpa" (with "selective" or "first":
// the op-level SAC save set; absent: torchtitan's), checkpointing "blocks" with checkpoint_blocks
// "0-3=full,4-11=sac:wq+sdpa,12-31=none" (--checkpointing blocks:'s runs), offload,
// activation_offload, activation_offload_blocks (with "verl_async": the first k blocks), param_dtype,
// reduce_dtype, master_dtype, frozen_dtype (absent: master_dtype), reshard_after_forward,
// forward_prefetch, backward_prefetch, max_inflight_allgathers, optimizer, optimizer_impl,
// attention, modeling, loss_fp32_upcast, keep_logits, cp, cp_fsdp_mesh, role, frozen_prefixes,
// lora {rank, alpha, targets, dtype}, tiled_mlp_shards. Parsing checks types and names only:
// ranges and cross-field rules need the world and the model, so callers run Plan::Problems() next.
// Throws InputError.
Plan PlanFromJson(const nlohmann::json& j, const std::string& file);
// Writes every key (frozen_dtype only when set), so PlanFromJson(PlanToJson(p)) == p.
nlohmann::ordered_json PlanToJson(const Plan& plan);
// Reads and parses a "shardtune.plan" file. Throws InputError.
Plan ReadPlanFile(const std::string& path);

}  // namespace shardtune::model
