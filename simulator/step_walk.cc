// One rank's FSDP2 training steps as a StepProgram, in CPU program order. Rules, with their
// sources: FSDPParamGroup.{pre_forward, post_forward, pre_backward, post_backward},
// foreach_all_gather / foreach_reduce (torch/distributed/fsdp/_fully_shard/), torch/optim/adam.py.
#include "simulator/step_walk.h"

#include <algorithm>

#include "model/errors.h"
#include "model/module_tree.h"
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

int64_t MultiTensorApplyLaunches(const std::vector<int64_t>& numels, int depth,
                                 const MultiTensorApplyLimits& limits) {
  SHARDTUNE_CHECK(depth >= 1 && depth <= 5) << "multi_tensor_apply depth " << depth;
  constexpr int64_t kChunkSize = 65536;
  const int64_t kMaxBlocks = limits.max_blocks;
  const int64_t max_tensors = limits.max_tensors[static_cast<size_t>(depth - 1)];
  // The last non-empty tensor ends the list (the kernel loop's "last chunk" test).
  size_t last = numels.size();
  for (size_t t = numels.size(); t-- > 0;) {
    if (numels[t] > 0) {
      last = t;
      break;
    }
  }
  int64_t launches = 0, tensors = 0, blocks = 0;
  for (size_t t = 0; t < numels.size(); ++t) {
    if (numels[t] <= 0) continue;
    ++tensors;
    int64_t chunks = (numels[t] + kChunkSize - 1) / kChunkSize;
    // Take as many of this tensor's chunks as the open launch has blocks left for.
    for (int64_t c = 0; c < chunks;) {
      int64_t take = std::min(chunks - c, kMaxBlocks - blocks);
      blocks += take;
      c += take;
      bool tensor_done = c == chunks;
      bool tensors_full = tensors == max_tensors && tensor_done;
      bool blocks_full = blocks == kMaxBlocks;
      bool last_chunk = t == last && tensor_done;
      if (tensors_full || blocks_full || last_chunk) {
        ++launches;
        blocks = 0;
        tensors = tensor_done ? 0 : 1;  // a cut tensor carries over
      }
    }
  }
  return launches;
}

std::vector<int64_t> TrainableShardNumels(const model::ModelSpec& spec, const std::vector<model::FsdpUnit>& units,
                                          const model::Plan& plan, int shard_n) {
  // A stable counting sort by segment (segments are 0 .. HeadSegment; the root unit's embedding
  // and head come before the blocks in unit order): one pass to count, one to place.
  const size_t segs = static_cast<size_t>(model::HeadSegment(spec.NumBlocks())) + 1;
  std::vector<size_t> start(segs + 1, 0);
  size_t n = 0;
  for (const auto& u : units) {
    for (const auto& prm : u.params) {
      if (!(prm.requires_grad && plan.Trains())) continue;
      SHARDTUNE_CHECK(prm.segment >= 0 && static_cast<size_t>(prm.segment) < segs) << prm.name;
      ++start[static_cast<size_t>(prm.segment) + 1];
      ++n;
    }
  }
  for (size_t g = 1; g <= segs; ++g) start[g] += start[g - 1];
  std::vector<int64_t> out(n);
  for (const auto& u : units) {
    for (const auto& prm : u.params) {
      if (prm.requires_grad && plan.Trains()) {
        out[start[static_cast<size_t>(prm.segment)]++] = prm.PaddedShardNumel(shard_n);
      }
    }
  }
  return out;
}

int64_t OptimizerKernelLaunches(const model::ModelSpec& spec, const std::vector<model::FsdpUnit>& units,
                                const model::Plan& plan, int shard_n) {
  int64_t tensors = 0;  // the trainable ones: the optimizer holds those only
  for (const auto& u : units) {
    for (const auto& prm : u.params) tensors += prm.requires_grad && plan.Trains() ? 1 : 0;
  }
  if (plan.optimizer_impl == model::OptimizerImpl::kForLoop) return 12 * tensors;
  if (plan.optimizer == model::Optimizer::kAdafactor) return tensors;
  std::vector<int64_t> numels = TrainableShardNumels(spec, units, plan, shard_n);
  auto launches = [&](int depth) { return MultiTensorApplyLaunches(numels, depth, kModelledMultiTensorApply); };
  if (plan.optimizer == model::Optimizer::kSgd) return launches(1) + 2 * launches(2);
  if (plan.optimizer_impl == model::OptimizerImpl::kFused) return launches(4);
  return 4 * launches(1) + 2 * launches(2) + 2 * launches(3);  // depths 1, 2, 1, 3, 2, 1, 1, 3
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
  prog.num_layers = setup.spec->NumBlocks();
  prog.vision_blocks = setup.spec->VisionBlocks();
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
