// Plan flags -> model::Plan, flag by flag over an optional --plan file.
#include "cli/plan_flags.h"

#include <sstream>

#include "model/errors.h"
#include "model/plan_json.h"

namespace shardtune::cli {
bool FlagGiven(const PlanFlags& f, const std::string& flag) { return f.app && f.app->count(flag) > 0; }

void AddPlanFlags(CLI::App* app, PlanFlags* f) {
  f->app = app;
  app->add_option("--plan", f->plan_file, "Plan JSON (shardtune.plan); flags override it")
      ->check(CLI::ExistingFile);
  app->add_option("--strategy", f->strategy,
                  "full_shard|shard_grad_op|no_shard|hybrid_shard|hybrid_shard_zero2");
  app->add_option("--shard-group", f->shard_group, "Ranks per shard group (HSDP); default: all / GPUs per node");
  app->add_option("--wrap", f->wrap, "block|every:K|ranges:0-7,8-31|size:N (e.g. size:100M)");
  app->add_flag("--wrap-embedding", f->wrap_embedding, "Give the embedding its own FSDP unit");
  app->add_flag("--wrap-head", f->wrap_head, "Give [final norm, LM head] their own FSDP unit");
  app->add_option("--micro-batch", f->micro_batch, "Sequences per rank per micro-batch");
  app->add_option("--seq-len", f->seq_len, "Tokens per sequence (default: the model's maximum)");
  app->add_option("--grad-accum", f->grad_accum, "Micro-batches per optimizer step");
  app->add_option("--global-batch", f->global_batch,
                  "Sequences per optimizer step; must equal micro-batch x grad-accum x data-parallel ranks");
  app->add_flag("--no-sync", f->no_sync, "Keep unsharded gradients across micro-batches, reduce on the last");
  app->add_option("--checkpointing", f->checkpointing, "none|full|selective|every:K");
  app->add_option("--offload", f->offload, "none|optimizer|all");
  app->add_option("--precision", f->precision, "Param dtype: bf16|fp16|fp32");
  app->add_option("--reduce-dtype", f->reduce_dtype, "Gradient reduction dtype: fp32|bf16|fp16");
  app->add_option("--reshard-after-forward", f->reshard_after_forward, "true|false");
  app->add_flag("--forward-prefetch", f->forward_prefetch, "Prefetch the next unit's all-gather in forward");
  app->add_option("--backward-prefetch", f->backward_prefetch, "pre|post|none");
  app->add_option("--max-inflight-allgathers", f->max_inflight, "Limit on in-flight all-gathers");
  app->add_option("--optimizer", f->optimizer, "adamw|sgd|adafactor");
  app->add_option("--optimizer-impl", f->optimizer_impl, "foreach|fused|for_loop (torch.optim)");
  app->add_option("--attention", f->attention, "sdpa|eager");
  app->add_option("--modeling", f->modeling, "hf|torchtitan: whose model code (what autograd saves)");
  app->add_flag("--keep-logits", f->keep_logits, "The training loop holds outputs.logits through backward");
  app->add_option("--cp", f->cp, "Ulysses context-parallel size (divides heads, seq-len and world)");
  app->add_option("--cp-fsdp-mesh", f->cp_fsdp_mesh,
                  "dp_cp|dp: FSDP shards over data-parallel x cp ranks (verl, torchtitan) or dp only");
  app->add_option("--role", f->role, "train|infer (forward only: reference / log-prob workers)");
  app->add_option("--freeze", f->freeze,
                  "Freeze parameters whose name starts with this prefix (repeatable), e.g. model.embed_tokens");
  app->add_option("--lora-rank", f->lora_rank, "LoRA rank r (0: off); base weights frozen");
  app->add_option("--lora-alpha", f->lora_alpha, "LoRA alpha (scale alpha/r)");
  app->add_option("--lora-dropout", f->lora_dropout,
                  "LoRA dropout p in [0, 1) (PEFT lora_dropout; saves a dropped input copy per adapter)");
  app->add_option("--lora-targets", f->lora_targets, "Comma-separated projections, e.g. q_proj,v_proj");
  app->add_option("--lora-dtype", f->lora_dtype, "Adapter weight dtype: fp32|bf16|fp16");
  app->add_option("--frozen-dtype", f->frozen_dtype,
                  "fp32|bf16|fp16: dtype the frozen weights were loaded in, which their FSDP "
                  "shards keep (LoRA base, --freeze, role infer); default: the master dtype");
  app->add_option("--tiled-mlp", f->tiled_mlp, "Sequence tiles the MLP runs over (1: off)");
  app->add_flag("--wrap-experts", f->wrap_experts, "MoE: every expert its own FSDP unit");
}

void AddFromFlags(CLI::App* app, PlanFlags* f) {
  app->add_option("--from", f->from_files,
                  "Trainer config to read the plan from (repeatable, applied in order): Accelerate "
                  "YAML, HF Trainer args JSON, ROLL or verl YAML. Precedence: defaults < --plan < "
                  "--from < plan flags")
      ->check(CLI::ExistingFile);
  app->add_option("--from-format", f->from_format,
                  "accelerate|hf-trainer|roll|verl (default: detected from the content)");
  app->add_option("--from-worker", f->from_worker,
                  "ROLL worker (actor_train, reference, ...) or verl role (actor, ref) to read");
}

std::string PlanSource(const PlanFlags& f) {
  if (!f.from_files.empty()) {
    std::string out;
    for (const auto& file : f.from_files) out += (out.empty() ? "" : "+") + file;
    return out;
  }
  return f.plan_file.empty() ? "plan" : f.plan_file;
}

namespace {
std::vector<std::string> SplitCommas(const std::string& text, const std::string& where) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) {
      throw InputError(where + ": expected comma-separated names (e.g. q_proj,v_proj), got \"" +
                       text + "\"");
    }
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}
}  // namespace

