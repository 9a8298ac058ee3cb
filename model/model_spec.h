// The model spec: a decoder-only transformer described by its shape (README.md "Architecture").
// Plain data with documented defaults; Validate() checks every cross-field rule at once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/vision.h"

namespace shardtune::model {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiGlu };  // GELU: 2 matrices (up, down); SwiGLU: 3 (gate, up, down)
enum class PositionKind { kLearned, kRotary };
// Where a block's norms sit: before each sublayer (modeling_llama.py input_layernorm and
// post_attention_layernorm), after each sublayer's output before its residual add
// (modeling_olmo2.py post_attention_layernorm and post_feedforward_layernorm), or both
// (modeling_gemma2.py / modeling_gemma3.py: input_layernorm, post_attention_layernorm,
// pre_feedforward_layernorm, post_feedforward_layernorm).
enum class NormPlacement { kPre, kPost, kSandwich };

// Mixture of experts in every block's MLP (Mixtral, Qwen-MoE, DeepSeek style shared experts).
struct MoeSpec {
  int num_experts = 0;               // 0: dense MLP
  int top_k = 0;                     // experts each token is routed to
  int num_shared_experts = 0;        // always-on experts (Qwen2-MoE, DeepSeek)
  int64_t expert_ffn_hidden = 0;     // 0: the model's ffn_hidden
  int64_t shared_expert_ffn_hidden = 0;  // 0: expert_ffn_hidden
  bool shared_expert_gate = false;   // Qwen2-MoE's sigmoid gate [H -> 1] on the shared expert
  // HF output_router_logits: every layer's router logits are returned with the outputs and
  // ForCausalLM adds load_balancing_loss_func's auxiliary loss (modeling_mixtral.py,
  // modeling_qwen3_moe.py): the logits live from their layer's forward to the loss, and the loss
  // builds an int64 one_hot [L·T, top_k, E] and its fp32 copy (model/activations.cc).
  bool router_aux_loss = false;
  // ForCausalLM's router_aux_loss_coef: loss += coef x aux_loss (HF's default 0.001; GPT-OSS's
  // configs 0.9). Read with output_router_logits; changes values only (run computes it).
  double router_aux_loss_coef = 0.001;
  // The top-k routing weights renormalised to sum to 1 (Mixtral always; Qwen's norm_topk_prob).
  // Changes values only; the executor computes with it.
  bool norm_topk_prob = true;
  // GPT-OSS (modeling_gpt_oss.py): the router Linear has a bias; the experts are stored as 3-D
  // tensors, experts.gate_up_proj [E, H, 2F] (gate and up interleaved) with gate_up_proj_bias
  // [E, 2F] and experts.down_proj [E, F, H] with down_proj_bias [E, H] (FSDP2 shards dim 0, the
  // experts; no per-expert modules, so no per-expert units), and each expert computes the clamped
  // SwiGLU (up.clamp(+-limit) + 1) * gate.clamp(max=limit) * sigmoid(1.702 gate); the router
  // softmaxes its top-k logits only.
  bool gpt_oss_experts = false;
  // DeepSeek first_k_dense_replace (modeling_deepseek_v3.py DeepseekV3DecoderLayer: layer_idx >=
  // first_k_dense_replace gets DeepseekV3MoE, the others DeepseekV3MLP(intermediate_size)): blocks
  // [0, first_dense_layers) have a dense MLP of ffn_hidden, the rest the MoE. 0: every block MoE.
  int first_dense_layers = 0;
  // DeepSeek's router (V3: modeling_deepseek_v3.py DeepseekV3TopkRouter and
  // DeepseekV3MoE.route_tokens_to_experts; V2: DeepSeek's modeling_deepseek.py MoEGate): logits =
  // F.linear(x.float(), W.float()) (saves an fp32 copy of its input), scores = sigmoid (V3) or
  // softmax (V2), fp32, saved; a (group-limited) top-k under no_grad (V3: n_group groups, the
  // topk_group best, plus the e_score_correction_bias buffer); the chosen scores renormalised
  // when norm_topk_prob and scaled by routed_scaling_factor: fp32 routing weights, so each
  // expert's output times its weight is an fp32 product. Off: Mixtral / Qwen's router (bf16
  // logits, fp32 softmax). n_group, topk_group, routed_scaling_factor and the scoring function
  // change values only (memory and time do not depend on them; the executor computes them).
  bool deepseek_router = false;
  // The DeepSeek router's values (what `run` computes): scores by sigmoid (V3) or softmax (V2);
  // top-k "noaux_tc" (V3: the topk_group best of n_group groups by their two best scores),
  // "greedy" (V2-Lite: plain top-k) or "group_limited_greedy" (V2: groups by their best score).
  bool sigmoid_scores = false;
  std::string topk_method = "greedy";
  int n_group = 1;
  int topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool enabled() const { return num_experts > 0; }
};

