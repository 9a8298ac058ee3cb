// Which BLAS this process resolved at run time and how many threads it runs. Debian's LibTorch
// calls whatever libblas.so.3 the alternatives system points at; a fresh machine has only the
// reference (netlib) BLAS, 17x slower than OpenBLAS on one core (`shardtune env`: 6.0 vs 102
// GFLOP/s on the 2-core EPYC development VM, 2026-11-25; issue #22). Torch-free: the
// library is found through the dynamic linker (dlsym + dladdr), as `ldd` cannot say which of
// several candidates a process really bound.
#pragma once

#include <string>

namespace shardtune::exec {

enum class BlasVendor { kUnknown, kReference, kOpenBlas, kMkl, kBlis, kAtlas, kFlexiBlas };

struct BlasInfo {
  bool found = false;       // some library of this process defines sgemm_
  std::string library;      // the file that defines sgemm_, symbolic links resolved
  BlasVendor vendor = BlasVendor::kUnknown;
  std::string version;      // openblas_get_config(), mkl_get_version_string(), ... ("" unknown)
  std::string threading;    // "pthread", "openmp", "sequential" or "" (unknown)
  int threads = 0;          // the BLAS's own thread count (OpenBLAS, MKL, BLIS); 0 unknown
};

// The vendor's name as people write it ("OpenBLAS", "reference (netlib)", ...).
std::string BlasVendorName(BlasVendor vendor);

// The vendor a library path and its exported symbols say: an OpenBLAS/MKL/BLIS/FlexiBLAS entry
// point decides; otherwise Debian's alternatives folders (".../blas/libblas.so.3" is the
// reference BLAS, ".../atlas/..." ATLAS). Pure: tested without loading anything.
BlasVendor ClassifyBlas(const std::string& library_path, bool has_openblas_api, bool has_mkl_api,
                        bool has_blis_api, bool has_flexiblas_api);

// Looks up sgemm_ in this process (LibTorch must already be loaded, as in shardtune-exec).
BlasInfo DetectBlas();

// Sets the BLAS's own thread pool where it has one of its own (OpenBLAS pthread builds, MKL,
// BLIS): LibTorch's at::set_num_threads sizes only the OpenMP pool, so N ranks of a pthread
// OpenBLAS would otherwise each start one BLAS thread per core. Returns false when the BLAS has
// no such entry point (reference BLAS; OpenMP builds follow omp_set_num_threads).
bool SetBlasThreads(int threads);

// "" when `info` is an optimized BLAS; otherwise one line saying which library was resolved,
// what it costs and the fix (Debian: apt-get install libopenblas0-openmp).
std::string SlowBlasWarning(const BlasInfo& info);

}  // namespace shardtune::exec
