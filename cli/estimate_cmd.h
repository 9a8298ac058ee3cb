// `shardtune estimate`: per-GPU and per-host memory of a job, with the peak, its moment, the
// breakdown, what the allocator reserves, what lives outside it, and what-if alternatives.
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/job_args.h"

namespace shardtune::cli {

using EstimateArgs = JobArgs;

void AddEstimateCommand(CLI::App* app, EstimateArgs* args);
// Runs the estimate, writing the table (or one JSON document) to `out`. Throws InputError.
void RunEstimate(const EstimateArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
