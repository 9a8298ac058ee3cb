// tune --measure: child `shardtune run` processes, calibration, re-ranking.
#include "cli/tune_measure.h"

#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <ostream>

#include "cli/calibrate_cmd.h"
#include "cli/format.h"
#include "cli/measured_runs.h"
#include "cli/exec_forward.h"
#include "executor/errors.h"
#include "model/errors.h"
#include "model/plan_json.h"
#include "simulator/calibration.h"
#include "simulator/trace_json.h"

extern char** environ;

namespace shardtune::cli {
namespace {

// Runs `argv` with stdout and stderr to `log`; returns the exit status (or 128 + signal).
int RunChild(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw exec::BackendError("tune --measure: cannot start " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw exec::BackendError("tune --measure: waitpid failed");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string MakeDir(const std::string& given) {
  if (!given.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(given, ec);
    if (ec) throw InputError("--measure-dir: cannot create \"" + given + "\": " + ec.message());
    return given;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "shardtune-measure.XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw exec::BackendError("tune --measure: cannot create a folder under /tmp");
  return tmpl;
}

}  // namespace

std::vector<std::string> MeasureRunArgv(const std::string& program, const MeasureOptions& o,
                                        const profiles::ClusterSpec& cluster, const std::string& plan_file,
                                        const std::string& out_dir) {
  std::vector<std::string> argv = {program, "run", "--model", o.model_arg, "--plan", plan_file,
                                   "--steps", std::to_string(o.steps), "--out", out_dir};
  if (cluster.cpu_only) {
    argv.insert(argv.end(), {"--nproc", std::to_string(cluster.world_size())});
  } else {
    argv.insert(argv.end(), {"--device", "cuda"});
    if (cluster.world_size() > 1) argv.insert(argv.end(), {"--emulate-world", std::to_string(cluster.world_size())});
  }
  return argv;
}

MeasureResult MeasureTopPlans(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                              const planner::SearchRequest& req, const planner::SearchResult& result,
                              const MeasureOptions& o) {
  std::vector<std::string> problems;
  if (!cluster.cpu_only && !std::filesystem::exists("/dev/nvidia0") &&
      !std::filesystem::exists("/dev/nvidiactl")) {
    problems.push_back("--measure: " + cluster.name + " plans train on this machine's GPU, and it has none "
                       "(no /dev/nvidia0); measure on a GPU machine, or search --cluster cpu:N here");
  }
  if (o.plans < 1) problems.push_back("--measure: expected a number of plans >= 1, got " + std::to_string(o.plans));
  if (o.steps < 2) {
    problems.push_back("--measure-steps: expected >= 2 (the first step is left out), got " + std::to_string(o.steps));
  }
  ThrowIfProblems(problems);
  MeasureResult r;
  r.dir = MakeDir(o.dir);
  if (!cluster.cpu_only && cluster.world_size() > 1) {
    r.warnings.push_back("--measure on " + cluster.name + ": each plan trains on this machine's GPU as rank 0 of " +
                         std::to_string(cluster.world_size()) +
                         " ranks with emulated collectives; the fit covers compute and memory, "
                         "communication keeps the topology model");
  }
  const std::string self = ExecutorProgram();
  size_t n = std::min(result.top.size(), static_cast<size_t>(o.plans));
  std::vector<std::string> files;
  for (size_t i = 0; i < n; ++i) {
    const planner::Candidate& c = result.top[i];
    std::string base = (std::filesystem::path(r.dir) / ("plan" + std::to_string(i + 1))).string();
    model::Plan p = c.plan;
    p.seq_len = req.seq_len;
    sim::WriteFileAtomically(base + ".json", model::PlanToJson(p).dump(2) + "\n");
    int rc = RunChild(MeasureRunArgv(self, o, cluster, base + ".json", base), base + ".log");
    if (rc != 0) {
      throw exec::BackendError("tune --measure: run of plan " + std::to_string(i + 1) + " (" + c.key +
                               ") exited with " + std::to_string(rc) + "; see " + base + ".log");
    }
    files.push_back(base + "/measurements.json");
  }
  std::vector<MeasuredRun> runs = LoadMeasuredRuns(files, o.model_arg, cluster.name);
  sim::CalibrationResult cal = CalibrateRuns(runs);
  r.warnings = cal.warnings;
  r.profile_path = (std::filesystem::path(r.dir) / "profile.json").string();
  sim::WriteFileAtomically(r.profile_path, sim::ProfileToJson(cal.profile).dump(2) + "\n");
  sim::SimOptions calibrated = req.options;
  calibrated.memory.constants = cal.profile.memory;
  calibrated.costs = cal.profile.costs;
  std::vector<sim::CalibrationRun> again = PredictRuns(runs, calibrated);
  for (size_t i = 0; i < n; ++i) {
    const model::Measurements& m = runs[i].measurements;
    MeasuredPlan mp;
    mp.key = result.top[i].key;
    mp.measurements = files[i];
    mp.predicted_tokens_per_s = result.top[i].tokens_per_s;
    mp.calibrated_tokens_per_s = again[i].prediction.report.tokens_per_s;
    // Whole-job tokens per step over the measured steady step time (executor summary).
    mp.measured_tokens_per_s = static_cast<double>(m.tokens_per_step) / m.mean_step_time_s;
    mp.predicted_peak_bytes = static_cast<double>(again[i].prediction.report.memory.peak_allocated.count());
    mp.measured_peak_bytes = static_cast<double>(m.peak_tracked_bytes);
    r.plans.push_back(mp);
  }
  std::stable_sort(r.plans.begin(), r.plans.end(), [](const MeasuredPlan& a, const MeasuredPlan& b) {
    return a.measured_tokens_per_s > b.measured_tokens_per_s;
  });
  planner::SearchRequest again_req = req;
  again_req.options = calibrated;
  r.recalibrated_top = planner::SearchPlans(spec, cluster, again_req).top;
  return r;
}

nlohmann::ordered_json MeasureResultJson(const MeasureResult& r) {
  nlohmann::ordered_json plans = nlohmann::ordered_json::array();
  for (const auto& p : r.plans) {
    plans.push_back({{"key", p.key}, {"measurements", p.measurements},
                     {"predicted_tokens_per_s", p.predicted_tokens_per_s},
                     {"calibrated_tokens_per_s", p.calibrated_tokens_per_s},
                     {"measured_tokens_per_s", p.measured_tokens_per_s},
                     {"predicted_peak_bytes", p.predicted_peak_bytes},
                     {"measured_peak_bytes", p.measured_peak_bytes}});
  }
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (const auto& c : r.recalibrated_top) {
    top.push_back({{"key", c.key}, {"tokens_per_s", c.tokens_per_s}, {"step_time_s", c.step_time_s}});
  }
  return {{"dir", r.dir}, {"profile", r.profile_path}, {"measured_winner", r.plans.empty() ? "" : r.plans[0].key},
          {"plans", plans}, {"calibrated_top", top}, {"warnings", r.warnings}};
}

void PrintMeasureResult(const MeasureResult& r, std::ostream& out) {
  out << "\nMeasured (" << r.plans.size() << " plans run in " << r.dir << ", calibrated profile "
      << r.profile_path << ")\n";
  out << "  " << std::left << std::setw(4) << "#" << std::right << std::setw(12) << "predicted" << std::setw(12)
      << "calibrated" << std::setw(12) << "measured" << std::setw(12) << "peak pred" << std::setw(12)
      << "peak meas" << "  plan (tokens/s)\n";
  for (size_t i = 0; i < r.plans.size(); ++i) {
    const auto& p = r.plans[i];
    out << "  " << std::left << std::setw(4) << i + 1 << std::right << std::fixed << std::setprecision(0)
        << std::setw(12) << p.predicted_tokens_per_s << std::setw(12) << p.calibrated_tokens_per_s << std::setw(12)
        << p.measured_tokens_per_s << std::setw(12)
        << FormatBytes(Bytes::Of(static_cast<int64_t>(p.predicted_peak_bytes))) << std::setw(12)
        << FormatBytes(Bytes::Of(static_cast<int64_t>(p.measured_peak_bytes))) << "  " << p.key << "\n";
  }
  if (!r.plans.empty()) {
    const auto& w = r.plans.front();
    out << "Measured winner: " << w.key << " at " << std::setprecision(0) << w.measured_tokens_per_s
        << " tokens/s (predicted " << w.predicted_tokens_per_s << ", calibrated " << w.calibrated_tokens_per_s << ")\n";
  }
  if (!r.recalibrated_top.empty()) {
    out << "Search again with the calibrated profile: #1 " << r.recalibrated_top.front().key << " at "
        << std::setprecision(0) << r.recalibrated_top.front().tokens_per_s << " tokens/s\n";
  }
}

}  // namespace shardtune::cli
