// The transformer's forward, segment by segment, with HF transformers' module names and math
// (modeling_llama.py: LlamaRMSNorm in fp32, rotate_half rotary, repeat_kv GQA, SwiGLU MLP;
// modeling_gpt2.py: Conv1D layers, gelu_new, learned positions, tied LM head).
#include "executor/transformer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <cmath>

#include "executor/communicator.h"
#include "executor/transformer_support.h"
#include "executor/ulysses.h"
#include "model/errors.h"
#include "model/module_tree.h"

namespace shardtune::exec {
namespace {

uint64_t NameHash(const std::string& s) {  // FNV-1a 64
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

const at::Tensor& Get(const ParamTable& p, const std::string& name) {
  auto it = p.find(name);
  SHARDTUNE_CHECK(it != p.end() && it->second.defined()) << "parameter " << name << " not gathered";
  return it->second;
}

at::Tensor Maybe(const ParamTable& p, const std::string& name, bool present) {
  return present ? Get(p, name) : at::Tensor();
}

// nn.Linear (weight [out, in]) or GPT-2's Conv1D (weight [in, out]).
at::Tensor Dense(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool conv1d) {
  if (!conv1d) return at::linear(x, w, b);
  at::Tensor y = at::matmul(x, w);
  return b.defined() ? y + b : y;
}

}  // namespace

Transformer::Transformer(const model::ModelSpec& spec, TransformerOptions options, Communicator* cp)
    : spec_(spec), options_(options), cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr) {
  spec_.FillDefaults();
  SHARDTUNE_CHECK(TransformerSupportProblem(spec_).empty()) << TransformerSupportProblem(spec_);
  if (cp_ != nullptr) {
    std::string why = UlyssesProblem(spec_, cp_->size());
    SHARDTUNE_CHECK(why.empty()) << why;
  }
  gpt2_names_ = spec_.positions == model::PositionKind::kLearned;
#if TORCH_VERSION_MAJOR < 2
  options_.sdpa = false;  // LibTorch 1.13 has only the private _scaled_dot_product_attention
#endif
}

std::vector<int64_t> Transformer::Shape(int64_t dim0, int64_t inner) {
  if (inner == 1) return {dim0};
  return {dim0, inner};
}

void Transformer::InitParameter(const std::string& name, uint64_t seed, const at::Tensor& full) {
  at::NoGradGuard no_grad;
  bool norm = name.find("norm") != std::string::npos || name.find(".ln_") != std::string::npos;
  if (EndsWith(name, ".bias") || name.find(".lora_B.") != std::string::npos) {
    full.zero_();
  } else if (name.find(".lora_A.") != std::string::npos) {
    // kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain x sqrt(3 / fan_in)
    // = 1 / sqrt(fan_in), fan_in = in = size(1) of [r, in].
    double bound = 1.0 / std::sqrt(static_cast<double>(full.size(1)));
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ NameHash(name));
    full.uniform_(-bound, bound, gen);
  } else if (norm) {
    full.fill_(1.0);
  } else {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ NameHash(name));
    full.normal_(0.0, 0.02, gen);
  }
}

int64_t Transformer::PositionOffset(int64_t local_seq_len) const {
  return cp_ != nullptr ? cp_->rank() * local_seq_len : 0;
}

int Transformer::num_segments() const { return model::NumSegments(spec_.num_layers); }

bool Transformer::IsBlockSegment(int segment) const {
  return segment >= 1 && segment <= spec_.num_layers;
}

at::Tensor Transformer::Segment(const ParamTable& p, int segment, const at::Tensor& input,
                                const at::Tensor& labels) const {
  int L = spec_.num_layers;
  if (segment == 0) return Embed(p, input);
  if (IsBlockSegment(segment)) return Block(p, segment - 1, input);
  if (segment == model::FinalNormSegment(L)) return Norm(p, "model.norm", input, spec_.hidden);
  SHARDTUNE_CHECK(segment == model::HeadSegment(L)) << "segment " << segment;
  return HeadLoss(p, input, labels);
}

at::Tensor Transformer::Embed(const ParamTable& p, const at::Tensor& tokens) const {
  at::Tensor x = at::embedding(Get(p, "model.embed_tokens.weight"), tokens);  // [B, S, H]
  if (gpt2_names_) {
    int64_t s = tokens.size(1);
    at::Tensor pos = Get(p, "model.embed_positions.weight").narrow(0, PositionOffset(s), s);
    x = x + pos.unsqueeze(0);
  }
  return x;
}