// DeepSeek-V2/V3 multi-head latent attention (modeling_deepseek_v3.py DeepseekV3Attention):
// q = q_b_proj(q_a_layernorm(q_a_proj(x))) [a·(nope + rope)] (q_proj [H -> a·(nope + rope)] when
// q_lora_rank is 0, DeepSeek-V2-Lite); compressed_kv = kv_a_proj_with_mqa(x) [kv_lora_rank +
// rope], split into the latent (kv_a_layernorm, then kv_b_proj [kv_lora -> a·(nope + v)], split
// into k_pass and v) and one rotary key [rope] shared by the heads (expanded); query and key are
// cat(pass, rot) [a·(nope + rope)], values [a·v_head_dim]; o_proj [a·v -> H]. The spec's head_dim
// is the query/key head dim nope + rope and num_kv_heads = num_heads.
struct MlaSpec {
  int64_t q_lora_rank = 0;   // 0: q_proj directly
  int64_t kv_lora_rank = 0;  // > 0: the attention is MLA
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
};

// HF rope_scaling (or rope_parameters): how the rotary frequencies are rescaled for long
// contexts (transformers modeling_rope_utils.py). No effect on memory or time. The executor
// computes "linear" (inv_freq / factor), "llama3" (_compute_llama3_parameters: low frequencies /
// factor, high ones kept, a smooth blend between) and "yarn" (_compute_yarn_parameters) and
// refuses the others by name.
struct RopeScaling {
  std::string type;             // "" plain RoPE; "linear", "llama3", "yarn", "dynamic", ...
  double factor = 1;            // "factor"
  double low_freq_factor = 1;   // llama3 "low_freq_factor"
  double high_freq_factor = 4;  // llama3 "high_freq_factor"
  int64_t original_max_position_embeddings = 8192;  // llama3; yarn when original_given
  // yarn (modeling_rope_utils.py _compute_yarn_parameters; Peng et al. 2023, "YaRN", eq. 17-21):
  // beta_fast / beta_slow bound the ramp between extrapolated and interpolated frequencies;
  // attention_factor (0: absent) scales cos and sin, else it is get_mscale(factor, mscale) /
  // get_mscale(factor, mscale_all_dim) when both are set (0: absent), else get_mscale(factor);
  // truncate floors / ceils the ramp's ends. original_given: the config named
  // original_max_position_embeddings, and the factor the frequencies use is then
  // max_position_embeddings / it (DeepSeek-V3's configs; the config's own factor still sets MLA's
  // softmax scale, DeepseekV3Attention).
  double beta_fast = 32, beta_slow = 1;
  double mscale = 0, mscale_all_dim = 0, attention_factor = 0;
  bool truncate = true;
  bool original_given = false;
  bool enabled() const { return !type.empty(); }
};

// A sanity cap on rotary sequence lengths (2^24 tokens, 128x the longest published context of
// the presets): beyond it inputs are certainly typos.
inline constexpr int64_t kRotarySeqLenCap = int64_t{1} << 24;

