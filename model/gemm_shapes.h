// The GEMMs a decoder-only transformer issues per micro-batch, by shape: what `shardtune probe`
// times and what the simulator looks up in the measured tables (simulator/kernel_time.h).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_spec.h"

namespace shardtune::model {

// Which product of an nn.Linear (y = x W^T, W [out, in]) a GEMM is; it decides the operands'
// layout (torch/csrc/autograd/FunctionsManual.cpp mm_mat1_backward / mm_mat2_backward):
//   kForward     y [m, n] = x [m, k] x W^T       (W [n, k] read transposed)
//   kInputGrad   dx [m, n] = dy [m, k] x W       (both contiguous)
//   kWeightGrad  dW [m, n] = dy^T [m, k] x x      (dy [k, m] read transposed)
enum class GemmRole { kForward, kInputGrad, kWeightGrad };

// One GEMM C[m, n] = A[m, k] x B[k, n] (2·m·n·k FLOPs), run `count` times (an MoE block's
// experts of one shape).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t count = 1;
  GemmRole role = GemmRole::kForward;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

// The GEMMs one micro-batch of `tokens` tokens runs forward through one block (q, k, v, o
// projections; gate, up and down, or up and down, of the MLP; an MoE block's routed experts at
// tokens·top_k / experts rows each, its shared experts and its router) and through the LM head.
// Backward runs two GEMMs per forward one [m, n, k]: dX [m, k] = dY [m, n] x W and
// dW [n, k] = dY^T x X (over the m rows). `layer`: which block (a dense prefix differs); MLA's
// chain of projections (model_spec.h MlaSpec) in place of q, k, v.
// `ep` (Plan::ep): under expert parallelism each rank runs its num_experts / ep local experts over
// the tokens the ep group routes to them, ep x tokens·top_k / num_experts rows each (the same
// FLOPs per rank, fewer and taller GEMMs).
std::vector<GemmShape> BlockForwardGemms(const ModelSpec& spec, int64_t tokens, int layer, int ep = 1);
GemmShape HeadForwardGemm(const ModelSpec& spec, int64_t tokens);
// The fused linear cross-entropy's head (Plan::loss_kernel kFusedLinear): the same product over
// chunks of FusedLinearChunkRows(tokens, V, H) rows (model/activations.h), whole chunks and the
// remainder; with WithBackward the three GEMMs each chunk runs (all of them in forward).
std::vector<GemmShape> FusedLinearHeadForwardGemms(const ModelSpec& spec, int64_t tokens);
std::vector<GemmShape> WithBackward(const std::vector<GemmShape>& forward);
// verl's fused log-prob heads (Plan::loss_kernel kVerlFusedTorch / kVerlFusedTriton), forward and
// backward together: the logits GEMM in forward; in backward the logits again and both gradient
// GEMMs. The torch backend runs them per 512-row chunk (model/activations.h kVerlFusedChunkRows);
// the Triton one's backward per 9504-entry vocabulary split (kVerlTritonBackwardSplit: d logits
// [T, split] from a recomputed logits tile, then dX += d_logits x W[split] and dW[split] =
// d_logits^T x X); its forward's logits live in the kernel's tiles, timed as the whole product.
std::vector<GemmShape> VerlFusedHeadGemms(const ModelSpec& spec, int64_t tokens, bool triton);

}  // namespace shardtune::model