at::Tensor Transformer::Norm(const ParamTable& p, const std::string& name, const at::Tensor& x,
                             int64_t dim) const {
  const at::Tensor& w = Get(p, name + ".weight");
  if (spec_.norm == model::NormKind::kLayerNorm) {
    at::Tensor b = Maybe(p, name + ".bias", spec_.norm_bias);
    return at::layer_norm(x, {dim}, w, b, options_.norm_eps);
  }
  // LlamaRMSNorm: in fp32, then back to the input dtype before the weight.
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor var = x32.pow(2).mean({-1}, /*keepdim=*/true);
  return w * (x32 * at::rsqrt(var + options_.norm_eps)).to(x.scalar_type());
}

at::Tensor Transformer::Block(const ParamTable& p, int layer, const at::Tensor& x) const {
  std::string pre = "model.layers." + std::to_string(layer);
  std::string n1 = pre + (gpt2_names_ ? ".ln_1" : ".input_layernorm");
  std::string n2 = pre + (gpt2_names_ ? ".ln_2" : ".post_attention_layernorm");
  std::string attn = pre + (gpt2_names_ ? ".attn" : ".self_attn");
  if (spec_.parallel_residual) {  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
    return x + Attention(p, attn, Norm(p, n1, x, spec_.hidden)) +
           Mlp(p, pre + ".mlp", Norm(p, n2, x, spec_.hidden));
  }
  at::Tensor h = x + Attention(p, attn, Norm(p, n1, x, spec_.hidden));
  return h + Mlp(p, pre + ".mlp", Norm(p, n2, h, spec_.hidden));
}

at::Tensor Transformer::Attention(const ParamTable& p, const std::string& pre,
                                  const at::Tensor& x) const {
  int64_t B = x.size(0), S = x.size(1), D = spec_.head_dim;
  int64_t a = spec_.num_heads, kv = spec_.num_kv_heads;
  at::Tensor q, k, v;
  if (gpt2_names_) {
    at::Tensor qkv = Proj(p, pre + ".c_attn", x, spec_.qkv_bias, true);
    q = qkv.narrow(-1, 0, a * D);
    k = qkv.narrow(-1, a * D, kv * D);
    v = qkv.narrow(-1, (a + kv) * D, kv * D);
  } else {
    q = Proj(p, pre + ".q_proj", x, spec_.qkv_bias, false);
    k = Proj(p, pre + ".k_proj", x, spec_.qkv_bias, false);
    v = Proj(p, pre + ".v_proj", x, spec_.qkv_bias, false);
  }
  q = q.view({B, S, a, D});
  k = k.view({B, S, kv, D});
  if (spec_.qk_norm) {  // Qwen3: RMSNorm over head_dim before the rotary
    q = Norm(p, pre + ".q_norm", q, D);
    k = Norm(p, pre + ".k_norm", k, D);
  }
  q = q.transpose(1, 2);                         // [B, a, S, D]
  k = k.transpose(1, 2);                         // [B, kv, S, D]
  v = v.reshape({B, S, kv, D}).transpose(1, 2);  // [B, kv, S, D]
  if (spec_.positions == model::PositionKind::kRotary) {
    q = Rotary(q, PositionOffset(S));
    k = Rotary(k, PositionOffset(S));
  }
  at::Tensor o;
  if (cp_ == nullptr) {
    o = Core(q, k, v).transpose(1, 2).reshape({B, S, a * D});  // [B, S, a*D]
  } else {
    // Ulysses: S here is this rank's slice. Fewer kv heads than cp ranks: repeat each kv head
    // cp / kv times so every rank receives one whole kv head (verl's monkey_patch.py,
    // repeat_kv(k, ulysses_sp_size // num_kv_heads)); else each rank receives kv / cp of them.
    int64_t n = cp_->size();
    if (kv < n) {
      k = k.unsqueeze(2).expand({B, kv, n / kv, S, D}).reshape({B, n, S, D});
      v = v.unsqueeze(2).expand({B, kv, n / kv, S, D}).reshape({B, n, S, D});
    }
    auto to_heads = [&](const at::Tensor& t) {  // [B, h, S/cp, D] -> [B, h/cp, S, D]
      return GatherSeqScatterHeads(t.transpose(1, 2), *cp_).transpose(1, 2);
    };
    at::Tensor local = Core(to_heads(q), to_heads(k), to_heads(v));  // [B, a/cp, S_full, D]
    o = GatherHeadsScatterSeq(local.transpose(1, 2), *cp_).reshape({B, S, a * D});
  }
  return Proj(p, pre + (gpt2_names_ ? ".c_proj" : ".o_proj"), o, spec_.attn_out_bias,
              gpt2_names_);
}

