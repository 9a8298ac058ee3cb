// `shardtune run` as a library: train a model::Plan for real on this process's rank and write
// OUT/measurements.json, OUT/trace.json and sharded checkpoints. Plain C++ (no Torch), so the
// CLI compiles without LibTorch headers. Nothing here prints: progress goes to callbacks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "executor/train/lr_schedule.h"
#include "executor/rank_env.h"
#include "model/model_spec.h"
#include "model/packing.h"
#include "model/plan.h"

namespace shardtune::exec {

// What a step whose global loss or gradient norm is NaN or infinite does (--on-nonfinite).
enum class OnNonFinite {
  kStop,  // throw BackendError naming the step; no checkpoint of it is written
  kSkip,  // drop its update (no optimizer step, gradients zeroed), say so, go on
};

struct RunOptions {
  model::ModelSpec spec;
  model::Plan plan;
  std::string plan_name = "plan";  // prefixes plan problems: the --plan file, or "plan"
  int steps = 1;                   // the optimizer step to reach (a resumed run continues up to it)
  std::string out_dir;             // created if missing; checkpoints resume from here
  uint64_t seed = 0;               // parameter init and synthetic data
  std::string data_path;           // byte-level text file; empty: synthetic
  // The sequences' lengths (--lengths): uniform ones are right-padded to seq_len with their
  // padding's labels ignored (unpacked plans) or packed whole into rows (packed plans); the loss
  // is then the mean over the global batch's tokens. Default: every sequence the longest.
  model::SequenceLengths lengths;
  // Packed plans (plan packed_seq_len > 0): sequences per optimizer step over the data-parallel
  // ranks (--global-batch), cut per rank into token-budget rows as verl does (model/packing.h).
  int64_t sequences_per_step = 0;
  int emulate_world = 0;           // > 0: this one process is rank 0 of that many (Emulated)
  double lr = 1e-3;                // peak learning rate
  int warmup_steps = -1;           // -1: steps / 10
  LrSchedule lr_schedule = LrSchedule::kCosine;
  double weight_decay = 0.01;  // AdamW decoupled weight decay (torch default)
  double max_grad_norm = 1.0;  // global-norm clipping; <= 0: none
  int checkpoint_every = 0;    // steps between checkpoints; 0: only after the last step
  bool checkpoints = true;     // false: write none (benchmarks; nothing to resume from)
  int keep_checkpoints = 0;    // > 0: keep only the newest K complete checkpoints; 0: keep all
  int threads = 0;             // intra-op threads per rank; 0: cores / local ranks
  double timeout_s = 60;       // rendezvous and collective timeout (a dead peer fails sooner)
  bool trace = true;           // write OUT/trace.json
  // Rank 0 records its steps after the first with the PyTorch profiler (torch_profile.h) and
  // writes OUT/torch_trace.json, the Chrome trace `shardtune calibrate --trace` reads.
  bool torch_profile = false;
  // Default stop: a diverged run should not spend its budget; skip rides out rare spikes.
  OnNonFinite on_nonfinite = OnNonFinite::kStop;
  // "cpu", or "cuda": each rank on GPU LOCAL_RANK, collectives over NCCL (also a one-rank NCCL
  // communicator, so a single GPU runs the real NCCL path), Emulated with emulate_world.
  std::string device = "cpu";
  // A rank with no progress (phase change or micro-batch) for this long reports its phase
  // through RunCallbacks::on_stall; <= 0: no watchdog. Generous by default: a step of a large
  // model on CPU can take minutes, a hung collective otherwise waits for timeout_s per call.
  double watchdog_timeout_s = 600;
  // After the last step, rank 0 writes OUT/model.safetensors: the full, unpadded fp32
  // parameters under the module tree's names (full_state_dict.h). Not with emulate_world.
  bool export_full_state_dict = false;
  // Test-only (the watchdog's tests): rank test_stall_rank sleeps test_stall_s seconds when it
  // enters the phase named test_stall_phase ("step 0", "steady step", ...). Empty: never.
  std::string test_stall_phase;
  int test_stall_rank = 0;
  double test_stall_s = 0;
};

// True when this build can run on CUDA (LibTorch with CUDA) and a GPU is visible.
bool CudaRunsAvailable();
// True when this build has the NCCL communicator.
bool NcclRunsAvailable();
// This LibTorch has at::scaled_dot_product_attention (>= 2.0); 1.13's runs take the eager path
// (Transformer's options), so `run` records plan attention eager there (cli/run_cmd.cc).
bool SdpaRunsAvailable();
// The fused AdamW (RunOptions' plan optimizer_impl fused) runs on `device`: LibTorch >= 2.1 and
// "cuda" (optimizer.h FusedAdamWAvailable), once verified on a GPU (false until then: run.cc);
// elsewhere on a GPU `run` updates op by op and records foreach. Host shards (CPU ranks, CPU
// offload) take the one-pass host kernel and record fused (cli/run_cmd.cc).
bool FusedAdamWRunsAvailable(const std::string& device);

struct StepLog {
  int64_t step = 0;
  int steps = 0;    // the run's last step
  double loss = 0;  // mean over the global batch
  double lr = 0;
  double grad_norm = 0;            // before clipping
  double time_s = 0;               // wall time of the step (all micro-batches + optimizer)
  int64_t tokens = 0;              // tokens in the global batch
  double tokens_per_s = 0;         // tokens / time_s
  int64_t tracked_peak_bytes = 0;  // rank 0's peak tensor bytes so far
};

struct RunCallbacks {
  std::function<void(const StepLog&)> on_step;         // rank 0 only
  std::function<void(const std::string&)> on_message;  // rank 0 only: resume, skipped checkpoints
  // Any rank, from the watchdog's thread, once: a one-line "watchdog: rank R made no progress
  // ... in phase P" (RunOptions::watchdog_timeout_s). The CLI prints it and exits with code 3;
  // when it returns, the run goes on (still stalled).
  std::function<void(const std::string&)> on_stall;
};

struct RunSummary {
  int64_t resumed_from_step = 0;  // 0: started fresh
  int64_t last_step = 0;
  std::string measurements_path;  // written by rank 0
  std::string trace_path;
  std::string torch_trace_path;   // OUT/torch_trace.json with torch_profile (rank 0)
  std::string state_dict_path;    // OUT/model.safetensors with export_full_state_dict
};

// Every problem that can be found before a rank starts, for a run of `world_size` processes,
// thrown together as one InputError: the spec (and executor support, e.g. no MoE), the plan
// (Plan::Problems), steps >= 1, the optimizer (adamw, sgd), checkpointing,
// dtypes, --emulate-world, --watchdog-timeout >= 0, --export-full-state-dict without
// --emulate-world, a readable --data file long enough for seq_len, a writable out_dir
// (created when missing).
void ValidateRun(const RunOptions& options, int world_size);

// `plan` as the executor runs it, for its pre-flight estimate and its measurements: its
// whole-block checkpoints rerun reentrantly (nn/recompute.h Recompute), so
// Plan::checkpoint_reentrant is set wherever checkpointing is.
model::Plan AsExecuted(model::Plan plan);

// Runs this process's rank (env.launched false: the whole run in this process). Resumes from
// the newest complete checkpoint in out_dir, skipping corrupted ones with a message. Throws
// InputError, BackendError (a peer rank died, a timeout, a file system error).
RunSummary RunRank(const RunOptions& options, const RankEnv& env, const RunCallbacks& callbacks);

}  // namespace shardtune::exec
