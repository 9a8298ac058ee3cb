// The transformer's forward, segment by segment, with HF transformers' module names and math
// (modeling_llama.py: LlamaRMSNorm in fp32, rotate_half rotary, repeat_kv GQA, SwiGLU MLP;
// modeling_gpt2.py: Conv1D layers, gelu_new, learned positions, tied LM head; modeling_phi3.py's
// fused qkv_proj and gate_up_proj; modeling_olmo2.py's post-norms and whole-projection qk norms).
// This file: construction and initialisation, segments, embeddings, norms, the block and LoRA
// projections; attention and rotary in transformer_attention.cc, MLP and MoE in
// transformer_moe.cc, the head and its losses in transformer_head.cc.
#include "executor/nn/transformer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <cmath>

#include "executor/comm/communicator.h"
#include "executor/nn/torchtitan_ops.h"
#include "executor/nn/transformer_pieces.h"
#include "executor/nn/transformer_support.h"
#include "executor/nn/ulysses.h"
#include "model/errors.h"
#include "model/module_tree.h"
#include "model/text.h"

namespace shardtune::exec {
namespace internal {

const at::Tensor& Get(const ParamTable& p, const std::string& name) {
  auto it = p.find(name);
  SHARDTUNE_CHECK(it != p.end() && it->second.defined()) << "parameter " << name << " not gathered";
  return it->second;
}

// The memory-bound pieces of a block as pure functions of tensors (recompute.h PieceFn), so
// selective checkpointing can rerun them; the plain forward calls the same ones.
// RMSNorm's x_hat in fp32: x.to(float32) * rsqrt(mean(x^2) + eps), the part every HF RMSNorm
// shares; they differ in where the weight multiplies and the cast back happens.
at::Tensor NormalizedFp32(const at::Tensor& x, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
#if TORCH_VERSION_MAJOR < 2
  // LibTorch 1.x's MeanBackward1 keeps its whole input (its codegen had no sym_numel replacement
  // for mean_backward's self.numel(), so autograd saves self; torch 2.x saves the sizes and
  // numel only: tools/autograd/load_derivatives.py), which would keep the fp32 square of every
  // norm's input to backward where transformers on torch 2.x does not. sum(-1) / dim is what 1.x's
  // CPU mean computes (sum_out then div_), and SumBackward1 saves only the sizes.
  at::Tensor var = x32.pow(2).sum({-1}, /*keepdim=*/true).div(static_cast<double>(x.size(-1)));
#else
  at::Tensor var = x32.pow(2).mean({-1}, /*keepdim=*/true);
#endif
  return x32 * at::rsqrt(var + eps);
}

// LlamaRMSNorm: in fp32, then back to the input dtype before the weight. inputs: x, weight.
at::Tensor RmsNormPiece(const std::vector<at::Tensor>& in, double eps) {
  return in[1] * NormalizedFp32(in[0], eps).to(in[0].scalar_type());
}

// inputs: x, weight[, bias].
at::Tensor LayerNormPiece(const std::vector<at::Tensor>& in, double eps) {
  return at::layer_norm(in[0], {in[0].size(-1)}, in[1], in.size() > 2 ? in[2] : at::Tensor(), eps);
}

// HF LlamaMLP: silu(gate) x up. inputs: gate, up.
at::Tensor SwiGluPiece(const std::vector<at::Tensor>& in, double /*unused*/) {
  return at::silu(in[0]) * in[1];
}

// GPT-2 gelu_new (tanh != 0), NeoX exact GELU. inputs: the up projection's output.
at::Tensor GeluPiece(const std::vector<at::Tensor>& in, double tanh) {
  return at::gelu(in[0], tanh != 0 ? "tanh" : "none");
}

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

std::vector<EqualRun> EqualRuns(const std::vector<int64_t>& lengths) {
  std::vector<EqualRun> out;
  int64_t start = 0;
  for (size_t i = 0; i < lengths.size();) {
    size_t j = i;
    while (j < lengths.size() && lengths[j] == lengths[i]) ++j;
    const int64_t n = static_cast<int64_t>(j - i);
    out.push_back({start, n, lengths[i]});
    start += n * lengths[i];
    i = j;
  }
  return out;
}

}  // namespace internal
using internal::Get;
using internal::GeluPiece;
using internal::LayerNormPiece;
using internal::NormalizedFp32;
using internal::RmsNormPiece;
using internal::RotateHalf;
using internal::SwiGluPiece;

namespace {

uint64_t NameHash(const std::string& s) {  // FNV-1a 64
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
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

// OLMo 2's Olmo2RMSNorm: the weight multiplies the fp32 normalised input, then the product is
// cast back ((weight * x).to(input_dtype), modeling_olmo2.py). inputs: x, weight.
at::Tensor RmsNormFp32WeightPiece(const std::vector<at::Tensor>& in, double eps) {
  return (in[1] * NormalizedFp32(in[0], eps)).to(in[0].scalar_type());
}

// Gemma's RMSNorm: (x_hat * (1.0 + weight.float())).type_as(x) (modeling_gemma2.py,
// modeling_gemma3.py). inputs: x, weight.
at::Tensor RmsNormUnitOffsetPiece(const std::vector<at::Tensor>& in, double eps) {
  return (NormalizedFp32(in[0], eps) * (in[1].to(at::kFloat) + 1.0)).to(in[0].scalar_type());
}

// torchtitan's RMSNorm (F.rms_norm, torchtitan_ops.h). inputs: x, weight.
at::Tensor FusedRmsNormPiece(const std::vector<at::Tensor>& in, double eps) {
  return FusedRmsNorm(in[0], in[1], eps);
}

}  // namespace

Transformer::Transformer(const model::ModelSpec& spec, TransformerOptions options, Communicator* cp,
                         Communicator* ep)
    : spec_(spec),
      options_(options),
      cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr),
      ep_(ep != nullptr && ep->size() > 1 ? ep : nullptr) {
  nv_ = spec_.VisionBlocks();
  SHARDTUNE_CHECK(ep_ == nullptr || options_.torchtitan) << "expert parallelism runs torchtitan's MoE";
  if (options_.torchtitan && spec_.moe.enabled()) {
    // MoE.__init__: expert_bias_E and tokens_per_expert_E, zeros (fp32), per MoE layer (GPT-OSS's
    // GptOssMoE too: models/gpt_oss/__init__.py builds it with load_balance_coeff 1e-3).
    int rows = 0;
    for (int l = 0; l < spec_.num_layers; ++l) moe_row_.push_back(spec_.MoeLayer(l) ? rows++ : -1);
    at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(options_.device);
    expert_bias_ = at::zeros({rows, spec_.moe.num_experts}, f32);
    tokens_per_expert_ = at::zeros({rows, spec_.moe.num_experts}, f32);
  }
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

void Transformer::InitParameter(const std::string& name, uint64_t seed, const at::Tensor& full,
                                bool norm_unit_offset) {
  at::NoGradGuard no_grad;
  bool norm = name.find("norm") != std::string::npos || name.find(".ln_") != std::string::npos;
  // GPT-OSS's expert biases (gate_up_proj_bias, down_proj_bias) start at zero too (HF
  // GptOssPreTrainedModel._init_weights).
  if (model::EndsWith(name, ".bias") || model::EndsWith(name, "_bias") ||
      name.find(".lora_B.") != std::string::npos) {
    full.zero_();
  } else if (name.find(".lora_A.") != std::string::npos) {
    // kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain x sqrt(3 / fan_in)
    // = 1 / sqrt(fan_in), fan_in = in = size(1) of [r, in].
    double bound = 1.0 / std::sqrt(static_cast<double>(full.size(1)));
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ NameHash(name));
    full.uniform_(-bound, bound, gen);
  } else if (norm) {
    full.fill_(norm_unit_offset ? 0.0 : 1.0);  // Gemma: scale 1 + w, w initialised to zeros
  } else {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ NameHash(name));
    full.normal_(0.0, 0.02, gen);
  }
}

