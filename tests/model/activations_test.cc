// Activation ledger: the saved tensors of an HF Llama block and the loss path follow the byte
// counts derived by hand from the modeling code, written here as formulas.
#include "model/activations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/autograd_ledger.h"
#include "model/presets.h"

namespace shardtune::model {
namespace {

ActivationOptions Bf16(Modeling m = Modeling::kHf) {
  ActivationOptions o;
  o.modeling = m;
  o.seq_len = 4096;
  return o;
}

// Bf16() with the loss head of `kernel` on bf16 logits: verl's and trl's heads take the logits
// without the fp32 upcast.
ActivationOptions Bf16WithLossKernel(LossKernel kernel) {
  ActivationOptions o = Bf16();
  o.loss_kernel = kernel;
  o.loss_fp32_upcast = false;
  return o;
}

// HF LlamaDecoderLayer, bf16, SDPA, per token:
//   each RMSNorm: fp32 input copy 4H + rsqrt 4 + normalized 2H, output 2H (saved by the linears)
//   attention: rope saves nothing per token (cos/sin need no gradient, so q*cos saves only cos);
//              q_embed 2qd, k_embed 2kv, v 2kv, output 2qd (sdpa), logsumexp 4·heads
//   MLP: gate 2F (silu), silu 2F and up 2F (mul), product 2F (down_proj)
// That is 20H + 4kv + 8F (+ lse) for Llama (qd = H), which an H100 run of HF Llama-3.2-1B under
// FSDP2 measured exactly (tests/data/validation/fsdp2_h100_measured.json: 4.816 GiB after
// forward at micro-batch 1 x 2048, logits included).
TEST(ActivationsTest, HfLlamaBlockSavedMatchesHandCount) {
  ModelSpec s = FindModelPreset("llama3-8b");
  double h = 4096, qd = 4096, kv = 1024, f = 14336, heads = 32;
  double expected = 2 * (4 * h + 4 + 2 * h + 2 * h) + (2 * qd * 2 + 2 * kv * 2 + 4 * heads) + 8 * f;
  auto b = ComputeBlockActivations(s, Bf16());
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, expected);
  EXPECT_DOUBLE_EQ(b.checkpoint_input_per_token, 2 * h);
  EXPECT_LT(b.selective_per_token, b.full.saved_per_token);
  EXPECT_GT(b.full.backward_peak_per_token, b.full.saved_per_token);
}

// The kernels an HF Llama block's forward launches, as the PyTorch profiler counted them on the
// lent H100 (FSDP2 + Llama-3.2-1B, 2026-11-26, one block outside FSDP2's unshard hook): each
// RMSNorm 8 (to, pow, mean, add eps, rsqrt, mul, to, weight mul), q/k/v 3, rope 5 for q and for k
// (mul cos, neg, cat, mul sin, add), SDPA 2 (cuDNN's memset and kernel; the ledger's lse and
// output ops), o_proj 1, residual add 1, gate 2, up 2, silu, mul, down, residual add: 41. The
// gate and up projections' 2 are a memset and a split-K GEMM cuBLASLt chose for that shape, which
// the ledger does not model (one op per Linear): 39. The host model issues one launch per op.
TEST(ActivationsTest, HfLlamaBlockForwardOpsAreTheTracedKernels) {
  ModelSpec s = FindModelPreset("llama3.2-1b");
  const int traced = 2 * 8 + 3 + 2 * 5 + 2 + 1 + 1 + 2 + 2 + 1 + 1 + 1 + 1;
  EXPECT_EQ(traced, 41);
  EXPECT_EQ(ComputeBlockActivations(s, Bf16()).full.forward_ops, traced - 2);
}

// torchtitan: fused rms_norm saves input 2H + rstd 4; rope's complex mul saves only freqs_cis.
TEST(ActivationsTest, TorchtitanLlamaBlockSavedMatchesHandCount) {
  ModelSpec s = FindModelPreset("llama3-8b");
  double h = 4096, qd = 4096, kv = 1024, f = 14336, heads = 32;
  double norms = 2 * (2 * h + 4 + 2 * h);
  double attn = 2 * qd + 2 * kv + 2 * kv + 2 * qd + 4 * heads;
  auto b = ComputeBlockActivations(s, Bf16(Modeling::kTorchtitan));
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, norms + attn + 8 * f);
}

// torchtitan's op SAC (activation_checkpoint.py SelectiveAC: save the compute ops' outputs
// except every second mm of the block, counted in forward order wq wk wv wo w1 w3 w2): the
// block keeps its input, wq, wv, w1 and w2 outputs and SDPA's output and logsumexp; backward
// reruns wk, wo and w3.
TEST(ActivationsTest, TorchtitanSelectiveSavesEveryOtherMatmul) {
  ModelSpec s = FindModelPreset("llama3-8b");
  double h = 4096, qd = 4096, kv = 1024, f = 14336, heads = 32;
  ActivationOptions o = Bf16(Modeling::kTorchtitan);
  o.seq_len = 8192;
  auto b = ComputeBlockActivations(s, o);
  double saved = 2 * (h + qd + kv + f + h) + 2 * qd + 4 * heads;
  EXPECT_DOUBLE_EQ(b.selective_per_token, saved);
  EXPECT_DOUBLE_EQ(b.selective_recompute_matmul_flops_per_token, 2 * (h * kv + qd * h + h * f));
  // A biased projection is aten.addmm, in neither torchtitan's save list nor its mm count:
  // recomputed (Qwen2's q/k/v bias: the counted mms are then wo, w1, w3, w2; w1 and w2 are the
  // even ones, so wo and w3 are saved and q, k, v, w1, w2 rerun).
  s.qkv_bias = true;
  auto biased = ComputeBlockActivations(s, o);
  EXPECT_DOUBLE_EQ(biased.selective_per_token, 2 * (h + h + f) + 2 * qd + 4 * heads);
  EXPECT_DOUBLE_EQ(biased.selective_recompute_matmul_flops_per_token,
                   2 * (h * qd + 2 * h * kv + h * f + f * h));
  EXPECT_DOUBLE_EQ(biased.selective_recompute_attention, 0.0);
  // Eager attention's bmm and softmax are not in the save list: nothing of the attention core is
  // kept and backward reruns it whole.
  s.qkv_bias = false;
  o.attention = Attention::kEager;
  auto eager = ComputeBlockActivations(s, o);
  EXPECT_DOUBLE_EQ(eager.selective_per_token, 2 * (h + qd + kv + f + h));
  EXPECT_DOUBLE_EQ(eager.selective_recompute_matmul_flops_per_token, 2 * (h * kv + qd * h + h * f));
  EXPECT_DOUBLE_EQ(eager.selective_recompute_attention, 1.0);
  // HF's modeling keeps the approximation (every projection output saved, nothing rerun).
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(FindModelPreset("llama3-8b"), Bf16())
                       .selective_recompute_matmul_flops_per_token, 0.0);
}

