// Import of a ROLL pipeline YAML: one worker (actor_train, reference, ...) with the fsdp2_train or
// fsdp2_infer strategy. A worker section defines the whole worker, so ROLL's defaults apply to the
// keys it leaves out (fsdp_size 1, gradient checkpointing on, per_device_train_batch_size 8, ...).
#include <algorithm>
#include <cctype>

#include "model/errors.h"
#include "planner/configs/import_reader.h"

namespace shardtune::configs::internal {
namespace {

// Pipeline-level keys shardtune reads (roll/configs/base_config.py); every other top-level key
// that is not a worker configures the RL algorithm, data or logging and is ignored with a warning.
const std::vector<std::string> kPipelineMapped = {"sequence_length", "prompt_length",
                                                  "response_length", "num_gpus_per_node"};

// roll/configs/worker_config.py WorkerConfig.
const KeyTable& WorkerKeys() {
  static const KeyTable t = WithIgnored(
      Concat({
          Mapped({"model_args", "training_args", "strategy_args", "device_mapping", "world_size",
                  "infer_batch_size"}),
          {
            // The pipeline groups sequences into dynamic micro-batches
            // (utils/dynamic_batching.py), but fsdp2_strategy.py's train_step and forward_step
            // cut what they receive into per_device_train_batch_size / micro_batch_size chunks of
            // the padded width whatever the grouping; only megatron_strategy.py runs the dynamic
            // micro-batches (alibaba/ROLL@8eb27cc).
            {"use_dynamic_batching_in_train", KeyUse::kIgnored,
             "fsdp2 strategies keep fixed micro-batches; only ROLL's megatron strategy runs "
             "dynamic ones"},
            {"use_dynamic_batching_in_infer", KeyUse::kIgnored,
             "fsdp2 strategies keep fixed micro-batches; only ROLL's megatron strategy runs "
             "dynamic ones"},
            // worker_config.py: "Only supported in the megatron strategy"; only
            // megatron_strategy.py reads it (the fsdp2 strategies this reader takes run padded
            // micro-batches).
            {"use_sequence_packing", KeyUse::kIgnored, "read only by ROLL's megatron strategy"},
            {"mtp_training_mode", KeyUse::kUnsupported, "multi-token prediction", "disabled"},
          },
      }),
      {"name",
       "worker_cls",
       "num_gpus_per_worker",
       "model_update_frequency",
       "backend_timeout",
       "system_envs",
       "generating_args",
       "data_args",
       "offload_nccl",
       "max_concurrency",
       "checkpoint_config",
       "max_tokens_per_microbatch_in_train",
       "sequence_length_round_in_train",
       "max_tokens_per_microbatch_in_infer",
       "sequence_length_round_in_infer",
       "sequence_packing_args",
       "apply_loss_scale",
       "topr_positive_weight",
       "topr_negative_weight",
       "pg_variant",
       "algorithm",
       "tag_included",
       "router_replay",
       "opd_kl_coef",
       "max_packed_sequence_length_forward",
       "max_packed_sequence_length_train",
       "min_num_micro_batches_forward",
       "min_num_micro_batches_train",
       "loss_agg_mode",
       "use_remove_padding"});
  return t;
}

// roll/configs/model_args.py ModelArguments.
const KeyTable& ModelArgsKeys() {
  static const KeyTable t = Concat({
      Mapped({"disable_gradient_checkpointing", "ulysses_size", "freeze_module_prefix", "lora_rank",
              "lora_alpha", "lora_target", "autocast_adapter_dtype", "attn_implementation"}),
      // fsdp2 loads and computes in strategy_config.param_dtype, which overrides dtype
      // (fsdp2_strategy.py _prepare_fsdp2_model sets model_args.compute_dtype).
      Ignored({"dtype"}),
      Mapped({"model_name_or_path"}),  // ImportResult::model_named
      Ignored({"model_type", "gradient_checkpointing_use_reentrant"}),
      Mapped({"lora_dropout"}),
      Ignored(
          {"adapter_name_or_path", "num_labels", "device_map", "moe_aux_loss_coef", "vision_dp"}),
      {{"additional_target", KeyUse::kUnsupported, "extra fully trainable modules next to LoRA"},
       {"model_config_kwargs", KeyUse::kUnsupported, "overrides of the model's config.json"}},
  });
  return t;
}

const KeyTable& TrainingArgsKeys() {
  static const KeyTable t = WithIgnored(
      Mapped({"per_device_train_batch_size", "gradient_accumulation_steps"}),
      {"learning_rate", "weight_decay", "warmup_steps", "warmup_ratio", "num_train_epochs",
       "max_steps", "lr_scheduler_type", "seed", "data_seed", "output_dir",
       "dataloader_num_workers", "save_hf_model", "adam_beta1", "adam_beta2", "max_grad_norm"});
  return t;
}

// roll/distributed/strategy/fsdp2_strategy.py (strategy_config.get(...)) and
// docs_roll/docs/User Guides/Configuration/fsdp2.md.
const KeyTable& StrategyConfigKeys() {
  static const KeyTable t = Concat({
      Mapped({"fsdp_size", "param_dtype", "reduce_dtype", "reshard_after_forward", "offload_policy",
              "reduce_scatter_during_grad_accumulation", "wrap_policy", "apply_tiled_mlp",
              "tiled_num_shards", "apply_expert_patch",
              "ep_size",  // ReadExpertParallel
              "efsdp_size"}),
      Ignored({"moe_use_grouped_mm",  // the experts' kernels: same saves either way
               "async_save_ckpt", "model_type"}),
      // In ROLL's example YAMLs (examples/*/rlvr_*fsdp2*.yaml) but read by none of its code
      // (fsdp2_strategy.py reads strategy_config with .get() of the keys above).
      {{"use_batched_model_update", KeyUse::kIgnored, "not read by ROLL's fsdp2 strategy"}},
  });
  return t;
}

// roll/utils/fsdp_utils.py apply_fsdp2.
const KeyTable& WrapPolicyKeys() {
  static const KeyTable t =
      Mapped({"transformer_layer_cls_to_wrap", "wrap_embeddings", "wrap_lm_output", "moe_experts"});
  return t;
}

// device_mapping: a list of GPU ids or ROLL's string "list(range(a,b[,step]))" (terms joined by
// "+"), which worker_config.py evaluates. Returns the number of GPUs.
int CountDevices(const ConfigReader& w) {
  const Json* v = w.Raw("device_mapping");
  if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_number_integer()) w.Fail("device_mapping", "a list of GPU ids");
    }
    if (v->empty()) w.Fail("device_mapping", "at least one GPU");
    return static_cast<int>(v->size());
  }
  if (!v->is_string()) w.Fail("device_mapping", "a list of GPU ids or \"list(range(0,N))\"");
  std::string s;
  for (char c : v->get<std::string>()) {
    if (c != ' ') s += c;
  }
  int total = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const std::string head = "list(range(";
    if (s.compare(pos, head.size(), head) != 0) {
      w.Fail("device_mapping", "list(range(a,b)) terms joined by +");
    }
    pos += head.size();
    size_t close = s.find("))", pos);
    if (close == std::string::npos) w.Fail("device_mapping", "list(range(a,b))");
    std::vector<long> args;
    std::string inner = s.substr(pos, close - pos) + ",";
    size_t start = 0;
    for (size_t i = 0; i < inner.size(); ++i) {
      if (inner[i] != ',') continue;
      std::string num = inner.substr(start, i - start);
      if (num.empty() || num.size() > 6 ||
          !std::all_of(num.begin(), num.end(),
                       [](unsigned char c) { return std::isdigit(c) != 0; })) {
        w.Fail("device_mapping", "integer arguments to range() in [0, 999999]");
      }
      args.push_back(std::stol(num));  // at most 6 digits: no overflow
      start = i + 1;
    }
    long a = args.size() >= 2 ? args[0] : 0;
    long b = args.size() >= 2 ? args[1] : args[0];
    long step = args.size() == 3 ? args[2] : 1;
    if (args.size() > 3 || step < 1 || b <= a) w.Fail("device_mapping", "a non-empty range(a,b)");
    total += static_cast<int>((b - a + step - 1) / step);
    if (total > (1 << 20)) w.Fail("device_mapping", "at most 1048576 GPUs");
    pos = close + 2;
    if (pos < s.size() && s[pos] == '+') ++pos;
  }
  return total;
}