struct ModelSpec {
  std::string name;            // preset or file name, for reports
  int num_layers = 0;          // L
  int64_t hidden = 0;          // H
  int num_heads = 0;           // a
  int num_kv_heads = 0;        // GQA/MQA; 0 in a file means num_heads
  int64_t head_dim = 0;        // 0 in a file means hidden / num_heads
  int64_t ffn_hidden = 0;      // F, the MLP's inner size
  int64_t vocab_size = 0;      // V
  int64_t max_seq_len = 0;     // the largest S the model accepts (learned positions: table size)
  NormKind norm = NormKind::kRmsNorm;
  bool norm_bias = false;      // LayerNorm with a bias (GPT-2, NeoX); RMSNorm never has one
  MlpKind mlp = MlpKind::kSwiGlu;
  PositionKind positions = PositionKind::kRotary;
  bool qkv_bias = false;       // Qwen2, GPT-2, NeoX
  bool attn_out_bias = false;  // GPT-2, NeoX
  bool mlp_bias = false;       // GPT-2, NeoX
  bool qk_norm = false;        // Qwen3: RMSNorm over head_dim on q and k
  // OLMo 2 (modeling_olmo2.py Olmo2Attention): q_norm is RMSNorm(num_heads x head_dim) and k_norm
  // RMSNorm(num_kv_heads x head_dim) over the whole projection output, before the head split
  // (Qwen3's are RMSNorm(head_dim), shared by the heads). REQUIRES qk_norm.
  bool qk_norm_full_width = false;
  bool parallel_residual = false;  // GPT-NeoX: attention and MLP read the same input
  NormPlacement norm_placement = NormPlacement::kPre;
  // Phi-3 (modeling_phi3.py Phi3Attention, Phi3MLP): q, k and v come from one qkv_proj
  // [q_dim + 2 kv_dim, H] and gate and up from one gate_up_proj [2F, H]: the same parameters and
  // FLOPs in fewer, wider GEMMs; the split q/k/v and the chunked gate/up are views of one output,
  // so whatever saves one of them keeps the whole output alive.
  bool fused_qkv = false;
  bool fused_gate_up = false;  // REQUIRES mlp swiglu
  // RMSNorm that multiplies its weight into the fp32 normalised input before casting back
  // (OLMo 2's current Olmo2RMSNorm: (weight * x).to(input_dtype)): the weight's gradient keeps
  // the fp32 product's input, 4 bytes a feature, where LlamaRMSNorm keeps the cast bf16 copy.
  bool norm_weight_fp32 = false;
  // Gemma's RMSNorm scales by (1 + weight), the weights stored as offsets from 1 (initialised to
  // 0): output = (x_hat * (1 + weight.float())).to(dtype). Memory as norm_weight_fp32.
  bool norm_unit_offset = false;
  // GPT-OSS: a learned sink logit per head (self_attn.sinks [heads]) joins each query's softmax
  // (HF's eager_attention_forward: cat([scores, sinks]), max-subtracted, softmax in the compute
  // dtype). Flash kernels with sinks (vllm-flash-attn3 through `kernels`) save what flash saves.
  bool attention_sinks = false;
  // Gemma: the gated MLP's activation is GELU with the tanh approximation (gelu_pytorch_tanh,
  // a GeGLU) instead of SiLU; F.gelu saves its input as SiLU does. REQUIRES mlp swiglu.
  bool gelu_gate = false;
  // Gemma: the token embeddings are multiplied by sqrt(hidden), rounded to the compute dtype
  // (Gemma2Model's normalizer, Gemma3TextScaledWordEmbedding's embed_scale).
  bool scaled_embedding = false;
  // Gemma 2: logits = tanh(logits / cap) * cap before the loss (final_logit_softcapping); 0: none.
  double final_logit_softcap = 0;
  // Gemma 2: scores = tanh(scores / cap) * cap inside attention (attn_logit_softcapping). HF's
  // eager attention applies it; its sdpa path passes no softcap to the kernel; 0: none.
  double attn_logit_softcap = 0;
  // The attention's scale is query_pre_attn_scalar^-0.5 (Gemma); 0: head_dim^-0.5.
  double query_pre_attn_scalar = 0;
  // Sliding-window attention (Gemma 2 / 3 layer_types): the layers that slide attend to the last
  // `sliding_window` positions (kv_idx > q_idx - window); layer i attends fully when (i + 1) is a
  // multiple of full_attention_every (Gemma 2: 2, Gemma 3: 6; 1: no layer slides). 0 window:
  // full attention everywhere. What FlashAttention computes, not what it saves: time, not memory.
  int64_t sliding_window = 0;
  int full_attention_every = 1;
  // Gemma 3: the sliding layers' rotary base (rope_local_base_freq), used without rope_scaling;
  // 0: rope_theta. No effect on memory or time.
  double rope_local_theta = 0;
  bool SlidingLayer(int layer) const {
    return sliding_window > 0 && (layer + 1) % std::max(1, full_attention_every) != 0;
  }
  bool tied_embeddings = false;    // LM head shares the token embedding
  // The LM head replaced by a value head: transformers' AutoModelForTokenClassification with
  // num_labels 1 (GenericForTokenClassification: dropout, then score = Linear(H, 1) with a bias),
  // as verl's critic loads it (verl/utils/model.py load_valuehead_model, fsdp_workers.py
  // CriticWorker: num_labels = 1, classifier_dropout 0). No [tokens, vocabulary] logits; the
  // embedding stays (untied from any head).
  bool value_head = false;
  // Outputs per token of the head: the vocabulary, or 1 for a value head.
  int64_t HeadOutputs() const { return value_head ? 1 : vocab_size; }
  // What the layers compute with but memory and time do not depend on (the executor uses them):
  // the rotary base (HF rope_theta; GPT-NeoX rotary_emb_base) and the norms' epsilon
  // (rms_norm_eps, layer_norm_epsilon, layer_norm_eps); 0 in a file means the default, 10000
  // and 1e-5 (Llama 2, GPT-2).
  double rope_theta = 0;
  double norm_eps = 0;
  RopeScaling rope_scaling;
  // The fraction of head_dim that is rotated (GPT-NeoX rotary_pct, Phi-3 partial_rotary_factor);
  // 1: all of it. The executor rotates all of it and refuses other fractions by name.
  double rotary_fraction = 1.0;
  // Qwen2-VL's and Qwen2.5-VL's multimodal rotary (rope_scaling {"type": "mrope", "mrope_section":
  // [16, 24, 24]}; modeling_qwen2_5_vl.py apply_multimodal_rotary_pos_emb): the rotary's D/2
  // frequencies in consecutive sections of these sizes (summing to D/2, repeated for the second
  // half) take the temporal, height and width position of each token (get_rope_index: all three
  // the text position for text, the image's grid row and column for its tokens). The
  // frequencies are plain RoPE's. Empty: 1-D positions.
  std::vector<int> mrope_section;
  MoeSpec moe;
  MlaSpec mla;
  // A vision-language model's vision tower (model/vision.h); kind kNone for a text model. The
  // text fields above describe the language model.
  VisionSpec vision;
  std::string source;          // where the shape comes from (presets cite the HF config)
  // The transformers class the shape is ("architectures"[0] of its config.json, e.g.
  // "Qwen3MoeForCausalLM"); empty when unknown (a hand-written model file). What it changes: the
  // parameter names a full state dict is written under (HfParameterName).
  std::string hf_architecture;