// torchtitan's MoE block (qwen3 / llama4 parallelize.py `_op_sac_save_list`, activation_checkpoint.py
// with per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]): the router's gate mm
// is force-recomputed before the counter moves, the experts' torch._grouped_mm is not in the save
// list, so the counted mms are wq, wk, wv, wo: the block keeps its input, wq, wv and SDPA's output
// and logsumexp; backward reruns wk, wo, the router and all three expert GEMMs (top_k rows per
// token each). Qwen3-30B-A3B: H 2048, 32 x 128 query, 4 x 128 KV, 128 experts of 768, top 8.
TEST(ActivationsTest, TorchtitanSelectiveOnAnMoeBlockKeepsOnlyAttention) {
  const ModelSpec s = FindModelPreset("qwen3-30b-a3b");
  const double h = 2048, qd = 32 * 128, kv = 4 * 128, fe = 768, k = 8, experts = 128, heads = 32;
  ActivationOptions o = Bf16(Modeling::kTorchtitan);
  o.seq_len = 8192;
  const auto b = ComputeBlockActivations(s, o);
  ASSERT_TRUE(b.HasOpSac());
  EXPECT_DOUBLE_EQ(b.selective_per_token, 2 * (h + qd + kv) + 2 * qd + 4 * heads);
  const double router = 2 * h * experts, experts_gemms = 3 * 2 * h * fe * k;
  EXPECT_DOUBLE_EQ(b.selective_recompute_matmul_flops_per_token, 2 * (h * kv + qd * h) + router + experts_gemms);
  EXPECT_DOUBLE_EQ(b.selective_recompute_attention, 0.0);
  EXPECT_EQ(ResolveSacSave(kTorchtitanSacSave, SacUncountedProjections(s), true),
            SacSave{1} << 0 | SacSave{1} << 2 | kSacSdpaBit);
  // An explicit save set may keep the experts' grouped outputs: w1 [k x F] and w2 [k x H] per
  // token; the router still reruns.
  const SacSave w1_w2 = SacSave{1} << 4 | SacSave{1} << 6;
  EXPECT_DOUBLE_EQ(b.SacSavedPerToken(w1_w2), 2 * h + 2 * fe * k + 2 * h * k);
  EXPECT_DOUBLE_EQ(b.SacRecomputeMatmulFlopsPerToken(w1_w2),
                   2 * (h * qd + 2 * h * kv + qd * h) + router + 2 * h * fe * k);
  EXPECT_DOUBLE_EQ(b.SacRecomputeAttention(w1_w2), 1.0);
  // Outside the rule: expert parallelism (its all-to-alls), a shared expert (Qwen2-MoE's),
  // DeepSeek's router, HF's modeling. There selective keeps every projection output.
  ActivationOptions ep = o;
  ep.ep = 2;
  EXPECT_FALSE(ComputeBlockActivations(s, ep).HasOpSac());
  ModelSpec shared = s;
  shared.moe.num_shared_experts = 1;
  EXPECT_FALSE(ComputeBlockActivations(shared, o).HasOpSac());
  EXPECT_FALSE(ComputeBlockActivations(FindModelPreset("deepseek-v3"), o).HasOpSac());
  EXPECT_FALSE(ComputeBlockActivations(s, Bf16()).HasOpSac());
}

// The backward profile: no parameter gradient exists before the first node, all exist after
// the last; the head's peak (the loss backward) comes before the LM head's dW.
TEST(ActivationsTest, BackwardProfileOrdersWeightGradients) {
  ModelSpec s = FindModelPreset("llama3-8b");
  auto head = ComputeHeadActivations(s, Bf16());
  ASSERT_FALSE(head.backward_profile.empty());
  EXPECT_DOUBLE_EQ(head.backward_profile.front().param_grad_fraction, 0.0);
  EXPECT_DOUBLE_EQ(head.backward_profile.back().param_grad_fraction, 1.0);
  double v = 128256, h = 4096;
  for (const auto& p : head.backward_profile) {
    if (p.live_per_token >= 12 * v) EXPECT_DOUBLE_EQ(p.param_grad_fraction, 0.0);
    EXPECT_LE(p.live_per_token, head.backward_peak_per_token);
  }
  // The block: fractions never decrease; the final one counts every weight (q,k,v,o,gate,up,down
  // and the two norms), so the down_proj's share appears first.
  auto b = ComputeBlockActivations(s, Bf16()).full;
  double prev = 0;
  for (const auto& p : b.backward_profile) {
    EXPECT_GE(p.param_grad_fraction, prev);
    prev = p.param_grad_fraction;
  }
  double qd = 4096, kv = 1024, f = 14336;
  double total = h * qd + 2 * h * kv + qd * h + 3 * h * f + 2 * h;
  EXPECT_DOUBLE_EQ(prev, 1.0);
  double first = 0;  // after the residual add, the first node with a weight is down_proj
  for (const auto& p : b.backward_profile) {
    if (p.param_grad_fraction > 0) {
      first = p.param_grad_fraction;
      break;
    }
  }
  EXPECT_NEAR(first, f * h / total, 1e-12);
}

// Eager attention keeps the fp32 softmax (4·a·S) and the bf16 probabilities (2·a·S) per token.
TEST(ActivationsTest, EagerAttentionAddsQuadraticScores) {
  ModelSpec s = FindModelPreset("llama2-7b");
  auto sdpa = ComputeBlockActivations(s, Bf16());
  ActivationOptions eager = Bf16();
  eager.attention = Attention::kEager;
  auto e = ComputeBlockActivations(s, eager);
  double a = 32, S = 4096, qd = 4096;
  // eager drops the lse (4a); o_proj saves the contiguous copy of probs@v, as SDPA's output was.
  double expected_delta = 6 * a * S - 4 * a;
  (void)qd;
  EXPECT_DOUBLE_EQ(e.full.saved_per_token - sdpa.full.saved_per_token, expected_delta);
}

