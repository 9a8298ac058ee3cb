// Import of a verl config: the PPO trainer's FSDP workers (actor_rollout_ref.actor for training,
// actor_rollout_ref.ref for inference) or the SFT trainer. Like ROLL, a verl file defines the whole
// worker, so verl's defaults (ppo_trainer.yaml, sft_trainer.yaml) apply to keys it leaves out.
// Hydra interpolations ("${...}") are not resolved: such a value counts as "not given".
#include <algorithm>

#include "model/errors.h"
#include "planner/configs/import_reader.h"

namespace shardtune::configs::internal {
namespace {

bool Interpolated(const Json* v) {
  return v && v->is_string() && v->get<std::string>().rfind("${", 0) == 0;
}
// Reads key unless it is absent, null or an interpolation.
bool Given(const ConfigReader& r, const std::string& key) {
  return r.Has(key) && !Interpolated(r.Raw(key));
}

KeyTable WithIgnored(KeyTable t, std::initializer_list<const char*> names) {
  for (const char* n : names) t.push_back({n, KeyUse::kIgnored});
  return t;
}

// verl/trainer/config/engine/fsdp.yaml and verl/workers/config/engine.py FSDPEngineConfig; the
// SFT trainer's model.fsdp_config adds cpu_offload / offload_params.
const KeyTable& FsdpConfigKeys() {
  static const KeyTable t =
      WithIgnored({{"wrap_policy", KeyUse::kMapped},
                   {"param_offload", KeyUse::kMapped},
                   {"optimizer_offload", KeyUse::kMapped},
                   {"offload_policy", KeyUse::kMapped},
                   {"reshard_after_forward", KeyUse::kMapped},
                   {"fsdp_size", KeyUse::kMapped},
                   {"forward_prefetch", KeyUse::kMapped},
                   {"model_dtype", KeyUse::kMapped},
                   {"mixed_precision", KeyUse::kMapped},
                   {"dtype", KeyUse::kMapped},
                   {"strategy", KeyUse::kMapped},
                   {"cpu_offload", KeyUse::kMapped},
                   {"offload_params", KeyUse::kMapped}},
                  {"_target_", "use_orig_params", "seed", "full_determinism",
                   "ulysses_sequence_parallel_size", "entropy_from_logits_with_chunking",
                   "use_torch_compile", "entropy_checkpointing", "forward_only", "grad_offload"});
  return t;
}

// verl/trainer/config/actor/actor.yaml, dp_actor.yaml, ref/ref.yaml, ref/dp_ref.yaml.
const KeyTable& WorkerKeys() {
  static const KeyTable t =
      WithIgnored({{"strategy", KeyUse::kMapped},
                   {"ppo_mini_batch_size", KeyUse::kMapped},
                   {"ppo_micro_batch_size", KeyUse::kMapped},
                   {"ppo_micro_batch_size_per_gpu", KeyUse::kMapped},
                   {"log_prob_micro_batch_size", KeyUse::kMapped},
                   {"log_prob_micro_batch_size_per_gpu", KeyUse::kMapped},
                   {"ulysses_sequence_parallel_size", KeyUse::kMapped},
                   {"fsdp_config", KeyUse::kMapped},
                   {"rollout_n", KeyUse::kMapped},
                   {"use_dynamic_bsz", KeyUse::kUnsupported, "token-budget micro-batches"},
                   {"log_prob_use_dynamic_bsz", KeyUse::kUnsupported, "token-budget micro-batches"},
                   {"model", KeyUse::kIgnored}},
                  {"_target_",
                   "defaults",
                   "ppo_max_token_len_per_gpu",
                   "log_prob_max_token_len_per_gpu",
                   "clip_ratio",
                   "clip_ratio_low",
                   "clip_ratio_high",
                   "clip_ratio_c",
                   "tau_pos",
                   "tau_neg",
                   "freeze_vision_tower",
                   "policy_loss",
                   "loss_agg_mode",
                   "loss_scale_factor",
                   "entropy_coeff",
                   "calculate_entropy",
                   "use_kl_loss",
                   "use_prefix_grouper",
                   "use_torch_compile",
                   "kl_loss_coef",
                   "kl_loss_type",
                   "ppo_epochs",
                   "shuffle",
                   "data_loader_seed",
                   "checkpoint",
                   "optim",
                   "use_fused_kernels",
                   "profiler",
                   "router_replay",
                   "grad_clip",
                   "entropy_from_logits_with_chunking",
                   "entropy_checkpointing",
                   "use_remove_padding",
                   "calculate_sum_pi_squared",
                   "sum_pi_squared_checkpointing"});
  return t;
}

// verl/trainer/config/model/hf_model.yaml (and the SFT trainer's model section).
const KeyTable& ModelKeys() {
  static const KeyTable t = WithIgnored(
      {{"enable_gradient_checkpointing", KeyUse::kMapped},
       {"lora_rank", KeyUse::kMapped},
       {"lora_alpha", KeyUse::kMapped},
       {"target_modules", KeyUse::kMapped},
       {"tiled_mlp", KeyUse::kMapped},
       {"fsdp_config", KeyUse::kMapped},
       {"strategy", KeyUse::kMapped},
       {"override_config", KeyUse::kUnsupported, "overrides of the model's config.json"},
       {"enable_activation_offload", KeyUse::kUnsupported, "activation offload to the host"},
       {"use_liger", KeyUse::kUnsupported, "Liger's fused kernels (chunked loss)"},
       {"use_fused_kernels", KeyUse::kUnsupported, "verl's fused log-prob kernels"},
       {"exclude_modules", KeyUse::kUnsupported, "LoRA exclusions"}},
      {"_target_", "path", "partial_pretrain", "hf_config_path", "tokenizer_path", "use_shm",
       "trust_remote_code", "custom_chat_template", "external_lib", "use_remove_padding",
       "lora_adapter_path", "fused_kernel_options", "mtp"});
  return t;
}

struct Fsdp {
  int world = 0;
  int sp = 1;
};

// Sharding, dtypes, offload and wrap of one worker's fsdp_config (fsdp_workers.py
// _build_model_optimizer). `actor`: the trained role (model_dtype default fp32, offload only
// through offload_policy); otherwise verl forces CPU offload of parameters on the worker.
void ReadFsdpConfig(const ConfigReader& f, const std::string& strategy, bool actor, const Fsdp& m,
                    const ImportContext& ctx, ImportResult* out, model::Plan* plan) {
  f.CheckKeys(FsdpConfigKeys());
  int64_t size = Given(f, "fsdp_size") ? *f.Int("fsdp_size", -1, 1 << 20) : -1;
  if (size == 0) f.Fail("fsdp_size", "-1 (all ranks) or a shard group size >= 1");
  if (size > 0 && size < m.world && m.world % size != 0) {
    f.Fail("fsdp_size", "a divisor of the world size " + std::to_string(m.world) + ", or -1");
  }
  // create_device_mesh: fsdp_size < 0 or >= world -> 1-D mesh; else [world / size, size].
  // get_sharding_strategy: reshard_after_forward false -> SHARD_GRAD_OP / _HYBRID_SHARD_ZERO2.
  bool reshard = Given(f, "reshard_after_forward") ? *f.Bool("reshard_after_forward") : true;
  SetFsdp2Sharding(size < 0 ? 0 : static_cast<int>(size), m.world, reshard, plan);
  // model_dtype is the dtype the whole model is loaded in (from_pretrained torch_dtype), the
  // frozen base of a LoRA actor included: Plan::frozen_dtype's default (master_dtype) follows it.
  plan->master_dtype = Given(f, "model_dtype")
                           ? ParseTrainerDtype(f, "model_dtype")
                           : (actor ? model::DType::kFp32 : model::DType::kBf16);
  plan->param_dtype = Given(f, "dtype") ? ParseTrainerDtype(f, "dtype") : model::DType::kBf16;
  plan->reduce_dtype = model::DType::kFp32;
  if (auto mp = f.Section("mixed_precision")) {
    mp->CheckKeys({{"param_dtype", KeyUse::kMapped},
                   {"reduce_dtype", KeyUse::kMapped},
                   {"buffer_dtype", KeyUse::kIgnored}});
    plan->param_dtype =
        mp->Has("param_dtype") ? ParseTrainerDtype(*mp, "param_dtype") : model::DType::kBf16;
    plan->reduce_dtype =
        mp->Has("reduce_dtype") ? ParseTrainerDtype(*mp, "reduce_dtype") : model::DType::kFp32;
  }
  bool fsdp2 = strategy == "fsdp2";
  bool offload = !actor || (fsdp2 && f.Bool("offload_policy").value_or(false));
  if (f.Bool("cpu_offload").value_or(false)) {  // fsdp_sft_trainer.py
    offload = offload || fsdp2 || f.Bool("offload_params").value_or(false);
  }
  plan->offload = offload ? model::Offload::kAll : model::Offload::kNone;
  for (const std::string key : {"param_offload", "optimizer_offload"}) {
    if (actor && f.Bool(key).value_or(false)) {
      out->warnings.push_back(f.Where(key) +
                              ": verl moves them to the host between phases and "
                              "back for the update; no effect on the step's peak");
    }
  }
  plan->forward_prefetch = f.Bool("forward_prefetch").value_or(false);
  model::WrapPolicy w;  // get_fsdp_wrap_policy: size when min_num_params > 0, else block classes
  if (auto wp = f.Section("wrap_policy")) {
    wp->CheckKeys(
        {{"min_num_params", KeyUse::kMapped}, {"transformer_layer_cls_to_wrap", KeyUse::kMapped}});
    int64_t min = wp->Int("min_num_params", 0, INT64_MAX).value_or(0);
    if (min > 0) {
      w.kind = model::WrapPolicy::Kind::kSize;
      w.min_num_params = min;
    } else if (auto cls = wp->Names("transformer_layer_cls_to_wrap")) {
      CheckLayerClasses(*wp, "transformer_layer_cls_to_wrap", *cls, ctx);
    }
  }
  plan->wrap = w;
}

void ReadModel(const ConfigReader& model, bool train, const ImportContext& ctx, model::Plan* plan) {
  // hf_model.yaml and sft_trainer.yaml: enable_gradient_checkpointing True.
  bool ckpt = model.Bool("enable_gradient_checkpointing").value_or(true);
  plan->checkpointing = train && ckpt ? model::Checkpointing::kFull : model::Checkpointing::kNone;
  plan->checkpoint_every_k = 1;
  plan->lora = model::LoraSpec{};
  int64_t rank = model.Int("lora_rank", 0, 1 << 16).value_or(0);
  if (rank > 0) {
    plan->lora.rank = static_cast<int>(rank);
    plan->lora.alpha = model.Number("lora_alpha", 0, 1e9).value_or(16.0);
    std::vector<std::string> t =
        model.Names("target_modules").value_or(std::vector<std::string>{"all-linear"});
    plan->lora.targets =
        t.size() == 1 && t[0] == "all-linear" ? AllLinearTargets(ctx.layer_class) : t;
  }
  plan->tiled_mlp_shards = 1;
  if (auto tm = model.Section("tiled_mlp")) {
    tm->CheckKeys({{"enabled", KeyUse::kMapped}, {"num_shards", KeyUse::kMapped}});
    if (tm->Bool("enabled").value_or(false)) {
      plan->tiled_mlp_shards = static_cast<int>(tm->Int("num_shards", 1, 1 << 16).value_or(4));
    }
  }
}

int ReadWorld(const ConfigReader& top, const ImportContext& ctx, ImportResult* out) {
  auto tr = top.Section("trainer");
  if (!tr || (!tr->Has("nnodes") && !tr->Has("n_gpus_per_node"))) return ctx.world_size;
  int64_t nodes = tr->Int("nnodes", 1, 1 << 16).value_or(1);
  int64_t gpus = tr->Int("n_gpus_per_node", 1, 1 << 16).value_or(8);
  if (ctx.gpus_per_node > 0 && gpus != ctx.gpus_per_node && nodes * gpus == ctx.world_size) {
    tr->Fail("n_gpus_per_node", "the " + ctx.world_flag + "'s " + std::to_string(ctx.gpus_per_node));
  }
  CheckWorld(static_cast<int>(nodes * gpus), ctx, tr->Where("n_gpus_per_node"));
  out->world_size = static_cast<int>(nodes * gpus);
  return out->world_size;
}

// grad_accum = per-rank batch / micro-batch, each exactly (dp_actor.py asserts divisibility).
int Accumulation(const ConfigReader& r, const std::string& key, int64_t per_rank, int micro) {
  if (per_rank < micro || per_rank % micro != 0) {
    r.Fail(key, "a per-rank batch (" + std::to_string(per_rank) +
                    ") that is a multiple of the micro-batch " + std::to_string(micro));
  }
  return static_cast<int>(per_rank / micro);
}

void ImportPpo(const ConfigReader& top, const ImportContext& ctx, ImportResult* out,
               std::vector<std::string>* ignored, model::Plan* plan) {
  ConfigReader arr = top.RequiredSection("actor_rollout_ref");
  std::string role = !ctx.worker.empty() ? ctx.worker : arr.Has("actor") ? "actor" : "ref";
  if (role != "actor" && role != "ref") {
    throw InputError(top.file() +
                     ": --from-worker: expected actor or ref for a verl PPO config, "
                     "got " +
                     QuoteName(role));
  }
  if (!arr.Has(role)) arr.Fail(role, "the " + role + " worker's section");
  out->worker = role;
  for (const auto& item : arr.obj().items()) {
    if (item.key() != role && item.key() != "model")
      ignored->push_back("/actor_rollout_ref/" + item.key());
  }
  bool train = role == "actor";
  ConfigReader w = arr.RequiredSection(role);
  w.CheckKeys(WorkerKeys());
  Fsdp m;
  m.world = ReadWorld(top, ctx, out);
  if (m.world <= 0) top.Fail("trainer", "trainer.nnodes / n_gpus_per_node or a --cluster");
  const ConfigReader* sp_from = &w;
  std::optional<ConfigReader> actor = arr.Section("actor");
  if (!Given(w, "ulysses_sequence_parallel_size") && actor) sp_from = &*actor;
  m.sp = static_cast<int>(Given(*sp_from, "ulysses_sequence_parallel_size")
                              ? *sp_from->Int("ulysses_sequence_parallel_size", 1, m.world)
                              : 1);
  if (m.world % m.sp != 0)
    sp_from->Fail("ulysses_sequence_parallel_size", "a divisor of the world");
  plan->cp = m.sp;
  plan->cp_fsdp_mesh = model::CpFsdpMesh::kDpCp;  // FSDP over the world, Ulysses mesh [dp, sp]
  plan->role = train ? model::Role::kTrain : model::Role::kInfer;
  std::string strategy = Given(w, "strategy") ? *w.Enum("strategy", {"fsdp", "fsdp2"})
                         : actor && Given(*actor, "strategy")
                             ? *actor->Enum("strategy", {"fsdp", "fsdp2"})
                             : "fsdp";
  static const Json kEmpty = Json::object();
  auto fc = w.Section("fsdp_config");
  ReadFsdpConfig(
      fc ? *fc
         : ConfigReader(kEmpty, top.file(), "/actor_rollout_ref/" + role + "/fsdp_config", ignored),
      strategy, train, m, ctx, out, plan);
  auto model = arr.Section("model");
  if (model) model->CheckKeys(ModelKeys());
  ReadModel(model ? *model : ConfigReader(kEmpty, top.file(), "/actor_rollout_ref/model", ignored),
            train, ctx, plan);
  int dp = m.world / m.sp;
  std::string micro_key = train ? "ppo_micro_batch_size" : "log_prob_micro_batch_size";
  int64_t micro = 0;
  if (Given(w, micro_key + "_per_gpu")) {
    micro = *w.Int(micro_key + "_per_gpu", 1, 1 << 20);
  } else if (Given(w, micro_key)) {
    micro = *w.Int(micro_key, dp, 1 << 30) / dp;  // deprecated global size, normalized per rank
  } else {
    w.Fail(micro_key + "_per_gpu", "a micro-batch size per GPU");
  }
  plan->micro_batch = static_cast<int>(micro);
  plan->grad_accum = 1;
  plan->no_sync = false;
  if (train) {
    // fsdp_workers.py: ppo_mini_batch_size *= rollout.n, then //= world / sp.
    int64_t n = 1;
    if (Given(w, "rollout_n")) n = *w.Int("rollout_n", 1, 1 << 20);
    if (auto ro = arr.Section("rollout"); ro && Given(*ro, "n")) n = *ro->Int("n", 1, 1 << 20);
    int64_t mini = w.Int("ppo_mini_batch_size", 1, 1 << 30).value_or(256) * n;
    if (mini % dp != 0)
      w.Fail("ppo_mini_batch_size", "x rollout.n a multiple of world / sp = " + std::to_string(dp));
    plan->grad_accum = Accumulation(w, "ppo_mini_batch_size", mini / dp, plan->micro_batch);
  }
  if (auto data = top.Section("data")) {
    // Halves of int64_t, so that the sum cannot overflow.
    int64_t prompt = data->Int("max_prompt_length", 1, INT64_MAX / 2).value_or(512);
    int64_t response = data->Int("max_response_length", 1, INT64_MAX / 2).value_or(512);
    plan->seq_len = prompt + response;
  }
}

void ImportSft(const ConfigReader& top, const ImportContext& ctx, ImportResult* out,
               std::vector<std::string>* ignored, model::Plan* plan) {
  Fsdp m;
  m.world = ReadWorld(top, ctx, out);
  if (m.world <= 0) top.Fail("trainer", "trainer.nnodes / n_gpus_per_node or a --cluster");
  m.sp = static_cast<int>(top.Int("ulysses_sequence_parallel_size", 1, m.world).value_or(1));
  if (m.world % m.sp != 0) top.Fail("ulysses_sequence_parallel_size", "a divisor of the world");
  plan->cp = m.sp;
  plan->cp_fsdp_mesh = model::CpFsdpMesh::kDpCp;
  plan->role = model::Role::kTrain;
  ConfigReader model = top.RequiredSection("model");
  model.CheckKeys(ModelKeys());
  std::string strategy = model.Enum("strategy", {"fsdp", "fsdp2"}).value_or("fsdp2");
  static const Json kEmpty = Json::object();
  auto fc = model.Section("fsdp_config");
  ReadFsdpConfig(fc ? *fc : ConfigReader(kEmpty, top.file(), "/model/fsdp_config", ignored),
                 strategy, true, m, ctx, out, plan);
  ReadModel(model, true, ctx, plan);
  ConfigReader data = top.RequiredSection("data");
  // fsdp_sft_trainer.py: train_batch_size //= dp; micro-batches = that // micro_batch_size_per_gpu.
  int dp = m.world / m.sp;
  plan->micro_batch =
      static_cast<int>(data.Int("micro_batch_size_per_gpu", 1, 1 << 20).value_or(4));
  int64_t global = data.Int("train_batch_size", 1, 1 << 30).value_or(256);
  if (global % dp != 0)
    data.Fail("train_batch_size", "a multiple of world / sp = " + std::to_string(dp));
  plan->grad_accum = Accumulation(data, "train_batch_size", global / dp, plan->micro_batch);
  plan->no_sync = false;
  plan->seq_len = data.Int("max_length", 1, INT64_MAX).value_or(1024);
  for (const auto& item : data.obj().items()) {
    const std::string& k = item.key();
    if (k != "micro_batch_size_per_gpu" && k != "train_batch_size" && k != "max_length") {
      if (k == "micro_batch_size" && !item.value().is_null()) {
        data.Fail(k, "null (deprecated; give micro_batch_size_per_gpu)");
      }
      ignored->push_back("/data/" + k);
    }
  }
}

}  // namespace

// Keys read in volcengine/verl @b178a3c: verl/trainer/config/_generated_ppo_trainer.yaml,
// actor/actor.yaml, actor/dp_actor.yaml, ref/ref.yaml, engine/fsdp.yaml, model/hf_model.yaml,
// sft_trainer.yaml; verl/workers/fsdp_workers.py (create_device_mesh, get_sharding_strategy,
// model_dtype default fp32 for the actor and bf16 otherwise, mixed_precision param bf16 / reduce
// fp32, CPU offload forced on for non-actor roles, offload_policy for the fsdp2 actor,
// ppo_mini_batch_size normalization); verl/workers/config/engine.py FSDPEngineConfig.
ImportResult ImportVerl(const Json& doc, const std::string& file, const ImportContext& ctx,
                        model::Plan* plan) {
  ImportResult out;
  out.format = ImportFormat::kVerl;
  std::vector<std::string> ignored;
  ConfigReader top(doc, file, "", &ignored);
  bool ppo = top.Has("actor_rollout_ref");
  for (const auto& item : doc.items()) {
    const std::string& k = item.key();
    bool mapped =
        k == "trainer" || k == "data" ||
        (ppo ? k == "actor_rollout_ref" : k == "model" || k == "ulysses_sequence_parallel_size");
    if (!mapped) ignored.push_back("/" + k);
  }
  if (auto tr = top.Section("trainer")) {
    for (const auto& item : tr->obj().items()) {
      if (item.key() != "nnodes" && item.key() != "n_gpus_per_node")
        ignored.push_back("/trainer/" + item.key());
    }
  }
  if (ppo) {
    if (auto data = top.Section("data")) {
      for (const auto& item : data->obj().items()) {
        if (item.key() != "max_prompt_length" && item.key() != "max_response_length") {
          ignored.push_back("/data/" + item.key());
        }
      }
    }
    ImportPpo(top, ctx, &out, &ignored, plan);
  } else {
    ImportSft(top, ctx, &out, &ignored, plan);
  }
  std::string warn = IgnoredWarning(file, ignored);
  if (!warn.empty()) out.warnings.insert(out.warnings.begin(), warn);
  return out;
}

}  // namespace shardtune::configs::internal
