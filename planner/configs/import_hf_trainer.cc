// Import of Hugging Face Trainer arguments (a TrainingArguments JSON as HfArgumentParser reads
// it): batch, accumulation, precision, optimizer, and FSDP through `fsdp` + `fsdp_config`.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "model/errors.h"
#include "model/text.h"
#include "planner/configs/import_reader.h"

namespace shardtune::configs::internal {
namespace {

using model::ShardingStrategy;

const KeyTable& TrainerKeys() {
  static const KeyTable t = WithIgnored(
      Concat({
          Mapped({"per_device_train_batch_size", "gradient_accumulation_steps",
                  "gradient_checkpointing", "bf16", "fp16", "optim", "max_grad_norm", "fsdp",
                  "fsdp_config", "gradient_checkpointing_kwargs",
                  // TRL SFTConfig: the sequence length the trainer pads or truncates to.
                  "max_seq_length", "max_length"}),
          {{"deepspeed", KeyUse::kUnsupported, "DeepSpeed ZeRO"},
           {"torch_compile", KeyUse::kUnsupported, "torch.compile"}},
          Mapped({"use_liger_kernel", "liger_kernel_config",
                  // TRL SFTConfig packing: one padding-free row per micro-batch (ReadTrlPacking).
                  "packing", "packing_strategy", "padding_free"}),
          Ignored({"eval_packing"}),
          // TRL's ModelConfig (trl/trainer/model_config.py at f2cd577), which `trl sft --config`
          // reads from the same file: the model, its load dtype, attention and PEFT LoRA.
          Mapped({"model_name_or_path", "dtype",
                  "torch_dtype",  // the same before TRL renamed it
                  "attn_implementation", "use_peft", "lora_r", "lora_alpha", "lora_dropout",
                  "lora_target_modules"}),
          {{"use_dora", KeyUse::kUnsupported, "DoRA adapters"},
           {"lora_target_parameters", KeyUse::kUnsupported,
            "LoRA on parameters (MoE expert weights)"},
           {"lora_modules_to_save", KeyUse::kUnsupported,
            "whole modules trained beside the adapters"},
           {"load_in_8bit", KeyUse::kUnsupported, "bitsandbytes 8-bit base weights"},
           {"load_in_4bit", KeyUse::kUnsupported, "bitsandbytes 4-bit base weights (QLoRA)"},
           {"activation_offloading", KeyUse::kUnsupported,
            "TRL's activation offloading to the CPU"}},
          Mapped({"loss_type"}),
          // TRL's DPOConfig (trl/trainer/dpo_config.py at f2cd577) and an older TRL's DPO keys:
          // what decides the reference forward (ReadTrlDpo); the loss's own coefficients change
          // [rows]-sized tensors only.
          Mapped({"beta", "precompute_ref_log_probs", "reference_free", "force_use_ref_model",
                  "sync_ref_model", "max_prompt_length", "max_completion_length"}),
          {{"use_logits_to_keep", KeyUse::kUnsupported,
            "an older TRL's DPO logits_to_keep (the prompt's logits skipped)"}},
          Mapped({"rpo_alpha"}),
      }),
      // Paths, logging, evaluation, schedule and data-loading keys of training_args.py.
      {"output_dir",
       "overwrite_output_dir",
       "do_train",
       "do_eval",
       "do_predict",
       "eval_strategy",
       "evaluation_strategy",
       "eval_steps",
       "per_device_eval_batch_size",
       "eval_accumulation_steps",
       "learning_rate",
       "weight_decay",
       "adam_beta1",
       "adam_beta2",
       "adam_epsilon",
       "num_train_epochs",
       "max_steps",
       "lr_scheduler_type",
       "lr_scheduler_kwargs",
       "warmup_ratio",
       "warmup_steps",
       "log_level",
       "logging_dir",
       "logging_strategy",
       "logging_first_step",
       "logging_steps",
       "logging_nan_inf_filter",
       "save_strategy",
       "save_steps",
       "save_total_limit",
       "save_safetensors",
       "save_only_model",
       "seed",
       "data_seed",
       "tf32",
       "local_rank",
       "ddp_backend",
       "ddp_timeout",
       "ddp_find_unused_parameters",
       "ddp_bucket_cap_mb",
       "dataloader_num_workers",
       "dataloader_pin_memory",
       "dataloader_prefetch_factor",
       "dataloader_drop_last",
       "dataloader_persistent_workers",
       "run_name",
       "disable_tqdm",
       "remove_unused_columns",
       "label_names",
       "load_best_model_at_end",
       "metric_for_best_model",
       "greater_is_better",
       "report_to",
       "push_to_hub",
       "hub_model_id",
       "hub_strategy",
       "hub_token",
       "resume_from_checkpoint",
       "include_num_input_tokens_seen",
       "group_by_length",
       "length_column_name",
       "bf16_full_eval",
       "fp16_full_eval",
       "half_precision_backend",
       "fp16_opt_level",
       "label_smoothing_factor",
       "optim_args",
       "dataset_text_field",
       // TRL ScriptArguments (trl/scripts/utils.py) and SFTConfig / ModelConfig
       // keys about data, tokenizer and logging, and those whose effect on
       // memory and time shardtune takes as nil (use_rslora and lora_task_type
       // change the adapter's scale and head only; loss_type nll or dft).
       "dataset_name",
       "dataset_config",
       "dataset_train_split",
       "dataset_test_split",
       "dataset_streaming",
       "datasets",
       "streaming",
       "test_split_size",
       "ignore_bias_buffers",
       "model_revision",
       "trust_remote_code",
       "chat_template_path",
       "dataset_kwargs",
       "eos_token",
       "pad_token",
       "truncation_mode",
       "shuffle_dataset",
       "pad_to_multiple_of",
       "completion_only_loss",
       "assistant_only_loss",
       "use_rslora",
       "lora_task_type",
       "bnb_4bit_quant_type",
       "use_bnb_nested_quant",
       "bnb_4bit_quant_storage",
       // Recipe repositories' own data, tokenizer, hub and logging arguments
       // beside TRL's (huggingface/alignment-handbook DataArguments and
       // ModelArguments, huggingface/open-r1 ScriptArguments).
       "chat_template",
       "dataset_mixer",
       "dataset_mixture",
       "dataset_splits",
       "dataset_configs",
       "dataset_prompt_column",
       "text_column",
       "preprocessing_num_workers",
       "truncation_side",
       "auto_insert_empty_system_msg",
       "auto_set_chat_template",
       "system_prompt",
       "base_model_revision",
       "model_code_revision",
       "tokenizer_name_or_path",
       "use_flash_attention_2",
       "hub_model_revision",
       "overwrite_hub_revision",
       "push_to_hub_revision",
       "wandb_entity",
       "wandb_project",
       "wandb_run_group",
       "callbacks",
       "benchmarks",
       "dataset_num_proc",
       "prediction_loss_only",
       "full_determinism",
       "use_cpu",
       "accelerator_config",
       // DPO's loss coefficients and reference sync schedule, its dataset and
       // tokenizer arguments (dpo_config.py at f2cd577 and before).
       "precompute_ref_batch_size",
       "loss_weights",
       "ld_alpha",
       "f_divergence_type",
       "f_alpha_divergence_coef",
       "label_smoothing",
       "use_weighting",
       "discopop_tau",
       "ref_model_mixup_alpha",
       "ref_model_sync_steps",
       "disable_dropout",
       "router_aux_loss_coef",
       "model_init_kwargs",
       "ref_model_init_kwargs",
       "model_adapter_name",
       "ref_adapter_name",
       "padding_value",
       "label_pad_token_id",
       "generate_during_eval",
       "is_encoder_decoder",
       "tools"});
  return t;
}

// training_args.py fsdp_config keys (the "fsdp_" prefix is optional: __post_init__ strips it).
const KeyTable& FsdpConfigKeys() {
  static const KeyTable t = Concat({
      Mapped({"version", "min_num_params", "transformer_layer_cls_to_wrap", "auto_wrap_policy",
              "backward_prefetch", "forward_prefetch", "limit_all_gathers",
              "activation_checkpointing", "reshard_after_forward", "offload_params",
              "cpu_ram_efficient_loading"}),
      Ignored({"state_dict_type", "use_orig_params", "sync_module_states"}),
      {{"xla", KeyUse::kUnsupported, "PyTorch/XLA FSDP"},
       {"xla_fsdp_v2", KeyUse::kUnsupported, "PyTorch/XLA FSDP"},
       {"xla_fsdp_grad_ckpt", KeyUse::kUnsupported, "PyTorch/XLA FSDP"},
       {"xla_fsdp_settings", KeyUse::kUnsupported, "PyTorch/XLA FSDP"}},
  });
  return t;
}

using model::Lower;

// The `fsdp` options: a space-separated string or a list (training_args.py FSDPOption).
std::vector<std::string> FsdpOptions(const ConfigReader& r) {
  const Json* v = r.Raw("fsdp");
  std::vector<std::string> opts;
  if (v == nullptr || v->is_null() || (v->is_boolean() && !v->get<bool>())) return opts;
  if (v->is_string()) {
    std::istringstream words(v->get<std::string>());
    std::string w;
    while (words >> w) opts.push_back(w);
  } else if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_string()) r.Fail("fsdp", "FSDP options as a string or a list of strings");
      opts.push_back(e.get<std::string>());
    }
  } else {
    r.Fail("fsdp", "FSDP options, e.g. \"full_shard auto_wrap\"");
  }
  static const std::vector<std::string> known = {"full_shard",   "shard_grad_op",      "no_shard",
                                                 "hybrid_shard", "hybrid_shard_zero2", "offload",
                                                 "auto_wrap"};
  for (const auto& o : opts) {
    if (std::find(known.begin(), known.end(), o) == known.end()) {
      throw InputError(r.Where("fsdp") +
                       ": expected options among full_shard, shard_grad_op, "
                       "no_shard, hybrid_shard, hybrid_shard_zero2, offload, "
                       "auto_wrap, got " +
                       QuoteName(o));
    }
  }
  return opts;
}

