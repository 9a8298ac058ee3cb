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

namespace shardtune::cli {

struct RunArgs {
  std::string model = "tiny-llama";
  std::string out;
  std::string data;
  std::string lr_schedule = "cosine";
  std::string device = "auto";
  std::string lengths;  // --lengths uniform:MIN-MAX (empty: every sequence the longest)
  std::string on_nonfinite = "stop";  // stop|skip (CLI11 checks the choice)  // auto: cuda when this build has CUDA and a GPU is visible
  int steps = 0;
  int nproc = 1;
  int emulate_world = 0;
  uint64_t seed = 0;
  double lr = 1e-3;
  int warmup_steps = -1;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;
  int checkpoint_every = 0;
  int threads = 0;
  double timeout_s = 60;
  double watchdog_timeout_s = 600;
  bool export_full_state_dict = false;
  bool no_trace = false;
  bool torch_profile = false;  // --torch-profile
  bool no_checkpoints = false;
  int keep_checkpoints = 0;  // --keep-checkpoints K: keep the newest K (0: all)
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
