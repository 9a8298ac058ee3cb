// YAML exports: the Hugging Face Accelerate config file (FSDP2) and a ROLL worker with its FSDP2
// strategy_config. Written as text (no YAML library); every string value is double-quoted, so
// YAML 1.1 readers never turn "no" or "on" into booleans.
#include <sstream>

#include "model/text.h"
#include "planner/configs/export_formats.h"

namespace shardtune::configs::internal {
namespace {

using model::DType;

const char* YamlBool(bool b) { return b ? "true" : "false"; }

// Accelerate's --mixed_precision values (commands/launch.py): "no", "fp16", "bf16", "fp8".
const char* AccelerateMixedPrecision(DType d) { return DtypeName(d, "bf16", "fp16", "no"); }

// Accelerate's mixed_precision string sets param and reduce dtype alike and keeps fp32 master
// weights (utils/dataclasses.py set_mixed_precision, utils/fsdp_utils.py fsdp2_prepare_model).
void AddAccelerateDtypeNotes(const model::Plan& p, std::vector<std::string>* out) {
  std::vector<std::string>& notes = *out;
  if (p.param_dtype != DType::kFp32 && p.reduce_dtype != p.param_dtype) {
    notes.push_back(
        std::string("reduce_dtype ") + model::ToString(p.reduce_dtype) + ": mixed_precision " +
        AccelerateMixedPrecision(p.param_dtype) + " also reduces in " +
        model::ToString(p.param_dtype) + "; for " + model::ToString(p.reduce_dtype) +
        " pass FullyShardedDataParallelPlugin(mixed_precision_policy={\"param_dtype\": " +
        TorchDtype(p.param_dtype) + ", \"reduce_dtype\": " + TorchDtype(p.reduce_dtype) +
        ", \"output_dtype\": " + TorchDtype(p.param_dtype) + "}) in code");
  } else if (p.param_dtype == DType::kFp32 && p.reduce_dtype != DType::kFp32) {
    notes.push_back(std::string("reduce_dtype ") + model::ToString(p.reduce_dtype) +
                    ": mixed_precision \"no\" reduces in fp32; set mixed_precision_policy in code");
  }
  if (p.master_dtype != DType::kFp32) {
    notes.push_back(std::string("master_dtype ") + model::ToString(p.master_dtype) +
                    ": Accelerate upcasts the sharded parameters to fp32 under mixed precision "
                    "(fsdp2_prepare_model); no setting keeps them in " +
                    model::ToString(p.master_dtype));
  }
}

// Plan settings Accelerate's config file has no key for (sources: see ExportAccelerate).
std::vector<std::string> AccelerateNotes(const model::Plan& p, const ExportContext& ctx,
                                         const Layout& l) {
  const std::string target = "Accelerate";
  std::vector<std::string> notes;
  std::string script =
      "set in your training script: DataLoader batch_size=" + std::to_string(p.micro_batch) +
      " sequences of " + std::to_string(ctx.seq_len) +
      " tokens per GPU, Accelerator(gradient_accumulation_steps=" + std::to_string(p.grad_accum) +
      ") (global batch " + std::to_string(ctx.global_batch) + " sequences), optimizer " +
      OptimizerText(p);
  if (ctx.max_grad_norm > 0)
    script += ", accelerator.clip_grad_norm_(params, " + FormatFloat(ctx.max_grad_norm) + ")";
  if (p.attention == model::Attention::kEager)
    script += ", from_pretrained(attn_implementation=\"eager\")";
  notes.push_back(script);
  AddModelFeatureNotes(p, target, /*has_cp=*/false, &notes);
  if (p.grad_accum > 1) {
    notes.push_back(std::string("no_sync ") + (p.no_sync ? "true" : "false") + ": " +
                    (p.no_sync
                         ? "use accelerator.accumulate(model), which skips gradient sync until the "
                           "last micro-batch"
                         : "call backward on every micro-batch outside accelerator.accumulate(), "
                           "which would skip gradient sync (set_requires_gradient_sync(False))"));
  }
  if (l.replicated_only()) {
    if (p.checkpointing != model::Checkpointing::kNone) {
      notes.push_back(
          "checkpointing " + model::CheckpointingSpecToString(p) +
          ": without FSDP enable it in the model (model.gradient_checkpointing_enable())");
    }
    if (p.offload != model::Offload::kNone) {
      notes.push_back(std::string("offload ") + model::ToString(p.offload) +
                      ": MULTI_GPU (DDP) has no CPU offload; written without");
    }
    return notes;
  }
  AddAccelerateFsdpNotes(p, ctx, target, "TRANSFORMER_BASED_WRAP", &notes);
  AddAccelerateDtypeNotes(p, &notes);
  return notes;
}

void WriteAccelerateFsdp(const model::Plan& p, const ExportContext& ctx, const Layout& l,
                         std::ostream& y) {
  y << "fsdp_config:\n";
  y << "  fsdp_version: 2\n";
  y << "  fsdp_reshard_after_forward: " << YamlBool(l.reshard_after_forward)
    << "  # FSDP2's replacement for fsdp_sharding_strategy (true: FULL_SHARD, false: "
       "SHARD_GRAD_OP)\n";
  if (p.wrap.kind == model::WrapPolicy::Kind::kSize) {
    y << "  fsdp_auto_wrap_policy: \"SIZE_BASED_WRAP\"\n";
    y << "  fsdp_min_num_params: " << p.wrap.min_num_params << "\n";
  } else {
    y << "  fsdp_auto_wrap_policy: \"TRANSFORMER_BASED_WRAP\"\n";
    y << "  fsdp_transformer_layer_cls_to_wrap: " << Quote(ctx.layer_class) << "\n";
  }
  y << "  fsdp_offload_params: " << YamlBool(p.offload == model::Offload::kAll) << "\n";
  y << "  fsdp_activation_checkpointing: "
    << YamlBool(p.checkpointing != model::Checkpointing::kNone) << "\n";
  y << "  fsdp_state_dict_type: \"SHARDED_STATE_DICT\"\n";
  y << "  fsdp_cpu_ram_efficient_loading: true  # rank 0 reads the checkpoint, the others start "
       "empty\n";
  if (l.hybrid()) {
    // HSDP in FSDP2 is a 2-D mesh (parallelism_config.py: dp_replicate_size > 1 and
    // dp_shard_size > 1); launch.py reads these keys as --parallelism_config_* arguments.
    y << "parallelism_config:\n";
    y << "  parallelism_config_dp_replicate_size: " << l.replicate << "\n";
    y << "  parallelism_config_dp_shard_size: " << l.shard << "\n";
    y << "  parallelism_config_tp_size: 1\n";
    y << "  parallelism_config_cp_size: 1\n";
  }
}

// ROLL's param_dtype is both the load dtype of the model and the FSDP2 compute dtype
// (fsdp2_strategy.py _prepare_fsdp2_model: torch_dtype = strategy_config param_dtype, default fp32
// for fsdp2_train and bf16 for fsdp2_infer; MixedPrecisionPolicy param_dtype default bf16).
// Returns "" to leave it unset (the role's default pair).
std::string RollParamDtype(const model::Plan& p, std::vector<std::string>* notes) {
  DType default_master = p.role == model::Role::kTrain ? DType::kFp32 : DType::kBf16;
  if (p.master_dtype == default_master && p.param_dtype == DType::kBf16) return "";
  if (p.master_dtype == p.param_dtype) return model::ToString(p.param_dtype);
  notes->push_back(std::string("param_dtype ") + model::ToString(p.param_dtype) +
                   " with master_dtype " + model::ToString(p.master_dtype) +
                   ": ROLL loads the model in param_dtype, so the sharded "
                   "parameters are " +
                   model::ToString(p.param_dtype) + " too");
  return model::ToString(p.param_dtype);
}

std::vector<std::string> RollNotes(const model::Plan& p, const ExportContext& ctx,
                                   const Layout& l) {
  const std::string target = "ROLL's fsdp2 strategy";
  std::vector<std::string> notes;
  if (l.replicated_only()) {
    notes.push_back(std::string(model::ToString(p.strategy)) +
                    " (replicated, no sharding): " + target +
                    " has no replicate-only mode (fsdp_size 1 shards over all ranks); written as "
                    "fsdp_size " +
                    std::to_string(ctx.world_size) + " without resharding");
  }
  AddWrapNote(p, ctx, target, /*supports_size=*/false, &notes);
  AddFusedLossNote(p, target, &notes);
  AddLigerNote(p, target, &notes);
  if (!p.wrap.embedding_unit && !ctx.tied_embeddings) {
    notes.push_back(
        "embedding_unit false: ROLL wraps an untied nn.Embedding on its own even with "
        "wrap_embeddings false (roll/utils/fsdp_utils.py apply_fsdp2)");
  }
  if (p.wrap.head_unit) {
    notes.push_back(
        "head_unit: wrap_lm_output wraps lm_head alone; the final norm stays in the root unit");
  }
  if (p.wrap.expert_units && HfExpertClass(ctx.layer_class).empty()) {
    notes.push_back("expert units: " + ctx.layer_class + " has no experts; moe_experts not written");
  }
  if (p.cp > 1 && p.cp_fsdp_mesh == model::CpFsdpMesh::kDp) {
    notes.push_back("cp_fsdp_mesh dp: ROLL's FSDP2 mesh spans all ranks (ulysses ranks shard too)");
  }
  if (p.lora.enabled() && p.lora.dtype != DType::kFp32 && p.lora.dtype != p.master_dtype) {
    notes.push_back(std::string("lora dtype ") + model::ToString(p.lora.dtype) +
                    ": ROLL keeps adapters in fp32 (autocast_adapter_dtype) or the model dtype");
  }
  AddFrozenDtypeNote(
      p, "ROLL loads the whole model in strategy_config param_dtype (the master copy)", &notes);
  AddBlockUnitNotes(p, target, &notes);
  if (p.optimizer != model::Optimizer::kAdamW ||
      p.optimizer_impl != model::OptimizerImpl::kForeach) {
    notes.push_back("optimizer " + OptimizerText(p) +
                    ": ROLL's fsdp2_train always builds "
                    "torch.optim.AdamW with its default (foreach) implementation");
  }
  if (p.attention == model::Attention::kEager) {
    notes.push_back(
        "attention eager: ROLL's attn_implementation takes sdpa, fa2 or auto (model_args.py)");
  }
  return notes;
}

// model_args (roll/configs/model_args.py): checkpointing, Ulysses, frozen prefixes, LoRA.
void WriteRollModelArgs(const model::Plan& p, std::ostream& y) {
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
    return out;
  };
  y << "  model_args:\n";
  y << "    disable_gradient_checkpointing: "
    << YamlBool(p.role != model::Role::kTrain || p.checkpointing == model::Checkpointing::kNone)
    << "\n";
  y << "    ulysses_size: " << p.cp << "\n";
  if (!p.frozen_prefixes.empty()) {
    y << "    freeze_module_prefix: " << Quote(join(p.frozen_prefixes)) << "\n";
  }
  if (p.lora.enabled()) {
    y << "    lora_target: " << Quote(join(p.lora.targets)) << "\n";
    y << "    lora_rank: " << p.lora.rank << "\n";
    y << "    lora_alpha: " << FormatFloat(p.lora.alpha) << "\n";
    y << "    lora_dropout: " << FormatFloat(p.lora.dropout) << "\n";
    y << "    autocast_adapter_dtype: " << YamlBool(p.lora.dtype == DType::kFp32) << "\n";
  }
}

}  // namespace

