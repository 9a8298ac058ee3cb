// One pass of the fused linear cross-entropy's chunk as a CUDA kernel (issue #21): for each row
// of a chunk of logits z [rows, V] (bf16, fp16 or fp32), the row's loss and, written over z in
// its own dtype, the row's gradient, as Liger-Kernel's liger_cross_entropy_kernel does
// (src/liger_kernel/ops/cross_entropy.py): the executor's ATen path (executor/nn/fused_loss.cc)
// makes an fp32 copy of the chunk and runs about nine passes over it; this reads the row twice
// and writes it once, in place. Torch-free (raw pointers and a cudaStream_t passed as void*), so
// it builds with nvcc wherever the CUDA toolkit is and is tested against the host reference
// below (tests/executor/cross_entropy_grad_gpu_test.cc, ctest label gpu). Not yet called by the
// executor: wiring it into fused_loss.cc needs a CUDA LibTorch (a GPU session) to build and
// measure.
#pragma once

#include <cstdint>

#include "executor/kernels/element_type.h"

namespace shardtune::exec::kernels {

struct CrossEntropyGradArgs {
  void* logits = nullptr;          // [rows, vocab] row-major, `type`; overwritten by the gradient
  ElementType type = ElementType::kBf16;
  int64_t rows = 0, vocab = 0;
  const int64_t* labels = nullptr;  // [rows]; ignore_index rows count nothing (gradient 0)
  int64_t ignore_index = -100;
  const float* scale = nullptr;     // one float on the device: d loss_total / d loss_row
  float softcap = 0;                // > 0: z = softcap x tanh(x / softcap) (Gemma 2), chained
  float* loss_rows = nullptr;       // [rows] fp32: logsumexp(z) - z[label] (0 for ignored rows)
  bool write_grad = true;           // false: losses only (no backward needed)
};

// Per row r with label y (counted: y != ignore_index):
//   m = max_j z_j, s = sum_j exp(z_j - m), loss_r = counted x (log s + m - z_y)
//   grad_rj = counted x scale x (exp(z_j - m) / s - [j == y]) [x (1 - tanh^2) with softcap]
// in fp32, stored in `type` (rounded to nearest even). The same formulas as the ATen path.
// Launch on `stream` (a cudaStream_t; nullptr: the legacy default stream). Returns the CUDA
// error code of the launch (0: success).
int LaunchCrossEntropyGrad(const CrossEntropyGradArgs& args, void* stream);

// The host reference of the same computation, in double: `logits` as floats (the values the
// device reads, already rounded to `type`), the gradient returned as doubles before rounding.
void CrossEntropyGradReference(const float* logits, int64_t rows, int64_t vocab,
                               const int64_t* labels, int64_t ignore_index, double scale,
                               double softcap, double* grad, double* loss_rows);

}  // namespace shardtune::exec::kernels
