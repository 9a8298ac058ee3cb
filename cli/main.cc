// The shardtune command line. Only this file catches: errors print one line "error: ..." on
// stderr and exit 1 (bad input), 3 (backend) or 70 (internal), README.md "Conventions"; `tune`
// exits 2 when its search finds no plan that fits (cli/tune_cmd.h kExitNoPlan); a launched rank 0
// whose MASTER_PORT is taken exits 75 (executor/errors.h kExitPortInUse).
// Built twice (cli/CMakeLists.txt): `shardtune` without the executor, which hands `run` to
// `shardtune-exec`, and `shardtune-exec` with it (SHARDTUNE_CLI_WITH_EXECUTOR).
#include <algorithm>
#include <cstring>
#include <iostream>
#if defined(__GLIBC__)  // defined by the C library's headers above
#include <malloc.h>     // mallopt
#endif

#include <CLI/CLI.hpp>

#include "cli/calibrate_cmd.h"
#include "cli/exec_forward.h"
#include "cli/estimate_cmd.h"
#include "cli/export_cmd.h"
#include "cli/format.h"
#include "cli/list_cmds.h"
#include "model/text.h"
#if SHARDTUNE_CLI_WITH_EXECUTOR
#include "cli/env_cmd.h"
#include "cli/probe_cmd.h"
#include "cli/run_cmd.h"
#endif
#include "cli/simulate_cmd.h"
#include "cli/tune_cmd.h"
#include "cli/validate_cmd.h"
#include "executor/errors.h"
#include "model/errors.h"
#include "model/strict_json.h"
#include "simulator/simulate.h"

namespace {
constexpr int kExitInput = 1;
constexpr int kExitBackend = 3;
constexpr int kExitInternal = 70;
}  // namespace

namespace {

// " (did you mean \"--seq-len\"?)" for the first unknown --flag of argv, from the flags of the
// subcommand given; "" when none is close.
std::string FlagSuggestion(CLI::App& app, int argc, char** argv) {
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands()) sub = s;
  if (sub == nullptr) return "";
  std::vector<std::string> names;
  for (const CLI::Option* o : sub->get_options()) {
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  }
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0) continue;
    word = word.substr(0, word.find('='));
    if (std::find(names.begin(), names.end(), word) != names.end()) continue;
    std::string hint = shardtune::model::ClosestName(word, names);
    return shardtune::model::DidYouMean(hint);
  }
  return "";
}

// Whether argv names a command of the executor (run, probe, env), which LibTorch's allocator serves.
bool ExecutorCommand(int argc, char** argv) {
  return argc > 1 && (std::strcmp(argv[1], "run") == 0 || std::strcmp(argv[1], "probe") == 0 ||
                      std::strcmp(argv[1], "env") == 0);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardtune::cli;
  shardtune::sim::RetainFreedHeap();  // tune and simulate walk many plans (simulator/simulate.h)
#if defined(__GLIBC__)
  // Setting M_TRIM_THRESHOLD (above) freezes glibc's mmap threshold at its 128 KiB default
  // (mallopt(3): either setting turns off its dynamic adjustment), so every buffer of a walk or a
  // replay larger than that was mapped and unmapped again for each plan. The planner's commands
  // serve them from the heap up to 32 MiB (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit): tune llama3-405b
  // on 16x8xH100, one core, 85,917 page faults against 22,548, task-clock median 2.42 s against
  // 2.12 s over six runs each (perf stat, 2026-12-01). The executor's commands keep LibTorch's.
  if (!ExecutorCommand(argc, argv)) mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
#endif
#if !SHARDTUNE_CLI_WITH_EXECUTOR
  if (ExecutorCommand(argc, argv)) {
    try {
      ExecExecutor(argc, argv);
    } catch (const shardtune::exec::BackendError& e) {
      WriteLine(std::cerr, "error: ", e.what());
      return kExitBackend;
    }
  }
#endif
  CLI::App app{"shardtune: memory estimates, plan search and runs for FSDP training"};
  app.require_subcommand(1);
  bool models_json = false, gpus_json = false;
  app.add_subcommand("models", "List model presets")->add_flag("--json", models_json, "JSON output");
  app.add_subcommand("gpus", "List GPU kinds")->add_flag("--json", gpus_json, "JSON output");
  EstimateArgs estimate;
  AddEstimateCommand(&app, &estimate);
#if SHARDTUNE_CLI_WITH_EXECUTOR
  RunArgs run_args;
  AddRunCommand(&app, &run_args);
  ProbeArgs probe_args;
  AddProbeCommand(&app, &probe_args);
  EnvArgs env_args;
  AddEnvCommand(&app, &env_args);
#else
  // Listed for --help; `shardtune run|probe|env ...` were handed to shardtune-exec above.
  app.add_subcommand("run", kRunCommandHelp);
  app.add_subcommand("probe", kProbeCommandHelp);
  app.add_subcommand("env", kEnvCommandHelp);
#endif
  SimulateArgs simulate;
  AddSimulateCommand(&app, &simulate);
  ExportArgs export_args;
  AddExportCommand(&app, &export_args);
  TuneArgs tune;
  AddTuneCommand(&app, &tune);
  CalibrateArgs calibrate;
  AddCalibrateCommand(&app, &calibrate);
  ValidateArgs validate;
  AddValidateCommand(&app, &validate);
  for (CLI::App* sub : app.get_subcommands({})) GroupHelp(sub);  // headings and plan defaults
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    // A mistyped flag: name the closest flag of the subcommand, as mistyped values do.
    WriteLine(std::cerr, "error: ", std::string(e.what()) + FlagSuggestion(app, argc, argv));
    return kExitInput;
  } catch (const CLI::ParseError& e) {
    WriteLine(std::cerr, "error: ", e.what());
    return kExitInput;
  }
  try {
    if (app.got_subcommand("models")) RunModels(models_json, std::cout);
    if (app.got_subcommand("gpus")) RunGpus(gpus_json, std::cout);
    if (app.got_subcommand("estimate")) RunEstimate(estimate, std::cout, std::cerr);
#if SHARDTUNE_CLI_WITH_EXECUTOR
    if (app.got_subcommand("run")) return RunRun(run_args, std::cout, std::cerr);
    if (app.got_subcommand("probe")) return RunProbeCommand(probe_args, std::cout, std::cerr);
    if (app.got_subcommand("env")) return RunEnvCommand(env_args, std::cout, std::cerr);
#endif
    if (app.got_subcommand("simulate")) RunSimulate(simulate, std::cout, std::cerr);
    if (app.got_subcommand("export")) RunExport(export_args, std::cout, std::cerr);
    if (app.got_subcommand("tune")) return RunTune(tune, std::cout, std::cerr);
    if (app.got_subcommand("calibrate")) RunCalibrate(calibrate, std::cout, std::cerr);
    if (app.got_subcommand("validate")) RunValidate(validate, std::cout, std::cerr);
  } catch (const shardtune::InputError& e) {
    WriteLine(std::cerr, "error: ", e.what());
    return kExitInput;
  } catch (const shardtune::exec::PortInUseError& e) {
    WriteLine(std::cerr, "error: ", e.what());
    return shardtune::exec::kExitPortInUse;  // the launcher retries on another port
  } catch (const shardtune::exec::BackendError& e) {
    WriteLine(std::cerr, "error: ", e.what());
    return kExitBackend;
  } catch (const std::exception& e) {
    WriteLine(std::cerr, "error: internal: ", e.what());
    return kExitInternal;
  }
  return 0;
}
