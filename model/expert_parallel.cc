// Expert-parallel checks and all-to-all sizes (see the header).
#include "model/expert_parallel.h"

#include <algorithm>
#include <cmath>

#include "model/dtype.h"
#include "model/errors.h"

namespace shardtune::model {

std::vector<std::string> EpProblems(const ModelSpec& spec, const Plan& plan, const std::string& where) {
  std::vector<std::string> out;
  const int ep = plan.ep;
  if (ep <= 1) return out;  // Plan::Problems reports ep < 1
  auto add = [&](const std::string& expected) {
    out.push_back(where + ":/expert_parallel_degree: expected " + expected + ", got " + std::to_string(ep));
  };
  if (!spec.moe.enabled()) {
    add("1 for " + spec.name + " (a dense model has no experts to split; --ep)");
    return out;
  }
  if (spec.moe.num_experts % ep != 0) {
    add("a divisor of num_experts " + std::to_string(spec.moe.num_experts) + " of " + spec.name +
        " (each rank holds num_experts / ep whole experts; --ep)");
  }
  // --modeling hf with ep > 1 is ROLL's ExpertParallel around transformers 5's experts
  // (model/activations.cc RollExpertParallel), whose ep_experts_forward multiplies by
  // gate_up_proj and down_proj alone: no expert biases (GPT-OSS has them).
  if (plan.modeling == Modeling::kHf && spec.moe.gpt_oss_experts) {
    add("1 with --modeling hf for " + spec.name +
        " (ROLL's ep_experts_forward has no expert biases; --modeling torchtitan models "
        "torchtitan's expert parallelism)");
  }
  if (plan.wrap.expert_units) {
    add("1 with per-expert FSDP units (--wrap-experts): torchtitan shards the local experts as one "
        "unit per layer over the efsdp mesh");
  }
  return out;
}

ExpertAllToAll ExpertAllToAllPerLayer(const ModelSpec& spec, const Plan& plan, int64_t tokens,
                                      double load_factor) {
  ExpertAllToAll a;
  if (plan.ep <= 1 || !spec.moe.enabled()) return a;
  SHARDTUNE_CHECK(tokens >= 0 && load_factor > 0) << tokens << " " << load_factor;
  const int64_t e = BytesPerElement(plan.param_dtype);
  const int64_t rows = tokens * spec.moe.top_k;
  a.received_rows = static_cast<int64_t>(std::ceil(static_cast<double>(rows) * load_factor));
  a.dispatch_bytes = a.received_rows * spec.hidden * e;
  a.combine_bytes = a.dispatch_bytes;
  a.count_bytes = static_cast<int64_t>(spec.moe.num_experts) * 8;
  a.forward_calls = 3;
  a.backward_calls = 2;
  return a;
}

}  // namespace shardtune::model
