// Co-located roles: each role's peak next to the others' idle residue (see colocation.h).
#include "simulator/colocation.h"

#include "model/errors.h"

namespace shardtune::sim {

ColocationReport CoLocate(const std::vector<ColocatedRole>& roles, const ColocationOptions& o,
                          const MemoryConstants& k) {
  SHARDTUNE_CHECK(!roles.empty()) << "no roles";
  ColocationReport out;
  out.capacity = roles.front().report.capacity;
  for (const auto& r : roles) {
    RoleUsage u;
    u.name = r.name;
    u.own_required = r.report.required;
    const MemoryReport& m = r.report;
    if (!r.offloaded_when_idle.value_or(o.offload_between_roles)) {
      u.idle_residue.push_back({"sharded parameters", m.sharded_params});
      if (m.optimizer_state.count() > 0)
        u.idle_residue.push_back({"optimizer state", m.optimizer_state});
    }
    if (o.separate_processes) {  // one process shares its workspace, context and communicators
      bool gpu = !m.outside_allocator.empty() &&
                 m.outside_allocator.front().first == "CUDA context and kernels";
      if (gpu) u.idle_residue.push_back({"cuBLAS workspace", k.cublas_workspace});
      for (const auto& kv : m.outside_allocator) u.idle_residue.push_back(kv);
    }
    for (const auto& kv : u.idle_residue) u.idle_total += kv.second;
    out.roles.push_back(std::move(u));
  }
  for (size_t i = 0; i < out.roles.size(); ++i) {
    Bytes others;
    for (size_t j = 0; j < out.roles.size(); ++j) {
      if (j != i) others += out.roles[j].idle_total;
    }
    out.roles[i].colocated_required = out.roles[i].own_required + others;
    if (out.roles[i].colocated_required > out.peak) {
      out.peak = out.roles[i].colocated_required;
      out.peak_role = out.roles[i].name;
    }
  }
  out.fits = out.peak <= out.capacity;
  bool per_role = false;
  for (const auto& r : roles) per_role = per_role || r.offloaded_when_idle.has_value();
  out.judged_on =
      std::string("the running role's required figure plus every idle role's residue (") +
      (per_role ? "each role's own offload between phases: offloaded states leave the GPU, "
                  "others stay resident"
       : o.offload_between_roles ? "states offloaded to the host between phases"
                                 : "sharded parameters and optimizer state stay resident") +
      (o.separate_processes ? "; one process per role: each keeps its CUDA context and NCCL buffers"
                            : "; one process: one CUDA context shared") +
      ") vs the device's usable memory";
  return out;
}

}  // namespace shardtune::sim