model::Plan BuildPlan(const PlanFlags& f, const configs::ImportContext* from_ctx,
                      std::vector<std::string>* warnings) {
  using namespace model;
  Plan p = f.plan_file.empty() ? Plan{} : ReadPlanFile(f.plan_file);
  if (!f.from_files.empty()) {
    SHARDTUNE_CHECK(from_ctx != nullptr) << "--from without a model and cluster to read it against";
    configs::ImportContext ctx = *from_ctx;
    ctx.worker = f.from_worker;
    configs::ImportFormat format{};
    if (!f.from_format.empty()) format = configs::ParseImportFormat(f.from_format, "--from-format");
    for (const auto& file : f.from_files) {
      configs::ImportResult r =
          configs::ImportConfigFile(file, ctx, f.from_format.empty() ? nullptr : &format, &p);
      if (warnings) warnings->insert(warnings->end(), r.warnings.begin(), r.warnings.end());
    }
  }
  if (FlagGiven(f, "--strategy")) {
    p.strategy = ParseEnum<ShardingStrategy>(f.strategy, "--strategy");
    p.reshard_after_forward = StrategyReshardsAfterForward(p.strategy);
  }
  if (FlagGiven(f, "--shard-group")) p.shard_group_size = f.shard_group;
  if (FlagGiven(f, "--wrap")) {
    WrapPolicy w = ParseWrapSpec(f.wrap, "--wrap");
    w.embedding_unit = p.wrap.embedding_unit;
    w.head_unit = p.wrap.head_unit;
    w.expert_units = p.wrap.expert_units;
    p.wrap = w;
  }
  if (FlagGiven(f, "--wrap-embedding")) p.wrap.embedding_unit = true;
  if (FlagGiven(f, "--wrap-head")) p.wrap.head_unit = true;
  if (FlagGiven(f, "--micro-batch")) p.micro_batch = f.micro_batch;
  if (FlagGiven(f, "--seq-len")) p.seq_len = f.seq_len;
  if (FlagGiven(f, "--grad-accum")) p.grad_accum = f.grad_accum;
  if (FlagGiven(f, "--no-sync")) p.no_sync = true;
  if (FlagGiven(f, "--checkpointing")) ParseCheckpointingSpec(f.checkpointing, "--checkpointing", &p);
  if (FlagGiven(f, "--offload")) p.offload = ParseEnum<Offload>(f.offload, "--offload");
  if (FlagGiven(f, "--precision")) p.param_dtype = ParseEnum<DType>(f.precision, "--precision");
  if (FlagGiven(f, "--reduce-dtype")) p.reduce_dtype = ParseEnum<DType>(f.reduce_dtype, "--reduce-dtype");
  if (FlagGiven(f, "--reshard-after-forward")) {
    if (f.reshard_after_forward != "true" && f.reshard_after_forward != "false") {
      throw InputError("--reshard-after-forward: expected true or false, got \"" +
                       f.reshard_after_forward + "\"");
    }
    p.reshard_after_forward = f.reshard_after_forward == "true";
  }
  if (FlagGiven(f, "--forward-prefetch")) p.forward_prefetch = true;
  if (FlagGiven(f, "--backward-prefetch")) {
    p.backward_prefetch = ParseEnum<BackwardPrefetch>(f.backward_prefetch, "--backward-prefetch");
  }
  if (FlagGiven(f, "--max-inflight-allgathers")) p.max_inflight_allgathers = f.max_inflight;
  if (FlagGiven(f, "--optimizer")) p.optimizer = ParseEnum<Optimizer>(f.optimizer, "--optimizer");
  if (FlagGiven(f, "--optimizer-impl")) {
    p.optimizer_impl = ParseEnum<OptimizerImpl>(f.optimizer_impl, "--optimizer-impl");
  }
  if (FlagGiven(f, "--attention")) p.attention = ParseEnum<Attention>(f.attention, "--attention");
  if (FlagGiven(f, "--modeling")) p.modeling = ParseEnum<Modeling>(f.modeling, "--modeling");
  if (FlagGiven(f, "--keep-logits")) p.keep_logits = true;
  if (FlagGiven(f, "--cp")) p.cp = f.cp;
  if (FlagGiven(f, "--cp-fsdp-mesh")) p.cp_fsdp_mesh = ParseEnum<CpFsdpMesh>(f.cp_fsdp_mesh, "--cp-fsdp-mesh");
  if (FlagGiven(f, "--role")) p.role = ParseEnum<Role>(f.role, "--role");
  if (FlagGiven(f, "--freeze")) p.frozen_prefixes = f.freeze;
  if (FlagGiven(f, "--lora-rank")) p.lora.rank = f.lora_rank;
  if (FlagGiven(f, "--lora-alpha")) p.lora.alpha = f.lora_alpha;
  if (FlagGiven(f, "--lora-dropout")) {
    if (!(f.lora_dropout >= 0.0 && f.lora_dropout < 1.0)) {
      std::ostringstream got;
      got << f.lora_dropout;
      throw InputError("--lora-dropout: expected a probability in [0, 1), got " + got.str());
    }
    p.lora.dropout = f.lora_dropout;
  }
  if (FlagGiven(f, "--lora-targets")) p.lora.targets = SplitCommas(f.lora_targets, "--lora-targets");
  if (FlagGiven(f, "--lora-dtype")) p.lora.dtype = ParseEnum<DType>(f.lora_dtype, "--lora-dtype");
  if (FlagGiven(f, "--frozen-dtype")) {
    p.frozen_dtype = ParseEnum<DType>(f.frozen_dtype, "--frozen-dtype");
  }
  if (FlagGiven(f, "--tiled-mlp")) p.tiled_mlp_shards = f.tiled_mlp;
  if (FlagGiven(f, "--wrap-experts")) p.wrap.expert_units = true;
  return p;
}

}  // namespace shardtune::cli
