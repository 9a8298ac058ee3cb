// `shardtune export`: write a plan as another trainer's config (Accelerate, torchtitan, HF Trainer,
// DeepSpeed, ROLL), with what the format cannot express as notes on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

namespace shardtune::cli {

struct ExportArgs {
  std::string plan;                 // --plan PLAN.json (shardtune.plan), required
  std::string format;               // --format accelerate|torchtitan|hf-trainer|deepspeed|roll|verl
  std::string model = "llama3-8b";  // --model: the layer class, sequence length and names
  std::string cluster = "8xH100";   // --cluster: world size and GPUs per node
  std::string out;                  // --out FILE (written atomically); empty: stdout
};

void AddExportCommand(CLI::App* app, ExportArgs* args);
// Validates the plan against the model and cluster, writes the config to `out` (or args.out) and
// each note as "note: ..." to `err`. Throws InputError (bad format, plan, model or cluster).
void RunExport(const ExportArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
