// `shardtune env`: what this machine gives a run, as torch.utils.collect_env and DeepSpeed's
// ds_report do for Python: LibTorch's version and build, the BLAS resolved at run time and its
// measured single-core GFLOP/s, thread pools, Gloo, NCCL, CUDA runtime and driver, the visible
// GPUs and the catalog entry each maps to. Torch-free interface (env_report.cc uses LibTorch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/probe/blas_info.h"

namespace shardtune::exec {

struct EnvOptions {
  // Time a 1024^3 fp32 matmul on one thread (about 2 GFLOP: 0.01 s on OpenBLAS, 0.4 s on the
  // reference BLAS, three timed calls after one warm-up). false: skip the measurement.
  bool measure_blas = true;
  int gemm_size = 1024;  // n of the n x n x n matmul
};

struct EnvGpu {
  int index = 0;
  std::string name;
  int64_t total_memory_bytes = 0;
  std::string compute_capability;  // "9.0"
  int multiprocessors = 0;
  std::string catalog_entry;       // profiles catalog name, or "" (catalog_note says why)
  std::string catalog_note;
};

struct EnvReport {
  std::string shardtune_version;
  std::string torch_version;
  std::vector<std::string> torch_build;  // at::show_config(), one line each
  std::string cpu_model;
  int cpu_cores = 0;                     // std::thread::hardware_concurrency()
  int64_t host_memory_bytes = 0;         // MemTotal of /proc/meminfo
  int intra_op_threads = 0;              // at::get_num_threads()
  int inter_op_threads = 0;              // at::get_num_interop_threads()
  std::vector<std::pair<std::string, std::string>> thread_env;  // OMP_NUM_THREADS, ... as set
  BlasInfo blas;
  double blas_gflops_one_core = 0;  // measured fp32 matmul on one thread; 0 when not measured
  std::string blas_warning;         // SlowBlasWarning(blas)
  bool gloo = false;
  std::string gloo_version;         // gloo/config.h of the headers built against
  bool nccl = false;
  std::string nccl_version;
  bool torch_cuda = false;          // this LibTorch was built with CUDA
  std::string cuda_runtime_version, cuda_driver_version;  // "12.4"; "" without CUDA
  std::string nvidia_driver_version;                      // /proc/driver/nvidia/version; ""
  std::vector<EnvGpu> gpus;
};

// Collects the report in this process (LibTorch loaded). Throws BackendError when LibTorch fails
// in the measurement.
EnvReport CollectEnvironment(const EnvOptions& options);

// The NVIDIA kernel driver's version from /proc/driver/nvidia/version ("580.65.06"), "" when
// there is none. Torch-free.
std::string NvidiaDriverVersion();

}  // namespace shardtune::exec
