// Import of Hugging Face configs: the Accelerate config file (FSDP1 and FSDP2 keys) and
// TrainingArguments JSON for the Trainer. Both speak FSDP1's vocabulary (sharding strategy names,
// auto-wrap policies, backward prefetch); FSDP2 says reshard_after_forward instead.
#include <algorithm>
#include <cctype>

#include "model/errors.h"
#include "planner/configs/import_reader.h"

namespace shardtune::configs::internal {
namespace {

using model::ShardingStrategy;

// accelerate/utils/constants.py FSDP_SHARDING_STRATEGY; dataclasses.py
// FullyShardedDataParallelPlugin.__post_init__ also takes the integer codes of
// torch.distributed.fsdp.ShardingStrategy (FULL_SHARD = 1 ... _HYBRID_SHARD_ZERO2 = 5).
const std::vector<std::string>& StrategyNames() {
  static const std::vector<std::string> n = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD",
                                             "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
  return n;
}
const ShardingStrategy kStrategies[] = {
    ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard,
    ShardingStrategy::kHybridShard, ShardingStrategy::kHybridShardZero2};

ShardingStrategy ReadStrategy(const ConfigReader& r, const std::string& key) {
  const Json* v = r.Raw(key);
  if (v->is_number_integer() ||
      (v->is_string() && v->get<std::string>().size() == 1 &&
       std::isdigit(static_cast<unsigned char>(v->get<std::string>()[0])))) {
    int64_t code = v->is_number_integer() ? v->get<int64_t>() : v->get<std::string>()[0] - '0';
    if (code < 1 || code > 5) r.Fail(key, "a strategy name or its code 1-5");
    return kStrategies[code - 1];
  }
  std::optional<std::string> name = r.Enum(key, StrategyNames());
  if (!name) r.Fail(key, "a strategy name or its code 1-5");  // "${...}": not given
  return kStrategies[std::find(StrategyNames().begin(), StrategyNames().end(), *name) -
                     StrategyNames().begin()];
}

// FSDP1: the strategy decides; HYBRID_* shard within a node (shard_group_size 0 resolves to GPUs
// per node, as FSDP1's HYBRID_SHARD does without a device mesh).
void SetFsdp1Strategy(ShardingStrategy s, model::Plan* plan) {
  plan->strategy = s;
  plan->shard_group_size = 0;
  plan->reshard_after_forward = model::StrategyReshardsAfterForward(s);
}

void SetCheckpointing(bool on, model::Plan* plan) {
  plan->checkpointing = on ? model::Checkpointing::kFull : model::Checkpointing::kNone;
  plan->checkpoint_every_k = 1;
}

// Accelerate's mixed_precision and the Trainer's bf16/fp16 set param and reduce dtype alike and
// keep fp32 sharded parameters (accelerate utils/dataclasses.py set_mixed_precision).
void SetMixedPrecision(model::DType d, model::Plan* plan) {
  plan->param_dtype = d;
  plan->reduce_dtype = d;
  plan->master_dtype = model::DType::kFp32;
}

const KeyTable& AccelerateTopKeys() {
  // commands/config/config_args.py ClusterConfig / BaseConfig.
  static const KeyTable t = Concat({
      Ignored({"compute_environment"}),
      Mapped({"distributed_type", "mixed_precision", "num_processes", "num_machines"}),
      Ignored({"machine_rank", "main_process_ip", "main_process_port", "main_training_function",
               "rdzv_backend", "same_network", "gpu_ids", "downcast_bf16", "debug",
               "enable_cpu_affinity", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "tpu_name",
               "tpu_zone", "commands", "command_file", "ipex_config", "mpirun_config"}),
      {{"use_cpu", KeyUse::kUnsupported, "training on CPUs through Accelerate"},
       {"dynamo_config", KeyUse::kUnsupported, "torch.compile"},
       {"deepspeed_config", KeyUse::kUnsupported, "DeepSpeed ZeRO"},
       {"megatron_lm_config", KeyUse::kUnsupported, "Megatron-LM tensor/pipeline parallelism"},
       {"fp8_config", KeyUse::kUnsupported, "FP8 training"}},
      Mapped({"fsdp_config", "parallelism_config"}),
  });
  return t;
}

// utils/dataclasses.py FullyShardedDataParallelPlugin fields as commands/launch.py names them.
const KeyTable& AccelerateFsdpKeys() {
  static const KeyTable t = WithIgnored(
      Mapped({"fsdp_version", "fsdp_sharding_strategy", "fsdp_reshard_after_forward",
              "fsdp_auto_wrap_policy", "fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap",
              "fsdp_offload_params", "fsdp_backward_prefetch", "fsdp_backward_prefetch_policy",
              "fsdp_forward_prefetch", "fsdp_activation_checkpointing", "fsdp_state_dict_type",
              "fsdp_cpu_ram_efficient_loading"}),
      {"fsdp_sync_module_states", "fsdp_use_orig_params"});
  return t;
}

// utils/dataclasses.py ParallelismConfig as launch.py reads it (--parallelism_config_*).
const KeyTable& AccelerateParallelismKeys() {
  static const KeyTable t = {
      {"parallelism_config_dp_replicate_size", KeyUse::kMapped},
      {"parallelism_config_dp_shard_size", KeyUse::kMapped},
      {"parallelism_config_tp_size", KeyUse::kUnsupported, "tensor parallelism", 1},
      {"parallelism_config_cp_size", KeyUse::kUnsupported,
       "ring-attention context parallelism (Ulysses is shardtune's cp)", 1},
      {"parallelism_config_cp_backend", KeyUse::kIgnored},
      {"parallelism_config_cp_comm_strategy", KeyUse::kIgnored},
  };
  return t;
}

struct Wrap {
  std::string policy;  // TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP
  std::optional<int64_t> min_num_params;
  std::optional<std::vector<std::string>> classes;
};

// The wrap policy of either config: transformer-based wraps the block class only (embedding and
// [norm, head] stay in the root unit); size-based is torch's size_based_auto_wrap_policy; NO_WRAP
// is one unit, written as a size threshold above the model's parameter count.
void SetWrap(const Wrap& w, const ConfigReader& r, const std::string& policy_key,
             const std::string& classes_key, const ImportContext& ctx, ImportResult* out,
             model::Plan* plan) {
  model::WrapPolicy wp;
  wp.expert_units = plan->wrap.expert_units;
  if (w.policy == "TRANSFORMER_BASED_WRAP") {
    if (w.classes) CheckLayerClasses(r, classes_key, *w.classes, ctx);
    wp.kind = model::WrapPolicy::Kind::kBlock;
  } else if (w.policy == "SIZE_BASED_WRAP") {
    wp.kind = model::WrapPolicy::Kind::kSize;
    wp.min_num_params = w.min_num_params.value_or(100000000);  // launch.py default 1e8
  } else {
    if (ctx.model_parameters <= 0) r.Fail(policy_key, "a wrap policy other than NO_WRAP here");
    wp.kind = model::WrapPolicy::Kind::kSize;
    wp.min_num_params = ctx.model_parameters + 1;
    out->warnings.push_back(
        r.Where(policy_key) +
        ": NO_WRAP is one FSDP unit for the whole model; modelled as wrap size:" +
        std::to_string(wp.min_num_params));
  }
  plan->wrap = wp;
}

void ReadParallelism(const ConfigReader& top, int world, int* shard) {
  auto pc = top.Section("parallelism_config");
  if (!pc) return;
  pc->CheckKeys(AccelerateParallelismKeys());
  int64_t rep = pc->Int("parallelism_config_dp_replicate_size", 1, 1 << 20).value_or(1);
  int64_t sh = pc->Int("parallelism_config_dp_shard_size", 1, 1 << 20).value_or(1);
  if (world > 0 && rep * sh != world) {
    pc->Fail("parallelism_config_dp_shard_size",
             "dp_replicate_size x dp_shard_size = the " + std::to_string(world) + " processes (" +
                 std::to_string(rep) + " x " + std::to_string(sh) + " given)");
  }
  *shard = static_cast<int>(sh);
}

void ReadAccelerateFsdp(const ConfigReader& top, const ConfigReader& f, int world,
                        const ImportContext& ctx, ImportResult* out, model::Plan* plan) {
  f.CheckKeys(AccelerateFsdpKeys());
  int64_t version = f.Int("fsdp_version", 1, 2).value_or(1);
  out->fsdp_version = static_cast<int>(version);
  const Json* raf = f.Raw("fsdp_reshard_after_forward");
  bool raf_is_bool = raf && raf->is_boolean();
  if (version == 1) {
    // Newer Accelerate names FSDP1's strategy fsdp_reshard_after_forward too.
    std::string key =
        f.Has("fsdp_sharding_strategy") ? "fsdp_sharding_strategy" : "fsdp_reshard_after_forward";
    if (f.Has(key) && !(key == "fsdp_reshard_after_forward" && raf_is_bool)) {
      SetFsdp1Strategy(ReadStrategy(f, key), plan);
    } else if (raf_is_bool) {
      SetFsdp1Strategy(
          raf->get<bool>() ? ShardingStrategy::kFullShard : ShardingStrategy::kShardGradOp, plan);
    } else {
      SetFsdp1Strategy(ShardingStrategy::kFullShard, plan);
    }
  } else {
    if (f.Has("fsdp_sharding_strategy")) {
      f.Fail("fsdp_sharding_strategy",
             "no sharding strategy with fsdp_version 2 (FSDP2 takes fsdp_reshard_after_forward "
             "true|false, docs/source/concept_guides/fsdp1_vs_fsdp2.md)");
    }
    if (raf && !raf_is_bool && !raf->is_null())
      f.Fail("fsdp_reshard_after_forward", "true or false");
    int shard = world;
    ReadParallelism(top, world, &shard);
    SetFsdp2Sharding(shard, world, raf_is_bool ? raf->get<bool>() : true, plan);
  }
  Wrap w;
  if (auto p = f.Enum("fsdp_auto_wrap_policy",
                      {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"})) {
    w.policy = *p;
    w.min_num_params = f.Int("fsdp_min_num_params", 1, INT64_MAX);
    w.classes = f.Names("fsdp_transformer_layer_cls_to_wrap");
    SetWrap(w, f, "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", ctx, out, plan);
  }
  if (auto o = f.Bool("fsdp_offload_params")) {
    plan->offload = *o ? model::Offload::kAll : model::Offload::kNone;
  }
  if (auto c = f.Bool("fsdp_activation_checkpointing")) SetCheckpointing(*c, plan);
  for (const std::string key : {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"}) {
    auto b = f.Enum(key, {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
    if (!b) continue;
    if (version == 2) {
      out->warnings.push_back(f.Where(key) +
                              ": FSDP2 ignores it (Accelerate drops "
                              "backward_prefetch with fsdp_version 2)");
      continue;
    }
    plan->backward_prefetch = *b == "BACKWARD_PRE"    ? model::BackwardPrefetch::kPre
                              : *b == "BACKWARD_POST" ? model::BackwardPrefetch::kPost
                                                      : model::BackwardPrefetch::kNone;
  }
  if (auto fp = f.Bool("fsdp_forward_prefetch")) {
    if (*fp && version == 2) {
      f.Fail("fsdp_forward_prefetch", "false with fsdp_version 2 (Accelerate rejects it)");
    }
    plan->forward_prefetch = *fp;
  }
  if (auto sd = f.Enum("fsdp_state_dict_type",
                       {"FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"})) {
    if (*sd == "FULL_STATE_DICT") {
      out->warnings.push_back(f.Where("fsdp_state_dict_type") +
                              ": checkpoints gather the full state; pass --checkpoint-format full "
                              "to include that in the estimate");
    }
  }
  if (f.Bool("fsdp_cpu_ram_efficient_loading").value_or(false)) {
    out->warnings.push_back(
        f.Where("fsdp_cpu_ram_efficient_loading") +
        ": rank 0 alone reads the weights; pass --model-load rank0 to model it");
  }
}

}  // namespace

// Keys read in huggingface/accelerate @16cb6eb: src/accelerate/commands/config/config_args.py,
// commands/config/cluster.py (what `accelerate config` writes), commands/launch.py (fsdp_* and
// parallelism_config_* arguments, fsdp_min_num_params default 1e8), utils/dataclasses.py
// FullyShardedDataParallelPlugin (fsdp_version 2 rejects forward_prefetch and drops
// backward_prefetch), utils/constants.py (strategy, wrap, prefetch and state-dict names),
// docs/source/usage_guides/fsdp.md, docs/source/concept_guides/fsdp1_vs_fsdp2.md.
ImportResult ImportAccelerate(const ConfigReader& top, const ImportContext& ctx,
                              std::vector<std::string>* ignored, model::Plan* plan) {
  ImportResult out;
  top.CheckKeys(AccelerateTopKeys());
  int world = ctx.world_size;
  if (auto n = top.Int("num_processes", 1, 1 << 20)) {
    CheckWorld(static_cast<int>(*n), ctx, top.Where("num_processes"));
    world = static_cast<int>(*n);
    out.world_size = world;
    int64_t machines = top.Int("num_machines", 1, 1 << 20).value_or(1);
    if (*n % machines != 0) {
      top.Fail("num_machines", "a divisor of num_processes " + std::to_string(*n));
    }
    if (ctx.gpus_per_node > 0 && ctx.world_size == *n && *n / machines != ctx.gpus_per_node) {
      top.Fail("num_machines", "the " + ctx.world_flag + "'s " + std::to_string(*n / ctx.gpus_per_node) +
                                   " node(s) of " + std::to_string(ctx.gpus_per_node) + " GPUs");
    }
  }
  if (auto mp = top.Enum("mixed_precision", {"no", "bf16", "fp16", "fp8"})) {
    if (*mp == "fp8")
      top.Fail("mixed_precision", "no, bf16 or fp16 (shardtune does not model FP8)");
    SetMixedPrecision(*mp == "bf16"   ? model::DType::kBf16
                      : *mp == "fp16" ? model::DType::kFp16
                                      : model::DType::kFp32,
                      plan);
  }
  // Without distributed_type the file only layers what it names (fsdp_config implies FSDP).
  std::string type = top.Enum("distributed_type", {"FSDP", "MULTI_GPU", "NO"})
                         .value_or(top.Has("fsdp_config") ? "FSDP" : "");
  if (type.empty()) {
  } else if (type == "FSDP") {
    auto f = top.Section("fsdp_config");
    if (!f) top.Fail("fsdp_config", "an fsdp_config mapping with distributed_type FSDP");
    ReadAccelerateFsdp(top, *f, world, ctx, &out, plan);
  } else {
    plan->strategy = ShardingStrategy::kNoShard;
    plan->shard_group_size = 0;
    plan->reshard_after_forward = false;
    plan->offload = model::Offload::kNone;
    if (top.Has("fsdp_config")) ignored->push_back("/fsdp_config");
    if (top.Has("parallelism_config")) ignored->push_back("/parallelism_config");
  }
  return out;
}

}  // namespace shardtune::configs::internal
