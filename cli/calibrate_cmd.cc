// `shardtune calibrate`: load, fit, write the profile, report.
#include "cli/calibrate_cmd.h"

#include <iomanip>

#include "cli/exec_forward.h"
#include "cli/format.h"
#include "cli/job_args.h"
#include "model/errors.h"
#include "simulator/calibration.h"
#include "simulator/kernel_time.h"
#include "simulator/simulate.h"
#include "simulator/torch_trace.h"
#include "simulator/trace_json.h"

namespace shardtune::cli {

void AddCalibrateCommand(CLI::App* app, CalibrateArgs* a) {
  CLI::App* sub = app->add_subcommand("calibrate", "Fit the cost model to measured runs; write a profile");
  sub->add_option("measurements", a->measurements, "measurements.json files written by shardtune run")
      ->check(CLI::ExistingFile);
  sub->add_option("--out", a->out, "The calibrated profile to write (shardtune.profile)")->required();
  sub->add_option("--model", a->model, "Model of every run (default: the preset named in each file)");
  sub->add_option("--cluster", a->cluster, "Cluster of every run (default: cpu:N for CPU runs)");
  sub->add_flag("--json", a->json, "Print the profile as one JSON document and nothing else");
  sub->add_option("--trace", a->trace,
                  "A PyTorch profiler Chrome trace (prof.export_chrome_trace) of one rank of a run "
                  "of --model on --cluster with the plan flags: fit compute efficiencies and host "
                  "costs to it instead of measurements.json files")
      ->check(CLI::ExistingFile);
  sub->add_option("--profile", a->profile, "With --trace: the profile whose constants the fit starts from");
  AddPlanFlags(sub, &a->plan);
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

namespace {

// Writes profile `p` to --out and says so on `err`. With --json it prints the document, the only
// output, and returns false; else true: the report follows.
bool WriteProfile(const CalibrateArgs& a, const sim::Profile& p, std::ostream& out,
                  std::ostream& err) {
  std::string doc = sim::ProfileToJson(p).dump(2) + "\n";
  sim::WriteFileAtomically(a.out, doc);
  WriteLine(err, "wrote ", a.out);
  if (a.json) out << doc;
  return !a.json;
}

// `calibrate --trace`: simulate the traced plan with the base constants, fit, simulate again.
void RunTraceCalibration(const CalibrateArgs& a, std::ostream& out, std::ostream& err) {
  if (!a.measurements.empty()) {
    throw InputError("calibrate: give measurements.json files or --trace, not both");
  }
  if (a.model.empty() || a.cluster.empty()) {
    throw InputError(std::string("calibrate --trace: ") + (a.model.empty() ? "--model" : "--cluster") +
                     " is required (the traced run's " + (a.model.empty() ? "model" : "cluster") + ")");
  }
  JobArgs ja;
  ja.model = a.model;
  ja.cluster = a.cluster;
  ja.profile = a.profile;
  ja.plan = a.plan;
  Job job = ResolveJob(ja);
  sim::TorchTrace trace = sim::ReadTorchTrace(a.trace);
  sim::SimReport base = sim::SimulateStep(job.spec, job.cluster, job.plan, job.options);
  // The fit starts from the constants the traced plan runs on: measured kernel tables (the
  // catalog's for the GPU, or --profile's) resolved at the plan's shapes. The fitted profile keeps
  // no tables: they would replace the fitted efficiencies again in every later simulation.
  sim::CostConstants resolved;
  const sim::CostConstants& start = sim::PlanConstants(job.options.costs, job.spec, job.plan, job.cluster.gpu, &resolved);
  const bool fused = job.plan.optimizer_impl == model::OptimizerImpl::kFused;
  const bool one_rank = job.cluster.world_size() == 1;
  sim::TraceCalibration cal = sim::CalibrateFromTrace(trace, sim::SteadyStepWork(base.program, fused, one_rank),
                                                      job.cluster.gpu, job.plan.param_dtype, start);
  cal.costs.tables.reset();
  sim::SimOptions fitted_options = job.options;
  fitted_options.costs = cal.costs;
  sim::SimReport fitted = sim::SimulateStep(job.spec, job.cluster, job.plan, fitted_options);

  sim::Profile p;
  if (!a.profile.empty()) p = sim::ReadProfileFile(a.profile);
  p.memory = job.options.memory.constants;
  p.costs = cal.costs;
  p.fits.clear();
  p.name = "fitted to a PyTorch profiler trace of " + job.spec.name + " on " + job.cluster.name +
           (trace.device.empty() ? "" : " (" + trace.device + ")");
  p.has_provenance = true;
  p.provenance = sim::ProfileProvenance{};
  p.provenance.device = trace.device;
  p.provenance.date = trace.date;
  p.provenance.command = OwnCommandLine();
  p.provenance.measurements = {a.trace};
  for (const auto& r : cal.rows) {
    sim::FitSummary f;
    f.term = "trace " + r.term;
    f.rows = trace.steps_used;
    f.note = r.fitted_from_trace
                 ? "one unknown per term, fitted exactly to the median step: measured " + std::to_string(r.measured) +
                       " s per step, " + std::to_string(r.predicted) + " s with the base constants"
                 : "kept from the base constants";
    p.fits.push_back(f);
  }
  if (!WriteProfile(a, p, out, err)) return;
  for (const auto& w : job.warnings) WriteLine(err, "warning: ", w);
  for (const auto& w : cal.warnings) WriteLine(err, "warning: ", w);
  const sim::TraceStep& m = trace.typical;
  out << "shardtune calibrate: " << a.trace << " (" << trace.steps.size() << " profiled steps, median of "
      << trace.steps_used << ") -> " << a.out << "\n" << p.name << "\n\n";
  out << std::fixed << std::setprecision(4);
  out << "Per step, measured in the trace\n"
      << "  wall                     " << m.wall_s << " s (blocked in synchronising calls " << m.sync_s << " s)\n"
      << "  GEMM kernels             " << m.gemm_s << " s\n"
      << "  attention kernels        " << m.attention_s << " s\n"
      << "  memory-bound kernels     " << m.memory_bound_s << " s (copies and memsets included)\n"
      << "  NCCL kernels             " << m.communication_s << " s\n"
      << "  host<->device copies     " << m.host_copy_s << " s\n"
      << "  launches                 " << m.launches << " (" << m.device_activities << " device activities)\n"
      << "  FSDP2 hooks              " << m.fsdp_hooks << " taking " << m.fsdp_hook_s << " s\n";
  out << "Fitted constants (measured vs predicted with the base constants, per step)\n";
  for (const auto& r : cal.rows) {
    out << "  " << std::left << std::setw(24) << r.term << std::right << std::setprecision(6) << r.base << " -> "
        << r.fitted << (r.fitted_from_trace ? "" : " (kept)") << std::setprecision(4) << "   measured " << r.measured
        << " s, predicted " << r.predicted << " s\n";
  }
  auto predicted = [&](const char* label, double step_s) {
    out << "  predicted, " << std::left << std::setw(14) << label << std::right << std::setprecision(4) << step_s
        << " s (" << std::showpos << std::setprecision(1) << 100 * (step_s - m.wall_s) / m.wall_s << " %)"
        << std::noshowpos << "\n";
  };
  out << "Step time of the traced plan\n"
      << "  measured (median wall)   " << m.wall_s << " s\n";
  predicted("base", base.step_time.count());
  predicted("fitted", fitted.step_time.count());
  out << std::defaultfloat;
}

}  // namespace

void RunCalibrate(const CalibrateArgs& a, std::ostream& out, std::ostream& err) {
  if (!a.trace.empty()) {
    RunTraceCalibration(a, out, err);
    return;
  }
  for (const std::string& flag : PlanFlagNames()) {
    if (FlagGiven(a.plan, flag)) {
      throw InputError("calibrate: " + flag + " describes the run of --trace; measurements.json files carry "
                       "their own plan");
    }
  }
  if (!a.profile.empty()) throw InputError("calibrate: --profile is the starting point of a --trace fit");
  if (a.measurements.empty()) {
    throw InputError("calibrate: expected measurements.json files (shardtune run) or --trace TRACE.json");
  }
  std::vector<MeasuredRun> runs = LoadMeasuredRuns(a.measurements, a.model, a.cluster);
  sim::CalibrationResult r = CalibrateRuns(runs);
  if (!WriteProfile(a, r.profile, out, err)) return;
  for (const auto& w : r.warnings) WriteLine(err, "warning: ", w);
  out << "shardtune calibrate: " << runs.size() << " run(s) -> " << a.out << "\n" << r.profile.name << "\n\n";
  PrintCalibration(r, out);
}

}  // namespace shardtune::cli
