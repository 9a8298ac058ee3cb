// RMSNorm forward and backward as CUDA kernels (issue #21: the executor's norms as one kernel
// each way instead of the ~8 ATen ops of HF's LlamaRMSNorm). The same computation and the same
// saved tensors as F.rms_norm's fused kernel (aten/src/ATen/native/cuda/layer_norm_kernel.cu,
// rms_norm; torchtitan's RMSNorm) and the executor's FusedRmsNorm (executor/nn/torchtitan_ops.h):
// forward keeps x and rstd [rows] (fp32) for backward, nothing else. Torch-free (raw pointers,
// a cudaStream_t passed as void*), built with nvcc wherever the CUDA toolkit is, tested against
// the host reference below (tests/executor/rms_norm_gpu_test.cc, ctest label gpu), and the
// reference against the ATen FusedRmsNorm (tests/executor/torchtitan_ops_test.cc). Not yet
// called by the executor: that needs a CUDA LibTorch (a GPU session) to build and measure.
#pragma once

#include <cstdint>

#include "executor/kernels/element_type.h"

namespace shardtune::exec::kernels {

struct RmsNormForwardArgs {
  const void* x = nullptr;  // [rows, hidden] row-major, `type`
  const void* w = nullptr;  // [hidden], `weight_type`
  void* y = nullptr;        // [rows, hidden], `type`
  float* rstd = nullptr;    // [rows] fp32: 1 / sqrt(mean(x^2) + eps)
  ElementType type = ElementType::kBf16;
  ElementType weight_type = ElementType::kBf16;
  int64_t rows = 0, hidden = 0;
  float eps = 1e-6f;
};

// y = x * rstd * w in fp32, stored in `type` (round to nearest even), one block per row.
int LaunchRmsNormForward(const RmsNormForwardArgs& args, void* stream);

struct RmsNormBackwardArgs {
  const void* dy = nullptr;   // [rows, hidden], `type`
  const void* x = nullptr;    // [rows, hidden], `type` (saved by forward)
  const void* w = nullptr;    // [hidden], `weight_type`
  const float* rstd = nullptr;  // [rows] (saved by forward)
  void* dx = nullptr;         // [rows, hidden], `type`
  void* dw = nullptr;         // [hidden], `weight_type`; nullptr: the weight has no gradient
  float* workspace = nullptr;  // RmsNormBackwardWorkspaceFloats(rows, hidden) floats (dw only)
  ElementType type = ElementType::kBf16;
  ElementType weight_type = ElementType::kBf16;
  int64_t rows = 0, hidden = 0;
};

// Floats of device workspace LaunchRmsNormBackward needs for dw: per-chunk column sums.
int64_t RmsNormBackwardWorkspaceFloats(int64_t rows, int64_t hidden);

// x̂ = x * rstd; dx = rstd * (dy*w - x̂ * mean(dy*w*x̂)) per row; dw = sum over rows of dy * x̂,
// summed deterministically (fixed row chunks, then their sum in order). All in fp32.
int LaunchRmsNormBackward(const RmsNormBackwardArgs& args, void* stream);

// The host reference in double of both passes: x, w, dy as floats (the values the device reads,
// already rounded to their types); y, dx [rows x hidden], rstd [rows], dw [hidden] as doubles.
void RmsNormReference(const float* x, const float* w, const float* dy, int64_t rows,
                      int64_t hidden, double eps, double* y, double* rstd, double* dx, double* dw);

}  // namespace shardtune::exec::kernels
