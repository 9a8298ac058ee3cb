// Which parameters train under a plan: frozen prefixes (ROLL freeze_module_prefix), LoRA adapters
// (PEFT LoraConfig) and inference-only roles, applied to the FSDP units of model/module_tree.h,
// plus the checks of those plan fields that need the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/model_spec.h"
#include "model/module_tree.h"
#include "model/plan.h"

namespace shardtune::model {

// Every problem of the plan's frozen_prefixes, lora, wrap.expert_units and tiled_mlp_shards
// against this model (empty when valid), each "where:/key: expected ..., got ...": a frozen prefix
// that matches no parameter name, a LoRA target that is not a projection of this model, expert
// units on a dense model, tiled_mlp_shards not dividing the sequence length `seq_len`.
std::vector<std::string> TrainabilityProblems(const ModelSpec& spec, const Plan& plan,
                                              int64_t seq_len, const std::string& where);

// The projection names LoRA can target in this model (HF names: q_proj ... down_proj, GPT-2's
// c_attn c_proj c_fc; MoE experts' projections included).
std::vector<std::string> LoraTargetNames(const ModelSpec& spec);

// Returns `units` with each parameter's requires_grad set from the plan and LoRA adapters added to
// the unit that owns their base projection. A parameter is frozen when the role is infer, when its
// name starts with a frozen prefix ("lm_head" on a tied model names model.embed_tokens.weight), or
// when LoRA is on (PEFT freezes every base weight: mark_only_lora_as_trainable). Each adapter of
// base "P.weight" [out, in] is "P.lora_A.default.weight" [r, in] and "P.lora_B.default.weight"
// [out, r] (peft/tuners/lora/layer.py update_layer), trainable unless the role is infer.
// REQUIRES: TrainabilityProblems() empty.
std::vector<FsdpUnit> ApplyTrainability(const ModelSpec& spec, const Plan& plan,
                                        std::vector<FsdpUnit> units);

// One FSDP unit as shardtune's executor lays it out (executor/fsdp/flat_param.cc FlatParam): all its
// parameters in one flat tensor padded to a multiple of the unit's shard ranks
// (FsdpUnit::ShardRanks: an expert-parallel unit shards over its expert shard group), trainable
// when any parameter trains (a LoRA adapter does, its frozen base does not). REQUIRES: `u` from
// ApplyTrainability(spec, plan, ...).
struct ExecutorFlatUnit {
  int64_t numel = 0;        // parameters, unpadded
  int64_t shard_numel = 0;  // per rank: ceil(numel / shard ranks)
  int64_t padded_numel = 0; // shard_numel x shard ranks
  bool trains = false;
};
ExecutorFlatUnit ExecutorFlatUnitOf(const FsdpUnit& u, const Plan& plan, int shard_ranks);

// A VL model's tower on text-only batches (plan images 0): it never runs, so its parameters get
// no gradient and no optimizer state (torch.optim skips parameters whose grad is None), as if
// frozen; ApplyTrainability marks them so without a frozen prefix the user did not write.
bool VisionTowerIdle(const ModelSpec& spec, const Plan& plan);

// True when the plan changes which parameters train or adds adapters (ApplyTrainability is not
// the identity), an idle vision tower included.
bool ChangesTrainability(const ModelSpec& spec, const Plan& plan);

struct TrainableCounts {
  int64_t total = 0;      // every parameter, adapters included
  int64_t trainable = 0;  // requires_grad
  int64_t frozen = 0;     // total - trainable
  int64_t adapters = 0;   // LoRA A and B elements
};
TrainableCounts CountTrainable(const std::vector<FsdpUnit>& units);

// The first forward segment autograd backpropagates into: the smallest segment using a trainable
// parameter (a trainable tied embedding counts as segment 0, where its lookup is). Segments before
// it record no graph (no input and no parameter requires grad: torch autograd builds a node only
// for ops with an input that requires grad), so they save no activations and run no backward.
// num_segments when nothing trains.
int FirstBackwardSegment(const std::vector<FsdpUnit>& units, int num_layers);
// A VL model's tower, whose input is the pixels: the earliest segment whose forward makes a tower
// tensor require grad, that of its first trainable parameter, the patch and position embeddings
// counting as before block 0 (segment 0); NumSegments(spec.NumBlocks()) when nothing in the
// tower trains. Vision block b's input needs a gradient when it is below BlockSegment(b), and its
// backward runs from there on. REQUIRES: `units` from ApplyTrainability(spec, plan, ...).
int FirstTowerGradSegment(const ModelSpec& spec, const std::vector<FsdpUnit>& units);

// What autograd can record in each block and in the head under a plan: which base parameters
// require grad, which projections carry LoRA adapters, and whether the sub-graph's input requires
// grad (requires_grad propagates forward from the first trainable parameter: a block's input does
// when a segment before it has one, FirstBackwardSegment). Feeds ComputeBlockActivations /
// ComputeHeadActivations. REQUIRES: `units` from ApplyTrainability(spec, plan, ...) and
// plan.Trains() (an inference role records nothing at all).
struct SubgraphTrainability {
  std::vector<Trainability> blocks;  // one per block, in order
  Trainability head;                 // final norm + LM head (full parameter names)
};
SubgraphTrainability SubgraphTrainabilities(const ModelSpec& spec, const Plan& plan,
                                            const std::vector<FsdpUnit>& units);

// Model FLOPs per token of one training step with this trainability (MFU's numerator).
// A full fine-tune gets the PaLM figure 6N + 12·L·q_dim·S (Chowdhery et al. 2022, appendix B).
// Otherwise: forward 2N + 4·L·q_dim·S; input gradients 2·N_b + 8·L_b·q_dim·S over the segments
// backward reaches (from FirstBackwardSegment); weight gradients 2·N_t of the trainable
// parameters (Narayanan et al. 2021: each backward GEMM costs its forward). N counts routed
// experts at top_k / num_experts. An inference role: the forward only.
double ModelFlopsPerToken(const ModelSpec& spec, const std::vector<FsdpUnit>& units,
                          const Plan& plan, int64_t seq_len);

}  // namespace shardtune::model
