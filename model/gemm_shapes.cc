// GEMM shapes of a block and the LM head (the nn.Linear layers of HF modeling_llama.py,
// modeling_mixtral.py and modeling_phi3.py, and their backward,
// torch/csrc/autograd/FunctionsManual.cpp mm_mat1_backward and mm_mat2_backward).
#include "model/gemm_shapes.h"

#include <algorithm>

#include "model/activations.h"

namespace shardtune::model {

std::vector<GemmShape> BlockForwardGemms(const ModelSpec& spec, int64_t tokens, int layer, int ep) {
  const int64_t h = spec.hidden;
  std::vector<GemmShape> g;
  if (spec.mla.enabled()) {  // DeepseekV3Attention.forward, in call order
    const MlaSpec& m = spec.mla;
    if (m.q_lora_rank > 0) {
      g = {{tokens, m.q_lora_rank, h}, {tokens, spec.q_dim(), m.q_lora_rank}};
    } else {
      g = {{tokens, spec.q_dim(), h}};
    }
    g.push_back({tokens, m.kv_lora_rank + m.qk_rope_head_dim, h});
    g.push_back({tokens, spec.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank});
    g.push_back({tokens, h, spec.v_dim()});
  } else if (spec.fused_qkv) {  // Phi3Attention: one qkv_proj GEMM, then o_proj
    g = {{tokens, spec.q_dim() + 2 * spec.kv_dim(), h}, {tokens, h, spec.q_dim()}};
  } else {
    g = {{tokens, spec.q_dim(), h},
         {tokens, spec.kv_dim(), h},
         {tokens, spec.kv_dim(), h},
         {tokens, h, spec.q_dim()}};
  }
  auto mlp = [&](int64_t rows, int64_t ffn, int64_t count) {
    if (rows <= 0 || ffn <= 0 || count <= 0) return;
    if (spec.fused_gate_up || spec.moe.gpt_oss_experts) {
      // Phi3MLP, GptOssExperts: one gate_up_proj GEMM [rows, 2F, H]
      g.push_back({rows, 2 * ffn, h, count});
    } else {
      g.push_back({rows, ffn, h, (spec.mlp == MlpKind::kSwiGlu ? 2 : 1) * count});
    }
    g.push_back({rows, h, ffn, count});
  };
  if (!spec.MoeLayer(layer)) {
    mlp(tokens, spec.ffn_hidden, 1);
    return g;
  }
  const int64_t expert_ffn = spec.moe.expert_ffn_hidden > 0 ? spec.moe.expert_ffn_hidden : spec.ffn_hidden;
  g.push_back({tokens, spec.moe.num_experts, h});  // router
  // Dropless routing: tokens·top_k rows spread over the experts (balanced on average); with
  // expert parallelism the ep ranks' tokens meet at each rank's E / ep local experts.
  const int64_t local = ep > 1 && spec.moe.num_experts % ep == 0 ? spec.moe.num_experts / ep : spec.moe.num_experts;
  const int64_t group = spec.moe.num_experts / local;
  int64_t rows = std::max<int64_t>(1, group * tokens * spec.moe.top_k / spec.moe.num_experts);
  mlp(rows, expert_ffn, local);
  const int64_t shared_ffn =
      spec.moe.shared_expert_ffn_hidden > 0 ? spec.moe.shared_expert_ffn_hidden : expert_ffn;
  mlp(tokens, shared_ffn, spec.moe.num_shared_experts);
  return g;
}

GemmShape HeadForwardGemm(const ModelSpec& spec, int64_t tokens) {
  return {tokens, spec.value_head ? 1 : spec.vocab_size, spec.hidden};
}

std::vector<GemmShape> FusedLinearHeadForwardGemms(const ModelSpec& spec, int64_t tokens) {
  const int64_t chunk = FusedLinearChunkRows(tokens, spec.vocab_size, spec.hidden);
  std::vector<GemmShape> out;
  if (chunk <= 0) return out;
  out.push_back({chunk, spec.vocab_size, spec.hidden, tokens / chunk});
  if (tokens % chunk != 0) out.push_back({tokens % chunk, spec.vocab_size, spec.hidden, 1});
  return out;
}

std::vector<GemmShape> WithBackward(const std::vector<GemmShape>& forward) {
  std::vector<GemmShape> all = forward;
  for (const GemmShape& f : forward) {
    all.push_back({f.m, f.k, f.n, f.count, GemmRole::kInputGrad});   // dX = dY x W
    all.push_back({f.n, f.k, f.m, f.count, GemmRole::kWeightGrad});  // dW = dY^T x X
  }
  return all;
}

std::vector<GemmShape> VerlFusedHeadGemms(const ModelSpec& spec, int64_t tokens, bool triton) {
  std::vector<GemmShape> out;
  const int64_t v = spec.vocab_size, h = spec.hidden;
  if (tokens <= 0 || v <= 0) return out;
  if (triton) {
    out.push_back({tokens, v, h});
    const int64_t split = std::min(v, kVerlTritonBackwardSplit);
    const int64_t whole = v / split, rest = v % split;
    auto add = [&](int64_t cols, int64_t count) {
      if (count <= 0 || cols <= 0) return;
      out.push_back({tokens, cols, h, count});                          // the logits tile again
      out.push_back({tokens, h, cols, count, GemmRole::kInputGrad});   // d_logits x W[split]
      out.push_back({cols, h, tokens, count, GemmRole::kWeightGrad});  // d_logits^T x X
    };
    add(split, whole);
    add(rest, 1);
    return out;
  }
  const int64_t chunk = std::min(kVerlFusedChunkRows, tokens);
  const int64_t whole = tokens / chunk, rest = tokens % chunk;
  auto add = [&](int64_t rows, int64_t count) {
    if (count <= 0 || rows <= 0) return;
    out.push_back({rows, v, h, 2 * count});                          // forward, and again in backward
    out.push_back({rows, h, v, count, GemmRole::kInputGrad});       // dlogits @ W
    out.push_back({v, h, rows, count, GemmRole::kWeightGrad});      // dlogits.t() @ hidden
  };
  add(chunk, whole);
  add(rest, 1);
  return out;
}

}  // namespace shardtune::model
