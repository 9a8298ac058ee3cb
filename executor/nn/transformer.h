// A LibTorch decoder-only transformer built from a model::ModelSpec: Llama style (RMSNorm,
// rotary, SwiGLU, GQA, optional qk-norm) and GPT-2 style (LayerNorm, learned positions, GELU,
// Conv1D layout). Parameters carry the names and shapes of model/module_tree.cc, so the FSDP
// units of BuildFsdpUnits() map 1:1 onto them. The forward is functional: each segment (the
// forward segments of module_tree.h: embeddings, blocks, final norm, LM head + loss) reads its
// parameters from a ParamTable that the FSDP runtime fills with views of gathered flat buffers.
// With a cp group (Ulysses context parallelism, Jacobs et al. 2023, arXiv:2309.14509 Fig. 2)
// each rank's input is its contiguous slice S / cp of the group's sequences: positions start
// at cp_rank x S / cp, and attention trades the sequence split for a head split with an
// all-to-all before it and the inverse after it (ulysses.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/nn/recompute.h"
#include "model/model_spec.h"

namespace shardtune::exec {

class Communicator;

// Parameter name -> tensor in the compute dtype (views of a unit's gathered flat buffer).
using ParamTable = std::unordered_map<std::string, at::Tensor>;

// One micro-batch's images for a VL model (issue #43; Transformer::SetImages): what Qwen2-VL's
// image processor hands the model (image_processing_qwen2_vl.py) and where the text holds them.
struct ImageBatch {
  // [patches, in_channels x temporal_patch_size x patch x patch] fp32: every image's flattened
  // patches in the processor's order (each spatial_merge_size^2 group of patches contiguous),
  // the images one after another in the order their tokens appear in the micro-batch.
  at::Tensor pixel_values;
  // [B, S] bool: the image tokens' positions (input_ids == image_token_id); their count is the
  // patches / spatial_merge_size^2.
  at::Tensor image_mask;
  // Per image, its patch grid (grid_thw's h and w; t = 1: one image is one temporal patch).
  std::vector<std::pair<int64_t, int64_t>> grids;
  // [3, B, S] int64: M-RoPE's temporal, height and width position of every token (a model with
  // ModelSpec::mrope_section; MropePositionIds), undefined otherwise.
  at::Tensor position_ids;
  bool empty() const { return grids.empty(); }
};

// Qwen2-VL's get_rope_index (modeling_qwen2_5_vl.py Qwen2_5_VLModel.get_rope_index, images only,
// no padding) for an image mask [B, S] on the host and the images' patch grids in order of
// appearance (row by row): a text token's three positions are the next position; an image's
// tokens, a grid of gh x gw merge groups (patches / `merge`), start at the next position p and
// take (p, p + row, p + column); the text after it continues at p + max(gh, gw). Returns
// [3, B, S] int64.
at::Tensor MropePositionIds(const at::Tensor& image_mask, const std::vector<std::pair<int64_t, int64_t>>& grids,
                            int64_t merge);

struct TransformerOptions {
  at::ScalarType dtype = at::kFloat;  // compute (param) dtype
  bool sdpa = false;                  // at::scaled_dot_product_attention (LibTorch >= 2.0 only)
  double norm_eps = 1e-5;             // ModelSpec::norm_eps (rms_norm_eps, layer_norm_epsilon)
  double rope_theta = 10000.0;        // ModelSpec::rope_theta (HF rope_theta)
  model::RopeScaling rope_scaling;    // ModelSpec::rope_scaling: none, "linear" or "llama3"
  double rope_local_theta = 0;        // ModelSpec::rope_local_theta (Gemma 3's sliding layers)
  // LoRA scale alpha / r (PEFT's `scaling`); the adapters run when the ParamTable has them.
  double lora_scale = 1.0;
  // Selective activation checkpointing (plan checkpointing "selective"), with grad enabled only:
  // each block keeps its input, the matmul outputs and the attention core's tensors; norms and
  // the MLP activation keep only their inputs and are recomputed in backward (recompute.h).
  // Not inside a block that runs as torchtitan's op SAC (sac_tape(), fsdp_runtime.cc).
  bool selective = false;
  // When not empty: the text layers that run selective checkpointing (plan checkpointing
  // "first:K+selective": the layers after the first k; model::BlockSelective). Empty: all.
  std::vector<bool> selective_layers;
  // The LM head and loss as the fused linear cross-entropy (plan loss_kernel fused_linear,
  // fused_loss.h): the logits are never materialised whole.
  bool fused_loss = false;
  // torchtitan's model code where it saves other tensors than transformers' (plan modeling
  // torchtitan, torchtitan_ops.h): RMSNorm as F.rms_norm, the MoE as torchtitan's router, token
  // dispatcher and experts (no HF auxiliary loss: torchtitan's aux-loss-free expert bias
  // instead, expert_bias()). Rotary and attention stay as transformers computes them (CosSinRoPE computes the
  // same rotation in fp32; neither saves anything per token).
  bool torchtitan = false;
  at::Device device = at::kCPU;  // where the MoE load-balancing state lives (torchtitan)
};

// torchtitan's MoE.Config.load_balance_coeff default (models/common/moe.py; every torchtitan MoE
// model keeps it): the step of the auxiliary-loss-free expert bias (Wang et al. 2024,
// arXiv:2408.15664, as torchtitan's _update_expert_bias applies it).
constexpr double kTorchtitanLoadBalanceCoeff = 1e-3;

class Transformer {
 public:
  // REQUIRES: spec valid (Problems() empty) and TransformerSupportProblem(spec) empty; with a cp
  // group of size > 1 (not owned, outlives this), UlyssesProblem(spec, cp size) empty.
  // With an ep group of size > 1 (torchtitan only, expert parallelism) the MoE blocks hold
  // num_experts / ep local experts in torchtitan's layout (module_tree.h, ep > 1) and exchange
  // tokens with the group's ranks.
  Transformer(const model::ModelSpec& spec, TransformerOptions options, Communicator* cp = nullptr,
              Communicator* ep = nullptr);
  // The tensor shape of a parameter named as in module_tree.cc: [dim0] when inner == 1, else
  // [dim0, inner] (Linear [out, in], Conv1D [in, out], Embedding [V, H]).
  static std::vector<int64_t> Shape(int64_t dim0, int64_t inner);
  // Fills `full` (fp32, the parameter's full shape) with its initial value: norms' weights 1,
  // biases 0, other weights N(0, 0.02) (GPT-2 / Llama initializer_range), drawn from a generator
  // seeded by (seed, name), so the value depends on neither the wrap policy nor the world size.
  // LoRA (peft/tuners/lora/layer.py, LoraLayer.reset_lora_parameters): lora_A [r, in]
  // kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), lora_B zeros.
  // norm_unit_offset (Gemma's (1 + w) norms): norm weights start at 0 instead of 1.
  static void InitParameter(const std::string& name, uint64_t seed, const at::Tensor& full,
                            bool norm_unit_offset = false);
  // A local-experts tensor of an expert-parallel unit ("<moe>.experts.w1|w2|w3", or GPT-OSS's
  // 3-D names), full [el, ...] holding experts first_expert .. first_expert + el - 1 of
  // num_experts: each slice initialised as InitParameter initialises that expert's HF tensor
  // (w1 = gate_proj, or up_proj without a gate; w3 = up_proj; w2 = down_proj; GPT-OSS's slices of
  // its [E, ...] tensors), so values do not depend on ep.
  static void InitLocalExperts(const std::string& name, uint64_t seed, const at::Tensor& full,
                               int64_t first_expert, int64_t num_experts, bool gated);

