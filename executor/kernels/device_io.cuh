// Loads and stores of the kernels' element types in fp32 (executor/kernels/*.cu; nvcc only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace shardtune::exec::kernels {

template <typename T>
__device__ inline float Load(const T* p, int64_t i);
template <>
__device__ inline float Load<float>(const float* p, int64_t i) { return p[i]; }
template <>
__device__ inline float Load<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <>
__device__ inline float Load<__half>(const __half* p, int64_t i) { return __half2float(p[i]); }

// Round to nearest even.
template <typename T>
__device__ inline void Store(T* p, int64_t i, float v);
template <>
__device__ inline void Store<float>(float* p, int64_t i, float v) { p[i] = v; }
template <>
__device__ inline void Store<__nv_bfloat16>(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
template <>
__device__ inline void Store<__half>(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

// The sum of `v` over a block of `threads` (a multiple of 32, at most 1024) threads, returned to
// every thread. `scratch`: 32 floats of shared memory.
__device__ inline float BlockSum(float v, float* scratch, int threads) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < threads / 32; ++w) s += scratch[w];  // in order: deterministic
    scratch[0] = s;
  }
  __syncthreads();
  float total = scratch[0];
  __syncthreads();  // scratch is reused by the next call
  return total;
}

}  // namespace shardtune::exec::kernels