// In fp32, softmax(dtype=float32).to(query.dtype) returns the softmax output itself (Tensor.to
// with the dtype it has is a no-op), so probs @ v saves the tensor softmax saved: one 4·a·S copy
// where bf16 keeps two (the fp32 softmax and the bf16 probabilities).
TEST(ActivationsTest, EagerAttentionInFp32KeepsOneCopyOfTheScores) {
  ModelSpec s = FindModelPreset("llama2-7b");
  ActivationOptions sdpa = Bf16();
  sdpa.dtype = DType::kFp32;
  ActivationOptions eager = sdpa;
  eager.attention = Attention::kEager;
  auto e = ComputeBlockActivations(s, eager);
  auto f = ComputeBlockActivations(s, sdpa);
  double a = 32, S = 4096;
  EXPECT_DOUBLE_EQ(e.full.saved_per_token - f.full.saved_per_token, 4 * a * S - 4 * a);
}

// Loss path, HF with fp32 upcast, logits not held: the log-softmax output (4V) is saved; in
// backward nll_loss's gradient (4V) and log_softmax's gradient (4V) are live with it: 12V.
TEST(ActivationsTest, HfLossPeakIsTwelveBytesPerVocabEntry) {
  ModelSpec s = FindModelPreset("llama3-8b");
  auto head = ComputeHeadActivations(s, Bf16());
  double v = 128256, h = 4096;
  // final norm (4H + 4 + 2H), its output (2H, saved by lm_head), log-softmax output (4V)
  EXPECT_DOUBLE_EQ(head.saved_per_token, 8 * h + 4 + 4 * v);
  EXPECT_GE(head.backward_peak_per_token, 12 * v);
  EXPECT_LT(head.backward_peak_per_token, 12 * v + 16 * h);
  // Forward: bf16 logits (2V) and their fp32 copy (4V) and the log-softmax output (4V).
  EXPECT_GE(head.forward_peak_per_token, 10 * v);
}

// verl's log-prob head (dp_actor.py with use_remove_padding, flash-attn's in-place
// cross-entropy): forward keeps the final norm's tensors (4H + 4 + 2H), its output (2H, lm_head's
// input), the bf16 logits (2V, which flash-attn saves) and lse + log-probs (8): no fp32 copy of
// the logits. Backward peaks at the in-place division's CopySlices: the dlogits written in place
// is freed once AsStridedBackward0 copied it into zeros of the base (2V), then CopySlices holds
// that, its result (2V), the slice's clone (2V) and grad / temperature (2V): 8V beside the norm's
// tensors and lm_head's saved input, which are still live. tests/bench/verl_logprob_memory.py
// measured the 8V (3.00 x 2VT above the start of backward with the 2V dlogits buffer live then).
TEST(ActivationsTest, VerlLogProbHeadKeepsBf16LogitsAndPeaksAtCopySlices) {
  ModelSpec s = FindModelPreset("qwen3-8b");
  ActivationOptions o = Bf16WithLossKernel(LossKernel::kVerlFlashCe);
  auto head = ComputeHeadActivations(s, o);
  double v = 151936, h = 4096;
  EXPECT_DOUBLE_EQ(head.saved_per_token, 8 * h + 4 + 2 * v + 8);
  for (const auto& t : head.saved) EXPECT_LT(t.bytes_per_token, 4 * v) << t.name;
  // At CopySlices the logits and the log-probs are no longer saved; the norm's and lm_head's
  // inputs (8H + 4) still are.
  EXPECT_DOUBLE_EQ(head.backward_peak_per_token, 8 * h + 4 + 8 * v);
  // Against the HF path of the same model: 12 bytes per vocabulary entry at its peak.
  EXPECT_GE(ComputeHeadActivations(s, Bf16()).backward_peak_per_token, 12 * v);
}

// verl's padded log-prob head (use_remove_padding false): the lm_head output [B, S, V] is divided
// in place (no view: DivBackward0 saves nothing), its response slice (f = response / S of the
// positions) copied by reshape, and flash-attn's in-place cross-entropy saves the copy (f 2V) and
// lse + log-probs (8f). Backward: SliceBackward0's zeros of the base (2V) beside the copy's
// gradient, then DivBackward0's grad / temperature (2V) beside that: 4V with the norm's and
// lm_head's inputs (8H + 4) still saved. tests/bench/verl_logprob_memory.py measures the padded
// variant's backward peak above its start as 2 - f units of 2VT (1.50 at f 0.5), which is this
// 4V less the copy already live. With the entropy, the view keeps the base (2V) for backward,
// and the compiled entropy's gradient (f 2V) joins at the top of backward beside the loss's.
TEST(ActivationsTest, VerlPaddedLogProbHeadCopiesTheResponseSlice) {
  ModelSpec s = FindModelPreset("qwen3-8b");
  ActivationOptions o = Bf16WithLossKernel(LossKernel::kVerlPaddedCe);
  o.response_fraction = 0.75;
  const double v = 151936, h = 4096, f = 0.75;
  auto head = ComputeHeadActivations(s, o);
  EXPECT_DOUBLE_EQ(head.saved_per_token, 8 * h + 4 + f * 2 * v + 8 * f);
  EXPECT_DOUBLE_EQ(head.backward_peak_per_token, 8 * h + 4 + 4 * v);
  EXPECT_GE(head.forward_peak_per_token, (1 + f) * 2 * v);
  EXPECT_LT(head.forward_peak_per_token, (1 + f) * 2 * v + 16 * h);
  o.entropy_from_logits = true;
  auto ent = ComputeHeadActivations(s, o);
  EXPECT_DOUBLE_EQ(ent.saved_per_token, head.saved_per_token + 2 * v);
  // At the loss's backward: the saved logits, copy and log-probs, the log-probs' gradient and
  // the entropy's [B, response, V] gradient.
  EXPECT_DOUBLE_EQ(ent.backward_peak_per_token, 8 * h + 4 + 2 * v + 2 * f * 2 * v + 2 * 8 * f);
}