void Transformer::UpdateExpertBias(Communicator& world) {
  if (!expert_bias_.defined()) return;
  at::NoGradGuard no_grad;
  at::Tensor counts = tokens_per_expert_.contiguous();  // [rows, E]
  if (world.size() > 1) world.AllReduce(counts)->Wait();
  at::Tensor delta = kTorchtitanLoadBalanceCoeff * at::sign(counts.mean({1}, /*keepdim=*/true) - counts);
  delta = delta - delta.mean({1}, /*keepdim=*/true);
  expert_bias_.add_(delta);
  tokens_per_expert_.zero_();
}

void Transformer::InitLocalExperts(const std::string& name, uint64_t seed, const at::Tensor& full,
                                   int64_t first_expert, int64_t num_experts, bool gated) {
  at::NoGradGuard no_grad;
  const size_t dot = name.rfind('.');
  SHARDTUNE_CHECK(dot != std::string::npos) << name;
  const std::string experts = name.substr(0, dot), tensor = name.substr(dot + 1);
  const int64_t el = full.size(0);
  SHARDTUNE_CHECK(first_expert >= 0 && first_expert + el <= num_experts) << name;
  const std::string hf = model::GroupedExpertHfModule(tensor, gated);
  if (hf.empty()) {
    // GPT-OSS's own [E, ...] tensors: this rank's slice of the whole tensor's initial value.
    at::Tensor all = at::empty({num_experts, full.size(1)}, full.options());
    InitParameter(name, seed, all);
    full.copy_(all.narrow(0, first_expert, el));
    return;
  }
  for (int64_t i = 0; i < el; ++i) {
    InitParameter(experts + "." + std::to_string(first_expert + i) + "." + hf + ".weight", seed,
                  full.select(0, i));
  }
}

