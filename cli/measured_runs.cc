// Loading measured runs: files, models and clusters, all problems together.
#include "cli/measured_runs.h"

#include "cli/job_args.h"
#include "model/errors.h"
#include "model/presets.h"

namespace shardtune::cli {

std::vector<MeasuredRun> LoadMeasuredRuns(const std::vector<std::string>& paths, const std::string& model_arg,
                                          const std::string& cluster_arg) {
  std::vector<std::string> problems;
  std::vector<MeasuredRun> runs;
  if (paths.empty()) problems.push_back("measurements: expected at least one measurements.json file, got none");
  for (const std::string& path : paths) {
    try {
      MeasuredRun r;
      r.measurements = model::ReadMeasurementsFile(path);
      const model::Measurements& m = r.measurements;
      r.spec = model::ResolveModelArg(model_arg.empty() ? m.model_name : model_arg, nullptr);
      if (!cluster_arg.empty()) {
        r.cluster = profiles::LoadCluster(cluster_arg);
      } else if (m.environment.device == "cpu") {
        int world = m.environment.emulated_world > 0 ? m.environment.emulated_world : m.environment.world_size;
        r.cluster = profiles::ParseClusterShorthand("cpu:" + std::to_string(world));
      } else {
        throw InputError(path + ":/environment/device: measured on \"" + m.environment.device +
                         "\"; pass --cluster to say which cluster it was (e.g. --cluster 8xH100)");
      }
      int world = m.environment.emulated_world > 0 ? m.environment.emulated_world : m.environment.world_size;
      if (r.cluster.world_size() != world) {
        throw InputError("--cluster " + r.cluster.name + ": expected a world of " + std::to_string(world) +
                         " ranks like " + path + ", got " + std::to_string(r.cluster.world_size()));
      }
      model::Plan plan = m.plan;
      plan.seq_len = m.seq_len;
      ThrowIfProblems(JobProblems(r.spec, r.cluster, plan, path + ":/plan", /*executor_run=*/true));
      // A packed run's rows follow verl's rule, whose largest can exceed the budget: predicted
      // at that row, as estimate judges it (job_args.h RaisePackedRowToLargest).
      if (!RaisePackedRowToLargest(m.global_batch, world, &plan).empty()) {
        r.measurements.seq_len = plan.seq_len;
        r.measurements.plan.seq_len = plan.seq_len;
      }
      runs.push_back(std::move(r));
    } catch (const InputError& e) {
      problems.push_back(e.what());
    }
  }
  ThrowIfProblems(problems);
  return runs;
}

std::vector<sim::CalibrationRun> PredictRuns(const std::vector<MeasuredRun>& runs, const sim::SimOptions& options) {
  std::vector<sim::CalibrationRun> out;
  for (const MeasuredRun& r : runs) {
    out.push_back({&r.measurements, sim::PredictRun(r.measurements, r.spec, r.cluster, options)});
  }
  return out;
}

}  // namespace shardtune::cli
