// The PyTorch profiler (Kineto) from C++: `run --torch-profile` records rank 0's steps after the
// first with CPU and (on a GPU) CUDA activities and writes them as the Chrome trace the Python
// profiler exports (torch/csrc/autograd/profiler_kineto.h: enableProfiler, disableProfiler,
// ProfilerResult::save), with each step in a "ProfilerStep#N" user scope as
// torch.profiler.profile.step() marks it, so `shardtune calibrate --trace` reads the executor's
// own kernels (issue #21: where the executor's step time goes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace shardtune::exec {

class TorchProfile {
 public:
  // Starts recording. Throws BackendError when this LibTorch cannot profile (built without
  // Kineto, as some distribution packages are), naming the flag.
  explicit TorchProfile(bool cuda);
  ~TorchProfile();
  TorchProfile(const TorchProfile&) = delete;
  TorchProfile& operator=(const TorchProfile&) = delete;

  // Throws BackendError, naming the flag and the fix, when this LibTorch cannot write a profiler
  // trace (built without Kineto, as Debian's is: it records, then refuses to save). Checked by
  // recording nothing and saving it to a temporary file in `dir` (removed), so a run fails
  // before its first step rather than after its last.
  static void CheckAvailable(const std::string& dir, bool cuda);

  // Runs f inside a "ProfilerStep#<step>" scope.
  void Step(int64_t step, const std::function<void()>& f);

  // Stops recording and writes the trace to `path` atomically (a temporary beside it, then a
  // rename). Throws BackendError on a failure to write.
  void Save(const std::string& path);

 private:
  bool active_ = false;
};

}  // namespace shardtune::exec
