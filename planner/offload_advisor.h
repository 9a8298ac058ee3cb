// What-if answers for one job: the same model, cluster and plan with each choice of CPU offload
// and activation checkpointing, so `estimate` can say which ones fit on the GPU and on the host.
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"

namespace shardtune::plan {

struct Alternative {
  model::Offload offload = model::Offload::kNone;
  model::Checkpointing checkpointing = model::Checkpointing::kNone;
  Bytes gpu_required;        // per rank, the figure `fits` is judged on
  Bytes gpu_capacity;
  bool gpu_fits = false;
  Bytes host_peak_per_node;
  Bytes host_capacity_per_node;
  bool host_fits = false;
  std::string peak_phase;
  bool fits() const { return gpu_fits && host_fits; }
};

// Evaluates offload in {none, optimizer, all} x checkpointing in {none, full} with every other
// knob as in `plan`. Deterministic; order: offload-major.
std::vector<Alternative> CompareOffloadAndCheckpointing(const model::ModelSpec& spec,
                                                        const profiles::ClusterSpec& cluster,
                                                        const model::Plan& plan,
                                                        const sim::MemoryOptions& options);

// The same plan with the fused linear cross-entropy (Plan::loss_kernel fused_linear), for a plan
// that uses the materialised logits and could use it (training, logits not held, no lm_head
// adapter: Plan::Problems); `evaluated` false otherwise.
struct FusedLossAlternative {
  bool evaluated = false;
  Bytes peak_allocated, required;
  bool fits = false;
  std::string peak_phase;
};
FusedLossAlternative CompareFusedLoss(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                      const model::Plan& plan, const sim::MemoryOptions& options);

}  // namespace shardtune::plan
