// HF config.json -> ModelSpec. Each architecture maps the keys its modeling_*.py reads into
// parameters; keys with no memory effect are skipped only from explicit allow-lists, and any other
// key becomes a warning (never silently dropped, never fatal).
#include "model/hf_config.h"

#include <climits>
#include <cmath>
#include <set>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

enum class Family {
  kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen2Moe, kQwen3Moe, kPhi3, kOlmo2, kGemma,
  kGemma2, kGemma3, kGemma3Multimodal, kGptOss, kGpt2, kGptNeox, kDeepseekV2, kDeepseekV3,
  kSeedOss, kQwen2Vl, kQwen25Vl, kQwen3Vl, kQwen3VlMoe
};

struct Arch {
  const char* name;        // "architectures"[0]
  const char* model_type;  // "model_type"
  Family family;
};

constexpr Arch kArchs[] = {
    {"LlamaForCausalLM", "llama", Family::kLlama},
    {"MistralForCausalLM", "mistral", Family::kMistral},
    {"Qwen2ForCausalLM", "qwen2", Family::kQwen2},
    {"Qwen3ForCausalLM", "qwen3", Family::kQwen3},
    {"MixtralForCausalLM", "mixtral", Family::kMixtral},
    {"Qwen2MoeForCausalLM", "qwen2_moe", Family::kQwen2Moe},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Family::kQwen3Moe},
    {"Phi3ForCausalLM", "phi3", Family::kPhi3},
    {"Olmo2ForCausalLM", "olmo2", Family::kOlmo2},
    {"GemmaForCausalLM", "gemma", Family::kGemma},
    {"Gemma2ForCausalLM", "gemma2", Family::kGemma2},
    {"Gemma3ForCausalLM", "gemma3_text", Family::kGemma3},
    {"Gemma3ForConditionalGeneration", "gemma3", Family::kGemma3Multimodal},
    {"GptOssForCausalLM", "gpt_oss", Family::kGptOss},
    {"GPT2LMHeadModel", "gpt2", Family::kGpt2},
    {"GPTNeoXForCausalLM", "gpt_neox", Family::kGptNeox},
    {"DeepseekV2ForCausalLM", "deepseek_v2", Family::kDeepseekV2},
    {"DeepseekV3ForCausalLM", "deepseek_v3", Family::kDeepseekV3},
    {"SeedOssForCausalLM", "seed_oss", Family::kSeedOss},
    {"Qwen2VLForConditionalGeneration", "qwen2_vl", Family::kQwen2Vl},
    {"Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", Family::kQwen25Vl},
    {"Qwen3VLForConditionalGeneration", "qwen3_vl", Family::kQwen3Vl},
    {"Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe", Family::kQwen3VlMoe},
};

// PretrainedConfig keys (configuration_utils.py): bookkeeping, token ids, generation defaults.
const std::vector<std::string> kCommonSkipped = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "use_cache", "initializer_range", "tokenizer_class", "return_dict", "output_hidden_states",
    "output_attentions", "torchscript", "use_bfloat16", "pruned_heads", "is_encoder_decoder",
    "is_decoder", "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "temperature", "top_k",
    "top_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "task_specific_params", "problem_type", "id2label", "label2id",
    "finetuning_task", "prefix", "_attn_implementation_autoset", "auto_map"};

// Dropout, activation name: no parameters and no change in what is saved. (The rotary base,
// scaling and the norm epsilon are read: the executor computes with them.)
const std::vector<std::string> kRotaryDecoderSkipped = {"attention_dropout", "hidden_act"};
// Sliding windows bound attention's reach, not the memory SDPA/flash kernels save.
const std::vector<std::string> kQwenSkipped = {"sliding_window", "use_sliding_window",
                                               "max_window_layers", "layer_types", "use_mrope"};
// output_router_logits and norm_topk_prob are read (MoeSpec), router_jitter_noise checked; the
// aux loss's coefficient changes values only.
const std::vector<std::string> kRouterSkipped = {"router_aux_loss_coef"};
// Phi3Attention builds qkv_proj and o_proj with bias=False whatever attention_bias says
// (modeling_phi3.py); original_max_position_embeddings only picks longrope's short or long
// factors (the frequencies, not the shapes).
// Phi-4-mini's full_attn_mod, interpolate_factor, lm_head_bias and mlp_bias are read by its
// remote code only: transformers' Phi3MLP and lm_head have no bias.
const std::vector<std::string> kPhi3Skipped = {
    "attention_bias", "original_max_position_embeddings", "sliding_window", "full_attn_mod",
    "interpolate_factor", "lm_head_bias", "mlp_bias"};
// Gemma: the KV-cache layout, a duplicate of sliding_window in Gemma 2's first configs, and
// hidden_act (hidden_activation is what Gemma's MLP reads, and is checked).
const std::vector<std::string> kGemmaSkipped = {"cache_implementation", "sliding_window_size",
                                                "hidden_act"};
// Gemma3ForConditionalGeneration's keys outside text_config that change no shape: the image
// token ids (text_config, vision_config and mm_tokens_per_image are read by ReadGemma3Vision).
// tie_word_embeddings repeats text_config's.
const std::vector<std::string> kGemma3MultimodalSkipped = {
    "boi_token_index", "eoi_token_index", "image_token_index", "tie_word_embeddings"};
// A Qwen VL config's token ids and video settings outside text_config (no shapes).
const std::vector<std::string> kQwenVlTopSkipped = {
    "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
    "vision_token_id"};
// Why a non-zero dropout is refused (HfReader::RequireZero): F.dropout with p = 0 returns its
// input (ATen Dropout.cpp), any other p saves a mask per element.
constexpr const char* kDropoutWhy =
    "dropout in training saves a mask per element, which shardtune does not model";
const std::vector<std::string> kGpt2Skipped = {
    "n_ctx", "activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"};
const std::vector<std::string> kNeoxSkipped = {"hidden_act", "hidden_dropout", "attention_dropout",
                                               "classifier_dropout"};

// DeepSeek (configuration_deepseek_v3.py, DeepSeek's configuration_deepseek.py): ep_size is the
// inference engine's expert parallelism (transformers builds every expert); the multi-token-
// prediction layers (num_nextn_predict_layers) are not built by transformers
// (DeepseekV3Model._keys_to_ignore_on_load_unexpected drops layers.61); aux_loss_alpha and
// seq_aux drive DeepSeek's own training code's balance loss, which transformers' forward does not
// compute; head_dim is transformers' rotary width (= qk_rope_head_dim) and qk_head_dim the sum,
// both checked; rope_interleave and pretraining_tp change values or nothing.
const std::vector<std::string> kDeepseekSkipped = {
    "attention_dropout", "hidden_act", "ep_size", "num_nextn_predict_layers", "aux_loss_alpha",
    "seq_aux", "rope_interleave", "pretraining_tp"};

