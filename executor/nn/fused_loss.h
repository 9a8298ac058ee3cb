// The fused linear cross-entropy (plan loss_kernel "fused_linear", model::LossKernel): the LM
// head's matmul and the cross-entropy over chunks of the tokens, with both gradients computed in
// forward, so the [tokens, vocab] logits and their fp32 copy never exist whole. Liger-Kernel's
// LigerFusedLinearCrossEntropyFunction (src/liger_kernel/ops/fused_linear_cross_entropy.py) with
// ATen ops in place of its Triton kernel: the same chunk rule (model::FusedLinearChunkRows), the
// softmax and its gradient written in place over the chunk's fp32 logits, grad_input and
// grad_weight kept for backward, which scales them by the incoming gradient. What it holds is
// what model/activations.cc FusedLinearHead counts (the estimate of a fused run).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace shardtune::exec {

// scale x sum over the rows of x [N, H] of -log softmax(z)[label], z = x W^T [N, V] (W [V, H];
// with softcap > 0, z = tanh(x W^T / softcap) x softcap, Gemma 2's final soft-capping), computed
// in fp32 whatever the inputs' dtype. Rows whose label is `ignore_index` count nothing (as
// F.cross_entropy's). `scale`: a 0-dim fp32 tensor on x's device (1 / counted labels for a mean;
// a tensor, so a GPU run never waits for the count). Returns a 0-dim fp32 loss whose backward
// yields the gradients of x (when it requires grad) and W (when it requires grad).
// REQUIRES: x 2-D contiguous, W [V, H] in x's dtype, labels int64 [N].
at::Tensor FusedLinearCrossEntropy(const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& labels, const at::Tensor& scale,
                                   double softcap = 0, int64_t ignore_index = -100);

}  // namespace shardtune::exec
