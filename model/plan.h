// The training plan: every FSDP knob shardtune estimates, simulates, tunes and runs (README.md
// "Architecture"). Names follow PyTorch FSDP2 (README.md "Conventions"). Defaults are what a user
// of fully_shard gets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/dtype.h"

namespace shardtune::model {

enum class ShardingStrategy {
  kFullShard,         // ZeRO-3: params, grads, optimizer sharded over the shard group
  kShardGradOp,       // ZeRO-2: params stay gathered from forward to the end of backward
  kNoShard,           // DDP-like: everything replicated, gradients all-reduced
  kHybridShard,       // FULL_SHARD inside a shard group, replicated (all-reduce) across groups
  kHybridShardZero2,  // SHARD_GRAD_OP inside a shard group, replicated across groups
};

// kFirstK: the first k blocks of each stack rerun in backward, the rest keep their activations
// (Megatron-LM's --recompute-granularity full --recompute-method block --recompute-num-layers k;
// issue #46's per-block policy, the mix of full and none that just fits).
// kBlocks: a policy per text block (Plan::checkpoint_blocks): keep, rerun whole, or op-level SAC
// with its own save set, as tune's per-block search (planner/block_sac.h) chooses it.
enum class Checkpointing { kNone, kFull, kSelective, kEveryK, kFirstK, kBlocks };

// Op-level selective activation checkpointing (issue #46): which op outputs a checkpointed block
// keeps from its forward, as torch.utils.checkpoint's create_selective_checkpoint_contexts policy
// answers MUST_SAVE for them (torch/utils/checkpoint.py _CachingTorchDispatchMode); every other op
// of the block reruns in backward from the block input. The ops, in the forward order torchtitan's
// dense block runs them (torchtitan/models/llama3/model.py Attention.forward: wq, wk, wv, sdpa,
// wo; FeedForward.forward: w2(silu(w1(x)) * w3(x))): bit i of a SacSave is kSacOpNames[i]. The
// save set applies where model::TorchtitanOpSacApplies (a SwiGLU block of torchtitan's modeling;
// in its MoE block w1, w3, w2 are the routed experts' grouped GEMMs, GroupedExperts' w1, w3, w2);
// bit 7 (sdpa) counts only under SDPA attention.
using SacSave = uint32_t;
inline constexpr int kSacOps = 8;
inline constexpr const char* kSacOpNames[kSacOps] = {"wq", "wk", "wv", "wo", "w1", "w3", "w2", "sdpa"};
inline constexpr int kSacMatmuls = 7;  // bits 0-6: the block's aten.mm calls in forward order
inline constexpr SacSave kSacSdpaBit = SacSave{1} << 7;
inline constexpr SacSave kSacAll = (SacSave{1} << kSacOps) - 1;
// torchtitan's `_save_list` policy (torchtitan/distributed/activation_checkpoint.py
// _get_custom_policy): every odd-numbered aten.mm and the SDPA kernel's output. A rule rather
// than a set (a biased projection is aten.addmm, neither saved nor counted: wq, wv, w1, w2 of a
// bias-free block; wo, w3 of Qwen2's biased q/k/v), so a bit outside the op bits marks it;
// model::BlockActivations::SacOps resolves it for a block.
inline constexpr SacSave kTorchtitanSacSave = SacSave{1} << 31;

// One run of text blocks under Checkpointing::kBlocks: blocks first..last (0-based, inclusive)
// keep everything (kKeep), rerun whole (kFull), or run op-level SAC keeping `save` (kSac).
struct BlockRun {
  enum class Kind { kKeep, kFull, kSac };
  int first = 0;
  int last = 0;
  Kind kind = Kind::kKeep;
  SacSave save = kTorchtitanSacSave;
  bool operator==(const BlockRun& o) const {
    return first == o.first && last == o.last && kind == o.kind && (kind != Kind::kSac || save == o.save);
  }
};
enum class Offload { kNone, kOptimizer, kAll };  // kAll: params + grads + optimizer on the host
// Saved activations to pinned host memory. kVerlAsync: verl's enable_activation_offload
// (verl/utils/activation_offload.py AsyncDoubleBufferGroupOffloadHandler): every FSDP layer but the
// last offloads the tensors autograd saves in its forward on a device-to-host stream while the
// next layer computes, and reloads them one layer ahead in backward, so at most two layers' saved
// activations are on the GPU; the pinned copies come from PyTorch's CachingHostAllocator.
enum class ActivationOffload { kNone, kVerlAsync };
enum class BackwardPrefetch { kPre, kPost, kNone };
enum class Optimizer { kAdamW, kSgd, kAdafactor };
// How the optimizer's update is run; decides its temporaries (torch/optim/adam.py).
enum class OptimizerImpl { kForeach, kFused, kForLoop };
enum class Attention { kSdpa, kEager };  // SDPA = flash/memory-efficient kernels (no S^2 saved)
// Which kernel torch's SDPA dispatches to (torch.nn.attention.SDPBackend). kAuto: PyTorch's own
// choice on the profiled machine (aten sdp_utils.cpp select_sdp_backend; on an H100 cuDNN
// attention when the bundled cuDNN is newer than 9.15, torch 2.11, FlashAttention-2 before:
// check_prefer_cudnn_attention); the others as `with sdpa_kernel(...)` forces them. Decides
// which measured attention rows time the step; memory is the same for flash, cudnn and efficient
// (output and logsumexp saved).
enum class SdpaBackend { kAuto, kFlash, kCudnn, kEfficient, kMath };
// How the LM head and the cross-entropy run.
//  kCrossEntropy: logits materialised ([B, S, V] in the compute dtype), upcast to fp32 when
//                 loss_fp32_upcast, F.cross_entropy (HF ForCausalLMLoss, torchtitan).
//  kFusedLinear:  fused linear cross-entropy, chunk by chunk over the tokens, the gradients
//                 computed in forward (Liger-Kernel LigerFusedLinearCrossEntropyFunction,
//                 src/liger_kernel/ops/fused_linear_cross_entropy.py; shardtune run's
//                 executor/nn/fused_loss.cc): only a chunk's logits ever exist; forward keeps the
//                 input's gradient [B, S, H] and the head weight's [V, H] for backward.
//  kVerlFlashCe:  verl's actor log-prob path with use_remove_padding (dp_actor.py
//                 _forward_micro_batch; torch_functional.py logprobs_from_logits): the packed
//                 tokens' logits [T, V] in the compute dtype, divided by the temperature in place
//                 through a squeeze view (autograd's CopySlices), then flash-attn's Triton
//                 cross_entropy_loss with inplace_backward: no fp32 copy of the logits. What it
//                 allocates: model/activations.cc VerlFlashCeHead.
//  kVerlPaddedCe: verl's log-prob path without use_remove_padding (the same function's padded
//                 branch): the lm_head output [B, S, V] divided by the temperature in place, its
//                 response slice [B, response_len, V] copied by reshape, flash-attn's in-place
//                 cross-entropy on the copy. model/activations.cc VerlPaddedCeHead.
//  kVerlFusedTorch: verl's use_fused_kernels with fused_kernel_options.impl_backend torch
//                 (verl/models/transformers/dense_common.py forward_with_torch_backend,
//                 verl/utils/experimental/torch_functional.py FusedLinearForPPOFunction): the
//                 model returns log-probs and entropy [T] in the compute dtype; forward runs the
//                 head chunk by chunk (512 rows) and saves only its input; backward recomputes
//                 each chunk's logits and accumulates the weight's gradient [V, H].
//                 model/activations.cc VerlFusedTorchHead.
//  kVerlFusedTriton: the same with impl_backend triton (verl/utils/kernel/linear_cross_entropy.py,
//                 kernels.py efficient_entropy_forward / _backward): forward keeps fp32 partial
//                 max / sum / entropy per 1024-entry vocabulary split, backward writes d logits
//                 [T, 9504] a vocabulary split at a time. model/activations.cc VerlFusedTritonHead.
//  kTrlChunkedNll: TRL's SFTTrainer default loss_type "chunked_nll" (trl/trainer/sft_trainer.py
//                 at f2cd577 _chunked_cross_entropy_loss): the valid tokens gathered to the front
//                 (hidden[order], a copy kept for backward), then per 256-token chunk, under
//                 non-reentrant checkpointing, fp32 logits = h.float() @ w.float().t() (a fp32
//                 copy of the head weight per chunk, fp32 GEMMs), log_softmax, nll and the
//                 accuracy/entropy metrics; backward reruns each chunk. model/activations.cc
//                 TrlChunkedNllHead.
//  kTrlLogps:     TRL's per-token log-probabilities of the labels (trl/trainer/utils.py at f2cd577
//                 selective_log_softmax, which DPOTrainer._compute_loss runs on the policy's and
//                 the reference's logits [rows, S, V]): in bf16/fp16 a Python loop over the rows,
//                 each F.log_softmax(row) (its output saved) then gather; in fp32 a gather and a
//                 per-row logsumexp (the logits saved). The caller holds the logits through its
//                 loss. model/activations.cc TrlLogpsHead.
enum class LossKernel { kCrossEntropy, kFusedLinear, kVerlFlashCe, kVerlPaddedCe, kVerlFusedTorch, kVerlFusedTriton,
                        kTrlChunkedNll, kTrlLogps };
// A reference model's forward inside each training micro-batch, under no_grad, on the same rows,
// after the policy's forward and log-probs and before its backward, so it runs beside the
// policy's saved activations (TRL's DPOTrainer._compute_loss at f2cd577: `ref_outputs =
// self.ref_model(**model_kwargs)` in torch.no_grad(), then selective_log_softmax of its logits).
//  kNone:       none (SFT; DPO with precompute_ref_log_probs).
//  kFsdp2Root:  a second copy of the model, frozen in the plan's frozen dtype, sharded by TRL's
//               prepare_fsdp (trl/models/utils.py) with FSDP2: fully_shard on the root only, so its
//               forward gathers the whole model at once (reshard_after_forward passed explicitly:
//               it is freed after the forward, torch's FSDPState._lazy_init keeps only an
//               automatic root gathered).
//  kFsdp1Blocks: the same copy under FSDP1 with the plugin's auto-wrap policy: a unit per block,
//               the root (embeddings, final norm, head) left gathered after its forward (FSDP1's
//               _post_forward_reshard never frees the root's flat parameter).
//  kAdaptersOff: PEFT: the policy itself with its adapters disabled (use_adapter(model, None)):
//               its units gathered again, no second copy.
enum class InStepReference { kNone, kFsdp2Root, kFsdp1Blocks, kAdaptersOff };
// verl's fused log-prob heads (use_fused_kernels): never a [T, V] logits tensor beyond a chunk.
inline bool IsVerlFusedHead(LossKernel k) {
  return k == LossKernel::kVerlFusedTorch || k == LossKernel::kVerlFusedTriton;
}
// verl's own log-prob heads (either branch of dp_actor.py _forward_micro_batch, either backend of
// its fused kernels).
inline bool IsVerlLogProbHead(LossKernel k) {
  return k == LossKernel::kVerlFlashCe || k == LossKernel::kVerlPaddedCe || IsVerlFusedHead(k);
}
// Which code defines the model's forward: decides which tensors autograd saves.
enum class Modeling { kHf, kTorchtitan };
// Which ranks FSDP shards over when Ulysses context parallelism is on (plan.cp > 1).
//  kDpCp: over data-parallel x cp ranks (verl: the FSDP mesh is the whole world and the Ulysses
//         mesh [dp, sp] is separate, verl/workers/fsdp_workers.py; torchtitan: fully_shard on the
//         flattened "dp_shard_cp" mesh, torchtitan/distributed/parallel_dims.py; ROLL: FSDP2 over
//         the world, roll/distributed/strategy/fsdp2_strategy.py).
//  kDp:   over data-parallel ranks only; the cp ranks of a group hold replicas and all-reduce
//         their gradients (like HSDP's replicate dimension).
enum class CpFsdpMesh { kDpCp, kDp };
// What a role does with the model: train (forward, backward, optimizer) or infer (forward only,
// under no_grad: ROLL fsdp2_infer, verl's reference and log-prob workers).
enum class Role { kTrain, kInfer };

// LoRA adapters (Hu et al. 2021, "LoRA", eq. 3: h = W0 x + B A x, A: r x in, B: out x r) on the
// named projections of every block, as PEFT's LoraConfig(r, lora_alpha, target_modules). The base
// weights are frozen; the adapters are trainable (gradients, reduce-scatter, optimizer state).
struct LoraSpec {
  int rank = 0;                      // r; 0: no LoRA
  double alpha = 16.0;               // lora_alpha (scale alpha / r; no effect on memory or time)
  std::vector<std::string> targets;  // HF projection names: q_proj k_proj v_proj o_proj gate_proj
                                     // up_proj down_proj (GPT-2: c_attn c_proj c_fc)
  DType dtype = DType::kFp32;        // PEFT keeps adapter weights in fp32 (autocast_adapter_dtype)
  // LoraConfig(lora_dropout): p > 0 puts an nn.Dropout before each adapter's A (a dropped copy of
  // the input and, when the input requires grad, its bool mask are saved); 0 is nn.Identity.
  double dropout = 0.0;
  // PEFT LoraConfig(exclude_modules) as a string: modules whose full name the regular expression
  // matches whole (re.fullmatch; peft/tuners/tuners_utils.py check_target_module_exists) get no
  // adapter even when a target names them (verl's VL example: ".*visual.*"); "": none. A list of
  // names is the expression "(.*\.)?(name|...)" (PEFT: the name or a ".name" suffix).
  std::string exclude;
  bool enabled() const { return rank > 0; }
};

// Liger-Kernel's module patches that change what autograd keeps (linkedin/Liger-Kernel@ead96b6
// src/liger_kernel/transformers/monkey_patch.py _apply_liger_kernel_to_instance, which HF
// Trainer's use_liger_kernel and verl's use_liger call on the loaded model):
//  rms_norm: the decoder layers' input_layernorm / post_attention_layernorm and the final norm
//            become LigerRMSNorm (ops/rms_norm.py: saves X and an fp32 rstd per row, writes dX
//            into dY); q_norm / k_norm instances made before the patch stay Hugging Face's.
//  swiglu:   the MLP becomes LigerSwiGLUMLP (ops/swiglu.py LigerSiLUMulFunction: saves gate and up,
//            recomputes silu in backward and writes both gradients into them).
//  rope:     apply_rotary_pos_emb becomes liger_rotary_pos_emb (ops/rope.py: rotates q and k in
//            their own storage, saves only cos and sin).
// Its fused linear cross-entropy is loss_kernel fused_linear. Modelled for the Llama-family
// dense decoders (SwiGLU, RMSNorm, full rotary); Plan::Problems' caller checks the model.
struct LigerKernels {
  bool rms_norm = false;
  bool swiglu = false;
  bool rope = false;
  bool any() const { return rms_norm || swiglu || rope; }
};

// How FSDP units are formed from the module tree (PyTorch fully_shard calls).
struct WrapPolicy {
  enum class Kind { kBlock, kEveryK, kRanges, kSize };
  Kind kind = Kind::kBlock;
  int every_k = 1;                           // kEveryK: blocks per unit
  std::vector<std::pair<int, int>> ranges;   // kRanges: inclusive [first, last] block ranges
  int64_t min_num_params = 0;                // kSize: size_based_auto_wrap_policy threshold
  bool embedding_unit = false;  // embedding gets its own fully_shard (torchtitan); false: root
  bool head_unit = false;       // [final norm, LM head] get their own unit; false: root
  bool expert_units = false;    // MoE: every expert its own unit (ROLL strategy_config moe_experts)
  // Each block's attention and MLP (an MoE layer's sparse block) are units of their own, the
  // block's norms left to the root: ROLL's transformer_layer_cls_to_wrap naming the attention and
  // MLP classes (Qwen3MoeAttention, Qwen3MoeSparseMoeBlock; roll/utils/fsdp_utils.py apply_fsdp2
  // wraps the listed classes, never a parent of another listed module). Block wraps only.
  bool sub_block_units = false;
};

struct Plan {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  int shard_group_size = 0;     // 0: the whole world (FULL/GRAD_OP), GPUs per node (HYBRID)
  WrapPolicy wrap;
  int micro_batch = 1;          // sequences per rank per micro-batch (B)
  int64_t seq_len = 0;          // S; 0: the model's max_seq_len
  // Packed sequences (verl use_remove_padding / use_dynamic_bsz, ROLL and TRL packing): whole
  // sequences of at most `packed_seq_len` tokens concatenated without padding into a row of
  // micro_batch x seq_len tokens, position_ids restarting per sequence, FlashAttention's varlen
  // kernels keeping attention inside each sequence. Memory follows the row's tokens (every
  // tensor but attention's is per token, and flash attention's working set is linear in them);
  // attention's FLOPs follow the sequences (AttentionSeqLen). 0: not packed (each of the
  // micro_batch sequences is seq_len long). A token budget T (verl ppo_max_token_len_per_gpu)
  // is micro_batch 1 x seq_len T.
  int64_t packed_seq_len = 0;
  // A vision-language model's images (issue #43): `images` per sequence of seq_len tokens
  // (packed: per sequence of packed_seq_len), which become `image_tokens` of that sequence's
  // tokens in all (the merged patches: ModelSpec::vision's PatchesPerToken patches each, what the
  // tower's blocks run over). 0: text only (the tower does not run).
  int images = 0;
  int64_t image_tokens = 0;
  int grad_accum = 1;           // micro-batches per optimizer step
  bool no_sync = false;         // keep unsharded grads across micro-batches, reduce on the last
  Checkpointing checkpointing = Checkpointing::kNone;
  int checkpoint_every_k = 1;   // kEveryK: checkpoint every k-th block
  int checkpoint_first_k = 1;   // kFirstK: checkpoint the first k blocks of each stack
  // kFirstK only: the blocks after the first k run selective checkpointing instead of keeping
  // every activation ("first:K+selective"; issue #46's per-block mix of full and selective).
  bool checkpoint_rest_selective = false;
  // Selective blocks where op-level SAC applies keep these ops' outputs (kTorchtitanSacSave:
  // torchtitan's policy; "sac:wq+wv+..." on the command line).
  SacSave sac_save = kTorchtitanSacSave;
  // kBlocks: the text blocks' runs, in order, covering 0..num_layers-1 ("blocks:0-3=full,...").
  std::vector<BlockRun> checkpoint_blocks;
  // Whole-block checkpoints rerun reentrantly: torch.utils.checkpoint(use_reentrant=True)
  // (CheckpointFunction.backward reruns the block, holds its output in `outputs` and the
  // incoming gradient in `args` while torch.autograd.backward goes through the rerun), as
  // transformers' gradient_checkpointing_enable does unless told use_reentrant False, and as
  // shardtune's executor does (executor/nn/recompute.h). false: non-reentrant (torch's
  // recommended default, verl, TRL, torchtitan): the rerun's output is dropped, the incoming
  // gradient freed once its first node ran.
  bool checkpoint_reentrant = false;
  Offload offload = Offload::kNone;
  ActivationOffload activation_offload = ActivationOffload::kNone;
  // kVerlAsync: 0 offloads every block but the last (verl's enable_activation_offload); k >= 1
  // only the first k text blocks, the next one closing the last group as verl's handler does for
  // k + 1 layers ("--activation-offload first:K": issue #46's per-block offload, the rest keep
  // their activations on the GPU).
  int activation_offload_blocks = 0;
  DType param_dtype = DType::kBf16;   // compute dtype of gathered params
  DType reduce_dtype = DType::kFp32;  // gradient reduce-scatter / all-reduce dtype
  DType master_dtype = DType::kFp32;  // dtype of the sharded (master) params and optimizer state
  // dtype the frozen parameters (requires_grad false: LoRA's base, frozen prefixes, an inference
  // role's) were loaded in; FSDP2 keeps each sharded parameter in the dtype the module had at
  // fully_shard and casts to param_dtype only in the all-gather copy-in (_fsdp_param.py
  // _init_sharded_param, init_all_gather_outputs). PEFT users load the base with
  // torch_dtype=torch.bfloat16 while get_peft_model(autocast_adapter_dtype=True) keeps the adapters
  // in fp32. Unset (default): master_dtype, as when the whole model is loaded in it.
  std::optional<DType> frozen_dtype;
  bool reshard_after_forward = true;  // false for SHARD_GRAD_OP / HYBRID_SHARD_ZERO2
  bool forward_prefetch = false;      // explicit prefetch of the next unit in forward
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kPre;
  int max_inflight_allgathers = 2;    // FSDP2 keeps at most 2 (current + prefetched)
  Optimizer optimizer = Optimizer::kAdamW;
  OptimizerImpl optimizer_impl = OptimizerImpl::kForeach;  // torch's default on CUDA
  Attention attention = Attention::kSdpa;
  SdpaBackend sdpa_backend = SdpaBackend::kAuto;  // --sdpa-backend (time only)
  Modeling modeling = Modeling::kHf;
  bool loss_fp32_upcast = true;       // HF ForCausalLMLoss and torchtitan upcast logits to fp32
  bool keep_logits = false;  // caller holds outputs.logits through backward (HF Trainer drops it)
  LossKernel loss_kernel = LossKernel::kCrossEntropy;
  // TRL DPO's reference forward in each micro-batch (InStepReference); its rows are the plan's
  // micro-batch rows (chosen and rejected concatenated: 2 per preference pair).
  InStepReference reference = InStepReference::kNone;
  // verl's padded log-prob path (kVerlPaddedCe): the last response_len positions of each padded
  // sequence of seq_len (packed_seq_len for a token-budget row) are the ones whose log-probs are
  // computed (data.max_response_length); entropy_from_logits: the entropy term reads the
  // logits too (dp_actor.py calculate_entropy), which keeps the whole [B, S, V] lm_head output
  // alive until backward. Both unused by the other kernels, except that under verl's fused heads
  // (kVerlFusedTorch) entropy_from_logits means the entropy's gradient reaches the head
  // (entropy_coeff != 0), which adds the entropy branch to each chunk's backward.
  int64_t response_len = 0;
  bool entropy_from_logits = false;
  // HF flash_attention_2 called with a padding mask (verl's actor, ref and critic without
  // use_remove_padding; transformers modeling_flash_attention_utils.py _flash_attention_forward
  // -> _upad_input / pad_input): q, k, v are gathered to the real tokens and the output scattered
  // back into a padded tensor, which o_proj saves beside the kernel's own saved output.
  bool padding_mask = false;
  LigerKernels liger;  // Liger-Kernel's RMSNorm / SwiGLU / RoPE patches (all off: Hugging Face's)

