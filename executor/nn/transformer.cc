// The transformer's forward, segment by segment, with HF transformers' module names and math
// (modeling_llama.py: LlamaRMSNorm in fp32, rotate_half rotary, repeat_kv GQA, SwiGLU MLP;
// modeling_gpt2.py: Conv1D layers, gelu_new, learned positions, tied LM head; modeling_phi3.py's
// fused qkv_proj and gate_up_proj; modeling_olmo2.py's post-norms and whole-projection qk norms).
#include "executor/nn/transformer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "executor/comm/communicator.h"
#include "executor/nn/fused_loss.h"
#include "executor/nn/transformer_support.h"
#include "executor/nn/torchtitan_ops.h"
#include "executor/nn/transformer_pieces.h"
#include "executor/nn/ulysses.h"
#include "model/errors.h"
#include "model/module_tree.h"
#include "model/text.h"

namespace shardtune::exec {
namespace {

// GPT-OSS's clamped SwiGLU constants, the same in both codes: transformers' GptOssExperts.alpha
// and .limit (hard-coded), torchtitan's swiglu(alpha=1.702) with GptOssGroupedExperts.Config
// .swiglu_limit (7.0 in every published config).
constexpr double kGptOssSwigluAlpha = 1.702;
constexpr double kGptOssSwigluLimit = 7.0;
// _compute_yarn_parameters: the frequencies' factor is max_position_embeddings /
// original_max_position_embeddings when the config names the latter, else its "factor".
double YarnFactor(const model::RopeScaling& r, int64_t max_position_embeddings) {
  return r.original_given ? static_cast<double>(max_position_embeddings) /
                                static_cast<double>(r.original_max_position_embeddings)
                          : r.factor;
}
// get_mscale(scale, mscale): 0.1 x mscale x ln(scale) + 1, 1 for scale <= 1.
double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// transformers 5's default experts path (integrations/moe.py grouped_mm_experts_forward, picked
// whenever torch has _grouped_mm, 2.9+; 4.x's one-hot loop with index_add_ is the "eager"
// fallback): the T·k (token, expert) rows gathered (x[token_idx]), sorted by expert (argsort),
// `run` on the sorted rows with each expert's row count (GroupedLinear) and the rows' expert ids,
// each row scaled by its routing weight (weights [T, k]; fp32 weights promote), unsorted
// ([inv_perm]) and summed over each token's k rows (view(T, k, H).sum(1)), cast to x's dtype.
// Locals live to the return as the Python ones do. Every expert's weights get a gradient (zeros
// for one no row chose), so each FSDP unit's gradient hooks fire on all of them.
using ExpertsFn = std::function<at::Tensor(const at::Tensor&, const std::vector<int64_t>&, const at::Tensor&)>;
at::Tensor GroupedDispatch(const at::Tensor& flat, const at::Tensor& chosen, const at::Tensor& weights,
                           int64_t experts, const ExpertsFn& run) {
  const int64_t T = flat.size(0), k = chosen.size(1), H = flat.size(1);
  at::Tensor token_idx = at::arange(T, chosen.options().dtype(at::kLong)).unsqueeze(1).expand({T, k}).reshape({-1});
  at::Tensor sample_weights = weights.reshape({-1}), expert_ids = chosen.reshape({-1});
  at::Tensor selected = flat.index_select(0, token_idx);  // [T·k, H]
  at::Tensor perm, inv_perm, ids_g;
  std::vector<int64_t> counts;
  {
    at::NoGradGuard no_grad;
    perm = std::get<1>(at::sort(expert_ids, /*stable=*/true, /*dim=*/0, /*descending=*/false));
    inv_perm = std::get<1>(at::sort(perm, /*stable=*/true, /*dim=*/0, /*descending=*/false));
    ids_g = expert_ids.index_select(0, perm);
    counts = ToHost(at::bincount(expert_ids, {}, experts));
  }
  at::Tensor w_g = sample_weights.index_select(0, perm);
  at::Tensor rows = selected.index_select(0, perm);
  at::Tensor weighted = run(rows, counts, ids_g) * w_g.unsqueeze(-1);
  at::Tensor unsorted = weighted.index_select(0, inv_perm);
  return unsorted.view({T, k, H}).sum(1).to(flat.scalar_type());
}
}  // namespace
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

// Gemma's MLP: gelu_pytorch_tanh(gate) x up (a GeGLU). inputs: gate, up.
at::Tensor GeGluPiece(const std::vector<at::Tensor>& in, double /*unused*/) {
  return at::gelu(in[0], "tanh") * in[1];
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
  return options_.selective && at::GradMode::is_enabled() && !sac_.Active();
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

// HF's dropless MoE blocks (modeling_mixtral.py MixtralSparseMoeBlock, modeling_qwen2_moe.py,
// modeling_qwen3_moe.py): router logits, softmax in fp32, top-k, the weights renormalised when
// norm_topk_prob (Mixtral always) and cast to the compute dtype; each expert runs on the tokens
// routed to it (index_select), its output scaled by their routing weights and index_add_-ed
// back; the shared expert (Qwen2-MoE) runs on every token, scaled by sigmoid(its gate).
at::Tensor Transformer::Moe(const ParamTable& p, const std::string& pre, const at::Tensor& x,
                            int layer) const {
  const model::MoeSpec& m = spec_.moe;
  if (options_.torchtitan) return TorchtitanMoe(p, pre, x, layer);
  if (m.gpt_oss_experts) return GptOssMoe(p, pre, x);
  at::Tensor flat = x.reshape({-1, spec_.hidden});                         // [T, H]
  at::Tensor weights, chosen;                                              // [T, k]
  if (m.deepseek_router) {
    std::tie(chosen, weights) = DeepseekRoute(p, pre, flat);  // fp32 weights
  } else {
    // transformers 5's TopKRouter: softmax(logits.float()), top-k, renormalised when
    // norm_topk_prob (Mixtral always); the weights stay fp32 (Qwen's .to(router_logits.dtype)
    // casts to the softmax's dtype).
    at::Tensor logits = Proj(p, pre + ".gate", flat, /*bias=*/false, /*conv1d=*/false);  // [T, E]
    if (m.router_aux_loss) router_logits_.push_back(logits);
    at::Tensor probs = at::softmax(logits, -1, at::kFloat);
    auto top = at::topk(probs, m.top_k, -1);
    weights = std::get<0>(top);
    chosen = std::get<1>(top);
    if (m.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  }
  at::Tensor out = GroupedDispatch(flat, chosen, weights, m.num_experts,
                                   [&](const at::Tensor& rows, const std::vector<int64_t>& counts,
                                       const at::Tensor&) { return RoutedExperts(p, pre, rows, counts, 0); });
  if (m.num_shared_experts > 0) out = out + SharedExperts(p, pre, flat);
  return out.view_as(x);
}

// The routed experts on the sorted rows (transformers 5's grouped_mm_experts_forward, torchtitan's
// GroupedExperts): gate and up by GroupedLinear (transformers 5 holds them as one gate_up_proj
// [E, 2F, H] and chunks the product, torchtitan as w1 and w3: the same bytes saved as two [F]
// outputs), the activation piece, down by GroupedLinear. PEFT's LoRA on an expert wraps a
// per-expert Linear (the 4.x layout): those run one expert at a time through Proj, as does a
// biased expert MLP.
at::Tensor Transformer::RoutedExperts(const ParamTable& p, const std::string& pre, const at::Tensor& rows,
                                      const std::vector<int64_t>& counts, int64_t first) const {
  const bool gated = spec_.mlp == model::MlpKind::kSwiGlu;
  std::vector<std::vector<at::Tensor>> up_weights;  // per input projection, its expert weights
  std::vector<at::Tensor> down_weights;
  bool fused = false;  // one gate_up projection, chunked into gate and up
  if (p.count(pre + ".experts.w1") > 0) {
    // torchtitan's GroupedExperts tensors (ep > 1): w1, w3 [el, F, H], w2 [el, H, F]; each
    // expert's rows times w^T.
    const int64_t el = static_cast<int64_t>(counts.size()), H = spec_.hidden;
    const int64_t F = spec_.moe.expert_ffn_hidden > 0 ? spec_.moe.expert_ffn_hidden : spec_.ffn_hidden;
    auto stacked = [&](const char* n, int64_t out, int64_t in) {
      return Get(p, pre + ".experts." + n).view({el, out, in}).transpose(1, 2);
    };
    up_weights.push_back({stacked("w1", F, H)});
    if (gated) up_weights.push_back({stacked("w3", F, H)});
    down_weights = {stacked("w2", H, F)};
  } else {
    const std::vector<std::string> up_names =
        spec_.fused_gate_up ? std::vector<std::string>{"gate_up_proj"}
                            : gated ? std::vector<std::string>{"gate_proj", "up_proj"}
                                    : std::vector<std::string>{"up_proj"};
    auto expert = [&](size_t e) { return pre + ".experts." + std::to_string(first + static_cast<int64_t>(e)); };
    bool per_expert = spec_.mlp_bias || gpt2_names_;
    for (size_t e = 0; e < counts.size() && !per_expert; ++e) {
      for (const std::string& n : up_names) per_expert = per_expert || p.count(expert(e) + "." + n + ".lora_A.default.weight") > 0;
      per_expert = per_expert || p.count(expert(e) + ".down_proj.lora_A.default.weight") > 0;
    }
    if (per_expert) {
      std::vector<at::Tensor> outs;
      int64_t offset = 0;
      for (size_t e = 0; e < counts.size(); ++e) {
        at::Tensor r = rows.narrow(0, offset, counts[e]);
        offset += counts[e];
        outs.push_back(MlpDown(p, expert(e), MlpUp(p, expert(e), r)));
      }
      return at::cat(outs, 0);
    }
    auto weights = [&](const std::string& n) {
      std::vector<at::Tensor> w;
      for (size_t e = 0; e < counts.size(); ++e) w.push_back(Get(p, expert(e) + "." + n + ".weight"));
      return w;
    };
    for (const std::string& n : up_names) up_weights.push_back(weights(n));
    down_weights = weights("down_proj");
    fused = spec_.fused_gate_up;
  }
  std::vector<at::Tensor> up;
  for (const std::vector<at::Tensor>& w : up_weights) up.push_back(GroupedLinear(rows, counts, w));
  if (fused) up = up[0].chunk(2, -1);
  Piece act = ActivationPiece(up);
  at::Tensor h = Run(act);
  at::Tensor out = GroupedLinear(h, counts, down_weights);
  Drop(h, act, {out});
  return out;
}

// The shared expert(s) on every token, scaled by sigmoid(their gate) when the model has one
// (Qwen2-MoE's shared_expert_gate; DeepSeek's shared_experts are one MLP of the summed width).
at::Tensor Transformer::SharedExperts(const ParamTable& p, const std::string& pre,
                                      const at::Tensor& flat) const {
  std::string sp = pre + ".shared_expert";
  at::Tensor s = MlpDown(p, sp, MlpUp(p, sp, flat));
  if (spec_.moe.shared_expert_gate) {
    s = at::sigmoid(Proj(p, pre + ".shared_expert_gate", flat, false, false)) * s;
  }
  return s;
}

at::Tensor Transformer::TorchtitanMoe(const ParamTable& p, const std::string& pre,
                                      const at::Tensor& x, int layer) const {
  const model::MoeSpec& m = spec_.moe;
  const int64_t H = spec_.hidden, E = m.num_experts;
  const int64_t F = m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : spec_.ffn_hidden;
  at::Tensor flat = x.reshape({-1, H});  // [T, H]
  at::Tensor scores, ids;                // [T, k]: fp32 routing scores, expert indices
  const int row = layer >= 0 && expert_bias_.defined() ? moe_row_[static_cast<size_t>(layer)] : -1;
  at::Tensor bias = row >= 0 ? expert_bias_[row].to(flat.device()) : at::Tensor();  // [E] fp32
  if (m.deepseek_router) {
    std::tie(ids, scores) = DeepseekRoute(p, pre, flat, bias);
  } else {
    // with torch.autocast(dtype=float32): scores = gate(x); softmax in fp32; topk (sorted=False)
    // picks, gather takes the scores; route_norm divides by their sum + 1e-20. GPT-OSS's gate
    // has a bias, and its router route_norm (models/gpt_oss/__init__.py TokenChoiceTopKRouter
    // .Config(score_func="softmax", route_norm=True, gate bias=True)). Autocast leaves fp64 alone.
    auto to32 = [](const at::Tensor& t) { return t.scalar_type() == at::kDouble ? t : t.to(at::kFloat); };
    at::Tensor logits = at::linear(to32(flat), to32(Get(p, pre + ".gate.weight")),
                                   m.gpt_oss_experts ? to32(Get(p, pre + ".gate.bias")) : at::Tensor());
    at::Tensor probs = at::softmax(logits, -1);
    {
      at::NoGradGuard no_grad;
      // scores_for_choice = scores + expert_bias: the bias only picks (the weights are gathered
      // from the scores).
      at::Tensor for_choice = bias.defined() ? probs + bias : probs;
      ids = std::get<1>(at::topk(for_choice, m.top_k, -1, /*largest=*/true, /*sorted=*/false));
    }
    scores = probs.gather(1, ids);
    if (m.norm_topk_prob || m.gpt_oss_experts) scores = scores / (scores.sum(-1, /*keepdim=*/true) + 1e-20);
  }
  if (row >= 0 && counting_) {  // MoE.forward: tokens_per_expert_E.add_(num_local_tokens_per_expert)
    at::NoGradGuard no_grad;
    tokens_per_expert_[row].add_(at::bincount(ids.reshape({-1}), {}, E).to(at::kFloat).to(tokens_per_expert_.device()));
  }
  RoutedTokens routed = DispatchTokens(flat, scores, ids, E, ep_);
  const int64_t el = static_cast<int64_t>(routed.per_expert.size());
  const int64_t first = ep_ != nullptr ? ep_->rank() * el : 0;
  // GroupedExperts._run_experts_grouped_mm: torch._grouped_mm over the expert-sorted rows
  // (GroupedLinear), on GroupedExperts' [el, ...] tensors (ep > 1) or HF's per-expert modules.
  at::Tensor expert_out;
  if (m.gpt_oss_experts) {
    expert_out = GptOssGroupedExperts(routed.rows, routed.per_expert,
                                      Get(p, pre + ".experts.gate_up_proj").view({el, H, 2 * F}),
                                      Get(p, pre + ".experts.gate_up_proj_bias").view({el, 2 * F}),
                                      Get(p, pre + ".experts.down_proj").view({el, F, H}),
                                      Get(p, pre + ".experts.down_proj_bias").view({el, H}));
  } else {
    expert_out = RoutedExperts(p, pre, routed.rows, routed.per_expert, first);
  }
  at::Tensor out = CombineTokens(expert_out, routed, flat, ep_);
  if (m.num_shared_experts > 0) out = out + SharedExperts(p, pre, flat);
  return out.view_as(x);
}

// torchtitan's GptOssGroupedExperts.forward (models/gpt_oss/moe.py) on the expert-sorted rows:
// h = _grouped_mm(x, mlp1_weight^T) + mlp1_bias.repeat_interleave(num_tokens_per_expert) (the
// HF-layout gate_up_proj [H, 2F] per expert is that transpose: the same product), swiglu:
// x_glu = h[..., ::2].clamp(max=limit), x_linear = h[..., 1::2].clamp(-limit, limit),
// out_glu = x_glu * sigmoid(alpha * x_glu), torch.addcmul(out_glu, out_glu, x_linear) (the
// "+ 1" of transformers' (up + 1) * glu), then _grouped_mm with mlp2 plus its repeated bias.
// alpha 1.702, limit GptOssGroupedExperts.Config.swiglu_limit (7.0 in every published config).
at::Tensor Transformer::GptOssGroupedExperts(const at::Tensor& rows, const std::vector<int64_t>& counts,
                                             const at::Tensor& gate_up, const at::Tensor& gate_up_bias,
                                             const at::Tensor& down, const at::Tensor& down_bias) {
  const int64_t G = gate_up.size(2);
  at::Tensor repeats = at::tensor(counts, at::TensorOptions().dtype(at::kLong)).to(rows.device());
  at::Tensor h = GroupedLinear(rows, counts, {gate_up}) + gate_up_bias.repeat_interleave(repeats, 0);
  at::Tensor x_glu = h.slice(-1, 0, G, 2).clamp_max(kGptOssSwigluLimit);
  at::Tensor x_linear = h.slice(-1, 1, G, 2).clamp(-kGptOssSwigluLimit, kGptOssSwigluLimit);
  at::Tensor out_glu = x_glu * at::sigmoid(x_glu * kGptOssSwigluAlpha);
  return GroupedLinear(at::addcmul(out_glu, out_glu, x_linear), counts, {down}) +
         down_bias.repeat_interleave(repeats, 0);
}

// GPT-OSS's MoE (transformers 5 modeling_gpt_oss.py): GptOssTopKRouter, logits = x W^T + b,
// top-k of the logits, softmax over those k in the logits' dtype; GptOssExperts
// (use_experts_implementation(is_transposed=True, has_bias=True)) through GroupedDispatch: its
// 3-D parameters (module_tree.cc: [E, H x 2F], [E, 2F], [E, F x H], [E, H]) multiply from the
// right (x @ W[e]) by GroupedLinear, each bias gathered per row (gate_up_proj_bias[expert_ids_g]);
// _apply_gate: gate and up interleaved in gate_up ([..., ::2], [..., 1::2]), the clamped SwiGLU
// (gate.clamp(max=limit), up.clamp(-limit, limit), glu = gate x sigmoid(alpha x gate), (up + 1)
// x glu, with HF's hard-coded alpha 1.702 and limit 7.0, which the config's swiglu_limit does
// not change).
at::Tensor Transformer::GptOssMoe(const ParamTable& p, const std::string& pre,
                                  const at::Tensor& x) const {
  const model::MoeSpec& m = spec_.moe;
  const int64_t H = spec_.hidden, E = m.num_experts;
  const int64_t F = m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : spec_.ffn_hidden;
  at::Tensor flat = x.reshape({-1, H});                                         // [T, H]
  at::Tensor logits = Proj(p, pre + ".gate", flat, /*bias=*/true, /*conv1d=*/false);  // [T, E]
  auto top = at::topk(logits, m.top_k, -1);
  at::Tensor weights = at::softmax(std::get<0>(top), 1, logits.scalar_type());  // [T, k]
  at::Tensor chosen = std::get<1>(top);
  at::Tensor gate_up = Get(p, pre + ".experts.gate_up_proj").view({E, H, 2 * F});
  at::Tensor gate_up_bias = Get(p, pre + ".experts.gate_up_proj_bias").view({E, 2 * F});
  at::Tensor down = Get(p, pre + ".experts.down_proj").view({E, F, H});
  at::Tensor down_bias = Get(p, pre + ".experts.down_proj_bias").view({E, H});
  at::Tensor out = GroupedDispatch(flat, chosen, weights, E, [&](const at::Tensor& rows,
                                                                 const std::vector<int64_t>& counts,
                                                                 const at::Tensor& ids_g) {
    at::Tensor gu = GroupedLinear(rows, counts, {gate_up}) + gate_up_bias.index_select(0, ids_g);
    at::Tensor g = gu.slice(-1, 0, 2 * F, 2).clamp_max(kGptOssSwigluLimit);
    at::Tensor u = gu.slice(-1, 1, 2 * F, 2).clamp(-kGptOssSwigluLimit, kGptOssSwigluLimit);
    at::Tensor glu = g * at::sigmoid(g * kGptOssSwigluAlpha);
    return GroupedLinear((u + 1) * glu, counts, {down}) + down_bias.index_select(0, ids_g);
  });
  return out.view_as(x);
}

// DeepseekV3TopkRouter / DeepseekV3MoE.route_tokens_to_experts (transformers 5.x) and DeepSeek's
// V2 MoEGate (modeling_deepseek.py): logits = F.linear(x.float(), W.float()); scores = sigmoid
// (V3) or softmax (V2). noaux_tc (V3), under no_grad: scores + e_score_correction_bias (a
// buffer, zeros as transformers initialises it and nothing here updates it), each of n_group
// groups scored by its two best, the topk_group best groups kept (the others' scores zeroed),
// top-k over what is left; group_limited_greedy (V2): the same with each group scored by its best;
// greedy (V2-Lite): top-k of the scores. The weights are the chosen
// scores (gather). V3 renormalises them when norm_topk_prob (+1e-20) and always multiplies by
// routed_scaling_factor; V2's MoEGate renormalises when top_k > 1 and norm_topk_prob, else
// scales.
std::pair<at::Tensor, at::Tensor> Transformer::DeepseekRoute(const ParamTable& p,
                                                             const std::string& pre,
                                                             const at::Tensor& flat,
                                                             const at::Tensor& choice_bias) const {
  const model::MoeSpec& m = spec_.moe;
  at::Tensor logits = at::linear(flat.to(at::kFloat), Get(p, pre + ".gate.weight").to(at::kFloat));
  at::Tensor scores = m.sigmoid_scores ? at::sigmoid(logits) : at::softmax(logits, -1);
  at::Tensor chosen;
  {
    at::NoGradGuard no_grad;
    // torchtitan (choice_bias defined): scores_for_choice = scores + expert_bias, the dropped
    // groups masked with -inf (TokenChoiceTopKRouter._get_node_limited_routing_scores); HF fills 0.
    at::Tensor choice = choice_bias.defined() ? scores + choice_bias : scores;
    const double dropped = choice_bias.defined() ? -std::numeric_limits<double>::infinity() : 0.0;
    if (m.topk_method == "noaux_tc") {
      const int64_t T = choice.size(0), G = m.n_group, E = m.num_experts;
      at::Tensor group_scores = std::get<0>(choice.view({T, G, E / G}).topk(2, -1)).sum(-1);
      at::Tensor group_idx = std::get<1>(group_scores.topk(m.topk_group, -1, true, false));
      at::Tensor group_mask = at::zeros_like(group_scores).scatter_(1, group_idx, 1.0);
      at::Tensor score_mask = group_mask.unsqueeze(-1).expand({T, G, E / G}).reshape({T, E});
      at::Tensor for_choice = choice.masked_fill(score_mask.logical_not(), dropped);
      chosen = std::get<1>(for_choice.topk(m.top_k, -1, true, false));
    } else if (m.topk_method == "group_limited_greedy") {
      // DeepSeek-V2's MoEGate (modeling_deepseek.py): each of n_group groups scored by its best
      // expert, the topk_group best groups kept (the others' scores zeroed), top-k over the rest.
      const int64_t T = choice.size(0), G = m.n_group, E = m.num_experts;
      at::Tensor group_scores = std::get<0>(choice.view({T, G, E / G}).max(-1));
      at::Tensor group_idx = std::get<1>(group_scores.topk(m.topk_group, -1, true, false));
      at::Tensor group_mask = at::zeros_like(group_scores).scatter_(1, group_idx, 1.0);
      at::Tensor score_mask = group_mask.unsqueeze(-1).expand({T, G, E / G}).reshape({T, E});
      at::Tensor for_choice = choice.masked_fill(score_mask.logical_not(), dropped);
      chosen = std::get<1>(for_choice.topk(m.top_k, -1, true, false));
    } else {
      chosen = std::get<1>(choice.topk(m.top_k, -1, true, false));
    }
  }
  // The chosen experts lie in kept groups, so their masked scores are the scores themselves.
  at::Tensor weights = scores.gather(1, chosen);
  if (m.sigmoid_scores) {  // V3
    if (m.norm_topk_prob) weights = weights / (weights.sum(-1, true) + 1e-20);
    weights = weights * m.routed_scaling_factor;
  } else if (m.top_k > 1 && m.norm_topk_prob) {  // V2
    weights = weights / (weights.sum(-1, true) + 1e-20);
  } else {
    weights = weights * m.routed_scaling_factor;
  }
  return {chosen, weights};
}

// The attention's input projections: q, k, v [B, S, heads * D], or GPT-2's c_attn [B, S, 3H];
// MLA's q_a_proj (or q_proj) and kv_a_proj_with_mqa outputs.
std::vector<at::Tensor> Transformer::Qkv(const ParamTable& p, const std::string& pre,
                                         const at::Tensor& x) const {
  if (spec_.mla.enabled()) {
    const char* q = spec_.mla.q_lora_rank > 0 ? ".q_a_proj" : ".q_proj";
    return {Proj(p, pre + q, x, false, false), Proj(p, pre + ".kv_a_proj_with_mqa", x, false, false)};
  }
  if (gpt2_names_) return {Proj(p, pre + ".c_attn", x, spec_.qkv_bias, true)};
  if (spec_.fused_qkv) return {Proj(p, pre + ".qkv_proj", x, spec_.qkv_bias, false)};  // Phi-3
  return {Proj(p, pre + ".q_proj", x, spec_.qkv_bias, false),
          Proj(p, pre + ".k_proj", x, spec_.qkv_bias, false),
          Proj(p, pre + ".v_proj", x, spec_.qkv_bias, false)};
}

at::Tensor Transformer::Attention(const ParamTable& p, const std::string& pre,
                                  const std::vector<at::Tensor>& qkv, int layer) const {
  if (spec_.mla.enabled()) return MlaAttention(p, pre, qkv);
  const bool sliding = layer >= 0 && spec_.SlidingLayer(layer);
  const int64_t window = sliding ? spec_.sliding_window : 0;
  int64_t B = qkv[0].size(0), S = qkv[0].size(1), D = spec_.head_dim;
  int64_t a = spec_.num_heads, kv = spec_.num_kv_heads;
  at::Tensor q, k, v;
  if (gpt2_names_ || spec_.fused_qkv) {  // c_attn / Phi-3's qkv_proj: [q | k | v] slices
    q = qkv[0].narrow(-1, 0, a * D);
    k = qkv[0].narrow(-1, a * D, kv * D);
    v = qkv[0].narrow(-1, (a + kv) * D, kv * D);
  } else {
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  }
  if (spec_.qk_norm && spec_.qk_norm_full_width) {  // OLMo 2: q_norm(q_proj(x)) before the split
    q = Run(NormPiece(p, pre + ".q_norm", q));
    k = Run(NormPiece(p, pre + ".k_norm", k));
  }
  q = q.view({B, S, a, D});
  k = k.view({B, S, kv, D});
  if (spec_.qk_norm && !spec_.qk_norm_full_width) {
    // Qwen3 / Gemma 3: RMSNorm over head_dim before the rotary (nothing saves its output)
    q = Run(NormPiece(p, pre + ".q_norm", q));
    k = Run(NormPiece(p, pre + ".k_norm", k));
  }
  const at::Tensor sinks = spec_.attention_sinks ? Get(p, pre + ".sinks") : at::Tensor();
  const std::string o_proj = pre + (gpt2_names_ ? ".c_proj" : ".o_proj");
  if (!packing_.empty()) {
    SHARDTUNE_CHECK(cp_ == nullptr && B == 1) << "packed rows: one row, no cp";
    at::Tensor o = PackedAttention(q, k, v.reshape({B, S, kv, D}), sliding, window, sinks);
    return Proj(p, o_proj, o, spec_.attn_out_bias, gpt2_names_);
  }
  q = q.transpose(1, 2);                         // [B, a, S, D]
  k = k.transpose(1, 2);                         // [B, kv, S, D]
  v = v.reshape({B, S, kv, D}).transpose(1, 2);  // [B, kv, S, D]
  if (spec_.positions == model::PositionKind::kRotary && !spec_.mrope_section.empty()) {
    // q * cos + rotate_half(q) * sin with the layer's M-RoPE sections (one pair for q and k).
    auto [cos, sin] = MropeCosSin(B, S, q);
    auto apply = [&](const at::Tensor& x) { return x * cos + RotateHalf(x) * sin; };
    q = apply(q);
    k = apply(k);
  } else if (spec_.positions == model::PositionKind::kRotary) {
    q = Rotary(q, PositionOffset(S), sliding);
    k = Rotary(k, PositionOffset(S), sliding);
  }
  if (spec_.query_pre_attn_scalar > 0) {
    // Gemma: scores scaled by query_pre_attn_scalar^-0.5 instead of D^-0.5; the kernels below
    // scale by D^-0.5, so q carries the ratio.
    q = q * std::sqrt(static_cast<double>(D) / spec_.query_pre_attn_scalar);
  }
  at::Tensor o;
  if (cp_ == nullptr) {
    o = Core(q, k, v, window, sinks).transpose(1, 2).reshape({B, S, a * D});  // [B, S, a*D]
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
    at::Tensor local = Core(to_heads(q), to_heads(k), to_heads(v), window);  // [B, a/cp, S, D]
    o = GatherHeadsScatterSeq(local.transpose(1, 2), *cp_).reshape({B, S, a * D});
  }
  return Proj(p, o_proj, o, spec_.attn_out_bias, gpt2_names_);
}

at::Tensor Transformer::PackedAttention(at::Tensor q, at::Tensor k, at::Tensor v, bool sliding,
                                        int64_t window, const at::Tensor& sinks) const {
  const int64_t T = q.size(1), a = q.size(2), kv = k.size(2), D = q.size(3);
  std::vector<at::Tensor> outs;
  int64_t end = 0;
  for (const internal::EqualRun& r : internal::EqualRuns(packing_)) {
    const int64_t start = r.start, n = r.count, s = r.length;
    end = start + n * s;
    // The run's tokens [1, n*s, h, D] as n sequences [n, h, s, D] (a view: the projections'
    // outputs are contiguous over tokens), positions 0 .. s-1 in each.
    auto run = [&](const at::Tensor& t, int64_t heads) {
      return t.narrow(1, start, n * s).reshape({n, s, heads, D}).transpose(1, 2);
    };
    at::Tensor qr = run(q, a), kr = run(k, kv), vr = run(v, kv);
    if (spec_.positions == model::PositionKind::kRotary) {
      qr = Rotary(qr, 0, sliding);
      kr = Rotary(kr, 0, sliding);
    }
    if (spec_.query_pre_attn_scalar > 0) {
      qr = qr * std::sqrt(static_cast<double>(D) / spec_.query_pre_attn_scalar);
    }
    outs.push_back(Core(qr, kr, vr, window, sinks).transpose(1, 2).reshape({1, n * s, a * D}));
  }
  SHARDTUNE_CHECK(end == T) << "packed lengths sum to " << end << ", the row holds " << T;
  return outs.size() == 1 ? outs[0] : at::cat(outs, 1);
}

void Transformer::SetPacking(std::vector<int64_t> lengths) const {
  packing_ = std::move(lengths);
  packed_positions_ = at::Tensor();
  if (packing_.empty()) return;
  std::vector<int64_t> pos;
  for (int64_t s : packing_) {
    for (int64_t t = 0; t < s; ++t) pos.push_back(t);
  }
  packed_positions_ = at::tensor(pos, at::TensorOptions().dtype(at::kLong));
}

// DeepseekV3Attention.forward (modeling_deepseek_v3.py): q = q_b_proj(q_a_layernorm(q_a)) (or
// q_proj's output) as [B, a, S, nope + rope], split into q_pass and q_rot; the latent part of
// kv_a_proj_with_mqa's output through kv_a_layernorm and kv_b_proj into [B, a, S, nope + v],
// split into k_pass and the values; its rope part [B, 1, S, rope] one key shared by the heads.
// The rope parts are rotated as DeepSeek stores them, in interleaved pairs
// (apply_rotary_pos_emb_interleave: view [.., rope/2, 2], transpose, reshape, then
// rotate_half's rotation); k_rot is expanded to the heads; query = cat(q_pass, q_rot), key =
// cat(k_pass, k_rot); attention scaled by (nope + rope)^-0.5, times mscale^2 under YaRN
// (MlaSoftmaxScaleFactor), values v wide; o_proj over [B, S, a·v].
at::Tensor Transformer::MlaAttention(const ParamTable& p, const std::string& pre,
                                     const std::vector<at::Tensor>& proj) const {
  const model::MlaSpec& m = spec_.mla;
  const int64_t B = proj[0].size(0), S = proj[0].size(1), a = spec_.num_heads;
  const int64_t nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, vd = m.v_head_dim;
  at::Tensor q = proj[0];
  if (m.q_lora_rank > 0) {
    q = Proj(p, pre + ".q_b_proj", Run(NormPiece(p, pre + ".q_a_layernorm", q)), false, false);
  }
  q = q.view({B, S, a, nope + rope}).transpose(1, 2);  // [B, a, S, nope + rope]
  at::Tensor q_pass = q.narrow(-1, 0, nope), q_rot = q.narrow(-1, nope, rope);
  at::Tensor latent = proj[1].narrow(-1, 0, m.kv_lora_rank);
  at::Tensor k_rot = proj[1].narrow(-1, m.kv_lora_rank, rope).view({B, 1, S, rope});
  at::Tensor kv = Proj(p, pre + ".kv_b_proj", Run(NormPiece(p, pre + ".kv_a_layernorm", latent)),
                       false, false)
                      .view({B, S, a, nope + vd})
                      .transpose(1, 2);  // [B, a, S, nope + v]
  at::Tensor k_pass = kv.narrow(-1, 0, nope), v = kv.narrow(-1, nope, vd);
  auto deinterleave = [](const at::Tensor& t) {  // [.., d] pairs (x0, x1), .. -> halves
    std::vector<int64_t> shape = t.sizes().vec();
    const int64_t d = shape.back();
    std::vector<int64_t> pairs(shape.begin(), shape.end() - 1);
    pairs.push_back(d / 2);
    pairs.push_back(2);
    return t.reshape(pairs).transpose(-1, -2).reshape(shape);
  };
  q_rot = Rotary(deinterleave(q_rot), PositionOffset(S));
  k_rot = Rotary(deinterleave(k_rot), PositionOffset(S)).expand({B, a, S, rope});
  at::Tensor query = at::cat({q_pass, q_rot}, -1), key = at::cat({k_pass, k_rot}, -1);
  // Core scales by (nope + rope)^-0.5; YaRN's mscale^2 rides on the query (as Gemma's ratio).
  const double yarn = MlaSoftmaxScaleFactor();
  if (yarn != 1.0) query = query * yarn;
  at::Tensor o = Core(query, key, v.contiguous()).transpose(1, 2).reshape({B, S, a * vd});
  return Proj(p, pre + ".o_proj", o, false, false);
}

at::Tensor Transformer::Core(at::Tensor q, at::Tensor k, at::Tensor v, int64_t window,
                              const at::Tensor& sinks, bool causal) const {
  int64_t B = q.size(0), a = q.size(1), S = q.size(2), D = q.size(3), kv = k.size(1);
  // A sliding layer shorter than S (Gemma's sliding_window_overlay: kv_idx > q_idx - window,
  // causal) needs an explicit band mask; a full layer is plain causal attention.
  const bool band = window > 0 && window < S;
  const int64_t mask_window = band ? window : 0;  // AttentionMask's: 0 is plain causal
  // SDPA has no soft-capping and no sinks: a capped model (Gemma 2) and GPT-OSS (whose HF class
  // has no sdpa path, _supports_sdpa = False) take the eager path below.
  [[maybe_unused]] const bool sdpa = options_.sdpa && spec_.attn_logit_softcap == 0 && !sinks.defined();
  // torchtitan's op SAC saves the SDPA kernel's output (its save list); the forward keeps it on
  // the tape. The rerun in backward takes it off and recomputes the attention with grad (the SDPA
  // backward ops that would take the saved output and logsumexp are backend-specific), so the
  // bytes kept between forward and backward are torchtitan's and the backward costs one more
  // attention forward than torchtitan's. Eager attention's bmm and softmax are not in the list.
  [[maybe_unused]] auto taped = [this](at::Tensor o) {
    sac_.Record(o);
    if (sac_.mode == SacTape::Mode::kReplay) sac_.TakeSaved();
    return o;
  };
  if (!causal) {
    // A vision tower's attention (is_causal = False, no mask: eager_attention_forward or SDPA
    // over one image or window; q, k, v with equal heads).
    SHARDTUNE_CHECK(kv == a && window == 0 && !sinks.defined()) << "non-causal attention: plain heads";
#if TORCH_VERSION_MAJOR >= 2
    if (sdpa) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/false);
#endif
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
    at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
    return at::matmul(probs, v);
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // SDPA reads the kv heads in place (enable_gqa, torch >= 2.5), as Hugging Face's sdpa
  // attention does without a mask (transformers integrations/sdpa_attention.py use_gqa_in_sdpa):
  // no [B, a, S, D] copies of k and v are made or saved for backward.
  if (sdpa && !band) {
    return taped(at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true,
                                                  /*scale=*/std::nullopt, /*enable_gqa=*/kv != a));
  }
#endif
  if (kv != a) {  // repeat_kv: [B, kv, S, D] -> [B, a, S, D]
    k = k.unsqueeze(2).expand({B, kv, a / kv, S, D}).reshape({B, a, S, D});
    v = v.unsqueeze(2).expand({B, kv, a / kv, S, D}).reshape({B, a, S, D});
  }
#if TORCH_VERSION_MAJOR >= 2
  if (sdpa) {
    if (band) {
      return taped(at::scaled_dot_product_attention(
          q, k, v, AttentionMask(S, mask_window, q.device()).logical_not()));
    }
    return taped(at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true));
  }
#endif
  at::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
  if (spec_.attn_logit_softcap > 0) {  // Gemma 2: tanh(scores / cap) * cap, then the mask
    scores = at::tanh(scores / spec_.attn_logit_softcap) * spec_.attn_logit_softcap;
  }
  at::Tensor mask = AttentionMask(S, mask_window, q.device());  // true: not attended
  scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
  if (sinks.defined()) {
    // GPT-OSS eager_attention_forward: cat the head's sink as one more column, subtract the row
    // max, softmax in the scores' dtype, drop the sink's column.
    at::Tensor column = sinks.to(scores.scalar_type()).reshape({1, a, 1, 1}).expand({B, a, S, 1});
    at::Tensor combined = at::cat({scores, column}, -1);
    combined = combined - std::get<0>(combined.max(-1, /*keepdim=*/true));
    at::Tensor probs = at::softmax(combined, -1, combined.scalar_type()).narrow(-1, 0, S);
    return at::matmul(probs.to(v.scalar_type()), v);  // [B, a, S, D]
  }
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());  // [B, a, S, S]
  return at::matmul(probs, v);                                                 // [B, a, S, D]
}

