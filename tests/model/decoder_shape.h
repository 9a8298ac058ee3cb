// A small decoder ModelSpec for tests, named by its shape: the model, executor and simulator tests
// each used to spell the same nine fields out.
#pragma once

#include <cstdint>
#include <string>

#include "model/model_spec.h"
#include "model/presets.h"

namespace shardtune::model::testing_util {

// The attention and MLP shape of a test decoder. max_seq_len 0 keeps the base spec's.
struct DecoderShape {
  int layers = 1;
  int64_t hidden = 64;
  int heads = 4;
  int kv_heads = 2;
  int64_t ffn_hidden = 128;
  int64_t vocab = 256;
  int64_t max_seq_len = 0;
};

// `base` (default: ModelSpec's defaults) with `name` and `shape`; FillDefaults then fills what is
// left at zero (head_dim = hidden / heads, rope_theta, norm_eps).
inline ModelSpec Decoder(const std::string& name, const DecoderShape& shape, ModelSpec base = {}) {
  base.name = name;
  base.num_layers = shape.layers;
  base.hidden = shape.hidden;
  base.num_heads = shape.heads;
  base.num_kv_heads = shape.kv_heads;
  base.ffn_hidden = shape.ffn_hidden;
  base.vocab_size = shape.vocab;
  if (shape.max_seq_len > 0) base.max_seq_len = shape.max_seq_len;
  base.FillDefaults();
  return base;
}

// tiny-llama with 4 experts of half its MLP width, 2 routed per token: the smallest MoE the
// module-tree and memory tests build expert units from.
inline ModelSpec TinyMoe() {
  ModelSpec s = FindModelPreset("tiny-llama");
  s.name = "tiny-moe";
  s.moe.num_experts = 4;
  s.moe.top_k = 2;
  s.moe.expert_ffn_hidden = s.ffn_hidden / 2;
  return s;
}

}  // namespace shardtune::model::testing_util
