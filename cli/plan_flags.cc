// Plan flags -> model::Plan, flag by flag over an optional --plan file and --from configs: one
// table declares each flag once (registration, help, parsing, application).
#include "cli/plan_flags.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "model/errors.h"
#include "model/plan_json.h"
#include "model/presets.h"
#include "model/text.h"

namespace shardtune::cli {

namespace {
// --liger: "none", "all" (what _apply_liger_kernel_to_instance turns on by default) or a comma
// list of rms_norm, swiglu, rope.
model::LigerKernels ParseLigerKernels(const std::string& text, const std::string& flag) {
  model::LigerKernels k;
  if (text == "none") return k;
  if (text == "all") return {true, true, true};
  std::stringstream in(text);
  std::string item;
  bool any = false;
  while (std::getline(in, item, ',')) {
    if (item == "rms_norm") k.rms_norm = true;
    else if (item == "swiglu") k.swiglu = true;
    else if (item == "rope") k.rope = true;
    else {
      throw InputError(flag + ": expected none, all or a comma list of rms_norm, swiglu, rope, got \"" +
                       model::EscapeControls(text) + "\"");
    }
    any = true;
  }
  if (!any) {
    throw InputError(flag + ": expected none, all or a comma list of rms_norm, swiglu, rope, got \"\"");
  }
  return k;
}
}  // namespace
namespace {

using model::Plan;

// Which commands a flag is added to: every planning command takes the plan flags; the --from
// flags only the commands that read trainer configs (AddFromFlags).
enum FlagGroup { kPlanFlag, kFromFlag };

// One flag, once: its name, help, how it binds to its PlanFlags field, and what it sets in the
// plan when given (null: the command reads the field itself, e.g. --global-batch, or it is the
// plan's starting point, --plan and --from). Applied in table order, so a flag that sets a
// default (--strategy: reshard_after_forward) comes before the flag that overrides it.
struct FlagSpec {
  const char* name;
  const char* help;
  FlagGroup group;
  CLI::Option* (*add)(CLI::App* app, const FlagSpec& spec, PlanFlags* f);
  void (*apply)(const PlanFlags& f, const FlagSpec& spec, Plan* p);
};

template <auto Field>
CLI::Option* Opt(CLI::App* app, const FlagSpec& s, PlanFlags* f) {
  return app->add_option(s.name, f->*Field, s.help);
}
template <auto Field>
CLI::Option* Flag(CLI::App* app, const FlagSpec& s, PlanFlags* f) {
  return app->add_flag(s.name, f->*Field, s.help);
}
template <auto Field>
CLI::Option* ExistingFiles(CLI::App* app, const FlagSpec& s, PlanFlags* f) {
  return app->add_option(s.name, f->*Field, s.help)->check(CLI::ExistingFile);
}

std::vector<std::string> SplitCommas(const std::string& text, const std::string& where) {
  std::vector<std::string> out = model::SplitCommas(text);
  for (const std::string& item : out) {
    if (item.empty()) {
      throw InputError(where + ": expected comma-separated names (e.g. q_proj,v_proj), got \"" +
                       text + "\"");
    }
  }
  return out;
}

// An enum flag's apply: the name in PlanFlags field `From` parsed into Plan field `To` (ParseEnum:
// an unknown name is an InputError naming the flag and the choices).
template <auto From, auto To>
void ParseInto(const PlanFlags& f, const FlagSpec& s, Plan* p) {
  p->*To = model::ParseEnum<std::remove_reference_t<decltype(p->*To)>>(f.*From, s.name);
}

// A count flag's check (--seq-len, --images, --image-tokens): `value` must be a whole number of
// `what` >= 1, else an InputError naming the flag; `hint` follows the value it got.
void RequireAtLeastOne(int64_t value, const FlagSpec& s, const char* what,
                       const std::string& hint = "") {
  if (value < 1) {
    throw InputError(std::string(s.name) + ": expected a whole number of " + what + " >= 1, got " +
                     std::to_string(value) + hint);
  }
}

const std::vector<FlagSpec>& Flags() {
  using namespace model;
  static const std::vector<FlagSpec> kFlags = {
      {"--plan", "Plan JSON (shardtune.plan); flags override it", kPlanFlag,
       &ExistingFiles<&PlanFlags::plan_file>, nullptr},
      {"--strategy", "full_shard|shard_grad_op|no_shard|hybrid_shard|hybrid_shard_zero2", kPlanFlag,
       &Opt<&PlanFlags::strategy>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         p->strategy = ParseEnum<ShardingStrategy>(f.strategy, s.name);
         p->reshard_after_forward = StrategyReshardsAfterForward(p->strategy);
       }},
      {"--shard-group", "Ranks per shard group (HSDP); default: all / GPUs per node", kPlanFlag,
       &Opt<&PlanFlags::shard_group>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->shard_group_size = f.shard_group; }},
      {"--wrap", "block|every:K|ranges:0-7,8-31|size:N (e.g. size:100M)", kPlanFlag,
       &Opt<&PlanFlags::wrap>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         WrapPolicy w = ParseWrapSpec(f.wrap, s.name);
         w.embedding_unit = p->wrap.embedding_unit;
         w.head_unit = p->wrap.head_unit;
         w.expert_units = p->wrap.expert_units;
         w.sub_block_units = p->wrap.sub_block_units;
         p->wrap = w;
       }},
      {"--wrap-embedding", "Give the embedding its own FSDP unit", kPlanFlag,
       &Flag<&PlanFlags::wrap_embedding>,
       [](const PlanFlags&, const FlagSpec&, Plan* p) { p->wrap.embedding_unit = true; }},
      {"--wrap-head", "Give [final norm, LM head] their own FSDP unit", kPlanFlag,
       &Flag<&PlanFlags::wrap_head>,
       [](const PlanFlags&, const FlagSpec&, Plan* p) { p->wrap.head_unit = true; }},
      {"--micro-batch", "Sequences per rank per micro-batch", kPlanFlag, &Opt<&PlanFlags::micro_batch>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->micro_batch = f.micro_batch; }},
      {"--seq-len", "Tokens per sequence (default: the model's maximum, at most 8192; a --from config's own)", kPlanFlag,
       &Opt<&PlanFlags::seq_len>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         // 0 is a plan file's "the default"; a flag the user typed names a length (issue #49).
         RequireAtLeastOne(f.seq_len, s, "tokens", " (leave the flag out for the default)");
         p->seq_len = f.seq_len;
       }},
      {"--max-tokens-per-micro-batch",
       "Packed micro-batches: whole sequences of up to --seq-len tokens concatenated into rows of "
       "at most this many tokens (verl ppo_max_token_len_per_gpu x sp, TRL padding_free); sets "
       "micro-batch 1; memory is judged at a full row",
       kPlanFlag, &Opt<&PlanFlags::max_tokens_per_micro_batch>, nullptr},
      {"--images",
       "Vision-language models: images per sequence (their tokens: --image-tokens or "
       "--image-pixels); the vision tower runs over their patches",
       kPlanFlag, &Opt<&PlanFlags::images>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         RequireAtLeastOne(f.images, s, "images", " (leave the flag out for text only)");
         p->images = f.images;
       }},
      {"--image-tokens",
       "Vision-language models: the tokens all of a sequence's images take in it, after the "
       "merger (Qwen: patches / 4; Gemma 3: 256 an image); --images defaults to 1",
       kPlanFlag, &Opt<&PlanFlags::image_tokens>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         RequireAtLeastOne(f.image_tokens, s, "tokens");
         p->image_tokens = f.image_tokens;
         if (p->images == 0) p->images = 1;
       }},
      {"--image-pixels",
       "Vision-language models: WxH of each image (e.g. 1280x720); its tokens follow the model's "
       "processor (Qwen's smart_resize within its min/max pixels, Gemma 3's 896x896)",
       kPlanFlag, &Opt<&PlanFlags::image_pixels>, nullptr},
      {"--grad-accum", "Micro-batches per optimizer step", kPlanFlag, &Opt<&PlanFlags::grad_accum>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->grad_accum = f.grad_accum; }},
      {"--global-batch",
       "Sequences per optimizer step; must equal micro-batch x grad-accum x data-parallel ranks",
       kPlanFlag, &Opt<&PlanFlags::global_batch>, nullptr},
      {"--no-sync", "Keep unsharded gradients across micro-batches, reduce on the last", kPlanFlag,
       &Flag<&PlanFlags::no_sync>, [](const PlanFlags&, const FlagSpec&, Plan* p) { p->no_sync = true; }},
      {"--checkpointing", "none|full|selective|every:K|first:K|first:K+selective|sac:OPS (OPS from wq,wk,wv,wo,w1,w3,w2,sdpa joined by +)|blocks:A-B=POLICY,... (POLICY: full, none, selective, sac:OPS)", kPlanFlag, &Opt<&PlanFlags::checkpointing>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) { ParseCheckpointingSpec(f.checkpointing, s.name, p); }},
      {"--offload", "none|optimizer|all", kPlanFlag, &Opt<&PlanFlags::offload>,
       &ParseInto<&PlanFlags::offload, &Plan::offload>},
      {"--activation-offload",
       "none|verl_async|first:K: saved activations to pinned host memory, one layer at a time, as verl's "
       "enable_activation_offload does (every block but the last; two on the GPU at a time), or of the "
       "first K blocks only",
       kPlanFlag, &Opt<&PlanFlags::activation_offload>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         model::ParseActivationOffloadSpec(f.activation_offload, s.name, p);
       }},
      {"--reference",
       "none|fsdp2_root|fsdp1_blocks|adapters_off: a reference model's no_grad forward inside each micro-batch, "
       "after the policy's log-probs (TRL's DPOTrainer): a frozen copy sharded on its root only (FSDP2) or a block "
       "per unit (FSDP1), or the policy with its LoRA adapters off",
       kPlanFlag, &Opt<&PlanFlags::reference>,
       &ParseInto<&PlanFlags::reference, &Plan::reference>},
      {"--precision", "Param dtype: bf16|fp16|fp32", kPlanFlag, &Opt<&PlanFlags::precision>,
       &ParseInto<&PlanFlags::precision, &Plan::param_dtype>},
      {"--master-dtype",
       "Dtype of the sharded (master) parameters and optimizer state: fp32 (default) | bf16 | fp16 "
       "(a model loaded in bf16 and never upcast before fully_shard; `run` keeps fp32)",
       kPlanFlag, &Opt<&PlanFlags::master_dtype>,
       &ParseInto<&PlanFlags::master_dtype, &Plan::master_dtype>},
      {"--reduce-dtype", "Gradient reduction dtype: fp32|bf16|fp16", kPlanFlag,
       &Opt<&PlanFlags::reduce_dtype>,
       &ParseInto<&PlanFlags::reduce_dtype, &Plan::reduce_dtype>},
      {"--reshard-after-forward", "true|false", kPlanFlag, &Opt<&PlanFlags::reshard_after_forward>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         if (f.reshard_after_forward != "true" && f.reshard_after_forward != "false") {
           throw InputError(std::string(s.name) + ": expected true or false, got \"" +
                            f.reshard_after_forward + "\"");
         }
         p->reshard_after_forward = f.reshard_after_forward == "true";
       }},
      {"--forward-prefetch", "Prefetch the next unit's all-gather in forward", kPlanFlag,
       &Flag<&PlanFlags::forward_prefetch>,
       [](const PlanFlags&, const FlagSpec&, Plan* p) { p->forward_prefetch = true; }},
      {"--backward-prefetch", "pre|post|none", kPlanFlag, &Opt<&PlanFlags::backward_prefetch>,
       &ParseInto<&PlanFlags::backward_prefetch, &Plan::backward_prefetch>},
      {"--max-inflight-allgathers", "Limit on in-flight all-gathers", kPlanFlag,
       &Opt<&PlanFlags::max_inflight>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->max_inflight_allgathers = f.max_inflight; }},
      {"--optimizer", "adamw|sgd|adafactor", kPlanFlag, &Opt<&PlanFlags::optimizer>,
       &ParseInto<&PlanFlags::optimizer, &Plan::optimizer>},
      {"--optimizer-impl", "foreach|fused|for_loop (torch.optim)", kPlanFlag,
       &Opt<&PlanFlags::optimizer_impl>,
       &ParseInto<&PlanFlags::optimizer_impl, &Plan::optimizer_impl>},
      {"--attention", "sdpa|eager", kPlanFlag, &Opt<&PlanFlags::attention>,
       &ParseInto<&PlanFlags::attention, &Plan::attention>},
      {"--sdpa-backend",
       "auto|flash|cudnn|efficient|math: the SDPA kernel whose measured times the step uses (auto: "
       "what PyTorch picked where the profile was measured; flash for torch < 2.11 on H100)",
       kPlanFlag, &Opt<&PlanFlags::sdpa_backend>,
       &ParseInto<&PlanFlags::sdpa_backend, &Plan::sdpa_backend>},
      {"--modeling", "hf|torchtitan: whose model code (what autograd saves)", kPlanFlag,
       &Opt<&PlanFlags::modeling>,
       &ParseInto<&PlanFlags::modeling, &Plan::modeling>},
      {"--keep-logits", "The training loop holds outputs.logits through backward", kPlanFlag,
       &Flag<&PlanFlags::keep_logits>, [](const PlanFlags&, const FlagSpec&, Plan* p) { p->keep_logits = true; }},
      {"--loss-kernel",
       "cross_entropy|fused_linear|verl_flash_ce|verl_padded_ce|verl_fused_torch|verl_fused_triton: "
       "logits materialised then F.cross_entropy, the chunked fused linear cross-entropy (Liger's; "
       "shardtune run's), or one of verl's log-prob heads",
       kPlanFlag, &Opt<&PlanFlags::loss_kernel>,
       &ParseInto<&PlanFlags::loss_kernel, &Plan::loss_kernel>},
      {"--liger",
       "none|all|rms_norm,swiglu,rope: Liger-Kernel's module patches (HF Trainer's use_liger_kernel, "
       "verl's use_liger; Llama, Mistral, Qwen2, Qwen3): what they save instead of Hugging Face's",
       kPlanFlag, &Opt<&PlanFlags::liger>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) { p->liger = ParseLigerKernels(f.liger, s.name); }},
      {"--cp", "Ulysses context-parallel size (divides heads, seq-len and world)", kPlanFlag,
       &Opt<&PlanFlags::cp>, [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->cp = f.cp; }},
      {"--cp-fsdp-mesh", "dp_cp|dp: FSDP shards over data-parallel x cp ranks (verl, torchtitan) or dp only",
       kPlanFlag, &Opt<&PlanFlags::cp_fsdp_mesh>,
       &ParseInto<&PlanFlags::cp_fsdp_mesh, &Plan::cp_fsdp_mesh>},
      {"--ep", "Expert-parallel degree (MoE: torchtitan's expert_parallel_degree under --modeling "
               "torchtitan, ROLL's ep_size under hf)",
       kPlanFlag, &Opt<&PlanFlags::ep>, [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->ep = f.ep; }},
      {"--role", "train|infer (forward only: reference / log-prob workers)", kPlanFlag,
       &Opt<&PlanFlags::role>,
       &ParseInto<&PlanFlags::role, &Plan::role>},
      {"--freeze",
       "Freeze parameters whose name starts with this prefix (repeatable), e.g. model.embed_tokens",
       kPlanFlag, &Opt<&PlanFlags::freeze>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->frozen_prefixes = f.freeze; }},
      {"--lora-rank", "LoRA rank r (0: off); base weights frozen", kPlanFlag, &Opt<&PlanFlags::lora_rank>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->lora.rank = f.lora_rank; }},
      {"--lora-alpha", "LoRA alpha (scale alpha/r)", kPlanFlag, &Opt<&PlanFlags::lora_alpha>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->lora.alpha = f.lora_alpha; }},
      {"--lora-dropout",
       "LoRA dropout p in [0, 1) (PEFT lora_dropout; saves a dropped input copy per adapter)", kPlanFlag,
       &Opt<&PlanFlags::lora_dropout>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) {
         if (!(f.lora_dropout >= 0.0 && f.lora_dropout < 1.0)) {
           std::ostringstream got;
           got << f.lora_dropout;
           throw InputError(std::string(s.name) + ": expected a probability in [0, 1), got " + got.str());
         }
         p->lora.dropout = f.lora_dropout;
       }},
      {"--lora-targets", "Comma-separated projections, e.g. q_proj,v_proj", kPlanFlag,
       &Opt<&PlanFlags::lora_targets>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) { p->lora.targets = SplitCommas(f.lora_targets, s.name); }},
      {"--lora-exclude",
       "A regular expression: modules whose full name it matches get no adapter (PEFT "
       "exclude_modules, e.g. '.*visual.*' for a VL model's tower)",
       kPlanFlag, &Opt<&PlanFlags::lora_exclude>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->lora.exclude = f.lora_exclude; }},
      {"--lora-dtype", "Adapter weight dtype: fp32|bf16|fp16", kPlanFlag, &Opt<&PlanFlags::lora_dtype>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) { p->lora.dtype = ParseEnum<DType>(f.lora_dtype, s.name); }},
      {"--frozen-dtype",
       "fp32|bf16|fp16: dtype the frozen weights were loaded in, which their FSDP shards keep "
       "(LoRA base, --freeze, role infer); default: the master dtype",
       kPlanFlag, &Opt<&PlanFlags::frozen_dtype>,
       [](const PlanFlags& f, const FlagSpec& s, Plan* p) { p->frozen_dtype = ParseEnum<DType>(f.frozen_dtype, s.name); }},
      {"--tiled-mlp", "Sequence tiles the MLP runs over (1: off)", kPlanFlag, &Opt<&PlanFlags::tiled_mlp>,
       [](const PlanFlags& f, const FlagSpec&, Plan* p) { p->tiled_mlp_shards = f.tiled_mlp; }},
      {"--wrap-experts", "MoE: every expert its own FSDP unit", kPlanFlag, &Flag<&PlanFlags::wrap_experts>,
       [](const PlanFlags&, const FlagSpec&, Plan* p) { p->wrap.expert_units = true; }},
      {"--wrap-sub-blocks",
       "Each block's attention and MLP their own FSDP units, its norms in the root (ROLL's "
       "attention and MoE block classes)",
       kPlanFlag, &Flag<&PlanFlags::wrap_sub_blocks>,
       [](const PlanFlags&, const FlagSpec&, Plan* p) { p->wrap.sub_block_units = true; }},
      {"--from",
       "Trainer config to read the plan from (repeatable, applied in order): Accelerate YAML, HF "
       "Trainer args JSON, ROLL or verl YAML, torchtitan job TOML. Precedence: defaults < --plan < --from < plan flags",
       kFromFlag, &ExistingFiles<&PlanFlags::from_files>, nullptr},
      {"--from-format", "accelerate|hf-trainer|roll|verl|torchtitan (default: detected from the content)", kFromFlag,
       &Opt<&PlanFlags::from_format>, nullptr},
      {"--from-worker", "ROLL worker (actor_train, reference, ...) or verl role (actor, ref) to read",
       kFromFlag, &Opt<&PlanFlags::from_worker>, nullptr},
      {"--set",
       "Hydra-style override of the --from config, repeatable, as a launch script writes it: "
       "KEY.PATH=VALUE, +KEY=VALUE (add), ++KEY=VALUE (add or set), ~KEY (delete); e.g. "
       "--set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
       kFromFlag, &Opt<&PlanFlags::set_overrides>, nullptr},
  };
  return kFlags;
}

