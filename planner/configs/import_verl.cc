// Import of a verl config: the PPO trainer's FSDP workers (actor_rollout_ref.actor for training,
// actor_rollout_ref.ref for inference) or the SFT trainer. Like ROLL, a verl file defines the whole
// worker, so verl's defaults (ppo_trainer.yaml, sft_trainer.yaml) apply to keys it leaves out.
// Hydra interpolations ("${...}") are resolved against the file before it is read
// (interpolation.h), so a composed config (`main_ppo --cfg job`) reads as verl sees it.
#include <algorithm>

#include "model/errors.h"
#include "model/packing.h"
#include "planner/configs/import_reader.h"

namespace shardtune::configs::internal {
namespace {

// verl/trainer/config/engine/fsdp.yaml and verl/workers/config/engine.py FSDPEngineConfig; the
// SFT trainer's model.fsdp_config adds cpu_offload / offload_params.
const KeyTable& FsdpConfigKeys() {
  static const KeyTable t =
      WithIgnored(Mapped({"wrap_policy", "param_offload", "optimizer_offload", "offload_policy",
                          "reshard_after_forward", "fsdp_size", "forward_prefetch", "model_dtype",
                          "mixed_precision", "dtype", "strategy", "cpu_offload", "offload_params"}),
                  {"_target_", "use_orig_params", "seed", "full_determinism",
                   "ulysses_sequence_parallel_size", "entropy_from_logits_with_chunking",
                   "use_torch_compile", "entropy_checkpointing", "forward_only", "grad_offload"});
  return t;
}

// verl/trainer/config/actor/actor.yaml, dp_actor.yaml, ref/ref.yaml, ref/dp_ref.yaml.
const KeyTable& WorkerKeys() {
  static const KeyTable t =
      WithIgnored(Mapped({"strategy", "ppo_mini_batch_size", "ppo_micro_batch_size",
                          "ppo_micro_batch_size_per_gpu", "log_prob_micro_batch_size",
                          "log_prob_micro_batch_size_per_gpu", "ulysses_sequence_parallel_size",
                          "fsdp_config", "rollout_n", "use_dynamic_bsz", "log_prob_use_dynamic_bsz",
                          "ppo_max_token_len_per_gpu", "log_prob_max_token_len_per_gpu",
                          "entropy_coeff", "calculate_entropy", "freeze_vision_tower",
                          "use_torch_compile", "entropy_from_logits_with_chunking"}),
                  {"model",
                   "_target_",
                   "defaults",
                   "clip_ratio",
                   "clip_ratio_low",
                   "clip_ratio_high",
                   "clip_ratio_c",
                   "tau_pos",
                   "tau_neg",
                   "policy_loss",
                   "loss_agg_mode",
                   "loss_scale_factor",
                   "use_kl_loss",
                   "use_prefix_grouper",
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
                   "entropy_checkpointing",
                   "use_remove_padding",
                   "calculate_sum_pi_squared",
                   "sum_pi_squared_checkpointing"});
  return t;
}

// verl/trainer/config/model/hf_model.yaml (and the SFT trainer's model section).
const KeyTable& ModelKeys() {
  static const KeyTable t = WithIgnored(
      Mapped({"enable_gradient_checkpointing", "use_remove_padding", "lora_rank", "lora_alpha",
              "target_modules", "tiled_mlp", "fsdp_config", "strategy",
              "override_config",            // ReadModelNamed: the keys that change nothing
              "enable_activation_offload",  // ReadModel: Plan::activation_offload
              "use_liger",                  // ReadLigerKernels
              "use_fused_kernels",          // ReadLogProbPath
              "fused_kernel_options",       // its impl_backend
              "exclude_modules",
              "path",              // the model (ImportResult::model_named)
              "partial_pretrain",  // sft_trainer.yaml's name for it
              "hf_config_path"}),  // where its config.json is read when set
      {"_target_", "tokenizer_path", "use_shm",
       "trust_remote_code", "custom_chat_template", "external_lib",
       "lora_adapter_path", "mtp"});
  return t;
}

// The model a verl model section loads (ImportResult::model_named): the config is read from
// hf_config_path when set, else from path (verl/workers/config/model.py HFModelConfig:
// hf_config_path defaults to path; fsdp_workers.py AutoConfig.from_pretrained(local_path));
// sft_trainer.yaml names it partial_pretrain.
void ReadModelNamed(const ConfigReader& model, ImportResult* out) {
  // override_config: keys merged into the model's config.json before it is built
  // (fsdp_workers.py override_model_config). The position limit changes what the model accepts,
  // not what a step holds (the sequence length is the data's); any other key could change the
  // model's shapes, which the model shardtune estimates would not have.
  if (std::optional<ConfigReader> oc = model.Section("override_config")) {
    static const std::vector<std::string> kNeutral = {"max_position_embeddings"};
    for (const auto& item : oc->obj().items()) {
      if (std::find(kNeutral.begin(), kNeutral.end(), item.key()) == kNeutral.end()) {
        throw InputError(oc->Where(item.key()) +
                         ": expected only max_position_embeddings in override_config (other "
                         "overrides of the model's config.json, which shardtune does not apply), "
                         "got " + QuoteName(item.key()) +
                         "; give --model a config.json with the override applied");
      }
    }
  }
  for (const char* key : {"hf_config_path", "path", "partial_pretrain"}) {
    std::optional<std::string> v = model.String(key);
    if (v && !v->empty()) {
      out->model_named = *v;
      out->model_named_where = model.Where(key);
      return;
    }
  }
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
  int64_t size = f.Has("fsdp_size") ? *f.Int("fsdp_size", -1, 1 << 20) : -1;
  if (size == 0) f.Fail("fsdp_size", "-1 (all ranks) or a shard group size >= 1");
  if (size > 0 && size < m.world && m.world % size != 0) {
    f.Fail("fsdp_size", "a divisor of the world size " + std::to_string(m.world) + ", or -1");
  }
  // create_device_mesh: fsdp_size < 0 or >= world -> 1-D mesh; else [world / size, size].
  // get_sharding_strategy: reshard_after_forward false -> SHARD_GRAD_OP / _HYBRID_SHARD_ZERO2.
  bool reshard = f.Has("reshard_after_forward") ? *f.Bool("reshard_after_forward") : true;
  SetFsdp2Sharding(size < 0 ? 0 : static_cast<int>(size), m.world, reshard, plan);
  // model_dtype is the dtype the whole model is loaded in (from_pretrained torch_dtype), the
  // frozen base of a LoRA actor included: Plan::frozen_dtype's default (master_dtype) follows it.
  plan->master_dtype = f.Has("model_dtype")
                           ? ParseTrainerDtype(f, "model_dtype")
                           : (actor ? model::DType::kFp32 : model::DType::kBf16);
  plan->param_dtype = f.Has("dtype") ? ParseTrainerDtype(f, "dtype") : model::DType::kBf16;
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

// `liger`: whether the worker applies use_liger (fsdp_workers.py _build_model_optimizer for the
// actor and the reference, fsdp_sft_trainer.py and the FSDP engine for SFT: Liger's
// _apply_liger_kernel_to_instance(model) with its defaults, so rms_norm, swiglu and rope (its
// fused linear cross-entropy runs only when the forward gets labels, which verl's never does);
// the critic's builder does not read it).
// `offload`: the trainer reads enable_activation_offload (the PPO workers and the FSDP engine do;
// fsdp_sft_trainer.py, the legacy SFT trainer, never does: `out` then gets a warning).
void ReadModel(const ConfigReader& model, bool train, const ImportContext& ctx, model::Plan* plan,
               bool liger = true, bool offload = true, ImportResult* out = nullptr) {
  plan->liger = {};
  if (liger && model.Bool("use_liger").value_or(false)) plan->liger = {true, true, true};
  // hf_model.yaml and sft_trainer.yaml: enable_gradient_checkpointing True.
  bool ckpt = model.Bool("enable_gradient_checkpointing").value_or(true);
  plan->checkpointing = train && ckpt ? model::Checkpointing::kFull : model::Checkpointing::kNone;
  plan->checkpoint_every_k = 1;
  // enable_activation_offload: fsdp_workers.py passes it to the actor's and the critic's
  // _build_model_optimizer (never the reference's), which calls enable_activation_offloading after
  // fully_shard; with gradient checkpointing on, verl swaps HF's for its own per-layer reentrant
  // checkpoint, which saves what full checkpointing saves (the layer's input).
  const bool asked = model.Bool("enable_activation_offload").value_or(false);
  plan->activation_offload =
      train && offload && asked ? model::ActivationOffload::kVerlAsync : model::ActivationOffload::kNone;
  if (asked && !offload && out != nullptr) {
    out->warnings.push_back(model.Where("enable_activation_offload") +
                            ": verl's fsdp_sft_trainer.py does not read it (only the PPO workers and the FSDP "
                            "engine of sft_trainer_engine.yaml do); estimated with the activations on the GPU");
  }
  plan->lora = model::LoraSpec{};
  int64_t rank = model.Int("lora_rank", 0, 1 << 16).value_or(0);
  if (rank > 0) {
    plan->lora.rank = static_cast<int>(rank);
    plan->lora.alpha = model.Number("lora_alpha", 0, 1e9).value_or(16.0);
    std::vector<std::string> t =
        model.Names("target_modules").value_or(std::vector<std::string>{"all-linear"});
    plan->lora.targets =
        t.size() == 1 && t[0] == "all-linear" ? AllLinearTargets(ctx.layer_class) : t;
    // exclude_modules (peft LoraConfig): a string is a regular expression over module names, a
    // list names modules (each the name or a ".name" suffix).
    if (const Json* ex = model.Raw("exclude_modules"); ex != nullptr && !ex->is_null()) {
      if (ex->is_string()) {
        plan->lora.exclude = ex->get<std::string>();
      } else if (auto names = model.Names("exclude_modules"); names && !names->empty()) {
        std::string alt;
        for (const std::string& n : *names) {
          std::string quoted;
          for (char ch : n) {
            if (std::string("\\^$.|?*+()[]{}").find(ch) != std::string::npos) quoted += '\\';
            quoted += ch;
          }
          alt += (alt.empty() ? "" : "|") + quoted;
        }
        plan->lora.exclude = "(.*\\.)?(" + alt + ")";
      }
    }
  }
  plan->tiled_mlp_shards = 1;
  if (auto tm = model.Section("tiled_mlp")) {
    tm->CheckKeys({{"enabled", KeyUse::kMapped}, {"num_shards", KeyUse::kMapped}});
    if (tm->Bool("enabled").value_or(false)) {
      plan->tiled_mlp_shards = static_cast<int>(tm->Int("num_shards", 1, 1 << 16).value_or(4));
    }
  }
}

// The fused kernels' backend: fused_kernel_options.impl_backend (hf_model.yaml: torch). verl
// skips its monkey patch for any other value, and its actor then fails reading output.log_probs.
model::LossKernel FusedKernel(const ConfigReader& model) {
  std::string backend = "torch";
  if (std::optional<ConfigReader> fo = model.Section("fused_kernel_options")) {
    fo->CheckKeys({{"impl_backend", KeyUse::kMapped}});
    backend = fo->Enum("impl_backend", {"torch", "triton"}).value_or("torch");
  }
  return backend == "triton" ? model::LossKernel::kVerlFusedTriton : model::LossKernel::kVerlFusedTorch;
}

// The log-prob head of the actor and ref workers (dp_actor.py _forward_micro_batch): with
// use_remove_padding (hf_model.yaml: true) the micro-batch's tokens are packed into one row and
// the logits go through flash-attn's in-place cross-entropy (LossKernel::kVerlFlashCe). Without
// it the model runs on the padded [B, prompt + response] batch with its attention mask (flash
// attention's unpad / pad, Plan::padding_mask) and the response slice of the logits is copied
// before the same loss (LossKernel::kVerlPaddedCe). verl refuses Ulysses without remove-padding
// (workers/config/actor.py), and its PrefixGrouper forward (use_prefix_grouper, taken only on
// the padded path without dynamic batches) shares each prompt among its samples: not modelled.
//
// use_fused_kernels (hf_model.yaml: false) replaces the head on either path: the model's forward
// returns log-probs and entropy from verl's fused linear kernel (models/transformers/
// monkey_patch.py patch_forward_with_backends, fused_kernel_options.impl_backend torch or
// triton: LossKernel::kVerlFusedTorch / kVerlFusedTriton), for the actor and the reference alike
// (fsdp_workers.py passes the model section's flag to both); with it the entropy's gradient
// reaches the head only when entropy_coeff is not 0 (dp_actor.py update_policy).
void ReadLogProbPath(const ConfigReader& w, const std::optional<ConfigReader>& model, bool train,
                     ImportResult* out, model::Plan* plan) {
  const bool padded = model && !model->Bool("use_remove_padding").value_or(true);
  const bool fused = model && model->Bool("use_fused_kernels").value_or(false);
  plan->loss_kernel = fused    ? FusedKernel(*model)
                      : padded ? model::LossKernel::kVerlPaddedCe
                               : model::LossKernel::kVerlFlashCe;
  plan->padding_mask = padded;
  plan->response_len = padded && !fused ? out->response_length : 0;
  plan->entropy_from_logits = false;
  plan->loss_fp32_upcast = false;
  plan->keep_logits = false;
  if (fused && w.Bool("use_prefix_grouper").value_or(false)) {
    w.Fail("use_prefix_grouper", "false with use_fused_kernels true (verl's actor asserts the two apart)");
  }
  if (padded && plan->cp > 1) {
    model->Fail("use_remove_padding",
                "true with ulysses_sequence_parallel_size " + std::to_string(plan->cp) +
                    " (verl's ActorConfig refuses sequence parallelism without it)");
  }
  if (padded && train && w.Bool("use_prefix_grouper").value_or(false) &&
      !w.Bool("use_dynamic_bsz").value_or(false)) {
    w.Fail("use_prefix_grouper",
           "false with use_remove_padding false (verl's PrefixGrouper forward, each prompt's "
           "tokens shared by its rollout.n responses, is not modelled)");
  }
  if (!train) return;  // compute_ref_log_prob: no entropy (fsdp_workers.py calculate_entropy=False)
  // dp_actor.py update_policy: calculate_entropy = config.calculate_entropy or entropy_coeff != 0,
  // always with grad; entropy_from_logits is torch.compile'd unless use_torch_compile is false.
  double coeff = w.Number("entropy_coeff", -1e9, 1e9).value_or(0.0);
  if (fused) {
    // The fused kernel computes the entropy in every chunk anyway; its gradient joins the chunk's
    // backward when the loss uses it (the torch backend's extra branch; the Triton kernel's
    // backward is the same either way).
    plan->entropy_from_logits = coeff != 0.0 && plan->loss_kernel == model::LossKernel::kVerlFusedTorch;
    return;
  }
  if (!w.Bool("calculate_entropy").value_or(false) && coeff == 0.0) return;
  std::string key = coeff != 0.0 ? "entropy_coeff" : "calculate_entropy";
  if (w.Bool("entropy_from_logits_with_chunking").value_or(false)) {
    w.Fail("entropy_from_logits_with_chunking",
           "false with " + key + " set (each chunk's fp32 copy and softmax are saved for "
           "backward, verl issue #2448: not modelled yet)");
  }
  if (!w.Bool("use_torch_compile").value_or(true)) {
    w.Fail("use_torch_compile",
           "true with " + key + " set (the eager entropy_from_logits' fp32 softmax copies, about "
           "10V bytes per token kept for backward, are not modelled yet)");
  }
  if (padded) {
    // The padded branch keeps flash-attn's in-place backward (the loss reads a copy) and the
    // entropy reads the slice, a view that keeps the whole lm_head output until backward.
    plan->entropy_from_logits = true;
    out->warnings.push_back(
        w.Where(key) +
        ": the entropy reads the response slice of the padded logits, which keeps the whole [B, S, "
        "V] lm_head output for backward; torch.compile's entropy_from_logits is taken to save "
        "nothing else and to return one [B, response, V] gradient (what Inductor saves is not "
        "verified)");
    return;
  }
  out->warnings.push_back(
      w.Where(key) +
      ": the entropy joins the update's graph: verl turns flash-attn's in-place backward off, and "
      "torch.compile's entropy_from_logits is taken to keep only the logits it reads (what "
      "Inductor saves is not verified); the head's peak stays the in-place division's four [T, V] "
      "tensors");
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

// The world (ReadWorld; one is required) and the Ulysses size of a role whose
// ulysses_sequence_parallel_size `sp_from` holds (default 1, a divisor of the world), set on
// `*plan` as Ulysses inside an FSDP mesh over the whole world.
Fsdp ReadUlyssesMesh(const ConfigReader& top, const ConfigReader& sp_from, const ImportContext& ctx,
                     ImportResult* out, model::Plan* plan) {
  Fsdp m;
  m.world = ReadWorld(top, ctx, out);
  if (m.world <= 0) top.Fail("trainer", "trainer.nnodes / n_gpus_per_node or a --cluster");
  m.sp = static_cast<int>(sp_from.Int("ulysses_sequence_parallel_size", 1, m.world).value_or(1));
  if (m.world % m.sp != 0) sp_from.Fail("ulysses_sequence_parallel_size", "a divisor of the world");
  plan->cp = m.sp;
  plan->cp_fsdp_mesh = model::CpFsdpMesh::kDpCp;
  return m;
}

// grad_accum = per-rank batch / micro-batch, each exactly (dp_actor.py asserts divisibility).
int Accumulation(const ConfigReader& r, const std::string& key, int64_t per_rank, int micro) {
  if (per_rank < micro || per_rank % micro != 0) {
    r.Fail(key, "a per-rank batch (" + std::to_string(per_rank) +
                    ") that is a multiple of the micro-batch " + std::to_string(micro));
  }
  return static_cast<int>(per_rank / micro);
}

// data.max_prompt_length + data.max_response_length, each 512 by verl's ppo_trainer.yaml when
// not given: the padded width verl's batches have, the longest sequence packing can hold. Sets
// out->seq_len_from.
int64_t ReadPaddedWidth(const ConfigReader& top, ImportResult* out) {
  static const Json kNoData = Json::object();
  auto data_section = top.Section("data");
  const ConfigReader data =
      data_section ? *data_section : ConfigReader(kNoData, top.file(), "/data", nullptr);
  // Halves of int64_t, so that the sum cannot overflow.
  int64_t prompt = data.Int("max_prompt_length", 1, INT64_MAX / 2).value_or(512);
  int64_t response = data.Int("max_response_length", 1, INT64_MAX / 2).value_or(512);
  out->seq_len_from = data.Where("max_prompt_length") + " " + std::to_string(prompt) +
                      (data.Has("max_prompt_length") ? "" : " (verl's default)") +
                      " + max_response_length " + std::to_string(response) +
                      (data.Has("max_response_length") ? "" : " (verl's default)");
  out->prompt_length = prompt;
  out->response_length = response;
  return prompt + response;
}

// How a worker cuts its batch into micro-batches: fixed sequences per micro-batch (micro_key, with
// "_per_gpu" or the deprecated global size) or a token budget (dynamic_key, budget_key), each
// read from the worker or, when it lacks them, from `fallback` (verl's oc.select defaults).
struct Batching {
  std::string dynamic_key, budget_key, micro_key;
  int64_t budget_default = 16384;
  const ConfigReader* fallback = nullptr;
  std::string fallback_dynamic_key, fallback_budget_key;
  int64_t mini = 0;  // sequences per update over the world (x rollout.n); 0: inference
  std::string mini_key = "ppo_mini_batch_size";  // where `mini` was read, for messages
};

void ApplyBatching(const ConfigReader& w, const Batching& b, int dp, int sp, int64_t seq,
                   model::Plan* plan) {
  plan->seq_len = seq;
  plan->packed_seq_len = 0;
  plan->no_sync = false;
  plan->grad_accum = 1;
  const bool train = b.mini > 0;
  if (train && b.mini % dp != 0) {
    w.Fail(b.mini_key, (b.mini_key == "ppo_mini_batch_size" ? "x rollout.n a multiple" : "a multiple") +
                           std::string(" of world / sp = ") + std::to_string(dp));
  }
  const ConfigReader* dyn_from = &w;
  std::string dyn_key = b.dynamic_key;
  if (!w.Has(dyn_key) && b.fallback && !b.fallback_dynamic_key.empty()) {
    dyn_from = b.fallback;
    dyn_key = b.fallback_dynamic_key;
  }
  if (dyn_from->Bool(dyn_key).value_or(false)) {
    // dp_actor.py update_policy / compute_log_prob, dp_critic.py: max_token_len =
    // *_max_token_len_per_gpu x sp; seqlen_balancing.py rearrange_micro_batches asserts
    // max_token_len >= the padded width and splits a mini-batch into ceil(its tokens /
    // max_token_len) micro-batches (at most one per sequence; the count made equal over the dp
    // ranks), balanced by Karmarkar-Karp. Each micro-batch is one packed row; the worst the
    // budget admits is max_token_len tokens of sequences up to the padded width (its cp ranks
    // hold 1/sp each).
    const ConfigReader* budget_from = &w;
    std::string budget_name = b.budget_key;
    if (!w.Has(b.budget_key) && b.fallback && !b.fallback_budget_key.empty() &&
        b.fallback->Has(b.fallback_budget_key)) {
      budget_from = b.fallback;
      budget_name = b.fallback_budget_key;
    }
    int64_t budget = budget_from->Int(budget_name, 1, 1 << 30).value_or(b.budget_default);
    if (budget * sp < seq) {
      budget_from->Fail(budget_name,
                        "at least (max_prompt_length + max_response_length) / sp = " +
                            std::to_string((seq + sp - 1) / sp) +
                            " (seqlen_balancing.py asserts max_token_len >= the padded length)");
    }
    plan->micro_batch = 1;
    plan->seq_len = budget * sp;
    plan->packed_seq_len = seq;
    if (train) {
      const int64_t per_rank = b.mini / dp;
      // A micro-batch holds no more than its rank's mini-batch: per_rank sequences of at most
      // the padded width (rounded up to whole cp shares).
      const int64_t most = per_rank * seq;
      if (most < plan->seq_len) plan->seq_len = (most + sp - 1) / sp * sp;
      // The mini-batch's rows when every sequence is as long as the padded width (the most).
      plan->grad_accum = static_cast<int>(model::PackedRowsAtLongest(per_rank, seq, plan->seq_len));
    }
    return;
  }
  int64_t micro = 0;
  if (w.Has(b.micro_key + "_per_gpu")) {
    micro = *w.Int(b.micro_key + "_per_gpu", 1, 1 << 20);
  } else if (w.Has(b.micro_key)) {
    micro = *w.Int(b.micro_key, dp, 1 << 30) / dp;  // deprecated global size, normalized per rank
  } else {
    w.Fail(b.micro_key + "_per_gpu",
           "a micro-batch size per GPU (or " + b.dynamic_key + ": true)");
  }
  plan->micro_batch = static_cast<int>(micro);
  if (train) plan->grad_accum = Accumulation(w, b.mini_key, b.mini / dp, plan->micro_batch);
}

void ImportPpo(const ConfigReader& top, const ImportContext& ctx, ImportResult* out,
               std::vector<std::string>* ignored, model::Plan* plan) {
  ConfigReader arr = top.RequiredSection("actor_rollout_ref");
  std::string role = !ctx.worker.empty() ? ctx.worker : arr.Has("actor") ? "actor" : "ref";
  if (role != "actor" && role != "ref") {
    throw InputError(top.file() +
                     ": --from-worker: expected actor, ref or critic for a verl PPO config, "
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
  if (!w.Has("ulysses_sequence_parallel_size") && actor) sp_from = &*actor;
  m.sp = static_cast<int>(sp_from->Has("ulysses_sequence_parallel_size")
                              ? *sp_from->Int("ulysses_sequence_parallel_size", 1, m.world)
                              : 1);
  if (m.world % m.sp != 0)
    sp_from->Fail("ulysses_sequence_parallel_size", "a divisor of the world");
  plan->cp = m.sp;
  plan->cp_fsdp_mesh = model::CpFsdpMesh::kDpCp;  // FSDP over the world, Ulysses mesh [dp, sp]
  plan->role = train ? model::Role::kTrain : model::Role::kInfer;
  std::string strategy = w.Has("strategy") ? *w.Enum("strategy", {"fsdp", "fsdp2"})
                         : actor && actor->Has("strategy")
                             ? *actor->Enum("strategy", {"fsdp", "fsdp2"})
                             : "fsdp";
  static const Json kEmpty = Json::object();
  auto fc = w.Section("fsdp_config");
  ReadFsdpConfig(
      fc ? *fc
         : ConfigReader(kEmpty, top.file(), "/actor_rollout_ref/" + role + "/fsdp_config", ignored),
      strategy, train, m, ctx, out, plan);
  auto model = arr.Section("model");
  if (model) {
    model->CheckKeys(ModelKeys());
    ReadModelNamed(*model, out);
  }
  ReadModel(model ? *model : ConfigReader(kEmpty, top.file(), "/actor_rollout_ref/model", ignored),
            train, ctx, plan);
  // fsdp_workers.py: freeze_vision_tower sets requires_grad False on get_vl_model_vision_tower's
  // module (a text model has none: verl prints "No vision tower found" and trains as usual).
  if (train && w.Bool("freeze_vision_tower").value_or(false) && !ctx.vision_tower_prefix.empty()) {
    plan->frozen_prefixes.push_back(ctx.vision_tower_prefix);
  }
  int dp = m.world / m.sp;
  const int64_t seq = ReadPaddedWidth(top, out);
  ReadLogProbPath(w, model, train, out, plan);
  // Token-budget micro-batches: the actor's use_dynamic_bsz with ppo_max_token_len_per_gpu, the
  // ref's log_prob_use_dynamic_bsz with log_prob_max_token_len_per_gpu (ref.yaml defaults both to
  // the actor's: ${oc.select:actor_rollout_ref.actor.use_dynamic_bsz,false} and
  // ${oc.select:actor_rollout_ref.actor.ppo_max_token_len_per_gpu,16384}).
  Batching b;
  b.dynamic_key = train ? "use_dynamic_bsz" : "log_prob_use_dynamic_bsz";
  b.budget_key = train ? "ppo_max_token_len_per_gpu" : "log_prob_max_token_len_per_gpu";
  b.micro_key = train ? "ppo_micro_batch_size" : "log_prob_micro_batch_size";
  b.budget_default = 16384;
  if (!train && actor) {
    b.fallback = &*actor;
    b.fallback_dynamic_key = "use_dynamic_bsz";
    b.fallback_budget_key = "ppo_max_token_len_per_gpu";
  }
  int64_t n = 1;  // fsdp_workers.py: ppo_mini_batch_size *= rollout.n, then //= world / sp
  if (w.Has("rollout_n")) n = *w.Int("rollout_n", 1, 1 << 20);
  if (auto ro = arr.Section("rollout"); ro && ro->Has("n")) n = *ro->Int("n", 1, 1 << 20);
  if (train) b.mini = w.Int("ppo_mini_batch_size", 1, 1 << 30).value_or(256) * n;
  ApplyBatching(w, b, dp, m.sp, seq, plan);
  out->sequences_per_step = b.mini;
  out->rollout_n = static_cast<int>(n);
  if (plan->padding_mask && plan->packed_seq_len > 0 && model) {
    // dp_actor.py: rearrange_micro_batches counts the real tokens (attention_mask sums), while
    // the padded branch runs each micro-batch as [b, padded width].
    out->warnings.push_back(
        model->Where("use_remove_padding") +
        ": false with a token budget: each micro-batch is padded to the padded width, so "
        "sequences shorter than it make the micro-batch larger than the budget; estimated with "
        "every sequence at the padded width, the smallest it can be");
  }
}

// verl's critic (verl/trainer/config/critic/critic.yaml and dp_critic.yaml; fsdp_workers.py
// CriticWorker; verl/workers/critic/dp_critic.py): a value model on the actor's GPUs, trained
// with its own FSDP states and optimizer. Its keys default to the actor's through oc.select
// (ppo_mini_batch_size, use_dynamic_bsz, rollout_n); its token budget is its own (32768), its
// Ulysses size 1, use_remove_padding off (the padded batch: no vocabulary, so only the token count
// differs, and the padded count is the larger).
const KeyTable& CriticKeys() {
  static const KeyTable t = WithIgnored(
      Mapped({"strategy", "enable", "model", "rollout_n", "ppo_mini_batch_size",
              "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "use_dynamic_bsz",
              "ppo_max_token_len_per_gpu", "ulysses_sequence_parallel_size"}),
      {"_target_", "optim", "forward_max_token_len_per_gpu", "forward_micro_batch_size",
       "forward_micro_batch_size_per_gpu", "ppo_epochs", "shuffle", "data_loader_seed",
       "cliprange_value", "loss_agg_mode", "checkpoint", "profiler", "grad_clip", "defaults",
       "nccl_timeout"});
  return t;
}

void ImportCritic(const ConfigReader& top, const ImportContext& ctx, ImportResult* out,
                  model::Plan* plan) {
  static const Json kEmpty = Json::object();
  auto section = top.Section("critic");
  const ConfigReader c = section ? *section : ConfigReader(kEmpty, top.file(), "/critic", nullptr);
  c.CheckKeys(CriticKeys());
  auto arr = top.Section("actor_rollout_ref");
  std::optional<ConfigReader> actor = arr ? arr->Section("actor") : std::nullopt;
  const Fsdp m = ReadUlyssesMesh(top, c, ctx, out, plan);
  plan->role = model::Role::kTrain;
  std::string strategy = c.Enum("strategy", {"fsdp", "fsdp2"}).value_or("fsdp");
  auto model = c.Section("model");
  ConfigReader mr = model ? *model : ConfigReader(kEmpty, top.file(), "/critic/model", nullptr);
  mr.CheckKeys(ModelKeys());  // critic.model: hf_model.yaml's keys (FSDPCriticModelCfg)
  ReadModelNamed(mr, out);
  auto fc = mr.Section("fsdp_config");
  ReadFsdpConfig(fc ? *fc : ConfigReader(kEmpty, top.file(), "/critic/model/fsdp_config", nullptr),
                 strategy, true, m, ctx, out, plan);
  ReadModel(mr, true, ctx, plan, /*liger=*/false);  // the critic's builder takes no use_liger
  plan->loss_kernel = model::LossKernel::kCrossEntropy;  // no vocabulary: the value head's loss
  plan->keep_logits = false;
  // dp_critic.py _forward_micro_batch: without use_remove_padding (dp_critic.yaml's default) the
  // critic runs on the padded batch with its attention mask; verl's CriticConfig refuses
  // Ulysses without it.
  plan->padding_mask = !mr.Bool("use_remove_padding").value_or(false);
  if (plan->padding_mask && m.sp > 1) {
    mr.Fail("use_remove_padding", "true with ulysses_sequence_parallel_size " +
                                      std::to_string(m.sp) +
                                      " (verl's CriticConfig refuses sequence parallelism without it)");
  }
  // Its model is --model's with a value head; a critic of another model is estimated as this one.
  std::optional<ConfigReader> amodel = arr ? arr->Section("model") : std::nullopt;
  auto cpath = mr.String("path");
  auto apath = amodel ? amodel->String("path") : std::nullopt;
  if (cpath && apath && *cpath != *apath) {
    out->warnings.push_back(mr.Where("path") + ": the critic's model " + QuoteName(*cpath) +
                            " is not the actor's " + QuoteName(*apath) +
                            "; it is estimated as --model with a value head");
  }
  const int64_t seq = ReadPaddedWidth(top, out);
  Batching b;
  b.dynamic_key = "use_dynamic_bsz";
  b.budget_key = "ppo_max_token_len_per_gpu";
  b.micro_key = "ppo_micro_batch_size";
  b.budget_default = 32768;
  if (actor) {  // critic.yaml: use_dynamic_bsz ${oc.select:actor_rollout_ref.actor.use_dynamic_bsz}
    b.fallback = &*actor;
    b.fallback_dynamic_key = "use_dynamic_bsz";
  }
  int64_t n = c.Int("rollout_n", 1, 1 << 20).value_or(0);
  if (n == 0) {
    auto ro = arr ? arr->Section("rollout") : std::nullopt;
    n = ro && ro->Has("n") ? *ro->Int("n", 1, 1 << 20) : 1;
  }
  int64_t mini = c.Has("ppo_mini_batch_size") ? *c.Int("ppo_mini_batch_size", 1, 1 << 30)
                 : actor && actor->Has("ppo_mini_batch_size")
                     ? *actor->Int("ppo_mini_batch_size", 1, 1 << 30)
                     : 256;
  b.mini = mini * n;  // fsdp_workers.py CriticWorker: *= rollout_n, then //= world / sp
  ApplyBatching(c, b, m.world / m.sp, m.sp, seq, plan);
  out->sequences_per_step = b.mini;
  // dp_critic.yaml: use_remove_padding false. A token budget then counts the real tokens while
  // the forward runs on [b, padded width]: short sequences make b, and the padded row, larger
  // than the budget. Estimated at sequences of the padded width (budget / width of them, the
  // least the micro-batch can be), and said.
  if (plan->packed_seq_len > 0 && !mr.Bool("use_remove_padding").value_or(false)) {
    out->warnings.push_back(
        mr.Where("use_remove_padding") +
        ": false (dp_critic.yaml's default) with a token budget: the critic pads each micro-batch "
        "to the padded width, so sequences shorter than it make the micro-batch larger than the "
        "budget; estimated with every sequence at the padded width, the smallest it can be");
  }
}

// verl's engine SFT trainer (python3 -m verl.trainer.sft_trainer over sft_trainer_engine.yaml,
// which composes model/hf_model.yaml at /model, engine/fsdp.yaml at /engine and optim/fsdp.yaml
// at /optim; hydra_compose.h composes it): verl/trainer/sft_trainer.py takes the world from
// torchrun (it reads no trainer.nnodes / n_gpus_per_node), data.train_batch_size // dp sequences
// per rank and step, and the FSDP engine (verl/workers/engine/fsdp/transformer_impl.py) cuts them
// as verl/workers/engine/utils.py prepare_micro_batches does: micro_batch_size_per_gpu sequences,
// or with data.use_dynamic_bsz a token budget of max_token_len_per_gpu x sp
// (seqlen_balancing.py rearrange_micro_batches, as the PPO actor's). Its forward computes
// log-probs with logprobs_from_logits (verl's log-prob path, as the actor's) and the loss is their
// negative mean (verl/workers/utils/losses.py sft_loss).
void ImportSftEngine(const ConfigReader& top, const ImportContext& ctx, ImportResult* out,
                     std::vector<std::string>* ignored, model::Plan* plan) {
  Fsdp m;
  m.world = ctx.world_size;
  if (m.world <= 0) top.Fail("engine", "a --cluster (the engine SFT trainer runs on torchrun's world)");
  if (auto tr = top.Section("trainer")) {  // the other trainer keys are listed by ImportVerl
    for (const std::string k : {"nnodes", "n_gpus_per_node"}) {
      if (tr->Has(k)) ignored->push_back("/trainer/" + k + " (the world is torchrun's: --cluster)");
    }
  }
  ConfigReader engine = top.RequiredSection("engine");
  std::string strategy = engine.Enum("strategy", {"fsdp", "fsdp2"}).value_or("fsdp");
  m.sp = static_cast<int>(engine.Int("ulysses_sequence_parallel_size", 1, m.world).value_or(1));
  if (m.world % m.sp != 0) engine.Fail("ulysses_sequence_parallel_size", "a divisor of the world");
  plan->cp = m.sp;
  plan->cp_fsdp_mesh = model::CpFsdpMesh::kDpCp;
  plan->role = model::Role::kTrain;
  ReadFsdpConfig(engine, strategy, true, m, ctx, out, plan);
  // Read above (a worker's fsdp_config carries it unread; the engine's is the trainer's).
  ignored->erase(std::remove(ignored->begin(), ignored->end(), "/engine/ulysses_sequence_parallel_size"),
                 ignored->end());
  ConfigReader model = top.RequiredSection("model");
  model.CheckKeys(ModelKeys());
  ReadModelNamed(model, out);
  ReadModel(model, true, ctx, plan);
  ReadLogProbPath(engine, model, true, out, plan);
  ConfigReader data = top.RequiredSection("data");
  const int64_t seq = data.Int("max_length", 1, INT64_MAX).value_or(1024);
  out->seq_len_from = data.Where("max_length") + (data.Has("max_length") ? "" : " (verl's default 1024)");
  Batching b;
  b.dynamic_key = "use_dynamic_bsz";
  b.budget_key = "max_token_len_per_gpu";
  b.micro_key = "micro_batch_size";
  b.budget_default = 8192;  // sft_trainer_engine.yaml
  b.mini = data.Int("train_batch_size", 1, 1 << 30).value_or(256);
  b.mini_key = "train_batch_size";
  const int dp = m.world / m.sp;
  ApplyBatching(data, b, dp, m.sp, seq, plan);
  out->sequences_per_step = b.mini;
  // pad_mode (checked here): no_padding packs a micro-batch's sequences, the padded modes fill
  // each to max_length; the worst case is the same, a micro-batch of max_length-token sequences.
  data.Enum("pad_mode", {"no_padding", "right_padding", "left_padding"});
  for (const auto& item : data.obj().items()) {
    const std::string& k = item.key();
    if (k != "micro_batch_size_per_gpu" && k != "train_batch_size" && k != "max_length" &&
        k != "use_dynamic_bsz" && k != "max_token_len_per_gpu" && k != "pad_mode") {
      ignored->push_back("/data/" + k);
    }
  }
}

void ImportSft(const ConfigReader& top, const ImportContext& ctx, ImportResult* out,
               std::vector<std::string>* ignored, model::Plan* plan) {
  if (top.Has("engine")) {
    out->verl_trainer = VerlTrainer::kSftEngine;
    ImportSftEngine(top, ctx, out, ignored, plan);
    return;
  }
  out->verl_trainer = VerlTrainer::kSft;
  const Fsdp m = ReadUlyssesMesh(top, top, ctx, out, plan);
  plan->role = model::Role::kTrain;
  ConfigReader model = top.RequiredSection("model");
  model.CheckKeys(ModelKeys());
  ReadModelNamed(model, out);
  std::string strategy = model.Enum("strategy", {"fsdp", "fsdp2"}).value_or("fsdp2");
  static const Json kEmpty = Json::object();
  auto fc = model.Section("fsdp_config");
  ReadFsdpConfig(fc ? *fc : ConfigReader(kEmpty, top.file(), "/model/fsdp_config", ignored),
                 strategy, true, m, ctx, out, plan);
  ReadModel(model, true, ctx, plan, /*liger=*/true, /*offload=*/false, out);
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
  out->seq_len_from = data.Where("max_length") + (data.Has("max_length") ? "" : " (verl's default 1024)");
  for (const auto& item : data.obj().items()) {
    const std::string& k = item.key();
    if (k != "micro_batch_size_per_gpu" && k != "train_batch_size" && k != "max_length") {
      // fsdp_sft_trainer.py reads only micro_batch_size_per_gpu; sft_trainer.yaml keeps the old
      // global micro_batch_size as a deprecated key that nothing reads.
      bool deprecated = k == "micro_batch_size" && !item.value().is_null();
      ignored->push_back("/data/" + k +
                         (deprecated ? " (deprecated, not read: micro_batch_size_per_gpu is)" : ""));
    }
  }
}

// param_offload with optimizer_offload in the fsdp_config at `path`: fsdp_workers.py moves the
// worker's parameters and optimizer state to the host after its phase and back before the next.
bool OffloadedWhenIdle(const ConfigReader& top, const std::vector<std::string>& path) {
  std::optional<ConfigReader> f = top;
  for (const auto& key : path) {
    std::optional<ConfigReader> next = f->Section(key);
    if (!next) return false;
    f.emplace(*next);
  }
  // Read as ReadFsdpConfig reads them ("true" strings included, other types an error).
  return f->Bool("param_offload").value_or(false) && f->Bool("optimizer_offload").value_or(false);
}

// The roles verl's PPO trainer puts beside the actor on the same GPUs (ray_trainer.py: one
// colocated worker class per resource pool, all in one process): the reference policy when
// need_reference_policy (algorithm.use_kl_in_reward or actor.use_kl_loss) and the critic when
// need_critic (critic.enable when set, else algorithm.adv_estimator == gae; verl/trainer/ppo/
// utils.py). A file that names no adv_estimator would get ppo_trainer.yaml's gae: with a critic
// section it does; without one, a warning says none was added. Returns true when it read the
// critic's section.
bool AddVerlRoles(const ConfigReader& top, const ImportContext& ctx, const model::Plan& base,
                  ImportResult* out, std::vector<std::string>* ignored) {
  out->roles_in_one_process = true;
  auto alg = top.Section("algorithm");
  auto arr = top.RequiredSection("actor_rollout_ref");
  auto actor = arr.Section("actor");
  bool kl_in_reward = alg && alg->Bool("use_kl_in_reward").value_or(false);
  bool kl_loss = actor && actor->Bool("use_kl_loss").value_or(false);
  if ((kl_in_reward || kl_loss) && arr.Has("ref")) {
    ImportedRole ref;
    ref.name = "ref";
    ref.plan = base;
    ImportContext rc = ctx;
    rc.worker = "ref";
    ImportResult r;
    // The actor's import already classified the shared sections' keys (model, trainer).
    std::vector<std::string> unused;
    const ConfigReader quiet(top.obj(), top.file(), "", &unused);
    ImportPpo(quiet, rc, &r, &unused, &ref.plan);
    ref.offloaded_when_idle = OffloadedWhenIdle(top, {"actor_rollout_ref", "ref", "fsdp_config"});
    out->roles.push_back(ref);
    ignored->erase(std::remove(ignored->begin(), ignored->end(), "/actor_rollout_ref/ref"),
                   ignored->end());
  } else if (kl_in_reward || kl_loss) {
    out->warnings.push_back(top.file() + ": " +
                            (kl_loss ? actor->Where("use_kl_loss") : alg->Where("use_kl_in_reward")) +
                            " needs the reference policy, whose actor_rollout_ref.ref section the "
                            "file lacks: not estimated beside the actor");
  }
  std::optional<bool> enable;
  if (auto c = top.Section("critic"); c && c->Has("enable")) enable = c->Bool("enable");
  std::optional<std::string> est = alg ? alg->String("adv_estimator") : std::nullopt;
  bool critic = enable ? *enable : est ? *est == "gae" : top.Has("critic");
  if (!enable && !est && !top.Has("critic")) {
    out->warnings.push_back(top.file() +
                            ": no algorithm.adv_estimator: verl's default, gae, trains a critic on "
                            "the same GPUs; give its section (or adv_estimator) to have it "
                            "estimated beside the actor");
  }
  if (!critic) return false;
  ImportedRole c;
  c.name = "critic";
  c.plan = base;
  c.value_head = true;
  ImportResult r;
  ImportCritic(top, ctx, &r, &c.plan);
  c.offloaded_when_idle = OffloadedWhenIdle(top, {"critic", "model", "fsdp_config"});
  out->warnings.insert(out->warnings.end(), r.warnings.begin(), r.warnings.end());
  out->roles.push_back(c);
  return true;
}

// The actor's old-log-prob pass (ray_trainer.py: actor_rollout_wg.compute_log_prob every step;
// fsdp_workers.py ActorRolloutRefWorker.compute_log_prob: micro_batch_size =
// rollout.log_prob_micro_batch_size_per_gpu, max_token_len = rollout.log_prob_max_token_len_per_gpu,
// use_dynamic_bsz = rollout.log_prob_use_dynamic_bsz, whose rollout.yaml defaults are the actor's
// through oc.select; dp_actor.py compute_log_prob under torch.no_grad with calculate_entropy=True).
// A forward-only role on the actor's FSDP module (its fp32 parameters, its Ulysses size and
// fsdp_config), beside the actor's resident optimizer state. The entropy is taken as
// torch.compile's fused entropy_from_logits computes it (use_torch_compile, the default): no
// [T, V] intermediate beyond the logits the log-prob head holds. `actor` is the imported actor.
void AddOldLogProbRole(const ConfigReader& top, const ImportContext& ctx, const model::Plan& actor,
                       ImportResult* out) {
  ConfigReader arr = top.RequiredSection("actor_rollout_ref");
  auto ro = arr.Section("rollout");
  auto actor_section = arr.Section("actor");
  if (!ro) return;
  ImportResult scratch;
  const int dp = std::max(1, ReadWorld(top, ctx, &scratch) / std::max(1, actor.cp));
  Batching b;
  b.dynamic_key = "log_prob_use_dynamic_bsz";
  b.budget_key = "log_prob_max_token_len_per_gpu";
  b.micro_key = "log_prob_micro_batch_size";
  if (actor_section) {
    b.fallback = &*actor_section;
    b.fallback_dynamic_key = "use_dynamic_bsz";
    b.fallback_budget_key = "ppo_max_token_len_per_gpu";
  }
  const bool dynamic = ro->Has(b.dynamic_key)
                           ? ro->Bool(b.dynamic_key).value_or(false)
                           : actor_section && actor_section->Bool("use_dynamic_bsz").value_or(false);
  if (!dynamic && !ro->Has("log_prob_micro_batch_size_per_gpu") && !ro->Has("log_prob_micro_batch_size")) {
    out->warnings.push_back(ro->Where("log_prob_micro_batch_size_per_gpu") +
                            " not given (verl requires it, or log_prob_use_dynamic_bsz): the "
                            "actor's old-log-prob pass is not estimated");
    return;
  }
  ImportedRole lp;
  lp.name = "actor old log-prob";
  lp.plan = actor;
  lp.plan.role = model::Role::kInfer;
  const int64_t seq = ReadPaddedWidth(top, &scratch);
  ApplyBatching(*ro, b, dp, actor.cp, seq, &lp.plan);
  lp.shares_actor_states = true;
  out->roles.push_back(lp);
}

// An inference engine's section (import.h RolloutEngine) serving `role` with engine `name`.
RolloutEngine EngineOf(const ConfigReader& ro, const std::string& role, const std::string& name,
                       const std::string& where, bool eager_default) {
  RolloutEngine e;
  e.role = role;
  e.name = name;
  e.where = where;
  e.gpu_memory_utilization = ro.Number("gpu_memory_utilization", 1e-3, 1.0).value_or(0.5);
  e.free_cache_engine = ro.Bool("free_cache_engine").value_or(true);
  e.enforce_eager = ro.Bool("enforce_eager").value_or(eager_default);
  return e;
}

// actor_rollout_ref.rollout: the engine beside the trainer (import.h RolloutEngine). name hf
// generates with the actor's own FSDP module (no engine); a file without the section runs no
// rollout here (an SFT-like PPO file) and one without a name gets a warning (rollout.yaml's name
// is ???, a required value). The log_prob_* keys are the actor's old-log-prob pass's
// (AddOldLogProbRole).
void ReadRolloutEngine(const ConfigReader& arr, ImportResult* out, std::vector<std::string>* ignored) {
  auto ro = arr.Section("rollout");
  if (!ro) return;
  ignored->erase(std::remove(ignored->begin(), ignored->end(), "/actor_rollout_ref/rollout"),
                 ignored->end());
  for (const auto& item : ro->obj().items()) {
    const std::string& k = item.key();
    // log_prob_*: the actor's old-log-prob pass (AddOldLogProbRole).
    if (k == "name" || k == "gpu_memory_utilization" || k == "free_cache_engine" ||
        k == "enforce_eager" || k == "n" || k.rfind("log_prob_", 0) == 0) {
      continue;
    }
    ignored->push_back("/actor_rollout_ref/rollout/" + k);
  }
  std::optional<std::string> name = ro->String("name");
  if (!name) {
    out->warnings.push_back(ro->Where("name") + " not given (rollout.yaml requires it): the rollout engine's memory "
                            "(vllm, sglang) is not counted beside the trainer");
    return;
  }
  if (*name == "hf") return;  // HFRollout generates with the actor's FSDP module
  if (*name != "vllm" && *name != "sglang" && *name != "trtllm") {
    ro->Fail("name", "vllm, sglang, trtllm or hf (verl's rollout engines)");
  }
  // rollout.yaml's defaults: gpu_memory_utilization 0.5, free_cache_engine true, enforce_eager
  // false.
  out->engines.push_back(EngineOf(*ro, "rollout", *name, arr.file() + ":/actor_rollout_ref/rollout",
                                  /*eager_default=*/false));
}

// reward_model's keys (reward_model/dp_reward_loop.yaml over dp_reward_model.yaml at
// volcengine/verl@b178a3c, and what fsdp_workers.py RewardModelWorker and
// experimental/reward_loop read of them).
const KeyTable& RewardModelKeys() {
  static const KeyTable t = WithIgnored(
      Mapped({"enable", "enable_resource_pool", "use_reward_loop", "strategy", "model", "rollout",
              "micro_batch_size", "micro_batch_size_per_gpu", "max_length", "use_dynamic_bsz",
              "forward_max_token_len_per_gpu", "ulysses_sequence_parallel_size"}),
      {"_target_", "n_gpus_per_node", "nnodes", "num_workers", "reward_manager",
       "reward_loop_source", "reward_loop_module_path", "reward_loop_class_name",
       "launch_reward_fn_async", "sandbox_fusion", "profiler", "truncation", "nccl_timeout",
       "reward_kwargs"});
  return t;
}

// reward_model.model: what RewardModelWorker._build_model reads (it takes no use_fused_kernels,
// no LoRA and no gradient checkpointing: the model only runs forward).
const KeyTable& RewardModelModelKeys() {
  static const KeyTable t = WithIgnored(
      Mapped({"path", "input_tokenizer", "override_config", "use_remove_padding", "fsdp_config"}),
      {"_target_", "external_lib", "trust_remote_code", "use_shm", "use_fused_kernels"});
  return t;
}

// The reward loop's served reward model, co-located (RolloutEngine's comment): its engine section
// reward_model.rollout, whose name rollout.yaml leaves ??? (required).
void ReadRewardEngine(const ConfigReader& rm, ImportResult* out, std::vector<std::string>* ignored) {
  ConfigReader ro = rm.RequiredSection("rollout");
  for (const auto& item : ro.obj().items()) {
    const std::string& k = item.key();
    if (k != "name" && k != "gpu_memory_utilization" && k != "free_cache_engine" && k != "enforce_eager") {
      ignored->push_back("/reward_model/rollout/" + k + " (inside the engine's gpu_memory_utilization share)");
    }
  }
  std::optional<std::string> name = ro.String("name");
  if (!name) {
    ro.Fail("name", "vllm, sglang or trtllm (the reward loop's engine; rollout.yaml leaves it ???, "
                    "a required value)");
  }
  if (*name != "vllm" && *name != "sglang" && *name != "trtllm") {
    ro.Fail("name", "vllm, sglang or trtllm (the reward loop's engines)");
  }
  // dp_reward_loop.yaml's rollout defaults: gpu_memory_utilization 0.5, free_cache_engine true,
  // enforce_eager true.
  out->engines.push_back(EngineOf(ro, "reward model", *name, rm.file() + ":/reward_model/rollout",
                                  /*eager_default=*/true));
}

// fsdp_workers.py RewardModelWorker (reward_model.use_reward_loop false): an inference role on
// its own model, in the actor's process (ray_trainer.py create_colocated_worker_cls).
// - _build_model: AutoModelForTokenClassification (num_labels 1: a score head in place of the
//   LM head, the value head ModelSpec::value_head models) from reward_model.model.path, loaded
//   and kept in bf16 (no mixed precision), FSDP over create_device_mesh(fsdp_size) with its
//   parameters on the host (CPUOffload(offload_params=True) / CPUOffloadPolicy(pin_memory=True)).
// - compute_rm_score: under torch.no_grad, micro-batches of micro_batch_size_per_gpu (the
//   deprecated global micro_batch_size // world) or, with use_dynamic_bsz,
//   rearrange_micro_batches(max_token_len = forward_max_token_len_per_gpu x sp); padded
//   [b, width] rows with the attention mask, or packed with model.use_remove_padding.
// - _switch_chat_template (model.input_tokenizer set, the composed default
//   ${actor_rollout_ref.model.path}): every sequence is re-tokenized with the reward model's chat
//   template and padded or truncated to max_length, or to the actor's padded width when
//   max_length is null.
void AddRewardModelRole(const ConfigReader& rm, const ConfigReader& top, const ImportContext& ctx,
                        const model::Plan& base, ImportResult* out) {
  static const Json kEmpty = Json::object();
  ImportedRole r;
  r.name = "reward model";
  r.plan = base;
  r.value_head = true;
  ImportResult scratch;
  const Fsdp m = ReadUlyssesMesh(top, rm, ctx, &scratch, &r.plan);
  r.plan.role = model::Role::kInfer;
  const std::string strategy = rm.Enum("strategy", {"fsdp", "fsdp2"}).value_or("fsdp");
  auto model_section = rm.Section("model");
  const ConfigReader mr =
      model_section ? *model_section : ConfigReader(kEmpty, rm.file(), "/reward_model/model", nullptr);
  mr.CheckKeys(RewardModelModelKeys());
  ReadModelNamed(mr, &scratch);
  if (scratch.model_named.empty()) {
    mr.Fail("path", "the reward model's path (a Hugging Face id or a folder with its config.json)");
  }
  r.model_named = scratch.model_named;
  r.model_named_where = scratch.model_named_where;
  // Its wrap classes are its own model's, which the actor's context does not know.
  ImportContext own = ctx;
  own.layer_class.clear();
  auto fc = mr.Section("fsdp_config");
  ReadFsdpConfig(fc ? *fc : ConfigReader(kEmpty, rm.file(), "/reward_model/model/fsdp_config", nullptr),
                 strategy, /*actor=*/false, m, own, &scratch, &r.plan);
  r.plan.master_dtype = model::DType::kBf16;  // from_pretrained(torch_dtype=bfloat16), .to(bf16)
  r.plan.param_dtype = model::DType::kBf16;
  r.plan.frozen_dtype.reset();
  r.plan.offload = model::Offload::kAll;  // its parameters live on the host
  r.plan.checkpointing = model::Checkpointing::kNone;
  r.plan.checkpoint_every_k = 1;
  r.plan.lora = model::LoraSpec{};
  r.plan.liger = {};
  r.plan.loss_kernel = model::LossKernel::kCrossEntropy;  // no vocabulary: a [tokens, 1] score
  r.plan.keep_logits = false;
  r.plan.entropy_from_logits = false;
  r.plan.response_len = 0;
  const bool padded = !mr.Bool("use_remove_padding").value_or(false);
  r.plan.padding_mask = padded;
  if (padded && m.sp > 1) {
    mr.Fail("use_remove_padding", "true with reward_model.ulysses_sequence_parallel_size " +
                                      std::to_string(m.sp) +
                                      " (the padded forward is not split over the sequence-parallel "
                                      "ranks; not modelled)");
  }
  int64_t seq = ReadPaddedWidth(top, &scratch);
  const Json* tok = mr.Raw("input_tokenizer");
  if (tok != nullptr && !tok->is_null() && rm.Has("max_length") && !rm.Raw("max_length")->is_null()) {
    seq = *rm.Int("max_length", 1, INT64_MAX / 2);
  }
  Batching b;
  b.dynamic_key = "use_dynamic_bsz";
  b.budget_key = "forward_max_token_len_per_gpu";
  b.micro_key = "micro_batch_size";
  b.budget_default = 32768;  // critic.yaml forward_max_token_len_per_gpu: ppo_max_token_len_per_gpu
  // dp_reward_model.yaml: use_dynamic_bsz and forward_max_token_len_per_gpu are the critic's.
  std::optional<ConfigReader> critic = top.Section("critic");
  if (critic) {
    b.fallback = &*critic;
    b.fallback_dynamic_key = "use_dynamic_bsz";
    b.fallback_budget_key = "forward_max_token_len_per_gpu";
  }
  ApplyBatching(rm, b, m.world / m.sp, m.sp, seq, &r.plan);
  out->roles.push_back(r);
}

// verl's reward model on the actor's GPUs (main_ppo.py add_reward_model_worker: reward_model.enable
// maps it to the global pool unless enable_resource_pool gives it a pool of its own; ray_trainer.py
// init_workers then builds the legacy RewardModelWorker, or with use_reward_loop, the
// _generated_ppo_trainer.yaml default, a RewardLoopManager on the global pool).
void ReadRewardModel(const ConfigReader& top, const ImportContext& ctx, const model::Plan& base,
                     ImportResult* out, std::vector<std::string>* ignored) {
  auto rm = top.Section("reward_model");
  if (!rm || !rm->Bool("enable").value_or(false) ||
      rm->Bool("enable_resource_pool").value_or(false)) {
    return;  // no reward model, or one on GPUs of its own: "/reward_model" stays listed as ignored
  }
  ignored->erase(std::remove(ignored->begin(), ignored->end(), "/reward_model"), ignored->end());
  const ConfigReader reader(rm->obj(), rm->file(), "/reward_model", ignored);
  reader.CheckKeys(RewardModelKeys());
  if (reader.String("strategy").value_or("fsdp") == "megatron") {
    reader.Fail("strategy", "fsdp or fsdp2 (Megatron's reward model worker is out of scope)");
  }
  if (reader.Bool("use_reward_loop").value_or(true)) {
    ReadRewardEngine(reader, out, ignored);
    // The served model's weights, KV cache and batches live inside the engine's share.
    for (const std::string k : {"model", "micro_batch_size", "micro_batch_size_per_gpu", "max_length",
                                "use_dynamic_bsz", "forward_max_token_len_per_gpu",
                                "ulysses_sequence_parallel_size", "strategy"}) {
      const Json* v = reader.Raw(k);
      if (v != nullptr && !v->is_null()) {
        ignored->push_back("/reward_model/" + k + " (the reward loop's engine does not read it)");
      }
    }
    return;
  }
  AddRewardModelRole(reader, top, ctx, base, out);
}

}  // namespace

// Keys read in volcengine/verl @b178a3c: verl/trainer/config/_generated_ppo_trainer.yaml,
// actor/actor.yaml, actor/dp_actor.yaml, ref/ref.yaml, engine/fsdp.yaml, model/hf_model.yaml,
// sft_trainer.yaml; verl/workers/fsdp_workers.py (create_device_mesh, get_sharding_strategy,
// model_dtype default fp32 for the actor and bf16 otherwise, mixed_precision param bf16 / reduce
// fp32, CPU offload forced on for non-actor roles, offload_policy for the fsdp2 actor,
// ppo_mini_batch_size normalization); verl/workers/config/engine.py FSDPEngineConfig.
ImportResult ImportVerl(const ConfigReader& top, const ImportContext& ctx,
                        std::vector<std::string>* ignored, model::Plan* plan) {
  ImportResult out;
  bool ppo = top.Has("actor_rollout_ref");
  // fsdp_workers.py builds the actor, critic and ref under get_init_weight_context_manager(
  // use_meta_tensor=not tie_word_embeddings) (fsdp_utils.py: the CPU on mesh coordinate 0, meta
  // elsewhere); the SFT trainer (fsdp_sft_trainer.py) does the same.
  out.rank0_load_unless_tied = true;
  for (const auto& item : top.obj().items()) {
    const std::string& k = item.key();
    bool mapped = k == "trainer" || k == "data" ||
                  (ppo ? k == "actor_rollout_ref" || k == "algorithm" || k == "critic"
                       : k == "model" || k == "ulysses_sequence_parallel_size" || k == "engine");
    if (!mapped) ignored->push_back("/" + k);
  }
  if (auto tr = top.Section("trainer")) {
    for (const auto& item : tr->obj().items()) {
      if (item.key() != "nnodes" && item.key() != "n_gpus_per_node")
        ignored->push_back("/trainer/" + item.key());
    }
  }
  if (ppo) {
    out.verl_trainer = VerlTrainer::kPpo;
    if (auto data = top.Section("data")) {
      for (const auto& item : data->obj().items()) {
        if (item.key() != "max_prompt_length" && item.key() != "max_response_length") {
          ignored->push_back("/data/" + item.key());
        }
      }
    }
    if (auto alg = top.Section("algorithm")) {
      for (const auto& item : alg->obj().items()) {
        if (item.key() != "adv_estimator" && item.key() != "use_kl_in_reward")
          ignored->push_back("/algorithm/" + item.key());
      }
    }
    const model::Plan base = *plan;
    if (ctx.worker == "critic") {
      if (!top.Has("critic")) top.Fail("critic", "the critic's section (--from-worker critic)");
      ImportCritic(top, ctx, &out, plan);
      out.worker = "critic";
      out.value_head = true;
      out.offloaded_when_idle = OffloadedWhenIdle(top, {"critic", "model", "fsdp_config"});
      ignored->push_back("/actor_rollout_ref");
    } else {
      ImportPpo(top, ctx, &out, ignored, plan);
      out.offloaded_when_idle = OffloadedWhenIdle(top, {"actor_rollout_ref", "actor", "fsdp_config"});
      bool critic_read = false;
      if (ctx.worker.empty() && out.worker == "actor") {
        critic_read = AddVerlRoles(top, ctx, base, &out, ignored);
        ReadRolloutEngine(top.RequiredSection("actor_rollout_ref"), &out, ignored);
        AddOldLogProbRole(top, ctx, *plan, &out);
        ReadRewardModel(top, ctx, base, &out, ignored);
      }
      if (!critic_read && top.Has("critic")) ignored->push_back("/critic");
    }
  } else {
    ImportSft(top, ctx, &out, ignored, plan);
  }
  return out;
}

}  // namespace shardtune::configs::internal
