// The transformer's MLP and MoE (transformer.h): SwiGLU, GeGLU and GELU MLPs, HF's dropless
// MoE blocks (Mixtral, Qwen-MoE with its shared expert, DeepSeek's routers, GPT-OSS's experts),
// torchtitan's grouped MoE, and the load-balancing loss.
#include "executor/nn/transformer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)

#include <functional>
#include <limits>
#include <tuple>

#include "executor/comm/communicator.h"
#include "executor/nn/torchtitan_ops.h"
#include "executor/nn/transformer_pieces.h"

namespace shardtune::exec {

using internal::Get;
using internal::GeluPiece;
using internal::SwiGluPiece;

namespace {

// GPT-OSS's clamped SwiGLU constants, the same in both codes: transformers' GptOssExperts.alpha
// and .limit (hard-coded), torchtitan's swiglu(alpha=1.702) with GptOssGroupedExperts.Config
// .swiglu_limit (7.0 in every published config).
constexpr double kGptOssSwigluAlpha = 1.702;
constexpr double kGptOssSwigluLimit = 7.0;

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

// Gemma's MLP: gelu_pytorch_tanh(gate) x up (a GeGLU). inputs: gate, up.
at::Tensor GeGluPiece(const std::vector<at::Tensor>& in, double /*unused*/) {
  return at::gelu(in[0], "tanh") * in[1];
}

}  // namespace

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
  for (const std::vector<at::Tensor>& w : up_weights) up.push_back(TapedGroupedLinear(rows, counts, w));
  if (fused) up = up[0].chunk(2, -1);
  Piece act = ActivationPiece(up);
  at::Tensor h = Run(act);
  at::Tensor out = TapedGroupedLinear(h, counts, down_weights);
  Drop(h, act, {out});
  return out;
}

at::Tensor Transformer::TapedGroupedLinear(const at::Tensor& rows, const std::vector<int64_t>& counts,
                                           at::TensorList weights) const {
  // Op SAC in a torchtitan MoE block: the experts' w1, w3, w2 are the tape's projections 4-6
  // (after wq, wk, wv, wo; the router's gate, force-recomputed, is not asked). torchtitan's rule
  // keeps none of them (model::SacUncountedProjections); an explicit save set may.
  return sac_.Projection(true, [&](const at::Tensor& kept) { return GroupedLinear(rows, counts, weights, kept); });
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

}  // namespace shardtune::exec