// verl's fused log-prob head, torch backend (use_fused_kernels, FusedLinearForPPO): the node saves
// only its input (the final norm's output, 2H) beside the norm's own tensors (4H + 4 + 2H), and
// returns log-probs and entropy [T] in bf16 (4 bytes): no [T, V] tensor per token anywhere. Per
// 512-row chunk, forward holds fp32 logits, probs, log_probs and one temporary (16V per row);
// backward fp32 logits, probs, one_hot, dlogits and one temporary (20V), the entropy's gradient
// adding log_probs and a second temporary (28V); at the weight GEMM the three (four) fp32 tensors
// and the bf16 dlogits (14V, 18V) and the chunk's dhidden (2H) per row beside the [V, H] bf16
// product. At the node: the saved 8H + 4, the outputs' gradient (4) and the input's (2H), and the
// head weight's gradient made (V H of the V H + H head parameters).
TEST(ActivationsTest, VerlFusedTorchHeadSavesItsInputAndChunksTheLogits) {
  ModelSpec s = FindModelPreset("qwen3-8b");
  ActivationOptions o = Bf16WithLossKernel(LossKernel::kVerlFusedTorch);
  const double v = 151936, h = 4096;
  auto head = ComputeHeadActivations(s, o);
  EXPECT_DOUBLE_EQ(head.saved_per_token, 8 * h + 4);
  EXPECT_LT(head.forward_peak_per_token, 16 * h);
  const auto& f = head.fused_loss;
  ASSERT_TRUE(f.on);
  EXPECT_FALSE(f.gradients_in_forward);
  EXPECT_EQ(FusedChunkRows(f, 100, 151936, 4096), 100);
  EXPECT_EQ(FusedChunkRows(f, 100000, 151936, 4096), 512);
  EXPECT_DOUBLE_EQ(f.chunk_row_bytes, 16 * v);
  EXPECT_DOUBLE_EQ(f.backward_chunk_row_bytes, 20 * v);
  EXPECT_DOUBLE_EQ(f.backward_dw_row_bytes, 14 * v + 2 * h);
  EXPECT_DOUBLE_EQ(f.backward_dw_bytes, 2 * v * h);
  EXPECT_DOUBLE_EQ(f.backward_point.live_per_token, 8 * h + 4 + 4 + 2 * h);
  EXPECT_DOUBLE_EQ(f.backward_point.param_grad_fraction, v * h / (v * h + h));
  o.entropy_from_logits = true;
  auto ent = ComputeHeadActivations(s, o).fused_loss;
  EXPECT_DOUBLE_EQ(ent.backward_chunk_row_bytes, 28 * v);
  EXPECT_DOUBLE_EQ(ent.backward_dw_row_bytes, 18 * v + 2 * h);
}

// TRL's chunked NLL (trl/trainer/sft_trainer.py _chunked_cross_entropy_loss): the head saves the
// gathered copy hidden[order] [T, H] and the gather's int64 indices in place of the input verl's
// fused node keeps (8 bytes per token more than verl's head); per 256-row chunk forward holds fp32
// logits, log_p, exp(log_p) and the entropy product (16 per vocabulary entry) and the chunk's fp32
// input, beside a fp32 copy of the weight [V, H]; backward the rerun's log_p and exp(log_p), d log_p
// and d logits (16) and the chunk's input, at the weight GEMM 12 per entry with d h and the chunk
// input in fp32, the fp32 copy again and the fp32 d W; the weight's gradient in bf16 and the input's
// [T, H] are summed over the chunks. Three fp32 GEMMs of the head's size in backward when it trains.
TEST(ActivationsTest, TrlChunkedNllKeepsTheGatheredInputAndChunksInFp32) {
  ModelSpec s = FindModelPreset("qwen3-8b");
  ActivationOptions o = Bf16WithLossKernel(LossKernel::kVerlFusedTorch);
  const double verl_saved = ComputeHeadActivations(s, o).saved_per_token;
  o.loss_kernel = LossKernel::kTrlChunkedNll;
  const double v = 151936, h = 4096;
  auto head = ComputeHeadActivations(s, o);
  EXPECT_DOUBLE_EQ(head.saved_per_token, verl_saved + 8);
  const auto& f = head.fused_loss;
  ASSERT_TRUE(f.on);
  EXPECT_FALSE(f.gradients_in_forward);
  EXPECT_TRUE(f.fp32_gemms);
  EXPECT_EQ(FusedChunkRows(f, 100000, 151936, 4096), 256);
  EXPECT_DOUBLE_EQ(f.chunk_row_bytes, 16 * v + 4 * h);
  EXPECT_DOUBLE_EQ(f.chunk_fixed_bytes, 4 * v * h);
  EXPECT_DOUBLE_EQ(f.backward_fixed_bytes, 4 * v * h);
  EXPECT_DOUBLE_EQ(f.backward_chunk_row_bytes, 16 * v + 4 * h);
  EXPECT_DOUBLE_EQ(f.backward_dw_row_bytes, 12 * v + 8 * h);
  EXPECT_DOUBLE_EQ(f.backward_dw_bytes, 4 * v * h);
  EXPECT_DOUBLE_EQ(f.backward_carry_bytes, 2 * v * h);
  EXPECT_DOUBLE_EQ(f.backward_carry_per_token, 2 * h);
  EXPECT_DOUBLE_EQ(f.backward_head_gemms, 3.0);
}

// verl's fused log-prob head, Triton backend: forward's partials [T, ceil(V / 1024)] fp32 x 3 are
// scratch; the node saves its input and the five [T] fp32 vectors (20 bytes, one tensor here);
// backward's scratch beside d_hidden (2H) is d_logits [T, 9504] bf16 and then either the [T, H]
// product d_hidden += adds or the last split's copy. Qwen2.5's vocabulary is 16 x 9504 exactly
// (no copy: 2 x 9504 + 2H); Qwen3's 151936 leaves 9376 columns in its 16th split, and
// 2 x 9376 > 2H. A frozen head weight still gets an empty_like [V, H] gradient for the node's
// duration.
TEST(ActivationsTest, VerlFusedTritonHeadKeepsStatisticsAndSplitsDLogits) {
  ModelSpec s = FindModelPreset("qwen2.5-7b");
  ActivationOptions o = Bf16WithLossKernel(LossKernel::kVerlFusedTriton);
  const double h = 3584, v = 152064;
  ASSERT_EQ(s.vocab_size, 16 * 9504);
  auto head = ComputeHeadActivations(s, o);
  EXPECT_DOUBLE_EQ(head.saved_per_token, 8 * h + 4 + 20);
  // At the node: saved, the outputs' gradient (20), d_hidden (2H) and the scratch.
  EXPECT_DOUBLE_EQ(head.fused_loss.backward_point.live_per_token,
                   8 * h + 4 + 20 + 20 + 2 * h + 2 * 9504 + 2 * h);
  EXPECT_DOUBLE_EQ(head.fused_loss.backward_dw_bytes, 0);
  EXPECT_DOUBLE_EQ(head.fused_loss.chunk_row_bytes, 0);
  // The partials are forward scratch: 12 bytes per split of 1024 entries, 149 splits.
  EXPECT_GE(head.forward_peak_per_token, 12 * 149);
  const double h3 = 4096;
  auto qwen3 = ComputeHeadActivations(FindModelPreset("qwen3-8b"), o);
  EXPECT_DOUBLE_EQ(qwen3.fused_loss.backward_point.live_per_token,
                   8 * h3 + 4 + 20 + 20 + 2 * h3 + 2 * 9504 + 2 * 9376);
  Trainability frozen;
  frozen.all_params_train = false;
  auto lora = ComputeHeadActivations(s, o, frozen);
  EXPECT_DOUBLE_EQ(lora.fused_loss.backward_dw_bytes, 2 * v * h);
}

