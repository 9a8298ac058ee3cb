// shardtune's own FSDP runtime (not a wrapper of torch.distributed.fsdp): per FSDP unit a flat
// sharded fp32 parameter; all-gather (param dtype) before the unit's first forward segment,
// free after its last one when it reshards after forward; all-gather again before its backward
// (a hook on the gradient of its last segment's output); after its backward (hooks on the
// parameters' AccumulateGrad nodes) the flat gradient (reduce dtype) is reduce-scattered in the
// shard group, all-reduced across replicas (HSDP) and added to the fp32 sharded gradient.
// FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD(_ZERO2) and NO_SHARD (a shard group of 1, gradients
// all-reduced) are all this one path with different groups and reshard flags.
// Units are gathered per forward segment (embeddings, block, final norm, head): a unit smaller
// than a block (size-based wrapping) stays gathered for its whole block. Frozen parameters and
// LoRA adapters (param_groups.h) make separate flat parameters; frozen ones are gathered and
// freed like the others but have no gradient, reduction or clipping share.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/fsdp/flat_param.h"
#include "executor/recorder.h"
#include "executor/nn/transformer.h"
#include "model/model_spec.h"
#include "model/plan.h"

namespace shardtune::exec {

struct ProcessGroups {
  std::shared_ptr<Communicator> world;      // every rank (loss logging, checkpoints)
  std::shared_ptr<Communicator> shard;      // dp_shard: the unit's shards live here
  std::shared_ptr<Communicator> replicate;  // dp_replicate: same shard index, other replicas
  // Ulysses context parallelism: the cp ranks that share a micro-batch (adjacent global ranks,
  // rank = dp_index * cp + cp_index). Null or size 1: no cp. With cp_fsdp_mesh dp the cp ranks
  // are part of `replicate` (they hold the same shards and all-reduce their gradients).
  std::shared_ptr<Communicator> cp;
  // Expert parallelism (plan.ep > 1, torchtitan's mesh: torchtitan/distributed/parallel_dims.py):
  // `ep`, the ep consecutive ranks of the shard group whose tokens meet at each other's experts
  // (an all-to-all per MoE layer and pass); `expert_shard`, the shard group's ranks with this
  // rank's ep index (efsdp, strided by ep), over which the local experts' unit is sharded.
  // Null: no expert parallelism.
  std::shared_ptr<Communicator> ep;
  std::shared_ptr<Communicator> expert_shard;
};

struct RuntimeOptions {
  model::Plan plan;   // strategy, wrap, dtypes, checkpointing, prefetch, reshard
  int dp_world = 1;   // data-parallel ranks: the gradient sum is divided by it
  uint64_t seed = 0;  // parameter initialization
  at::Device device = at::kCPU;
  int cp = 1;  // Ulysses degree: shard x replicate spans dp_world x cp ranks
};

class FsdpRuntime {
 public:
  // Builds the units of BuildFsdpUnits(spec, plan.wrap), initializes and shards them.
  // REQUIRES: groups.shard->size() * groups.replicate->size() == dp_world * cp (emulated or
  // real); groups.cp of size cp when cp > 1.
  FsdpRuntime(const model::ModelSpec& spec, const RuntimeOptions& options, ProcessGroups groups,
              Recorder* recorder);
  ~FsdpRuntime();
  FsdpRuntime(const FsdpRuntime&) = delete;
  FsdpRuntime& operator=(const FsdpRuntime&) = delete;

  // Forward of one micro-batch: tokens and labels [B, S] int64 (with cp: this rank's slice
  // [B, S / cp] of the cp group's sequences). Returns the mean loss (fp32 scalar) with its
  // graph; with cp, this rank's share of it (its token losses / (B x S)), so that the cp group's
  // shares sum to the micro-batch's mean loss and their gradients to its gradient.
  at::Tensor Forward(const at::Tensor& tokens, const at::Tensor& labels);
  // Backpropagates loss * scale and reduces the gradients into the sharded fp32 gradients.
  // sync false (no_sync, not the last micro-batch): the flat gradients are accumulated
  // unsharded in reduce dtype and no collective runs. Returns after every reduction finished.
  void Backward(const at::Tensor& loss, double scale, bool sync);
  // Clips the sharded gradients to a global L2 norm of max_norm (max_norm <= 0: measure only),
  // as torch.nn.utils.clip_grad_norm_: coef = min(1, max_norm / (norm + 1e-6)). The squared
  // norm is all-reduced over the shard group. Returns the norm before clipping.
  double ClipGradNorm(double max_norm);
  // Drops the sharded gradients (set_to_none).
  void ZeroGrad();
  // torchtitan's MoE load balancing before an optimizer step (Transformer::UpdateExpertBias over
  // the world group); no-op for other models.
  void UpdateExpertBias();
  Transformer& mutable_transformer() { return transformer_; }
  // After the master shards changed (optimizer step, checkpoint load): refreshes the device
  // copies ZeRO-Offload (plan offload optimizer) keeps on a GPU run; no-op otherwise.
  void RefreshDeviceShards();

  // The flat parameters in forward order, and their units (index-aligned). A unit with frozen
  // parameters or LoRA adapters has one flat parameter per group (param_groups.h), each listed
  // with the unit's segments and the group's parameters and name.
  std::vector<FlatParam*> units();
  const std::vector<model::FsdpUnit>& unit_specs() const { return unit_specs_; }
  const ProcessGroups& groups() const { return groups_; }
  const Transformer& transformer() const { return transformer_; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::vector<model::FsdpUnit> unit_specs_;
  ProcessGroups groups_;
  Transformer transformer_;
};

// The at::ScalarType of a plan dtype.
at::ScalarType ToScalarType(model::DType d);

}  // namespace shardtune::exec
