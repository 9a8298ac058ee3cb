// torchtitan job config (TOML, torchtitan <= 0.2.2 `--job.config_file`): the plan it trains with.
// Keys read in pytorch/torchtitan v0.2.2 (73a0e69) torchtitan/config/job_config.py, the layout
// of torchtitan/models/llama3/train_configs/*.toml, and what export_toml.cc writes.
#include <algorithm>
#include <string>
#include <utility>

#include "model/errors.h"
#include "planner/configs/import_reader.h"
#include "planner/configs/torchtitan_models.h"
#include "model/text.h"

namespace shardtune::configs::internal {
namespace {

// torchtitan's dtype names (job_config.py Training.dtype / mixed_precision_*: "bfloat16",
// "float32").
model::DType Dtype(const ConfigReader& r, const std::string& key, model::DType fallback) {
  std::optional<std::string> v = r.Enum(key, {"bfloat16", "float32"});
  if (!v) return fallback;
  return *v == "bfloat16" ? model::DType::kBf16 : model::DType::kFp32;
}

}  // namespace

ImportResult ImportTorchtitan(const ConfigReader& top, const ImportContext& ctx,
                              std::vector<std::string>* ignored, model::Plan* plan) {
  ImportResult out;
  // JobConfig's sections (job_config.py). [quantize] configures the converters, which
  // model.converters turns on (refused there); [checkpoint] is saving, not the step.
  top.CheckKeys(WithIgnored({{"model"}, {"optimizer"}, {"training"}, {"parallelism"}, {"activation_checkpoint"},
                             {"quantize", KeyUse::kIgnored, "read only through model.converters"}},
                            {"job", "profiling", "metrics", "lr_scheduler", "checkpoint", "compile", "comm",
                             "memory_estimation", "fault_tolerance", "experimental", "validation", "debug"}));
  static const Json kEmpty = Json::object();
  auto section = [&](const char* name) {
    auto s = top.Section(name);
    return s ? *s : ConfigReader(kEmpty, top.file(), std::string("/") + name, ignored);
  };
  // [model]: which model; --model is what shardtune estimates (ImportResult::model_named).
  ConfigReader m = section("model");
  m.CheckKeys(WithIgnored({{"name"}, {"flavor"}, {"converters", KeyUse::kUnsupported, "model converters (float8, MX)"}},
                      {"hf_assets_path", "tokenizer_path", "print_after_conversion"}));
  // A flavor no preset matches is named as it is: without --model, resolving it is the one-line
  // error that asks for the model (job_args.cc), never a default model.
  if (auto name = m.String("name")) {
    const std::string flavor = m.String("flavor").value_or("debugmodel");  // Model.flavor's default
    const std::string preset = PresetOfTorchtitan(*name, flavor);
    out.model_named = preset.empty() ? "torchtitan " + *name + " " + flavor : preset;
    out.model_named_where = m.Where("flavor");
  }
  // [optimizer]
  ConfigReader o = section("optimizer");
  o.CheckKeys(WithIgnored({{"name"}, {"implementation"},
                       {"early_step_in_backward", KeyUse::kUnsupported, "the optimizer step inside backward"}},
                      {"lr", "eps", "weight_decay"}));
  o.Enum("name", {"AdamW", "Adam"});  // build_optimizers knows these two: the same state
  plan->optimizer = model::Optimizer::kAdamW;
  if (auto impl = o.Enum("implementation", {"foreach", "fused", "for-loop"})) {
    plan->optimizer_impl = *impl == "fused"   ? model::OptimizerImpl::kFused
                           : *impl == "foreach" ? model::OptimizerImpl::kForeach
                                                : model::OptimizerImpl::kForLoop;
  } else {
    plan->optimizer_impl = model::OptimizerImpl::kFused;  // job_config.py Optimizer.implementation
  }
  // [parallelism]: ParallelDims(dp_replicate, dp_shard, cp, tp, pp, ep), dp_shard -1 = the rest.
  ConfigReader pa = section("parallelism");
  pa.CheckKeys(WithIgnored({{"data_parallel_replicate_degree"}, {"data_parallel_shard_degree"},
                        {"fsdp_reshard_after_forward"},
                        {"tensor_parallel_degree", KeyUse::kUnsupported, "tensor parallelism", 1},
                        {"pipeline_parallel_degree", KeyUse::kUnsupported, "pipeline parallelism", 1},
                        {"context_parallel_degree", KeyUse::kUnsupported,
                         "torchtitan's context parallelism (ring attention; shardtune's cp is Ulysses)", 1},
                        {"expert_parallel_degree"},
                        {"expert_tensor_parallel_degree", KeyUse::kUnsupported, "expert tensor parallelism", 1},
                        {"expert_parallel_comm_backend", KeyUse::kUnsupported, "DeepEP's expert dispatch",
                         "standard"}},
                       {"enable_async_tensor_parallel", "disable_loss_parallel", "pipeline_parallel_schedule",
                        "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
                        "pipeline_parallel_schedule_csv", "pipeline_parallel_first_stage_less_layers",
                        "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_expert_parallel_overlap",
                        "context_parallel_rotate_method", "context_parallel_load_balancer",
                        "module_fqns_per_model_part"}));
  const int world = ctx.world_size;
  if (world <= 0) top.Fail("parallelism", "a --cluster (the job config does not say its world size)");
  const int64_t replicate = pa.Int("data_parallel_replicate_degree", 1, 1 << 20).value_or(1);
  int64_t shard = pa.Int("data_parallel_shard_degree", -1, 1 << 20).value_or(-1);
  if (shard == 0) pa.Fail("data_parallel_shard_degree", "-1 (the rest of the world) or a degree >= 1");
  if (shard == -1) shard = world % replicate == 0 ? world / replicate : 0;
  if (shard < 1 || replicate * shard != world) {
    pa.Fail("data_parallel_shard_degree",
            "data_parallel_replicate_degree x data_parallel_shard_degree = the " + ctx.world_flag +
                "'s " + std::to_string(world) + " ranks (ParallelDims._validate), got " +
                std::to_string(replicate) + " x " + std::to_string(shard));
  }
  // fsdp_reshard_after_forward: "default" reshards every unit but the last (pp disabled), "always"
  // all of them, "never" none (parallelize.py apply_fsdp); shardtune's units all follow one rule.
  const std::string reshard =
      pa.Enum("fsdp_reshard_after_forward", {"default", "always", "never"}).value_or("default");
  if (shard == 1) {
    plan->strategy = model::ShardingStrategy::kNoShard;  // replicate only: torchtitan's DDP path
    plan->shard_group_size = 0;
    plan->reshard_after_forward = false;
  } else {
    SetFsdp2Sharding(static_cast<int>(shard), world, reshard != "never", plan);
  }
  if (reshard == "default") {
    out.warnings.push_back(pa.Where("fsdp_reshard_after_forward") +
                           ": \"default\" keeps the last unit ([norm, output]) gathered after forward; "
                           "estimated as \"always\" (every unit resharded)");
  }
  plan->ep = static_cast<int>(pa.Int("expert_parallel_degree", 1, 1 << 16).value_or(1));
  plan->cp = 1;
  // [training]
  ConfigReader tr = section("training");
  tr.CheckKeys(WithIgnored({{"local_batch_size"}, {"global_batch_size"}, {"seq_len"}, {"enable_cpu_offload"},
                        {"dtype"}, {"mixed_precision_param"}, {"mixed_precision_reduce"},
                        {"max_norm"}},
                       {"steps", "dataset", "dataset_path", "gc_freq", "gc_debug", "dataloader"}));
  plan->micro_batch = static_cast<int>(tr.Int("local_batch_size", 1, 1 << 20).value_or(8));
  if (auto s = tr.Int("seq_len", 1, INT64_MAX)) {
    plan->seq_len = *s;
    out.seq_len_from = tr.Where("seq_len");
  } else {
    plan->seq_len = 2048;  // job_config.py Training.seq_len
    out.seq_len_from = tr.Where("seq_len") + " (torchtitan's default 2048)";
  }
  const int64_t local = plan->micro_batch;
  const int64_t global = tr.Int("global_batch_size", -1, INT64_MAX).value_or(-1);
  const int64_t dp = replicate * shard;
  plan->grad_accum = 1;
  if (global > 0) {
    // train.py: gradient_accumulation_steps = global_batch_size // (local_batch_size x dp_degree),
    // asserted exact.
    if (global % (local * dp) != 0) {
      tr.Fail("global_batch_size", "a multiple of local_batch_size x the data-parallel degree (" +
                                       std::to_string(local) + " x " + std::to_string(dp) + ")");
    }
    plan->grad_accum = static_cast<int>(global / (local * dp));
  } else if (global == 0 || global < -1) {
    tr.Fail("global_batch_size", "-1 (local_batch_size x the data-parallel degree) or a positive count");
  }
  plan->offload = tr.Bool("enable_cpu_offload").value_or(false) ? model::Offload::kAll : model::Offload::kNone;
  plan->master_dtype = Dtype(tr, "dtype", model::DType::kFp32);
  plan->param_dtype = Dtype(tr, "mixed_precision_param", model::DType::kBf16);
  tr.Enum("mixed_precision_reduce", {"float32"});  // Literal["float32"] in v0.2.2
  plan->reduce_dtype = model::DType::kFp32;
  // [activation_checkpoint]: mode, selective_ac_option "op" (per-op SAC) or an integer N (every
  // N-th block).
  ConfigReader ac = section("activation_checkpoint");
  ac.CheckKeys(WithIgnored({{"mode"}, {"selective_ac_option"}},
                       {"per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop", "memory_budget",
                        "visualize_memory_budget_pareto", "preserve_rng_state", "determinism_check",
                        "debug"}));
  const std::string mode =
      ac.Enum("mode", {"none", "full", "selective", "memory_budget"}).value_or("selective");
  plan->checkpoint_every_k = 1;
  if (mode == "none") {
    plan->checkpointing = model::Checkpointing::kNone;
  } else if (mode == "full") {
    plan->checkpointing = model::Checkpointing::kFull;
  } else if (mode == "memory_budget") {
    ac.Fail("mode", "none, full or selective (memory_budget's compiler-chosen saves are not modelled)");
  } else {
    const std::string option = ac.String("selective_ac_option").value_or("2");
    if (option == "op") {
      plan->checkpointing = model::Checkpointing::kSelective;
    } else {
      const int64_t k = model::ParseInt64(option).value_or(0);
      if (k < 1) ac.Fail("selective_ac_option", "\"op\" or a positive integer N (every N-th block)");
      plan->checkpointing = k == 1 ? model::Checkpointing::kFull : model::Checkpointing::kEveryK;
      plan->checkpoint_every_k = static_cast<int>(k);
    }
  }
  // torchtitan's own model code, units per block plus the embedding and [norm, output]
  // (parallelize.py apply_fsdp), cross_entropy(pred.float()) as its loss.
  plan->modeling = model::Modeling::kTorchtitan;
  plan->wrap = model::WrapPolicy{};
  plan->wrap.embedding_unit = true;
  plan->wrap.head_unit = true;
  plan->loss_kernel = model::LossKernel::kCrossEntropy;
  plan->loss_fp32_upcast = true;
  plan->role = model::Role::kTrain;
  return out;
}

}  // namespace shardtune::configs::internal