void AddGroup(CLI::App* app, PlanFlags* f, FlagGroup group) {
  f->app = app;
  for (const FlagSpec& s : Flags()) {
    if (s.group == group) s.add(app, s, f);
  }
}

}  // namespace

bool FlagGiven(const PlanFlags& f, const std::string& flag) {
  bool known = false;
  for (const FlagSpec& s : Flags()) known = known || flag == s.name;
  SHARDTUNE_CHECK(known) << "FlagGiven(\"" << flag << "\"): not a plan flag of cli/plan_flags.cc";
  return f.app && f.app->count(flag) > 0;
}

const std::vector<std::string>& PlanFlagNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const FlagSpec& s : Flags()) {
      if (s.group == kPlanFlag) names.push_back(s.name);
    }
    return names;
  }();
  return kNames;
}

void AddPlanFlags(CLI::App* app, PlanFlags* f) { AddGroup(app, f, kPlanFlag); }

static_assert(kDefaultSeqLenTokens == 8192, "--seq-len's help names the default cap, 8192");

void GroupHelp(CLI::App* app) {
  // The headings a person scans for (issue #49 item 9); an option not named here stays under
  // "Options".
  static const std::vector<std::pair<const char*, std::vector<const char*>>> kGroups = {
      {"Model and cluster", {"model", "cluster", "profile", "nproc", "emulate-world", "device", "threads"}},
      {"Plan: sharding and wrapping",
       {"plan", "strategy", "shard-group", "wrap", "wrap-embedding", "wrap-head", "wrap-experts",
        "wrap-sub-blocks", "reshard-after-forward", "forward-prefetch", "backward-prefetch", "max-inflight-allgathers",
        "cp", "cp-fsdp-mesh", "ep"}},
      {"Plan: batch and sequences",
       {"micro-batch", "seq-len", "max-tokens-per-micro-batch", "images", "image-tokens",
        "image-pixels", "grad-accum", "global-batch", "global-batch-tokens", "no-sync", "lengths"}},
      {"Plan: memory policy", {"checkpointing", "offload", "activation-offload", "tiled-mlp", "keep-logits", "loss-kernel", "reference"}},
      {"Plan: precision and optimizer",
       {"precision", "master-dtype", "reduce-dtype", "frozen-dtype", "optimizer", "optimizer-impl"}},
      {"Plan: model code and role", {"attention", "sdpa-backend", "modeling", "liger", "role"}},
      {"Plan: fine-tuning",
       {"freeze", "lora-rank", "lora-alpha", "lora-dropout", "lora-targets", "lora-exclude", "lora-dtype"}},
      {"Trainer configs (verl, ROLL, Accelerate, HF Trainer)", {"from", "from-format", "from-worker", "set"}},
      {"Memory model",
       {"model-load", "load-dtype", "checkpoint-format", "allocator", "host-memory-limit", "no-grad-clip",
        "moe-capacity-factor", "role-plan", "offload-between-roles", "roles-in-one-process", "reward-model"}},
      {"Search (what tune varies and ranks by)",
       {"objective", "min-tokens-per-s", "price-per-gpu-hour", "search-nodes", "cp-sizes", "loss-kernels",
        "jobs", "measure", "measure-steps", "measure-dir"}},
      {"Output",
       {"json", "timeline", "explain", "plot", "trace", "memory-snapshot", "out", "top", "export"}},
  };
  // The plan's own defaults (model::Plan{}), shown where the flag's value starts from them.
  const Plan d;
  const std::map<std::string, std::string> kDefaults = {
      {"strategy", ToString(d.strategy)},
      {"wrap", ToString(d.wrap.kind)},
      {"micro-batch", std::to_string(d.micro_batch)},
      {"grad-accum", std::to_string(d.grad_accum)},
      {"checkpointing", ToString(d.checkpointing)},
      {"offload", ToString(d.offload)},
      {"activation-offload", ToString(d.activation_offload)},
      {"reference", ToString(d.reference)},
      {"precision", model::ToString(d.param_dtype)},
      {"master-dtype", model::ToString(d.master_dtype)},
      {"reduce-dtype", model::ToString(d.reduce_dtype)},
      {"backward-prefetch", ToString(d.backward_prefetch)},
      {"max-inflight-allgathers", std::to_string(d.max_inflight_allgathers)},
      {"optimizer", ToString(d.optimizer)},
      {"optimizer-impl", ToString(d.optimizer_impl)},
      {"attention", ToString(d.attention)},
      {"sdpa-backend", ToString(d.sdpa_backend)},
      {"modeling", ToString(d.modeling)},
      {"loss-kernel", ToString(d.loss_kernel)},
      {"cp", std::to_string(d.cp)},
      {"cp-fsdp-mesh", ToString(d.cp_fsdp_mesh)},
      {"ep", std::to_string(d.ep)},
      {"role", ToString(d.role)},
      {"lora-rank", std::to_string(d.lora.rank)},
      {"lora-dtype", model::ToString(d.lora.dtype)},
      {"tiled-mlp", std::to_string(d.tiled_mlp_shards)},
      {"liger", "none"},
  };
  for (CLI::Option* o : app->get_options()) {
    const std::vector<std::string>& names = o->get_lnames();
    if (names.empty()) continue;
    const std::string& n = names.front();
    for (const auto& [group, members] : kGroups) {
      if (std::find(members.begin(), members.end(), n) != members.end()) {
        o->group(group);
        break;
      }
    }
    auto it = kDefaults.find(n);
    if (it != kDefaults.end() && o->get_default_str().empty()) o->default_str(it->second);
  }
}

