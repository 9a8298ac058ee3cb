// One rank's FSDP2 training steps as a StepProgram, in CPU program order. Rules, with their
// sources: FSDPParamGroup.{pre_forward, post_forward, pre_backward, post_backward},
// foreach_all_gather / foreach_reduce (torch/distributed/fsdp/_fully_shard/), torch/optim/adam.py.
#include "simulator/step_walk.h"

#include <algorithm>

#include "model/errors.h"
#include "simulator/step_walk_rules.h"

namespace shardtune::sim {

int64_t ShardedBytesPerElement(const model::Plan& plan, const model::ParamTensor& param) {
  // ZeRO-Offload of the optimizer keeps only param-dtype shards on the GPU (Ren et al. 2021).
  if (plan.offload == model::Offload::kOptimizer) return model::BytesPerElement(plan.param_dtype);
  // Adapters keep their own dtype in the sharded state (FSDP2 casts every parameter of a unit to
  // param_dtype for compute; MixedPrecisionPolicy only requires trainable ones to share a dtype,
  // FSDPParamGroup._init_mp_dtypes). Frozen ones keep the dtype they were loaded in.
  if (param.lora_adapter) return model::BytesPerElement(plan.lora.dtype);
  bool trains = param.requires_grad && plan.Trains();
  return model::BytesPerElement(trains ? plan.master_dtype : plan.FrozenDtype());
}

StepProgram BuildStepProgram(const WalkSetup& setup, StepProgram&& storage) {
  SHARDTUNE_CHECK(setup.spec && setup.plan && setup.units && setup.block && setup.head) << "incomplete setup";
  StepProgram prog;
  prog.ops = std::move(storage.ops);
  prog.actions = std::move(storage.actions);
  prog.tensors = std::move(storage.tensors);
  prog.ops.clear();
  prog.actions.clear();
  prog.tensors.clear();
  prog.num_layers = setup.spec->num_layers;
  prog.grad_accum = setup.plan->grad_accum;
  prog.repeats_of_last_leading_micro_batch = prog.repeats_in_step0 = 0;
  int repeats = std::max(0, setup.plan->grad_accum - kWalkedLeadingMicroBatches - 1);
  if (setup.skip_repeated_micro_batches) {
    prog.repeats_of_last_leading_micro_batch = repeats;
  } else if (setup.skip_repeated_micro_batches_in_step0) {
    prog.repeats_in_step0 = repeats;
  }
  for (const auto& u : *setup.units) prog.unit_names.push_back(u.name);
  internal::Walker(setup, &prog).Run();
  return prog;
}

ForwardEndBound ForwardEndLowerBound(const WalkSetup& setup) {
  SHARDTUNE_CHECK(setup.spec && setup.plan && setup.units && setup.block && setup.head) << "incomplete setup";
  StepProgram unused;
  return internal::Walker(setup, &unused).ForwardEndLowerBound();
}

}  // namespace shardtune::sim
