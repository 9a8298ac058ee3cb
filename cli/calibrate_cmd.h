// `shardtune calibrate MEASUREMENTS.json... --out PROFILE.json`: least-squares fits of the cost
// model's constants to measured runs, written as a versioned calibrated profile that estimate,
// simulate, tune and validate accept with --profile.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/measured_runs.h"
#include "cli/plan_flags.h"
#include "simulator/profile_json.h"

namespace shardtune::cli {

struct CalibrateArgs {
  std::vector<std::string> measurements;  // positional
  std::string out;                        // --out PROFILE.json
  std::string model;                      // --model; empty: each file's model
  std::string cluster;                    // --cluster; empty: cpu:N for CPU runs
  bool json = false;
  // --trace: a PyTorch profiler trace of one rank of a run of --model on --cluster with the plan
  // flags (and --profile as the constants it starts from) instead of measurements.json files.
  std::string trace;
  std::string profile;
  PlanFlags plan;
};

void AddCalibrateCommand(CLI::App* app, CalibrateArgs* args);
void RunCalibrate(const CalibrateArgs& args, std::ostream& out, std::ostream& err);

// The fit on already loaded runs (also `tune --measure`): predictions with the default
// constants, then sim::Calibrate.
sim::CalibrationResult CalibrateRuns(const std::vector<MeasuredRun>& runs);
// The fitted constants and each fit's residual, for people.
void PrintCalibration(const sim::CalibrationResult& r, std::ostream& out);

}  // namespace shardtune::cli
