// `shardtune run`: train a plan for real (executor/README.md). Without RANK/WORLD_SIZE in the
// environment it validates the inputs and either runs the single rank in this process or
// launches --nproc local ranks of this same program; with them (torchrun --no-python, Slurm,
// or our own launcher) this process is one rank.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>

#include "cli/plan_flags.h"
#include "executor/train/run.h"

namespace shardtune::cli {

struct RunArgs {
  // The flags that set a RunOptions field as they are (--out, --data, --seed, --emulate-world,
  // --lr, --warmup-steps, --weight-decay, --max-grad-norm, --checkpoint-every, --threads,
  // --timeout, --torch-profile, --keep-checkpoints, --watchdog-timeout,
  // --export-full-state-dict) write it here; the run's options start as a copy of it, so its
  // defaults are the executor's own. Spec, plan and the rest are filled from the other flags.
  exec::RunOptions options;
  std::string model = "tiny-llama";
  std::string lr_schedule = "cosine";
  std::string device = "auto";  // auto: cuda when this build has CUDA and a GPU is visible
  std::string lengths;  // --lengths uniform:MIN-MAX (empty: every sequence the longest)
  std::string on_nonfinite = "stop";  // stop|skip (CLI11 checks the choice)
  int steps = 0;  // 0 until --steps is given: ValidateRun then names the flag (RunOptions says 1)
  int nproc = 1;
  bool no_trace = false;
  bool no_checkpoints = false;
  bool no_preflight = false;
  PlanFlags plan;
};

void AddRunCommand(CLI::App* app, RunArgs* args);
// Runs the command; progress on `out` (rank 0), messages on `err`. Returns the exit code
// (0, or a failed rank's code from the launcher). Throws InputError, exec::BackendError.
// Starts `nproc` local ranks of this program with its own command line and environment (the
// launcher adds RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and waits for them.
// Returns the exit code to leave with: 0, or the first failed rank's (1 and 70 kept, others 3),
// its message printed to `err` as one line.
int LaunchThisProgramAsRanks(int nproc, std::ostream& err);
int RunRun(const RunArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