// ROLL's expert parallelism (Hugging Face modeling with ep > 1): per token and MoE layer autograd
// keeps, of the dispatch and combine, the argsort's int64 indices (8k, for the combine's
// index_put), their quotient by top_k (8k, for the dispatch gather), the int32 permutation (4k,
// for _permute's gather and _unpermute's index_put), the permuted rows the experts' first
// projection reads (e H k) and the fp32 copy of the unsorted expert outputs that bmm saves for the
// routing weights' gradient (4 H k); the all-to-all outputs, both vstack copies, the unpermuted
// and unsorted outputs and the final clone are saved by nothing.
TEST(ActivationsTest, RollExpertParallelSavesIndicesPermutedRowsAndAnFp32Copy) {
  ModelSpec s = FindModelPreset("qwen3-30b-a3b");
  ActivationOptions o = Bf16();
  o.ep = 8;
  const double k = 8, h = 2048;
  auto b = ComputeBlockActivations(s, o);
  double ep_saved = 0;
  for (const auto& t : b.full.saved) {
    if (t.name.rfind("moe.ep", 0) == 0) ep_saved += t.bytes_per_token;
  }
  EXPECT_DOUBLE_EQ(ep_saved, 8 * k + 8 * k + 4 * k + 2 * h * k + 4 * h * k);
  for (const auto& t : b.full.saved) {
    EXPECT_EQ(t.name.find("all-to-all"), std::string::npos) << t.name;
    EXPECT_EQ(t.name.find("vstack"), std::string::npos) << t.name;
  }
}

// Liger-Kernel's module patches (HF Trainer's use_liger_kernel, verl's use_liger). Per token of a
// Llama block in bf16: Hugging Face's RMSNorm saves its fp32 copy (4H), rsqrt (4) and x_hat (2H),
// LigerRMSNorm the input (2H) and an fp32 rstd (4): 4H less per norm, two per block. HF's MLP
// saves gate, silu(gate) and up (and down_proj's input), Liger's SiLU-mul gate and up (and the
// same input): 2I less. Liger's rope rotates q and k in place: nothing saved changes. The final
// norm: 4H less. In backward the Liger nodes write their input gradients into existing storage.
TEST(ActivationsTest, LigerKernelsSaveLessThanHuggingFacesModules) {
  ModelSpec s = FindModelPreset("llama3-8b");
  const double h = 4096, ffn = 14336;
  ActivationOptions hf = Bf16();
  ActivationOptions liger = hf;
  liger.liger = {true, true, true};
  auto a = ComputeBlockActivations(s, hf), b = ComputeBlockActivations(s, liger);
  EXPECT_DOUBLE_EQ(a.full.saved_per_token - b.full.saved_per_token, 2 * 4 * h + 2 * ffn);
  EXPECT_LT(b.full.backward_peak_per_token, a.full.backward_peak_per_token);
  EXPECT_LT(b.full.forward_peak_per_token, a.full.forward_peak_per_token);
  ActivationOptions rope_only = hf;
  rope_only.liger.rope = true;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, rope_only).full.saved_per_token, a.full.saved_per_token);
  EXPECT_DOUBLE_EQ(ComputeHeadActivations(s, hf).saved_per_token - ComputeHeadActivations(s, liger).saved_per_token,
                   4 * h);
  // Under torchtitan's code Liger's patches do not apply (LigerProblems refuses the plan).
  ActivationOptions tt = liger;
  tt.modeling = Modeling::kTorchtitan;
  ActivationOptions tt_plain = hf;
  tt_plain.modeling = Modeling::kTorchtitan;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, tt).full.saved_per_token,
                   ComputeBlockActivations(s, tt_plain).full.saved_per_token);
}

TEST(ActivationsTest, LigerProblemsNameTheModelsTheyAreModelledFor) {
  Plan p;
  p.liger = {true, false, false};
  EXPECT_TRUE(LigerProblems(FindModelPreset("qwen3-8b"), p, "plan").empty());
  EXPECT_THAT(LigerProblems(FindModelPreset("gemma2-9b"), p, "plan"),
              ::testing::ElementsAre(::testing::HasSubstr("plan:/liger/rms_norm: expected false for gemma2-9b")));
  EXPECT_THAT(LigerProblems(FindModelPreset("qwen3-30b-a3b"), p, "plan"),
              ::testing::ElementsAre(::testing::HasSubstr("Llama, Mistral, Qwen2 and Qwen3 dense")));
  p.modeling = Modeling::kTorchtitan;
  EXPECT_THAT(LigerProblems(FindModelPreset("qwen3-8b"), p, "plan"),
              ::testing::ElementsAre(::testing::HasSubstr("--modeling torchtitan")));
  EXPECT_TRUE(LigerProblems(FindModelPreset("gemma2-9b"), Plan{}, "plan").empty());
}

// HF flash_attention_2 with a padding mask (verl's padded actor and critic): pad_input's padded
// output, which o_proj saves, comes on top of what the kernel saves: one [T, heads x head_dim]
// tensor per block.
TEST(ActivationsTest, PaddingMaskAddsThePaddedAttentionOutput) {
  ModelSpec s = FindModelPreset("qwen3-8b");
  ActivationOptions o = Bf16();
  auto plain = ComputeBlockActivations(s, o);
  o.padding_mask = true;
  auto padded = ComputeBlockActivations(s, o);
  EXPECT_DOUBLE_EQ(padded.full.saved_per_token - plain.full.saved_per_token, 2.0 * 32 * 128);
}

