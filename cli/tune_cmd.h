// `shardtune tune`: search FSDP plans for a model, cluster and global batch; rank them; explain
// the losers; write the winner.
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/plan_flags.h"

namespace shardtune::cli {

struct TuneArgs {
  std::string model = "llama3-8b";
  std::string cluster = "8xH100";
  int64_t global_batch_tokens = 0;  // tokens (alternative to the plan flag --global-batch)
  std::string objective = "throughput";
  double min_tokens_per_s = 0;
  double price_per_gpu_hour = 0;
  int top = 5;
  std::string out;                  // PLAN.json for the winner
  std::string plot;                 // --plot FILE.svg|FILE.html: the Pareto front, winner marked
  std::string export_format;        // --export FMT: the winner as that framework's config
  bool search_nodes = false;        // also find the fewest nodes (<= the cluster's) that fit
  std::string profile;
  bool json = false;
  std::string cp_sizes;             // --cp-sizes "1,2,4" ("" : not given)
  std::string loss_kernels;         // --loss-kernels "cross_entropy,fused_linear" ("": not given)
  // --measure N (0: not asked for), --measure-steps, --measure-dir. Kept as text so a bad value
  // gets shardtune's one-line error rather than CLI11's.
  std::string measure, measure_steps, measure_dir;
  std::string jobs;                 // --jobs N ("": the hardware concurrency)
  // --allocator default|expandable_segments|both: the caching allocator's mode the plans are
  // judged under (PYTORCH_CUDA_ALLOC_CONF); both searches each and answers with the better.
  std::string allocator = "default";
  PlanFlags plan;                   // given flags fix that dimension of the search
};

void AddTuneCommand(CLI::App* app, TuneArgs* args);
// Exit code of a search that found no plan (the answer, with its binding constraint, is printed).
inline constexpr int kExitNoPlan = 2;
// Returns 0, or kExitNoPlan when no plan fits.
int RunTune(const TuneArgs& args, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