  // Ulysses context parallelism (Jacobs et al. 2023, DeepSpeed-Ulysses): each rank of a cp group
  // holds S / cp tokens of the same sequences; attention runs after an all-to-all that trades
  // the sequence split for a head split. cp ranks share one micro-batch, so the data-parallel
  // degree is world / cp.
  int cp = 1;
  CpFsdpMesh cp_fsdp_mesh = CpFsdpMesh::kDpCp;
  // Expert parallelism as torchtitan runs it beside FSDP2 (parallelism.expert_parallel_degree,
  // torchtitan/distributed/parallel_dims.py and models/common/token_dispatcher.py): an MoE
  // layer's routed experts are split over `ep` consecutive ranks of the FSDP mesh (E / ep local
  // experts each), tokens travel to their experts and back by all-to-all, and the local experts
  // are FSDP-sharded over the remaining shard / ep ranks (the "efsdp" mesh). 1: off.
  int ep = 1;
  Role role = Role::kTrain;
  // Parameters whose HF name starts with one of these are frozen (no gradient, no reduction, no
  // optimizer state; still sharded and gathered): ROLL freeze_module_prefix, e.g.
  // "model.embed_tokens", "model.layers.0.", "visual.".
  std::vector<std::string> frozen_prefixes;
  LoraSpec lora;
  // Tiled MLP (ROLL apply_tiled_mlp / tiled_num_shards): the MLP runs over sequence tiles; 1: off.
  int tiled_mlp_shards = 1;