std::vector<std::string> SkippedKeys(Family f) {
  std::vector<std::string> keys = kCommonSkipped;
  auto add = [&keys](const std::vector<std::string>& more) {
    keys.insert(keys.end(), more.begin(), more.end());
  };
  switch (f) {
    case Family::kLlama: add(kRotaryDecoderSkipped); keys.push_back("pretraining_tp"); break;
    case Family::kMistral: add(kRotaryDecoderSkipped); keys.push_back("sliding_window"); break;
    case Family::kQwen2:
    case Family::kQwen3: add(kRotaryDecoderSkipped); add(kQwenSkipped); break;
    case Family::kMixtral:
      add(kRotaryDecoderSkipped); add(kRouterSkipped); keys.push_back("sliding_window"); break;
    case Family::kQwen2Moe:
    case Family::kQwen3Moe:
      add(kRotaryDecoderSkipped); add(kQwenSkipped); add(kRouterSkipped); break;
    case Family::kPhi3: keys.push_back("hidden_act"); add(kPhi3Skipped); break;
    case Family::kOlmo2: add(kRotaryDecoderSkipped); break;
    case Family::kGemma:
    case Family::kGemma2:
    case Family::kGemma3: add(kGemmaSkipped); break;
    case Family::kGemma3Multimodal: add(kGemma3MultimodalSkipped); break;
    case Family::kGptOss:
      add(kRotaryDecoderSkipped); add(kRouterSkipped);
      // initial_context_length is YaRN's original context (also in rope_scaling); swiglu_limit
      // changes values only (the clamp's bounds).
      keys.push_back("initial_context_length"); keys.push_back("swiglu_limit");
      break;
    case Family::kGpt2: add(kGpt2Skipped); break;
    case Family::kGptNeox: add(kNeoxSkipped); break;
    case Family::kDeepseekV2:
    case Family::kDeepseekV3: add(kDeepseekSkipped); break;
    // SeedOssConfig: hidden_act and pretraining_tp as Llama's. attention_dropout is not skipped:
    // it defaults to 0.1 there, and is checked with residual_dropout (ReadSeedOss).
    case Family::kSeedOss: keys.push_back("hidden_act"); keys.push_back("pretraining_tp"); break;
    // The Qwen VL families read their top level in ReadQwenVl.
    case Family::kQwen2Vl:
    case Family::kQwen25Vl:
    case Family::kQwen3Vl:
    case Family::kQwen3VlMoe: break;
  }
  return keys;
}

// StrictReader plus the HF conventions: null means "the class default", unknown keys warn.
class HfReader {
 public:
  HfReader(const nlohmann::json& j, const std::string& file, const std::string& pointer = "")
      : j_(j), r_(j, file, pointer) {}
  // A key whose JSON null means "off" (HF's None), not the class default: 0 when null,
  // `absent` when the key is missing, else a number in [0, max].
  double NumberOrOff(const std::string& key, double absent, double max) {
    if (!r_.Has(key)) return absent;
    read_.insert(key);
    if (j_.at(key).is_null()) {
      r_.Ignore(key);
      return 0;
    }
    return r_.OptionalNumber(key, absent, 0, max);
  }
  // A key whose non-zero value changes the computation in a way shardtune does not model
  // (dropout, router noise): absent, null or 0, else a one-line error saying `why`.
  void RequireZero(const std::string& key, const std::string& why) {
    if (!Has(key)) return;
    const nlohmann::json& v = Value(key);
    if (v.is_null() || (v.is_number() && v.get<double>() == 0)) return;
    throw InputError(Where(key) + ": expected 0 (" + why + "), got " + Describe(v));
  }
  int64_t Int(const std::string& key) {
    read_.insert(key);
    return r_.RequiredInt(key, 1, INT_MAX);
  }
  int64_t OptInt(const std::string& key, int64_t def) {
    if (IsNullOrAbsent(key)) return def;
    return Int(key);
  }
  bool OptBool(const std::string& key, bool def) {
    if (IsNullOrAbsent(key)) return def;
    read_.insert(key);
    return r_.OptionalBool(key, def);
  }
  // A positive number (the rotary base, an epsilon, a fraction) no larger than `max`.
  double OptNumber(const std::string& key, double def, double max) {
    if (IsNullOrAbsent(key)) return def;
    read_.insert(key);
    double v = r_.OptionalNumber(key, def, 0, max);
    if (v <= 0)
      throw InputError(r_.Where(key) + ": expected a number > 0, got " + Describe(j_.at(key)));
    return v;
  }
  // rope_scaling (transformers <= 4.x) or rope_parameters (newer): an object whose "rope_type"
  // (or legacy "type") names the scheme, "default" and null meaning plain RoPE, with the
  // scheme's numbers (modeling_rope_utils.py reads factor; llama3 also low_freq_factor,
  // high_freq_factor and original_max_position_embeddings). A rope_parameters object also
  // carries rope_theta, stored in *theta when given. Leaves *out as is when there is none.
  void ReadRope(const std::string& key, RopeScaling* out, double* theta) {
    if (IsNullOrAbsent(key)) return;
    read_.insert(key);
    const nlohmann::json& v = r_.RequiredValue(key);
    const std::string where = r_.Where(key);
    if (!v.is_object())
      throw InputError(where + ": expected an object or null, got " + Describe(v));
    auto number = [&](const char* k, bool required, double* dst, bool zero_ok = false) {
      const char* expected = zero_ok ? "a number >= 0" : "a number > 0";
      auto it = v.find(k);
      if (it == v.end() || it->is_null()) {
        if (required) throw InputError(where + "/" + k + ": expected " + expected + ", got nothing");
        return;
      }
      if (!it->is_number() || it->get<double>() < 0 || (!zero_ok && it->get<double>() == 0)) {
        throw InputError(where + "/" + k + ": expected " + std::string(expected) + ", got " + Describe(*it));
      }
      *dst = it->get<double>();
    };
    // original_max_position_embeddings is a token count: a whole number a 64-bit integer holds
    // (the cast of a larger double is undefined; fuzz_hf_config found 4e128).
    auto positions = [&](double x) -> int64_t {
      constexpr double kMaxPositions = 1e15;  // far above any context length, well inside int64
      if (x != std::floor(x) || x > kMaxPositions)
        throw InputError(where + "/original_max_position_embeddings: expected a whole number in [1, 1e15], got " +
                         Describe(v.at("original_max_position_embeddings")));
      return static_cast<int64_t>(x);
    };
    number("rope_theta", false, theta);
    std::string type;
    for (const char* k : {"rope_type", "type"}) {
      auto it = v.find(k);
      if (it == v.end()) continue;
      if (!it->is_string())
        throw InputError(where + "/" + k + ": expected a string, got " + Describe(*it));
      type = it->get<std::string>();
      break;
    }
    if (type.empty() || type == "default") return;
    RopeScaling r;
    r.type = type;
    number("factor", type == "linear" || type == "llama3" || type == "yarn", &r.factor);
    if (type == "yarn") {  // _compute_yarn_parameters' keys (0 / absent: "not set")
      number("beta_fast", false, &r.beta_fast);
      number("beta_slow", false, &r.beta_slow);
      number("mscale", false, &r.mscale, true);
      number("mscale_all_dim", false, &r.mscale_all_dim, true);
      number("attention_factor", false, &r.attention_factor, true);
      double original = 0;
      number("original_max_position_embeddings", false, &original);
      if (original > 0) {
        r.original_max_position_embeddings = positions(original);
        r.original_given = true;
      }
      auto t = v.find("truncate");
      if (t != v.end() && !t->is_null()) {
        if (!t->is_boolean()) throw InputError(where + "/truncate: expected true or false, got " + Describe(*t));
        r.truncate = t->get<bool>();
      }
    }
    if (type == "llama3") {
      double original = 0;
      number("low_freq_factor", true, &r.low_freq_factor);
      number("high_freq_factor", true, &r.high_freq_factor);
      number("original_max_position_embeddings", true, &original);
      r.original_max_position_embeddings = positions(original);
    }
    *out = r;
  }
  const nlohmann::json& Value(const std::string& key) {
    read_.insert(key);
    return r_.RequiredValue(key);
  }
  bool Has(const std::string& key) const { return r_.Has(key); }
  std::string Where(const std::string& key) const { return r_.Where(key); }
  void Skip(const std::vector<std::string>& keys) {
    for (const auto& k : keys) {
      r_.Ignore(k);
      skipped_.insert(k);
    }
  }
  // Warns about every key neither read nor skipped, then marks it read.
  void Finish(const std::string& arch, std::vector<std::string>* warnings) {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (skipped_.count(it.key()) || read_.count(it.key())) continue;
      if (warnings) {
        warnings->push_back(r_.Where(it.key()) + ": unknown key for " + arch +
                            ", ignored (assumed to have no effect on memory)");
      }
      r_.Ignore(it.key());
    }
    r_.Finish();
  }
 private:
  bool IsNullOrAbsent(const std::string& key) {
    if (!r_.Has(key)) return true;
    if (!j_.at(key).is_null()) return false;
    r_.Ignore(key);
    read_.insert(key);
    return true;
  }
  const nlohmann::json& j_;
  StrictReader r_;
  std::set<std::string> skipped_, read_;
};

