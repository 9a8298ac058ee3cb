// Frozen parameters and LoRA adapters in the executor (issue #9): which flat parameters an FSDP
// unit becomes. model::ApplyTrainability (model/trainable.h, shared with the planner) marks each
// parameter's requires_grad and adds the adapters; here a unit's trainable and frozen parameters
// go into separate flat parameters, as FSDP1 requires one requires_grad per FlatParameter
// (use_orig_params=False) and FSDP2 reduce-scatters only the parameters that have a gradient
// (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, post_backward:
// `fsdp_params_with_grad`). Each is sharded and all-gathered; only a trainable one gets a
// gradient, a reduce-scatter, a clipping share and AdamW state. LoRA adapters (Hu et al. 2021,
// eq. 3: A [r, in], B [out, r]) have their own flat parameter, gathered in the plan's lora.dtype.
#pragma once

#include <vector>

#include "model/model_spec.h"
#include "model/module_tree.h"
#include "model/plan.h"

namespace shardtune::exec {

// One flat parameter of an FSDP unit: the unit's segments, a subset of its parameters, and a
// name: the unit's for its trainable base parameters, "<unit> [frozen]" for frozen base ones,
// "<unit> [lora]" for the adapters ("<unit> [lora frozen]" when they do not train).
struct FlatParamGroup {
  model::FsdpUnit unit;
  bool trainable = true;
  bool lora = false;  // adapters: gathered in the plan's lora.dtype
};

// Splits `units` (BuildFsdpUnits order, non-empty) after model::ApplyTrainability. Groups keep
// the unit order; within a unit: trainable base, frozen base, adapters; empty groups are left out.
// REQUIRES: model::TrainabilityProblems(spec, plan, ...) empty.
std::vector<FlatParamGroup> SplitUnits(const model::ModelSpec& spec,
                                       const std::vector<model::FsdpUnit>& units,
                                       const model::Plan& plan);

}  // namespace shardtune::exec
