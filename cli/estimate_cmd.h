// `shardtune estimate`: per-GPU and per-host memory of a job, with the peak, its moment, the
// breakdown, what the allocator reserves, what lives outside it, and what-if alternatives.
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/plan_flags.h"

namespace shardtune::cli {

struct EstimateArgs {
  std::string model = "llama3-8b";
  std::string cluster = "8xH100";
  std::string model_load = "every-rank";
  std::string profile;  // calibrated profile JSON; empty: the named defaults
  bool json = false;
  bool timeline = false;
  PlanFlags plan;
};

void AddEstimateCommand(CLI::App* app, EstimateArgs* args);
// Runs the estimate, writing the table (or one JSON document) to `out`. Throws InputError.
void RunEstimate(const EstimateArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
