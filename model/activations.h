// Activation memory of one block and of the loss path, derived op by op from what PyTorch autograd
// saves for backward in the modeling code we follow (HF transformers or torchtitan), instead of a
// fitted bytes-per-token constant. Generalises Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", eq. 2 (sbh(34 + 5as/h) for GPT with fp16).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"

namespace shardtune::model {

struct SavedTensor {
  std::string name;        // e.g. "mlp.act_fn input (gate_proj output)"
  double bytes_per_token;  // bytes per sequence position of the micro-batch (x B·S for the tensor)
};

// Result of walking one sub-graph (a block, or the head with the loss) through forward and
// backward with a ledger of live tensors. All figures are bytes per token (multiply by B·S).
struct ActivationLedger {
  std::vector<SavedTensor> saved;  // kept from forward to backward (and tensors the caller holds)
  double saved_per_token = 0;      // sum of `saved`
  // Most bytes live at once during forward, counting the sub-graph's input, what it saved so far
  // and its temporaries (e.g. RMSNorm's fp32 square).
  double forward_peak_per_token = 0;
  // Most bytes live at once during backward: what is still saved, the incoming gradient,
  // gradients of intermediates and kernel workspaces (e.g. flash attention's fp32 dq_accum).
  double backward_peak_per_token = 0;
  // The backward moment by moment: at each node, the bytes per token live then and the fraction of
  // the graph's parameter elements whose gradients exist by then (a matmul's backward allocates
  // its weight gradient, which AccumulateGrad keeps). The per-token bytes scale with B·S, the
  // gradients do not, so the peak of (tokens x live + grads x fraction) is found by the caller.
  struct BackwardPoint {
    double live_per_token = 0;
    double param_grad_fraction = 0;
  };
  std::vector<BackwardPoint> backward_profile;
  // Bytes read and written by the memory-bound (non-matmul, non-attention) ops of forward, per
  // token: each such op reads its inputs and writes its output once. Backward moves about twice.
  double elementwise_traffic_per_token = 0;
  // Ops recorded in forward: about one kernel launch each (views excluded), what the host issues.
  int forward_ops = 0;
  // Kernels the backward nodes of the ops a gradient reaches launch: two per op (the input's and
  // the weight's gradient; HF Llama's backward launched 2.05x its forward's kernels on the H100,
  // tests/data/validation/fsdp2_h100_host_costs2.jsonl), one fewer for each parameter that does
  // not train (LoRA's and frozen layers' base weights) and each op whose inputs need no gradient;
  // ops no gradient reaches (a frozen prefix) launch none. 2 x forward_ops when everything trains.
  int backward_ops = 0;
  // A head whose loss is the fused linear cross-entropy (LossKernel::kFusedLinear) or one of verl's
  // fused log-prob heads (kVerlFusedTorch, kVerlFusedTriton): what does not scale with the tokens,
  // which the caller adds (all zero otherwise).
  struct FusedLoss {
    bool on = false;
    // Liger's loss runs all three head GEMMs in forward and its backward only scales what forward
    // saved; verl's heads run the logits GEMM in forward and all three in backward.
    bool gradients_in_forward = true;
    // Rows of one chunk: 0 for Liger's rule (FusedLinearChunkRows), else this many (verl's
    // FusedLinearForPPO: 512); FusedChunkRows below applies either.
    int64_t fixed_chunk_rows = 0;
    // The head weight's gradient [V, H] in the compute dtype: zeros_like(weight) at the start of
    // forward, accumulated chunk by chunk, kept to backward, where it becomes the weight's
    // gradient (0 when the head weight is frozen).
    double weight_grad_bytes = 0;
    // Transient bytes per chunk row, at its most: the chunk's logits in the compute dtype and
    // their fp32 copy (the fp32 gradient and its cast back, as many); with soft-capping (Gemma 2)
    // at least the fp32 logits and their fp32 tanh derivative. Times
    // FusedLinearChunkRows(tokens, V, H).
    double chunk_row_bytes = 0;
    // The chunk loop's memory-bound traffic per token, part of elementwise_traffic_per_token (its
    // backward only scales the two saved gradients).
    double chunk_traffic_per_token = 0;
    // Bytes per token live beyond the sub-graph's input while the chunks run: what was saved (the
    // final norm's tensors, the input gradient) and the norm's output the chunks read.
    double live_per_token = 0;
    // Backward (verl's heads). Transient bytes per chunk row at their most; at a chunk's weight-
    // gradient GEMM, the bytes per row still live and the [V, H] product itself (which exists
    // whether or not the weight trains: verl's torch backend computes it unconditionally, its
    // Triton backend returns an empty_like(weight) gradient either way); the chunk loop's memory-
    // bound traffic per token; and the ledger's point for the head's node (bytes per token live
    // then, the share of the head's parameter gradients made by then), which the transients join.
    double backward_chunk_row_bytes = 0;
    double backward_dw_row_bytes = 0;
    double backward_dw_bytes = 0;
    double backward_traffic_per_token = 0;
    // What the backward's chunk loop carries from one chunk into the next: verl's torch backend
    // binds each chunk's (dhidden [c, H], dW [V, H]) to loop variables (`h, v = ...`) that live
    // until the next chunk's call returns, so from the second chunk on they sit under its
    // transients (measured: tests/bench/verl_fused_memory.py).
    double backward_carry_bytes = 0;
    double backward_carry_row_bytes = 0;
    // TRL's chunked NLL (kTrlChunkedNll): its GEMMs run in fp32 (h.float() @ w.float().t(), no
    // tensor cores under torch's default allow_tf32 False); each chunk makes a fp32 copy of the
    // head weight [V, H] in forward and again in backward (`chunk_fixed_bytes`,
    // `backward_fixed_bytes`); from the second chunk on, the input's gradient [T, H] summed over
    // the chunks is live too (`backward_carry_per_token`); the backward runs this many GEMMs of the
    // head's size (0: the logits' again and both gradients', 1 + kMatmulBackwardRatio).
    bool fp32_gemms = false;
    double chunk_fixed_bytes = 0;
    double backward_fixed_bytes = 0;
    double backward_carry_per_token = 0;
    double backward_head_gemms = 0;
    BackwardPoint backward_point;
  } fused_loss;
};

// Rows of one chunk of the fused linear cross-entropy over `rows` tokens: Liger-Kernel's rule
// (ops/fused_linear_cross_entropy.py: inc_factor = cdiv(V, H); chunk_size =
// next_power_of_2(cdiv(BT, inc_factor))), so a chunk's logits are about as large as the hidden
// states [BT, H]; at most `rows`.
int64_t FusedLinearChunkRows(int64_t rows, int64_t vocab, int64_t hidden);
// Rows of one chunk of a fused head over `rows` tokens: its fixed chunk (verl's 512) or Liger's
// rule; at most `rows`.
int64_t FusedChunkRows(const ActivationLedger::FusedLoss& fused, int64_t rows, int64_t vocab,
                       int64_t hidden);
// verl's FusedLinearForPPO chunk (verl/utils/experimental/torch_functional.py: chunk_size=512, the
// default forward_with_torch_backend constructs it with).
inline constexpr int64_t kVerlFusedChunkRows = 512;
// TRL's chunked NLL chunk (trl/trainer/sft_trainer.py at f2cd577: _CHUNKED_LM_HEAD_CHUNK_SIZE).
inline constexpr int64_t kTrlChunkRows = 256;
// verl's Triton linear cross-entropy (verl/utils/kernel/kernels.py): the forward's vocabulary
// split (vocab_per_split = 1024, one fp32 max / sum / entropy partial per split and token) and
// the backward's d-logits split (BackwardEnum._Split_Dlogits_N, the default: vocab_per_split =
// 9504).
inline constexpr int64_t kVerlTritonForwardSplit = 1024;
inline constexpr int64_t kVerlTritonBackwardSplit = 9504;

// What one transformer block costs in activation memory.
struct BlockActivations {
  ActivationLedger full;           // no checkpointing
  double checkpoint_input_per_token = 0;  // full checkpointing keeps only the block input
  // Selective checkpointing (torchtitan op SAC): bytes per token the block keeps, and the matmul
  // FLOPs per token its backward reruns (the mms the policy recomputes; 0 where the block's op
  // order is not spelled out and every projection output is taken as saved).
  double selective_per_token = 0;
  double selective_recompute_matmul_flops_per_token = 0;
  // The share of the block's attention forward that selective's backward reruns: 1 where the
  // policy keeps nothing of the attention core (torchtitan's op SAC over eager attention, whose
  // bmm and softmax are not in its save list), else 0.
  double selective_recompute_attention = 0;