void AddFromFlags(CLI::App* app, PlanFlags* f) { AddGroup(app, f, kFromFlag); }

std::string PlanSource(const PlanFlags& f) {
  if (!f.from_files.empty()) {
    std::string out;
    for (const auto& file : f.from_files) out += (out.empty() ? "" : "+") + file;
    return out;
  }
  return f.plan_file.empty() ? "plan" : f.plan_file;
}


namespace {
// --max-tokens-per-micro-batch T turns the plan into packed rows of T tokens holding sequences of
// up to the sequence length; on a plan already packed (a config's token budget), --seq-len sets
// the longest sequence and leaves the row.
void ApplyPacking(const PlanFlags& f, int64_t row_before_flags, model::Plan* p) {
  bool seq_flag = f.app && f.app->count("--seq-len") > 0;
  if (f.app && f.app->count("--max-tokens-per-micro-batch") > 0) {
    int64_t longest = p->packed_seq_len > 0 && !seq_flag ? p->packed_seq_len : p->seq_len;
    const int64_t t = f.max_tokens_per_micro_batch;
    if (longest <= 0) {
      throw InputError("--max-tokens-per-micro-batch " + std::to_string(t) +
                       ": expected --seq-len (the longest sequence a row packs), got none");
    }
    if (t < longest) {
      throw InputError("--max-tokens-per-micro-batch: expected at least the longest sequence, "
                       "--seq-len " + std::to_string(longest) + " (a sequence is never split), got " +
                       std::to_string(t));
    }
    if (f.app->count("--micro-batch") > 0 && f.micro_batch != 1) {
      throw InputError("--micro-batch " + std::to_string(f.micro_batch) +
                       ": expected 1 or none with --max-tokens-per-micro-batch (a packed "
                       "micro-batch is one row of tokens)");
    }
    p->micro_batch = 1;
    p->packed_seq_len = longest;
    p->seq_len = t;
  } else if (p->packed_seq_len > 0 && seq_flag) {
    p->packed_seq_len = f.seq_len;
    p->seq_len = row_before_flags;
  }
}

// How the --from files are read: `base` (the model and cluster) with --from-worker and the --set
// overrides, and the --from-format when given. One file is the whole config: an override may add
// a top-level key to it. With several, each override goes to the files that have its first key.
struct FromReading {
  configs::ImportContext ctx;
  std::optional<configs::ImportFormat> format;
  configs::ImportResult Read(const std::string& file, model::Plan* plan) const {
    return configs::ImportConfigFile(file, ctx, format ? &*format : nullptr, plan);
  }
};
FromReading ReadingOf(const PlanFlags& f, const configs::ImportContext& base) {
  FromReading r;
  r.ctx = base;
  r.ctx.worker = f.from_worker;
  r.ctx.overrides = f.set_overrides;
  r.ctx.overrides_add_top_level = f.from_files.size() == 1;
  if (!f.from_format.empty()) r.format = configs::ParseImportFormat(f.from_format, "--from-format");
  return r;
}
}  // namespace