// Qwen2MoeSparseMoeBlock: `num_experts` experts of moe_intermediate_size, one shared expert of
// shared_expert_intermediate_size and its sigmoid gate Linear(H, 1). Qwen3MoeSparseMoeBlock: the
// routed experts alone (modeling_qwen3_moe.py: gate Linear(H, E) and E Qwen3MoeMLP), the same
// dispatch (softmax in fp32, top-k, renormalised when norm_topk_prob, index_add_ back).
void ReadQwenMoe(HfReader* h, Family f, ModelSpec* s) {
  // The Hub's config.json files say num_experts; transformers 5 renamed the attribute to
  // num_local_experts (Qwen3MoeConfig's attribute_map keeps num_experts as an alias), so a config
  // it saves (save_pretrained, to_dict) has only the new name: seen in the configs transformers
  // 5.17 built on the lent H100 (2026-11-26).
  if (!h->Has("num_experts") && h->Has("num_local_experts")) {
    s->moe.num_experts = static_cast<int>(h->Int("num_local_experts"));
  } else {
    s->moe.num_experts = static_cast<int>(h->Int("num_experts"));
    const int64_t local = h->Has("num_local_experts") ? h->Int("num_local_experts") : s->moe.num_experts;
    if (local != s->moe.num_experts) {
      throw InputError(h->Where("num_local_experts") + ": expected the same count as num_experts (" +
                       std::to_string(s->moe.num_experts) + "), got " + std::to_string(local));
    }
  }
  s->moe.top_k = static_cast<int>(h->Int("num_experts_per_tok"));
  s->moe.expert_ffn_hidden = h->Int("moe_intermediate_size");
  if (f == Family::kQwen2Moe) {
    s->moe.shared_expert_ffn_hidden = h->OptInt("shared_expert_intermediate_size", 0);
  }
  s->moe.num_shared_experts = s->moe.shared_expert_ffn_hidden > 0 ? 1 : 0;
  s->moe.shared_expert_gate = s->moe.num_shared_experts > 0;
  // Mixtral always renormalises the top-k weights; Qwen2MoeConfig and Qwen3MoeConfig default
  // norm_topk_prob to False.
  s->moe.norm_topk_prob = h->OptBool("norm_topk_prob", false);
  if (h->Has("decoder_sparse_step")) {
    const auto& v = h->Value("decoder_sparse_step");
    if (v != 1) {
      throw InputError(h->Where("decoder_sparse_step") +
                       ": expected 1 (shardtune models every block as MoE), got " + Describe(v));
    }
  }
  if (h->Has("mlp_only_layers")) {
    const auto& v = h->Value("mlp_only_layers");
    if (!v.is_null() && v != nlohmann::json::array()) {
      throw InputError(h->Where("mlp_only_layers") +
                       ": expected [] (shardtune models every block as MoE), got " + Describe(v));
    }
  }
  if (f == Family::kQwen2Moe) {
    s->qkv_bias = h->OptBool("qkv_bias", true);  // Qwen2MoeAttention: q/k/v bias=True
  } else {
    // Qwen3MoeAttention: q/k/v/o bias=config.attention_bias, q_norm/k_norm RMSNorm(head_dim).
    s->qkv_bias = s->attn_out_bias = h->OptBool("attention_bias", false);
    s->qk_norm = true;
  }
}

// Phi3ForCausalLM (modeling_phi3.py): Mistral's layout with qkv_proj and gate_up_proj fused, no
// biases, rotary over partial_rotary_factor of head_dim (Phi-4-mini 0.75), and nn.Dropout(p) on
// the embeddings, attention and each residual branch: p = 0 is the identity (ATen's dropout
// returns its input), any other p saves a mask per element, which shardtune does not model.
void ReadPhi3(HfReader* h, ModelSpec* s) {
  s->fused_qkv = s->fused_gate_up = true;
  if (h->Has("partial_rotary_factor")) {
    s->rotary_fraction = h->OptNumber("partial_rotary_factor", 1.0, 1.0);
  }
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attention_dropout"}) {
    h->RequireZero(key, kDropoutWhy);
  }
}

// Olmo2ForCausalLM (modeling_olmo2.py): Llama's projections (bias=attention_bias on q, k, v and
// o), q_norm/k_norm over the whole projections, post-norms instead of pre-norms, and
// Olmo2RMSNorm's (weight * x).to(input_dtype).
void ReadOlmo2(HfReader* h, ModelSpec* s) {
  s->qkv_bias = s->attn_out_bias = h->OptBool("attention_bias", false);
  s->qk_norm = s->qk_norm_full_width = true;
  s->norm_placement = NormPlacement::kPost;
  s->norm_weight_fp32 = true;
}

// layer_types (transformers >= 4.53): "sliding_attention" / "full_attention" per layer, as
// ModelSpec::full_attention_every (every N-th layer full). Other patterns are refused by name.
int FullAttentionEvery(HfReader* h, int layers, int def) {
  if (!h->Has("layer_types")) return def;
  const nlohmann::json& v = h->Value("layer_types");
  const std::string where = h->Where("layer_types");
  if (!v.is_array() || static_cast<int>(v.size()) != layers) {
    throw InputError(where + ": expected an array of num_hidden_layers = " +
                     std::to_string(layers) + " strings, got " + Describe(v));
  }
  int every = layers + 1;  // no full layer: every layer slides
  for (int i = 0; i < layers; ++i) {
    const nlohmann::json& t = v[static_cast<size_t>(i)];
    if (t != "sliding_attention" && t != "full_attention") {
      throw InputError(where + "/" + std::to_string(i) +
                       ": expected \"sliding_attention\" or \"full_attention\", got " +
                       Describe(t));
    }
    if (t == "full_attention" && every == layers + 1) every = i + 1;
  }
  for (int i = 0; i < layers; ++i) {
    bool full = v[static_cast<size_t>(i)] == "full_attention";
    if (full != ((i + 1) % every == 0)) {
      throw InputError(where + "/" + std::to_string(i) +
                       ": expected every " + std::to_string(every) +
                       "-th layer to attend fully (the periodic pattern shardtune models), got " +
                       Describe(v[static_cast<size_t>(i)]));
    }
  }
  return every;
}

// Gemma's MLP activation (hidden_activation, every generation): absent or null is
// gelu_pytorch_tanh, the GeGLU shardtune models; anything else is refused.
void CheckGemmaActivation(HfReader* h) {
  if (!h->Has("hidden_activation")) return;
  const nlohmann::json& v = h->Value("hidden_activation");
  if (!v.is_null() && v != "gelu_pytorch_tanh") {
    throw InputError(h->Where("hidden_activation") +
                     ": expected \"gelu_pytorch_tanh\" (Gemma's GeGLU), got " + Describe(v));
  }
}

// The shape keys and the layout every Gemma generation shares: the shapes with the config
// class's defaults for absent keys, a tied head (tie_word_embeddings), q/k/v/o biases as
// attention_bias (default false), RMSNorm as (x_hat * (1 + w)) in fp32, the GeGLU MLP and
// embeddings times sqrt(H).
struct GemmaShapeDefaults {
  int64_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab, positions;
};
void ReadGemmaShape(HfReader* h, const GemmaShapeDefaults& d, ModelSpec* s) {
  s->num_layers = static_cast<int>(h->OptInt("num_hidden_layers", d.layers));
  s->hidden = h->OptInt("hidden_size", d.hidden);
  s->num_heads = static_cast<int>(h->OptInt("num_attention_heads", d.heads));
  s->num_kv_heads = static_cast<int>(h->OptInt("num_key_value_heads", d.kv_heads));
  s->head_dim = h->OptInt("head_dim", d.head_dim);
  s->ffn_hidden = h->OptInt("intermediate_size", d.ffn);
  s->vocab_size = h->OptInt("vocab_size", d.vocab);
  s->max_seq_len = h->OptInt("max_position_embeddings", d.positions);
  s->tied_embeddings = h->OptBool("tie_word_embeddings", true);
  s->qkv_bias = s->attn_out_bias = h->OptBool("attention_bias", false);
  s->norm_weight_fp32 = s->norm_unit_offset = true;
  s->gelu_gate = true;
  s->scaled_embedding = true;
}

