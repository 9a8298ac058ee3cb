// The ops `run --modeling torchtitan` runs where torchtitan's model code differs from
// transformers' in what autograd saves (model/activation_recipes.cc and model/activations.cc
// model the same): the fused RMSNorm and the MoE's token dispatch, with expert parallelism's
// all-to-alls; and GroupedLinear, the grouped GEMM both codes' experts run. Sources: torchtitan/models/common/nn_modules.py (RMSNorm = nn.RMSNorm, i.e.
// F.rms_norm, fused from torch 2.8), torchtitan/models/common/moe.py (TokenChoiceTopKRouter,
// GroupedExperts, MoE.forward) and models/common/token_dispatcher.py (LocalTokenDispatcher,
// AllToAllTokenDispatcher), torchtitan main of 2026-08-21.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardtune::exec {

class Communicator;

// F.rms_norm(x, [H], w, eps) as its fused kernel computes it: in fp32, y = (x · rstd · w) cast
// to x's dtype, rstd = rsqrt(mean(x²) + eps) per row; autograd saves x and rstd [.., 1] (fp32)
// only, and backward recomputes x̂ from them (aten/src/ATen/native/layer_norm.cpp rms_norm,
// cuda/layer_norm_kernel.cu). w: [H], x's dtype or fp32.
at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps);

// The integers of `t` (any integer dtype, any device) in a host vector: per-expert counts and
// split sizes, which the host needs to slice and to size collectives.
std::vector<int64_t> ToHost(const at::Tensor& t);

// torch._grouped_mm as transformers 5's grouped_mm_experts_forward runs it (integrations/moe.py
// _grouped_linear; its fallback op transformers::grouped_mm_fallback loops over the experts the
// same way): rows [S, in] sorted by expert, counts[e] of them for expert e; each expert's rows
// times its weight, written into one output [S, out] allocated once. `weights`: one [E, in, out]
// tensor (x @ W[e]: GPT-OSS's is_transposed layout) or E tensors [out, in] (F.linear's: the
// executor's per-expert modules). Autograd saves the rows and the weights (_grouped_mm's
// derivative saves both operands); backward makes the rows' gradient [S, in] and each weight's,
// zeros for an expert no row chose. REQUIRES: sum(counts) == S, one count per expert.
// With `saved` (op-level SAC's replay, recompute.h SacTape: the same product kept from the
// checkpoint's forward) the output is `saved`'s bytes and nothing is multiplied; the backward is
// the same.
at::Tensor GroupedLinear(const at::Tensor& rows, const std::vector<int64_t>& counts,
                         at::TensorList weights, const at::Tensor& saved = at::Tensor());

// c10d all_to_all_single with split sizes as an autograd node (torch.distributed's
// _functional_collectives all_to_all_single_autograd): rows x[sum(input_splits), ...] go
// input_splits[j] to ep rank j; returns [sum(output_splits), ...]; backward is the inverse
// all-to-all of the gradient. Saves nothing but the splits.
at::Tensor AllToAllRows(const at::Tensor& x, Communicator& ep, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits);

// One MoE layer's routed tokens after AllToAllTokenDispatcher.dispatch (LocalTokenDispatcher's
// when `ep` is null): rows [R, H] in expert-major order for this rank's E / ep local experts.
struct RoutedTokens {
  at::Tensor rows;                  // [R, H]: the local experts' inputs, expert by expert
  std::vector<int64_t> per_expert;  // rows of each local expert (E / ep counts)
  // For the combine.
  at::Tensor token_of_row;       // [T·k] int64: the token each expert-sorted row came from
  at::Tensor scores_of_row;      // [T·k] fp32: its routing score
  at::Tensor permuted_indices;   // [R] int64 (ep > 1): rank-major row of each expert-major row
  std::vector<int64_t> input_splits, output_splits;  // (ep > 1) rows to / from each ep rank
};

// Dispatch: the T·k (token, expert) pairs sorted by expert with a stable argsort
// (_local_reorder: x[token_indices_experts_sorted]); with `ep` (size > 1) the per-expert counts
// are exchanged by an equal all-to-all (_token_count_exchange, their sums become the host split
// lists), the rows travel by AllToAllRows and are permuted from rank-major to expert-major
// (_permute). flat [T, H]; scores [T, k] fp32 (with their graph); expert_ids [T, k] int64.
// REQUIRES: num_experts % ep size == 0.
RoutedTokens DispatchTokens(const at::Tensor& flat, const at::Tensor& scores,
                            const at::Tensor& expert_ids, int64_t num_experts, Communicator* ep);

// Combine: the rows back to their ranks (_unpermute, the inverse all-to-all), each times its
// score in fp32 and cast back ((out.to(float32) · score).to(dtype), which saves the fp32 copy for
// the score's gradient), summed into zeros [T, H] by scatter_add over their tokens.
at::Tensor CombineTokens(const at::Tensor& expert_out, const RoutedTokens& r, const at::Tensor& flat,
                         Communicator* ep);

}  // namespace shardtune::exec
