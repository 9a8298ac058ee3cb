// `shardtune calibrate`: load, fit, write the profile, report.
#include "cli/calibrate_cmd.h"

#include <iomanip>

#include "cli/format.h"
#include "simulator/calibration.h"
#include "simulator/trace_json.h"

namespace shardtune::cli {

void AddCalibrateCommand(CLI::App* app, CalibrateArgs* a) {
  CLI::App* sub = app->add_subcommand("calibrate", "Fit the cost model to measured runs; write a profile");
  sub->add_option("measurements", a->measurements, "measurements.json files written by shardtune run")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--out", a->out, "The calibrated profile to write (shardtune.profile)")->required();
  sub->add_option("--model", a->model, "Model of every run (default: the preset named in each file)");
  sub->add_option("--cluster", a->cluster, "Cluster of every run (default: cpu:N for CPU runs)");
  sub->add_flag("--json", a->json, "Print the profile as one JSON document and nothing else");
}

sim::CalibrationResult CalibrateRuns(const std::vector<MeasuredRun>& runs) {
  std::vector<sim::CalibrationRun> predicted = PredictRuns(runs, sim::SimOptions{});
  return sim::Calibrate(predicted, sim::Profile{});
}

void PrintCalibration(const sim::CalibrationResult& r, std::ostream& out) {
  const sim::Profile& p = r.profile;
  const sim::CostConstants& c = p.costs;
  out << std::setprecision(4);
  out << "Compute\n"
      << "  matmul efficiency        " << c.matmul_efficiency << "\n"
      << "  attention efficiency     " << c.attention_efficiency << "\n"
      << "  memory-bound efficiency  " << c.memory_efficiency << "\n"
      << "  overhead per op          " << c.compute_op_overhead.count() * 1e6 << " us\n";
  out << "Collectives (latency + S x busbw factor / busbw)\n";
  const char* kinds[] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast", "all_to_all"};
  for (const auto& k : c.collectives) {
    out << "  " << k.link_family << " x" << k.group_size << ": busbw " << k.bus_bandwidth.count() / 1e9 << " GB/s";
    for (size_t i = 0; i < 5; ++i) {
      if (k.latency[i]) out << ", " << kinds[i] << " latency " << k.latency[i]->count() * 1e6 << " us";
    }
    out << "\n";
  }
  out << "Memory\n"
      << "  outside the allocator    " << FormatBytes(p.memory.cuda_context) << " per rank + "
      << FormatBytes(p.memory.nccl_per_communicator) << " per communicator\n"
      << "  fragmentation            " << 100 * p.memory.fragmentation_fraction << " % of the peak\n";
  out << "Residuals (relative, fit - measured)\n";
  for (const auto& f : p.fits) {
    out << "  " << std::left << std::setw(44) << f.term << std::right << " rms " << std::setw(7)
        << std::fixed << std::setprecision(1) << 100 * f.rms_relative_residual << " %, max " << std::setw(7)
        << 100 * f.max_relative_residual << " % over " << f.rows << " rows\n"
        << std::defaultfloat << std::setprecision(4);
  }
}

void RunCalibrate(const CalibrateArgs& a, std::ostream& out, std::ostream& err) {
  std::vector<MeasuredRun> runs = LoadMeasuredRuns(a.measurements, a.model, a.cluster);
  sim::CalibrationResult r = CalibrateRuns(runs);
  std::string doc = sim::ProfileToJson(r.profile).dump(2) + "\n";
  sim::WriteFileAtomically(a.out, doc);
  if (a.json) {
    out << doc;
    return;
  }
  for (const auto& w : r.warnings) err << "warning: " << w << "\n";
  out << "shardtune calibrate: " << runs.size() << " run(s) -> " << a.out << "\n" << r.profile.name << "\n\n";
  PrintCalibration(r, out);
}

}  // namespace shardtune::cli