// Gemma2ForCausalLM (modeling_gemma2.py), Gemma3ForCausalLM and the text backbone of
// Gemma3ForConditionalGeneration (modeling_gemma3.py): Llama's projections with sandwich norms
// (input, post-attention, pre- and post-feedforward), RMSNorm as (x_hat * (1 + w)) in fp32, a
// GeGLU MLP (gelu_pytorch_tanh), embeddings times sqrt(H), attention scaled by
// query_pre_attn_scalar^-0.5, sliding and full layers in a fixed pattern (Gemma 2: alternating;
// Gemma 3: every 6th full, with its own rotary base rope_local_base_freq on the sliding ones and
// per-head q/k norms), soft-capped logits (Gemma 2). Absent keys take Gemma2Config's /
// Gemma3TextConfig's defaults (configuration_gemma2.py, configuration_gemma3.py), as HF does:
// the published Gemma 3 text_config lists only what differs from them.
void ReadGemma(HfReader* h, Family f, ModelSpec* s) {
  const bool g3 = f != Family::kGemma2;
  ReadGemmaShape(h,
                 {/*layers=*/26, /*hidden=*/2304, /*heads=*/8, /*kv_heads=*/4, /*head_dim=*/256,
                  /*ffn=*/9216, /*vocab=*/g3 ? 262208 : 256000,
                  /*positions=*/g3 ? 131072 : 8192},
                 s);
  s->qk_norm = g3;  // Gemma3Attention: q_norm, k_norm = Gemma3RMSNorm(head_dim)
  s->norm_placement = NormPlacement::kSandwich;
  s->final_logit_softcap = h->NumberOrOff("final_logit_softcapping", g3 ? 0 : 30.0, 1e6);
  s->attn_logit_softcap = h->NumberOrOff("attn_logit_softcapping", g3 ? 0 : 50.0, 1e6);
  s->query_pre_attn_scalar = h->OptNumber("query_pre_attn_scalar", 256, 1e9);
  s->sliding_window = h->OptInt("sliding_window", 4096);
  int every = g3 ? static_cast<int>(h->OptInt("sliding_window_pattern", 6)) : 2;
  s->full_attention_every = FullAttentionEvery(h, s->num_layers, every);
  s->rope_theta = h->OptNumber("rope_theta", g3 ? 1e6 : 10000.0, 1e12);
  if (g3) s->rope_local_theta = h->OptNumber("rope_local_base_freq", 10000.0, 1e12);
  h->ReadRope("rope_scaling", &s->rope_scaling, &s->rope_theta);
  s->norm_eps = h->OptNumber("rms_norm_eps", 1e-6, 0.5);
  CheckGemmaActivation(h);
  h->RequireZero("attention_dropout", kDropoutWhy);
}

// GemmaForCausalLM (modeling_gemma.py, transformers' Gemma 1): Llama's pre-norm layout and
// projections with Gemma's RMSNorm ((x_hat * (1 + w)) in fp32), the GeGLU MLP, embeddings times
// sqrt(H) and a tied LM head; no soft-capping, no sliding windows, attention scaled by
// head_dim^-0.5. Absent keys take GemmaConfig's defaults (configuration_gemma.py: the 7B's
// shapes). The published configs carry the legacy hidden_act "gelu", which transformers 4.x
// ignores for hidden_activation (absent or null: gelu_pytorch_tanh; the 1.1 releases write it),
// so hidden_act is skipped and hidden_activation checked as Gemma 2's. (transformers 5's
// modular_gemma.py has no hidden_activation and GemmaMLP reads hidden_act, exact GELU for
// "gelu": the same saved input, other values.)
void ReadGemma1(HfReader* h, ModelSpec* s) {
  ReadGemmaShape(h,
                 {/*layers=*/28, /*hidden=*/3072, /*heads=*/16, /*kv_heads=*/16, /*head_dim=*/256,
                  /*ffn=*/24576, /*vocab=*/256000, /*positions=*/8192},
                 s);
  s->norm_placement = NormPlacement::kPre;
  s->rope_theta = h->OptNumber("rope_theta", 10000.0, 1e12);
  h->ReadRope("rope_parameters", &s->rope_scaling, &s->rope_theta);
  h->ReadRope("rope_scaling", &s->rope_scaling, &s->rope_theta);
  s->norm_eps = h->OptNumber("rms_norm_eps", 1e-6, 0.5);
  CheckGemmaActivation(h);
  // GemmaAttention: is_causal = not use_bidirectional_attention (EmbeddingGemma's setting).
  if (h->OptBool("use_bidirectional_attention", false)) {
    throw InputError(h->Where("use_bidirectional_attention") +
                     ": expected false (causal attention, what shardtune models), got true");
  }
  h->RequireZero("attention_dropout", kDropoutWhy);
}

// SeedOssForCausalLM (modeling_seed_oss.py): Llama's layout with q/k/v biases
// (attention_bias, default true), o_proj's bias apart (attention_out_bias, default false), MLP
// biases (mlp_bias, default false), head_dim 128 when absent (SeedOssConfig's default; null:
// hidden / heads), and dropout on the attention probabilities (attention_dropout) and on each
// sublayer's output (residual_dropout), both defaulting to 0.1 in SeedOssConfig: in training a
// non-zero residual dropout saves a mask per element, which shardtune does not model, so both
// must be 0 (written: an absent key means 0.1).
void ReadSeedOss(HfReader* h, ModelSpec* s) {
  if (!h->Has("head_dim")) s->head_dim = 128;
  s->qkv_bias = h->OptBool("attention_bias", true);
  s->attn_out_bias = h->OptBool("attention_out_bias", false);
  s->mlp_bias = h->OptBool("mlp_bias", false);
  for (const char* key : {"attention_dropout", "residual_dropout"}) {
    if (!h->Has(key)) {
      throw InputError(h->Where(key) + ": expected 0 (" + kDropoutWhy +
                       "), got nothing (SeedOssConfig's default is 0.1)");
    }
    h->RequireZero(key, kDropoutWhy);
  }
}

// A quantized checkpoint (quantization_config, not null): a warning naming its quant_method and
// `how` training treats the quantized weights; memory and time are those of the compute dtype.
void WarnQuantized(HfReader* h, const std::string& what, const std::string& how,
                   std::vector<std::string>* warnings) {
  if (!h->Has("quantization_config")) return;
  const nlohmann::json& q = h->Value("quantization_config");
  if (warnings == nullptr || q.is_null()) return;
  warnings->push_back(h->Where("quantization_config") + ": " + what + " quantized (" +
                      (q.is_object() && q.contains("quant_method") ? Describe(q.at("quant_method"))
                                                                  : std::string("?")) +
                      "); " + how + ", so memory and time are estimated for " +
                      "the compute dtype");
}

// Llama's rotary and norm settings (LlamaRotaryEmbedding: inv_freq = 1 / rope_theta^(2i/d),
// rescaled by rope_scaling's scheme, modeling_rope_utils.py ROPE_INIT_FUNCTIONS; LlamaRMSNorm's
// variance_epsilon = rms_norm_eps): rope_theta, rope_parameters or rope_scaling, rms_norm_eps.
void ReadRopeAndNormEps(HfReader* h, ModelSpec* s) {
  s->rope_theta = h->OptNumber("rope_theta", 0, 1e12);
  h->ReadRope("rope_parameters", &s->rope_scaling, &s->rope_theta);
  h->ReadRope("rope_scaling", &s->rope_scaling, &s->rope_theta);
  s->norm_eps = h->OptNumber("rms_norm_eps", 0, 0.5);
}

