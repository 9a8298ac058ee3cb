// JSON glue for ModelSpec (README.md "Conventions"): the "shardtune.model" schema, version 1.
// Strict: unknown keys are errors; parsing checks types, then ModelSpec::Validate() reports every
// range problem.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/model_spec.h"

namespace shardtune::model {

inline constexpr const char* kModelSchema = "shardtune.model";
inline constexpr int kModelSchemaVersion = 1;

// Parses and validates a "shardtune.model" document. `file` prefixes messages
// ("model.json:/num_heads: ..."). Keys (snake_case): required num_layers, hidden, num_heads,
// ffn_hidden, vocab_size, max_seq_len; optional name (default: `file`), num_kv_heads (default
// num_heads), head_dim (default hidden / num_heads), norm "rms_norm"|"layer_norm" (rms_norm),
// norm_bias (false), mlp "swiglu"|"gelu" (swiglu), positions "rotary"|"learned" (rotary), qkv_bias,
// attn_out_bias, mlp_bias, qk_norm, parallel_residual, tied_embeddings, qk_norm_full_width,
// fused_qkv, fused_gate_up, norm_weight_fp32, norm_unit_offset, gelu_gate, scaled_embedding (all
// false), norm_placement "pre"|"post"|"sandwich" (pre), final_logit_softcap, attn_logit_softcap,
// query_pre_attn_scalar, sliding_window, rope_local_theta (0: none), full_attention_every (1)
// (ModelSpec says what each means), source (""),
// moe {num_experts, top_k (required); num_shared_experts, expert_ffn_hidden,
// shared_expert_ffn_hidden (0), shared_expert_gate, router_aux_loss, gpt_oss_experts (false),
// norm_topk_prob (true)} (absent: dense). attention_sinks (false).
// Throws InputError. The returned spec has its defaults filled (FillDefaults()).
ModelSpec ModelSpecFromJson(const nlohmann::json& j, const std::string& file);
// Writes every key (defaults resolved; the OLMo 2 / Phi-3 layout flags only when set), so
// ModelSpecFromJson(ModelSpecToJson(s)) == s.
nlohmann::ordered_json ModelSpecToJson(const ModelSpec& spec);
// Reads and parses a "shardtune.model" file. Throws InputError.
ModelSpec ReadModelSpecFile(const std::string& path);

}  // namespace shardtune::model
