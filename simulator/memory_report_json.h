// JSON for MemoryReport (the `estimate --json` document's memory part).
#pragma once

#include <nlohmann/json.hpp>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/feature_savings.h"
#include "simulator/job_phases.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {

// Keys: "per_rank" {model_state_bytes, peak_bytes (= torch.cuda.max_memory_allocated),
// peak_phase, breakdown {category: bytes}, reserved_bytes, outside_allocator, required_bytes,
// capacity_bytes, headroom_bytes, step0_peak_bytes, steady_peak_bytes, and with the allocator
// replay reserved_step0_bytes, reserved_steady_bytes, largest_free_block_bytes,
// allocator_retries (num_alloc_retries under the capacity), ...}, "fits",
// "judged_on" (`judged_on`: the sentence cli/report_words.h writes from r.judged_by), "host"
// {peak_bytes_per_node, peak_phase, breakdown, capacity_bytes_per_node, fits}, "units" [...],
// "timeline" [...].
nlohmann::ordered_json MemoryReportToJson(const MemoryReport& r, bool with_timeline, const std::string& judged_on);

// The `phases` document: {"fits", "training_fits", "deciding_phase", "capacity_bytes",
// "host_limit_bytes_per_node", "list": [{"phase", "moment", "allocated_peak_bytes", "top" [{name,
// bytes}], "reserved_bytes", "fragmentation_allowance_bytes", "outside_allocator_bytes",
// "nvidia_smi_bytes", "required_bytes", "headroom_bytes", "fits", "host": {...}, "hint"}]}.
nlohmann::ordered_json JobPhasesToJson(const JobPhases& p);

// The `savings_vs_full_finetune` document: {"full_finetune_peak_bytes",
// "full_finetune_required_bytes", "peak_saved_bytes", "features": [{"feature",
// "peak_saved_bytes", "saved_bytes": {figure: bytes}}]}.
nlohmann::ordered_json FeatureSavingsToJson(const FeatureSavings& f);

}  // namespace shardtune::sim
