// SHARDTUNE_NCCL_CHECK / SHARDTUNE_CUDA_CHECK: a failed NCCL or CUDA call becomes an
// exec::BackendError naming the call, file:line, the library's message and the rank (README.md
// "Conventions", as nccl-tests' NCCLCHECK). Only translation units built with SHARDTUNE_WITH_NCCL
// include this.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "executor/errors.h"

namespace shardtune::exec::internal {

inline std::string FailureText(const char* call, const char* file, int line, const char* why,
                               int rank) {
  return std::string(call) + " failed at " + file + ":" + std::to_string(line) + " on rank " +
         std::to_string(rank) + ": " + why;
}

}  // namespace shardtune::exec::internal

// `rank` must be in scope where the macros are used (the caller's global rank, or -1).
#define SHARDTUNE_NCCL_CHECK(call, rank)                                              \
  do {                                                                                \
    ncclResult_t shardtune_nccl_rc = (call);                                          \
    if (shardtune_nccl_rc != ncclSuccess) {                                           \
      throw ::shardtune::exec::BackendError(::shardtune::exec::internal::FailureText( \
          #call, __FILE__, __LINE__, ncclGetErrorString(shardtune_nccl_rc), (rank))); \
    }                                                                                 \
  } while (0)

#define SHARDTUNE_CUDA_CHECK(call, rank)                                              \
  do {                                                                                \
    cudaError_t shardtune_cuda_rc = (call);                                           \
    if (shardtune_cuda_rc != cudaSuccess) {                                           \
      throw ::shardtune::exec::BackendError(::shardtune::exec::internal::FailureText( \
          #call, __FILE__, __LINE__, cudaGetErrorString(shardtune_cuda_rc), (rank))); \
    }                                                                                 \
  } while (0)
