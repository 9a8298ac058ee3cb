// MemoryReport -> JSON with units in every key (README.md "Conventions").
#include "simulator/memory_report_json.h"

namespace shardtune::sim {
namespace {
nlohmann::ordered_json PairsToJson(const std::vector<std::pair<std::string, Bytes>>& v) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& kv : v) j[kv.first] = kv.second.count();
  return j;
}
}  // namespace

nlohmann::ordered_json MemoryReportToJson(const MemoryReport& r, bool with_timeline, const std::string& judged_on) {
  nlohmann::ordered_json pr;
  pr["world_size"] = r.world;
  pr["shard_group_size"] = r.shard_group;
  pr["replicas"] = r.replicas;
  pr["cp"] = r.cp;
  pr["cp_fsdp_mesh"] = r.cp_fsdp_mesh;
  pr["all_to_all_bytes_per_layer"] = r.all_to_all_bytes_per_layer.count();
  pr["expert_parallel_degree"] = r.ep;
  pr["expert_shard_group_size"] = r.expert_shard_group;
  pr["expert_all_to_all_bytes_per_layer"] = r.expert_all_to_all_bytes_per_layer.count();
  pr["parameters"] = r.parameters;
  pr["trainable_parameters"] = r.trainable_parameters;
  pr["lora_adapter_parameters"] = r.adapter_parameters;
  pr["model_state_bytes"] = r.model_state.count();
  pr["sharded_params_bytes"] = r.sharded_params.count();
  pr["frozen_sharded_params_bytes"] = r.frozen_sharded_params.count();
  pr["frozen_dtype"] = r.frozen_dtype;
  pr["sharded_grads_bytes"] = r.sharded_grads.count();
  pr["optimizer_state_bytes"] = r.optimizer_state.count();
  pr["peak_bytes"] = r.peak_allocated.count();
  pr["peak_allocated_bytes"] = r.peak_allocated.count();
  pr["peak_phase"] = r.peak_phase;
  pr["breakdown"] = PairsToJson(r.peak_breakdown);
  pr["category_peaks"] = PairsToJson(r.category_peaks);
  pr["step0_peak_bytes"] = r.step0_peak.count();
  pr["steady_peak_bytes"] = r.steady_peak.count();
  pr["reserved_bytes"] = r.reserved_no_pressure.count();
  pr["fragmentation_allowance_bytes"] = r.fragmentation.count();
  if (r.allocator_replayed) {
    pr["reserved_step0_bytes"] = r.reserved_step0.count();
    pr["reserved_steady_bytes"] = r.reserved_steady.count();
    pr["largest_free_block_bytes"] = r.largest_free_block.count();
    pr["allocator_retries"] = r.allocator_retries;
  }
  pr["outside_allocator"] = PairsToJson(r.outside_allocator);
  pr["outside_allocator_bytes"] = r.outside_total.count();
  pr["nvidia_smi_bytes"] = (r.reserved_no_pressure + r.outside_total).count();
  pr["required_bytes"] = r.required.count();
  pr["capacity_bytes"] = r.capacity.count();
  pr["headroom_bytes"] = (r.capacity - r.required).count();
  nlohmann::ordered_json j;
  j["per_rank"] = pr;
  j["fits"] = r.fits;
  j["judged_on"] = judged_on;
  nlohmann::ordered_json host;
  host["peak_bytes_per_node"] = r.host.peak_per_node.count();
  host["peak_phase"] = r.host.peak_phase;
  host["breakdown"] = PairsToJson(r.host.breakdown);
  host["capacity_bytes_per_node"] = r.host.capacity_per_node.count();
  host["fits"] = r.host.fits;
  j["host"] = host;
  nlohmann::ordered_json units = nlohmann::ordered_json::array();
  for (const auto& u : r.units) {
    units.push_back({{"name", u.name},
                     {"parameters", u.parameters},
                     {"shard_bytes", u.shard_bytes.count()},
                     {"gathered_bytes", u.gathered_bytes.count()},
                     {"first_segment", u.first_segment},
                     {"last_segment", u.last_segment},
                     {"trainable_parameters", u.trainable}});
  }
  j["units"] = units;
  if (with_timeline) {
    nlohmann::ordered_json t = nlohmann::ordered_json::array();
    for (const auto& p : r.timeline) {
      t.push_back({{"phase", p.phase}, {"allocated_peak_bytes", p.allocated_peak.count()},
                   {"allocated_after_bytes", p.allocated_after.count()}});
    }
    j["timeline"] = t;
  }
  return j;
}

nlohmann::ordered_json JobPhasesToJson(const JobPhases& p) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& ph : p.phases) {
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const auto& kv : ph.top) top.push_back({{"name", kv.first}, {"bytes", kv.second.count()}});
    nlohmann::ordered_json host = {{"moment", ph.host_moment},
                                   {"pinned_bytes_per_node", ph.host_pinned.count()},
                                   {"pageable_bytes_per_node", ph.host_pageable.count()},
                                   {"total_bytes_per_node", ph.host_total.count()},
                                   {"breakdown", PairsToJson(ph.host_breakdown)},
                                   {"fits", ph.host_fits}};
    list.push_back({{"phase", ToString(ph.phase)}, {"moment", ph.moment},
                    {"allocated_peak_bytes", ph.allocated_peak.count()}, {"top", top},
                    {"reserved_bytes", ph.reserved.count()},
                    {"fragmentation_allowance_bytes", ph.fragmentation.count()},
                    {"outside_allocator_bytes", ph.outside.count()},
                    {"nvidia_smi_bytes", ph.nvidia_smi.count()}, {"required_bytes", ph.required.count()},
                    {"headroom_bytes", ph.headroom.count()}, {"fits", ph.fits}, {"host", host},
                    {"hint", ph.hint}});
  }
  nlohmann::ordered_json j;
  j["fits"] = p.fits;
  j["training_fits"] = p.training_fits;
  j["deciding_phase"] = p.phases.empty() ? "" : ToString(p.phases[static_cast<size_t>(p.deciding)].phase);
  j["capacity_bytes"] = p.capacity.count();
  j["host_limit_bytes_per_node"] = p.host_limit.count();
  j["list"] = list;
  return j;
}

nlohmann::ordered_json FeatureSavingsToJson(const FeatureSavings& f) {
  nlohmann::ordered_json j;
  j["full_finetune_peak_bytes"] = f.full_finetune_peak.count();
  j["full_finetune_required_bytes"] = f.full_finetune_required.count();
  j["peak_saved_bytes"] = f.total_peak_saved.count();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& x : f.features) {
    list.push_back({{"feature", x.feature},
                    {"peak_saved_bytes", x.peak_saved.count()},
                    {"saved_bytes", PairsToJson(x.saved)}});
  }
  j["features"] = list;
  return j;
}

}  // namespace shardtune::sim