// The worker to import: ctx.worker, else the training worker (see ImportContext::worker).
std::string PickWorker(const Json& doc, const std::string& file, const ImportContext& ctx) {
  std::vector<std::string> train, infer, all;
  for (const auto& item : doc.items()) {
    const Json& v = item.value();
    if (!v.is_object() || !v.contains("strategy_args")) continue;
    all.push_back(item.key());
    const Json& sa = v["strategy_args"];
    std::string name =
        sa.is_object() && sa.contains("strategy_name") && sa["strategy_name"].is_string()
            ? sa["strategy_name"].get<std::string>()
            : "";
    if (name == "fsdp2_train") train.push_back(item.key());
    if (name == "fsdp2_infer") infer.push_back(item.key());
  }
  std::string list;
  for (const auto& n : train) list += (list.empty() ? "" : ", ") + QuoteName(n);
  for (const auto& n : infer) list += (list.empty() ? "" : ", ") + QuoteName(n);
  if (!ctx.worker.empty()) {
    if (std::find(all.begin(), all.end(), ctx.worker) == all.end()) {
      throw InputError(file + ":/" + ctx.worker + ": expected a worker with strategy_args (" +
                       (list.empty() ? "none has fsdp2" : list) + "), got none");
    }
    return ctx.worker;
  }
  if (train.size() == 1) return train[0];
  if (std::find(train.begin(), train.end(), "actor_train") != train.end()) return "actor_train";
  if (train.empty() && infer.size() == 1) return infer[0];
  throw InputError(file + ": expected one fsdp2_train worker (or --from-worker NAME), got " +
                   (list.empty() ? std::string("no worker with strategy fsdp2_train or fsdp2_infer")
                                 : "several: " + list));
}