  // Forward of segment `segment` (module_tree.h numbering). Segment 0 takes tokens [B, S] int64
  // and returns hidden [B, S, H]; blocks and the final norm map hidden to hidden; the head
  // segment returns the mean cross-entropy of `labels` [B, S] (a scalar, fp32: the logits are
  // upcast to fp32 first, as HF's ForCausalLMLoss and torchtitan do). With cp, S is the local
  // slice and the head returns this rank's share: its token losses summed / (B x S x cp), so
  // the shares of a cp group sum to the mean over the full sequences.
  //
  // A VL model's vision blocks are segments 1 .. V (model::ModelSpec::VisionBlocks, before the
  // text blocks): each maps the tower's hidden states [patches, C] to the next. What runs around
  // them, outside any activation checkpoint (HF checkpoints each vision block alone), is
  // EnterSegment's and LeaveSegment's.
  at::Tensor Segment(const ParamTable& params, int segment, const at::Tensor& input,
                     const at::Tensor& labels) const;
  int num_segments() const;
  bool IsBlockSegment(int segment) const;
  bool IsVisionSegment(int segment) const;
  // The micro-batch's images for the forward (and the backward and recompute after it); empty:
  // a text-only micro-batch, whose forward skips the tower (Skips). The pixel values live until
  // the next call, as the batch a trainer holds for its micro-batch's forward and backward
  // (verl's micro-batch dict) does. REQUIRES: a Qwen2-VL or Qwen2.5-VL tower
  // (TransformerSupportProblem), each grid's sides multiples of spatial_merge_size, and patches
  // and image tokens that agree.
  void SetImages(ImageBatch images) const;
  // A vision segment of a micro-batch without images: nothing runs, nothing is gathered.
  bool Skips(int segment) const;
  // Runs before segment `segment`'s Segment (identity but for the first vision block): takes the
  // text embeddings `x` [B, S, H] aside and returns the patch embedding of the pixel values in
  // the tower's window order (Qwen2_5_VisionTransformerPretrainedModel.forward up to its blocks).
  at::Tensor EnterSegment(const ParamTable& params, int segment, const at::Tensor& x) const;
  // Runs after segment `segment`'s Segment (identity but for the last vision block): the patch
  // merger over the tower's output, back to image order, scattered into the text embeddings at
  // the image tokens (Qwen2_5_VLModel.forward: inputs_embeds.masked_scatter(image_mask,
  // image_embeds)); returns them [B, S, H].
  at::Tensor LeaveSegment(const ParamTable& params, int segment, const at::Tensor& y) const;
  const model::ModelSpec& spec() const { return spec_; }
  // The rotary inverse frequencies [D/2] in fp32 (`f32`'s device), with options().rope_theta
  // and rope_scaling ("linear", "llama3" or "yarn") applied as transformers does.
  // `local`: a sliding layer's frequencies (rope_local_theta, unscaled) when the spec has one.
  at::Tensor InverseFrequencies(int64_t D, const at::TensorOptions& f32, bool local = false) const;
  // Rotary position embedding of q or k [B, h, S, D] at positions offset .. offset + S - 1:
  // rotate_half over the first RotaryDims(D) features with their own frequencies, the rest
  // passed through (partial rotary: GPT-NeoX's rotary_pct, Phi-3's partial_rotary_factor).
  // (RotaryDims in transformer_support.h).
  at::Tensor Rotary(const at::Tensor& x, int64_t offset, bool local = false) const;
  // A model with ModelSpec::mrope_section: the layer's cos and sin [B, 1, S, D] in the compute
  // dtype, each of the D features taking its section's position row (apply_multimodal_rotary_pos_emb:
  // a cat per layer, as transformers makes them), from the micro-batch's position_ids (arange
  // in all three rows for text-only batches).
  std::pair<at::Tensor, at::Tensor> MropeCosSin(int64_t B, int64_t S, const at::Tensor& like) const;
  // A packed micro-batch (plan packed_seq_len > 0; trainer.cc): the row [1, T] that the next
  // forward (and the backward and recompute after it) reads holds whole sequences of these
  // lengths, one after another, T their sum; empty: not packed. Positions restart at 0 in each
  // sequence and attention stays inside it, as FlashAttention's varlen kernels with
  // cu_seqlens do (verl use_remove_padding: flash_attn_varlen_func over position_ids that
  // restart per sequence, transformers' _flash_attention_forward). Each run of consecutive
  // sequences of one length is attended as a batch of them ([n, heads, s, D]), so a row of n
  // sequences of s tokens computes, saves and frees what an unpacked micro-batch of n x s does.
  void SetPacking(std::vector<int64_t> lengths) const;
  const std::vector<int64_t>& packing() const { return packing_; }
  // Releases the rotary cos/sin and attention masks the layers of one forward shared (FsdpRuntime
  // calls it after a forward and after a backward, whose recomputed blocks make them again).
  // `keep_position_tables`: M-RoPE's [3, B, S, D] tables stay (a checkpointed text layer saves
  // them as its inputs, so transformers keeps them to the backward's end).
  void ClearSharedConstants(bool keep_position_tables = false) const;
  // The eager path's [S, S] bool mask (true: not attended), shared like the rotary constants.
  at::Tensor AttentionMask(int64_t S, int64_t window, const at::Device& device) const;
  // YaRN's attention factor (modeling_rope_utils.py _compute_yarn_parameters), which the rotary
  // embedding multiplies cos and sin by; 1 for every other scheme.
  double RopeAttentionScaling() const;
  // DeepSeek's MLA under YaRN multiplies its softmax scale by mscale^2, mscale = 0.1 x
  // mscale_all_dim x ln(factor) + 1 from the config's factor (DeepseekV3Attention); 1 otherwise.
  double MlaSoftmaxScaleFactor() const;
  // Causal attention of q [B, a, S, D] over k, v [B, kv, S, D] (GQA by repeat_kv), scaled by
  // D^-0.5; `window` > 0 and < S: a band of that many positions (sliding layers). With the
  // spec's attn_logit_softcap the scores are soft-capped before the mask and the softmax, as
  // Gemma 2's eager_attention_forward does (modeling_gemma2.py), on the eager path only.
  // `sinks` (GPT-OSS, [a]): each head's learned sink logit joins every row's softmax and is
  // dropped after it (modeling_gpt_oss.py eager_attention_forward), on the eager path.
  // `causal` false: every key of the sequence is attended (a vision tower's image or window).
  at::Tensor Core(at::Tensor q, at::Tensor k, at::Tensor v, int64_t window = 0,
                  const at::Tensor& sinks = {}, bool causal = true) const;
  // DeepSeek's multi-head latent attention (transformer.cc) of block attention module `prefix`
  // ("model.layers.N.self_attn") on {q_a_proj or q_proj output, kv_a_proj_with_mqa output}
  // [B, S, *]; returns o_proj's output [B, S, H].
  at::Tensor MlaAttention(const ParamTable& p, const std::string& prefix,
                          const std::vector<at::Tensor>& proj) const;
  // DeepSeek's router of MoE module `prefix` on tokens [T, H]: the top-k expert indices [T, k]
  // and their fp32 weights [T, k].
  // The MoE block `prefix` ("model.layers.N.block_sparse_moe") on x [B, S, H] (transformer.cc:
  // HF's dropless blocks, DeepSeek's router, GPT-OSS's router and experts).
  // `layer`: the block's index (torchtitan's expert bias is per MoE layer); -1 when unknown.
  at::Tensor Moe(const ParamTable& p, const std::string& prefix, const at::Tensor& x,
                 int layer = -1) const;
  // `choice_bias` [E] (defined: torchtitan's expert bias) is added to the scores the experts are
  // chosen by (the noaux_tc path's e_score_correction_bias), not to the weights.
  std::pair<at::Tensor, at::Tensor> DeepseekRoute(const ParamTable& p, const std::string& prefix,
                                                  const at::Tensor& flat,
                                                  const at::Tensor& choice_bias = {}) const;
  // HF load_balancing_loss_func (modeling_mixtral.py, also Qwen2/3-MoE's) without an attention
  // mask: routing = softmax(cat(router logits)) in their dtype, top-k of it one-hot [N, k, E]
  // (as float), tokens_per_expert = mean over tokens [k, E], router_prob_per_expert = mean of the
  // routing [E]; E x sum(tokens_per_expert x router_prob_per_expert). Differentiable in the
  // routing probabilities (the one-hot is not).
  static at::Tensor LoadBalancingLoss(const std::vector<at::Tensor>& router_logits, int num_experts,
                                      int top_k);
  // The router logits [T, E] of every MoE block of the micro-batch so far (spec.moe.router_aux_loss:
  // HF's outputs.router_logits); the head's loss adds router_aux_loss_coef x LoadBalancingLoss of
  // them and clears them, as does the embedding at the start of a micro-batch.
  const std::vector<at::Tensor>& router_logits() const { return router_logits_; }
  // The same list for a recomputed block's node to take its router logits from and put its own
  // outputs in (recompute.h Recompute with side outputs); the head reads and clears it.
  std::vector<at::Tensor>* mutable_router_logits() const { return &router_logits_; }

