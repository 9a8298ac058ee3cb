// The model spec: a decoder-only transformer described by its shape (README.md "Architecture").
// Plain data with documented defaults; Validate() checks every cross-field rule at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::model {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiGlu };  // GELU: 2 matrices (up, down); SwiGLU: 3 (gate, up, down)
enum class PositionKind { kLearned, kRotary };

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
  bool enabled() const { return num_experts > 0; }
};

// HF rope_scaling (or rope_parameters): how the rotary frequencies are rescaled for long
// contexts (transformers modeling_rope_utils.py). No effect on memory or time. The executor
// computes "linear" (inv_freq / factor) and "llama3" (_compute_llama3_parameters: low
// frequencies / factor, high ones kept, a smooth blend between) and refuses the others by name.
struct RopeScaling {
  std::string type;             // "" plain RoPE; "linear", "llama3", "yarn", "dynamic", ...
  double factor = 1;            // "factor"
  double low_freq_factor = 1;   // llama3 "low_freq_factor"
  double high_freq_factor = 4;  // llama3 "high_freq_factor"
  int64_t original_max_position_embeddings = 8192;  // llama3
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
  // OLMo 2 (Olmo2DecoderLayer): no norm before attention and MLP; post_attention_layernorm and
  // post_feedforward_layernorm normalise each sublayer's output before its residual add.
  bool post_norms = false;
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
  bool tied_embeddings = false;    // LM head shares the token embedding
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
  MoeSpec moe;
  std::string source;          // where the shape comes from (presets cite the HF config)

  // The longest sequence a plan may ask for. Learned positions: the table, max_seq_len. Rotary
  // positions are computed for any position (HF LlamaRotaryEmbedding, torchtitan
  // precompute_freqs_cis), so max_seq_len (max_position_embeddings) is what the model was
  // trained at, not a limit: longer plans are estimated with a warning (quality is the user's
  // call; memory and time do not depend on it), up to kRotarySeqLenCap.
  int64_t SeqLenLimit() const;
  int64_t kv_dim() const { return static_cast<int64_t>(num_kv_heads) * head_dim; }
  int64_t q_dim() const { return static_cast<int64_t>(num_heads) * head_dim; }
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
  int64_t block = 0;       // ONE transformer block (attention, MLP or MoE, norms)
  int64_t final_norm = 0;  // the norm before the LM head
  int64_t lm_head = 0;     // V x H, 0 when tied to the embedding
  int64_t total = 0;       // embedding + positions + L x block + final_norm + lm_head
};
// REQUIRES: spec has no Problems() (zeros FillDefaults() would replace are resolved here).
ParameterCounts CountParameters(const ModelSpec& spec);
// The model's total parameter count (tied weights counted once), as HF's num_parameters().
int64_t ParameterCount(const ModelSpec& spec);

const char* ToString(NormKind k);
const char* ToString(MlpKind k);
const char* ToString(PositionKind k);

}  // namespace shardtune::model
