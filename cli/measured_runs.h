// Measured runs as `validate`, `calibrate` and `tune --measure` use them: each measurements file
// with the model spec and cluster it ran on, resolved and checked together.
#pragma once

#include <string>
#include <vector>

#include "model/measurements_json.h"
#include "model/model_spec.h"
#include "profiles/cluster.h"
#include "simulator/calibration.h"

namespace shardtune::cli {

struct MeasuredRun {
  model::Measurements measurements;
  model::ModelSpec spec;
  profiles::ClusterSpec cluster;
};

// Reads every file. The model is `model_arg` when given, else the file's model name (a preset);
// the cluster is `cluster_arg` when given, else "cpu:N" for CPU runs (N = the world, or the
// emulated world). Every problem of every file (unreadable, malformed, incomplete, a GPU run
// without --cluster, a plan the model or cluster rejects) is thrown together as one InputError.
std::vector<MeasuredRun> LoadMeasuredRuns(const std::vector<std::string>& paths, const std::string& model_arg,
                                          const std::string& cluster_arg);

// PredictRun for each run with `options`.
std::vector<sim::CalibrationRun> PredictRuns(const std::vector<MeasuredRun>& runs, const sim::SimOptions& options);

}  // namespace shardtune::cli
