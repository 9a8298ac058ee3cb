// The executor's model coverage: dense decoders of the Llama, GPT-2, NeoX, Qwen, Phi-3 and OLMo 2
// families.
#include "executor/transformer_support.h"

namespace shardtune::exec {

std::string TransformerSupportProblem(const model::ModelSpec& spec) {
  if (spec.moe.enabled()) return "mixture-of-experts models are not supported by the executor";
  int kv = spec.num_kv_heads > 0 ? spec.num_kv_heads : spec.num_heads;
  if (kv <= 0 || spec.num_heads % kv != 0) return "num_heads must be a multiple of num_kv_heads";
  int64_t head_dim =
      spec.head_dim > 0 ? spec.head_dim : (spec.num_heads > 0 ? spec.hidden / spec.num_heads : 0);
  if (spec.positions == model::PositionKind::kRotary && head_dim % 2 != 0) {
    return "rotary positions need an even head_dim";
  }
  // Both change what the model computes (not its memory or time): training without them would
  // silently be another model than the checkpoint's. estimate, simulate and tune take them.
  const std::string& scaling = spec.rope_scaling.type;
  if (spec.positions == model::PositionKind::kRotary && !scaling.empty() && scaling != "linear" &&
      scaling != "llama3") {
    return "rope_scaling \"" + scaling +
           "\" is not implemented by the executor (it computes plain, \"linear\" and \"llama3\" "
           "RoPE)";
  }
  if (spec.positions == model::PositionKind::kRotary && spec.rotary_fraction != 1.0) {
    return "partial rotary embeddings (rotary_pct / partial_rotary_factor " +
           std::to_string(spec.rotary_fraction) + ") are not implemented by the executor";
  }
  return "";
}

std::string UlyssesProblem(const model::ModelSpec& spec, int cp) {
  if (cp <= 1) return "";
  int kv = spec.num_kv_heads > 0 ? spec.num_kv_heads : spec.num_heads;
  if (spec.num_heads % cp != 0) {
    return "--cp " + std::to_string(cp) + ": Ulysses splits attention heads, and " +
           std::to_string(spec.num_heads) + " heads are not divisible by " + std::to_string(cp) +
           " (hint: a --cp that divides num_heads)";
  }
  if (kv % cp != 0 && cp % kv != 0) {
    return "--cp " + std::to_string(cp) + ": " + std::to_string(kv) +
           " kv heads and cp must divide one another (each rank gets kv/cp kv heads, or one "
           "repeated cp/kv times)";
  }
  return "";
}

}  // namespace shardtune::exec
