// `shardtune validate`: re-simulate each measured run and print both side by side.
#include "cli/validate_cmd.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "cli/measured_runs.h"
#include "simulator/calibration.h"
#include "simulator/memory_plot.h"
#include "simulator/profile_json.h"

namespace shardtune::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string Figure(double v, bool bytes) {
  if (bytes) return FormatBytes(Bytes::Of(static_cast<int64_t>(std::llround(v))));
  std::ostringstream s;
  s << std::fixed << std::setprecision(v < 0.01 ? 6 : 4) << v << " s";
  return s.str();
}

std::string Pct(double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << std::showpos << 100 * x << " %";
  return s.str();
}

Json SummaryJson(const sim::ErrorSummary& s) {
  return {{"rows", s.rows}, {"median_abs_error", s.median_abs_error},
          {"worst_abs_error", s.worst_abs_error}, {"worst", s.worst}};
}

void PrintSummaryLine(const std::string& label, const sim::ErrorSummary& s, std::ostream& out) {
  if (s.rows == 0) return;
  out << "  " << std::left << std::setw(12) << label << std::right << std::fixed << std::setprecision(1)
      << " median |error| " << std::setw(6) << 100 * s.median_abs_error << " %, worst " << std::setw(6)
      << 100 * s.worst_abs_error << " % (" << s.worst << "), " << s.rows << " rows\n";
}

}  // namespace

void AddValidateCommand(CLI::App* app, ValidateArgs* a) {
  CLI::App* sub = app->add_subcommand("validate", "Compare predictions with measured runs (measurements.json)");
  sub->add_option("--measurements", a->measurements, "measurements.json files written by shardtune run")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--profile", a->profile, "Calibrated profile JSON (shardtune.profile)")->check(CLI::ExistingFile);
  sub->add_option("--model", a->model, "Model of every run (default: the preset named in each file)");
  sub->add_option("--cluster", a->cluster, "Cluster of every run (default: cpu:N for CPU runs)");
  sub->add_flag("--json", a->json, "Print one JSON document and nothing else");
  sub->add_option("--plot", a->plot,
                  "Draw each run's predicted memory with its measured peaks over it to FILE.svg or "
                  "FILE.html (FILE-2.svg, ... for later runs)");
}

namespace {

// --plot's file for run `i`: FILE for the first, FILE-2.svg (before the extension) after it.
std::string PlotPathOf(const std::string& plot, size_t i) {
  if (i == 0) return plot;
  size_t dot = plot.rfind('.');
  return plot.substr(0, dot) + "-" + std::to_string(i + 1) + plot.substr(dot);
}

}  // namespace

