// Feature-by-feature memory savings against the plain full fine-tune (see feature_savings.h).
#include "simulator/feature_savings.h"

#include <functional>

namespace shardtune::sim {
namespace {

Bytes CategoryPeak(const MemoryReport& r, Category c) {
  for (const auto& [name, b] : r.category_peaks) {
    if (name == ToString(c)) return b;
  }
  return Bytes();
}

std::vector<std::pair<std::string, Bytes>> Figures(const MemoryReport& r) {
  std::vector<std::pair<std::string, Bytes>> f = {{"sharded parameters", r.sharded_params},
          {"sharded gradients", r.sharded_grads},
          {"optimizer state", r.optimizer_state},
          {"saved activations (peak)", CategoryPeak(r, Category::kActivations)},
          {"activation working set (peak)", CategoryPeak(r, Category::kWorkingSet)},
          {"gathered parameters (peak)", CategoryPeak(r, Category::kGathered)},
          {"unsharded gradients (peak)", CategoryPeak(r, Category::kUnshardedGrads)},
          {"reduce-scatter buffers (peak)", CategoryPeak(r, Category::kReduceScatterBuffers)},
          {"host RAM per node (peak)", r.host.peak_per_node}};
  // A VL model's tower, what freezing it saves (its own category; 0 for a text model, and the
  // comparison drops rows that do not change). Always present: reports are compared row by row.
  f.insert(f.begin() + 4, {"vision tower activations (peak)", CategoryPeak(r, Category::kVisionActivations)});
  return f;
}

}  // namespace

bool UsesFeatures(const model::Plan& p) {
  return !p.frozen_prefixes.empty() || p.lora.enabled() || p.tiled_mlp_shards > 1 ||
         p.wrap.expert_units || !p.Trains();
}

FeatureSavings CompareWithFullFinetune(const model::ModelSpec& spec,
                                       const profiles::ClusterSpec& cluster,
                                       const model::Plan& plan, const MemoryOptions& options,
                                       const MemoryReport& report) {
  FeatureSavings out;
  model::Plan cur = plan;
  cur.role = model::Role::kTrain;
  cur.frozen_prefixes.clear();
  cur.lora = model::LoraSpec{};
  cur.tiled_mlp_shards = 1;
  cur.wrap.expert_units = false;
  ModelCache cache;
  MemoryReport prev = EstimateMemoryReport(spec, cluster, cur, options, &cache);
  out.full_finetune_peak = prev.peak_allocated;
  out.full_finetune_required = prev.required;
  struct Step {
    const char* name;
    bool on;
    std::function<void(model::Plan*)> apply;
  };
  const std::vector<Step> steps{
      {"frozen", !plan.frozen_prefixes.empty(),
       [&](model::Plan* p) { p->frozen_prefixes = plan.frozen_prefixes; }},
      {"LoRA", plan.lora.enabled(), [&](model::Plan* p) { p->lora = plan.lora; }},
      {"tiled MLP", plan.tiled_mlp_shards > 1,
       [&](model::Plan* p) { p->tiled_mlp_shards = plan.tiled_mlp_shards; }},
      {"expert units", plan.wrap.expert_units,
       [&](model::Plan* p) { p->wrap.expert_units = true; }},
      {"inference role", !plan.Trains(), [&](model::Plan* p) { p->role = plan.role; }},
  };
  int remaining = 0;
  for (const auto& s : steps) remaining += s.on ? 1 : 0;
  for (const auto& s : steps) {
    if (!s.on) continue;
    s.apply(&cur);
    // The last step is the plan itself: reuse its report.
    MemoryReport next =
        --remaining == 0
            ? report
            : EstimateMemoryReport(spec, cluster, cur, options, &cache);
    FeatureSaving f;
    f.feature = s.name;
    auto a = Figures(prev), b = Figures(next);
    for (size_t i = 0; i < a.size(); ++i) {
      Bytes d = a[i].second - b[i].second;
      if (d.count() != 0) f.saved.push_back({a[i].first, d});
    }
    f.peak_saved = prev.peak_allocated - next.peak_allocated;
    out.features.push_back(std::move(f));
    prev = std::move(next);
  }
  out.total_peak_saved = out.full_finetune_peak - report.peak_allocated;
  return out;
}

}  // namespace shardtune::sim