bool HasOption(const std::vector<std::string>& opts, const std::string& o) {
  return std::find(opts.begin(), opts.end(), o) != opts.end();
}

// fsdp_config with the "fsdp_" prefixes removed (a copy, so messages point at the real keys'
// parent).
Json StripPrefixes(const Json& c) {
  Json out = Json::object();
  for (const auto& item : c.items()) {
    std::string k = item.key().rfind("fsdp_", 0) == 0 ? item.key().substr(5) : item.key();
    out[k] = item.value();
  }
  return out;
}

void ReadFsdp(const ConfigReader& top, const std::vector<std::string>& opts,
              const ImportContext& ctx, ImportResult* out, model::Plan* plan,
              std::vector<std::string>* ignored) {
  std::optional<Json> stripped;
  std::optional<ConfigReader> fc;
  if (top.Has("fsdp_config")) {
    if (!top.Raw("fsdp_config")->is_object()) {
      top.Fail("fsdp_config", "the fsdp_config mapping inline (a path to a JSON file is not read)");
    }
    stripped = StripPrefixes(*top.Raw("fsdp_config"));
    fc.emplace(*stripped, top.file(), "/fsdp_config", ignored);
    fc->CheckKeys(FsdpConfigKeys());
  }
  int64_t version = fc ? fc->Int("version", 1, 2).value_or(1) : 1;
  out->fsdp_version = static_cast<int>(version);
  ShardingStrategy s = HasOption(opts, "shard_grad_op")        ? ShardingStrategy::kShardGradOp
                       : HasOption(opts, "no_shard")           ? ShardingStrategy::kNoShard
                       : HasOption(opts, "hybrid_shard")       ? ShardingStrategy::kHybridShard
                       : HasOption(opts, "hybrid_shard_zero2") ? ShardingStrategy::kHybridShardZero2
                                                               : ShardingStrategy::kFullShard;
  if (version == 2) {
    if (s != ShardingStrategy::kFullShard && s != ShardingStrategy::kShardGradOp) {
      top.Fail("fsdp", "full_shard or shard_grad_op with fsdp_config version 2");
    }
    bool reshard = s == ShardingStrategy::kFullShard;
    if (auto r = fc->Bool("reshard_after_forward")) reshard = *r;
    SetFsdp2Sharding(0, ctx.world_size, reshard, plan);
  } else {
    plan->strategy = s;
    plan->shard_group_size = 0;
    plan->reshard_after_forward = model::StrategyReshardsAfterForward(s);
  }
  plan->offload = HasOption(opts, "offload") || (fc && fc->Bool("offload_params").value_or(false))
                      ? model::Offload::kAll
                      : model::Offload::kNone;
  if (!fc) return;
  std::string policy;
  if (auto p = fc->Enum("auto_wrap_policy", {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP"})) {
    policy = *p;
  } else if (fc->Int("min_num_params", 0, INT64_MAX).value_or(0) > 0) {
    policy = "SIZE_BASED_WRAP";
  } else if (fc->Has("transformer_layer_cls_to_wrap") || HasOption(opts, "auto_wrap")) {
    policy = "TRANSFORMER_BASED_WRAP";
  }
  if (policy == "SIZE_BASED_WRAP") {
    model::WrapPolicy w;
    w.kind = model::WrapPolicy::Kind::kSize;
    w.min_num_params = fc->Int("min_num_params", 1, INT64_MAX).value_or(100000000);
    w.expert_units = plan->wrap.expert_units;
    plan->wrap = w;
  } else if (policy == "TRANSFORMER_BASED_WRAP") {
    if (auto cls = fc->Names("transformer_layer_cls_to_wrap")) {
      CheckLayerClasses(*fc, "transformer_layer_cls_to_wrap", *cls, ctx);
    }
    model::WrapPolicy w;
    w.expert_units = plan->wrap.expert_units;
    plan->wrap = w;
  }
  if (auto b = fc->Raw("backward_prefetch"); b && !b->is_null()) {
    std::string v = b->is_string() ? Lower(b->get<std::string>()) : "";
    if (v != "backward_pre" && v != "backward_post") {
      fc->Fail("backward_prefetch", "backward_pre or backward_post");
    }
    if (version == 2) {
      out->warnings.push_back(fc->Where("backward_prefetch") + ": FSDP2 ignores it");
    } else {
      plan->backward_prefetch =
          v == "backward_pre" ? model::BackwardPrefetch::kPre : model::BackwardPrefetch::kPost;
    }
  }
  if (auto f = fc->Bool("forward_prefetch")) plan->forward_prefetch = *f && version == 1;
  if (auto l = fc->Bool("limit_all_gathers"); l && !*l) {
    fc->Fail("limit_all_gathers",
             "true (without the limit FSDP1 all-gathers run ahead "
             "without bound, which shardtune does not model)");
  }
  if (fc->Bool("cpu_ram_efficient_loading").value_or(false)) {
    out->warnings.push_back(
        fc->Where("cpu_ram_efficient_loading") +
        ": rank 0 alone reads the weights; pass --model-load rank0 to model it");
  }
}

// use_liger_kernel: the Trainer calls _apply_liger_kernel_to_instance(model, **liger_kernel_config)
// (Liger-Kernel src/liger_kernel/transformers/monkey_patch.py), whose apply_liger_kernel_to_<model>
// functions default rope, rms_norm, swiglu and fused_linear_cross_entropy on and cross_entropy off,
// and receive only the keys their signature has (geglu, layer_norm: other model types). The fused
// linear cross-entropy is Plan::loss_kernel fused_linear (the Trainer passes labels, so the
// patched forward takes it); rms_norm, swiglu and rope are Plan::liger (model/plan.h
// LigerKernels, checked against the model by LigerProblems). Liger's plain cross_entropy (its
// in-place logits gradient) is refused by name.
void ReadLiger(const ConfigReader& top, model::Plan* plan) {
  if (!top.Bool("use_liger_kernel").value_or(false)) return;
  std::optional<ConfigReader> c = top.Section("liger_kernel_config");
  auto on = [&](const char* k, bool by_default) {
    return c ? c->Bool(k).value_or(by_default) : by_default;
  };
  if (c) {
    c->CheckKeys({{"fused_linear_cross_entropy"}, {"cross_entropy"}, {"rope"}, {"rms_norm"},
                  {"swiglu"}, {"geglu"}, {"layer_norm"}});
  }
  if (on("cross_entropy", false)) {
    c->Fail("cross_entropy", "false (Liger's cross-entropy kernel, which writes the logits' "
                             "gradient into them, is not modelled; fused_linear_cross_entropy is)");
  }
  if (on("fused_linear_cross_entropy", true)) plan->loss_kernel = model::LossKernel::kFusedLinear;
  plan->liger.rms_norm = on("rms_norm", true);
  plan->liger.swiglu = on("swiglu", true);
  plan->liger.rope = on("rope", true);
}

// TRL's SFTConfig default max_length (trl/trainer/sft_config.py at f2cd577: `max_length: int |
// None = 1024`): what a TRL file that sets none truncates (and packs) to (ReadTrlDefaultLength).
constexpr int64_t kTrlDefaultMaxLength = 1024;

// The key that makes a file TRL's SFTConfig rather than the Trainer's arguments alone (""
// when none does).
std::string TrlKey(const ConfigReader& top) {
  for (const char* key : {"model_name_or_path", "dataset_name", "datasets", "packing", "padding_free",
                          "use_peft", "dataset_text_field", "completion_only_loss", "assistant_only_loss",
                          "loss_type", "max_length"}) {
    if (top.Has(key)) return key;
  }
  return "";
}

// SFTConfig's defaults where they differ from TrainingArguments' (trl/trainer/sft_config.py at
// f2cd577: "gradient_checkpointing: Defaults to True", "bf16: Defaults to True if fp16 is not
// set"), and TrainingArguments' per_device_train_batch_size 8, which the Trainer runs when the
// file sets none. loss_type: "chunked_nll" unless use_liger_kernel (then "nll"); "nll" is the
// model's own cross-entropy; "dft" (probability-weighted) is not modelled.
void ReadTrlPrecisionDefaults(const ConfigReader& top, model::Plan* plan) {
  if (!top.Has("bf16") && !top.Bool("fp16").value_or(false)) {
    plan->param_dtype = model::DType::kBf16;
    plan->reduce_dtype = model::DType::kBf16;  // Accelerate reduces in the param dtype
  }
  if (!top.Has("gradient_checkpointing") && plan->checkpointing == model::Checkpointing::kNone) {
    plan->checkpointing = model::Checkpointing::kFull;
  }
}

void ReadTrlDefaults(const ConfigReader& top, ImportResult* out, model::Plan* plan) {
  ReadTrlPrecisionDefaults(top, plan);
  const bool liger = top.Bool("use_liger_kernel").value_or(false);
  // max_seq_length is no SFTConfig field at f2cd577 (renamed max_length): a file that sets it was
  // written for an older TRL, which had no loss_type and ran the model's own cross-entropy.
  const bool older_trl = top.Has("max_seq_length") && !top.Has("loss_type");
  if (older_trl) {
    out->warnings.push_back(top.Where("max_seq_length") + ": a TRL config from before max_length (an older TRL, "
                            "whose loss is the model's own cross-entropy; today's default chunked_nll came later)");
  }
  const std::string loss = top.Enum("loss_type", {"chunked_nll", "nll", "dft"})
                               .value_or(liger || older_trl ? "nll" : "chunked_nll");
  if (loss == "dft") top.Fail("loss_type", "chunked_nll or nll (DFT's probability weights are not modelled)");
  if (loss == "chunked_nll") {
    if (liger) top.Fail("loss_type", "nll with use_liger_kernel (TRL: chunked_nll is not compatible with it)");
    plan->loss_kernel = model::LossKernel::kTrlChunkedNll;
  }
}

// A file with TRL's own keys is an SFTConfig, which truncates to max_length 1024 when it sets none
// (trl/trainer/sft_config.py; the Trainer's arguments alone set no length).
void ReadTrlDefaultLength(const ConfigReader& top, ImportResult* out, model::Plan* plan) {
  if (!out->seq_len_from.empty() || top.Has("max_length") || top.Has("max_seq_length")) return;
  for (const char* key : {"model_name_or_path", "dataset_name", "datasets", "packing", "padding_free",
                          "use_peft", "dataset_text_field", "completion_only_loss", "assistant_only_loss"}) {
    if (!top.Has(key)) continue;
    plan->seq_len = kTrlDefaultMaxLength;
    out->seq_len_from = "TRL's SFTConfig default max_length " + std::to_string(kTrlDefaultMaxLength);
    out->warnings.push_back(top.Where(key) + ": a TRL SFT config without max_length; TRL truncates (and packs) to "
                            "its default " + std::to_string(kTrlDefaultMaxLength) + " tokens");
    return;
  }
}

// TRL's packing (trl/trainer/sft_trainer.py at f2cd577). `padding_free = args.padding_free or
// (args.packing and args.packing_strategy in {"bfd", "bfd_split"})`; pack_dataset bins whole
// sequences (truncated to max_length, or split under bfd_split) into examples of at most
// max_length tokens, and DataCollatorForLanguageModeling(padding_free=True) flattens a batch of
// per_device_train_batch_size examples into one row with position_ids restarting per sequence
// (FlashAttention's varlen path). So a micro-batch is one row of up to B x max_length tokens whose
// sequences are at most max_length: shardtune's packed row (Plan::packed_seq_len). "wrapped"
// without padding_free cuts the stream into full rows of max_length attended whole: the plain
// fixed-length batch. padding_free without packing: TRL raises when max_length is set ("When
// `padding_free=True` without packing, `max_length` is not enforced") and has no bound when not.
void ReadTrlPacking(const ConfigReader& top, ImportResult* out, model::Plan* plan) {
  const bool packing = top.Bool("packing").value_or(false);
  const std::string strategy = top.Enum("packing_strategy", {"bfd", "bfd_split", "wrapped", "bfd-requeue"}).value_or("bfd");
  const bool padding_free = top.Bool("padding_free").value_or(false) ||
                            (packing && (strategy == "bfd" || strategy == "bfd_split" || strategy == "bfd-requeue"));
  if (!padding_free) return;  // unpacked, or "wrapped" rows of max_length: the fixed-length batch
  const Json* ml = top.Raw("max_length");
  const bool max_length_null = (ml != nullptr && ml->is_null()) || (ml == nullptr && top.Raw("max_seq_length") != nullptr &&
                                                                      top.Raw("max_seq_length")->is_null());
  if (!packing) {
    if (max_length_null) {
      top.Fail("padding_free", "false with max_length null (each row is the data's own sequences, of no bounded length)");
    }
    top.Fail("padding_free", "true only with packing (TRL's SFTTrainer raises \"When `padding_free=True` without "
                             "packing, `max_length` is not enforced\")");
  }
  if (max_length_null) top.Fail("max_length", "an integer with packing (TRL: \"When packing is enabled, `max_length` can't be `None`\")");
  const int64_t max_length = plan->seq_len;  // the file's, or TRL's default (ReadTrlDefaultLength)
  const int64_t rows = plan->micro_batch;
  plan->packed_seq_len = max_length;
  plan->seq_len = rows * max_length;
  plan->micro_batch = 1;
  out->warnings.push_back(top.Where("packing") + ": TRL " + (packing ? "packs (" + strategy + ") and " : "") +
                          "flattens each batch of " + std::to_string(rows) + " packed examples into one padding-free row of up to " +
                          std::to_string(rows * max_length) + " tokens (sequences of at most " + std::to_string(max_length) +
                          "); judged at that row");
}

// The keys that make a file TRL's DPOConfig (a `trl dpo --config` file); "" when none does.
std::string TrlDpoKey(const ConfigReader& top) {
  for (const char* key : {"beta", "precompute_ref_log_probs", "reference_free", "force_use_ref_model",
                          "sync_ref_model", "max_prompt_length", "max_completion_length", "rpo_alpha",
                          "ld_alpha", "f_divergence_type", "discopop_tau", "ref_model_mixup_alpha",
                          "ref_model_sync_steps", "use_weighting", "precompute_ref_batch_size", "ref_adapter_name",
                          "ref_model_init_kwargs", "loss_weights"}) {
    if (top.Has(key)) return key;
  }
  return "";
}

// DPOConfig's loss_type values (dpo_config.py at f2cd577; "sigmoid" by default); each combines
// the same per-token log-probs of the policy and the reference ("sft" adds the chosen rows' NLL
// from them too), so none changes what is computed or kept beyond [rows] tensors.
const std::vector<std::string>& DpoLossTypes() {
  static const std::vector<std::string> v = {"sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust",
                                             "bco_pair", "sppo_hard", "aot", "aot_unpaired", "apo_zero",
                                             "apo_down", "discopop", "sft", "sigmoid_norm"};
  return v;
}

// TRL's DPOTrainer (trl/trainer/dpo_trainer.py at f2cd577) as `trl dpo --config` runs it:
//  - DataCollatorForPreference pads each pair's chosen and rejected completions together and
//    concatenates them: a micro-batch of B pairs is 2B rows of prompt + completion, truncated to
//    max_length (default 1024) and padded to the longest row (judged at max_length);
//  - _compute_loss: the policy's forward, selective_log_softmax of its logits (loss_kernel
//    trl_logps), then the reference's forward under no_grad on the same rows
//    (Plan::reference), then the loss and the policy's backward;
//  - the reference: none with precompute_ref_log_probs (the log-probs are computed before
//    training, a pass shardtune does not estimate) or an older TRL's reference_free; the policy
//    with its adapters off under PEFT (unless force_use_ref_model); else a copy of the model
//    loaded from its path, wrapped by prepare_fsdp (trl/models/utils.py): FSDP2 shards its root
//    only, FSDP1 per the plugin's auto-wrap (the caller picks by the FSDP version the files say).
//  - padding_free: DPOTrainer warns that it is disabled and pads (dpo_trainer.py "temporarily
//    unavailable after a refactor"); use_liger_kernel runs Liger's fused DPO loss on the
//    reference's hidden states, which is not modelled.
void ReadTrlDpo(const ConfigReader& top, ImportResult* out, model::Plan* plan) {
  ReadTrlPrecisionDefaults(top, plan);
  if (top.Bool("use_liger_kernel").value_or(false)) {
    top.Fail("use_liger_kernel", "false with a DPO config (Liger's fused DPO loss over the reference's hidden states is "
                                 "not modelled)");
  }
  for (const auto& n : top.Names("loss_type").value_or(std::vector<std::string>{})) {
    if (std::find(DpoLossTypes().begin(), DpoLossTypes().end(), n) == DpoLossTypes().end()) {
      throw InputError(top.Where("loss_type") + ": expected DPO losses among " + model::Join(DpoLossTypes(), ", ") +
                       ", got " + QuoteName(n));
    }
  }
  plan->loss_kernel = model::LossKernel::kTrlLogps;
  plan->liger = model::LigerKernels{};
  if (top.Bool("padding_free").value_or(false)) {
    out->warnings.push_back(top.Where("padding_free") + ": TRL's DPOTrainer turns padding_free off and pads (\"temporarily "
                            "unavailable after a refactor\"); judged padded");
  }
  if (const Json* ml = top.Raw("max_length"); ml != nullptr && ml->is_null()) {
    top.Fail("max_length", "an integer (with null TRL does not truncate, and the rows have no bound to judge at)");
  }
  if (out->seq_len_from.empty() && !top.Has("max_length")) {
    plan->seq_len = kTrlDefaultMaxLength;
    out->seq_len_from = "TRL's DPOConfig default max_length " + std::to_string(kTrlDefaultMaxLength);
  }
  const int pairs = plan->micro_batch;
  plan->micro_batch = 2 * pairs;
  out->warnings.push_back(top.Where(TrlDpoKey(top)) + ": TRL's DPOTrainer concatenates each pair's chosen and rejected "
                          "rows: " + std::to_string(pairs) + " pair" + (pairs > 1 ? "s" : "") + " per device make " +
                          std::to_string(2 * pairs) + " rows of up to max_length tokens (judged at max_length)");
  const bool peft = top.Bool("use_peft").value_or(false);
  using R = model::InStepReference;
  if (top.Bool("precompute_ref_log_probs").value_or(false) || top.Bool("reference_free").value_or(false)) {
    plan->reference = R::kNone;
    out->warnings.push_back(top.Where(top.Has("precompute_ref_log_probs") ? "precompute_ref_log_probs" : "reference_free") +
                            ": no reference forward in the training steps (the precomputing pass before "
                            "training is not estimated)");
  } else if (peft && !top.Bool("force_use_ref_model").value_or(false)) {
    if (top.Bool("sync_ref_model").value_or(false)) {
      top.Fail("sync_ref_model", "false with use_peft (TRL: sync_ref_model is not supported with a PEFT model)");
    }
    plan->reference = R::kAdaptersOff;
  } else {
    plan->reference = R::kFsdp1Blocks;  // the caller settles FSDP1 or FSDP2 (ImportResult::fsdp_version)
    out->reference_copy = true;
  }
}

// TRL's ModelConfig (trl/trainer/model_config.py at f2cd577) as `trl sft --config` reads it from
// the same file as the SFTConfig. The model is named for the CLI (--model wins). The load dtype
// (`dtype`, default "float32"; `torch_dtype` before) is the trained weights' dtype unless
// Accelerate upcasts them: with FSDP and mixed precision it casts every trainable parameter to
// fp32 (accelerate/utils/fsdp_utils.py fsdp2_prepare_model "Upcast to fp32 master weights";
// accelerator.py prepare_model for FSDP1); without FSDP or mixed precision the weights, their
// gradients and AdamW's states stay in the load dtype. PEFT LoRA through get_peft_config:
// LoraConfig(r=lora_r (16), lora_alpha (32), lora_dropout (0.05), target_modules=
// lora_target_modules or PEFT's default for the model type: q_proj and v_proj for the Llama, Qwen,
// Mistral and Gemma families, c_attn for GPT-2 (peft/utils/constants.py
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)).
void ReadTrlModelConfig(const ConfigReader& top, const ImportContext& ctx, bool fsdp, ImportResult* out,
                        model::Plan* plan) {
  if (auto m = top.String("model_name_or_path")) {
    out->model_named = *m;
    out->model_named_where = top.Where("model_name_or_path");
  }
  const std::string dtype_key = top.Has("dtype") ? "dtype" : "torch_dtype";
  if (top.Has(dtype_key)) {
    const std::string d = top.Enum(dtype_key, {"float32", "bfloat16", "float16", "auto"}).value_or("float32");
    const bool mixed = plan->param_dtype != model::DType::kFp32;
    if (d != "float32") {
      model::DType load = d == "float16" ? model::DType::kFp16 : model::DType::kBf16;
      if (d == "auto") {
        out->warnings.push_back(top.Where(dtype_key) + ": auto loads the checkpoint's dtype; judged as bfloat16");
      }
      if (fsdp && mixed) {
        // Only trainable parameters are upcast: frozen ones (LoRA's base weights) keep the load
        // dtype (fsdp2_prepare_model: `if param.requires_grad and param.dtype != torch.float32`).
        plan->frozen_dtype = load;
      } else {
        plan->master_dtype = load;
        if (!mixed) plan->param_dtype = load;
        if (plan->reduce_dtype == model::DType::kFp32) plan->reduce_dtype = load;
      }
    }
  }
  if (auto a = top.Enum("attn_implementation", {"eager", "sdpa", "flash_attention_2", "flash_attention_3",
                                                 "kernels-community/flash-attn", "kernels-community/vllm-flash-attn3",
                                                 "flex_attention"})) {
    if (*a == "flex_attention") top.Fail("attn_implementation", "eager, sdpa or a FlashAttention variant (flex attention is not modelled)");
    plan->attention = *a == "eager" ? model::Attention::kEager : model::Attention::kSdpa;
  }
  if (!top.Bool("use_peft").value_or(false)) return;
  plan->lora = model::LoraSpec{};
  plan->lora.rank = static_cast<int>(top.Int("lora_r", 1, 1 << 16).value_or(16));
  plan->lora.alpha = top.Number("lora_alpha", 0, 1e9).value_or(32.0);
  plan->lora.dropout = top.Number("lora_dropout", 0, 0.999999).value_or(0.05);
  std::vector<std::string> targets = top.Names("lora_target_modules").value_or(std::vector<std::string>{});
  if (targets.size() == 1 && (targets[0] == "all-linear" || targets[0] == "all")) {
    targets = AllLinearTargets(ctx.layer_class);
  } else if (targets.empty()) {
    targets = ctx.layer_class == "GPT2Block" ? std::vector<std::string>{"c_attn"}
                                             : std::vector<std::string>{"q_proj", "v_proj"};
    out->warnings.push_back(top.Where("use_peft") + ": no lora_target_modules; PEFT's default for the model type, " +
                            model::Join(targets, ", "));
  }
  plan->lora.targets = targets;
}

}  // namespace

