// BLAS detection through the dynamic linker: dlsym(RTLD_DEFAULT, "sgemm_") finds the definition
// LibTorch's calls bind to (global lookup order), dladdr names its file; vendor entry points
// (OpenBLAS's openblas_get_config, MKL's mkl_get_version_string, BLIS's bli_info_get_version_str,
// FlexiBLAS's flexiblas_current_backend) say what it is.
#include "executor/probe/blas_info.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstddef>

namespace shardtune::exec {
namespace {

// The Debian package that installs an optimized libblas.so.3 alternative. The OpenMP build:
// LibTorch's intra-op pool is OpenMP, so one omp_set_num_threads (at::set_num_threads) sizes
// both pools; see executor/README.md "CPU runs and BLAS" for the measurement behind the choice.
constexpr const char* kOptimizedBlasPackage = "libopenblas0-openmp";

void* Sym(const char* name) { return dlsym(RTLD_DEFAULT, name); }

std::string Resolved(const char* path) {
  if (path == nullptr) return "";
  char buf[PATH_MAX];
  if (realpath(path, buf) == nullptr) return path;
  return buf;
}

void ReadOpenBlas(BlasInfo* info) {
  using GetConfig = char* (*)();
  using GetInt = int (*)();
  if (auto f = reinterpret_cast<GetConfig>(Sym("openblas_get_config"))) {
    const char* c = f();
    info->version = c != nullptr ? c : "";
  }
  if (auto f = reinterpret_cast<GetInt>(Sym("openblas_get_parallel"))) {
    // OpenBLAS's interface/lapack/... docs: 0 sequential, 1 pthreads, 2 OpenMP.
    switch (f()) {
      case 0: info->threading = "sequential"; break;
      case 1: info->threading = "pthread"; break;
      case 2: info->threading = "openmp"; break;
      default: break;
    }
  }
  if (auto f = reinterpret_cast<GetInt>(Sym("openblas_get_num_threads"))) info->threads = f();
}

void ReadMkl(BlasInfo* info) {
  using GetVersion = void (*)(char*, int);
  using GetInt = int (*)();
  if (auto f = reinterpret_cast<GetVersion>(Sym("mkl_get_version_string"))) {
    char buf[256] = {0};
    f(buf, static_cast<int>(sizeof buf - 1));
    info->version = buf;
  }
  if (auto f = reinterpret_cast<GetInt>(Sym("mkl_get_max_threads"))) info->threads = f();
}

void ReadBlis(BlasInfo* info) {
  using GetVersion = const char* (*)();
  using GetLong = long (*)();
  if (auto f = reinterpret_cast<GetVersion>(Sym("bli_info_get_version_str"))) {
    const char* v = f();
    info->version = v != nullptr ? std::string("BLIS ") + v : "";
  }
  if (auto f = reinterpret_cast<GetLong>(Sym("bli_thread_get_num_threads"))) {
    info->threads = static_cast<int>(f());
  }
}

}  // namespace

std::string BlasVendorName(BlasVendor vendor) {
  switch (vendor) {
    case BlasVendor::kReference: return "reference (netlib)";
    case BlasVendor::kOpenBlas: return "OpenBLAS";
    case BlasVendor::kMkl: return "MKL";
    case BlasVendor::kBlis: return "BLIS";
    case BlasVendor::kAtlas: return "ATLAS";
    case BlasVendor::kFlexiBlas: return "FlexiBLAS";
    case BlasVendor::kUnknown: break;
  }
  return "unknown";
}

BlasVendor ClassifyBlas(const std::string& library_path, bool has_openblas_api, bool has_mkl_api,
                        bool has_blis_api, bool has_flexiblas_api) {
  if (has_flexiblas_api) return BlasVendor::kFlexiBlas;
  if (has_openblas_api) return BlasVendor::kOpenBlas;
  if (has_mkl_api) return BlasVendor::kMkl;
  if (has_blis_api) return BlasVendor::kBlis;
  // Debian's alternatives: /usr/lib/<triplet>/blas/libblas.so.3 (package libblas3, netlib's
  // reference implementation), /usr/lib/<triplet>/atlas/libblas.so.3 (libatlas3-base).
  if (library_path.find("/atlas/") != std::string::npos) return BlasVendor::kAtlas;
  if (library_path.find("openblas") != std::string::npos) return BlasVendor::kOpenBlas;
  if (library_path.find("/blas/libblas.so") != std::string::npos) return BlasVendor::kReference;
  return BlasVendor::kUnknown;
}

namespace {
// The resolved file that defines `address`, or "".
std::string FileOf(const void* address) {
  Dl_info where{};
  if (address == nullptr || dladdr(address, &where) == 0) return "";
  return Resolved(where.dli_fname);
}
}  // namespace

BlasInfo DetectBlas() {
  BlasInfo info;
  void* sgemm = Sym("sgemm_");
  if (sgemm == nullptr) return info;
  info.found = true;
  info.library = FileOf(sgemm);
  // A vendor's entry point counts only in the library that defines sgemm_ or beside it (Debian's
  // openblas-pthread/libblas.so.3 defines sgemm_, libopenblasp-r0.3.21.so next to it the
  // openblas_* calls): Debian lets libblas.so.3 and liblapack.so.3 point at different
  // implementations, and reference BLAS beside OpenBLAS's LAPACK loads libopenblas.so.0 from
  // another folder without it serving a single sgemm_.
  const std::string folder = info.library.substr(0, info.library.rfind('/') + 1);
  auto here = [&](const char* name) {
    std::string file = FileOf(Sym(name));
    return !file.empty() && file.compare(0, folder.size(), folder) == 0 &&
           file.find('/', folder.size()) == std::string::npos;
  };
  bool openblas = here("openblas_get_config");
  bool mkl = here("mkl_get_version_string");
  bool blis = here("bli_info_get_version_str");
  bool flexiblas = here("flexiblas_current_backend");
  info.vendor = ClassifyBlas(info.library, openblas, mkl, blis, flexiblas);
  if (openblas) ReadOpenBlas(&info);
  else if (mkl) ReadMkl(&info);
  else if (blis) ReadBlis(&info);
  if (info.vendor == BlasVendor::kReference) info.threading = "sequential";
  if (info.vendor == BlasVendor::kFlexiBlas) {
    using Current = int (*)(char*, size_t);
    if (auto f = reinterpret_cast<Current>(Sym("flexiblas_current_backend"))) {
      char buf[256] = {0};
      f(buf, sizeof buf - 1);
      info.version = std::string("backend ") + buf;
    }
  }
  return info;
}

bool SetBlasThreads(int threads) {
  if (threads < 1) return false;
  if (auto f = reinterpret_cast<void (*)(int)>(Sym("openblas_set_num_threads"))) {
    f(threads);
    return true;
  }
  // MKL: nothing to do. LibTorch sizes it in at::set_num_threads (aten/src/ATen/ParallelOpenMP.cpp
  // calls mkl_set_num_threads when AT_MKL_ENABLED), and a dlsym'd "mkl_set_num_threads_local" in
  // PyTorch's wheels resolves to the Fortran entry point (int* argument): calling it with an int
  // crashed every `run` on the GPU machine (torch 2.11.0+cu130, 2026-11-26).
  if (auto f = reinterpret_cast<void (*)(long)>(Sym("bli_thread_set_num_threads"))) {
    f(threads);
    return true;
  }
  return false;
}

std::string SlowBlasWarning(const BlasInfo& info) {
  if (!info.found) {
    return "LibTorch resolved no BLAS (no sgemm_ in this process): CPU matmuls use LibTorch's "
           "own slow fallback; install an optimized BLAS (Debian: apt-get install " +
           std::string(kOptimizedBlasPackage) + ", or bash .ci/setup.sh)";
  }
  if (info.vendor != BlasVendor::kReference) return "";
  return "LibTorch resolved the reference BLAS (" + info.library +
         "): CPU matmuls run ~17x slower than on OpenBLAS (6 vs 102 GFLOP/s, fp32 1024^3 on one "
         "EPYC core); install an optimized one (Debian: "
         "apt-get install " + std::string(kOptimizedBlasPackage) +
         ", or bash .ci/setup.sh); `shardtune env` shows what is resolved";
}

}  // namespace shardtune::exec