// The rotary inverse frequencies [D/2] fp32 as transformers computes them
// (modeling_rope_utils.py: _compute_default_rope_parameters, 1 / theta^(2i/D); "linear" divides
// them by factor; _compute_llama3_parameters keeps the high frequencies (wavelength below
// original_max_position_embeddings / high_freq_factor), divides the low ones (above
// original / low_freq_factor) by factor and blends in between).
at::Tensor Transformer::InverseFrequencies(int64_t D, const at::TensorOptions& f32,
                                           bool local) const {
  if (local && options_.rope_local_theta > 0) {  // Gemma 3: the sliding layers' plain RoPE
    return at::pow(options_.rope_local_theta, at::arange(0, D, 2, f32) / static_cast<double>(D))
        .reciprocal();
  }
  at::Tensor inv =
      at::pow(options_.rope_theta, at::arange(0, D, 2, f32) / static_cast<double>(D)).reciprocal();
  const model::RopeScaling& r = options_.rope_scaling;
  if (r.type == "linear") return inv / r.factor;
  if (r.type == "yarn") {
    // _compute_yarn_parameters: interpolated (inv / factor) and extrapolated (inv) frequencies
    // blended by a linear ramp over the dims whose rotations at the original context lie between
    // beta_fast and beta_slow (find_correction_range, floored / ceiled when truncate).
    const double base = options_.rope_theta, dim = static_cast<double>(D);
    const double original = r.original_given ? static_cast<double>(r.original_max_position_embeddings)
                                             : static_cast<double>(spec_.max_seq_len);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // linear_ramp_factor's guard
    at::Tensor ramp = ((at::arange(D / 2, f32) - low) / (high - low)).clamp(0, 1);
    at::Tensor extrapolation = 1 - ramp;
    return inv / YarnFactor(r, spec_.max_seq_len) * (1 - extrapolation) + inv * extrapolation;
  }
  if (r.type != "llama3") return inv;
  const double old_context = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old_context / r.low_freq_factor;
  const double high_wavelen = old_context / r.high_freq_factor;
  at::Tensor wavelen = (2 * M_PI) / inv;
  at::Tensor inv_llama = at::where(wavelen > low_wavelen, inv / r.factor, inv);
  at::Tensor smooth = (old_context / wavelen - r.low_freq_factor) /
                      (r.high_freq_factor - r.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * inv_llama / r.factor + smooth * inv_llama;
  at::Tensor medium = wavelen.ge(high_wavelen).logical_and(wavelen.le(low_wavelen));
  return at::where(medium, smoothed, inv_llama);
}

double Transformer::RopeAttentionScaling() const {
  const model::RopeScaling& r = options_.rope_scaling;
  if (r.type != "yarn") return 1.0;
  if (r.attention_factor > 0) return r.attention_factor;
  const double factor = YarnFactor(r, spec_.max_seq_len);
  if (r.mscale > 0 && r.mscale_all_dim > 0) {
    return YarnMscale(factor, r.mscale) / YarnMscale(factor, r.mscale_all_dim);
  }
  return YarnMscale(factor, 1.0);
}

double Transformer::MlaSoftmaxScaleFactor() const {
  const model::RopeScaling& r = options_.rope_scaling;
  if (!r.enabled() || r.mscale_all_dim <= 0) return 1.0;
  const double mscale = 0.1 * r.mscale_all_dim * std::log(r.factor) + 1.0;
  return mscale * mscale;
}

// The [S, S] bool mask of positions a query may not attend to: causal (window 0), or causal and
// older than `window` positions (Gemma's sliding_window_overlay), one per shape (rotary_cache_'s
// note in transformer.h).
at::Tensor Transformer::AttentionMask(int64_t S, int64_t window, const at::Device& device) const {
  auto key = std::make_tuple(S, window, device.str());
  auto it = mask_cache_.find(key);
  if (it != mask_cache_.end()) return it->second;
  at::NoGradGuard no_grad;
  auto longs = at::TensorOptions().device(device).dtype(at::kLong);
  at::Tensor i = at::arange(S, longs).unsqueeze(1);
  at::Tensor j = at::arange(S, longs).unsqueeze(0);
  at::Tensor m = window > 0 ? j.gt(i).logical_or(j.le(i - window)) : j.gt(i);
  return mask_cache_.emplace(key, m).first->second;
}

void Transformer::ClearSharedConstants(bool keep_position_tables) const {
  rotary_cache_.clear();
  mask_cache_.clear();
  if (keep_position_tables) return;
  mrope_cos_ = at::Tensor();
  mrope_sin_ = at::Tensor();
}

// modeling_llama.py apply_rotary_pos_emb; with partial rotary modeling_phi3.py's (q_rot, q_pass =
// q[..., :rotary_dim], q[..., rotary_dim:]; cat((q_rot * cos) + (rotate_half(q_rot) * sin),
// q_pass)) and modeling_gpt_neox.py's, which compute the same, the frequencies over rotary_dim.
at::Tensor Transformer::Rotary(const at::Tensor& x, int64_t offset, bool local) const {
  int64_t S = x.size(2), D = x.size(3);
  int64_t R = RotaryDims(D, spec_.rotary_fraction);
  at::Tensor xr = R == D ? x : x.narrow(-1, 0, R);
  const bool local_theta = local && options_.rope_local_theta > 0;
  auto key = std::make_tuple(S, offset, R, local_theta, static_cast<int>(x.scalar_type()),
                             x.device().str());
  auto cached = rotary_cache_.find(key);
  if (cached == rotary_cache_.end()) {
    at::NoGradGuard no_grad;
    auto f32 = x.options().dtype(at::kFloat);
    at::Tensor inv = InverseFrequencies(R, f32, local);
    at::Tensor freqs = at::outer(at::arange(offset, offset + S, f32), inv);  // [S, R/2]
    at::Tensor emb = at::cat({freqs, freqs}, -1);                           // [S, R]
    // YaRN scales cos and sin in fp32 before the cast (LlamaRotaryEmbedding.forward's
    // attention_scaling); Gemma 3's sliding layers use plain RoPE.
    const double scaling = local_theta ? 1.0 : RopeAttentionScaling();
    at::Tensor c = emb.cos(), s = emb.sin();
    if (scaling != 1.0) {
      c = c * scaling;
      s = s * scaling;
    }
    cached = rotary_cache_.emplace(key, std::make_pair(c.to(x.scalar_type()), s.to(x.scalar_type())))
                 .first;
  }
  const at::Tensor& cos = cached->second.first;
  const at::Tensor& sin = cached->second.second;
  at::Tensor out = xr * cos + RotateHalf(xr) * sin;
  return R == D ? out : at::cat({out, x.narrow(-1, R, D - R)}, -1);
}

// The MLP's input projections: SwiGLU's gate and up, or the single up (GPT-2 c_fc).
std::vector<at::Tensor> Transformer::MlpUp(const ParamTable& p, const std::string& pre,
                                           const at::Tensor& x) const {
  bool b = spec_.mlp_bias;
  if (spec_.fused_gate_up) {  // Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1)
    std::vector<at::Tensor> halves = Proj(p, pre + ".gate_up_proj", x, b, false).chunk(2, -1);
    return {halves[0], halves[1]};
  }
  if (spec_.mlp == model::MlpKind::kSwiGlu) {
    return {Proj(p, pre + ".gate_proj", x, b, false), Proj(p, pre + ".up_proj", x, b, false)};
  }
  return {Proj(p, pre + (gpt2_names_ ? ".c_fc" : ".up_proj"), x, b, gpt2_names_)};
}

// The MLP's activation on its input projections' outputs: SwiGLU or GeGLU on {gate, up}, else
// GELU on {up} (GPT-2's gelu_new, NeoX's exact GELU).
Transformer::Piece Transformer::ActivationPiece(const std::vector<at::Tensor>& up) const {
  if (spec_.mlp != model::MlpKind::kSwiGlu) return Piece{&GeluPiece, gpt2_names_ ? 1.0 : 0.0, up};
  return Piece{spec_.gelu_gate ? &GeGluPiece : &SwiGluPiece, 0.0, up};
}

// The activation (recomputed under selective checkpointing, dropped once projected) and the
// down projection.
at::Tensor Transformer::MlpDown(const ParamTable& p, const std::string& pre,
                                const std::vector<at::Tensor>& up) const {
  bool b = spec_.mlp_bias;
  Piece act = ActivationPiece(up);
  std::string down = pre + ".down_proj";
  bool conv1d = false;
  if (spec_.mlp != model::MlpKind::kSwiGlu) {
    down = pre + (gpt2_names_ ? ".c_proj" : ".down_proj");
    conv1d = gpt2_names_;
  }
  at::Tensor h = Run(act);
  at::Tensor out = Proj(p, down, h, b, conv1d);
  Drop(h, act, {out});
  return out;
}

at::Tensor Transformer::Proj(const ParamTable& p, const std::string& module, const at::Tensor& x,
                             bool bias, bool conv1d) const {
  // torchtitan's op SAC: a bias-free nn.Linear is one aten.mm, counted; the odd-numbered ones
  // are saved in forward and handed back to the rerun (a biased one is aten.addmm: neither
  // counted nor saved, recomputed like any other op).
  const bool taped = sac_.Active() && !bias && !conv1d && sac_.CountMmSaved();
  const at::Tensor& w = Get(p, module + ".weight");
  at::Tensor y = taped && sac_.mode == SacTape::Mode::kReplay
                     ? ReplayLinear(sac_.TakeSaved(), x, w)
                     : Dense(x, w, Maybe(p, module + ".bias", bias), conv1d);
  if (taped) sac_.Record(y);
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

at::Tensor Transformer::LoadBalancingLoss(const std::vector<at::Tensor>& router_logits, int num_experts,
                                          int top_k) {
  at::Tensor cat = at::cat(router_logits, 0);                                // [N, E]
  at::Tensor routing = at::softmax(cat, -1);                                 // cat's dtype
  at::Tensor selected = std::get<1>(at::topk(routing, top_k, -1));            // [N, k]
  at::Tensor mask = at::one_hot(selected, num_experts).to(at::kFloat);       // [N, k, E]
  at::Tensor tokens_per_expert = mask.mean(0);                               // [k, E]
  at::Tensor prob_per_expert = routing.mean(0);                              // [E]
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * static_cast<double>(num_experts);
}

at::Tensor Transformer::HeadLoss(const ParamTable& p, const at::Tensor& x,
                                 const at::Tensor& labels) const {
  at::Tensor loss = options_.fused_loss ? FusedCrossEntropy(p, x, labels) : CrossEntropy(p, x, labels);
  if (cp_ == nullptr && !router_logits_.empty()) {
    // MixtralForCausalLM.forward: loss += router_aux_loss_coef * aux_loss.to(loss.device).
    at::Tensor aux = LoadBalancingLoss(router_logits_, spec_.moe.num_experts, spec_.moe.top_k);
    router_logits_.clear();
    loss = loss + spec_.moe.router_aux_loss_coef * aux.to(loss.scalar_type());
  }
  return loss;
}

// Materialised logits, upcast to fp32, F.cross_entropy: the micro-batch's mean without cp.
at::Tensor Transformer::CrossEntropy(const ParamTable& p, const at::Tensor& x,
                                     const at::Tensor& labels) const {
  at::Tensor logits = spec_.tied_embeddings  // [B, S, V]; LoRA may target lm_head
                          ? at::linear(x, Get(p, "model.embed_tokens.weight"))
                          : Proj(p, "lm_head", x, /*bias=*/false, /*conv1d=*/false);
  if (spec_.final_logit_softcap > 0) {  // Gemma 2: tanh(logits / cap) * cap, before the upcast
    logits = at::tanh(logits / spec_.final_logit_softcap) * spec_.final_logit_softcap;
  }
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

// The same loss through fused_loss.h: the mean over counted labels without cp (F.cross_entropy's
// mean), this rank's share with cp (as above). Plan::Problems refuses an adapter on lm_head with
// the fused loss (it multiplies by the base weight only).
at::Tensor Transformer::FusedCrossEntropy(const ParamTable& p, const at::Tensor& x,
                                          const at::Tensor& labels) const {
  const at::Tensor& w = Get(p, spec_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  at::Tensor flat = x.reshape({-1, spec_.hidden});
  at::Tensor lab = labels.reshape({-1});
  at::Tensor scale =
      cp_ == nullptr
          ? at::reciprocal(lab.ne(-100).sum().to(at::kFloat))
          : at::full({}, 1.0 / static_cast<double>(labels.numel() * cp_->size()),
                     x.options().dtype(at::kFloat));
  return FusedLinearCrossEntropy(flat, w, lab, scale, spec_.final_logit_softcap);
}

}  // namespace shardtune::exec