  // The longest sequence a plan may ask for. Learned positions: the table, max_seq_len. Rotary
  // positions are computed for any position (HF LlamaRotaryEmbedding, torchtitan
  // precompute_freqs_cis), so max_seq_len (max_position_embeddings) is what the model was
  // trained at, not a limit: longer plans are estimated with a warning (quality is the user's
  // call; memory and time do not depend on it), up to kRotarySeqLenCap.
  int64_t SeqLenLimit() const;
  int64_t kv_dim() const { return static_cast<int64_t>(num_kv_heads) * head_dim; }
  // Blocks in forward order: the vision tower's (a VL model's, vision.depth of them) first, then
  // the text model's num_layers. Block b is the b-th FSDP block segment (module_tree.h
  // BlockSegment); text layer i is block VisionBlocks() + i.
  int VisionBlocks() const { return vision.enabled() ? vision.depth : 0; }
  int NumBlocks() const { return VisionBlocks() + num_layers; }
  // The keys each query attends to at sequence length S, averaged over the layers, in the FLOP
  // convention (full S x S, no causal halving: Narayanan et al. 2021 eq. 3, PaLM's MFU): S for a
  // full layer, min(S, sliding_window) for a sliding one.
  double MeanAttentionSpan(int64_t seq_len) const;
  int64_t q_dim() const { return static_cast<int64_t>(num_heads) * head_dim; }
  // The attention output's width per token, what o_proj reads: q_dim, or a·v_head_dim under MLA.
  int64_t v_dim() const {
    return mla.enabled() ? static_cast<int64_t>(num_heads) * mla.v_head_dim : q_dim();
  }
  // Block `layer` (0-based) routes its MLP through the experts: an MoE model's blocks from
  // moe.first_dense_layers on.
  bool MoeLayer(int layer) const { return moe.enabled() && layer >= moe.first_dense_layers; }
  // Some blocks differ from the others (a dense prefix before the MoE blocks): per-block ledgers,
  // parameters and FLOPs.
  bool Heterogeneous() const { return moe.enabled() && moe.first_dense_layers > 0; }
  // How many blocks are dense before the MoE ones: moe.first_dense_layers when Heterogeneous(),
  // else 0. Blocks [0, DenseLayers()) share one shape, the others another.
  int DenseLayers() const { return Heterogeneous() ? moe.first_dense_layers : 0; }
  // The spec of one of the dense-prefix blocks as a homogeneous model (the MoE removed), for the
  // per-block recipes (REQUIRES Heterogeneous()).
  ModelSpec DenseLayerSpec() const;
  // Replaces the "not given" zeros by their defaults: num_kv_heads 0 -> num_heads, head_dim 0 ->
  // hidden / num_heads when num_heads divides hidden (else it stays 0 and Problems() says why).
  // An explicit head_dim is kept as given (Gemma, Qwen3: head_dim need not be hidden / heads).
  void FillDefaults();
  // Returns every problem with the spec (empty when valid); `where` prefixes each message as
  // "where:/key: expected ..., got ...". Zeros that FillDefaults() would replace are accepted.
  std::vector<std::string> Problems(const std::string& where) const;
  // Throws InputError listing all problems together, joined by "; ".
  void Validate(const std::string& where) const;
};

