// The plan flags every planning subcommand shares (README.md, plan flags): one spelling per
// concept. Precedence, lowest first: defaults < --plan < each --from config in command-line order
// < each plan flag given on the command line.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/plan.h"
#include "planner/configs/import.h"

namespace shardtune::cli {

struct PlanFlags {
  std::string plan_file;
  std::vector<std::string> from_files;  // --from, in order (estimate, simulate, tune)
  std::string from_format, from_worker;
  std::string strategy, wrap, checkpointing, offload, precision, reduce_dtype, reshard_after_forward;
  std::string backward_prefetch, optimizer, optimizer_impl, attention, sdpa_backend, modeling, loss_kernel;
  std::string cp_fsdp_mesh, role, lora_targets, lora_dtype, frozen_dtype, master_dtype;
  std::vector<std::string> freeze;
  int cp = 1, ep = 1, lora_rank = 0, tiled_mlp = 1;
  double lora_alpha = 16.0;
  double lora_dropout = 0.0;
  bool wrap_experts = false;
  int shard_group = 0, micro_batch = 1, grad_accum = 1, max_inflight = 2;
  int64_t seq_len = 0, global_batch = 0;
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
// The plan: defaults, then --plan, then each --from config (read against `from_ctx`, the model
// and cluster; REQUIRES: non-null when flags.from_files is not empty), then each flag that was
// given. Import warnings are appended to `warnings` (may be null). Does not validate against the
// model and cluster (the caller runs Plan::Problems). Throws InputError naming the flag or file.
model::Plan BuildPlan(const PlanFlags& flags, const configs::ImportContext* from_ctx = nullptr,
                      std::vector<std::string>* warnings = nullptr);
// Where plan problems come from, for messages: the --from files, else --plan, else "plan".
std::string PlanSource(const PlanFlags& flags);

}  // namespace shardtune::cli
