// Plain-language advice derived from a memory report: why the peak is where it is and which
// change would move it. Each sentence quotes the figures it is based on.
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "planner/offload_advisor.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"

namespace shardtune::plan {

// Returns the advice sentences in order of importance (possibly none). Deterministic.
std::vector<std::string> AdviseOnMemory(const model::Plan& plan, const sim::MemoryReport& report,
                                        const std::vector<Alternative>& alternatives);

}  // namespace shardtune::plan
