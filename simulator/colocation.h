// Several roles of one RL job on the same GPUs (actor training, reference and log-prob inference,
// rollout): each role's own peak, and the peak per GPU while it runs next to the others' idle
// residue. verl runs its roles in one process per GPU (fused ActorRolloutRefWorker,
// verl/workers/fsdp_workers.py); ROLL runs each role as its own Ray worker process on shared GPUs
// (roll/distributed/scheduler, device_mapping).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/units.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {

struct ColocationOptions {
  // Offload between phases: verl param_offload / optimizer_offload (offload_fsdp_model_to_cpu,
  // offload_fsdp_optimizer, then torch.cuda.empty_cache), ROLL's offload of idle workers. The idle
  // roles then keep no model states on the GPU. false (default): their sharded parameters and
  // optimizer state stay resident.
  bool offload_between_roles = false;
  // true (default, ROLL): every role is its own process with its own CUDA context and NCCL
  // communicators, which stay while it is idle. false (verl's fused worker): one process, whose
  // context and communicators the running role's figure already counts.
  bool separate_processes = true;
};

struct ColocatedRole {
  std::string name;     // e.g. "actor (train)", "reference (infer)"
  MemoryReport report;  // EstimateMemory of that role's plan on the shared cluster
  // This role's own offload between phases (a config's per-role setting, verl's param_offload +
  // optimizer_offload); unset: ColocationOptions::offload_between_roles.
  std::optional<bool> offloaded_when_idle;
};

struct RoleUsage {
  std::string name;
  Bytes own_required;  // the role alone (its report's required figure)
  // What this role leaves on each GPU while another role runs, by item.
  std::vector<std::pair<std::string, Bytes>> idle_residue;
  Bytes idle_total;
  Bytes colocated_required;  // own_required + the idle residue of every other role
};

struct ColocationReport {
  std::vector<RoleUsage> roles;
  Bytes peak;             // the largest colocated_required
  std::string peak_role;  // the role running at that moment
  Bytes capacity;
  bool fits = true;
  std::string judged_on;  // sentence saying what is added
};

// Idle residue of a role: without offload, its sharded parameters and optimizer state (gradients
// are freed by zero_grad(set_to_none=True), activations at the end of its step) and its cuBLAS
// workspace; with offload, only the workspace. Separate processes add the role's CUDA context and
// NCCL buffers. REQUIRES: roles non-empty, all estimated on the same cluster.
ColocationReport CoLocate(const std::vector<ColocatedRole>& roles, const ColocationOptions& options,
                          const MemoryConstants& constants);

}  // namespace shardtune::sim