// A value head (verl's critic: AutoModelForTokenClassification, num_labels 1): score =
// Linear(H, 1) with a bias replaces the LM head. Parameters: the causal LM's less V x H, plus
// H + 1. Per token the head keeps the final norm's tensors (4H + 4 + 2H), score's input (2H) and
// the values (2 bytes, which the value loss saves): no vocabulary.
TEST(ActivationsTest, ValueHeadHasNoVocabulary) {
  ModelSpec lm = FindModelPreset("qwen3-8b");
  ModelSpec critic = lm;
  critic.value_head = true;
  double v = 151936, h = 4096;
  EXPECT_EQ(ParameterCount(critic),
            ParameterCount(lm) - static_cast<int64_t>(v * h) + static_cast<int64_t>(h) + 1);
  auto head = ComputeHeadActivations(critic, Bf16());
  EXPECT_DOUBLE_EQ(head.saved_per_token, 8 * h + 4 + 2);
  EXPECT_LT(head.backward_peak_per_token, v / 2);  // no [T, V] tensor: the norm's backward rules
}

// The fused linear cross-entropy (Liger's chunking; executor/nn/fused_loss.cc): per token it keeps
// the final norm's tensors and the input's gradient (2H, bf16) instead of the log-softmax output
// (4V); the weight's gradient (V x H, bf16) and one chunk's logits (2V + 4V per row, chunk rows
// next_pow2(ceil(T / ceil(V / H)))) are what does not scale with the tokens.
TEST(ActivationsTest, FusedLinearLossKeepsGradientsNotLogits) {
  ModelSpec s = FindModelPreset("llama3-8b");
  ActivationOptions o = Bf16();
  o.loss_kernel = LossKernel::kFusedLinear;
  auto fused = ComputeHeadActivations(s, o);
  double v = 128256, h = 4096;
  // The final norm (4H + 4 + 2H) and grad_input (2H); the norm output is not saved (lm_head is
  // not an autograd node of its own).
  EXPECT_DOUBLE_EQ(fused.saved_per_token, 8 * h + 4);
  EXPECT_LT(fused.forward_peak_per_token, 16 * h);              // no [T, V] tensor at all
  EXPECT_LT(fused.backward_peak_per_token, 24 * h);
  ASSERT_TRUE(fused.fused_loss.on);
  EXPECT_DOUBLE_EQ(fused.fused_loss.weight_grad_bytes, 2 * v * h);
  EXPECT_DOUBLE_EQ(fused.fused_loss.chunk_row_bytes, 6 * v);
  EXPECT_FALSE(ComputeHeadActivations(s, Bf16()).fused_loss.on);
  // ceil(128256 / 4096) = 32: 8192 tokens in chunks of 256, 1000 tokens in chunks of 32 (the
  // last one 8 rows); fewer tokens than ceil(V / H): chunks of one row.
  EXPECT_EQ(FusedLinearChunkRows(8192, 128256, 4096), 256);
  EXPECT_EQ(FusedLinearChunkRows(1000, 128256, 4096), 32);
  EXPECT_EQ(FusedLinearChunkRows(20, 128256, 4096), 1);
  EXPECT_EQ(FusedLinearChunkRows(3, 512, 64), 1);
  // Gemma 2's soft-capping: at least the fp32 logits and their fp32 tanh derivative.
  ModelSpec g = FindModelPreset("gemma2-9b");
  EXPECT_DOUBLE_EQ(ComputeHeadActivations(g, o).fused_loss.chunk_row_bytes,
                   8.0 * static_cast<double>(g.vocab_size));
}

TEST(ActivationsTest, HeldLogitsStayInSaved) {
  ModelSpec s = FindModelPreset("llama3-8b");
  ActivationOptions o = Bf16();
  o.keep_logits = true;
  auto held = ComputeHeadActivations(s, o);
  auto not_held = ComputeHeadActivations(s, Bf16());
  EXPECT_DOUBLE_EQ(held.saved_per_token - not_held.saved_per_token, 2.0 * 128256);
}

// Ulysses (verl): per token of the rank's S/cp slice, flash saves the gathered q, k, v and its
// output ([B, S, a/cp, d]: the same elements per slice token), and o_proj saves the output after
// its all-to-all back: 2qd more than without cp. The all-to-all buffers are transient.
TEST(ActivationsTest, UlyssesSavesTheOutputOnBothSidesOfItsAllToAll) {
  ModelSpec s = FindModelPreset("llama3-8b");
  double qd = 4096;
  auto base = ComputeBlockActivations(s, Bf16());
  for (int cp : {2, 4}) {
    ActivationOptions o = Bf16();
    o.cp = cp;
    auto b = ComputeBlockActivations(s, o);
    EXPECT_DOUBLE_EQ(b.full.saved_per_token - base.full.saved_per_token, 2 * qd) << cp;
    for (const auto& t : b.full.saved) {
      EXPECT_EQ(t.name.find("send"), std::string::npos) << t.name;
      EXPECT_EQ(t.name.find("receive"), std::string::npos) << t.name;
    }
    // Every forward moment holds what it held without cp, and after the output's all-to-all
    // also the second copy (2qd); HF Llama's forward peaks in the MLP, after it.
    EXPECT_GE(b.full.forward_peak_per_token, base.full.forward_peak_per_token + 2 * qd);
    // The head (logits, loss) is per slice token too: its per-token figures do not change.
    EXPECT_DOUBLE_EQ(ComputeHeadActivations(s, o).backward_peak_per_token,
                     ComputeHeadActivations(s, Bf16()).backward_peak_per_token);
  }
}

// KV heads fewer than cp are repeated before the all-to-all (verl repeat_kv), so the gathered k
// and v flash saves are repeat x larger: with 2 KV heads (kvd 256) and cp 4, 2 x 2·kvd each.
TEST(ActivationsTest, UlyssesRepeatedKvHeadsAreSavedLarger) {
  ModelSpec s = FindModelPreset("llama3-8b");
  s.num_kv_heads = 2;
  double qd = 4096, kvd = 2 * 128, rep = 2;
  auto base = ComputeBlockActivations(s, Bf16());
  ActivationOptions o = Bf16();
  o.cp = 4;
  auto b = ComputeBlockActivations(s, o);
  // k_embed and v (2·kvd bytes each) become 2·kvd·rep; plus the output's second copy.
  double expected = 2 * (2 * kvd * rep - 2 * kvd) + 2 * qd;
  EXPECT_DOUBLE_EQ(b.full.saved_per_token - base.full.saved_per_token, expected);
}