  // torchtitan's auxiliary-loss-free load balancing (options().torchtitan MoE models, moe.py
  // MoE.forward and components/optimizer/optimizer.py _update_expert_bias): each MoE layer's
  // expert_bias [E] (fp32) joins the router scores the top-k is chosen by; the tokens each expert
  // was chosen for are counted in forward (SetCounting: the training forward, not a recompute).
  // Undefined for other models.
  const at::Tensor& expert_bias() const { return expert_bias_; }  // [MoE layers, E] fp32
  at::Tensor& mutable_expert_bias() { return expert_bias_; }
  void SetCounting(bool on) const { counting_ = on; }
  // torchtitan's op-level SAC (recompute.h SacTape): the tape Proj and Core consult while a
  // SacRecompute node records or replays a block; off otherwise.
  SacTape* sac_tape() const { return &sac_; }
  // The optimizer step's pre-hook: the counts summed over `world` (every data rank's tokens),
  // bias += coeff x sign(mean - count) per layer, centred to a zero mean; counts reset.
  void UpdateExpertBias(Communicator& world);

 private:
  at::Tensor Embed(const ParamTable& p, const at::Tensor& tokens) const;
  // A memory-bound piece (a norm, the MLP activation) and its inputs.
  struct Piece {
    PieceFn fn;
    double arg;
    std::vector<at::Tensor> inputs;
  };
  Piece NormPiece(const ParamTable& p, const std::string& name, const at::Tensor& x) const;
  // The MLP activation (SwiGLU / GeGLU / GELU by the spec) on the input projections' outputs.
  Piece ActivationPiece(const std::vector<at::Tensor>& up) const;
  bool Selective() const;
  at::Tensor Run(const Piece& piece) const;  // RecomputePiece when Selective()
  // DropUntilBackward when Selective(): `consumers` are the projections that read y.
  void Drop(const at::Tensor& y, const Piece& piece,
            const std::vector<at::Tensor>& consumers) const;
  // Norm `name` of x, then `project` of its output (selective: the output is dropped after).
  std::vector<at::Tensor> NormThen(
      const ParamTable& p, const std::string& name, const at::Tensor& x,
      const std::function<std::vector<at::Tensor>(const at::Tensor&)>& project) const;
  at::Tensor Block(const ParamTable& p, int layer, const at::Tensor& x) const;
  // Vision block `b` (executor/nn/vision_tower.cc): Qwen2_5_VLVisionBlock / Qwen2VLVisionBlock on the
  // tower's hidden states [patches, C] in window order.
  at::Tensor VisionBlock(const ParamTable& p, int b, const at::Tensor& x) const;
  // The vision attention of block `b` on its qkv projection's output [patches, 3C]: 2-D rotary in
  // fp32, then attention within each image (or each Qwen2.5-VL window); returns [patches, C].
  at::Tensor VisionAttention(int b, const at::Tensor& qkv) const;
  // The tower's norms: Qwen2RMSNorm (Qwen2.5-VL) or LayerNorm with bias (Qwen2-VL), eps 1e-6.
  at::Tensor VisionNorm(const ParamTable& p, const std::string& name, const at::Tensor& x) const;
  std::vector<at::Tensor> Qkv(const ParamTable& p, const std::string& prefix,
                              const at::Tensor& x) const;
  // `layer`: the block's index (sliding-window layers attend to a band, with their own rotary
  // base); -1 for a layer without a window.
  at::Tensor Attention(const ParamTable& p, const std::string& prefix,
                       const std::vector<at::Tensor>& qkv, int layer = -1) const;