// Keys read in huggingface/transformers src/transformers/training_args.py (TrainingArguments
// fields; __post_init__ / _process_fsdp_args for fsdp and fsdp_config, OptimizerNames for optim)
// and trl/trainer/sft_config.py (max_seq_length, later max_length). With FSDP the Trainer hands
// mixed precision to Accelerate, which reduces in the param dtype.
ImportResult ImportHfTrainer(const ConfigReader& top, const ImportContext& ctx,
                             std::vector<std::string>* ignored, model::Plan* plan) {
  ImportResult out;
  top.CheckKeys(TrainerKeys());
  if (auto b = top.Int("per_device_train_batch_size", 1, 1 << 20)) {
    plan->micro_batch = static_cast<int>(*b);
  }
  if (auto g = top.Int("gradient_accumulation_steps", 1, 1 << 20)) {
    // trainer.py runs every micro-batch but the last under accelerator.accumulate(), which skips
    // gradient sync (FSDP no_sync / set_requires_gradient_sync(False)).
    plan->grad_accum = static_cast<int>(*g);
    plan->no_sync = *g > 1;
  }
  for (const std::string key : {"max_seq_length", "max_length"}) {
    if (auto s = top.Int(key, 1, INT64_MAX)) {
      plan->seq_len = *s;
      out.seq_len_from = top.Where(key);
    }
  }
  auto bf16 = top.Bool("bf16");
  auto fp16 = top.Bool("fp16");
  if (bf16.value_or(false) && fp16.value_or(false)) top.Fail("fp16", "false when bf16 is true");
  if (bf16 || fp16) {
    model::DType d = bf16.value_or(false)   ? model::DType::kBf16
                     : fp16.value_or(false) ? model::DType::kFp16
                                            : model::DType::kFp32;
    plan->param_dtype = d;
    plan->reduce_dtype = d;
    plan->master_dtype = model::DType::kFp32;
  }
  if (auto o = top.Enum("optim", {"adamw_torch", "adamw_torch_fused", "sgd", "adafactor"})) {
    plan->optimizer = *o == "sgd"         ? model::Optimizer::kSgd
                      : *o == "adafactor" ? model::Optimizer::kAdafactor
                                          : model::Optimizer::kAdamW;
    plan->optimizer_impl =
        *o == "adamw_torch_fused" ? model::OptimizerImpl::kFused : model::OptimizerImpl::kForeach;
  }
  if (auto n = top.Number("max_grad_norm", 0, 1e30); n && *n == 0) {
    out.warnings.push_back(top.Where("max_grad_norm") +
                           ": no gradient clipping; pass --no-grad-clip to model it");
  }
  std::vector<std::string> opts = FsdpOptions(top);
  if (!opts.empty()) {
    ReadFsdp(top, opts, ctx, &out, plan, ignored);
  } else if (top.Raw("fsdp") != nullptr) {
    plan->strategy = ShardingStrategy::kNoShard;  // fsdp "" / false: the Trainer runs DDP
    plan->shard_group_size = 0;
    plan->reshard_after_forward = false;
    plan->offload = model::Offload::kNone;
  }
  auto gc = top.Bool("gradient_checkpointing");
  const Json* fc = top.Raw("fsdp_config");
  std::optional<bool> ac;
  if (!opts.empty() && fc && fc->is_object()) {
    Json s = StripPrefixes(*fc);
    if (s.contains("activation_checkpointing")) {
      ac = ConfigReader(s, top.file(), "/fsdp_config", nullptr).Bool("activation_checkpointing");
    }
  }
  if (gc || ac) {
    plan->checkpointing = gc.value_or(false) || ac.value_or(false) ? model::Checkpointing::kFull
                                                                   : model::Checkpointing::kNone;
    plan->checkpoint_every_k = 1;
  }
  ReadLiger(top, plan);
  // gradient_checkpointing: transformers' gradient_checkpointing_enable runs
  // torch.utils.checkpoint with use_reentrant True unless gradient_checkpointing_kwargs says
  // otherwise (modeling_utils.py: `if gradient_checkpointing_kwargs is None:
  // gradient_checkpointing_kwargs = {"use_reentrant": True}`); TRL's trainers default it to False
  // (trl@f2cd577: "setdefault('use_reentrant', False)"); fsdp_config's activation_checkpointing is
  // Accelerate's checkpoint_wrapper with CheckpointImpl.NO_REENTRANT.
  if (gc.value_or(false)) {
    std::optional<bool> reentrant;
    if (std::optional<ConfigReader> k = top.Section("gradient_checkpointing_kwargs")) {
      reentrant = k->Bool("use_reentrant");
    }
    const bool trl = !TrlKey(top).empty() || !TrlDpoKey(top).empty();
    plan->checkpoint_reentrant = reentrant.value_or(!trl);
  }
  // TrainingArguments' defaults for what the file leaves out (training_args.py: per_device_train_
  // batch_size 8; bf16 and fp16 False: fp32 weights and compute), then SFTConfig's where TRL's differ.
  if (!top.Has("per_device_train_batch_size")) {
    plan->micro_batch = 8;
    out.warnings.push_back(top.file() +
                           ": no per_device_train_batch_size; TrainingArguments' default 8");
  }
  if (!bf16 && !fp16) {
    plan->param_dtype = model::DType::kFp32;
    plan->reduce_dtype = model::DType::kFp32;
  }
  const bool dpo = !TrlDpoKey(top).empty();
  if (dpo) {
    ReadTrlDpo(top, &out, plan);
  } else if (!TrlKey(top).empty()) {
    ReadTrlDefaults(top, &out, plan);
  }
  // FSDP as the plan runs it: this file's fsdp, an Accelerate config layered before it, or shardtune's default.
  ReadTrlModelConfig(top, ctx, plan->Sharded(), &out, plan);
  if (!dpo) {
    ReadTrlDefaultLength(top, &out, plan);
    ReadTrlPacking(top, &out, plan);
  }
  return out;
}

}  // namespace shardtune::configs::internal
