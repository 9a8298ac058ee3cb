// Co-located roles: each role's peak next to the others' idle residue (see colocation.h).
#include "simulator/colocation.h"

#include "model/errors.h"

namespace shardtune::sim {
namespace {

// What a role's process keeps on the GPU whatever it runs: its cuBLAS workspace (a GPU process's)
// and what lives outside the allocator (CUDA context, NCCL buffers).
std::vector<std::pair<std::string, Bytes>> ProcessResidue(const MemoryReport& m, const MemoryConstants& k) {
  std::vector<std::pair<std::string, Bytes>> out;
  const bool gpu = !m.outside_allocator.empty() && m.outside_allocator.front().first == "CUDA context and kernels";
  if (gpu) out.push_back({"cuBLAS workspace", k.cublas_workspace});
  out.insert(out.end(), m.outside_allocator.begin(), m.outside_allocator.end());
  return out;
}

}  // namespace

ColocationReport CoLocate(const std::vector<ColocatedRole>& roles, const ColocationOptions& o,
                          const MemoryConstants& k) {
  SHARDTUNE_CHECK(!roles.empty()) << "no roles";
  ColocationReport out;
  out.capacity = roles.front().report.capacity;
  // The trainer process's context and communicators, which stay while an engine runs (one
  // process for the trainer roles: the first report's; separate processes: each role's residue
  // already holds its own).
  std::vector<std::pair<std::string, Bytes>> trainer_process;
  for (const auto& r : roles) {
    if (!r.engine && !o.separate_processes) {
      trainer_process = ProcessResidue(r.report, k);
      break;
    }
  }
  for (const auto& r : roles) {
    RoleUsage u;
    u.name = r.name;
    if (r.engine) {
      u.own_required = r.engine->running;
      u.idle_residue = r.engine->idle_items;
      for (const auto& kv : u.idle_residue) u.idle_total += kv.second;
      out.roles.push_back(std::move(u));
      continue;
    }
    u.own_required = r.report.required;
    if (r.states_of) {  // the other role's states: nothing of its own stays
      out.roles.push_back(std::move(u));
      continue;
    }
    const MemoryReport& m = r.report;
    if (!r.offloaded_when_idle.value_or(o.offload_between_roles)) {
      u.idle_residue.push_back({"sharded parameters", m.sharded_params});
      if (m.optimizer_state.count() > 0)
        u.idle_residue.push_back({"optimizer state", m.optimizer_state});
    }
    if (o.separate_processes) {  // one process shares its workspace, context and communicators
      for (auto& kv : ProcessResidue(m, k)) u.idle_residue.push_back(std::move(kv));
    }
    for (const auto& kv : u.idle_residue) u.idle_total += kv.second;
    out.roles.push_back(std::move(u));
  }
  for (size_t i = 0; i < out.roles.size(); ++i) {
    Bytes others;
    for (size_t j = 0; j < out.roles.size(); ++j) {
      if (j == i) continue;
      others += out.roles[j].idle_total;
      if (roles[i].states_of == j) {  // its parameters are already in this role's figure
        for (const auto& kv : out.roles[j].idle_residue) {
          if (kv.first == "sharded parameters") others -= kv.second;
        }
      }
    }
    if (roles[i].engine) {
      for (const auto& kv : trainer_process) others += kv.second;
    }
    out.roles[i].colocated_required = out.roles[i].own_required + others;
    if (out.roles[i].colocated_required > out.peak) {
      out.peak = out.roles[i].colocated_required;
      out.peak_role = out.roles[i].name;
    }
  }
  out.fits = out.peak <= out.capacity;
  bool per_role = false;
  int engines = 0;
  for (const auto& r : roles) {
    per_role = per_role || r.offloaded_when_idle.has_value();
    engines += r.engine.has_value() ? 1 : 0;
  }
  out.per_role_offload = per_role;
  out.offload_between_roles = o.offload_between_roles;
  out.separate_processes = o.separate_processes;
  out.engines = engines;
  return out;
}

ColocatedRole RolloutEngineRole(const std::string& role, const std::string& engine_name,
                                double gpu_memory_utilization, bool free_cache_engine,
                                bool enforce_eager, Bytes usable_memory, const MemoryConstants& k) {
  ColocatedRole r;
  r.name = role + " (" + engine_name + ")";
  EngineFigures e;
  const Bytes share = Bytes::Of(static_cast<int64_t>(
      gpu_memory_utilization * static_cast<double>(usable_memory.count())));
  e.running_items = {{engine_name + " share (gpu_memory_utilization)", share},
                     {"CUDA context and kernels", k.cuda_context}};
  for (const auto& kv : e.running_items) e.running += kv.second;
  if (free_cache_engine) {
    e.idle_items.push_back({"CUDA context and kernels", k.cuda_context});
    if (!enforce_eager) e.idle_items.push_back({"CUDA graph pool (guess)", Bytes::Of(kEngineCudaGraphPoolGuessBytes)});
  } else {
    e.idle_items = e.running_items;  // the KV cache and weights stay allocated
  }
  r.engine = std::move(e);
  return r;
}

}  // namespace shardtune::sim
