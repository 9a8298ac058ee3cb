// Builds the StepProgram of one rank: FSDP2's allocation and communication rules applied to a
// model's units and activations through two optimizer steps (step 0 creates optimizer state
// lazily; step 1 is the steady state).
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "model/activations.h"
#include "model/model_spec.h"
#include "model/module_tree.h"
#include "model/plan.h"
#include "simulator/step_program.h"

namespace shardtune::sim {

struct WalkSetup {
  const model::ModelSpec* spec = nullptr;
  const model::Plan* plan = nullptr;
  const std::vector<model::FsdpUnit>* units = nullptr;
  int shard_n = 1;        // ranks a unit is sharded over
  int replicas = 1;       // HSDP replicas (all-reduce group size)
  int64_t seq_len = 1;    // S
  int64_t workspace_bytes = 0;  // persistent library workspaces (cuBLAS) on the compute stream
  double moe_capacity_factor = 1.0;  // MemoryOptions::moe_capacity_factor (expert-parallel all-to-alls)
  // shardtune's own executor on CPU ranks (Gloo): its reduce-scatter is an all-to-all into a
  // receive buffer as large as the input, then a local sum (executor/comm/gloo_communicator.cc),
  // alive until the reduction is waited for.
  bool reduce_scatter_receive_buffer = false;
  // A full fine-tune's block: the compute ops' traffic and kernels, and an inference role's
  // working set.
  const model::BlockActivations* block = nullptr;
  // Per block, what it records under frozen parameters or LoRA (saved activations, working sets);
  // empty: `block` for every block.
  std::vector<const model::BlockActivations*> blocks;
  const model::ActivationLedger* head = nullptr;
  // A VL model's images of the plan (model::VisionLoadOf): the tower's patches per text token
  // and per image. With none the tower does not run (its segments are skipped: no all-gather, no
  // compute); with some, `blocks` holds every block's ledger, the vision blocks' first.
  model::VisionLoad vision;
  // Record StepProgram::tensors (each tensor PyTorch allocates separately, with identities) for
  // the caching-allocator replay. Costs time per plan; the planner's search leaves it off.
  bool record_tensors = false;
  // Walk only the first kWalkedLeadingMicroBatches micro-batches and the last of each step
  // (false: all of them). The ones in between start from the state the one before them left
  // (accumulated gradients, no_sync buffers and kept logits exist from the second on; the third
  // starts from the state the second leaves) and allocate and free the same bytes in the same
  // order, so the ledger's peaks, their moments and the categories are those of the full walk
  // (tests/simulator/micro_batch_skip_test.cc checks this against full walks over random plans).
  // The program then lacks those ops (StepProgram::repeats_of_last_leading_micro_batch), so it
  // cannot be scheduled in time; the allocator replay lays them out from the last leading one
  // (allocator_sim.h ReplayAllocator). The planner's memory screening and replays use it.
  bool skip_repeated_micro_batches = false;
  // The same in step 0 only (StepProgram::repeats_in_step0): for a program only step 1 of which
  // is scheduled (SimOptions::steady_step_only), whose ledger still sees both steps' peaks.
  bool skip_repeated_micro_batches_in_step0 = false;
  // TRL DPO's reference forward in each micro-batch (Plan::reference): the reference's own setup
  // (its plan model::Plan::ReferencePlan: role infer, the same rows), walked into the same
  // program after the policy's head forward and before its backward, its start-up shards at the
  // policy's start-up. null: none.
  const WalkSetup* reference = nullptr;
  // The root unit reshards after its forward like the others: TRL's prepare_fsdp passes
  // reshard_after_forward to fully_shard explicitly, and torch keeps only a root whose setting was
  // left automatic gathered (FSDPState._lazy_init, _auto_reshard_after_forward).
  bool root_reshards_after_forward = false;
  // The reference is the policy itself with its adapters off (InStepReference::kAdaptersOff): no
  // shards of its own, and the units the policy holds gathered are used as they are.
  bool shares_policy_units = false;
  // OptimizerKernelLaunches for these units, plan and shard group when the caller has it
  // (ModelCache keeps one per units, group and optimizer); -1: the walk computes it.
  int64_t optimizer_launches = -1;
};

// Micro-batches a walk with skip_repeated_micro_batches walks before it jumps to the last one.
inline constexpr int kWalkedLeadingMicroBatches = 3;

// `storage`: a program whose vectors are reused (emptied, capacity kept).
StepProgram BuildStepProgram(const WalkSetup& setup, StepProgram&& storage = {});

// A lower bound on the allocated peak of BuildStepProgram(setup), without walking: what the walk
// holds at the end of the first forward of step 1, each as the walk allocates it (the ledger
// rounds every allocation up, so its figure is no smaller), in two parts that depend on
// different knobs (the planner caches each by its own key):
// - states_bytes (units, shard group, strategy, dtypes, offload, optimizer): the library
//   workspaces, the sharded parameters kept on the GPU, the optimizer state (created in step 0),
//   and the unsharded parameters of every unit forward leaves gathered (reshard_after_forward
//   False, and FSDP2's root: Walker::ReshardAfterForward);
// - activations_bytes (micro-batch, sequence, cp, checkpointing, trainability): every block's
//   saved activations (freed only by that block's backward), and in training the residual stream
//   and the larger of the LM head's forward working set and what the head and loss saved (the
//   moment of the head's forward op; the bound counts whichever of the two is larger).
//
// And later moments of the same micro-batch's backward (#18: most plans a walk found out of
// memory peaked there, a unit or two into backward, above the forward-end figure): for each
// block, its backward op (BackwardCompute) after its saved activations are freed and its working
// set allocated. Alive then, besides the sharded states: every unit forward left gathered whose
// post-backward has not run and every unit spanning the block (gathered again by Unshard); under
// BACKWARD_PRE the all-gather output of the next unit to gather (PrefetchBackward); the unsharded
// gradients of the units not yet reduced, from the segments after the block; the reduce-scatter
// input of the last unit reduced (foreach_reduce's, freed at the next reduction: ReduceGradients,
// without no_sync); the saved activations of the blocks below; and the block's working set with
// its own gradients left out (gradients and working set together are at least that:
// BackwardWorkingSet). The LM head's saved tensors and the residual stream are gone by then.
// Indexed by block, in the same two kinds of parts as above:
// - backward_states_bytes, backward_prefetch_bytes (the prefetched output, counted only for plans
//   with BACKWARD_PRE): units, shard group, strategy, dtypes, offload;
// - backward_activations_bytes: micro-batch, sequence, cp, checkpointing.
// Modelled for dense training with every parameter trained; empty otherwise (MoE expert passes,
// frozen or adapted parameters and inference change who is alive there).
struct ForwardEndBound {
  int64_t states_bytes = 0;
  int64_t activations_bytes = 0;
  std::vector<int64_t> backward_states_bytes, backward_prefetch_bytes, backward_activations_bytes;
  // The forward-end figure and the largest backward moment (0 when none is modelled) of the
  // states parts of `states` and the activations parts of `activations` (the planner keeps each
  // kind by its own key), and of one bound's own parts.
  static int64_t ForwardEnd(const ForwardEndBound& states, const ForwardEndBound& activations) {
    return states.states_bytes + activations.activations_bytes;
  }
  static int64_t Backward(const ForwardEndBound& states, const ForwardEndBound& activations,
                          bool prefetch_pre) {
    int64_t m = 0;
    size_t n = std::min(states.backward_states_bytes.size(),
                        activations.backward_activations_bytes.size());
    for (size_t b = 0; b < n; ++b) {
      m = std::max(m, states.backward_states_bytes[b] +
                          (prefetch_pre ? states.backward_prefetch_bytes[b] : 0) +
                          activations.backward_activations_bytes[b]);
    }
    return m;
  }
  int64_t forward_end() const { return ForwardEnd(*this, *this); }
  int64_t backward(bool prefetch_pre) const { return Backward(*this, *this, prefetch_pre); }
  int64_t total(bool prefetch_pre) const { return std::max(forward_end(), backward(prefetch_pre)); }
};
ForwardEndBound ForwardEndLowerBound(const WalkSetup& setup);

// Bytes per element of one sharded parameter on the GPU: trainable ones in the master dtype,
// LoRA adapters in lora.dtype, frozen ones in the plan's frozen dtype; all in the param dtype
// under optimizer offload (ZeRO-Offload keeps param-dtype shards on the GPU).
int64_t ShardedBytesPerElement(const model::Plan& plan, const model::ParamTensor& param);

// Bytes the all-gather copy-in kernels move per sharded element (foreach_all_gather,
// torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): a shard stored in another dtype than
// the param dtype is first cast by one foreach copy into a flat param-dtype buffer
// (_get_param_all_gather_inputs: read `shard_bytes`, write `param_bytes`), then
// all_gather_copy_in copies every input into this rank's slice of the all-gather output
// (torch._foreach_copy_: read and write `param_bytes`), also on a one-rank mesh.
constexpr int64_t AllGatherCopyInBytesPerElement(int64_t shard_bytes, int64_t param_bytes) {
  return (shard_bytes != param_bytes ? shard_bytes + param_bytes : 0) + 2 * param_bytes;
}

// How many tensors and blocks one multi_tensor_apply launch takes
// (aten/src/ATen/native/cuda/MultiTensorApply.cuh): TensorListMetadata is passed as a kernel
// argument, 4 KB before CUDA 13 and 32 KB in CUDA 13 builds of PyTorch (pytorch/pytorch#134373).
struct MultiTensorApplyLimits {
  std::array<int64_t, 5> max_tensors;  // depth_to_max_tensors, by depth 1..5
  int64_t max_blocks;                  // depth_to_max_blocks (the same for every depth)
};
inline constexpr MultiTensorApplyLimits kMultiTensorApply4KB{{110, 64, 48, 36, 30}, 320};
inline constexpr MultiTensorApplyLimits kMultiTensorApply32KB{{770, 448, 336, 252, 210}, 2240};
// The walk's: what torch 2.11.0+cu130 launched on the lent H100 (2026-11-26, a PyTorch profiler
// trace of FSDP2 + HF Llama-3.2-1B, world 1): 480 multi_tensor_apply kernels per foreach AdamW
// step over 1.24B fp32 elements in 147 tensors, 60 per op, which is the 320-block limit. That
// build does not take the 32 KB limits (2,240 blocks: 72 launches) that pytorch/pytorch#134373
// describes for CUDA 13.
inline constexpr const MultiTensorApplyLimits& kModelledMultiTensorApply = kMultiTensorApply4KB;

// Kernel launches of one foreach op over tensors of `numels` elements whose kernel takes `depth`
// tensor lists (1..5), as multi_tensor_apply issues them: tensors are cut into 65,536-element
// chunks (kChunkSize), one block per chunk, and a kernel is launched whenever a launch holds
// max_blocks blocks or max_tensors[depth - 1] tensors whose last chunk it holds, and after the
// last chunk. A tensor cut by a launch carries over into the next one. Empty tensors launch
// nothing.
int64_t MultiTensorApplyLaunches(const std::vector<int64_t>& numels, int depth,
                                 const MultiTensorApplyLimits& limits);

// The padded shard elements of the trainable parameters in model.parameters() order (embeddings,
// blocks, final norm, head), the order torch.optim walks a param group.
std::vector<int64_t> TrainableShardNumels(const model::ModelSpec& spec, const std::vector<model::FsdpUnit>& units,
                                          const model::Plan& plan, int shard_n);

// Kernel launches of one optimizer step. The foreach and fused paths run multi_tensor_apply over
// the trainable shards, each of their ops launching MultiTensorApplyLaunches kernels (tensor lists
// by op: torch/optim/adam.py _multi_tensor_adam with decoupled weight decay: mul_(p), lerp_(m, g),
// mul_(v), addcmul_(v, g, g), sqrt(v) -> t, div_(t), add_(t), addcdiv_(p, m, t); _fused_adamw_:
// one op over (p, g, m, v); torch/optim/sgd.py _multi_tensor_sgd with momentum: mul_(buf),
// add_(buf, g), add_(p, buf)). The for-loop path launches ~12 kernels per parameter; Adafactor
// (no foreach path modelled) one per parameter.
int64_t OptimizerKernelLaunches(const model::ModelSpec& spec, const std::vector<model::FsdpUnit>& units,
                                const model::Plan& plan, int shard_n);

}  // namespace shardtune::sim
