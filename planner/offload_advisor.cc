// Offload x checkpointing what-if table for `estimate`.
#include "planner/offload_advisor.h"

namespace shardtune::plan {

std::vector<Alternative> CompareOffloadAndCheckpointing(const model::ModelSpec& spec,
                                                        const profiles::ClusterSpec& cluster,
                                                        const model::Plan& plan,
                                                        const sim::MemoryOptions& options) {
  std::vector<Alternative> out;
  for (auto off : {model::Offload::kNone, model::Offload::kOptimizer, model::Offload::kAll}) {
    for (auto ckpt : {model::Checkpointing::kNone, model::Checkpointing::kFull}) {
      model::Plan p = plan;
      p.offload = off;
      p.checkpointing = ckpt;
      sim::MemoryReport r = sim::EstimateMemory(spec, cluster, p, options);
      Alternative a;
      a.offload = off;
      a.checkpointing = ckpt;
      a.gpu_required = r.required;
      a.gpu_capacity = r.capacity;
      a.gpu_fits = r.fits;
      a.host_peak_per_node = r.host.peak_per_node;
      a.host_capacity_per_node = r.host.capacity_per_node;
      a.host_fits = r.host.fits;
      a.peak_phase = r.peak_phase;
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace shardtune::plan