TEST(AutogradLedgerTest, ChainFreesTemporariesAndKeepsSaved) {
  AutogradLedger g;
  int x = g.Tensor("x", 10);
  int y = g.Tensor("y", 20);
  int z = g.Tensor("z", 30);
  g.Op("f", {x}, y, {});   // y = f(x), saves nothing
  g.Op("g", {y}, z, {y});  // z = g(y), saves y
  ActivationLedger r = g.Run(x, z);
  EXPECT_DOUBLE_EQ(r.saved_per_token, 20);
  EXPECT_DOUBLE_EQ(r.forward_peak_per_token, 20 + 30);  // x+y = 30, then x freed: y+z = 50
  // Backward: saved y (20) + grad z (30) + new grad y (20) = 70; then grad x (10) + grad y (20).
  EXPECT_DOUBLE_EQ(r.backward_peak_per_token, 70);
}

// An op whose backward writes its input gradients into existing storage (Liger's kernels:
// MarkInPlaceBackward) allocates nothing fresh at its node; a forward workspace (verl's Triton
// partials: SetForwardWorkspace) sits beside the op's inputs and output while it runs.
TEST(AutogradLedgerTest, InPlaceBackwardAndForwardWorkspace) {
  AutogradLedger g;
  int x = g.Tensor("x", 10);
  int y = g.Tensor("y", 20);
  int z = g.Tensor("z", 30);
  g.Op("f", {x}, y, {});
  g.Op("g", {y}, z, {y});
  g.MarkInPlaceBackward();
  g.SetForwardWorkspace(7);
  ActivationLedger r = g.Run(x, z);
  EXPECT_DOUBLE_EQ(r.forward_peak_per_token, 20 + 30 + 7);  // y + z + workspace, x freed
  // g's node: saved y (20) + grad z (30), its grad y in place: 50; then f's: grad y (20) + new
  // grad x (10) = 30.
  EXPECT_DOUBLE_EQ(r.backward_peak_per_token, 50);
}

}  // namespace
}  // namespace shardtune::model

namespace shardtune::model {
namespace {

// Frozen parameters and LoRA: autograd saves a tensor only for a gradient it computes
// (derivatives.yaml + gen_variable_type.py's should_compute_output guards), so the per-token
// figures below are hand counts over the HF Llama op list, on Llama-3.2-1B's shapes:
// H 2048, 32 heads (qd 2048), 8 KV heads (kvd 512), F 8192, bf16 (e = 2), SDPA.
struct OneB {
  ModelSpec s = FindModelPreset("llama3.2-1b");
  double h = 2048, qd = 2048, kv = 512, f = 8192, heads = 32, e = 2;
  // A frozen RMSNorm whose input requires grad: pow and the rsqrt mul keep the fp32 copy (4H),
  // rsqrt its fp32 output (4); the weight mul saves x_hat only for the (frozen) weight.
  double frozen_norm() const { return 4 * h + 4; }
  // SDPA (flash) saves q and k after rope, v, its output and the fp32 logsumexp whenever its
  // node exists (one multi-output formula); rope's q * cos saves only cos.
  double sdpa() const { return e * qd + e * kv + e * kv + e * qd + 4 * heads; }
  // SwiGLU with frozen projections, input requiring grad: silu saves its input gate(x) (eF), the
  // product saves silu(gate) and up (2 x eF) for each other's gradient; down_proj (frozen) does
  // not save the product.
  double frozen_mlp() const { return 3 * e * f; }
};

Trainability LoraQv(bool input_requires_grad, int r) {
  Trainability t;
  t.input_requires_grad = input_requires_grad;
  t.all_params_train = false;
  t.lora_modules = {"self_attn.q_proj", "self_attn.v_proj"};
  t.lora_rank = r;
  return t;
}

// (a) All base weights frozen, LoRA r on q_proj and v_proj, a block after a trainable one (its
// input requires grad): both norms frozen, the normed input x saved once (lora_A of q and of v
// save the same tensor for their weight gradients; the frozen base projections save nothing),
// each lora_B saves A's output (e·r), attention and MLP as for any frozen block.
TEST(FrozenActivationsTest, LoraOnQvSavesAdapterInputsNotTheFrozenLinearsInputs) {
  OneB m;
  double r = 16;
  double expected = 2 * m.frozen_norm() + m.e * m.h + 2 * m.e * r + m.sdpa() + m.frozen_mlp();
  auto b = ComputeBlockActivations(m.s, Bf16(), LoraQv(true, 16));
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, expected);
  // Full checkpointing still keeps only the block input.
  EXPECT_DOUBLE_EQ(b.checkpoint_input_per_token, m.e * m.h);
}

// The backward kernels a block's nodes launch (ActivationLedger::backward_ops), hand-counted
// over the HF Llama op list: two per op when everything trains (the rule the host constants were
// measured with). LoRA on q and v after a trainable block: the 7 frozen projections launch the
// dX GEMM only and the 2 frozen norm weights' muls the input's gradient only: 9 fewer. After a
// frozen embedding (input needs no grad) no gradient reaches the input norm (7 ops x 2 + its
// weight mul 1), the base q and v projections (1 each), k_proj (1) or k's rope (5 ops x 2), and
// each lora_A makes its weight's gradient only (1 fewer each): 30 fewer again.
TEST(FrozenActivationsTest, BackwardLaunchesOneKernelFewerPerFrozenWeight) {
  OneB m;
  auto full = ComputeBlockActivations(m.s, Bf16()).full;
  EXPECT_EQ(full.backward_ops, 2 * full.forward_ops);
  auto lora = ComputeBlockActivations(m.s, Bf16(), LoraQv(true, 16)).full;
  EXPECT_EQ(lora.backward_ops, 2 * lora.forward_ops - 9);
  auto first = ComputeBlockActivations(m.s, Bf16(), LoraQv(false, 16)).full;
  EXPECT_EQ(first.forward_ops, lora.forward_ops);
  EXPECT_EQ(first.backward_ops, 2 * lora.forward_ops - 9 - 30);
}

// (a'') The same adapters with PEFT lora_dropout p > 0: each adapter's nn.Dropout makes its own
// dropped copy of x (eH, saved by its lora_A instead of x) and a bool mask (1 byte x H, saved by
// native_dropout for x's gradient), so x itself is no longer saved: two adapters keep 2 x 3H.
// When the block input needs no grad (after a frozen embedding), the masks are not saved.
TEST(FrozenActivationsTest, LoraDropoutSavesADroppedCopyAndAMaskPerAdapter) {
  OneB m;
  double r = 16;
  Trainability t = LoraQv(true, 16);
  t.lora_dropout = 0.1;
  double expected = 2 * m.frozen_norm() + 2 * (m.e * m.h + 1 * m.h) + 2 * m.e * r + m.sdpa() +
                    m.frozen_mlp();
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(m.s, Bf16(), t).full.saved_per_token, expected);
  Trainability first = LoraQv(false, 16);
  first.lora_dropout = 0.1;
  double expected_first = 2 * m.e * m.h + 2 * m.e * r + m.sdpa() + m.frozen_norm() + m.frozen_mlp();
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(m.s, Bf16(), first).full.saved_per_token, expected_first);
}