  // The frozen parameters' dtype after its default (master_dtype).
  DType FrozenDtype() const { return frozen_dtype.value_or(master_dtype); }
  // Global batch in sequences for a world of `world` ranks.
  int64_t GlobalBatch(int world) const {
    return static_cast<int64_t>(micro_batch) * grad_accum * DataParallel(world);
  }
  // Ranks that read different sequences: world / cp (cp ranks share a micro-batch).
  int DataParallel(int world) const { return cp > 0 ? world / cp : world; }
  // True when parameters have gradients at all: a training role with something trainable.
  bool Trains() const { return role == Role::kTrain; }
  // The plan of the reference forward `reference` names (InStepReference): an inference role on
  // the same rows, sharding and mesh, its parameters in FrozenDtype() (the load dtype: TRL's
  // prepare_fsdp does not upcast). kFsdp2Root: one unit (fully_shard on the root only);
  // kFsdp1Blocks: a unit per block (the plugin's transformer auto-wrap); kAdaptersOff: the
  // policy's own units and adapters. REQUIRES: reference != kNone.
  Plan ReferencePlan() const;
  // What rules out loss_kernel fused_linear for this plan, as Problems() reports it: (key,
  // expected, got) per conflict; empty when the fused loss can run. The fused loss never
  // materialises the logits (nothing can hold them, a forward-only role returns them) and
  // multiplies by the head weight itself (an adapter on lm_head would need its own chunked path).
  struct Conflict {
    std::string key, expected, got;
  };
  std::vector<Conflict> FusedLossConflicts() const;
  bool Sharded() const { return strategy != ShardingStrategy::kNoShard; }
  bool Hybrid() const {
    return strategy == ShardingStrategy::kHybridShard ||
           strategy == ShardingStrategy::kHybridShardZero2;
  }
  // Every problem with the plan for this world size and model depth (empty when valid), each as
  // "where:/key: expected ..., got ...". Rules: micro_batch, grad_accum, checkpoint_every_k,
  // max_inflight_allgathers >= 1; seq_len 0 (max_seq_len) or in [1, max_seq_len] where the caller
  // passes ModelSpec::SeqLenLimit() as max_seq_len (rotary models accept longer sequences); the
  // resolved shard group divides world (FULL_SHARD / SHARD_GRAD_OP: 0 or world; NO_SHARD: 0 or 1;
  // hybrid: <= world, equal is one replica); wrap every_k >= 1, size min_num_params >= 1, ranges
  // cover blocks 0..num_layers-1 in order without gaps or overlaps. no_sync with grad_accum 1 is
  // allowed (it has no effect); offload with NO_SHARD is allowed. cp >= 1 divides world and
  // seq_len (when given); tiled_mlp_shards >= 1; lora rank >= 0 with targets when > 0; frozen
  // prefixes non-empty. Checks that need the model (cp vs heads, names vs modules) live with the
  // model code.
  std::vector<std::string> Problems(const std::string& where, int world, int gpus_per_node,
                                    int num_layers, int64_t max_seq_len) const;
  // The shard group size after defaults, for a world of `world` ranks: shard_group_size when
  // set, else world (FULL_SHARD, SHARD_GRAD_OP), min(gpus_per_node, world) (hybrid; world when
  // gpus_per_node <= 0), 1 (NO_SHARD: nothing is sharded).
  // With cp > 1 and cp_fsdp_mesh dp, "world" here is the FSDP world, world / cp.
  int ResolvedShardGroup(int world, int gpus_per_node) const;
  // Ranks FSDP's mesh spans: world, or world / cp with cp_fsdp_mesh dp (cp ranks replicate).
  int FsdpWorld(int world) const;
  // Ranks a routed expert's parameters are FSDP-sharded over: the resolved shard group / ep
  // (torchtitan's efsdp = dp_shard x cp / ep); the shard group when ep is 1.
  int ExpertShardGroup(int world, int gpus_per_node) const {
    int g = ResolvedShardGroup(world, gpus_per_node);
    return ep > 1 && g % ep == 0 ? g / ep : g;
  }
  // seq_len after its default: max_seq_len when 0.
  int64_t ResolvedSeqLen(int64_t max_seq_len) const { return seq_len > 0 ? seq_len : max_seq_len; }
  // The length attention spans in a micro-batch whose rows are `resolved_seq_len` tokens: the
  // longest packed sequence when packed (its worst case: the row filled with sequences that long),
  // else the row itself.
  // verl's log-prob path with use_remove_padding: its micro-batch's tokens are packed into one row
  // whatever its size (flash-attn's head, or a fused head without a padding mask).
  bool VerlPacksTokens() const {
    return loss_kernel == LossKernel::kVerlFlashCe || (IsVerlFusedHead(loss_kernel) && !padding_mask);
  }
  int64_t AttentionSeqLen(int64_t resolved_seq_len) const {
    return packed_seq_len > 0 && packed_seq_len < resolved_seq_len ? packed_seq_len
                                                                    : resolved_seq_len;
  }
};

const char* ToString(ShardingStrategy s);
const char* ToString(Checkpointing c);
const char* ToString(Offload o);
const char* ToString(ActivationOffload a);  // "none", "verl_async"
const char* ToString(InStepReference r);    // "none", "fsdp2_root", "fsdp1_blocks", "adapters_off"
const char* ToString(BackwardPrefetch b);
const char* ToString(Optimizer o);
const char* ToString(OptimizerImpl o);
const char* ToString(Attention a);
const char* ToString(SdpaBackend b);
const char* ToString(LossKernel k);
const char* ToString(Modeling m);
const char* ToString(CpFsdpMesh m);  // "dp_cp", "dp"
const char* ToString(Role r);        // "train", "infer"
const char* ToString(WrapPolicy::Kind k);  // "block", "every", "ranges", "size"

// The names ToString() gives every value of E, in declaration order. Defined for ShardingStrategy,
// DType, Checkpointing, Offload, ActivationOffload, InStepReference, BackwardPrefetch, Optimizer, OptimizerImpl, Attention, LossKernel,
// Modeling,
// CpFsdpMesh, Role and WrapPolicy::Kind.
template <typename E>
const std::vector<std::string>& EnumNames();
// The value whose ToString() is `text`. Throws InputError "where: expected one of a, b, got
// \"x\" (did you mean \"a\"?)". Defined for the same enums as EnumNames().
template <typename E>
E ParseEnum(const std::string& text, const std::string& where);

// What reshard_after_forward means for each strategy in FSDP2: false for SHARD_GRAD_OP and
// HYBRID_SHARD_ZERO2 (fully_shard(reshard_after_forward=False)) and NO_SHARD, true otherwise. The
// strategy decides; Plan::reshard_after_forward only matters for FULL_SHARD / HYBRID_SHARD.
bool StrategyReshardsAfterForward(ShardingStrategy s);

// Parses the CLI's --wrap syntax: "block", "every:K", "ranges:0-7,8-31" (inclusive block ranges)
// or "size:N" (N with an optional K/M/B suffix: 10^3, 10^6, 10^9, e.g. "size:100M"). `where`
// ("--wrap") prefixes messages. Throws InputError. Ranges are checked against the model depth
// later, by Plan::Problems().
WrapPolicy ParseWrapSpec(const std::string& text, const std::string& where);
// The --wrap text of `w` (shortest exact suffix for size), so ParseWrapSpec round-trips.
// embedding_unit / head_unit have no compact syntax and are not written.
std::string WrapSpecToString(const WrapPolicy& w);
// Parses --checkpointing "none|full|selective|every:K|first:K|first:K+selective|sac:OPS|
// blocks:RUNS" into plan->checkpointing (and checkpoint_every_k for every:K, checkpoint_first_k
// for first:K, checkpoint_rest_selective for "+selective", sac_save for "sac:wq+wv+sdpa" (op
// names joined by '+', "none" for the empty set), checkpoint_blocks for
// "blocks:0-3=full,4-11=sac:wq+wv+w1+w2+sdpa,12-31=none" (each run "A-B=" or "A=" then full,
// none, selective or sac:OPS)). Throws InputError.
void ParseCheckpointingSpec(const std::string& text, const std::string& where, Plan* plan);
// Parses --activation-offload "none|verl_async|first:K" into plan->activation_offload and
// activation_offload_blocks (first:K: verl's handler over the first K blocks). Throws InputError.
void ParseActivationOffloadSpec(const std::string& text, const std::string& where, Plan* plan);
// The leading text blocks whose saved tensors verl's handler copies to pinned host memory, of a
// model with `num_layers` text blocks: none without activation offload or below three blocks
// (verl turns it off, verl/utils/activation_offload.py enable_activation_offloading), the first
// K under first:K (at most every block but the last), every block but the last under verl_async
// (the last group stays on the device). The handler covers one block more, which closes the last
// offloaded group. The one rule the estimate (Walker::OffloadsActivations) and run (FsdpRuntime,
// its validation) follow.
int ActivationOffloadedBlocks(const Plan& plan, int num_layers);
// The --activation-offload text of the plan ("none", "verl_async", "first:8").
std::string ActivationOffloadSpecToString(const Plan& plan);
// The --checkpointing text of the plan ("every:2", "first:12", "first:12+selective", "full", ...).
std::string CheckpointingSpecToString(const Plan& plan);
// Whether block `block` (a VL model's `vision_blocks` tower blocks first, then the text blocks)
// reruns whole in backward: every block under full, every k-th of each stack under every:K, the
// first k of each stack under first:K; none under none and selective (which reruns pieces of
// every block). The one rule the estimate (Walker::Checkpointed) and run (FsdpRuntime) follow.
bool BlockCheckpointed(const Plan& plan, int block, int vision_blocks);
// Whether block `block` runs selective checkpointing (reruns pieces of itself in backward): every
// block under selective, the blocks after the first k of each stack under first:K+selective. The
// one rule the estimate (Walker::Selective) and run (FsdpRuntime) follow.
bool BlockSelective(const Plan& plan, int block, int vision_blocks);
// Whether any block runs selective checkpointing: selective, first:K+selective, or a blocks: run
// of selective or sac:OPS.
bool AnySelectiveBlock(const Plan& plan);
// Whether the plan names an op-level SAC save set of its own (sac:OPS, or a blocks: run with one)
// rather than the model's selective rule (model::OpSacProblems says where that is allowed).
bool ExplicitSacSave(const Plan& plan);
// The op-level SAC save set of a selective block (BlockSelective): its kBlocks run's, else
// plan.sac_save.
SacSave BlockSacSave(const Plan& plan, int block, int vision_blocks);
// "wq+wv+w1+w2+sdpa" ("none" for the empty set), in kSacOpNames order; "selective" for
// kTorchtitanSacSave.
std::string SacSaveToString(SacSave save);
// A person's reading of the plan's per-block activation policy, e.g. "blocks 0-22: op-SAC keeps
// wq, wk, wv, wo, w1, w2, sdpa, reruns w3 and the elementwise ops; blocks 23-31: op-SAC keeps
// every op output, reruns the elementwise ops" (kBlocks; a uniform sac:OPS reads "every block:").
// Blocks whose activations go to the host (ActivationOffloadedBlocks) add ", offloaded to pinned
// host memory".
std::string DescribeBlockPolicy(const Plan& plan);
// The runs' text without the "blocks:" prefix ("0-3=full,4-31=sac:wq+sdpa").
std::string BlockRunsToString(const std::vector<BlockRun>& runs);
// The first problem of kBlocks runs against a model of `num_layers` text blocks (in order from
// 0, no gap or overlap, ending at the last block; num_layers <= 0: not checked) as (expected,
// got); nullopt when there is none.
std::optional<std::pair<std::string, std::string>> BlockRunProblem(const std::vector<BlockRun>& runs,
                                                                   int num_layers);

}  // namespace shardtune::model
