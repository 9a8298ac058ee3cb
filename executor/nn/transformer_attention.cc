// The transformer's attention and rotary (transformer.h): q/k/v projections, GQA, MLA
// (modeling_deepseek_v3.py), eager and SDPA cores with sliding windows, sinks and soft-capping,
// packed sequences, and the rotary tables (rotate_half, llama3 / linear / YaRN scaling, M-RoPE).
#include "executor/nn/transformer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "executor/comm/communicator.h"
#include "executor/nn/transformer_pieces.h"
#include "executor/nn/transformer_support.h"
#include "executor/nn/ulysses.h"
#include "model/errors.h"

namespace shardtune::exec {

using internal::Get;
using internal::RotateHalf;

namespace {

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

}  // namespace

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
    if (!sac_.SavesSdpa()) return o;  // a save set without sdpa: the kernel reruns, nothing kept
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

}  // namespace shardtune::exec
