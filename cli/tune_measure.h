// `shardtune tune --measure N`: train the search's top N plans for a few steps with the executor
// (this binary's `run` subcommand, one child process per plan), calibrate on what was measured,
// re-rank, and report the measured winner with its predicted and measured figures.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_spec.h"
#include "planner/search.h"
#include "profiles/cluster.h"

namespace shardtune::cli {

struct MeasureOptions {
  int plans = 0;       // N: how many of the top plans to run
  int steps = 4;       // optimizer steps per run (the first is left out of the figures)
  std::string dir;     // where runs, logs and the fitted profile go; empty: a new /tmp folder
  std::string model_arg;  // --model as given (the child runs resolve it the same way)
};

struct MeasuredPlan {
  std::string key;
  std::string measurements;  // path
  double predicted_tokens_per_s = 0;    // the search's prediction (constants before the fit)
  double calibrated_tokens_per_s = 0;   // re-predicted with the fitted profile
  double measured_tokens_per_s = 0;
  double predicted_peak_bytes = 0, measured_peak_bytes = 0;
};

struct MeasureResult {
  std::string dir, profile_path;
  std::vector<MeasuredPlan> plans;  // ranked by measured throughput, best first
  std::vector<planner::Candidate> recalibrated_top;  // the search again with the fitted profile
  std::vector<std::string> warnings;
};

// The child `run` of one measured plan. On CPU clusters (cpu:N) the plan trains on N Gloo ranks;
// on a GPU cluster it trains on this machine's GPU (--device cuda), one process emulating rank 0
// of the cluster's world when it has more than one rank (--emulate-world W: every allocation and
// kernel of that rank, collectives emulated, which calibration leaves out and the topology model
// keeps predicting).
std::vector<std::string> MeasureRunArgv(const std::string& program, const MeasureOptions& o,
                                        const profiles::ClusterSpec& cluster, const std::string& plan_file,
                                        const std::string& out_dir);

// REQUIRES: result.top non-empty. Throws InputError (bad options) and exec::BackendError (a run
// failed; the message names its log).
MeasureResult MeasureTopPlans(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                              const planner::SearchRequest& request, const planner::SearchResult& result,
                              const MeasureOptions& options);

nlohmann::ordered_json MeasureResultJson(const MeasureResult& r);
void PrintMeasureResult(const MeasureResult& r, std::ostream& out);

}  // namespace shardtune::cli