model::Plan BuildPlan(const PlanFlags& f, const configs::ImportContext* from_ctx,
                      std::vector<std::string>* warnings, std::string* seq_len_from,
                      FromExtras* extras) {
  using namespace model;
  Plan p = f.plan_file.empty() ? Plan{} : ReadPlanFile(f.plan_file);
  std::string seq_from = p.seq_len > 0 ? "--plan " + f.plan_file : "";
  if (!f.set_overrides.empty() && f.from_files.empty()) {
    throw InputError("--set " + f.set_overrides.front() +
                     ": expected a --from config to override, got no --from");
  }
  if (!f.from_files.empty()) {
    SHARDTUNE_CHECK(from_ctx != nullptr) << "--from without a model and cluster to read it against";
    const FromReading reading = ReadingOf(f, *from_ctx);
    std::vector<std::string> applied;
    int fsdp_version = 0;
    std::string reference_copy_file;
    for (const auto& file : f.from_files) {
      configs::ImportResult r = reading.Read(file, &p);
      if (r.fsdp_version > 0) fsdp_version = r.fsdp_version;
      if (r.reference_copy) reference_copy_file = file;
      if (warnings) warnings->insert(warnings->end(), r.warnings.begin(), r.warnings.end());
      if (!r.seq_len_from.empty()) seq_from = r.seq_len_from;
      if (extras) {
        if (!r.roles.empty() || !r.engines.empty()) {
          extras->roles = r.roles;
          extras->roles_in_one_process = r.roles_in_one_process;
        }
        if (r.format == configs::ImportFormat::kVerl) extras->offloaded_when_idle = r.offloaded_when_idle;
        extras->value_head = extras->value_head || r.value_head;
        if (r.world_size > 0) extras->world_size = r.world_size;
        extras->rank0_load_unless_tied = extras->rank0_load_unless_tied || r.rank0_load_unless_tied;
        if (r.sequences_per_step > 0) extras->sequences_per_step = r.sequences_per_step;
        if (r.prompt_length > 0) {
          extras->prompt_length = r.prompt_length;
          extras->response_length = r.response_length;
        }
        if (r.rollout_n > 0) extras->rollout_n = r.rollout_n;
        if (r.verl_trainer != configs::VerlTrainer::kNone) extras->verl_trainer = r.verl_trainer;
        if (!r.engines.empty()) extras->engines = r.engines;
      }
      applied.insert(applied.end(), r.overrides_applied.begin(), r.overrides_applied.end());
    }
    // TRL DPO's reference copy, wrapped by prepare_fsdp (trl/models/utils.py) as the FSDP version
    // the files say: FSDP2 fully_shard on its root only, FSDP1 the plugin's auto-wrap; none said:
    // Accelerate's default fsdp_version 1 (accelerate/utils/dataclasses.py).
    if (!reference_copy_file.empty() && p.reference != InStepReference::kNone &&
        p.reference != InStepReference::kAdaptersOff) {
      p.reference = fsdp_version == 2 ? InStepReference::kFsdp2Root : InStepReference::kFsdp1Blocks;
      if (warnings) {
        warnings->push_back(reference_copy_file + ": DPO's reference is a frozen copy of the model, " +
                            (fsdp_version == 2 ? std::string("which TRL shards with FSDP2 on its root only: its forward gathers the whole model at once")
                             : std::string("wrapped by FSDP1 a block per unit (") +
                                   (fsdp_version == 1 ? "fsdp_version 1" : "no fsdp_version given: Accelerate's default 1") +
                                   "; its root stays gathered after its forward)"));
      }
    }
    for (const auto& o : f.set_overrides) {
      if (std::find(applied.begin(), applied.end(), o) == applied.end()) {
        throw InputError("--set " + o + ": expected its first key in one of the --from configs, "
                         "got it in none of " + PlanSource(f));
      }
    }
    bool seq_flag = f.app && f.app->count("--seq-len") > 0;
    if (seq_from.empty() && !seq_flag) {
      throw InputError(PlanSource(f) +
                       ": expected a sequence length, got none (the config carries none, e.g. an "
                       "Accelerate config); give --seq-len N");
    }
  }
  const int64_t row_before_flags = p.seq_len;
  for (const FlagSpec& s : Flags()) {
    if (s.apply && f.app && f.app->count(s.name) > 0) s.apply(f, s, &p);
  }
  ApplyPacking(f, row_before_flags, &p);
  if (f.app && f.app->count("--seq-len") > 0) seq_from = "--seq-len";
  if (seq_len_from) *seq_len_from = seq_from;
  return p;
}

