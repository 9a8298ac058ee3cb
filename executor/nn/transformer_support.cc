// The executor's model coverage: decoders of the Llama, GPT-2, NeoX, Qwen, Phi-3, OLMo 2 and Gemma 3
// families (Gemma 2's attention soft-capping on the eager path; partial rotary as NeoX and Phi-3
// apply it), and HF's dropless MoE (Mixtral, Qwen2-MoE, Qwen3-MoE) with the auxiliary loss.
// DeepSeek (MLA with its YaRN softmax scale, its router with greedy, group_limited_greedy and
// noaux_tc, dense first blocks); RoPE plain, linear, llama3 and YaRN; GPT-OSS (sinks, its router
// and 3-D experts with the clamped SwiGLU; eager attention, no Ulysses).
#include "executor/nn/transformer_support.h"

namespace shardtune::exec {

std::string TransformerSupportProblem(const model::ModelSpec& spec) {
  const model::VisionSpec& v = spec.vision;
  if (v.kind == model::VisionKind::kQwen3Vl || v.kind == model::VisionKind::kSiglip) {
    return std::string("its ") + model::ToString(v.kind) +
           " vision tower is not run by shardtune's executor yet (Qwen2-VL's and Qwen2.5-VL's are; "
           "issue #43); estimate, simulate and tune model it";
  }
  if (v.enabled() && v.head_dim() % 4 != 0) {
    return "the vision tower's 2-D rotary needs a head_dim that is a multiple of 4, got " +
           std::to_string(v.head_dim());
  }
  if (spec.moe.router_aux_loss && (spec.moe.deepseek_router || spec.moe.gpt_oss_experts)) {
    return "the MoE auxiliary load-balancing loss (output_router_logits) is computed for the "
           "Mixtral / Qwen-MoE router only";
  }
  int kv = spec.num_kv_heads > 0 ? spec.num_kv_heads : spec.num_heads;
  if (kv <= 0 || spec.num_heads % kv != 0) return "num_heads must be a multiple of num_kv_heads";
  int64_t head_dim =
      spec.head_dim > 0 ? spec.head_dim : (spec.num_heads > 0 ? spec.hidden / spec.num_heads : 0);
  const int64_t rotary_dims = RotaryDims(head_dim, spec.rotary_fraction);
  if (spec.positions == model::PositionKind::kRotary && rotary_dims % 2 != 0) {
    return "rotary positions need an even number of rotary dims: int(head_dim " +
           std::to_string(head_dim) + " x rotary fraction " + std::to_string(spec.rotary_fraction) +
           ") = " + std::to_string(rotary_dims);
  }
  if (spec.positions == model::PositionKind::kRotary && rotary_dims == 0) {
    return "rotary positions with no rotary dims: int(head_dim " + std::to_string(head_dim) +
           " x rotary fraction " + std::to_string(spec.rotary_fraction) + ") = 0";
  }
  // Both change what the model computes (not its memory or time): training without them would
  // silently be another model than the checkpoint's. estimate, simulate and tune take them.
  const std::string& scaling = spec.rope_scaling.type;
  if (spec.positions == model::PositionKind::kRotary && !scaling.empty() && scaling != "linear" &&
      scaling != "llama3" && scaling != "yarn") {
    return "rope_scaling \"" + scaling +
           "\" is not implemented by the executor (it computes plain, \"linear\", \"llama3\" and "
           "\"yarn\" RoPE)";
  }
  return "";
}

std::string UlyssesProblem(const model::ModelSpec& spec, int cp) {
  if (cp <= 1) return "";
  if (spec.mla.enabled()) {
    return "--cp " + std::to_string(cp) + ": Ulysses is not implemented for multi-head latent "
           "attention (mla)";
  }
  if (spec.attention_sinks) {
    return "--cp " + std::to_string(cp) + ": Ulysses is not implemented with attention sinks "
           "(GPT-OSS)";
  }
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
