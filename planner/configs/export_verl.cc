// verl export: the FSDP worker of verl's PPO trainer as a Hydra override file (the keys of
// verl/trainer/config/ppo_trainer.yaml it changes): actor_rollout_ref.actor for a training plan,
// actor_rollout_ref.ref for an inference plan. Written as text; planner/configs/import_verl.cc reads it.
#include <sstream>

#include "planner/configs/export_formats.h"

namespace shardtune::configs::internal {
namespace {

using model::DType;

const char* YamlBool(bool b) { return b ? "true" : "false"; }

std::vector<std::string> VerlNotes(const model::Plan& p, const ExportContext& ctx,
                                   const Layout& l) {
  const std::string target = "verl's FSDP workers";
  std::vector<std::string> notes;
  notes.push_back("sequence length " + std::to_string(ctx.seq_len) +
                  " = data.max_prompt_length + data.max_response_length; the split is yours, the "
                  "sum decides memory");
  bool train = p.role == model::Role::kTrain;
  if (train) {
    notes.push_back(
        "ppo_mini_batch_size counts prompts with rollout.n 1; with n samples per "
        "prompt divide it by n");
  }
  if (l.replicated_only()) {
    notes.push_back(std::string(model::ToString(p.strategy)) + ": " + target +
                    " always shard (fsdp_size -1 is all ranks); written as FSDP over all " +
                    std::to_string(ctx.world_size) + " ranks");
  }
  AddWrapNote(p, ctx, target, /*supports_size=*/true, &notes);
  if (p.wrap.embedding_unit || p.wrap.head_unit) {
    notes.push_back("embedding_unit/head_unit: verl wraps " + ctx.layer_class +
                    " (or by size) only; the embedding and [norm, head] stay in the root unit");
  }
  if (p.wrap.expert_units) notes.push_back("expert units: verl has no per-expert wrapping");
  AddBlockCheckpointNote(p, target, &notes);
  AddFusedLossNote(p, target, &notes);
  if (train) {
    AddOptimizerOffloadNote(p, target, &notes);
  } else if (p.offload != model::Offload::kAll) {
    notes.push_back("offload " + std::string(model::ToString(p.offload)) +
                    ": verl's reference worker always offloads its parameters to the host "
                    "(fsdp_workers.py CPUOffloadPolicy for non-actor roles)");
  }
  if (p.no_sync && p.grad_accum > 1) {
    notes.push_back("no_sync true: verl's actor reduce-scatters after every micro-batch");
  }
  if (p.backward_prefetch != model::BackwardPrefetch::kPre) {
    notes.push_back(std::string("backward_prefetch ") + model::ToString(p.backward_prefetch) +
                    ": verl has no setting for it");
  }
  if (p.max_inflight_allgathers != 2) {
    notes.push_back("max_inflight_allgathers: verl has no setting for it");
  }
  if (p.cp > 1 && p.cp_fsdp_mesh == model::CpFsdpMesh::kDp) {
    notes.push_back("cp_fsdp_mesh dp: verl shards over all ranks (the Ulysses mesh is separate)");
  }
  if (!p.frozen_prefixes.empty()) {
    notes.push_back(
        "frozen prefixes: verl has no general freeze setting (only "
        "actor.freeze_vision_tower)");
  }
  if (p.lora.enabled() && p.lora.dtype != DType::kFp32) {
    notes.push_back("lora dtype " + std::string(model::ToString(p.lora.dtype)) +
                    ": verl keeps PEFT's fp32 adapters");
  }
  // fsdp_workers.py _build_model_optimizer loads the whole model with torch_dtype = model_dtype
  // (written from master_dtype) before get_peft_model.
  AddFrozenDtypeNote(p, "verl loads the whole model in fsdp_config.model_dtype (written: " +
                            std::string(model::ToString(p.master_dtype)) + ")",
                     &notes);
  if (p.optimizer != model::Optimizer::kAdamW) {
    notes.push_back("optimizer " + OptimizerText(p) + ": verl's FSDP workers build AdamW");
  }
  if (p.attention == model::Attention::kEager) {
    notes.push_back("attention eager: set override_config.attn_implementation yourself");
  }
  return notes;
}

void WriteFsdpConfig(const model::Plan& p, const ExportContext& ctx, const Layout& l,
                     std::ostream& y) {
  y << "    fsdp_config:\n";
  y << "      fsdp_size: " << (l.hybrid() ? l.shard : -1) << "\n";
  y << "      reshard_after_forward: " << YamlBool(l.reshard_after_forward) << "\n";
  y << "      offload_policy: " << YamlBool(p.offload == model::Offload::kAll) << "\n";
  y << "      param_offload: false\n      optimizer_offload: false\n";
  y << "      forward_prefetch: " << YamlBool(p.forward_prefetch) << "\n";
  y << "      model_dtype: " << model::ToString(p.master_dtype) << "\n";
  y << "      mixed_precision:\n";
  y << "        param_dtype: " << model::ToString(p.param_dtype) << "\n";
  y << "        reduce_dtype: " << model::ToString(p.reduce_dtype) << "\n";
  y << "      wrap_policy:\n";
  if (p.wrap.kind == model::WrapPolicy::Kind::kSize) {
    y << "        min_num_params: " << p.wrap.min_num_params << "\n";
  } else {
    y << "        transformer_layer_cls_to_wrap: [" << Quote(ctx.layer_class) << "]\n";
  }
}

}  // namespace

// Keys read in volcengine/verl @b178a3c: verl/trainer/config/ppo_trainer.yaml and its parts
// (actor/actor.yaml ppo_mini_batch_size, ppo_micro_batch_size_per_gpu; ref/ref.yaml
// log_prob_micro_batch_size_per_gpu; engine/fsdp.yaml fsdp_config; model/hf_model.yaml
// enable_gradient_checkpointing, lora_rank, lora_alpha, target_modules, tiled_mlp; data
// max_prompt_length, max_response_length; trainer nnodes, n_gpus_per_node), and
// verl/workers/fsdp_workers.py (create_device_mesh: fsdp_size -1 is all ranks, else HSDP;
// ppo_mini_batch_size x rollout.n / (world / sp) per rank; mixed_precision; offload_policy).
ExportResult ExportVerl(const model::Plan& p, const ExportContext& ctx) {
  Layout l = ResolveLayout(p, ctx);
  ExportResult r;
  r.notes = VerlNotes(p, ctx, l);
  bool train = p.role == model::Role::kTrain;
  int dp = p.DataParallel(ctx.world_size);
  std::ostringstream y;
  // Hydra composes verl's own ppo_trainer.yaml first, then these keys over it.
  y << "defaults:\n  - ppo_trainer\n  - _self_\n";
  y << "trainer:\n  nnodes: " << ctx.num_nodes << "\n  n_gpus_per_node: " << ctx.gpus_per_node
    << "\n";
  int64_t prompt = ctx.seq_len / 2;
  y << "data:\n  max_prompt_length: " << prompt
    << "\n  max_response_length: " << ctx.seq_len - prompt << "\n";
  y << "actor_rollout_ref:\n";
  y << "  model:\n";
  y << "    enable_gradient_checkpointing: "
    << YamlBool(train && p.checkpointing != model::Checkpointing::kNone) << "\n";
  y << "    lora_rank: " << (p.lora.enabled() ? p.lora.rank : 0) << "\n";
  if (p.lora.enabled()) {
    y << "    lora_alpha: " << FormatFloat(p.lora.alpha) << "\n";
    y << "    target_modules: [";
    for (size_t i = 0; i < p.lora.targets.size(); ++i) {
      y << (i ? ", " : "") << Quote(p.lora.targets[i]);
    }
    y << "]\n";
  }
  y << "    tiled_mlp:\n      enabled: " << YamlBool(p.tiled_mlp_shards > 1)
    << "\n      num_shards: " << (p.tiled_mlp_shards > 1 ? p.tiled_mlp_shards : 4) << "\n";
  if (train) {
    y << "  rollout:\n    n: 1\n";
    y << "  actor:\n    strategy: fsdp2\n";
    y << "    ppo_mini_batch_size: " << static_cast<int64_t>(p.micro_batch) * p.grad_accum * dp
      << "  # prompts per update over all ranks\n";
    y << "    ppo_micro_batch_size_per_gpu: " << p.micro_batch << "\n";
  } else {
    y << "  ref:\n    strategy: fsdp2\n";
    y << "    log_prob_micro_batch_size_per_gpu: " << p.micro_batch << "\n";
  }
  y << "    ulysses_sequence_parallel_size: " << p.cp << "\n";
  WriteFsdpConfig(p, ctx, l, y);
  r.text = CommentBlock({"verl PPO trainer config over ppo_trainer.yaml: copy it next to "
                         "verl/trainer/config/ppo_trainer.yaml and run python3 -m "
                         "verl.trainer.main_ppo --config-name THIS",
                         Provenance(p, ctx)},
                        r.notes) +
           y.str();
  return r;
}

}  // namespace shardtune::configs::internal