// ROLL's MoE examples wrap the attention and the sparse MoE block of each layer
// (transformer_layer_cls_to_wrap: [Qwen3MoeAttention, Qwen3MoeSparseMoeBlock]); apply_fsdp2
// (roll/utils/fsdp_utils.py) wraps every module of a listed class that is no parent of another
// selected one, so the decoder layer's own class beside them changes nothing. True for that list
// (the classes named after the block class: <prefix>Attention with <prefix>SparseMoeBlock or
// <prefix>MLP); a list with only one of the two is an error (half of each block in the root is
// not modelled); false for any other list, which CheckLayerClasses judges.
bool SubBlockClasses(const ConfigReader& wp, const std::string& key,
                     const std::vector<std::string>& classes, const ImportContext& ctx) {
  const std::string suffix = "DecoderLayer";
  const std::string& layer = ctx.layer_class;
  if (layer.size() <= suffix.size() ||
      layer.compare(layer.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string prefix = layer.substr(0, layer.size() - suffix.size());
  bool attention = false, mlp = false;
  for (const auto& c : classes) {
    if (c == prefix + "Attention") {
      attention = true;
    } else if (c == prefix + "SparseMoeBlock" || c == prefix + "MLP") {
      mlp = true;
    } else if (c != layer) {
      return false;
    }
  }
  if (attention != mlp) {
    wp.Fail(key, "the block class \"" + layer + "\", or " + prefix + "Attention together with " +
                     prefix + "SparseMoeBlock / " + prefix +
                     "MLP (one of them alone leaves half of each block to the root, which "
                     "shardtune does not model)");
  }
  return attention && mlp;
}

void ReadWrap(const ConfigReader& sc, const ImportContext& ctx, ImportResult* out,
              model::Plan* plan) {
  model::WrapPolicy w;  // ROLL wraps every block class (transformer_layer_cls_to_wrap)
  bool wrap_embeddings = false;
  if (auto wp = sc.Section("wrap_policy")) {
    wp->CheckKeys(WrapPolicyKeys());
    if (auto cls = wp->Names("transformer_layer_cls_to_wrap")) {
      w.sub_block_units = SubBlockClasses(*wp, "transformer_layer_cls_to_wrap", *cls, ctx);
      if (!w.sub_block_units) CheckLayerClasses(*wp, "transformer_layer_cls_to_wrap", *cls, ctx);
    }
    wrap_embeddings = wp->Bool("wrap_embeddings").value_or(false);
    w.head_unit = wp->Bool("wrap_lm_output").value_or(false);
    if (auto moe = wp->Names("moe_experts")) {
      // apply_fsdp2 wraps experts only with apply_expert_patch (or ep_size > 1, where the class
      // is the experts module on the expert mesh: ReadExpertParallel).
      const bool ep = sc.Int("ep_size", 1, 1 << 16).value_or(1) > 1;
      w.expert_units = !ep && sc.Bool("apply_expert_patch").value_or(false);
      if (!ep && !w.expert_units) {
        out->warnings.push_back(wp->Where("moe_experts") +
                                ": ROLL wraps experts only with apply_expert_patch true; ignored");
      }
    }
  }
  // apply_fsdp2 wraps an untied nn.Embedding on its own even with wrap_embeddings false.
  w.embedding_unit = wrap_embeddings || !ctx.tied_embeddings;
  plan->wrap = w;
}

// ROLL's expert parallelism (alibaba/ROLL@8eb27cc roll/distributed/strategy/fsdp2_strategy.py:
// create_device_mesh_with_ep, apply_moe_ep, ExpertParallel; roll/utils/fsdp_utils.py apply_fsdp2):
// with ep_size > 1 each MoE layer's experts module is split over ep consecutive ranks (E / ep
// local experts), tokens travel to them and back by all-to-all, and the module named by
// wrap_policy.moe_experts is fully_shard-ed on the expert mesh (eddp, efsdp, ep)'s [eddp, efsdp]
// dimensions: its local experts sharded over efsdp ranks, replicated over eddp. shardtune's
// Plan::ep shards the local experts over the FSDP shard group / ep ranks (ExpertShardGroup), so
// efsdp_size x ep_size must be the shard group (fsdp_size, or the world), as in both of ROLL's
// examples; ROLL itself asserts only that the product divides the world.
void ReadExpertParallel(const ConfigReader& cfg, const ImportContext& ctx, int world,
                        ImportResult* out, model::Plan* plan) {
  const int64_t ep = cfg.Int("ep_size", 1, 1 << 16).value_or(1);
  const int64_t efsdp = cfg.Int("efsdp_size", 1, 1 << 20).value_or(1);
  plan->ep = static_cast<int>(ep);
  if (ep <= 1) {
    if (efsdp != 1) {
      out->warnings.push_back(cfg.Where("efsdp_size") +
                              ": read only with ep_size > 1 (the expert mesh); ignored");
    }
    return;
  }
  if (world > 0 && (efsdp * ep > world || world % (efsdp * ep) != 0)) {
    cfg.Fail("efsdp_size", "efsdp_size x ep_size dividing the world size " + std::to_string(world) +
                               " (fsdp2_strategy.py asserts it), got " + std::to_string(efsdp) +
                               " x " + std::to_string(ep));
  }
  const int shard = plan->ResolvedShardGroup(world, ctx.gpus_per_node);
  if (world > 0 && efsdp * ep != shard) {
    cfg.Fail("efsdp_size",
             std::to_string(shard % ep == 0 ? shard / ep : 0) + " (the FSDP shard group " +
                 std::to_string(shard) + " / ep_size " + std::to_string(ep) +
                 ": shardtune shards an ep group's local experts over the rest of the shard "
                 "group; an expert mesh of another size is not modelled)");
  }
  auto wp = cfg.Section("wrap_policy");
  if (!wp || !wp->Has("moe_experts")) {
    cfg.Fail("ep_size", "1 without wrap_policy.moe_experts (apply_fsdp2 then leaves the expert-"
                        "parallel experts module to its block's FSDP unit on the dense mesh, "
                        "which shardtune does not model)");
  }
  // apply_moe_ep parallelizes the experts module; ROLL asserts transformers >= 5.2, whose
  // experts are the modules --modeling hf follows (model/activations.cc RollExpertParallel).
  plan->modeling = model::Modeling::kHf;
  plan->wrap.expert_units = false;
  out->warnings.push_back(cfg.Where("ep_size") + ": expert parallelism " + std::to_string(ep) +
                          " with the local experts sharded over " + std::to_string(efsdp) +
                          " ranks; the experts' for-loop forward (moe_use_grouped_mm false) and "
                          "its grouped_mm path are estimated alike, at a balanced load");
}

void ReadLora(const ConfigReader& ma, const ImportContext& ctx, model::Plan* plan) {
  plan->lora = model::LoraSpec{};
  if (!ma.Has("lora_target")) return;  // model_args.py: LoRA is on when lora_target is set
  const Json* t = ma.Raw("lora_target");
  if (t->is_string() && t->get<std::string>().find_first_of("*$|(") != std::string::npos) {
    ma.Fail("lora_target", "module names (a regular expression is not modelled)");
  }
  std::vector<std::string> names = *ma.Names("lora_target");
  if (names.size() == 1 && (names[0] == "all-linear" || names[0] == "all")) {
    names = AllLinearTargets(ctx.layer_class);
  }
  plan->lora.rank = static_cast<int>(ma.Int("lora_rank", 1, 1 << 16).value_or(8));
  plan->lora.alpha = ma.Number("lora_alpha", 0, 1e9).value_or(2.0 * plan->lora.rank);
  plan->lora.targets = names;
  // roll/configs/model_args.py lora_dropout (default 0.0); PEFT LoraConfig(lora_dropout).
  plan->lora.dropout = ma.Number("lora_dropout", 0, 0.999999).value_or(0.0);
  plan->lora.dtype =
      ma.Bool("autocast_adapter_dtype").value_or(true) ? model::DType::kFp32 : plan->master_dtype;
}

// strategy_config (and model_args.ulysses_size): mesh, resharding, dtypes, offload, no_sync,
// tiled MLP. `world`: the worker's ranks, 0 when unknown.
void ReadStrategyConfig(const ConfigReader& cfg, const ConfigReader& ma, bool train, int world,
                        model::Plan* plan) {
  plan->cp = static_cast<int>(ma.Int("ulysses_size", 1, 1 << 16).value_or(1));
  plan->cp_fsdp_mesh = model::CpFsdpMesh::kDpCp;  // FSDP2 over the whole world
  int64_t fsdp_size = cfg.Int("fsdp_size", INT32_MIN, 1 << 20).value_or(1);
  bool hybrid = fsdp_size > 1 && (world <= 0 || fsdp_size < world);
  if (hybrid && world <= 0) {
    cfg.Fail("fsdp_size", "1 or the world size when neither device_mapping nor --cluster gives it");
  }
  if (hybrid && world % fsdp_size != 0) {
    cfg.Fail("fsdp_size",
             "a divisor of the world size " + std::to_string(world) +
                 " (HSDP: world / fsdp_size replicas), or >= " + std::to_string(world));
  }
  if (plan->cp > 1 && fsdp_size < plan->cp) {
    cfg.Fail("fsdp_size", "at least ulysses_size " + std::to_string(plan->cp) +
                              " (fsdp2_strategy.py asserts fsdp_size >= cp_size)");
  }
  SetFsdp2Sharding(static_cast<int>(fsdp_size), world,
                   cfg.Bool("reshard_after_forward").value_or(true), plan);
  model::DType param = train ? model::DType::kFp32 : model::DType::kBf16;
  bool has_param = cfg.Has("param_dtype");
  if (has_param) param = ParseTrainerDtype(cfg, "param_dtype");
  // Loaded in param_dtype (the master copy); computed in it when given, else bf16.
  plan->master_dtype = param;
  plan->param_dtype = has_param ? param : model::DType::kBf16;
  plan->reduce_dtype =
      cfg.Has("reduce_dtype") ? ParseTrainerDtype(cfg, "reduce_dtype") : model::DType::kFp32;
  plan->offload =
      cfg.Bool("offload_policy").value_or(false) ? model::Offload::kAll : model::Offload::kNone;
  plan->no_sync = !cfg.Bool("reduce_scatter_during_grad_accumulation").value_or(true);
  plan->tiled_mlp_shards =
      cfg.Bool("apply_tiled_mlp").value_or(false)
          ? static_cast<int>(cfg.Int("tiled_num_shards", 1, 1 << 16).value_or(4))
          : 1;
}

}  // namespace

// Keys read in alibaba/ROLL @8eb27cc: roll/configs/base_config.py (sequence_length, else
// prompt_length + response_length; num_gpus_per_node), roll/configs/worker_config.py,
// roll/configs/model_args.py (lora_rank default 8, lora_alpha default 2 x rank, comma-separated
// lora_target and freeze_module_prefix, disable_gradient_checkpointing default false,
// ulysses_size), roll/configs/training_args.py (per_device_train_batch_size default 8),
// roll/distributed/strategy/fsdp2_strategy.py (create_device_mesh_with_ep: fsdp_size <= 1 or
// >= world is one FSDP group, else HSDP [world / fsdp_size, fsdp_size]; fsdp_size >= ulysses
// size; param_dtype default fp32 for fsdp2_train and bf16 for fsdp2_infer; reduce_dtype fp32;
// tiled_num_shards default 4; reduce_scatter_during_grad_accumulation default true),
// roll/utils/fsdp_utils.py apply_fsdp2 (wrap_policy), docs_roll/docs/User Guides/Configuration/
// fsdp2.md.
ImportResult ImportRoll(const ConfigReader& top, const ImportContext& ctx,
                        std::vector<std::string>* ignored, model::Plan* plan) {
  ImportResult out;
  // examples/start_*_pipeline.py: from_dict(data_class=..., data=OmegaConf.to_container(cfg))
  // with dacite's default Config (strict=False) drops a key no config dataclass has.
  UnknownKeysIgnoredScope unknown("not a field of ROLL's config dataclasses, which dacite's "
                                  "from_dict drops");
  out.worker = PickWorker(top.obj(), top.file(), ctx);
  for (const auto& item : top.obj().items()) {
    const std::string& k = item.key();
    if (k != out.worker &&
        std::find(kPipelineMapped.begin(), kPipelineMapped.end(), k) == kPipelineMapped.end()) {
      ignored->push_back("/" + k);
    }
  }
  if (auto g = top.Int("num_gpus_per_node", 1, 1 << 16);
      g && ctx.gpus_per_node > 0 && *g != ctx.gpus_per_node) {
    top.Fail("num_gpus_per_node",
             "the " + ctx.world_flag + "'s " + std::to_string(ctx.gpus_per_node) + " GPUs per node");
  }
  if (auto s = top.Int("sequence_length", 1, INT64_MAX)) {
    plan->seq_len = *s;
    out.seq_len_from = top.Where("sequence_length");
  } else if (top.Has("response_length")) {
    // Halves of int64_t, so that the sum cannot overflow.
    plan->seq_len = *top.Int("response_length", 1, INT64_MAX / 2) +
                    top.Int("prompt_length", 0, INT64_MAX / 2).value_or(0);
    out.seq_len_from = top.Where("prompt_length") + " + response_length";
  }
  ConfigReader w = top.RequiredSection(out.worker);
  w.CheckKeys(WorkerKeys());
  ConfigReader sa = w.RequiredSection("strategy_args");
  sa.CheckKeys({{"strategy_name", KeyUse::kMapped}, {"strategy_config", KeyUse::kMapped}});
  std::string name = sa.Enum("strategy_name", {"fsdp2_train", "fsdp2_infer"}).value_or("");
  if (name.empty()) sa.Fail("strategy_name", "fsdp2_train or fsdp2_infer");
  bool train = name == "fsdp2_train";
  int world = ctx.world_size;
  if (w.Has("device_mapping")) {
    int n = CountDevices(w);
    if (ctx.allow_subset_world && ctx.world_size > n && ctx.world_size % n == 0) {
      // roll/distributed/scheduler: the worker's processes take these devices of the pool; its
      // FSDP mesh spans them only.
      out.warnings.push_back(w.Where("device_mapping") + ": the worker runs on " +
                             std::to_string(n) + " of the " + ctx.world_flag + "'s " +
                             std::to_string(ctx.world_size) +
                             " GPUs; estimated on those (its FSDP world)");
    } else {
      CheckWorld(n, ctx, w.Where("device_mapping"));
    }
    world = out.world_size = n;
  } else if (auto ws = w.Int("world_size", 1, 1 << 20)) {
    CheckWorld(static_cast<int>(*ws), ctx, w.Where("world_size"));
    world = out.world_size = static_cast<int>(*ws);
  }
  static const Json kEmpty = Json::object();
  auto sc = sa.Section("strategy_config");
  ConfigReader cfg =
      sc ? *sc
         : ConfigReader(kEmpty, top.file(), "/" + out.worker + "/strategy_args/strategy_config",
                        ignored);
  cfg.CheckKeys(StrategyConfigKeys());
  auto mas = w.Section("model_args");
  ConfigReader ma =
      mas ? *mas : ConfigReader(kEmpty, top.file(), "/" + out.worker + "/model_args", ignored);
  ma.CheckKeys(ModelArgsKeys());
  // The worker's model: model_args.model_name_or_path, which the pipeline config fills when the
  // worker leaves it unset, from the top-level pretrain (the critic: reward_pretrain), and the
  // SFT pipeline always from pretrain (alibaba/ROLL@8eb27cc roll/configs/base_config.py,
  // roll/pipeline/sft/sft_config.py and roll/pipeline/distill/distill_config.py __post_init__).
  {
    // distill_config.py: the student's from student_pretrain, the teacher's from teacher_pretrain.
    const std::string top_key = out.worker == "critic"    ? "reward_pretrain"
                                : out.worker == "student" ? "student_pretrain"
                                : out.worker == "teacher" ? "teacher_pretrain"
                                                          : "pretrain";
    auto m = ma.String("model_name_or_path");
    if (out.worker == "sft_train" || !m || m->empty()) {
      if (auto p = top.String(top_key); p && !p->empty()) {
        out.model_named = *p;
        out.model_named_where = top.Where(top_key);
      }
    } else {
      out.model_named = *m;
      out.model_named_where = ma.Where("model_name_or_path");
    }
  }

  plan->role = train ? model::Role::kTrain : model::Role::kInfer;
  ReadStrategyConfig(cfg, ma, train, world, plan);
  ReadWrap(cfg, ctx, &out, plan);
  ReadExpertParallel(cfg, ctx, world, &out, plan);
  plan->frozen_prefixes = ma.Names("freeze_module_prefix").value_or(std::vector<std::string>{});
  ReadLora(ma, ctx, plan);
  // model_args.py: Literal["sdpa", "fa2", "auto"], all memory-efficient kernels (no S^2 saved).
  ma.Enum("attn_implementation", {"sdpa", "fa2", "auto"});
  plan->attention = model::Attention::kSdpa;
  bool ckpt = train && !ma.Bool("disable_gradient_checkpointing").value_or(false);
  plan->checkpointing = ckpt ? model::Checkpointing::kFull : model::Checkpointing::kNone;
  plan->checkpoint_every_k = 1;
  if (train) {
    auto tas = w.Section("training_args");
    ConfigReader ta =
        tas ? *tas : ConfigReader(kEmpty, top.file(), "/" + out.worker + "/training_args", ignored);
    ta.CheckKeys(TrainingArgsKeys());
    plan->micro_batch =
        static_cast<int>(ta.Int("per_device_train_batch_size", 1, 1 << 20).value_or(8));
    plan->grad_accum =
        static_cast<int>(ta.Int("gradient_accumulation_steps", 1, 1 << 20).value_or(1));
    if (w.Has("infer_batch_size")) ignored->push_back("/" + out.worker + "/infer_batch_size");
  } else {
    plan->micro_batch = static_cast<int>(w.Int("infer_batch_size", 1, 1 << 20).value_or(16));
    plan->grad_accum = 1;
    plan->no_sync = false;
    if (w.Has("training_args")) ignored->push_back("/" + out.worker + "/training_args");
  }
  return out;
}

}  // namespace shardtune::configs::internal