// Parameter counts by part, in elements. Closed forms from the modules the HF modeling files build
// (modeling_llama.py, modeling_gpt2.py, modeling_gpt_neox.py, modeling_mixtral.py, ...).
struct ParameterCounts {
  int64_t embedding = 0;   // token embedding V x H
  int64_t positions = 0;   // learned position table max_seq_len x H (0 for rotary)
  int64_t block = 0;       // ONE transformer block (attention, MLP or MoE, norms); the MoE one
                           // when the first moe.first_dense_layers blocks are dense
  int64_t dense_block = 0; // one of those dense blocks (0 when there are none)
  int64_t final_norm = 0;  // the norm before the LM head
  int64_t lm_head = 0;     // V x H, 0 when tied to the embedding; a value head's H + 1
  int64_t vision = 0;      // the vision tower with its merger / projector (VisionParameterCounts)
  int64_t total = 0;       // embedding + positions + blocks + final_norm + lm_head + vision
};
// REQUIRES: spec has no Problems() (zeros FillDefaults() would replace are resolved here).
ParameterCounts CountParameters(const ModelSpec& spec);
// The model's total parameter count (tied weights counted once), as HF's num_parameters().
int64_t ParameterCount(const ModelSpec& spec);

const char* ToString(NormKind k);
const char* ToString(MlpKind k);
const char* ToString(PositionKind k);
const char* ToString(NormPlacement p);

}  // namespace shardtune::model