int64_t Transformer::PositionOffset(int64_t local_seq_len) const {
  return cp_ != nullptr ? cp_->rank() * local_seq_len : 0;
}

int Transformer::num_segments() const { return model::NumSegments(spec_.NumBlocks()); }

bool Transformer::IsBlockSegment(int segment) const {
  return segment >= 1 && segment <= spec_.NumBlocks();
}

bool Transformer::IsVisionSegment(int segment) const { return segment >= 1 && segment <= nv_; }

at::Tensor Transformer::Segment(const ParamTable& p, int segment, const at::Tensor& input,
                                const at::Tensor& labels) const {
  int L = spec_.NumBlocks();
  if (segment == 0) return Embed(p, input);
  if (IsVisionSegment(segment)) return VisionBlock(p, segment - 1, input);
  if (IsBlockSegment(segment)) return Block(p, segment - 1 - nv_, input);
  if (segment == model::FinalNormSegment(L)) return Norm(p, "model.norm", input, spec_.hidden);
  SHARDTUNE_CHECK(segment == model::HeadSegment(L)) << "segment " << segment;
  return HeadLoss(p, input, labels);
}

at::Tensor Transformer::Embed(const ParamTable& p, const at::Tensor& tokens) const {
  router_logits_.clear();  // a new micro-batch's forward
  at::Tensor x = at::embedding(Get(p, "model.embed_tokens.weight"), tokens);  // [B, S, H]
  if (spec_.scaled_embedding) {
    // Gemma: x * sqrt(H), the normalizer a tensor of the compute dtype (rounded to it).
    x = x * at::scalar_tensor(std::sqrt(static_cast<double>(spec_.hidden)), x.options());
  }
  if (gpt2_names_ && !packing_.empty()) {
    // Learned positions of a packed row: wpe(position_ids), the ids restarting per sequence.
    const at::Tensor& w = Get(p, "model.embed_positions.weight");
    x = x + w.index_select(0, packed_positions_.to(w.device())).unsqueeze(0);
  } else if (gpt2_names_) {
    int64_t s = tokens.size(1);
    at::Tensor pos = Get(p, "model.embed_positions.weight").narrow(0, PositionOffset(s), s);
    x = x + pos.unsqueeze(0);
  }
  return x;
}

Transformer::Piece Transformer::NormPiece(const ParamTable& p, const std::string& name,
                                          const at::Tensor& x) const {
  // torchtitan's models normalise with its RMSNorm (F.rms_norm) whatever the HF class does: its
  // GPT-OSS too (models/gpt_oss/__init__.py RMSNorm.Config), not GptOssRMSNorm's fp32 weight
  // product. Gemma's 1 + w and OLMo 2 have no torchtitan model (run refuses them there).
  Piece piece{options_.torchtitan       ? &FusedRmsNormPiece
               : spec_.norm_unit_offset ? &RmsNormUnitOffsetPiece
               : spec_.norm_weight_fp32 ? &RmsNormFp32WeightPiece
                                        : &RmsNormPiece,
              options_.norm_eps,
              {x, Get(p, name + ".weight")}};
  if (spec_.norm == model::NormKind::kLayerNorm) {
    piece.fn = &LayerNormPiece;
    if (spec_.norm_bias) piece.inputs.push_back(Get(p, name + ".bias"));
  }
  return piece;
}

at::Tensor Transformer::Run(const Piece& piece) const {
  if (Selective()) return RecomputePiece(piece.fn, piece.arg, piece.inputs);
  return piece.fn(piece.inputs, piece.arg);
}

void Transformer::Drop(const at::Tensor& y, const Piece& piece,
                       const std::vector<at::Tensor>& consumers) const {
  if (Selective()) DropUntilBackward(y, piece.fn, piece.arg, piece.inputs, consumers);
}

// Under torchtitan's op SAC the block is checkpointed whole (SacRecompute): no piece of it is.
bool Transformer::Selective() const {
  if (!options_.selective || !at::GradMode::is_enabled() || sac_.Active()) return false;
  const auto& layers = options_.selective_layers;
  return layers.empty() || (current_layer_ >= 0 && static_cast<size_t>(current_layer_) < layers.size() &&
                            layers[static_cast<size_t>(current_layer_)]);
}