// GptOssForCausalLM (modeling_gpt_oss.py): Llama's projections with biases (attention_bias), a
// sink logit per head, sliding and full layers alternating (layer_types), and its MoE:
// num_local_experts 3-D experts with biases and the clamped SwiGLU, top num_experts_per_tok
// (experts_per_token repeats it) from a router with a bias. The published checkpoints store the
// experts in MXFP4 (quantization_config); training dequantizes them to the compute dtype
// (transformers' Mxfp4Config(dequantize=True)), which is what shardtune estimates: ImportHfConfig
// says so in a warning.
void ReadGptOss(HfReader* h, ModelSpec* s, std::vector<std::string>* warnings) {
  s->qkv_bias = s->attn_out_bias = h->OptBool("attention_bias", true);
  s->attention_sinks = true;
  s->norm_weight_fp32 = true;  // GptOssRMSNorm: (weight * x).to(input_dtype)
  s->moe.num_experts = static_cast<int>(h->Int("num_local_experts"));
  s->moe.top_k = static_cast<int>(h->Int("num_experts_per_tok"));
  if (h->Has("experts_per_token") && h->Value("experts_per_token") != s->moe.top_k) {
    throw InputError(h->Where("experts_per_token") + ": expected num_experts_per_tok = " +
                     std::to_string(s->moe.top_k) + ", got " +
                     Describe(h->Value("experts_per_token")));
  }
  s->moe.expert_ffn_hidden = s->ffn_hidden;
  s->moe.gpt_oss_experts = true;
  s->moe.router_aux_loss = h->OptBool("output_router_logits", false);
  if (s->moe.router_aux_loss) s->moe.router_aux_loss_coef = h->OptNumber("router_aux_loss_coef", 0.001, 1e6);
  s->sliding_window = h->OptInt("sliding_window", 128);
  s->full_attention_every = FullAttentionEvery(h, s->num_layers, 2);
  WarnQuantized(h, "the checkpoint's experts are", "training dequantizes them", warnings);
}

// DeepseekV3ForCausalLM (modeling_deepseek_v3.py) and DeepseekV2ForCausalLM (DeepSeek's
// modeling_deepseek.py, transformers' modeling_deepseek_v2.py): multi-head latent attention
// (model_spec.h MlaSpec), blocks [0, first_k_dense_replace) with a dense MLP of intermediate_size,
// the others n_routed_experts experts of moe_intermediate_size (top num_experts_per_tok) plus one
// always-on shared MLP of n_shared_experts x moe_intermediate_size, no gate on it; the DeepSeek
// router (MoeSpec::deepseek_router). V3 scores with sigmoid and topk_method "noaux_tc"; V2 with
// softmax and "greedy" or "group_limited_greedy": values, not memory. An FP8 checkpoint
// (quantization_config) is trained in the compute dtype: warned.
void ReadDeepseek(HfReader* h, Family f, ModelSpec* s, std::vector<std::string>* warnings) {
  s->num_layers = static_cast<int>(h->Int("num_hidden_layers"));
  s->hidden = h->Int("hidden_size");
  s->num_heads = static_cast<int>(h->Int("num_attention_heads"));
  s->num_kv_heads = static_cast<int>(h->OptInt("num_key_value_heads", s->num_heads));
  s->ffn_hidden = h->Int("intermediate_size");
  s->vocab_size = h->Int("vocab_size");
  s->max_seq_len = h->Int("max_position_embeddings");
  s->tied_embeddings = h->OptBool("tie_word_embeddings", false);
  if (h->OptBool("attention_bias", false)) {
    throw InputError(h->Where("attention_bias") +
                     ": expected false (DeepSeek's published configs; MLA with biases on "
                     "q_a_proj, kv_a_proj_with_mqa and o_proj is not modelled), got true");
  }
  MlaSpec& m = s->mla;
  m.q_lora_rank = h->OptInt("q_lora_rank", 0);  // null: q_proj directly (V2-Lite)
  m.kv_lora_rank = h->Int("kv_lora_rank");
  m.qk_nope_head_dim = h->Int("qk_nope_head_dim");
  m.qk_rope_head_dim = h->Int("qk_rope_head_dim");
  m.v_head_dim = h->Int("v_head_dim");
  const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  // transformers' DeepseekV3Config sets head_dim = qk_rope_head_dim (the rotary width) and
  // qk_head_dim = nope + rope: either, when written, must agree.
  if (h->Has("head_dim") && !h->Value("head_dim").is_null() &&
      h->Value("head_dim") != m.qk_rope_head_dim && h->Value("head_dim") != qk) {
    throw InputError(h->Where("head_dim") + ": expected qk_rope_head_dim = " +
                     std::to_string(m.qk_rope_head_dim) + " (transformers' rotary width), got " +
                     Describe(h->Value("head_dim")));
  }
  if (h->Has("qk_head_dim") && !h->Value("qk_head_dim").is_null() && h->Value("qk_head_dim") != qk) {
    throw InputError(h->Where("qk_head_dim") + ": expected qk_nope_head_dim + qk_rope_head_dim = " +
                     std::to_string(qk) + ", got " + Describe(h->Value("qk_head_dim")));
  }
  MoeSpec& e = s->moe;
  e.num_experts = static_cast<int>(h->Int("n_routed_experts"));
  e.top_k = static_cast<int>(h->Int("num_experts_per_tok"));
  e.expert_ffn_hidden = h->Int("moe_intermediate_size");
  // One MLP of n_shared_experts x moe_intermediate_size; null: none (DeepSeek's MoE builds
  // shared_experts only when n_shared_experts is not None).
  if (h->Has("n_shared_experts") && h->Value("n_shared_experts").is_null()) {
    e.num_shared_experts = 0;
  } else {
    e.num_shared_experts = 1;
    e.shared_expert_ffn_hidden = h->OptInt("n_shared_experts", 1) * e.expert_ffn_hidden;
  }
  e.deepseek_router = true;
  e.norm_topk_prob = h->OptBool("norm_topk_prob", f == Family::kDeepseekV3);
  e.n_group = static_cast<int>(h->OptInt("n_group", 1));
  e.topk_group = static_cast<int>(h->OptInt("topk_group", 1));
  e.routed_scaling_factor = h->OptNumber("routed_scaling_factor", 1.0, 1e6);
  e.first_dense_layers = 0;
  if (h->Has("first_k_dense_replace") && !h->Value("first_k_dense_replace").is_null()) {
    const nlohmann::json& v = h->Value("first_k_dense_replace");
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= s->num_layers) {
      throw InputError(h->Where("first_k_dense_replace") + ": expected an integer in [0, " +
                       std::to_string(s->num_layers - 1) + "] (the dense blocks before the MoE " +
                       "ones), got " + Describe(v));
    }
    e.first_dense_layers = static_cast<int>(v.get<int64_t>());
  }
  if (h->Has("moe_layer_freq") && !h->Value("moe_layer_freq").is_null() &&
      h->Value("moe_layer_freq") != 1) {
    throw InputError(h->Where("moe_layer_freq") +
                     ": expected 1 (every block after first_k_dense_replace is MoE, as "
                     "transformers builds it), got " + Describe(h->Value("moe_layer_freq")));
  }
  const char* scoring = f == Family::kDeepseekV3 ? "sigmoid" : "softmax";
  if (h->Has("scoring_func") && !h->Value("scoring_func").is_null() &&
      h->Value("scoring_func") != scoring) {
    throw InputError(h->Where("scoring_func") + ": expected \"" + scoring + "\" (what " +
                     (f == Family::kDeepseekV3 ? "DeepseekV3TopkRouter" : "DeepSeek-V2's MoEGate") +
                     " computes), got " + Describe(h->Value("scoring_func")));
  }
  e.sigmoid_scores = f == Family::kDeepseekV3;
  e.topk_method = f == Family::kDeepseekV3 ? "noaux_tc" : "greedy";  // the configs' defaults
  if (h->Has("topk_method") && !h->Value("topk_method").is_null()) {
    const nlohmann::json& v = h->Value("topk_method");
    bool ok = f == Family::kDeepseekV3 ? v == "noaux_tc"
                                       : (v == "greedy" || v == "group_limited_greedy");
    if (!ok) {
      throw InputError(h->Where("topk_method") + ": expected " +
                       (f == Family::kDeepseekV3 ? "\"noaux_tc\""
                                                 : "\"greedy\" or \"group_limited_greedy\"") +
                       ", got " + Describe(v));
    }
    e.topk_method = v.get<std::string>();
  }
  // DeepseekV3RotaryEmbedding and DeepseekV3RMSNorm as Llama's (V3: YaRN, factor 40).
  ReadRopeAndNormEps(h, s);
  WarnQuantized(h, "the checkpoint is", "training runs on weights in the compute dtype", warnings);
}

// Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE, Phi-3, OLMo 2, GPT-OSS
// (modeling_llama.py and its copies).
void ReadRotaryDecoder(HfReader* h, Family f, ModelSpec* s) {
  s->num_layers = static_cast<int>(h->Int("num_hidden_layers"));
  s->hidden = h->Int("hidden_size");
  s->num_heads = static_cast<int>(h->Int("num_attention_heads"));
  s->num_kv_heads = static_cast<int>(h->OptInt("num_key_value_heads", s->num_heads));
  s->head_dim = h->OptInt("head_dim", 0);  // 0: hidden / heads, as the HF attention classes do
  s->ffn_hidden = h->Int("intermediate_size");
  s->vocab_size = h->Int("vocab_size");
  s->max_seq_len = h->Int("max_position_embeddings");
  s->tied_embeddings = h->OptBool("tie_word_embeddings", false);
  if (f == Family::kLlama || f == Family::kQwen3) {
    // LlamaAttention / Qwen3Attention: q, k, v and o_proj all use bias=config.attention_bias.
    s->qkv_bias = s->attn_out_bias = h->OptBool("attention_bias", false);
  }
  if (f == Family::kLlama) s->mlp_bias = h->OptBool("mlp_bias", false);
  if (f == Family::kQwen2) s->qkv_bias = true;  // Qwen2Attention: q/k/v bias=True, o_proj not
  if (f == Family::kQwen3) s->qk_norm = true;   // Qwen3Attention q_norm, k_norm
  if (f == Family::kMixtral) {
    s->moe.num_experts = static_cast<int>(h->Int("num_local_experts"));
    s->moe.top_k = static_cast<int>(h->Int("num_experts_per_tok"));
  }
  if (f == Family::kQwen2Moe || f == Family::kQwen3Moe) ReadQwenMoe(h, f, s);
  if (s->moe.enabled()) s->moe.router_aux_loss = h->OptBool("output_router_logits", false);
  // The loss's weight on it (read only when the loss is computed; skipped otherwise).
  if (s->moe.router_aux_loss) s->moe.router_aux_loss_coef = h->OptNumber("router_aux_loss_coef", 0.001, 1e6);
  // MixtralSparseMoeBlock in training: hidden_states *= uniform_(1 - jitter, 1 + jitter), a
  // multiply that saves the noise tensor [T, H] for backward; not modelled.
  if (s->moe.enabled()) {
    h->RequireZero("router_jitter_noise",
                   "the router's input noise saves a [tokens, hidden] tensor for backward, which "
                   "shardtune does not model");
  }
  if (f == Family::kPhi3) ReadPhi3(h, s);
  if (f == Family::kOlmo2) ReadOlmo2(h, s);
  if (f == Family::kSeedOss) ReadSeedOss(h, s);
  ReadRopeAndNormEps(h, s);
}

// GPT2LMHeadModel (modeling_gpt2.py): Conv1D layers with biases, LayerNorm, learned wpe, GELU MLP
// of n_inner (None: 4 * n_embd), tied LM head (PretrainedConfig's tie_word_embeddings=True).
void ReadGpt2(HfReader* h, ModelSpec* s) {
  s->num_layers = static_cast<int>(h->Int("n_layer"));
  s->hidden = h->Int("n_embd");
  s->num_heads = static_cast<int>(h->Int("n_head"));
  s->ffn_hidden = h->OptInt("n_inner", 4 * s->hidden);
  s->vocab_size = h->Int("vocab_size");
  s->max_seq_len = h->Int("n_positions");
  s->tied_embeddings = h->OptBool("tie_word_embeddings", true);
  s->norm = NormKind::kLayerNorm;
  s->norm_bias = true;
  s->mlp = MlpKind::kGelu;
  s->positions = PositionKind::kLearned;
  s->qkv_bias = s->attn_out_bias = s->mlp_bias = true;
  s->norm_eps = h->OptNumber("layer_norm_epsilon", 0, 0.5);  // GPT2Block's ln_1, ln_2, ln_f
}

// GPTNeoXForCausalLM (modeling_gpt_neox.py): LayerNorm, fused query_key_value and dense with
// bias=config.attention_bias (default True), MLP with biases, rotary on rotary_pct of head_dim
// (no parameters), untied embed_out.
void ReadGptNeox(HfReader* h, ModelSpec* s) {
  s->num_layers = static_cast<int>(h->Int("num_hidden_layers"));
  s->hidden = h->Int("hidden_size");
  s->num_heads = static_cast<int>(h->Int("num_attention_heads"));
  s->ffn_hidden = h->Int("intermediate_size");
  s->vocab_size = h->Int("vocab_size");
  s->max_seq_len = h->Int("max_position_embeddings");
  s->tied_embeddings = h->OptBool("tie_word_embeddings", false);
  s->parallel_residual = h->OptBool("use_parallel_residual", true);
  s->qkv_bias = s->attn_out_bias = h->OptBool("attention_bias", true);
  s->norm = NormKind::kLayerNorm;
  s->norm_bias = true;
  s->mlp = MlpKind::kGelu;
  s->mlp_bias = true;
  // GPTNeoXRotaryEmbedding over rotary_ndims = head_dim x rotary_pct (newer configs:
  // partial_rotary_factor) with base rotary_emb_base (newer: rope_theta).
  s->rope_theta = h->OptNumber("rotary_emb_base", 0, 1e12);
  if (h->Has("rope_theta")) s->rope_theta = h->OptNumber("rope_theta", s->rope_theta, 1e12);
  h->ReadRope("rope_parameters", &s->rope_scaling, &s->rope_theta);
  h->ReadRope("rope_scaling", &s->rope_scaling, &s->rope_theta);
  s->rotary_fraction = h->OptNumber("rotary_pct", 1.0, 1.0);
  if (h->Has("partial_rotary_factor")) {
    s->rotary_fraction = h->OptNumber("partial_rotary_factor", s->rotary_fraction, 1.0);
  }
  s->norm_eps = h->OptNumber("layer_norm_eps", 0, 0.5);
}

// A list of block indexes (fullatt_block_indexes, deepstack_visual_indexes): integers >= 0;
// `def` when absent or null.
std::vector<int> IndexList(HfReader* h, const std::string& key, std::vector<int> def) {
  if (!h->Has(key)) return def;
  const nlohmann::json& v = h->Value(key);
  return v.is_null() ? def : BlockIndexes(v, h->Where(key));
}