at::Tensor Transformer::Core(at::Tensor q, at::Tensor k, at::Tensor v) const {
  int64_t B = q.size(0), a = q.size(1), S = q.size(2), D = q.size(3), kv = k.size(1);
  if (kv != a) {  // repeat_kv: [B, kv, S, D] -> [B, a, S, D]
    k = k.unsqueeze(2).expand({B, kv, a / kv, S, D}).reshape({B, a, S, D});
    v = v.unsqueeze(2).expand({B, kv, a / kv, S, D}).reshape({B, a, S, D});
  }
#if TORCH_VERSION_MAJOR >= 2
  if (options_.sdpa) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#endif
  at::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
  at::Tensor mask = at::ones({S, S}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());  // [B, a, S, S]
  return at::matmul(probs, v);                                                 // [B, a, S, D]
}

at::Tensor Transformer::Rotary(const at::Tensor& x, int64_t offset) const {
  int64_t S = x.size(2), D = x.size(3);
  auto f32 = x.options().dtype(at::kFloat);
  at::Tensor inv =
      at::pow(options_.rope_theta, at::arange(0, D, 2, f32) / static_cast<double>(D)).reciprocal();
  at::Tensor freqs = at::outer(at::arange(offset, offset + S, f32), inv);  // [S, D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);           // [S, D]
  at::Tensor cos = emb.cos().to(x.scalar_type()), sin = emb.sin().to(x.scalar_type());
  at::Tensor x1 = x.narrow(-1, 0, D / 2), x2 = x.narrow(-1, D / 2, D / 2);
  at::Tensor rotated = at::cat({-x2, x1}, -1);  // rotate_half
  return x * cos + rotated * sin;
}

at::Tensor Transformer::Mlp(const ParamTable& p, const std::string& pre,
                            const at::Tensor& x) const {
  bool b = spec_.mlp_bias;
  if (spec_.mlp == model::MlpKind::kSwiGlu) {
    at::Tensor g = Proj(p, pre + ".gate_proj", x, b, false);
    at::Tensor u = Proj(p, pre + ".up_proj", x, b, false);
    return Proj(p, pre + ".down_proj", at::silu(g) * u, b, false);
  }
  std::string up = pre + (gpt2_names_ ? ".c_fc" : ".up_proj");
  std::string down = pre + (gpt2_names_ ? ".c_proj" : ".down_proj");
  at::Tensor h = Proj(p, up, x, b, gpt2_names_);
  h = at::gelu(h, gpt2_names_ ? "tanh" : "none");  // GPT-2 gelu_new; NeoX exact GELU
  return Proj(p, down, h, b, gpt2_names_);
}

at::Tensor Transformer::Proj(const ParamTable& p, const std::string& module, const at::Tensor& x,
                             bool bias, bool conv1d) const {
  at::Tensor y = Dense(x, Get(p, module + ".weight"), Maybe(p, module + ".bias", bias), conv1d);
  auto a = p.find(module + ".lora_A.default.weight");  // model/trainable.h's (PEFT's) names
  if (a == p.end()) return y;
  // PEFT lora.Linear.forward: x cast to the adapter dtype, result += lora_B(lora_A(x)) * scaling
  // (added in the base output's dtype). lora_A [r, in], lora_B [out, r], whatever the base
  // layout (GPT-2's Conv1D included).
  const at::Tensor& wa = a->second;
  const at::Tensor& wb = Get(p, module + ".lora_B.default.weight");
  at::Tensor d = at::linear(at::linear(x.to(wa.scalar_type()), wa), wb);  // [..., out]
  return y + (d * options_.lora_scale).to(y.scalar_type());
}

at::Tensor Transformer::HeadLoss(const ParamTable& p, const at::Tensor& x,
                                 const at::Tensor& labels) const {
  at::Tensor logits = spec_.tied_embeddings  // [B, S, V]; LoRA may target lm_head
                          ? at::linear(x, Get(p, "model.embed_tokens.weight"))
                          : Proj(p, "lm_head", x, /*bias=*/false, /*conv1d=*/false);
  if (logits.scalar_type() != at::kFloat) logits = logits.to(at::kFloat);  // [B, S, V] fp32
  if (cp_ == nullptr) {
    return at::cross_entropy_loss(logits.view({-1, spec_.vocab_size}), labels.reshape({-1}));
  }
  // This rank's share of the micro-batch's mean: every token of the cp group counts once, and
  // every cp rank holds S / cp of them (no ignored labels: the count is B x S_local x cp).
  at::Tensor sum = at::cross_entropy_loss(logits.view({-1, spec_.vocab_size}), labels.reshape({-1}),
                                          {}, at::Reduction::Sum);
  return sum / static_cast<double>(labels.numel() * cp_->size());
}

}  // namespace shardtune::exec
