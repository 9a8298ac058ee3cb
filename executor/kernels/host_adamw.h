// The host optimizer's kernels (CPU ranks and CPU offload): one pass over a shard's fp32 arrays
// for the whole AdamW update, and a deterministic fp64 sum of squares for gradient clipping.
// Torch-free: the caller splits a shard into ranges and runs them on its threads
// (executor/fsdp/optimizer.cc and fsdp_runtime.cc with at::parallel_for).
//
// Why one pass. torch.optim.AdamW on CPU tensors (what FSDP2's CPUOffloadPolicy runs: the
// foreach ops on CPU fall back to one ATen op per tensor, torch/optim/adam.py
// _multi_tensor_adam) streams each shard through memory once per op: mul_(p), lerp_(m, g),
// mul_(v), addcmul_(v, g, g), sqrt(v) into a fresh temporary, div_, add_, addcdiv_(p, m, t):
// 80 bytes per element, and the temporary is a new allocation each step (page faults for every
// shard above glibc's mmap threshold). This kernel reads p, g, m, v and writes p, m, v once:
// 28 bytes per element (the figure of PyTorch's own fused CUDA kernel,
// aten/src/ATen/native/cuda/fused_adamw_impl.cu), no temporary.
//
// The arithmetic is torch.optim.AdamW's single-tensor formula in the order its ops run, each
// scalar rounded to fp32 as ATen does for a double Scalar on a float tensor (opmath float):
//   p *= (1 - lr * wd)
//   m  = m * b1 + (1 - b1) * g
//   v  = v * b2 + (1 - b2) * g * g
//   p += (-lr / (1 - b1^t)) * (m / (sqrt(v) / sqrt(1 - b2^t) + eps))
// Element for element the same operations as the per-op path; where ATen's vectorised kernels
// fuse a multiply-add (vec::fmadd in add_ with alpha) the last bit can differ, so results match
// torch.optim.AdamW to within a few ulp, not bit for bit (tests/executor/optimizer_test.cc).
#pragma once

#include <cstdint>

namespace shardtune::exec {

// The per-step scalars of one AdamW update (computed in double, as torch.optim does in Python,
// then rounded to fp32 once).
struct HostAdamWScalars {
  float decay = 1;         // 1 - lr * weight_decay
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)
  float eps = 1e-8f;
  float neg_step_size = 0;  // -lr / (1 - beta1^t)
};

// The scalars for step `step` (>= 1) at learning rate `lr`.
HostAdamWScalars MakeHostAdamWScalars(double lr, double beta1, double beta2, double eps,
                                      double weight_decay, int64_t step);

// Updates elements [begin, end) of the shard: p, m, v in place from g.
void HostAdamWRange(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end,
                    const HostAdamWScalars& s);

// Sum of squares of x[begin, end) in fp64, accumulated in an order fixed by the range alone (so a
// caller that splits a shard into fixed blocks and adds the blocks' sums in order gets the same
// bits whatever its thread count).
double HostSumOfSquares(const float* x, int64_t begin, int64_t end);

}  // namespace shardtune::exec