// (a') The same adapters in the first block after a frozen embedding: its input does not require
// grad, so input_layernorm records nothing, k (frozen, no adapter) requires no grad; SDPA still
// saves q, k, v (its node exists because q and v require grad).
TEST(FrozenActivationsTest, LoraBlockWhoseInputNeedsNoGradSkipsTheFirstNorm) {
  OneB m;
  double r = 16;
  double expected = m.e * m.h + 2 * m.e * r + m.sdpa() + m.frozen_norm() + m.frozen_mlp();
  auto b = ComputeBlockActivations(m.s, Bf16(), LoraQv(false, 16));
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, expected);
}

// (b) A fully frozen block after a trainable one: gradients flow through it, so the norms keep
// what grad-input needs, SDPA its inputs and output, SwiGLU silu(gate) and up; no Linear input.
TEST(FrozenActivationsTest, FrozenBlockAfterATrainableOneSavesNoLinearInputs) {
  OneB m;
  Trainability t;
  t.all_params_train = false;
  double expected = 2 * m.frozen_norm() + m.sdpa() + m.frozen_mlp();
  auto b = ComputeBlockActivations(m.s, Bf16(), t);
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, expected);
  for (const auto& s : b.full.saved) {
    EXPECT_EQ(s.name.find("normalized"), std::string::npos) << s.name;
    EXPECT_NE(s.name, "input_layernorm output");
    EXPECT_NE(s.name, "mlp.silu*up");
  }
  // No parameter gradient anywhere in its backward.
  EXPECT_DOUBLE_EQ(b.full.backward_profile.back().param_grad_fraction, 0.0);
  // A frozen block whose input needs no grad records nothing.
  t.input_requires_grad = false;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(m.s, Bf16(), t).full.saved_per_token, 0.0);
}

// (c) A full fine-tune is unchanged: each norm adds x_hat (eH) and its output (eH, saved by the
// projections), down_proj saves the product (eF): 20H + 4kvd + 8F + 4 heads + 8 per token.
TEST(FrozenActivationsTest, FullFinetuneKeepsEveryLinearInput) {
  OneB m;
  double norm = m.frozen_norm() + m.e * m.h + m.e * m.h;
  double expected = 2 * norm + m.sdpa() + m.frozen_mlp() + m.e * m.f;
  Trainability full;
  EXPECT_TRUE(full.FullFinetune());
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(m.s, Bf16(), full).full.saved_per_token, expected);
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(m.s, Bf16()).full.saved_per_token, expected);
  // Every base parameter named trainable is the same graph as all_params_train.
  Trainability named;
  named.all_params_train = false;
  for (const char* p :
       {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
    named.trainable.push_back(p);
  }
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(m.s, Bf16(), named).full.saved_per_token, expected);
}

// The LM head under LoRA (final norm and the tied embedding frozen): lm_head does not save the
// normed hidden state; the frozen norm keeps 4H + 4; log_softmax keeps its fp32 output (4V).
TEST(FrozenActivationsTest, FrozenHeadSavesNoLmHeadInput) {
  OneB m;
  double v = 128256;
  Trainability t;
  t.all_params_train = false;
  EXPECT_DOUBLE_EQ(ComputeHeadActivations(m.s, Bf16(), t).saved_per_token,
                   m.frozen_norm() + 4 * v);
  EXPECT_DOUBLE_EQ(ComputeHeadActivations(m.s, Bf16()).saved_per_token,
                   m.frozen_norm() + 2 * m.e * m.h + 4 * v);
}

// A frozen Linear followed by its consumer: mm saves mat1 (the input) for mat2's gradient only
// (derivatives.yaml mm/addmm), so a frozen weight with an input that requires grad saves nothing
// per token, and a trainable weight whose input needs no grad still saves the input.
// x -f-> y -g-> z -h-> w (bytes 10, 20, 30, 40), nothing saved. Alone, y dies after g: the
// forward peak is z + w = 70 at h. Kept through h (a Python local to the function's return),
// y adds its 20 there: 90. It takes no gradient for that, so backward is the same.
TEST(AutogradLedgerTest, AKeptTensorLivesToTheLastOpWithoutAGradient) {
  auto chain = [](bool keep) {
    AutogradLedger g;
    int x = g.Tensor("x", 10), y = g.Tensor("y", 20), z = g.Tensor("z", 30), w = g.Tensor("w", 40);
    g.Op("f", {x}, y, {});
    g.Op("g", {y}, z, {});
    g.Op("h", {z}, w, {});
    if (keep) g.KeepAliveThroughLastOp(y);
    return g.Run(x, w);
  };
  ActivationLedger plain = chain(false), kept = chain(true);
  EXPECT_DOUBLE_EQ(plain.forward_peak_per_token, 30 + 40);
  EXPECT_DOUBLE_EQ(kept.forward_peak_per_token, 20 + 30 + 40);
  EXPECT_DOUBLE_EQ(kept.saved_per_token, 0);
  EXPECT_DOUBLE_EQ(kept.backward_peak_per_token, plain.backward_peak_per_token);
}

TEST(AutogradLedgerTest, SavesOnlyForGradientsItComputes) {
  for (bool weight_trains : {false, true}) {
    for (bool input_rg : {false, true}) {
      AutogradLedger g;
      int x = g.Tensor("x", 10);
      int y = g.Tensor("y", 20);
      g.Op("linear", {x}, y, {{x, SavedFor::kParamGrad}});
      g.SetParam(200, weight_trains, weight_trains);
      ActivationLedger r = g.Run(x, y, input_rg);
      EXPECT_DOUBLE_EQ(r.saved_per_token, weight_trains ? 10 : 0) << weight_trains << input_rg;
      // Backward allocates the input's gradient only when the input requires grad.
      double grad_in = input_rg ? 10 : 0;
      double node = weight_trains || input_rg ? r.saved_per_token + 20 + grad_in : 0;
      EXPECT_DOUBLE_EQ(r.backward_peak_per_token, node) << weight_trains << input_rg;
    }
  }
}

}  // namespace
}  // namespace shardtune::model
