// `shardtune export`: read a plan, check it against the model and cluster, hand it to the
// planner's exporter, and print the config and its notes.
#include "cli/export_cmd.h"

#include <vector>

#include "cli/format.h"
#include "cli/job_args.h"
#include "model/errors.h"
#include "model/plan_json.h"
#include "model/presets.h"
#include "planner/configs/export.h"
#include "profiles/cluster.h"
#include "simulator/trace_json.h"

namespace shardtune::cli {

void AddExportCommand(CLI::App* app, ExportArgs* a) {
  CLI::App* sub = app->add_subcommand("export",
                                      "Write a plan as an Accelerate, torchtitan, HF Trainer, "
                                      "DeepSpeed, ROLL or verl config");
  sub->add_option("--plan", a->plan, "Plan JSON (shardtune.plan), e.g. from tune --out")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--format", a->format, "accelerate|torchtitan|hf-trainer|deepspeed|roll|verl")
      ->required();
  sub->add_option("--model", a->model, "Preset name, shardtune.model JSON or HF config.json")
      ->capture_default_str();
  sub->add_option("--cluster", a->cluster, "Shorthand (8xH100, 2x8xA100-80G), node preset (4xp5) or cluster JSON")
      ->capture_default_str();
  sub->add_option("--out", a->out, "Write the config to this file (atomically) instead of stdout");
}

void RunExport(const ExportArgs& a, std::ostream& out, std::ostream& err) {
  configs::ExportFormat format = configs::ParseExportFormat(a.format, "--format");
  model::Plan p = model::ReadPlanFile(a.plan);
  std::vector<std::string> warnings;
  model::ModelSpec spec = model::ResolveModelArg(a.model, &warnings);
  profiles::ClusterSpec cluster = profiles::LoadCluster(a.cluster);
  ThrowIfProblems(JobProblems(spec, cluster, p, a.plan));
  configs::ExportResult r = configs::ExportPlan(p, configs::MakeExportContext(spec, cluster, p), format);
  if (a.out.empty()) {
    out << r.text;
  } else {
    sim::WriteFileAtomically(a.out, r.text);
    WriteLine(err, "wrote ", a.out);
  }
  for (const auto& w : warnings) WriteLine(err, "warning: ", w);
  for (const auto& n : r.notes) err << "note: " << n << "\n";
}

}  // namespace shardtune::cli
