// `shardtune estimate`: per-GPU and per-host memory of a job, with the peak, its moment, the
// breakdown, what the allocator reserves, what lives outside it, and what-if alternatives.
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "cli/job_args.h"

namespace shardtune::cli {

// The job flags plus co-located roles: each --role-plan FILE (a shardtune.plan, usually with
// "role") is another role of the same RL job on the same GPUs as the plan from the flags.
struct EstimateArgs : JobArgs {
  std::vector<std::string> role_plans;
  bool offload_between_roles = false;  // verl param/optimizer offload, ROLL offload between phases
  bool roles_in_one_process = false;   // verl's fused worker; default: a process per role (ROLL)
  std::string plot;  // --plot FILE.svg|FILE.html: memory over the steps and the job phases
  std::string memory_snapshot;  // --memory-snapshot FILE.pickle: torch's _snapshot() format
  // --reward-model: the model of verl's FSDP reward model (ImportedRole::model_named) when its
  // path does not resolve here; empty: that path.
  std::string reward_model;
  std::string lengths;  // --lengths mean:N: the data's mean sequence length (packed micro-batches)
};

void AddEstimateCommand(CLI::App* app, EstimateArgs* args);
// Runs the estimate, writing the table (or one JSON document) to `out`. Throws InputError.
void RunEstimate(const EstimateArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
