// Helpers of the executor tests: temporary folders, running the built `shardtune` binary as
// real processes (the launcher, or ranks started like torchrun does), reading measurements.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardtune::exec::testing {

// A fresh folder under /tmp, removed (recursively) when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it did not finish in time
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

// Starts `shardtune args...` (SHARDTUNE_BIN) with `env` added to this environment, stdout and
// stderr into `log_path`, in its own process group. Returns its pid.
pid_t StartShardtune(const std::vector<std::string>& args, const std::string& log_path,
                     const std::map<std::string, std::string>& env = {});
// Waits up to timeout_s for `pid`; on timeout kills its process group and returns -1.
int WaitFor(pid_t pid, double timeout_s, double* seconds = nullptr);
// StartShardtune + WaitFor + the log's text.
ProcessResult RunShardtune(const std::vector<std::string>& args, double timeout_s = 120,
                           const std::map<std::string, std::string>& env = {});
// Runs shardtune with `args` and expects an input error: exit 1 and exactly one "error: ..." line
// containing `want` (reported before any rank starts).
void ExpectInputError(const std::vector<std::string>& args, const std::string& want);
// Polls `path` until it contains `needle` or timeout_s passes. True when found.
bool WaitForText(const std::string& path, const std::string& needle, double timeout_s);
std::string ReadText(const std::string& path);

// A named run of `nproc` ranks with its own flags (the cases a test compares).
struct RunCase {
  std::string name;
  int nproc = 1;
  std::vector<std::string> flags;
};
// `a` followed by `more` (a command line and further flags).
std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& more);
// Two runs of `steps` steps over the same global batches: step 1 equal to fp32 summation order
// (1e-5), later steps to 2e-4 (the tolerances of run_equivalence_test.cc).
void ExpectSameLossCurves(const std::map<int64_t, double>& want, const std::map<int64_t, double>& got, int steps,
                          const std::string& what);

// step -> loss, and step -> grad_norm, from DIR/measurements.json.
std::map<int64_t, double> Losses(const std::string& dir);
std::map<int64_t, double> GradNorms(const std::string& dir);
// The run in `got` trained the losses of the run in `want` step by step and its step-1 gradient
// norm, each to 1e-6 relative (a rerun computes the same fp32 ops on the same inputs), over the
// same number of steps (at least one); `what` names the case in failures.
void ExpectSameTraining(const std::string& want, const std::string& got, const std::string& what);

// Runs `args_for(out, 4)` uninterrupted, then `args_for(out2, 2)` and `args_for(out2, 4)` (the
// second resumes from the first's step-2 checkpoint: args_for must ask for --checkpoint-every 2
// and a schedule both step counts share, e.g. constant LR), and expects the resumed steps' losses
// to equal the uninterrupted run's bit for bit.
void ExpectResumeReproducesLosses(
    const std::function<std::vector<std::string>(const std::string& out, int steps)>& args_for,
    const std::string& tmp_root);

// `shardtune validate --model MODEL --measurements DIR/measurements.json --json`'s step-0 peak
// row (tracked bytes): {predicted, measured}. A failure is an ADD_FAILURE and {0, 0}.
std::pair<double, double> ValidateStep0Peak(const std::string& model_path, const std::string& dir);

// One step of `model` with --checkpointing `mode` on one rank, 8 sequences of 128 tokens in one
// micro-batch, fp32, eager attention (activations dominate the step-0 peak, no peer's
// reduce-scatter moves it), `extra` flags appended, written to `out`; then ValidateStep0Peak of
// it, printed with the error as "MODE: step-0 peak ... measured, ... predicted (...%)".
std::pair<double, double> Step0PeakAgainstValidate(const std::string& model, const std::string& out,
                                                   const std::string& mode,
                                                   const std::vector<std::string>& extra = {});

// The executor's test data folder (tests/executor/data) and a model file in it.
std::string DataPath(const std::string& name);

// micro-llama's shapes (tests/executor/data) with 4 blocks, written into `tmp`: enough blocks for
// per-block policies (first:K, verl's activation offload of all but the last) to be real mixes.
std::string FourBlockLlama(const TempDir& tmp);

}  // namespace shardtune::exec::testing
