// Internals of plan export shared by the per-format writers (export_yaml.cc: Accelerate, ROLL;
// export_toml.cc: torchtitan; export_json.cc: HF Trainer, DeepSpeed; export_verl.cc: verl). Not a
// public API.
#pragma once

#include <string>
#include <vector>

#include "model/plan.h"
#include "planner/configs/export.h"

namespace shardtune::configs::internal {

// How the plan lays parameters over the ranks, after defaults.
struct Layout {
  int shard = 1;      // ranks one copy of the parameters is sharded over; 1: replicated (DDP)
  int replicate = 1;  // copies: world / shard
  bool reshard_after_forward = false;  // FSDP2 flag of the non-root units
  bool hybrid() const { return shard > 1 && replicate > 1; }
  bool replicated_only() const { return shard == 1; }
};
// REQUIRES: ctx.world_size == num_nodes * gpus_per_node and the plan's shard group divides it.
Layout ResolveLayout(const model::Plan& plan, const ExportContext& ctx);

// `s` as a double-quoted string, valid in both YAML and TOML: \" \\ and control characters are
// escaped (\n, \t, \uXXXX).
std::string Quote(const std::string& s);
// `s` with every control character (newlines included) replaced by a space, for comments.
std::string OneLine(const std::string& s);
// `v` with at least one decimal ("1.0", "0.5"), valid as a YAML/TOML float.
std::string FormatFloat(double v);
// "# " comment lines: the header lines, then one "note: ..." per note, wrapped at 100 columns.
std::string CommentBlock(const std::vector<std::string>& header,
                         const std::vector<std::string>& notes);
// One line saying where the config came from (model, strategy, GPUs), for headers.
std::string Provenance(const model::Plan& plan, const ExportContext& ctx);

// A commented config's text: the CommentBlock of `how_to_run` and Provenance(plan, ctx) with
// `notes`, then `body`.
std::string CommentedText(const std::string& how_to_run, const model::Plan& plan,
                          const ExportContext& ctx, const std::vector<std::string>& notes,
                          const std::string& body);

// Notes every FSDP2-based target shares: explicit forward prefetch, a backward prefetch other
// than "pre" and a different in-flight all-gather limit have no setting anywhere.
void AddPrefetchNotes(const model::Plan& plan, const std::string& target,
                      std::vector<std::string>* notes);
// A note for wrap policies `target` cannot express: every:K and ranges always, size when
// !supports_size. The writers then wrap per block (layer class).
void AddWrapNote(const model::Plan& plan, const ExportContext& ctx, const std::string& target,
                 bool supports_size, std::vector<std::string>* notes);
// A note when the target checkpoints whole blocks only and the plan asks for selective or
// every:K; the writers then write full checkpointing (less memory, more recompute).
void AddBlockCheckpointNote(const model::Plan& plan, const std::string& target,
                            std::vector<std::string>* notes);
// A note when the plan offloads activations as verl does and the target has no such switch: the
// writers then leave activations on the GPU (more memory than the plan).
void AddActivationOffloadNote(const model::Plan& plan, const std::string& target,
                              std::vector<std::string>* notes);
// A note when the plan offloads only the optimizer state: FSDP2's CPUOffloadPolicy moves
// parameters, gradients and optimizer state together, so the writers write no offload.
void AddOptimizerOffloadNote(const model::Plan& plan, const std::string& target,
                             std::vector<std::string>* notes);
// Notes every FSDP2 target that wraps whole blocks shares after its wrap note:
// AddBlockCheckpointNote, AddActivationOffloadNote, AddOptimizerOffloadNote, AddPrefetchNotes.
void AddBlockUnitNotes(const model::Plan& plan, const std::string& target,
                       std::vector<std::string>* notes);
// The notes of FSDP2 through Accelerate's FullyShardedDataParallelPlugin (its config file, the
// Trainer's fsdp_config): AddWrapNote (size-based wrapping supported), the embedding and head
// units that transformer-based wrapping (`transformer_wrap`, as `target` names it) leaves in the
// root unit, then AddBlockUnitNotes.
void AddAccelerateFsdpNotes(const model::Plan& plan, const ExportContext& ctx,
                            const std::string& target, const std::string& transformer_wrap,
                            std::vector<std::string>* notes);
// Notes for the plan fields of model-side features a target has no key for: Ulysses cp, the
// inference role, frozen prefixes, LoRA, tiled MLP, frozen dtype, the fused loss unless
// `has_fused_loss` (each only when the plan uses it).
void AddModelFeatureNotes(const model::Plan& plan, const std::string& target, bool has_cp,
                          std::vector<std::string>* notes, bool has_fused_loss = false);
// A note when the plan's loss is the fused linear cross-entropy (Plan::loss_kernel) and the
// target has no key that turns on that kernel alone (only HF Trainer's liger_kernel_config does).
// Liger's RMSNorm / SwiGLU / RoPE patches (Plan::liger), for a format without a key for them.
void AddLigerNote(const model::Plan& plan, const std::string& target, std::vector<std::string>* notes);
void AddFusedLossNote(const model::Plan& plan, const std::string& target,
                      std::vector<std::string>* notes);
// A note when the plan's frozen parameters are loaded in a dtype other than the master dtype
// (Plan::frozen_dtype), which the target cannot express (`why`). AddModelFeatureNotes adds it.
void AddFrozenDtypeNote(const model::Plan& plan, const std::string& why,
                        std::vector<std::string>* notes);
// `d` as a format spells it, given its names of bf16, fp16 and fp32.
const char* DtypeName(model::DType d, const char* bf16, const char* fp16, const char* fp32);
// torch's name of `d` ("torch.bfloat16"), as from_pretrained(torch_dtype=...) and
// MixedPrecisionPolicy take it in code.
const char* TorchDtype(model::DType d);
// The class of one MoE expert MLP for a block class (MixtralBlockSparseTop2MLP, Qwen2MoeMLP,
// Qwen3MoeMLP); "" for dense blocks.
std::string HfExpertClass(const std::string& layer_class);
// The experts module of transformers 5 (all of a layer's experts as 3-D tensors), which ROLL's
// expert parallelism splits and wraps (moe_experts with ep_size > 1: Qwen3MoeExperts in
// examples/qwen3-30BA3B-rlvr_fsdp2/rlvr_config_ep.yaml); "" for a block class without experts.
std::string HfFusedExpertsClass(const std::string& layer_class);
// "adamw (foreach)", for notes.
std::string OptimizerText(const model::Plan& plan);

ExportResult ExportAccelerate(const model::Plan& plan, const ExportContext& ctx);
ExportResult ExportRoll(const model::Plan& plan, const ExportContext& ctx);
ExportResult ExportTorchtitan(const model::Plan& plan, const ExportContext& ctx);
ExportResult ExportHfTrainer(const model::Plan& plan, const ExportContext& ctx);
ExportResult ExportDeepspeed(const model::Plan& plan, const ExportContext& ctx);
ExportResult ExportVerl(const model::Plan& plan, const ExportContext& ctx);

}  // namespace shardtune::configs::internal
