// ModelSpec checks (every problem at once) and the closed-form parameter count. The count follows
// the modules Hugging Face transformers builds, so presets match the published num_parameters().
#include "model/model_spec.h"

#include <algorithm>

#include <iomanip>
#include <sstream>

#include "model/errors.h"

namespace shardtune::model {
namespace {

// Collects "where:/key: expected ..., got ..." messages.
class ProblemList {
 public:
  explicit ProblemList(const std::string& where) : where_(where) {}
  void Expect(bool ok, const std::string& key, const std::string& expected,
              const std::string& got) {
    if (!ok) out_.push_back(where_ + ":/" + key + ": expected " + expected + ", got " + got);
  }
  void Expect(bool ok, const std::string& key, const std::string& expected, int64_t got) {
    Expect(ok, key, expected, std::to_string(got));
  }
  std::vector<std::string> Take() { return std::move(out_); }

 private:
  std::string where_;
  std::vector<std::string> out_;
};

std::string Bool(bool b) { return b ? "true" : "false"; }
std::string Num(double v) {
  std::ostringstream o;
  o << std::setprecision(6) << v;
  return o.str();
}

void CheckAttention(const ModelSpec& s, ProblemList* p) {
  p->Expect(s.num_heads >= 1, "num_heads", "integer >= 1", s.num_heads);
  if (s.num_heads < 1) return;
  // num_kv_heads 0 means "as num_heads" (multi-head attention).
  bool kv_in_range = s.num_kv_heads == 0 || (s.num_kv_heads >= 1 && s.num_kv_heads <= s.num_heads);
  p->Expect(kv_in_range, "num_kv_heads",
            "integer in [1, num_heads = " + std::to_string(s.num_heads) + "]", s.num_kv_heads);
  if (kv_in_range && s.num_kv_heads > 0) {
    p->Expect(s.num_heads % s.num_kv_heads == 0, "num_kv_heads",
              "a divisor of num_heads = " + std::to_string(s.num_heads) +
                  " (each KV head serves num_heads / num_kv_heads query heads)",
              s.num_kv_heads);
  }
  p->Expect(s.head_dim >= 0, "head_dim", "integer >= 1 (or absent: hidden / num_heads)",
            s.head_dim);
  if (s.head_dim == 0 && s.hidden >= 1) {
    p->Expect(s.hidden % s.num_heads == 0, "hidden",
              "a multiple of num_heads = " + std::to_string(s.num_heads) +
                  " when head_dim is not given (or give head_dim explicitly)",
              s.hidden);
  }
}

void CheckMoe(const ModelSpec& s, ProblemList* p) {
  const MoeSpec& m = s.moe;
  p->Expect(m.num_experts >= 0, "moe/num_experts", "integer >= 0 (0: dense MLP)", m.num_experts);
  if (m.num_experts <= 0) {
    p->Expect(m.top_k == 0, "moe/top_k", "0 without experts (moe/num_experts is 0)", m.top_k);
    p->Expect(m.num_shared_experts == 0, "moe/num_shared_experts", "0 without experts",
              m.num_shared_experts);
    p->Expect(!m.shared_expert_gate, "moe/shared_expert_gate", "false without experts",
              Bool(m.shared_expert_gate));
    p->Expect(!m.router_aux_loss, "moe/router_aux_loss", "false without experts",
              Bool(m.router_aux_loss));
    p->Expect(!m.gpt_oss_experts, "moe/gpt_oss_experts", "false without experts",
              Bool(m.gpt_oss_experts));
    p->Expect(m.first_dense_layers == 0, "moe/first_dense_layers", "0 without experts",
              m.first_dense_layers);
    p->Expect(!m.deepseek_router, "moe/deepseek_router", "false without experts",
              Bool(m.deepseek_router));
    return;
  }
  p->Expect(m.first_dense_layers >= 0 && m.first_dense_layers < s.num_layers,
            "moe/first_dense_layers",
            "integer in [0, num_layers - 1 = " + std::to_string(s.num_layers - 1) +
                "] (the dense blocks before the MoE ones; all dense is a dense model)",
            m.first_dense_layers);
  p->Expect(m.n_group >= 1 && m.num_experts % std::max(1, m.n_group) == 0, "moe/n_group",
            "a divisor of num_experts = " + std::to_string(m.num_experts), m.n_group);
  p->Expect(m.topk_group >= 1 && m.topk_group <= m.n_group, "moe/topk_group",
            "integer in [1, n_group = " + std::to_string(m.n_group) + "]", m.topk_group);
  p->Expect(m.routed_scaling_factor > 0 && m.routed_scaling_factor <= 1e6,
            "moe/routed_scaling_factor", "a number in (0, 1e6]", Num(m.routed_scaling_factor));
  p->Expect(m.topk_method == "greedy" || m.topk_method == "group_limited_greedy" ||
                m.topk_method == "noaux_tc",
            "moe/topk_method", "\"greedy\", \"group_limited_greedy\" or \"noaux_tc\"",
            "\"" + m.topk_method + "\"");
  p->Expect(!m.sigmoid_scores || m.deepseek_router, "moe/sigmoid_scores",
            "false without deepseek_router", Bool(m.sigmoid_scores));
  p->Expect(!m.deepseek_router || !m.gpt_oss_experts, "moe/deepseek_router",
            "false with gpt_oss_experts (GPT-OSS has its own router)", Bool(m.deepseek_router));
  p->Expect(m.top_k >= 1 && m.top_k <= m.num_experts, "moe/top_k",
            "integer in [1, num_experts = " + std::to_string(m.num_experts) + "]", m.top_k);
  p->Expect(m.num_shared_experts >= 0, "moe/num_shared_experts", "integer >= 0",
            m.num_shared_experts);
  p->Expect(m.expert_ffn_hidden >= 0, "moe/expert_ffn_hidden",
            "integer >= 1 (or 0: ffn_hidden)", m.expert_ffn_hidden);
  p->Expect(m.shared_expert_ffn_hidden >= 0, "moe/shared_expert_ffn_hidden",
            "integer >= 1 (or 0: expert_ffn_hidden)", m.shared_expert_ffn_hidden);
  p->Expect(!m.shared_expert_gate || m.num_shared_experts >= 1, "moe/shared_expert_gate",
            "false when moe/num_shared_experts is 0", Bool(m.shared_expert_gate));
  // Mixtral's and Qwen2-MoE's expert MLPs have no biases (GPT-OSS's are moe/gpt_oss_experts).
  p->Expect(!s.mlp_bias, "mlp_bias", "false with moe (expert MLPs have no bias)", Bool(s.mlp_bias));
  p->Expect(!m.gpt_oss_experts || (s.mlp == MlpKind::kSwiGlu && m.num_shared_experts == 0),
            "moe/gpt_oss_experts", "false with a GELU MLP or shared experts",
            Bool(m.gpt_oss_experts));
}

// Multi-head latent attention (MlaSpec): the latent ranks and head dims, and what MLA excludes.
void CheckMla(const ModelSpec& s, ProblemList* p) {
  const MlaSpec& m = s.mla;
  if (!m.enabled()) {
    bool none = m.q_lora_rank == 0 && m.qk_nope_head_dim == 0 && m.qk_rope_head_dim == 0 &&
                m.v_head_dim == 0;
    p->Expect(m.kv_lora_rank == 0 && none, "mla/kv_lora_rank",
              "integer >= 1 when any mla key is given (0 and no other mla key: no MLA)",
              m.kv_lora_rank);
    return;
  }
  p->Expect(m.q_lora_rank >= 0, "mla/q_lora_rank", "integer >= 0 (0: q_proj directly)",
            m.q_lora_rank);
  p->Expect(m.qk_nope_head_dim >= 1, "mla/qk_nope_head_dim", "integer >= 1", m.qk_nope_head_dim);
  p->Expect(m.qk_rope_head_dim >= 2 && m.qk_rope_head_dim % 2 == 0, "mla/qk_rope_head_dim",
            "an even integer >= 2", m.qk_rope_head_dim);
  p->Expect(m.v_head_dim >= 1, "mla/v_head_dim", "integer >= 1", m.v_head_dim);
  const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  p->Expect(s.head_dim == 0 || s.head_dim == qk, "head_dim",
            "qk_nope_head_dim + qk_rope_head_dim = " + std::to_string(qk) + " with mla (or absent)",
            s.head_dim);
  p->Expect(s.num_kv_heads == 0 || s.num_kv_heads == s.num_heads, "num_kv_heads",
            "num_heads = " + std::to_string(s.num_heads) + " with mla (the latent serves every head)",
            s.num_kv_heads);
  p->Expect(s.positions == PositionKind::kRotary, "positions", "\"rotary\" with mla",
            ToString(s.positions));
  // What MLA does not combine with in any published model, so not modelled together.
  p->Expect(!s.qkv_bias && !s.attn_out_bias, "qkv_bias",
            "false with mla (DeepSeek's attention_bias is false; biases not modelled)",
            Bool(s.qkv_bias || s.attn_out_bias));
  p->Expect(!s.fused_qkv && !s.qk_norm && !s.attention_sinks, "mla/kv_lora_rank",
            "no fused_qkv, qk_norm or attention_sinks with mla", "one of them set");
  p->Expect(s.rotary_fraction == 1.0, "rotary_fraction",
            "1 with mla (qk_rope_head_dim is the rotated part)", Num(s.rotary_fraction));
}

// Elements of one norm's parameters over `width` features: RMSNorm has a weight, LayerNorm a
// weight and (norm_bias) a bias. torch.nn.LayerNorm / LlamaRMSNorm.
// T is int64_t for the count and long double for the overflow check in Problems() (a shape of
// valid sizes can still overflow int64, found by tests/fuzz).
template <typename T>
T NormParams(const ModelSpec& s, T width) {
  return (s.norm == NormKind::kLayerNorm && s.norm_bias) ? 2 * width : width;
}

// One MLP of inner width f: SwiGLU gate_proj, up_proj [H -> f] and down_proj [f -> H]
// (LlamaMLP); GELU c_fc [H -> f] and c_proj [f -> H] (GPT2MLP, GPTNeoXMLP). Biases when flagged.
template <typename T>
T MlpParams(const ModelSpec& s, T f, bool bias) {
  T matrices = s.mlp == MlpKind::kSwiGlu ? 3 : 2;
  T weights = matrices * static_cast<T>(s.hidden) * f;
  T biases = bias ? (matrices - 1) * f + static_cast<T>(s.hidden) : 0;
  return weights + biases;
}

// DeepseekV3Attention (modeling_deepseek_v3.py): q_a_proj [H -> q_lora] + q_a_layernorm(q_lora)
// + q_b_proj [q_lora -> a·(nope + rope)] (or q_proj [H -> a·(nope + rope)] without q_lora_rank),
// kv_a_proj_with_mqa [H -> kv_lora + rope], kv_a_layernorm(kv_lora), kv_b_proj [kv_lora ->
// a·(nope + v)], o_proj [a·v -> H]; no biases (attention_bias false; MLA with a bias is refused).
template <typename T>
T MlaParams(const ModelSpec& s) {
  const MlaSpec& m = s.mla;
  const T h = static_cast<T>(s.hidden), a = static_cast<T>(s.num_heads);
  const T qk = static_cast<T>(m.qk_nope_head_dim + m.qk_rope_head_dim);
  const T ql = static_cast<T>(m.q_lora_rank), kvl = static_cast<T>(m.kv_lora_rank);
  T q = m.q_lora_rank > 0 ? h * ql + NormParams(s, ql) + ql * a * qk : h * a * qk;
  T kv = h * (kvl + static_cast<T>(m.qk_rope_head_dim)) + NormParams(s, kvl) +
         kvl * a * static_cast<T>(m.qk_nope_head_dim + m.v_head_dim);
  return q + kv + a * static_cast<T>(m.v_head_dim) * h;
}

template <typename T>
T AttentionParams(const ModelSpec& s) {
  if (s.mla.enabled()) return MlaParams<T>(s);
  const T h = static_cast<T>(s.hidden), q = static_cast<T>(s.num_heads) * static_cast<T>(s.head_dim),
          kv = static_cast<T>(s.num_kv_heads) * static_cast<T>(s.head_dim);
  // q_proj [H -> a*d], k_proj and v_proj [H -> kv*d], o_proj [a*d -> H] (LlamaAttention; GPT-2's
  // fused c_attn [H -> 3H] and NeoX's query_key_value are the same count).
  T n = h * q + 2 * h * kv + q * h;
  if (s.qkv_bias) n += q + 2 * kv;
  if (s.attn_out_bias) n += h;
  // Qwen3Attention: q_norm and k_norm are RMSNorm(head_dim), shared by all heads; OLMo 2's
  // Olmo2Attention: RMSNorm(num_heads x head_dim) and RMSNorm(num_kv_heads x head_dim). Phi-3's
  // fused qkv_proj [q + 2kv, H] has the count of the three it replaces.
  if (s.attention_sinks) n += static_cast<T>(s.num_heads);  // GptOssAttention.sinks [heads]
  if (s.qk_norm && s.qk_norm_full_width) n += NormParams(s, q) + NormParams(s, kv);
  else if (s.qk_norm) n += 2 * NormParams(s, static_cast<T>(s.head_dim));
  return n;
}

// Block `layer`'s MLP or MoE.
template <typename T>
T FeedForwardParams(const ModelSpec& s, int layer) {
  const MoeSpec& m = s.moe;
  if (!s.MoeLayer(layer)) return MlpParams(s, static_cast<T>(s.ffn_hidden), s.mlp_bias);
  T fe = static_cast<T>(m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : s.ffn_hidden);
  T fs = m.shared_expert_ffn_hidden > 0 ? static_cast<T>(m.shared_expert_ffn_hidden) : fe;
  const T h = static_cast<T>(s.hidden), experts = static_cast<T>(m.num_experts);
  // MixtralSparseMoeBlock: gate (router) Linear(H, E, bias=False) + E experts (w1, w3, w2).
  T n = h * experts + experts * MlpParams(s, fe, false);
  // GptOssTopKRouter's bias [E]; GptOssExperts' gate_up_proj_bias [E, 2F] and down_proj_bias
  // [E, H].
  if (m.gpt_oss_experts) n += experts + experts * (2 * fe + h);
  // Qwen2MoeSparseMoeBlock: shared_expert MLP(H, shared_expert_intermediate_size) and
  // shared_expert_gate Linear(H, 1, bias=False).
  n += static_cast<T>(m.num_shared_experts) * MlpParams(s, fs, false);
  if (m.shared_expert_gate) n += h;
  return n;
}

// Every part of CountParameters() in type T (the formulas are written once, above).
template <typename T>
T TotalParams(const ModelSpec& s, ParameterCounts* parts) {
  const T h = static_cast<T>(s.hidden), v = static_cast<T>(s.vocab_size);
  const T embedding = v * h;  // embed_tokens / wte / embed_in
  // GPT-2's wpe: Embedding(n_positions, n_embd). Rotary positions have no parameters.
  const T positions = s.positions == PositionKind::kLearned ? static_cast<T>(s.max_seq_len) * h : 0;
  // Two norms per block (input_layernorm + post_attention_layernorm, ln_1 + ln_2); NeoX's
  // parallel residual keeps both, it only feeds them the same input; OLMo 2's are
  // post_attention_layernorm + post_feedforward_layernorm; Gemma's sandwich has four.
  const T norms = s.norm_placement == NormPlacement::kSandwich ? 4 : 2;
  const T shared = AttentionParams<T>(s) + norms * NormParams(s, h);
  // DeepSeek's first_k_dense_replace: the first blocks dense, the others MoE.
  // (Clamped: Problems() counts the parameters of specs it has not yet found valid.)
  const int dense_layers = std::clamp(s.DenseLayers(), 0, s.num_layers);
  const T block = shared + FeedForwardParams<T>(s, s.num_layers - 1);
  const T dense_block = dense_layers > 0 ? shared + FeedForwardParams<T>(s, 0) : 0;
  const T final_norm = NormParams(s, h);  // model.norm / ln_f / final_layer_norm
  // lm_head / embed_out, no bias; a value head's score Linear(H, 1) with its bias.
  const T lm_head = s.value_head ? h + 1 : s.tied_embeddings ? 0 : v * h;
  const T blocks = static_cast<T>(s.num_layers - dense_layers) * block +
                   static_cast<T>(dense_layers) * dense_block;
  // The vision tower (model/vision.h), counted once Problems() found it valid (its caps keep it in
  // int64; CountParameters only runs on valid specs).
  const T vision = s.vision.enabled() && s.vision.Problems("").empty()
                       ? static_cast<T>(CountVisionParameters(s.vision).total)
                       : 0;
  const T total = embedding + positions + blocks + final_norm + lm_head + vision;
  if (parts) {
    parts->embedding = static_cast<int64_t>(embedding);
    parts->positions = static_cast<int64_t>(positions);
    parts->block = static_cast<int64_t>(block);
    parts->dense_block = static_cast<int64_t>(dense_block);
    parts->final_norm = static_cast<int64_t>(final_norm);
    parts->lm_head = static_cast<int64_t>(lm_head);
    parts->vision = static_cast<int64_t>(vision);
    parts->total = static_cast<int64_t>(total);
  }
  return total;
}

// 10^15 parameters: far above any trained model, far below int64 (and the byte counts derived).
constexpr long double kMaxParameters = 1e15L;

}  // namespace

const char* ToString(NormKind k) { return k == NormKind::kRmsNorm ? "rms_norm" : "layer_norm"; }
const char* ToString(MlpKind k) { return k == MlpKind::kSwiGlu ? "swiglu" : "gelu"; }
const char* ToString(PositionKind k) { return k == PositionKind::kRotary ? "rotary" : "learned"; }
const char* ToString(NormPlacement p) {
  return p == NormPlacement::kPre ? "pre" : p == NormPlacement::kPost ? "post" : "sandwich";
}

double ModelSpec::MeanAttentionSpan(int64_t seq_len) const {
  const double s = static_cast<double>(seq_len);
  if (sliding_window <= 0 || num_layers <= 0) return s;
  // SlidingLayer(i) is false exactly for the layers whose i + 1 is a multiple of
  // full_attention_every: num_layers / full_attention_every of them.
  const int full = num_layers / std::max(1, full_attention_every);
  const double window = std::min(s, static_cast<double>(sliding_window));
  return (full * s + (num_layers - full) * window) / num_layers;
}

// The defaults of ModelSpec::rope_theta and norm_eps: Llama 2's rope base (modeling_llama.py
// LlamaConfig rope_theta=10000.0) and Llama 2 / GPT-2's epsilon (rms_norm_eps=1e-5 in the
// Llama-2 configs, GPT2Config layer_norm_epsilon=1e-5).
constexpr double kDefaultRopeTheta = 10000.0;
constexpr double kDefaultNormEps = 1e-5;

void ModelSpec::FillDefaults() {
  if (rope_theta == 0) rope_theta = kDefaultRopeTheta;
  if (norm_eps == 0) norm_eps = kDefaultNormEps;
  if (num_kv_heads == 0) num_kv_heads = num_heads;
  if (head_dim == 0 && mla.enabled()) head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
  if (head_dim == 0 && num_heads >= 1 && hidden >= 1 && hidden % num_heads == 0) {
    head_dim = hidden / num_heads;
  }
}

std::vector<std::string> ModelSpec::Problems(const std::string& where) const {
  ProblemList p(where);
  p.Expect(num_layers >= 1, "num_layers", "integer >= 1", num_layers);
  p.Expect(hidden >= 1, "hidden", "integer >= 1", hidden);
  CheckAttention(*this, &p);
  p.Expect(ffn_hidden >= 1, "ffn_hidden", "integer >= 1", ffn_hidden);
  p.Expect(vocab_size >= 1, "vocab_size", "integer >= 1", vocab_size);
  p.Expect(max_seq_len >= 1, "max_seq_len", "integer >= 1", max_seq_len);
  p.Expect(!(norm == NormKind::kRmsNorm && norm_bias), "norm_bias",
           "false with norm \"rms_norm\" (RMSNorm has no bias)", Bool(norm_bias));
  p.Expect(rope_theta >= 0 && rope_theta <= 1e12, "rope_theta", "a number in (0, 1e12] (0: 10000)",
           Num(rope_theta));
  p.Expect(norm_eps >= 0 && norm_eps < 1, "norm_eps", "a number in (0, 1) (0: 1e-5)", Num(norm_eps));
  p.Expect(rotary_fraction > 0 && rotary_fraction <= 1, "rotary_fraction", "a number in (0, 1]",
           Num(rotary_fraction));
  if (!mrope_section.empty()) {
    int64_t sum = 0;
    bool positive = mrope_section.size() == 3;
    for (int x : mrope_section) {
      sum += x;
      positive = positive && x >= 1;
    }
    const int64_t half = (head_dim > 0 ? head_dim : (num_heads > 0 ? hidden / num_heads : 0)) / 2;
    p.Expect(positive && sum == half && rotary_fraction == 1.0 && positions == PositionKind::kRotary,
             "mrope_section", "3 positive section sizes summing to head_dim / 2 = " + std::to_string(half) +
                                  " (rotary positions, all of head_dim rotated)",
             std::to_string(mrope_section.size()) + " sections summing to " + std::to_string(sum));
  }
  if (rope_scaling.enabled()) {
    const RopeScaling& r = rope_scaling;
    p.Expect(r.factor > 0, "rope_scaling/factor", "a number > 0", Num(r.factor));
    p.Expect(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor,
             "rope_scaling/high_freq_factor", "a number > low_freq_factor > 0",
             Num(r.high_freq_factor) + " and " + Num(r.low_freq_factor));
    p.Expect(r.original_max_position_embeddings >= 1, "rope_scaling/original_max_position_embeddings",
             "integer >= 1", r.original_max_position_embeddings);
    p.Expect(r.beta_fast > 0 && r.beta_slow > 0, "rope_scaling/beta_fast",
             "beta_fast and beta_slow > 0", Num(r.beta_fast) + " and " + Num(r.beta_slow));
    p.Expect(r.mscale >= 0 && r.mscale_all_dim >= 0 && r.attention_factor >= 0, "rope_scaling/mscale",
             "mscale, mscale_all_dim and attention_factor >= 0 (0: not set)",
             Num(r.mscale) + ", " + Num(r.mscale_all_dim) + " and " + Num(r.attention_factor));
  }
  CheckMoe(*this, &p);
  CheckMla(*this, &p);
  p.Expect(!qk_norm_full_width || qk_norm, "qk_norm_full_width", "false when qk_norm is false",
           Bool(qk_norm_full_width));
  p.Expect(!fused_gate_up || mlp == MlpKind::kSwiGlu, "fused_gate_up",
           "false with mlp \"gelu\" (gate_up_proj fuses SwiGLU's gate and up)",
           Bool(fused_gate_up));
  p.Expect(!fused_gate_up || !moe.enabled(), "fused_gate_up",
           "false with moe (Phi-3's gate_up_proj is a dense MLP's)", Bool(fused_gate_up));
  p.Expect(norm_placement == NormPlacement::kPre || !parallel_residual, "norm_placement",
           "\"pre\" with parallel_residual (post-norms are sequential)", ToString(norm_placement));
  p.Expect(norm_placement == NormPlacement::kPre || positions == PositionKind::kRotary,
           "norm_placement", "\"pre\" with learned positions (GPT-2's layout)",
           ToString(norm_placement));
  p.Expect(!(fused_qkv || qk_norm_full_width) || positions == PositionKind::kRotary, "fused_qkv",
           "false with learned positions (GPT-2's c_attn is already fused)", Bool(fused_qkv));
  p.Expect(!norm_weight_fp32 || norm == NormKind::kRmsNorm, "norm_weight_fp32",
           "false with norm \"layer_norm\"", Bool(norm_weight_fp32));
  p.Expect(!norm_unit_offset || norm == NormKind::kRmsNorm, "norm_unit_offset",
           "false with norm \"layer_norm\"", Bool(norm_unit_offset));
  p.Expect(!gelu_gate || mlp == MlpKind::kSwiGlu, "gelu_gate",
           "false with mlp \"gelu\" (it replaces the gated MLP's SiLU)", Bool(gelu_gate));
  p.Expect(final_logit_softcap >= 0 && final_logit_softcap <= 1e6, "final_logit_softcap",
           "a number in [0, 1e6] (0: none)", Num(final_logit_softcap));
  p.Expect(attn_logit_softcap >= 0 && attn_logit_softcap <= 1e6, "attn_logit_softcap",
           "a number in [0, 1e6] (0: none)", Num(attn_logit_softcap));
  p.Expect(query_pre_attn_scalar >= 0 && query_pre_attn_scalar <= 1e9, "query_pre_attn_scalar",
           "a number in [0, 1e9] (0: head_dim)", Num(query_pre_attn_scalar));
  p.Expect(sliding_window >= 0, "sliding_window", "integer >= 0 (0: none)", sliding_window);
  p.Expect(full_attention_every >= 1, "full_attention_every", "integer >= 1",
           full_attention_every);
  p.Expect(rope_local_theta >= 0 && rope_local_theta <= 1e12, "rope_local_theta",
           "a number in [0, 1e12] (0: rope_theta)", Num(rope_local_theta));
  if (vision.enabled()) {
    p.Expect(vision.out_hidden == hidden, "vision/out_hidden",
             "the text model's hidden = " + std::to_string(hidden) +
                 " (the merger projects the tower's tokens into it)",
             vision.out_hidden);
  }
  std::vector<std::string> problems = p.Take();
  for (std::string& v : vision.Problems(where)) problems.push_back(std::move(v));
  if (problems.empty()) {
    ModelSpec s = *this;
    s.FillDefaults();
    const long double n = TotalParams<long double>(s, nullptr);
    if (!(n <= kMaxParameters)) {
      std::ostringstream got;
      got << std::setprecision(3) << static_cast<double>(n);
      problems.push_back(where + ":/: expected at most 1e15 parameters in all, got " + got.str() +
                         " from these sizes (hint: one of them has a typo)");
    }
  }
  return problems;
}

void ModelSpec::Validate(const std::string& where) const {
  ThrowIfProblems(Problems(where));
}

ParameterCounts CountParameters(const ModelSpec& spec) {
  ModelSpec s = spec;
  s.FillDefaults();
  SHARDTUNE_CHECK(s.Problems("spec").empty()) << "CountParameters on an invalid spec " << s.name;
  ParameterCounts c;
  TotalParams<int64_t>(s, &c);
  return c;
}

int64_t ParameterCount(const ModelSpec& spec) { return CountParameters(spec).total; }

ModelSpec ModelSpec::DenseLayerSpec() const {
  SHARDTUNE_CHECK(Heterogeneous()) << "DenseLayerSpec of a spec without a dense prefix: " << name;
  ModelSpec d = *this;
  d.moe = MoeSpec{};
  return d;
}

int64_t ModelSpec::SeqLenLimit() const {
  return positions == PositionKind::kLearned ? max_seq_len : std::max(max_seq_len, kRotarySeqLenCap);
}

}  // namespace shardtune::model