  // Op-level SAC with any save set (issue #46), where TorchtitanOpSacApplies (else empty): per
  // op of kSacOpNames, the output bytes per token keeping it costs (sdpa: the attention kernel's
  // saved outputs, 0 under eager attention, whose core reruns whole) and the matmul FLOPs per
  // token rerunning it costs (sdpa: 0, its cost is the attention forward's), and whether the
  // projection is outside torchtitan's count (a biased one, aten.addmm; an MoE block's experts).
  // An MoE block's w1, w3, w2 are its routed experts' grouped GEMMs (top_k rows per token).
  struct SacOp {
    double output_per_token = 0;
    double recompute_matmul_flops_per_token = 0;
    bool uncounted = false;  // aten.addmm or aten._grouped_mm: outside torchtitan's mm count
  };
  std::vector<SacOp> sac_ops;
  // Matmul FLOPs per token every save set reruns: an MoE block's router gate, which torchtitan
  // force-recomputes (model/activations.cc TorchtitanOpSac); 0 for a dense block.
  double sac_rerun_matmul_flops_per_token = 0;
  bool sac_sdpa = false;  // SDPA attention: the sdpa op's outputs can be kept
  bool HasOpSac() const { return !sac_ops.empty(); }
  // The explicit save set of `save` for this block (kTorchtitanSacSave: its odd-numbered
  // bias-free projections, and sdpa under SDPA). REQUIRES: HasOpSac().
  SacSave SacOps(SacSave save) const;
  // Under op-level SAC keeping `save`: bytes per token the block keeps (its input and the kept
  // outputs), matmul FLOPs per token its backward reruns, and the share of its attention forward
  // rerun (1 unless sdpa's outputs are kept under SDPA). REQUIRES: HasOpSac().
  double SacSavedPerToken(SacSave save) const;
  double SacRecomputeMatmulFlopsPerToken(SacSave save) const;
  double SacRecomputeAttention(SacSave save) const;
};

struct ActivationOptions {
  DType dtype = DType::kBf16;  // compute dtype (the plan's param_dtype)
  Attention attention = Attention::kSdpa;
  Modeling modeling = Modeling::kHf;
  bool loss_fp32_upcast = true;
  bool keep_logits = false;  // as Plan::keep_logits
  LossKernel loss_kernel = LossKernel::kCrossEntropy;
  int64_t seq_len = 1;         // S: eager attention's score matrices grow with it
  // Ulysses context parallelism degree (Plan::cp). With cp > 1 a "token" is a position of this
  // rank's slice, so ledgers multiply by B·S/cp: outside attention every tensor is
  // [B, S/cp, H]; inside, q/k/v/out are [B, S, heads/cp, d] (the same elements per slice token,
  // except KV heads repeated when cp > num_kv_heads), plus the all-to-all buffers (verl
  // utils/ulysses.py all_to_all_tensor) and the output held on both sides of its all-to-all.
  int cp = 1;
  // Expert parallelism (Plan::ep; torchtitan AllToAllTokenDispatcher): with ep > 1 an MoE layer
  // under --modeling torchtitan adds the dispatch all-to-all's output, its expert-major permuted
  // copy (what the experts save) and the int64 permutation, and on the way back the unpermuted
  // output and the combine all-to-all's output. Under --modeling hf it is ROLL's ExpertParallel
  // around transformers 5's experts (model/activations.cc RollExpertParallel).
  int ep = 1;
  // verl's padded log-prob head (LossKernel::kVerlPaddedCe): response positions per padded
  // position (Plan::response_len over the padded width), and whether the entropy reads the
  // logits (Plan::entropy_from_logits).
  double response_fraction = 1.0;
  bool entropy_from_logits = false;
  bool padding_mask = false;  // Plan::padding_mask: flash attention's unpad / pad copies
  LigerKernels liger;         // Plan::liger: Liger-Kernel's RMSNorm / SwiGLU / RoPE modules
  // TRL's selective_log_softmax (LossKernel::kTrlLogps): the rows its loop runs over (the
  // micro-batch's; 1 for a packed row), and whether the head runs under no_grad (a reference's
  // forward: nothing saved, one row's log-softmax at a time).
  int64_t logps_rows = 1;
  bool no_grad = false;
};

// Problems of plan.liger for this model, each "where:/liger/KERNEL: expected ..., got true": the
// kernels are modelled for Liger's patches of the Llama-family dense decoders (Llama, Mistral,
// Qwen2, Qwen3: SwiGLU MLPs, RMSNorm, full rotary) under --modeling hf. Empty when none is on.
std::vector<std::string> LigerProblems(const ModelSpec& spec, const Plan& plan, const std::string& where);

// Problems of an explicit save set for this model, "where:/checkpointing: expected ..., got ...":
// the save sets are the ops of a SwiGLU block of --modeling torchtitan (dense, or an MoE of
// routed experts), trained in full, without Ulysses or a tiled MLP (TorchtitanOpSacApplies).
// Empty when the plan names none.
std::vector<std::string> OpSacProblems(const ModelSpec& spec, const Plan& plan, const std::string& where);

// Which parameters of one sub-graph (a block, or the head: final norm + LM head) require grad, and
// whether its input does: autograd records a node only for an op with an input or a parameter
// that requires grad, and saves a tensor only for a gradient it computes (autograd_ledger.h), so
// a frozen Linear whose input requires grad saves its weight (the gathered parameter, not per
// token) but not its input. The default is a full fine-tune. model/trainable.h
// SubgraphTrainabilities builds these from the plan's frozen prefixes and LoRA.
struct Trainability {
  bool input_requires_grad = true;
  bool all_params_train = true;  // false: only `trainable` do
  // Names of the base parameters that require grad, relative to the block ("self_attn.q_proj
  // .weight", "mlp.down_proj.bias"; MoE experts as "block_sparse_moe.experts.*.gate_proj.weight":
  // any expert's) or, for the head, full names ("model.norm.weight", "lm_head.weight").
  std::vector<std::string> trainable;
  // Projections with LoRA adapters of rank lora_rank (PEFT: base frozen, lora_A [r, in] and
  // lora_B [out, r] trainable), named like `trainable` without ".weight".
  std::vector<std::string> lora_modules;
  int lora_rank = 0;
  double lora_dropout = 0;  // PEFT lora_dropout p (> 0: nn.Dropout before each adapter's A)
  bool FullFinetune() const {
    return input_requires_grad && all_params_train && lora_modules.empty();
  }
  // A string that differs between trainabilities that record different graphs (cache keys).
  std::string Key() const;
};

// Whether --checkpointing selective follows torchtitan's op-level SAC policy as its source
// writes it (model/activations.cc TorchtitanOpSac: every second aten.mm of the block recomputed):
// --modeling torchtitan, a SwiGLU block with separate q/k/v and gate/up projections, dense or
// torchtitan's MoE with routed experts only (softmax router, no shared expert, not GPT-OSS's or
// DeepSeek's, ep 1), no Ulysses, a full fine-tune. `spec` is the block's own (an MoE model's
// dense prefix: ModelSpec::DenseLayerSpec). Elsewhere selective keeps every projection output.
// The estimate and the executor (executor/fsdp/fsdp_runtime.cc) both decide by this.
bool TorchtitanOpSacApplies(const ModelSpec& spec, const ActivationOptions& opt,
                            const Trainability& t);

// The projections of spec's block (its own spec, as TorchtitanOpSacApplies) outside torchtitan's
// mm count, in kSacOpNames order (wq, wk, wv, wo, w1, w3, w2): a biased one (aten.addmm), and an
// MoE block's experts (aten._grouped_mm).
std::array<bool, kSacMatmuls> SacUncountedProjections(const ModelSpec& spec);
// The op set `save` keeps in a block whose projections `uncounted` are outside the count and
// whose attention is SDPA (`sdpa`): itself (its op bits) when explicit; for kTorchtitanSacSave
// torchtitan's rule, which a meta counter applies to the block's aten.mm calls in forward order:
// the odd-numbered ones are kept, and the SDPA kernel's output. The one rule the estimate
// (BlockActivations::SacOps) and run (FsdpRuntime's SacTape) follow.
SacSave ResolveSacSave(SacSave save, const std::array<bool, kSacMatmuls>& uncounted, bool sdpa);

// ActivationOptionsFor copies the plan's dtype, attention, modeling and loss settings.
ActivationOptions ActivationOptionsFor(const Plan& plan, int64_t seq_len);
// One block with the given trainability (default: full fine-tune). LoRA adds PEFT's adapter ops
// (lora_B(lora_A(x)) * scaling + base(x)): A saves x for its weight gradient (the base
// projection's input, the same storage: dropout 0 is nn.Identity; with dropout p > 0 A saves its
// own dropped copy and native_dropout saves a bool mask when x requires grad), B saves A's
// output [.., r].
BlockActivations ComputeBlockActivations(const ModelSpec& spec, const ActivationOptions& opt,
                                         const Trainability& t = {});
// The final norm, LM head and cross-entropy: the logits and loss peak. Logits the caller holds
// (HF returns outputs.logits) are in `saved` as "logits held by the caller".
ActivationLedger ComputeHeadActivations(const ModelSpec& spec, const ActivationOptions& opt,
                                        const Trainability& t = {});
// Bytes per token of the residual stream (a block's input or output): e x H.
double ResidualPerToken(const ModelSpec& spec, const ActivationOptions& opt);

}  // namespace shardtune::model
