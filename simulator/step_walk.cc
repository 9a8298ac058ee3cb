// One rank's FSDP2 training steps as a StepProgram, in CPU program order. Rules, with their
// sources: FSDPParamGroup.{pre_forward, post_forward, pre_backward, post_backward},
// foreach_all_gather / foreach_reduce (torch/distributed/fsdp/_fully_shard/), torch/optim/adam.py.
#include "simulator/step_walk.h"

#include <algorithm>

#include "model/errors.h"
#include "simulator/step_walk_rules.h"

namespace shardtune::sim {

int64_t ShardedParamBytesPerElement(const model::Plan& plan) {
  // ZeRO-Offload of the optimizer keeps only param-dtype shards on the GPU (Ren et al. 2021).
  if (plan.offload == model::Offload::kOptimizer) return model::BytesPerElement(plan.param_dtype);
  return model::BytesPerElement(plan.master_dtype);
}

StepProgram BuildStepProgram(const WalkSetup& setup) {
  SHARDTUNE_CHECK(setup.spec && setup.plan && setup.units && setup.block && setup.head) << "incomplete setup";
  StepProgram prog;
  prog.num_layers = setup.spec->num_layers;
  prog.grad_accum = setup.plan->grad_accum;
  for (const auto& u : *setup.units) prog.unit_names.push_back(u.name);
  internal::Walker(setup, &prog).Run();
  return prog;
}

}  // namespace shardtune::sim
