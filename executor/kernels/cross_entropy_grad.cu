// The cross-entropy gradient kernel of cross_entropy_grad.h: one thread block per row, the row
// read twice (an online max and sum of exponentials, Milakov & Gimelshein 2018, "Online
// normalizer calculation for softmax", Algorithm 3; then the gradient) and written once in place.
#include "executor/kernels/cross_entropy_grad.h"
#include "executor/kernels/device_io.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

namespace shardtune::exec::kernels {
namespace {

constexpr int kThreads = 256;

// Two partial (max, sum of exp(x - max)) pairs as one.
__device__ void Combine(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  float mm = fmaxf(m, m2);
  s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
  m = mm;
}

__device__ float Capped(float x, float softcap) {
  return softcap > 0 ? softcap * tanhf(x / softcap) : x;
}

template <typename T>
__global__ void CrossEntropyGradKernel(T* logits, int64_t vocab, const int64_t* labels,
                                       int64_t ignore_index, const float* scale, float softcap,
                                       float* loss_rows, bool write_grad) {
  const int64_t row = blockIdx.x;
  T* z = logits + row * vocab;
  const int64_t label = labels[row];
  const bool counted = label != ignore_index && label >= 0 && label < vocab;
  __shared__ float shared_m[kThreads / 32], shared_s[kThreads / 32];
  __shared__ float row_m, row_s, z_label;
  if (threadIdx.x == 0) z_label = counted ? Capped(Load(z, label), softcap) : 0.f;
  // Pass 1: the online max and sum over this thread's strided entries, then over the block.
  float m = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    float x = Capped(Load(z, j), softcap);
    if (x > m) {
      s = (m == -INFINITY ? 0.f : s * __expf(m - x)) + 1.f;
      m = x;
    } else {
      s += __expf(x - m);
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    float m2 = __shfl_down_sync(0xffffffffu, m, offset);
    float s2 = __shfl_down_sync(0xffffffffu, s, offset);
    Combine(m, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = shared_m[0], bs = shared_s[0];
    for (int w = 1; w < kThreads / 32; ++w) Combine(bm, bs, shared_m[w], shared_s[w]);
    row_m = bm;
    row_s = bs;
    loss_rows[row] = counted ? logf(bs) + bm - z_label : 0.f;
  }
  __syncthreads();  // z_label is read before pass 2 overwrites z[label]
  if (!write_grad) return;
  // Pass 2: the gradient, in place.
  const float g = counted ? *scale : 0.f;
  const float mm = row_m, inv_s = 1.f / row_s;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    float raw = Load(z, j);
    float x = Capped(raw, softcap);
    float d = (__expf(x - mm) * inv_s - (j == label ? 1.f : 0.f)) * g;
    if (softcap > 0) {
      float t = tanhf(raw / softcap);
      d *= 1.f - t * t;
    }
    Store(z, j, d);
  }
}

template <typename T>
int Launch(const CrossEntropyGradArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  CrossEntropyGradKernel<T><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(
      static_cast<T*>(a.logits), a.vocab, a.labels, a.ignore_index, a.scale, a.softcap,
      a.loss_rows, a.write_grad);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchCrossEntropyGrad(const CrossEntropyGradArgs& args, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (args.type) {
    case ElementType::kFp32: return Launch<float>(args, s);
    case ElementType::kBf16: return Launch<__nv_bfloat16>(args, s);
    case ElementType::kFp16: return Launch<__half>(args, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace shardtune::exec::kernels
