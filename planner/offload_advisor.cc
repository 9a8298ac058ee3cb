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

FusedLossAlternative CompareFusedLoss(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                      const model::Plan& plan, const sim::MemoryOptions& options) {
  FusedLossAlternative a;
  if (plan.loss_kernel != model::LossKernel::kCrossEntropy || !plan.Trains()) return a;
  model::Plan p = plan;
  p.loss_kernel = model::LossKernel::kFusedLinear;
  if (!p.Problems("plan", cluster.world_size(), cluster.gpus_per_node, spec.num_layers,
                  spec.max_seq_len)
           .empty()) {
    return a;
  }
  sim::MemoryReport r = sim::EstimateMemory(spec, cluster, p, options);
  a.evaluated = true;
  a.peak_allocated = r.peak_allocated;
  a.required = r.required;
  a.fits = r.fits;
  a.peak_phase = r.peak_phase;
  return a;
}

}  // namespace shardtune::plan