void RunValidate(const ValidateArgs& a, std::ostream& out, std::ostream& err) {
  if (!a.plot.empty()) sim::CheckPlotName(a.plot, "--plot");
  std::vector<MeasuredRun> runs = LoadMeasuredRuns(a.measurements, a.model, a.cluster);
  // Each run is predicted on the constants simulate would use for it: the --profile file, else
  // the catalog's measured profile for its GPU kind (sim::JobProfile), else the defaults.
  sim::Profile profile;
  if (!a.profile.empty()) profile = sim::ReadProfileFile(a.profile);
  std::vector<sim::CostConstants> run_costs;
  std::vector<sim::CalibrationRun> predicted;
  for (const MeasuredRun& r : runs) {
    sim::SimOptions o;
    const sim::Profile& p = a.profile.empty() ? sim::JobProfile("", r.cluster.gpu) : profile;
    o.memory.constants = p.memory;
    o.costs = p.costs;
    run_costs.push_back(o.costs);
    predicted.push_back({&r.measurements, sim::PredictRun(r.measurements, r.spec, r.cluster, o)});
  }
  std::vector<std::string> warnings;
  std::vector<sim::ComparisonRow> all;
  Json jruns = Json::array();
  std::ostringstream text;
  for (size_t i = 0; i < runs.size(); ++i) {
    const model::Measurements& m = runs[i].measurements;
    for (auto& w : sim::ProvenanceWarnings(profile, m)) warnings.push_back(w);
    if (!m.HasSteadyCompute()) {
      warnings.push_back(m.path + ": no steady-state spans (no trace, or one step): compute figures include "
                         "the first step's one-time costs");
    }
    std::vector<sim::ComparisonRow> rows = sim::CompareRun(m, predicted[i].prediction, run_costs[i]);
    if (!a.plot.empty()) {
      const sim::RunPrediction& pr = predicted[i].prediction;
      sim::MeasuredMemory mm;
      mm.peak_tracked = Bytes::Of(m.peak_tracked_bytes);
      for (const auto& ph : m.phases) mm.phase_peaks.push_back({ph.name, Bytes::Of(ph.peak_tracked_bytes)});
      std::string title = "shardtune validate: " + m.path + " (" + runs[i].spec.name + " on " +
                          runs[i].cluster.name + ")";
      sim::WritePlotDocument(
          PlotPathOf(a.plot, i), "--plot",
          sim::MemoryPlotSvg(pr.report.program, pr.report.memory, &pr.phases, title, &mm), title);
      WriteLine(err, "wrote ", PlotPathOf(a.plot, i));
    }
    all.insert(all.end(), rows.begin(), rows.end());
    Json jrows = Json::array();
    text << m.path << ": " << runs[i].spec.name << " on " << runs[i].cluster.name << ", "
         << model::ToString(m.plan.strategy) << ", micro-batch " << m.micro_batch << " x " << m.seq_len
         << ", grad-accum " << m.grad_accum << ", " << m.steps_measured << " steady steps\n";
    text << "  " << std::left << std::setw(11) << "kind" << std::setw(44) << "figure" << std::right
         << std::setw(13) << "predicted" << std::setw(13) << "measured" << std::setw(10) << "error" << "\n";
    for (const auto& r : rows) {
      text << "  " << std::left << std::setw(11) << r.kind << std::setw(44) << r.name << std::right
           << std::setw(13) << Figure(r.predicted, r.bytes) << std::setw(13) << Figure(r.measured, r.bytes)
           << std::setw(10) << Pct(r.RelativeError()) << "\n";
      jrows.push_back({{"kind", r.kind}, {"name", r.name}, {"unit", r.bytes ? "bytes" : "s"},
                       {"predicted", r.predicted}, {"measured", r.measured}, {"error", r.RelativeError()}});
    }
    text << "\n";
    jruns.push_back({{"measurements", m.path}, {"model", runs[i].spec.name}, {"cluster", runs[i].cluster.name},
                     {"rows", jrows}, {"summary", SummaryJson(sim::Summarize(rows))}});
  }
  const char* kinds[] = {"step", "phase", "compute", "collective", "memory"};
  if (a.json) {
    Json j;
    j["schema"] = "shardtune.validate";
    j["schema_version"] = 1;
    j["profile"] = a.profile.empty() ? Json(nullptr) : Json(a.profile);
    j["runs"] = jruns;
    Json s;
    s["all"] = SummaryJson(sim::Summarize(all));
    for (const char* k : kinds) s[k] = SummaryJson(sim::Summarize(all, k));
    j["summary"] = s;
    j["warnings"] = warnings;
    out << j.dump(2) << "\n";
    return;
  }
  for (const auto& w : warnings) WriteLine(err, "warning: ", w);
  out << "shardtune validate: " << runs.size() << " run(s), "
      << (a.profile.empty() ? std::string("default constants") : "profile " + a.profile) << "\n\n"
      << text.str() << "Summary (absolute relative error, predicted vs measured)\n";
  for (const char* k : kinds) PrintSummaryLine(k, sim::Summarize(all, k), out);
  PrintSummaryLine("all", sim::Summarize(all), out);
}

}  // namespace shardtune::cli