// A nested config object (vision_config, text_config) or a one-line error.
const nlohmann::json& NestedObject(const nlohmann::json& j, const std::string& file,
                                   const std::string& key, const std::string& what) {
  StrictReader top(j, file);
  const nlohmann::json& v = top.RequiredValue(key);
  if (!v.is_object()) throw InputError(top.Where(key) + ": expected an object (" + what + "), got " + Describe(v));
  return v;
}

// The image processors' pixel bounds the published checkpoints ship (preprocessor_config.json):
// Qwen2-VL and Qwen2.5-VL min_pixels 3136 (56 x 56), max_pixels 12845056 (16384 x 28 x 28);
// Qwen3-VL size.shortest_edge 65536 and size.longest_edge 16777216 (its pixel bounds).
constexpr int64_t kQwen2VlMinPixels = 3136, kQwen2VlMaxPixels = 12845056;
constexpr int64_t kQwen3VlMinPixels = 65536, kQwen3VlMaxPixels = 16777216;

// vision_config of Qwen2-VL (Qwen2VLVisionConfig: embed_dim, mlp_ratio, and hidden_size as the
// merger's output), Qwen2.5-VL (Qwen2_5_VLVisionConfig: hidden_size, intermediate_size,
// out_hidden_size, window_size, fullatt_block_indexes) and Qwen3-VL (Qwen3VLVisionConfig:
// num_position_embeddings, deepstack_visual_indexes). The shapes are required; the patch
// geometry takes the classes' defaults (patch 14 / 16, temporal 2, merge 2, 3 channels).
VisionSpec ReadQwenVision(const nlohmann::json& vc, const std::string& file, Family f,
                          std::vector<std::string>* warnings) {
  HfReader v(vc, file, "/vision_config");
  v.Skip(kCommonSkipped);
  // hidden_act: the named activation (no effect on memory); spatial_patch_size repeats
  // patch_size; tokens_per_second sets video positions; attention/dropout keys are checked.
  v.Skip({"hidden_act", "spatial_patch_size", "tokens_per_second", "initializer_range"});
  VisionSpec s;
  s.depth = static_cast<int>(v.Int("depth"));
  s.num_heads = static_cast<int>(v.Int("num_heads"));
  if (f == Family::kQwen2Vl) {
    s.kind = VisionKind::kQwen2Vl;
    s.hidden = v.Int("embed_dim");
    s.intermediate = s.hidden * v.OptInt("mlp_ratio", 4);
    s.out_hidden = v.Int("hidden_size");
  } else {
    s.kind = f == Family::kQwen25Vl ? VisionKind::kQwen25Vl : VisionKind::kQwen3Vl;
    s.hidden = v.Int("hidden_size");
    s.intermediate = v.Int("intermediate_size");
    s.out_hidden = v.Int("out_hidden_size");
  }
  s.patch_size = v.OptInt("patch_size", f == Family::kQwen25Vl || f == Family::kQwen2Vl ? 14 : 16);
  s.temporal_patch_size = v.OptInt("temporal_patch_size", 2);
  s.spatial_merge_size = v.OptInt("spatial_merge_size", 2);
  s.in_channels = v.Has("in_channels") ? v.OptInt("in_channels", 3) : v.OptInt("in_chans", 3);
  if (v.Has("in_channels") && v.Has("in_chans")) v.Value("in_chans");  // read: the same setting
  if (f == Family::kQwen25Vl) {
    s.window_size = v.OptInt("window_size", 112);
    s.fullatt_block_indexes = IndexList(&v, "fullatt_block_indexes", {7, 15, 23, 31});
  }
  if (f == Family::kQwen3Vl || f == Family::kQwen3VlMoe) {
    s.num_position_embeddings = v.OptInt("num_position_embeddings", 2304);
    s.deepstack_visual_indexes = IndexList(&v, "deepstack_visual_indexes", {8, 16, 24});
  }
  v.RequireZero("attention_dropout", kDropoutWhy);
  const bool qwen3 = f == Family::kQwen3Vl || f == Family::kQwen3VlMoe;
  s.min_pixels = qwen3 ? kQwen3VlMinPixels : kQwen2VlMinPixels;
  s.max_pixels = qwen3 ? kQwen3VlMaxPixels : kQwen2VlMaxPixels;
  s.norm_eps = 1e-6;  // the blocks' norms and the merger's (eps=1e-6 in every Qwen VL tower)
  v.Finish("vision_config", warnings);
  return s;
}

// Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration,
// Qwen3VLForConditionalGeneration (modeling_qwen2_vl.py, modeling_qwen2_5_vl.py,
// modeling_qwen3_vl.py): the language model is Qwen2's (Qwen2-VL, Qwen2.5-VL: q/k/v biases) or
// Qwen3's (Qwen3-VL: q/k norms), read from text_config when the config has one (transformers >=
// 4.52 saves it so; Qwen3-VL's always do) and from the top level otherwise (the Qwen2/2.5-VL
// releases). M-RoPE (rope_scaling {"type": "mrope", "mrope_section": ...} or Qwen3-VL's
// interleaved sections) splits the rotary frequencies among temporal, height and width
// positions: the same tensors, other values. Qwen2/2.5-VL's sections are kept
// (ModelSpec::mrope_section, which the executor applies); the frequencies are plain RoPE's.
// Qwen3-VL interleaves its sections (mrope_interleaved): read as plain RoPE (the executor does not
// run Qwen3-VL).
void ReadQwenVl(const nlohmann::json& j, const std::string& file, Family f, HfReader* top,
                ModelSpec* s, std::vector<std::string>* warnings) {
  if (f == Family::kQwen3VlMoe) {
    throw InputError(top->Where("architectures") +
                     ": Qwen3VLMoeForConditionalGeneration is not modelled yet (its text model "
                     "stores the experts as fused 3-D tensors; issue #43); "
                     "Qwen3VLForConditionalGeneration (dense) is");
  }
  const Family text_family = f == Family::kQwen3Vl ? Family::kQwen3 : Family::kQwen2;
  top->Skip(kQwenVlTopSkipped);
  top->Skip({"vision_config"});
  std::vector<std::string> text_skipped = kRotaryDecoderSkipped;
  text_skipped.insert(text_skipped.end(), kQwenSkipped.begin(), kQwenSkipped.end());
  auto read_text = [&](HfReader* t, const nlohmann::json& text) {
    ReadRotaryDecoder(t, text_family, s);
    if (s->rope_scaling.type == "mrope") s->rope_scaling = RopeScaling{};
    if (f == Family::kQwen3Vl) return;
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      auto it = text.find(key);
      if (it == text.end() || !it->is_object()) continue;
      auto ms = it->find("mrope_section");
      if (ms != it->end() && !ms->is_null()) s->mrope_section = BlockIndexes(*ms, t->Where(key) + "/mrope_section", "a section size", "section sizes");
    }
  };
  if (top->Has("text_config")) {
    top->Skip({"text_config"});
    const nlohmann::json& tc = NestedObject(j, file, "text_config", "the language model's config");
    HfReader t(tc, file, "/text_config");
    t.Skip(kCommonSkipped);
    t.Skip(text_skipped);
    read_text(&t, tc);
    t.Finish("text_config", warnings);
    // tie_word_embeddings at the top level is the composite's (Qwen3-VL writes it in both).
    if (top->Has("tie_word_embeddings")) {
      s->tied_embeddings = top->OptBool("tie_word_embeddings", s->tied_embeddings);
    }
  } else {
    top->Skip(text_skipped);
    read_text(top, j);
  }
  const nlohmann::json& vc = NestedObject(j, file, "vision_config", "the vision tower's config");
  s->vision = ReadQwenVision(vc, file, f, warnings);
}