  at::Tensor GptOssMoe(const ParamTable& p, const std::string& prefix, const at::Tensor& x) const;
  // GPT-OSS's experts on the expert-sorted rows as torchtitan computes them (GptOssGroupedExperts):
  // gate_up [el, H, 2F], gate_up_bias [el, 2F], down [el, F, H], down_bias [el, H].
  static at::Tensor GptOssGroupedExperts(const at::Tensor& rows, const std::vector<int64_t>& counts,
                                         const at::Tensor& gate_up, const at::Tensor& gate_up_bias,
                                         const at::Tensor& down, const at::Tensor& down_bias);
  // The routed experts first .. first + counts.size() - 1 of MoE block `prefix` on the rows
  // sorted by expert, counts[e] for the e-th; returns [rows, H].
  at::Tensor RoutedExperts(const ParamTable& p, const std::string& prefix, const at::Tensor& rows,
                           const std::vector<int64_t>& counts, int64_t first) const;
  // GroupedLinear (torchtitan_ops.h) that asks the op-SAC tape whether its output is kept, as Proj.
  at::Tensor TapedGroupedLinear(const at::Tensor& rows, const std::vector<int64_t>& counts,
                                at::TensorList weights) const;
  // MoE block `prefix`'s shared expert(s) on tokens [T, H] (with Qwen2-MoE's sigmoid gate).
  at::Tensor SharedExperts(const ParamTable& p, const std::string& prefix, const at::Tensor& flat) const;
  // torchtitan's MoE (moe.py MoE.forward; options_.torchtitan): TokenChoiceTopKRouter (the gate
  // in fp32 under autocast, softmax, top-k, route_norm as norm_topk_prob; DeepSeek's router as
  // DeepseekRoute), DispatchTokens, each local expert on its rows, CombineTokens, shared experts.
  at::Tensor TorchtitanMoe(const ParamTable& p, const std::string& prefix, const at::Tensor& x,
                           int layer) const;
  std::vector<at::Tensor> MlpUp(const ParamTable& p, const std::string& prefix,
                                const at::Tensor& x) const;
  at::Tensor MlpDown(const ParamTable& p, const std::string& prefix,
                     const std::vector<at::Tensor>& up) const;
  // A projection `module` (".weight", ".bias" when `bias`), plus its LoRA adapters when the
  // table has them: base(x) + lora_B(lora_A(x)) x scale (PEFT lora.Linear.forward, no dropout); adapters are
  // named "<module>.lora_A.default.weight" and ".lora_B.default.weight" (model/trainable.h).
  at::Tensor Proj(const ParamTable& p, const std::string& module, const at::Tensor& x, bool bias,
                  bool conv1d) const;
  at::Tensor Norm(const ParamTable& p, const std::string& name, const at::Tensor& x,
                  int64_t dim) const;
  at::Tensor HeadLoss(const ParamTable& p, const at::Tensor& x, const at::Tensor& labels) const;
  // The language-model loss of HeadLoss (before the MoE auxiliary loss): materialised logits, or
  // the fused linear cross-entropy (options_.fused_loss).
  at::Tensor CrossEntropy(const ParamTable& p, const at::Tensor& x, const at::Tensor& labels) const;
  at::Tensor FusedCrossEntropy(const ParamTable& p, const at::Tensor& x, const at::Tensor& labels) const;
  int64_t PositionOffset(int64_t local_seq_len) const;           // cp_rank x S / cp (0 without cp)
  // Attention of a packed row (SetPacking): q [1, T, a, D], k and v [1, T, kv, D] before the
  // head transpose; each run of equal lengths through the rotary and Core as [n, h, s, D];
  // returns [1, T, a*D].
  at::Tensor PackedAttention(at::Tensor q, at::Tensor k, at::Tensor v, bool sliding, int64_t window,
                             const at::Tensor& sinks) const;

