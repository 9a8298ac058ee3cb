// JSON exports: Hugging Face Trainer arguments (a TrainingArguments document for
// HfArgumentParser.parse_json_file) and a DeepSpeed ZeRO config (the closest equivalent of the
// plan). JSON has no comments, so everything without a key is in ExportResult::notes.
#include <nlohmann/json.hpp>

#include "planner/configs/export_formats.h"

namespace shardtune::configs::internal {
namespace {

using model::DType;
using nlohmann::ordered_json;

// TrainingArguments.optim values (training_args.py OptimizerNames). torch.optim.AdamW picks
// foreach on CUDA by default, which "adamw_torch" builds.
std::string HfOptim(const model::Plan& p, std::vector<std::string>* notes) {
  switch (p.optimizer) {
    case model::Optimizer::kSgd:
      return "sgd";
    case model::Optimizer::kAdafactor:
      return "adafactor";
    case model::Optimizer::kAdamW:
      break;
  }
  if (p.optimizer_impl == model::OptimizerImpl::kFused) return "adamw_torch_fused";
  if (p.optimizer_impl == model::OptimizerImpl::kForLoop) {
    notes->push_back(
        "optimizer_impl for_loop: no optim value builds a for-loop AdamW; written as adamw_torch");
  }
  return "adamw_torch";
}

std::vector<std::string> HfTrainerNotes(const model::Plan& p, const ExportContext& ctx,
                                        const Layout& l) {
  const std::string target = "the Trainer's fsdp_config";
  std::vector<std::string> notes;
  notes.push_back("sequence length " + std::to_string(ctx.seq_len) +
                  ": TrainingArguments has no key for it; pad or pack your dataset to this length");
  AddModelFeatureNotes(p, target, /*has_cp=*/false, &notes, /*has_fused_loss=*/true);
  if (p.grad_accum > 1 && !p.no_sync) {
    notes.push_back(
        "no_sync false: the Trainer skips gradient sync on all but the last micro-batch "
        "(accelerator.no_sync), as no_sync true does");
  }
  if (p.attention == model::Attention::kEager) {
    notes.push_back(
        "attention eager: load the model with from_pretrained(attn_implementation=\"eager\")");
  }
  if (l.replicated_only()) {
    if (p.offload != model::Offload::kNone) {
      notes.push_back(
          std::string("offload ") + model::ToString(p.offload) +
          ": without fsdp the Trainer runs DDP, which has no CPU offload; written without");
    }
    return notes;
  }
  if (l.hybrid()) {
    notes.push_back(
        "hybrid sharding (" + std::to_string(l.replicate) + " replicas x " +
        std::to_string(l.shard) +
        "-way shard): fsdp_config version 2 has no shard-group key; launch with accelerate and "
        "parallelism_config_dp_replicate_size " +
        std::to_string(l.replicate) + ", parallelism_config_dp_shard_size " +
        std::to_string(l.shard) +
        " (or TrainingArguments(parallelism_config=ParallelismConfig(...)) in code); as "
        "written it shards over all " +
        std::to_string(ctx.world_size) + " ranks");
  }
  AddAccelerateFsdpNotes(p, ctx, target, "transformer-based wrapping", &notes);
  if (p.param_dtype != DType::kFp32 && p.reduce_dtype != p.param_dtype) {
    notes.push_back(std::string("reduce_dtype ") + model::ToString(p.reduce_dtype) + ": " +
                    model::ToString(p.param_dtype) +
                    " mixed precision through Accelerate also reduces in " +
                    model::ToString(p.param_dtype));
  }
  if (p.master_dtype != DType::kFp32) {
    notes.push_back(std::string("master_dtype ") + model::ToString(p.master_dtype) +
                    ": Accelerate keeps fp32 sharded parameters under mixed precision");
  }
  return notes;
}

ordered_json HfFsdpConfig(const model::Plan& p, const ExportContext& ctx, const Layout& l) {
  ordered_json c;
  c["version"] = 2;
  c["reshard_after_forward"] = l.reshard_after_forward;
  if (p.wrap.kind == model::WrapPolicy::Kind::kSize) {
    c["auto_wrap_policy"] = "SIZE_BASED_WRAP";
    c["min_num_params"] = p.wrap.min_num_params;
  } else {
    c["auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP";
    c["transformer_layer_cls_to_wrap"] = ordered_json::array({ctx.layer_class});
  }
  c["activation_checkpointing"] = p.checkpointing != model::Checkpointing::kNone;
  c["state_dict_type"] = "SHARDED_STATE_DICT";
  c["cpu_ram_efficient_loading"] = true;
  return c;
}

// DeepSpeed's stage: 3 shards parameters too (FULL_SHARD, HYBRID_SHARD), 2 gradients and
// optimizer state (SHARD_GRAD_OP, HYBRID_SHARD_ZERO2), 0 nothing (accelerate
// docs/source/usage_guides/fsdp.md, "Mapping between FSDP sharding strategies and DeepSpeed").
int ZeroStage(const model::Plan& p, const Layout& l) {
  if (l.replicated_only()) return 0;
  bool zero3 = p.strategy == model::ShardingStrategy::kFullShard ||
               p.strategy == model::ShardingStrategy::kHybridShard;
  return zero3 ? 3 : 2;
}

std::vector<std::string> DeepspeedNotes(const model::Plan& p, const ExportContext& ctx,
                                        const Layout& l, int stage) {
  std::vector<std::string> notes;
  AddModelFeatureNotes(p, "DeepSpeed's ZeRO config", /*has_cp=*/false, &notes);
  if (l.hybrid() && stage == 3) {
    notes.push_back(
        "hybrid_shard: written as ZeRO++ hpZ (zero_hpz_partition_size " + std::to_string(l.shard) +
        "), a secondary parameter copy per group; gradients and optimizer state stay sharded "
        "over all " +
        std::to_string(ctx.world_size) +
        " ranks (MiCS, mics_shard_size, is "
        "the replicate-across-groups variant)");
  } else if (l.hybrid()) {
    notes.push_back(
        "hybrid_shard_zero2: ZeRO stage 2 shards gradients and optimizer state over all " +
        std::to_string(ctx.world_size) + " ranks; no replication across groups");
  }
  if (stage == 3) {
    notes.push_back("wrap " + model::WrapSpecToString(p.wrap) +
                    ": ZeRO-3 gathers each submodule's "
                    "parameters itself (stage3_prefetch_bucket_size, stage3_max_live_parameters); "
                    "there are no FSDP units");
    if (!l.reshard_after_forward) {
      notes.push_back(
          "reshard_after_forward false: ZeRO-3 frees parameters after use; keeping them "
          "gathered until backward has no setting (stage3_max_reuse_distance is the closest)");
    }
  }
  if (p.checkpointing != model::Checkpointing::kNone) {
    notes.push_back(
        "checkpointing " + model::CheckpointingSpecToString(p) +
        ": enable it in the model "
        "(model.gradient_checkpointing_enable()); DeepSpeed's activation_checkpointing section "
        "only configures deepspeed.checkpointing");
  }
  // DeepSpeed's activation_checkpointing.cpu_checkpointing moves checkpointed layer inputs only,
  // through deepspeed.checkpointing, not what autograd saves layer by layer.
  AddActivationOffloadNote(p, "DeepSpeed", &notes);
  if (p.offload == model::Offload::kAll && stage != 3) {
    notes.push_back(
        "offload all: offload_param needs ZeRO stage 3; only the optimizer is offloaded");
  }
  if (p.offload != model::Offload::kNone && stage == 0) {
    notes.push_back("offload: ZeRO stage 0 has no offload; written without");
  }
  if (p.no_sync && p.grad_accum > 1 && stage >= 2) {
    notes.push_back("no_sync true: ZeRO stages 2 and 3 reduce gradients on every micro-batch");
  }
  if (p.forward_prefetch || p.backward_prefetch != model::BackwardPrefetch::kPre ||
      p.max_inflight_allgathers != 2) {
    notes.push_back(
        "prefetch settings: DeepSpeed prefetches by bucket size (stage3_prefetch_bucket_size), "
        "not by unit");
  }
  if (p.master_dtype != DType::kFp32) {
    notes.push_back(std::string("master_dtype ") + model::ToString(p.master_dtype) +
                    ": DeepSpeed keeps fp32 master weights under bf16/fp16");
  }
  notes.push_back("sequence length " + std::to_string(ctx.seq_len) + " and optimizer " +
                  OptimizerText(p) +
                  " are not in this config (set them in your script or an \"optimizer\" section)");
  return notes;
}

}  // namespace

// TrainingArguments JSON. Keys read in huggingface/transformers src/transformers/training_args.py
// (fd79833 and the later _process_fsdp_args): fsdp ("full_shard"|"shard_grad_op" + "auto_wrap",
// "offload"), fsdp_config keys without the "fsdp_" prefix (version, reshard_after_forward,
// auto_wrap_policy, transformer_layer_cls_to_wrap, min_num_params, activation_checkpointing,
// state_dict_type, cpu_ram_efficient_loading), per_device_train_batch_size,
// gradient_accumulation_steps, max_grad_norm, bf16, fp16, gradient_checkpointing, optim. With
// version 2, "hybrid_shard" is rejected, so HSDP goes to notes; with FSDP the checkpointing is
// fsdp_config.activation_checkpointing (the Trainer warns that gradient_checkpointing adds an
// all-gather), trainer.py skips gradient sync on all but the last micro-batch.
ExportResult ExportHfTrainer(const model::Plan& p, const ExportContext& ctx) {
  Layout l = ResolveLayout(p, ctx);
  ExportResult r;
  r.notes = HfTrainerNotes(p, ctx, l);
  ordered_json j;
  j["output_dir"] = "trainer_output";
  // TRL's DPOConfig counts preference pairs; each is a chosen and a rejected row of the plan.
  const bool dpo_pairs = p.loss_kernel == model::LossKernel::kTrlLogps && p.micro_batch % 2 == 0;
  j["per_device_train_batch_size"] = dpo_pairs ? p.micro_batch / 2 : p.micro_batch;
  if (dpo_pairs) {
    r.notes.push_back("per_device_train_batch_size " + std::to_string(p.micro_batch / 2) +
                      ": preference pairs, as TRL's DPOConfig counts them (the plan's " +
                      std::to_string(p.micro_batch) + " rows are their chosen and rejected completions)");
  }
  j["gradient_accumulation_steps"] = p.grad_accum;
  j["max_grad_norm"] = ctx.max_grad_norm > 0 ? ctx.max_grad_norm : 0.0;
  j["bf16"] = p.param_dtype == DType::kBf16;
  j["fp16"] = p.param_dtype == DType::kFp16;
  j["optim"] = HfOptim(p, &r.notes);
  if (p.loss_kernel == model::LossKernel::kFusedLinear || p.liger.any()) {
    // The Trainer applies Liger through _apply_liger_kernel_to_instance(model, **liger_kernel_config)
    // (liger_kernel/transformers/monkey_patch.py: keys the model's apply function lacks are
    // dropped): exactly the kernels the plan has (import_hf_trainer.cc ReadLiger).
    j["use_liger_kernel"] = true;
    j["liger_kernel_config"] = {
        {"fused_linear_cross_entropy", p.loss_kernel == model::LossKernel::kFusedLinear},
        {"cross_entropy", false}, {"rope", p.liger.rope}, {"rms_norm", p.liger.rms_norm},
        {"swiglu", p.liger.swiglu}, {"geglu", false}, {"layer_norm", false}};
  }
  bool ckpt = p.checkpointing != model::Checkpointing::kNone;
  j["gradient_checkpointing"] = ckpt && l.replicated_only();
  // transformers runs it reentrant unless told otherwise (import_hf_trainer.cc): say which the
  // plan assumes (Plan::checkpoint_reentrant).
  if (ckpt && l.replicated_only()) j["gradient_checkpointing_kwargs"] = {{"use_reentrant", p.checkpoint_reentrant}};
  if (!l.replicated_only()) {
    std::string fsdp = p.strategy == model::ShardingStrategy::kFullShard ||
                               p.strategy == model::ShardingStrategy::kHybridShard
                           ? "full_shard"
                           : "shard_grad_op";
    fsdp += " auto_wrap";
    if (p.offload == model::Offload::kAll) fsdp += " offload";
    j["fsdp"] = fsdp;
    j["fsdp_config"] = HfFsdpConfig(p, ctx, l);
  } else {
    j["fsdp"] = "";  // TrainingArguments' default: no FSDP, the Trainer runs DDP
  }
  r.text = j.dump(2) + "\n";
  return r;
}

// DeepSpeed config. Keys read in deepspeedai/DeepSpeed @edaa722: deepspeed/runtime/constants.py
// (train_batch_size = micro x grad-accum x world, train_micro_batch_size_per_gpu,
// gradient_accumulation_steps, gradient_clipping, bf16.enabled, fp16.enabled,
// communication_data_type "fp32"|"bf16"|"fp16"), deepspeed/runtime/zero/config.py
// DeepSpeedZeroConfig (stage, offload_optimizer, offload_param, zero_hpz_partition_size; unknown
// keys are errors), deepspeed/runtime/zero/offload_config.py (device "cpu", pin_memory). Bucket
// sizes stay at their defaults.
ExportResult ExportDeepspeed(const model::Plan& p, const ExportContext& ctx) {
  Layout l = ResolveLayout(p, ctx);
  int stage = ZeroStage(p, l);
  ExportResult r;
  r.notes = DeepspeedNotes(p, ctx, l, stage);
  ordered_json j;
  j["train_batch_size"] = ctx.global_batch;
  j["train_micro_batch_size_per_gpu"] = p.micro_batch;
  j["gradient_accumulation_steps"] = p.grad_accum;
  j["gradient_clipping"] = ctx.max_grad_norm > 0 ? ctx.max_grad_norm : 0.0;
  j["bf16"] = {{"enabled", p.param_dtype == DType::kBf16}};
  j["fp16"] = {{"enabled", p.param_dtype == DType::kFp16}};
  j["communication_data_type"] = model::ToString(p.reduce_dtype);
  ordered_json zero;
  zero["stage"] = stage;
  const ordered_json cpu = {{"device", "cpu"}, {"pin_memory", true}};
  if (stage > 0 && p.offload != model::Offload::kNone) zero["offload_optimizer"] = cpu;
  if (stage == 3 && p.offload == model::Offload::kAll) zero["offload_param"] = cpu;
  if (stage == 3 && l.hybrid()) zero["zero_hpz_partition_size"] = l.shard;
  j["zero_optimization"] = zero;
  r.text = j.dump(2) + "\n";
  return r;
}

}  // namespace shardtune::configs::internal
