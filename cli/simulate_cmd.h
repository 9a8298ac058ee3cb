// `shardtune simulate`: one training step in time (step time, throughput, MFU, exposed
// communication, phases) plus everything `estimate` reports, and a Chrome trace.
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/job_args.h"

namespace shardtune::cli {

struct SimulateArgs {
  JobArgs job;
  std::string trace;  // --trace OUT.json; empty: none
};

void AddSimulateCommand(CLI::App* app, SimulateArgs* args);
void RunSimulate(const SimulateArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
