// The transformer's shared pieces (transformer.cc) that its other files (vision_tower.cc) call:
// a parameter lookup and the memory-bound pieces as pure functions (recompute.h PieceFn).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "executor/nn/transformer.h"

namespace shardtune::exec::internal {

// The gathered parameter `name` (a fatal error when the table lacks it).
const at::Tensor& Get(const ParamTable& p, const std::string& name);
// x.to(float32) * rsqrt(mean(x^2) + eps): every HF RMSNorm's normalised input.
at::Tensor NormalizedFp32(const at::Tensor& x, double eps);
// LlamaRMSNorm / Qwen2RMSNorm: weight * x_hat.to(input dtype). inputs: x, weight.
at::Tensor RmsNormPiece(const std::vector<at::Tensor>& in, double eps);
// nn.LayerNorm over the last dim. inputs: x, weight[, bias].
at::Tensor LayerNormPiece(const std::vector<at::Tensor>& in, double eps);
// silu(gate) x up. inputs: gate, up.
at::Tensor SwiGluPiece(const std::vector<at::Tensor>& in, double unused);
// GELU, tanh-approximated when `tanh` != 0, else exact (erf). inputs: the pre-activation.
at::Tensor GeluPiece(const std::vector<at::Tensor>& in, double tanh);
// transformers' rotate_half over the last dim: cat(-x2, x1) of its halves.
at::Tensor RotateHalf(const at::Tensor& x);
// The runs of equal values in `lengths` (packed sequences, vision chunks), in order: each run's
// first element's offset (the sum of the lengths before it), its count and its length, so each
// run can be attended as one batch [count, heads, length, d].
struct EqualRun {
  int64_t start = 0;
  int64_t count = 0;
  int64_t length = 0;
};
std::vector<EqualRun> EqualRuns(const std::vector<int64_t>& lengths);

}  // namespace shardtune::exec::internal
