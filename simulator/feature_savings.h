// What frozen parameters, LoRA, the tiled MLP, per-expert units and an inference role save per
// rank compared with the plain full fine-tune of the same plan, feature by feature.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "model/units.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {

// One feature's effect: bytes per rank it saves (negative: costs) in each figure that changed.
struct FeatureSaving {
  std::string feature;  // "frozen", "LoRA", "tiled MLP", "expert units", "inference role"
  std::vector<std::pair<std::string, Bytes>> saved;  // e.g. {"optimizer state", 12.4 GiB}
  Bytes peak_saved;  // change of peak allocated (torch max_memory_allocated)
};

struct FeatureSavings {
  Bytes full_finetune_peak;      // peak allocated of the plain full fine-tune
  Bytes full_finetune_required;  // its judged figure (peak + fragmentation + outside)
  std::vector<FeatureSaving>
      features;            // in the order they are added (see below); empty: plain plan
  Bytes total_peak_saved;  // full_finetune_peak - the plan's peak
};

// True when the plan uses any of the features (frozen, LoRA, tiled MLP, expert units, infer).
bool UsesFeatures(const model::Plan& plan);

// Adds the plan's features one at a time to the plain full fine-tune (role train, nothing frozen,
// no LoRA, no tiled MLP, no expert units) in the order frozen, LoRA, tiled MLP, expert units,
// inference role, and attributes each step's change to the feature added; the steps sum to the
// total. Figures compared: sharded parameters, sharded gradients, optimizer state, the peaks of
// saved activations, activation working set, gathered parameters, unsharded gradients and
// reduce-scatter buffers, the host RAM per node (CPU offload keeps the states there), and the
// peak allocated.
// `report` is EstimateMemory(spec, cluster, plan, options). REQUIRES: the plan valid for the model.
FeatureSavings CompareWithFullFinetune(const model::ModelSpec& spec,
                                       const profiles::ClusterSpec& cluster,
                                       const model::Plan& plan, const MemoryOptions& options,
                                       const MemoryReport& report);

}  // namespace shardtune::sim
