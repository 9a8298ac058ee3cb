// `shardtune env` collected in-process (env_report.h): LibTorch's own view (version, build
// config, thread pools), the BLAS the dynamic linker bound, one timed single-thread fp32 matmul
// through at::mm (the BLAS LibTorch really calls), and the CUDA / NCCL / Gloo facts.
#include "executor/probe/env_report.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "executor/cuda_support.h"
#include "executor/errors.h"
#include "executor/comm/gloo_communicator.h"
#include "executor/host_info.h"
#include "executor/comm/nccl_communicator.h"
#include "profiles/device_names.h"

#ifdef SHARDTUNE_HAVE_GLOO
#include <gloo/config.h>
#endif

namespace shardtune::exec {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find_first_not_of(" \t");
    if (a == std::string::npos) continue;
    out.push_back(line.substr(a));
  }
  return out;
}

// Median seconds of an n x n x n fp32 at::mm on one intra-op thread and one BLAS thread (the
// pools are restored afterwards): 2 n^3 flops per call.
double SingleCoreGemmGflops(int n) {
  struct OneThread {  // both pools at one thread for the measurement, restored on every exit
    int intra = at::get_num_threads();
    OneThread() {
      at::set_num_threads(1);
      SetBlasThreads(1);
    }
    ~OneThread() {
      at::set_num_threads(intra);
      SetBlasThreads(intra);
    }
  } one_thread;
  try {
    at::Tensor a = at::randn({n, n}), b = at::randn({n, n}), c = at::empty({n, n});
    at::mm_out(c, a, b);  // warm-up: page faults, BLAS thread start-up, dispatch caches
    std::vector<double> t;
    for (int i = 0; i < 3; ++i) {
      auto s = std::chrono::steady_clock::now();
      at::mm_out(c, a, b);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
    }
    std::sort(t.begin(), t.end());
    return 2.0 * n * n * static_cast<double>(n) / t[1] / 1e9;
  } catch (const c10::Error& e) {
    throw BackendError(std::string("env: the matmul failed: ") + e.what_without_backtrace());
  }
}

std::vector<std::pair<std::string, std::string>> ThreadEnvironment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                           "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "GOMP_CPU_AFFINITY",
                           "OMP_PROC_BIND", "CUDA_VISIBLE_DEVICES"}) {
    if (const char* v = std::getenv(name)) out.emplace_back(name, v);
  }
  return out;
}

}  // namespace

EnvReport CollectEnvironment(const EnvOptions& options) {
  EnvReport r;
  r.shardtune_version = SHARDTUNE_VERSION;
  r.torch_version = TORCH_VERSION;
  r.torch_build = Lines(at::show_config());
  r.cpu_model = CpuModel();
  r.cpu_cores = static_cast<int>(std::thread::hardware_concurrency());
  r.host_memory_bytes = HostMemoryBytes();
  r.intra_op_threads = at::get_num_threads();
  r.inter_op_threads = at::get_num_interop_threads();
  r.thread_env = ThreadEnvironment();
  r.blas = DetectBlas();
  r.blas_warning = SlowBlasWarning(r.blas);
  if (options.measure_blas) r.blas_gflops_one_core = SingleCoreGemmGflops(options.gemm_size);
  r.gloo = GlooAvailable();
#ifdef SHARDTUNE_HAVE_GLOO
  r.gloo_version = std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) +
                   "." + std::to_string(GLOO_VERSION_PATCH);
#endif
  r.nccl = NcclAvailable();
  r.nccl_version = NcclVersionString();
#ifdef SHARDTUNE_TORCH_CUDA
  r.torch_cuda = true;
#endif
  r.cuda_runtime_version = CudaRuntimeVersion();
  r.cuda_driver_version = CudaDriverVersion();
  r.nvidia_driver_version = NvidiaDriverVersion();
  for (const CudaDeviceInfo& d : ListCudaDevices()) {
    EnvGpu g;
    g.index = d.index;
    g.name = d.name;
    g.total_memory_bytes = d.total_memory_bytes;
    g.compute_capability = std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor);
    g.multiprocessors = d.multiprocessors;
    profiles::DeviceMatch m = profiles::MatchCudaDevice(d.name, Bytes::Of(d.total_memory_bytes));
    if (m.gpu != nullptr) g.catalog_entry = m.gpu->name;
    g.catalog_note = m.why;
    r.gpus.push_back(g);
  }
  return r;
}

}  // namespace shardtune::exec
