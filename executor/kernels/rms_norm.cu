// The RMSNorm kernels of rms_norm.h. Forward and dx: one block per row, the row's sums reduced in
// a fixed order (deterministic). dw: column sums over fixed row chunks into the workspace, then
// the chunks summed in order.
#include <cuda_runtime.h>

#include <algorithm>

#include "executor/kernels/device_io.cuh"
#include "executor/kernels/rms_norm.h"

namespace shardtune::exec::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxChunks = 64;  // row chunks of the dw pass

template <typename T, typename W>
__global__ void RmsNormForwardKernel(const T* x, const W* w, T* y, float* rstd, int64_t hidden,
                                     float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    float v = Load(xr, j);
    ss += v * v;
  }
  ss = BlockSum(ss, scratch, kThreads);
  const float rs = rsqrtf(ss / static_cast<float>(hidden) + eps);
  if (threadIdx.x == 0) rstd[row] = rs;
  T* yr = y + row * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) Store(yr, j, Load(xr, j) * rs * Load(w, j));
}

template <typename T, typename W>
__global__ void RmsNormBackwardDxKernel(const T* dy, const T* x, const W* w, const float* rstd,
                                        T* dx, int64_t hidden) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * hidden;
  const T* gr = dy + row * hidden;
  const float rs = rstd[row];
  float dot = 0.f;  // sum_j dy*w*x̂
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    dot += Load(gr, j) * Load(w, j) * Load(xr, j) * rs;
  }
  dot = BlockSum(dot, scratch, kThreads) / static_cast<float>(hidden);
  T* dxr = dx + row * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float xhat = Load(xr, j) * rs;
    Store(dxr, j, rs * (Load(gr, j) * Load(w, j) - xhat * dot));
  }
}

// partial[c, j] = sum over rows r = c, c + chunks, ... of dy[r, j] * x[r, j] * rstd[r].
template <typename T>
__global__ void RmsNormBackwardDwPartialKernel(const T* dy, const T* x, const float* rstd,
                                               float* partial, int64_t rows, int64_t hidden,
                                               int chunks) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int c = blockIdx.y;
  if (j >= hidden) return;
  float s = 0.f;
  for (int64_t r = c; r < rows; r += chunks) s += Load(dy + r * hidden, j) * Load(x + r * hidden, j) * rstd[r];
  partial[static_cast<int64_t>(c) * hidden + j] = s;
}

template <typename W>
__global__ void RmsNormBackwardDwSumKernel(const float* partial, W* dw, int64_t hidden, int chunks) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= hidden) return;
  float s = 0.f;
  for (int c = 0; c < chunks; ++c) s += partial[static_cast<int64_t>(c) * hidden + j];
  Store(dw, j, s);
}

int Chunks(int64_t rows) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, kMaxChunks))); }

template <typename T, typename W>
int Forward(const RmsNormForwardArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  RmsNormForwardKernel<T, W><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(
      static_cast<const T*>(a.x), static_cast<const W*>(a.w), static_cast<T*>(a.y), a.rstd,
      a.hidden, a.eps);
  return static_cast<int>(cudaGetLastError());
}

template <typename T, typename W>
int Backward(const RmsNormBackwardArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  RmsNormBackwardDxKernel<T, W><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(
      dy, x, static_cast<const W*>(a.w), a.rstd, static_cast<T*>(a.dx), a.hidden);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || a.dw == nullptr) return static_cast<int>(e);
  const int chunks = Chunks(a.rows);
  const unsigned columns = static_cast<unsigned>((a.hidden + kThreads - 1) / kThreads);
  RmsNormBackwardDwPartialKernel<T><<<dim3(columns, static_cast<unsigned>(chunks)), kThreads, 0, stream>>>(
      dy, x, a.rstd, a.workspace, a.rows, a.hidden, chunks);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
  RmsNormBackwardDwSumKernel<W><<<columns, kThreads, 0, stream>>>(a.workspace, static_cast<W*>(a.dw),
                                                                  a.hidden, chunks);
  return static_cast<int>(cudaGetLastError());
}

// Dispatch over (type, weight_type): the weight in the activations' type or in fp32.
template <template <typename, typename> class F, typename Args>
int Dispatch(const Args& a, cudaStream_t s) {
  const bool w32 = a.weight_type == ElementType::kFp32;
  switch (a.type) {
    case ElementType::kFp32:
      return w32 ? F<float, float>::Run(a, s) : static_cast<int>(cudaErrorInvalidValue);
    case ElementType::kBf16:
      return w32 ? F<__nv_bfloat16, float>::Run(a, s)
                 : a.weight_type == ElementType::kBf16 ? F<__nv_bfloat16, __nv_bfloat16>::Run(a, s)
                                                       : static_cast<int>(cudaErrorInvalidValue);
    case ElementType::kFp16:
      return w32 ? F<__half, float>::Run(a, s)
                 : a.weight_type == ElementType::kFp16 ? F<__half, __half>::Run(a, s)
                                                       : static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <typename T, typename W>
struct ForwardOp {
  static int Run(const RmsNormForwardArgs& a, cudaStream_t s) { return Forward<T, W>(a, s); }
};
template <typename T, typename W>
struct BackwardOp {
  static int Run(const RmsNormBackwardArgs& a, cudaStream_t s) { return Backward<T, W>(a, s); }
};

}  // namespace

int LaunchRmsNormForward(const RmsNormForwardArgs& args, void* stream) {
  return Dispatch<ForwardOp>(args, static_cast<cudaStream_t>(stream));
}

int64_t RmsNormBackwardWorkspaceFloats(int64_t rows, int64_t hidden) {
  return static_cast<int64_t>(Chunks(rows)) * hidden;
}

int LaunchRmsNormBackward(const RmsNormBackwardArgs& args, void* stream) {
  return Dispatch<BackwardOp>(args, static_cast<cudaStream_t>(stream));
}

}  // namespace shardtune::exec::kernels
