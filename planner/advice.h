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

namespace shardtune::planner {

// Returns the advice sentences in order of importance (possibly none). Deterministic.
// `fused_loss`: the same plan with the fused linear cross-entropy (CompareFusedLoss), quoted when
// the peak is in the loss path. `checked_load`: what re-estimating the job with the loads that
// avoid a host peak at load showed (estimate's CheckedLoadAdvice); quoted in that advice line
// instead of the unchecked suggestion when given. `check`: asked for each other change the
// advice is about to suggest (CheckAdvisedChange); a suggestion whose check was evaluated quotes
// its result and is left out when it would not lower the required memory. Without it the
// suggestions are printed unchecked (run's pre-flight message).
std::vector<std::string> AdviseOnMemory(const model::Plan& plan, const sim::MemoryReport& report,
                                        const std::vector<Alternative>& alternatives,
                                        const FusedLossAlternative& fused_loss = {},
                                        const std::string& checked_load = "",
                                        const ChangeChecker& check = {});

}  // namespace shardtune::planner