// Hugging Face Accelerate config file for `accelerate launch --config_file FILE`, FSDP2. Keys read
// in huggingface/accelerate @16cb6eb: src/accelerate/commands/config/config_args.py ClusterConfig
// (top-level keys; unknown ones are errors, so batch sizes cannot go here), commands/launch.py
// (fsdp_* and parallelism_config_* arguments; num_processes counts all machines),
// utils/dataclasses.py FullyShardedDataParallelPlugin.__post_init__ (fsdp_version 2 rejects
// forward_prefetch, drops backward_prefetch), docs/source/concept_guides/fsdp1_vs_fsdp2.md
// (sharding_strategy -> reshard_after_forward), docs/source/usage_guides/fsdp.md,
// examples/torch_native_parallelism/configs/tp_hsdp.yaml (parallelism_config for HSDP).
ExportResult ExportAccelerate(const model::Plan& p, const ExportContext& ctx) {
  Layout l = ResolveLayout(p, ctx);
  ExportResult r;
  r.notes = AccelerateNotes(p, ctx, l);
  std::ostringstream y;
  y << "compute_environment: \"LOCAL_MACHINE\"\n";
  y << "distributed_type: " << (l.replicated_only() ? "\"MULTI_GPU\"" : "\"FSDP\"") << "\n";
  y << "mixed_precision: " << Quote(AccelerateMixedPrecision(p.param_dtype)) << "\n";
  y << "num_machines: " << ctx.num_nodes << "\n";
  y << "num_processes: " << ctx.world_size << "  # all machines together\n";
  y << "machine_rank: 0" << (ctx.num_nodes > 1 ? "  # the node's index: 0 on the main node" : "")
    << "\n";
  y << "main_training_function: \"main\"\n";
  y << "use_cpu: false\n";
  if (!l.replicated_only()) WriteAccelerateFsdp(p, ctx, l, y);
  r.text = CommentedText(
      "Hugging Face Accelerate config: accelerate launch --config_file THIS train.py", p, ctx,
      r.notes, y.str());
  return r;
}

