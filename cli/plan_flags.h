// The plan flags every planning subcommand shares (README.md, plan flags): one spelling per
// concept. Precedence, lowest first: defaults < --plan < each --from config in command-line order
// < each plan flag given on the command line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/model_spec.h"
#include "model/plan.h"
#include "planner/configs/import.h"

namespace shardtune::cli {

struct PlanFlags {
  std::string plan_file;
  std::vector<std::string> from_files;  // --from, in order (estimate, simulate, tune)
  std::string from_format, from_worker;
  std::string strategy, wrap, checkpointing, offload, activation_offload, reference, precision, reduce_dtype, reshard_after_forward;
  std::string backward_prefetch, optimizer, optimizer_impl, attention, sdpa_backend, modeling, loss_kernel;
  std::string cp_fsdp_mesh, role, lora_targets, lora_dtype, frozen_dtype, master_dtype, liger;
  std::string lora_exclude;
  std::vector<std::string> freeze;
  std::vector<std::string> set_overrides;  // --set KEY=VALUE on the --from configs
  int cp = 1, ep = 1, lora_rank = 0, tiled_mlp = 1;
  double lora_alpha = 16.0;
  double lora_dropout = 0.0;
  bool wrap_experts = false;
  bool wrap_sub_blocks = false;
  int shard_group = 0, micro_batch = 1, grad_accum = 1, max_inflight = 2;
  int64_t seq_len = 0, global_batch = 0;
  int64_t max_tokens_per_micro_batch = 0;  // packed rows (Plan::packed_seq_len)
  int images = 0;             // Plan::images
  int64_t image_tokens = 0;   // Plan::image_tokens
  std::string image_pixels;   // WxH: image_tokens from the model's processor (ResolveJob)
  bool no_sync = false, forward_prefetch = false, keep_logits = false;
  bool wrap_embedding = false, wrap_head = false;
  CLI::App* app = nullptr;  // where the flags were added (to ask which were given)
};

// True when `flag` (e.g. "--strategy") was given on the command line. Every flag is declared once,
// in cli/plan_flags.cc's table (name, help, the field it binds, what it sets in the plan, which
// commands take it); asking about a name the table lacks is an InternalError, never a silent
// false.
bool FlagGiven(const PlanFlags& flags, const std::string& flag);
// The names of the plan flags (not --from, --from-format, --from-worker), in the table's order.
const std::vector<std::string>& PlanFlagNames();
// Adds the plan flags to `app`; `flags` must outlive parsing.
void AddPlanFlags(CLI::App* app, PlanFlags* flags);
// Adds --from FILE (repeatable), --from-format and --from-worker to `app` (estimate, simulate,
// tune); `flags` must outlive parsing.
void AddFromFlags(CLI::App* app, PlanFlags* flags);
// Puts a command's options under headings (model and cluster, the plan's parts, trainer configs,
// memory model, output) and shows the plan flags' defaults (model::Plan{}'s) in --help. Call after
// every option is added.
void GroupHelp(CLI::App* app);
// The plan: defaults, then --plan, then each --from config (read against `from_ctx`, the model
// and cluster; REQUIRES: non-null when flags.from_files is not empty) with the --set overrides,
// then each flag that was given. Import warnings are appended to `warnings` (may be null).
// `seq_len_from` (may be null) receives what set the sequence length ("--seq-len", a config key,
// the --plan file) or "" when nothing did (plan.seq_len 0: see ApplyDefaultSeqLen). Does not
// validate against the model and cluster (the caller runs Plan::Problems). Throws InputError
// naming the flag or file, among others when --from configs set no sequence length and --seq-len
// is not given (an Accelerate config carries none), and when a --set override reached no file.
// What --from configs say beside the plan: the other roles a file runs on the same GPUs (verl's
// critic and reference policy; plan flags change the imported plan, not these), whether they
// share one process, whether the imported worker's states leave the GPU between phases, and
// whether its model has a value head (--from-worker critic). The last file that says wins.
struct FromExtras {
  std::vector<configs::ImportedRole> roles;
  bool roles_in_one_process = false;
  std::optional<bool> offloaded_when_idle;  // set by a file whose worker says
  bool value_head = false;
  int world_size = 0;  // the ranks the last config that names them asks for (0: none says)
  bool rank0_load_unless_tied = false;  // ImportResult's, from any file
  int64_t sequences_per_step = 0;       // ImportResult's, the last file that says
  int64_t prompt_length = 0, response_length = 0;  // ImportResult's verl split, likewise
  int rollout_n = 0;
  configs::VerlTrainer verl_trainer = configs::VerlTrainer::kNone;  // ImportResult's, the last file that says
  std::vector<configs::RolloutEngine> engines;  // ImportResult's, the last file that names any
};

model::Plan BuildPlan(const PlanFlags& flags, const configs::ImportContext* from_ctx = nullptr,
                      std::vector<std::string>* warnings = nullptr,
                      std::string* seq_len_from = nullptr, FromExtras* extras = nullptr);

// The model a job runs: --model when given on the command line (`model_flag`); else the model the
// last --from config that names one loads (verl's actor_rollout_ref.model.path, ROLL's pretrain:
// ImportResult::model_named), resolved by model::ResolveModelArg (a preset's Hugging Face id, a
// model directory with config.json); else `model_flag`, the command's default. `ctx` is the
// world the configs are read against (as BuildPlan's; its model fields are not needed). Throws
// InputError naming the config key when the named model is neither a preset nor a readable
// config.json.
struct JobModel {
  model::ModelSpec spec;
  std::string arg;  // what resolved to it, as --model takes it (tune --measure's child runs)
  // 'named by cfg.yaml:/actor_rollout_ref/model/path "Qwen/Qwen3-8B"' when a config named the
  // model, else "".
  std::string from;
};
JobModel ResolveJobModel(const std::string& model_flag, const PlanFlags& flags,
                         const configs::ImportContext& ctx, std::vector<std::string>* warnings);

// The sequence length a job gets when neither a flag, a --plan file nor a config set one: the
// model's max_seq_len (max_position_embeddings) capped at 8,192 tokens, the training.seq_len of
// torchtitan's llama3 8B/70B/405B recipes (torchtitan/models/llama3/train_configs/*.toml), the
// FSDP2 reference jobs shardtune is measured against. The model's maximum alone would be a length
// hardly anyone trains at: 131,072 for Llama 3.1, 163,840 for DeepSeek-V3.
inline constexpr int64_t kDefaultSeqLenTokens = 8192;
// Sets plan->seq_len when it is 0 (unset) and returns the sentence saying which length was used
// and why; returns `seq_len_from` described when the length was set.
std::string ApplyDefaultSeqLen(int64_t max_seq_len, const std::string& seq_len_from,
                               model::Plan* plan);
// Where plan problems come from, for messages: the --from files, else --plan, else "plan".
std::string PlanSource(const PlanFlags& flags);

}  // namespace shardtune::cli