  model::ModelSpec spec_;
  TransformerOptions options_;
  bool gpt2_names_ = false;  // learned positions: GPT-2's module names and Conv1D layout
  Communicator* cp_ = nullptr;  // Ulysses group (size > 1), or null
  Communicator* ep_ = nullptr;  // expert-parallel group (size > 1), or null
  // outputs.router_logits of the micro-batch in flight (spec.moe.router_aux_loss); Segment is
  // const (a pure function of its inputs but for this record).
  mutable std::vector<at::Tensor> router_logits_;
  at::Tensor expert_bias_;                  // [MoE layers, E] fp32 (torchtitan MoE), else undefined
  mutable at::Tensor tokens_per_expert_;    // [MoE layers, E] fp32: counts since the last update
  mutable bool counting_ = false;
  std::vector<int> moe_row_;                // per layer: its row of expert_bias_, -1 for dense
  mutable SacTape sac_;                     // torchtitan op SAC's tape (sac_tape())
  mutable int current_layer_ = -1;          // the text layer Block() is running, -1 outside
  // Position constants every layer shares, made once per shape as transformers makes them once
  // per forward: LlamaModel.forward computes position_embeddings = rotary_emb(x, position_ids)
  // (cos, sin) and the causal mask (create_causal_mask / sliding mask mapping) before the layers
  // and hands the same tensors to each, so autograd's saved copies in every layer's rotary mul
  // and masked scores are one pair of tensors, not one per layer. Keys: rotary (S, offset, rotary
  // dims, local theta, dtype, device) -> (cos, sin) [S, R]; mask (S, window, device) -> bool
  // [S, S]. ClearSharedConstants() drops the cache's references (saved ones live on in the graph).
  mutable std::map<std::tuple<int64_t, int64_t, int64_t, bool, int, std::string>,
                   std::pair<at::Tensor, at::Tensor>> rotary_cache_;
  mutable std::map<std::tuple<int64_t, int64_t, std::string>, at::Tensor> mask_cache_;
  // SetImages's micro-batch and what the tower derives from its grids once per forward, as
  // Qwen2_5_VisionTransformerPretrainedModel.forward does before its blocks.
  struct VisionState {
    ImageBatch images;
    at::Tensor window_index;   // [patches / m^2] int64: merge groups in window order
    at::Tensor reverse_index;  // [patches / m^2] int64: argsort(window_index)
    std::vector<int64_t> image_lengths;   // patches per image (cu_seqlens)
    std::vector<int64_t> window_lengths;  // patches per window (cu_window_seqlens), window order
    at::Tensor cos, sin;       // [patches, head_dim] fp32 in window order (position_embeddings)
    at::Tensor text_embeds;    // [B, S, H]: EnterSegment's x until LeaveSegment scatters into it
  };
  mutable VisionState vision_;
  // The model's M-RoPE cos and sin [3, B, S, D] in the compute dtype (Qwen2_5_VLRotaryEmbedding's
  // position_embeddings, made once per forward): MropeCosSin's source; cleared with the other
  // shared constants and by SetImages.
  mutable at::Tensor mrope_cos_, mrope_sin_;
  int nv_ = 0;  // vision blocks (ModelSpec::VisionBlocks)
  mutable std::vector<int64_t> packing_;  // SetPacking's lengths
  mutable at::Tensor packed_positions_;   // [T] int64: positions restarting per sequence (GPT-2)
};

}  // namespace shardtune::exec