at::Tensor Transformer::Norm(const ParamTable& p, const std::string& name, const at::Tensor& x,
                             int64_t dim) const {
  SHARDTUNE_CHECK(x.size(-1) == dim) << name << ": normalized size " << dim;
  Piece piece = NormPiece(p, name, x);
  return piece.fn(piece.inputs, piece.arg);
}

// A norm followed by the projections that read its output (`project`): with selective
// checkpointing the norm keeps only its input, and its output is dropped once projected.
std::vector<at::Tensor> Transformer::NormThen(
    const ParamTable& p, const std::string& name, const at::Tensor& x,
    const std::function<std::vector<at::Tensor>(const at::Tensor&)>& project) const {
  Piece piece = NormPiece(p, name, x);
  at::Tensor n = Run(piece);
  std::vector<at::Tensor> out = project(n);
  Drop(n, piece, out);
  return out;
}

at::Tensor Transformer::Block(const ParamTable& p, int layer, const at::Tensor& x) const {
  // Selective() asks which layer runs (TransformerOptions::selective_layers).
  struct LayerScope {
    int* slot;
    int saved;
    ~LayerScope() { *slot = saved; }
  } scope{&current_layer_, current_layer_};
  current_layer_ = layer;
  std::string pre = "model.layers." + std::to_string(layer);
  std::string n1 = pre + (gpt2_names_ ? ".ln_1" : ".input_layernorm");
  std::string n2 = pre + (gpt2_names_ ? ".ln_2" : ".post_attention_layernorm");
  std::string attn = pre + (gpt2_names_ ? ".attn" : ".self_attn");
  auto qkv = [&](const at::Tensor& n) { return Qkv(p, attn, n); };
  // The MLP (or MoE) on a normalised input `n` packed as NormThen's projections: a dense MLP's
  // up projections, or the MoE block's output alone.
  // DeepSeek's first_k_dense_replace blocks have a dense MLP (ModelSpec::MoeLayer).
  const bool moe = spec_.MoeLayer(layer);
  auto up = [&](const at::Tensor& n) {
    if (moe) return std::vector<at::Tensor>{Moe(p, pre + ".block_sparse_moe", n, layer)};
    return MlpUp(p, pre + ".mlp", n);
  };
  auto down = [&](const std::vector<at::Tensor>& u) {
    return moe ? u[0] : MlpDown(p, pre + ".mlp", u);
  };
  if (spec_.norm_placement == model::NormPlacement::kPost) {
    // Olmo2DecoderLayer: h = x + post_attention_layernorm(attn(x));
    // out = h + post_feedforward_layernorm(mlp(h)).
    at::Tensor h = x + Norm(p, pre + ".post_attention_layernorm",
                            Attention(p, attn, qkv(x), layer), spec_.hidden);
    return h + Norm(p, pre + ".post_feedforward_layernorm", down(up(h)), spec_.hidden);
  }
  if (spec_.norm_placement == model::NormPlacement::kSandwich) {
    // Gemma2DecoderLayer / Gemma3DecoderLayer:
    // h = x + post_attention_layernorm(attn(input_layernorm(x)));
    // out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))).
    at::Tensor a = Attention(p, attn, NormThen(p, pre + ".input_layernorm", x, qkv), layer);
    at::Tensor h = x + Norm(p, pre + ".post_attention_layernorm", a, spec_.hidden);
    at::Tensor m = down(NormThen(p, pre + ".pre_feedforward_layernorm", h, up));
    return h + Norm(p, pre + ".post_feedforward_layernorm", m, spec_.hidden);
  }
  if (spec_.parallel_residual) {  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
    return x + Attention(p, attn, NormThen(p, n1, x, qkv), layer) + down(NormThen(p, n2, x, up));
  }
  at::Tensor h = x + Attention(p, attn, NormThen(p, n1, x, qkv), layer);
  return h + down(NormThen(p, n2, h, up));
}

at::Tensor Transformer::Proj(const ParamTable& p, const std::string& module, const at::Tensor& x,
                             bool bias, bool conv1d) const {
  // Op SAC: the tape's resolved policy says whether this projection's output is saved in forward
  // and handed back to the rerun (model::ResolveSacSave: torchtitan's rule keeps no biased one).
  const at::Tensor& w = Get(p, module + ".weight");
  const at::Tensor b = Maybe(p, module + ".bias", bias);
  at::Tensor y = sac_.Projection(!conv1d, [&](const at::Tensor& kept) {
    return kept.defined() ? ReplayLinear(kept, x, w, b) : Dense(x, w, b, conv1d);
  });
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

}  // namespace shardtune::exec