// A ROLL worker (roll/configs/worker_config.py WorkerConfig: model_args, training_args,
// strategy_args, device_mapping) with the fsdp2_train strategy. Keys read in alibaba/ROLL @8eb27cc:
// docs_roll/docs/User Guides/Configuration/fsdp2.md (fsdp_size, param_dtype, reduce_dtype,
// reshard_after_forward, offload_policy, wrap_policy; fsdp_size >= world or <= 1 is pure FSDP,
// else HSDP with world / fsdp_size replicas), roll/distributed/strategy/fsdp2_strategy.py
// (defaults; reduce_scatter_during_grad_accumulation), roll/utils/fsdp_utils.py apply_fsdp2
// (wrap_policy), roll/configs/model_args.py (disable_gradient_checkpointing, ulysses_size),
// roll/configs/training_args.py, roll/configs/base_config.py (sequence_length, num_gpus_per_node).
ExportResult ExportRoll(const model::Plan& p, const ExportContext& ctx) {
  Layout l = ResolveLayout(p, ctx);
  ExportResult r;
  r.notes = RollNotes(p, ctx, l);
  std::string param_dtype = RollParamDtype(p, &r.notes);
  bool train = p.role == model::Role::kTrain;
  int fsdp_size = l.replicated_only() ? ctx.world_size : l.shard;
  std::ostringstream y;
  y << "num_gpus_per_node: " << ctx.gpus_per_node << "\n";
  y << "sequence_length: " << ctx.seq_len << "\n";
  if (train) {
    y << "actor_train:  # or your pipeline's training worker (sft_train, critic, ...)\n";
  } else {
    y << "reference:  # or your pipeline's forward-only worker\n";
  }
  WriteRollModelArgs(p, y);
  if (train) {
    y << "  training_args:\n";
    y << "    per_device_train_batch_size: " << p.micro_batch << "\n";
    y << "    gradient_accumulation_steps: " << p.grad_accum << "\n";
  } else {
    y << "  infer_batch_size: " << p.micro_batch << "\n";
  }
  y << "  strategy_args:\n";
  y << "    strategy_name: " << (train ? "\"fsdp2_train\"" : "\"fsdp2_infer\"") << "\n";
  y << "    strategy_config:\n";
  y << "      fsdp_size: " << fsdp_size
    << (l.hybrid() ? "  # HSDP: " + std::to_string(l.replicate) + " replicas" : "") << "\n";
  if (param_dtype.empty()) {
    y << "      # param_dtype unset: the model is loaded in "
      << (train ? "fp32 (master weights)" : "bf16") << " and computes in bf16\n";
  } else {
    y << "      param_dtype: " << Quote(param_dtype) << "\n";
  }
  y << "      reduce_dtype: " << Quote(model::ToString(p.reduce_dtype)) << "\n";
  y << "      reshard_after_forward: " << YamlBool(l.reshard_after_forward) << "\n";
  y << "      offload_policy: " << YamlBool(p.offload == model::Offload::kAll) << "\n";
  if (train) {
    y << "      reduce_scatter_during_grad_accumulation: " << YamlBool(!p.no_sync)
      << "  # false: no_sync\n";
  }
  if (p.tiled_mlp_shards > 1) {
    y << "      apply_tiled_mlp: true\n      tiled_num_shards: " << p.tiled_mlp_shards << "\n";
  }
  std::string expert = p.wrap.expert_units ? HfExpertClass(ctx.layer_class) : "";
  if (!expert.empty()) y << "      apply_expert_patch: true\n";
  if (p.ep > 1) {
    // import_roll.cc ReadExpertParallel: the local experts sharded over shard group / ep ranks.
    y << "      ep_size: " << p.ep << "\n      efsdp_size: "
      << p.ExpertShardGroup(ctx.world_size, ctx.gpus_per_node) << "\n";
    expert = HfFusedExpertsClass(ctx.layer_class);
  }
  y << "      wrap_policy:\n";
  if (p.wrap.sub_block_units && model::EndsWith(ctx.layer_class, "DecoderLayer")) {
    // import_roll.cc SubBlockClasses: <prefix>Attention and the MoE block or MLP class.
    const std::string prefix =
        ctx.layer_class.substr(0, ctx.layer_class.size() - std::string("DecoderLayer").size());
    const bool moe = !HfExpertClass(ctx.layer_class).empty();
    y << "        transformer_layer_cls_to_wrap: [" << Quote(prefix + "Attention") << ", "
      << Quote(prefix + (moe ? "SparseMoeBlock" : "MLP")) << "]\n";
  } else {
    y << "        transformer_layer_cls_to_wrap: [" << Quote(ctx.layer_class) << "]\n";
  }
  y << "        wrap_embeddings: " << YamlBool(p.wrap.embedding_unit) << "\n";
  y << "        wrap_lm_output: " << YamlBool(p.wrap.head_unit) << "\n";
  if (!expert.empty()) y << "        moe_experts: [" << Quote(expert) << "]\n";
  y << "  device_mapping: " << Quote("list(range(0," + std::to_string(ctx.world_size) + "))")
    << "\n";
  r.text = CommentedText(
      "ROLL worker config with the FSDP2 strategy (strategy_args.strategy_config)", p, ctx,
      r.notes, y.str());
  return r;
}

}  // namespace shardtune::configs::internal
