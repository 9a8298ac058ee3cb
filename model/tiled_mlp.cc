// Tiled MLP activations and recompute FLOPs (see tiled_mlp.h for the mechanism and sources).
#include "model/tiled_mlp.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/errors.h"

namespace shardtune::model {
namespace {

bool MlpIntermediate(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  return starts("mlp.") || starts("moe.experts") || starts("moe.shared_expert");
}

}  // namespace

BlockActivations TiledMlpBlockActivations(const ModelSpec& spec, const ActivationOptions& opt,
                                          int shards, double moe_capacity_factor,
                                          const Trainability& trainability) {
  SHARDTUNE_CHECK(shards >= 1 && moe_capacity_factor > 0) << shards << " " << moe_capacity_factor;
  BlockActivations full = ComputeBlockActivations(spec, opt, trainability);
  bool capacity = spec.moe.enabled() && moe_capacity_factor != 1.0;
  if (shards == 1 && !capacity) return full;
  ModelSpec tile = spec;
  auto div = [&](double v) {
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(v / shards)));
  };
  int64_t fe = spec.moe.expert_ffn_hidden > 0 ? spec.moe.expert_ffn_hidden : spec.ffn_hidden;
  int64_t fs = spec.moe.shared_expert_ffn_hidden > 0 ? spec.moe.shared_expert_ffn_hidden : fe;
  tile.ffn_hidden = div(static_cast<double>(spec.ffn_hidden));
  if (spec.moe.enabled()) {
    tile.moe.expert_ffn_hidden = div(static_cast<double>(fe) * moe_capacity_factor);
    tile.moe.shared_expert_ffn_hidden = div(static_cast<double>(fs));
  }
  BlockActivations t = ComputeBlockActivations(tile, opt, trainability);
  SHARDTUNE_CHECK(t.full.backward_profile.size() == full.full.backward_profile.size())
      << "tiled ledger has another graph";
  BlockActivations out = t;
  out.full.saved.clear();
  out.full.saved_per_token = 0;
  bool input_saved = false;
  for (const auto& s : t.full.saved) {
    if (shards > 1 && MlpIntermediate(s.name)) continue;
    input_saved = input_saved || s.name == "post_attention_layernorm output";
    out.full.saved.push_back(s);
    out.full.saved_per_token += s.bytes_per_token;
  }
  // TiledMLP.forward saves its input x (ctx.save_for_backward) whenever its node exists. With
  // frozen MLP weights no projection saves the post-attention norm's output, so x is added here.
  if (shards > 1 && !input_saved && out.full.saved_per_token > 0) {
    double x = static_cast<double>(BytesPerElement(opt.dtype) * spec.hidden);
    out.full.saved.push_back({"TiledMLP input (saved by its autograd Function)", x});
    out.full.saved_per_token += x;
  }
  for (size_t i = 0; i < out.full.backward_profile.size(); ++i) {
    out.full.backward_profile[i].param_grad_fraction =
        full.full.backward_profile[i].param_grad_fraction;
  }
  out.full.elementwise_traffic_per_token = full.full.elementwise_traffic_per_token;
  out.selective_per_token = std::min(t.selective_per_token, out.full.saved_per_token);
  if (shards > 1) out.sac_ops.clear();  // op-level SAC save sets are not modelled over the tiles
  out.checkpoint_input_per_token = full.checkpoint_input_per_token;
  if (shards == 1) {
    out.full.forward_ops = full.full.forward_ops;
    out.full.backward_ops = full.full.backward_ops;
  }
  return out;
}

Flops MlpForwardFlopsPerToken(const ModelSpec& s, int layer) {
  double h = static_cast<double>(s.hidden);
  double mats = s.mlp == MlpKind::kSwiGlu ? 3 : 2;
  if (!s.MoeLayer(layer)) return Flops::Of(2 * mats * h * static_cast<double>(s.ffn_hidden));
  const MoeSpec& m = s.moe;
  double fe = static_cast<double>(m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : s.ffn_hidden);
  double fs = m.shared_expert_ffn_hidden > 0 ? static_cast<double>(m.shared_expert_ffn_hidden) : fe;
  return Flops::Of(2 * mats * h * (m.top_k * fe + m.num_shared_experts * fs));
}

}  // namespace shardtune::model
