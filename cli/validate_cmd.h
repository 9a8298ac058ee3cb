// `shardtune validate`: predicted vs measured, side by side, for step time, each phase, each
// compute span, each collective and peak memory, with each error and a summary (median and worst
// absolute percentage error).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace shardtune::cli {

struct ValidateArgs {
  std::vector<std::string> measurements;  // --measurements M.json...
  std::string profile;                    // --profile P; empty: the named defaults
  std::string model;                      // --model; empty: each file's model
  std::string cluster;                    // --cluster; empty: cpu:N for CPU runs
  bool json = false;
  // --plot FILE.svg|FILE.html: the predicted memory with the measured peaks over it, one file per
  // run (the second run's is FILE-2.svg, ...).
  std::string plot;
};

void AddValidateCommand(CLI::App* app, ValidateArgs* args);
void RunValidate(const ValidateArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
