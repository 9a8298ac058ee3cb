#include "executor/probe/torch_profile.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "executor/errors.h"

namespace shardtune::exec {
namespace {

namespace prof = torch::profiler::impl;

std::set<prof::ActivityType> Activities(bool cuda) {
  std::set<prof::ActivityType> a{prof::ActivityType::CPU};
  if (cuda) a.insert(prof::ActivityType::CUDA);
  return a;
}

}  // namespace

TorchProfile::TorchProfile(bool cuda) {
  // ProfilerState::KINETO: the profiler torch.profiler.profile uses (torch/profiler/profiler.py
  // _KinetoProfile.prepare_trace / start_trace call _prepare_profiler and _enable_profiler).
  prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/false,
                              /*profile_memory=*/false, /*with_stack=*/false,
                              /*with_flops=*/false, /*with_modules=*/false);
  try {
    torch::autograd::profiler::prepareProfiler(config, Activities(cuda));
    torch::autograd::profiler::enableProfiler(config, Activities(cuda));
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw BackendError("--torch-profile: this LibTorch cannot start its profiler (" +
                       what.substr(0, what.find('\n')) + ")");
  }
  active_ = true;
}

TorchProfile::~TorchProfile() {
  if (!active_) return;
  try {
    torch::autograd::profiler::disableProfiler();
  } catch (...) {
  }
}

void TorchProfile::CheckAvailable(const std::string& dir, bool cuda) {
  const std::string probe = (std::filesystem::path(dir) / ".torch_profile_check.json").string();
  try {
    TorchProfile p(cuda);
    p.Save(probe);
  } catch (const BackendError& e) {
    std::error_code ec;
    std::filesystem::remove(probe + ".tmp", ec);
    std::string what = e.what();
    if (what.find("Kineto") != std::string::npos) {
      throw BackendError(
          "--torch-profile: this LibTorch was built without Kineto (USE_KINETO), so it cannot "
          "save a profiler trace: build against a LibTorch with it, e.g. a Python torch wheel's "
          "(-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)'))");
    }
    throw;
  }
  std::error_code ec;
  std::filesystem::remove(probe, ec);
}

void TorchProfile::Step(int64_t step, const std::function<void()>& f) {
  RECORD_USER_SCOPE("ProfilerStep#" + std::to_string(step));
  f();
}

void TorchProfile::Save(const std::string& path) {
  active_ = false;
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result =
      torch::autograd::profiler::disableProfiler();
  if (!result) throw BackendError("--torch-profile: the profiler returned no result");
  const std::string tmp = path + ".tmp";
  try {
    result->save(tmp);
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw BackendError("--torch-profile: cannot write " + tmp + ": " + what.substr(0, what.find('\n')));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw BackendError("--torch-profile: cannot rename " + tmp + " to " + path + ": " + ec.message());
}

}  // namespace shardtune::exec