// Gemma3ForConditionalGeneration's vision tower: vision_config is a SiglipVisionConfig (its
// defaults: configuration_siglip.py) without the pooling head (vision_use_head false), and the
// projector pools each image to mm_tokens_per_image (Gemma3Config's default 256).
void ReadGemma3Vision(const nlohmann::json& j, const std::string& file, HfReader* top,
                      ModelSpec* s, std::vector<std::string>* warnings) {
  top->Skip({"vision_config"});
  const nlohmann::json& vc = NestedObject(j, file, "vision_config", "a SiglipVisionConfig");
  HfReader v(vc, file, "/vision_config");
  v.Skip(kCommonSkipped);
  v.Skip({"hidden_act"});  // gelu_pytorch_tanh in Gemma 3; no effect on memory
  VisionSpec& g = s->vision;
  g.kind = VisionKind::kSiglip;
  g.depth = static_cast<int>(v.OptInt("num_hidden_layers", 12));
  g.hidden = v.OptInt("hidden_size", 768);
  g.num_heads = static_cast<int>(v.OptInt("num_attention_heads", 12));
  g.intermediate = v.OptInt("intermediate_size", 3072);
  g.image_size = v.OptInt("image_size", 224);
  g.patch_size = v.OptInt("patch_size", 16);
  g.in_channels = v.OptInt("num_channels", 3);
  g.norm_eps = v.OptNumber("layer_norm_eps", 1e-6, 0.5);
  g.temporal_patch_size = g.spatial_merge_size = 1;
  // SiglipVisionConfig defaults vision_use_head to true; Gemma 3's configs write false.
  const bool given = v.Has("vision_use_head");
  if (!given || v.OptBool("vision_use_head", true)) {
    throw InputError(v.Where("vision_use_head") +
                     ": expected false (Gemma 3's tower has no pooling head), got " +
                     (given ? "true" : "nothing (SiglipVisionConfig's default is true)"));
  }
  v.RequireZero("attention_dropout", kDropoutWhy);
  v.Finish("vision_config", warnings);
  g.mm_tokens_per_image = top->OptInt("mm_tokens_per_image", 256);
  g.out_hidden = s->hidden;
}

// Architectures recognised only to be refused by name (ReadQwenVl says why).
bool Refused(const Arch& a) { return a.family == Family::kQwen3VlMoe; }

std::string SupportedList() {
  std::string out;
  for (const Arch& a : kArchs) {
    if (!Refused(a)) out += std::string(out.empty() ? "" : ", ") + a.name;
  }
  return out;
}

// A reward or value model's architecture: a decoder with a score head in place of its LM head,
// "<X>ForSequenceClassification" or "<X>ForTokenClassification" of a supported "<X>ForCausalLM"
// (transformers' modeling_<x>.py: <X>ForSequenceClassification = <X>Model + score
// nn.Linear(hidden_size, num_labels, bias=False), pooled at the last token;
// GenericForTokenClassification = <X>Model + dropout + score nn.Linear(hidden_size, num_labels)).
// Returns the causal LM's name for a classification name, else "".
std::string CausalLmOfClassifier(const std::string& name) {
  for (const char* suffix : {"ForSequenceClassification", "ForTokenClassification"}) {
    const std::string sfx = suffix;
    if (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
      return name.substr(0, name.size() - sfx.size()) + "ForCausalLM";
    }
  }
  return "";
}

const Arch& FindArch(const nlohmann::json& j, const std::string& file) {
  StrictReader r(j, file);
  std::string key = r.Has("architectures") ? "architectures" : "model_type";
  const nlohmann::json& v = r.RequiredValue(key);
  bool by_arch = key == "architectures";
  const nlohmann::json& name = by_arch && v.is_array() && !v.empty() ? v[0] : v;
  if (!name.is_string()) {
    throw InputError(r.Where(key) + ": expected " +
                     (by_arch ? "a non-empty array of strings" : "a string") + ", got " +
                     Describe(v));
  }
  std::vector<std::string> candidates;
  const std::string causal = by_arch ? CausalLmOfClassifier(name.get<std::string>()) : "";
  for (const Arch& a : kArchs) {
    if (name.get<std::string>() == (by_arch ? a.name : a.model_type)) return a;
    if (!causal.empty() && causal == a.name) return a;
    candidates.push_back(by_arch ? a.name : a.model_type);
  }
  std::string hint = ClosestName(name.get<std::string>(), candidates);
  throw InputError(r.Where(key) + (by_arch ? "/0" : "") + ": unsupported architecture " +
                   Describe(name) + DidYouMean(hint) +
                   "; supported: " + SupportedList() +
                   " (and a ForCausalLM's ForSequenceClassification / ForTokenClassification)");
}

}  // namespace

bool LooksLikeHfConfig(const nlohmann::json& j) {
  return j.is_object() && !j.contains("schema") &&
         (j.contains("architectures") || j.contains("model_type"));
}

const std::vector<std::string>& SupportedHfArchitectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Arch& a : kArchs) {
      if (!Refused(a)) v.push_back(a.name);
    }
    return v;
  }();
  return names;
}

ModelSpec ImportHfConfig(const nlohmann::json& j, const std::string& file,
                         std::vector<std::string>* warnings) {
  const Arch& arch = FindArch(j, file);
  HfReader h(j, file);
  h.Skip(SkippedKeys(arch.family));
  ModelSpec s;
  if (arch.family == Family::kGpt2) {
    ReadGpt2(&h, &s);
  } else if (arch.family == Family::kGptNeox) {
    ReadGptNeox(&h, &s);
  } else if (arch.family == Family::kGemma) {
    ReadGemma1(&h, &s);
  } else if (arch.family == Family::kGemma2 || arch.family == Family::kGemma3) {
    ReadGemma(&h, arch.family, &s);
  } else if (arch.family == Family::kGemma3Multimodal) {
    // The language model is text_config, a Gemma3TextConfig; vision_config the SigLIP tower.
    HfReader t(NestedObject(j, file, "text_config", "Gemma3TextConfig"), file, "/text_config");
    t.Skip(kCommonSkipped);
    t.Skip(kGemmaSkipped);
    h.Skip({"text_config"});
    ReadGemma(&t, Family::kGemma3, &s);
    t.Finish(arch.name, warnings);
    ReadGemma3Vision(j, file, &h, &s, warnings);
  } else if (arch.family == Family::kQwen2Vl || arch.family == Family::kQwen25Vl ||
             arch.family == Family::kQwen3Vl || arch.family == Family::kQwen3VlMoe) {
    ReadQwenVl(j, file, arch.family, &h, &s, warnings);
  } else if (arch.family == Family::kDeepseekV2 || arch.family == Family::kDeepseekV3) {
    ReadDeepseek(&h, arch.family, &s, warnings);
  } else {
    ReadRotaryDecoder(&h, arch.family, &s);
    if (arch.family == Family::kGptOss) ReadGptOss(&h, &s, warnings);
  }
  h.Finish(arch.name, warnings);
  auto name = j.find("_name_or_path");
  s.name = (name != j.end() && name->is_string() && !name->get<std::string>().empty())
               ? name->get<std::string>()
               : file;
  s.source = "Hugging Face config.json " + file + " (" + arch.name + ")";
  s.hf_architecture = arch.name;
  // A classifier's score head replaces the LM head (CausalLmOfClassifier). Estimated as the value
  // head verl builds on any checkpoint (AutoModelForTokenClassification with num_labels 1,
  // fsdp_workers.py RewardModelWorker and CriticWorker), whatever labels the file names.
  if (const nlohmann::json& a = j.value("architectures", nlohmann::json::array());
      a.is_array() && !a.empty() && a[0].is_string() &&
      !CausalLmOfClassifier(a[0].get<std::string>()).empty()) {
    s.value_head = true;
    s.source = "Hugging Face config.json " + file + " (" + a[0].get<std::string>() + ": " +
               arch.name + "'s decoder with a score head)";
  }
  s.FillDefaults();
  s.Validate(file + " (as shardtune.model)");
  return s;
}

ModelSpec ReadHfConfigFile(const std::string& path, std::vector<std::string>* warnings) {
  return ImportHfConfig(ReadJsonFile(path), path, warnings);
}

}  // namespace shardtune::model