JobModel ResolveJobModel(const std::string& model_flag, const PlanFlags& f,
                         const configs::ImportContext& base, std::vector<std::string>* warnings) {
  JobModel m;
  m.arg = model_flag;
  const bool given = f.app && f.app->count("--model") > 0;
  if (!given && !f.from_files.empty()) {
    // A first reading of the configs, for the model they name only: the plan it fills is
    // dropped and BuildPlan reads them again against the model (its block class, tied
    // embeddings).
    FromReading reading = ReadingOf(f, base);
    reading.ctx.layer_class.clear();
    reading.ctx.model_parameters = 1;  // NO_WRAP is checked against the model on the second reading
    std::string where;
    for (const auto& file : f.from_files) {
      model::Plan scratch;
      configs::ImportResult r = reading.Read(file, &scratch);
      if (!r.model_named.empty()) {
        m.arg = r.model_named;
        where = r.model_named_where;
      }
    }
    if (!where.empty()) {
      m.from = "named by " + where + " \"" + m.arg + "\"";
      m.spec = model::ResolveModelArg(m.arg, warnings, where);
      return m;
    }
  }
  m.spec = model::ResolveModelArg(m.arg, warnings);
  return m;
}

std::string ApplyDefaultSeqLen(int64_t max_seq_len, const std::string& seq_len_from,
                               model::Plan* plan) {
  const std::string from = seq_len_from.empty() ? std::string("the plan") : seq_len_from;
  if (plan->seq_len > 0 && plan->packed_seq_len > 0) {
    return "packed rows of up to " + std::to_string(plan->micro_batch * plan->seq_len) +
           " tokens holding sequences of up to " + std::to_string(plan->packed_seq_len) +
           " tokens (" + from + ")";
  }
  if (plan->seq_len > 0) return std::to_string(plan->seq_len) + " tokens per sequence (" + from + ")";
  if (max_seq_len <= kDefaultSeqLenTokens) {
    plan->seq_len = max_seq_len;
    return std::to_string(max_seq_len) +
           " tokens per sequence (the model's maximum, as no --seq-len was given)";
  }
  plan->seq_len = kDefaultSeqLenTokens;
  return std::to_string(kDefaultSeqLenTokens) +
         " tokens per sequence (no --seq-len given: the model's " + std::to_string(max_seq_len) +
         "-token maximum capped at " + std::to_string(kDefaultSeqLenTokens) +
         ", torchtitan's llama3 recipes' length; give --seq-len for yours)";
}

}  // namespace shardtune::cli
