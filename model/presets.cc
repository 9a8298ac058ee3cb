// The preset table: shapes copied from each model's Hugging Face config.json (or paper), with the
// parameter count the model's publisher or HF num_parameters() gives. presets_test checks both.
#include "model/presets.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "model/errors.h"
#include "model/hf_config.h"
#include "model/model_spec_json.h"
#include "model/strict_json.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

// A decoder shape: L layers, hidden H, a heads (kv heads for GQA), MLP inner size F.
// Defaults are Llama's (RMSNorm, SwiGLU, rotary, no biases, untied).
ModelSpec Shape(int layers, int64_t hidden, int heads, int kv_heads, int64_t ffn) {
  ModelSpec s;
  s.num_layers = layers;
  s.hidden = hidden;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.ffn_hidden = ffn;
  return s;
}

// GPT-2 family (modeling_gpt2.py): LayerNorm with bias, GELU MLP with F = 4H, learned positions,
// biases on every Linear (Conv1D), LM head tied to wte.
ModelSpec Gpt2Shape(int layers, int64_t hidden, int heads, int64_t vocab, int64_t positions) {
  ModelSpec s = Shape(layers, hidden, heads, heads, 4 * hidden);
  s.vocab_size = vocab;
  s.max_seq_len = positions;
  s.norm = NormKind::kLayerNorm;
  s.norm_bias = true;
  s.mlp = MlpKind::kGelu;
  s.positions = PositionKind::kLearned;
  s.qkv_bias = s.attn_out_bias = s.mlp_bias = true;
  s.tied_embeddings = true;
  return s;
}

ModelSpec WithVocab(ModelSpec s, int64_t vocab, int64_t max_seq_len) {
  s.vocab_size = vocab;
  s.max_seq_len = max_seq_len;
  return s;
}

// The rotary base and the norms' epsilon of the published config.json (rope_theta,
// rms_norm_eps); the defaults (10000, 1e-5) are Llama 2's, GPT-2's and Mistral-7B-v0.1's.
ModelSpec Rope(ModelSpec s, double theta, double eps) {
  s.rope_theta = theta;
  s.norm_eps = eps;
  return s;
}

// Gemma's layout in every generation (modeling_gemma.py, modeling_gemma2.py, modeling_gemma3.py):
// RMSNorm with (1 + w) in fp32, the GeGLU MLP, embeddings x sqrt(H), a tied head, rms_norm_eps
// 1e-6, rope_theta 10000 (Gemma 3 changes it). `placement`: Gemma 1's pre-norm, or Gemma 2 and
// 3's sandwich norms.
ModelSpec GemmaShape(int layers, int64_t hidden, int heads, int kv, int64_t head_dim, int64_t ffn,
                     int64_t vocab, int64_t positions, NormPlacement placement) {
  ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, kv, ffn), vocab, positions), 10000.0,
                     1e-6);
  s.head_dim = head_dim;
  s.tied_embeddings = true;
  s.norm_placement = placement;
  s.norm_weight_fp32 = s.norm_unit_offset = true;
  s.gelu_gate = true;
  s.scaled_embedding = true;
  return s;
}

// Gemma 2 (Gemma2ForCausalLM): heads of 256, vocabulary 256,000, 8,192 positions, final and
// attention logit soft-capping (final_logit_softcapping 30, attn_logit_softcapping 50: eager
// attention only), attention scaled by query_pre_attn_scalar 256, 4,096-token sliding windows on
// alternate layers.
ModelSpec Gemma2Shape(int layers, int64_t hidden, int heads, int kv, int64_t ffn) {
  ModelSpec s = GemmaShape(layers, hidden, heads, kv, 256, ffn, 256000, 8192,
                           NormPlacement::kSandwich);
  s.final_logit_softcap = 30.0;
  s.attn_logit_softcap = 50.0;
  s.query_pre_attn_scalar = 256;
  s.sliding_window = 4096;
  s.full_attention_every = 2;
  return s;
}

// Llama 3.1 and 3.2's config.json rope_scaling: {"rope_type": "llama3", "factor": 8.0 (3.1) or
// 32.0 (3.2), "low_freq_factor": 1.0, "high_freq_factor": 4.0,
// "original_max_position_embeddings": 8192}, with rope_theta 500000 and rms_norm_eps 1e-5.
ModelSpec Llama3Scaled(ModelSpec s, double factor) {
  s = Rope(s, 500000.0, 1e-5);
  s.rope_scaling.type = "llama3";
  s.rope_scaling.factor = factor;
  s.rope_scaling.low_freq_factor = 1.0;
  s.rope_scaling.high_freq_factor = 4.0;
  s.rope_scaling.original_max_position_embeddings = 8192;
  return s;
}

// The transformers class of each preset's config.json ("architectures"[0]), by name prefix; the
// tiny test presets and gpt3-175b (no HF checkpoint) have none.
std::string ArchitectureOf(const std::string& name) {
  static const std::pair<const char*, const char*> kTable[] = {
      // The VL models before their text families' prefixes.
      {"qwen2-vl-", "Qwen2VLForConditionalGeneration"},
      {"qwen2.5-vl-", "Qwen2_5_VLForConditionalGeneration"},
      {"qwen3-vl-", "Qwen3VLForConditionalGeneration"},
      {"gpt2", "GPT2LMHeadModel"},          {"llama", "LlamaForCausalLM"},
      {"mistral-", "MistralForCausalLM"},   {"qwen2.5-", "Qwen2ForCausalLM"},
      {"qwen2-", "Qwen2ForCausalLM"},       {"deepseek-llm-", "LlamaForCausalLM"},
      // The MoEs before the dense Qwen3 family's prefix: the first matching prefix wins.
      {"qwen3-30b", "Qwen3MoeForCausalLM"}, {"qwen3-235b", "Qwen3MoeForCausalLM"},
      {"qwen3-", "Qwen3ForCausalLM"},       {"mixtral", "MixtralForCausalLM"},
      {"phi-4", "Phi3ForCausalLM"},         {"olmo2", "Olmo2ForCausalLM"},
      {"gemma2", "Gemma2ForCausalLM"},      {"gemma3", "Gemma3ForConditionalGeneration"},
      {"gemma-", "GemmaForCausalLM"},       {"gpt-oss", "GptOssForCausalLM"},
      {"deepseek-v3", "DeepseekV3ForCausalLM"}, {"deepseek-v2", "DeepseekV2ForCausalLM"},
      {"deepseek-r1-distill-qwen-", "Qwen2ForCausalLM"},
      {"deepseek-coder-", "LlamaForCausalLM"}, {"seed-oss-", "SeedOssForCausalLM"}};
  for (const auto& [prefix, arch] : kTable) {
    if (name.rfind(prefix, 0) == 0) return arch;
  }
  return "";
}

PresetInfo Preset(const std::string& name, ModelSpec spec, int64_t published,
                  const std::string& source) {
  spec.name = name;
  spec.source = source;
  spec.hf_architecture = ArchitectureOf(name);
  spec.FillDefaults();
  return PresetInfo{name, std::move(spec), published, source};
}

std::string HfConfig(const std::string& repo) {
  return "https://huggingface.co/" + repo + "/blob/main/config.json";
}

void AddGpt(std::vector<PresetInfo>* p) {
  const std::string counts = "; count: HF GPT2LMHeadModel num_parameters()";
  p->push_back(Preset("gpt2", Gpt2Shape(12, 768, 12, 50257, 1024), 124'439'808,
                      HfConfig("openai-community/gpt2") + counts));
  p->push_back(Preset("gpt2-medium", Gpt2Shape(24, 1024, 16, 50257, 1024), 354'823'168,
                      HfConfig("openai-community/gpt2-medium") + counts));
  p->push_back(Preset("gpt2-large", Gpt2Shape(36, 1280, 20, 50257, 1024), 774'030'080,
                      HfConfig("openai-community/gpt2-large") + counts));
  p->push_back(Preset("gpt2-xl", Gpt2Shape(48, 1600, 25, 50257, 1024), 1'557'611'200,
                      HfConfig("openai-community/gpt2-xl") + counts));
  // Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1: n_layers 96,
  // d_model 12288, n_heads 96, d_head 128, n_ctx 2048, GPT-2's BPE vocabulary and layout. The
  // paper gives "175.0B" only (its alternating sparse attention has no parameters).
  p->push_back(Preset("gpt3-175b", Gpt2Shape(96, 12288, 96, 50257, 2048), 0,
                      "Brown et al. 2020, arXiv:2005.14165, Table 2.1 (GPT-2 layout)"));
}

void AddLlama(std::vector<PresetInfo>* p) {
  const std::string counts = "; count: HF LlamaForCausalLM num_parameters()";
  p->push_back(Preset("llama2-7b", WithVocab(Shape(32, 4096, 32, 32, 11008), 32000, 4096),
                      6'738'415'616, HfConfig("meta-llama/Llama-2-7b-hf") + counts));
  p->push_back(Preset("llama2-13b", WithVocab(Shape(40, 5120, 40, 40, 13824), 32000, 4096),
                      13'015'864'320, HfConfig("meta-llama/Llama-2-13b-hf") + counts));
  p->push_back(Preset("llama2-70b", WithVocab(Shape(80, 8192, 64, 8, 28672), 32000, 4096),
                      68'976'648'192, HfConfig("meta-llama/Llama-2-70b-hf") + counts));
  p->push_back(Preset("llama3-8b",
                      Rope(WithVocab(Shape(32, 4096, 32, 8, 14336), 128256, 8192), 500000.0, 1e-5),
                      8'030'261'248, HfConfig("meta-llama/Meta-Llama-3-8B") + counts));
  // Llama 3.1 8B: Llama 3 8B's shapes with 131,072 positions (rope_scaling llama3), the model
  // long-context users train (verl / ROLL Ulysses examples).
  p->push_back(Preset("llama3.1-8b",
                      Llama3Scaled(WithVocab(Shape(32, 4096, 32, 8, 14336), 128256, 131072), 8.0),
                      8'030'261'248, HfConfig("meta-llama/Llama-3.1-8B") + counts));
  p->push_back(Preset("llama3-70b",
                      Rope(WithVocab(Shape(80, 8192, 64, 8, 28672), 128256, 8192), 500000.0, 1e-5),
                      70'553'706'496, HfConfig("meta-llama/Meta-Llama-3-70B") + counts));
  p->push_back(Preset(
      "llama3-405b", Llama3Scaled(WithVocab(Shape(126, 16384, 128, 8, 53248), 128256, 131072), 8.0),
      405'853'388'800, HfConfig("meta-llama/Llama-3.1-405B") + counts));
  ModelSpec l1b = Llama3Scaled(WithVocab(Shape(16, 2048, 32, 8, 8192), 128256, 131072), 32.0);
  l1b.head_dim = 64;
  l1b.tied_embeddings = true;
  p->push_back(
      Preset("llama3.2-1b", l1b, 1'235'814'400, HfConfig("meta-llama/Llama-3.2-1B") + counts));
  ModelSpec l3b = Llama3Scaled(WithVocab(Shape(28, 3072, 24, 8, 8192), 128256, 131072), 32.0);
  l3b.head_dim = 128;
  l3b.tied_embeddings = true;
  // The safetensors hold 64 more values (rope frequency factors), which are not parameters.
  p->push_back(Preset("llama3.2-3b", l3b, 3'212'749'824,
                      HfConfig("meta-llama/Llama-3.2-3B") + counts));
}

void AddOthers(std::vector<PresetInfo>* p) {
  p->push_back(Preset("mistral-7b", WithVocab(Shape(32, 4096, 32, 8, 14336), 32000, 32768),
                      7'241'732'096,
                      HfConfig("mistralai/Mistral-7B-v0.1") + "; count: HF num_parameters()"));
  // Qwen2Attention: q_proj, k_proj, v_proj with bias=True; o_proj without.
  ModelSpec qwen25 = Rope(WithVocab(Shape(28, 3584, 28, 4, 18944), 152064, 131072), 1e6, 1e-6);
  qwen25.qkv_bias = true;
  p->push_back(Preset("qwen2.5-7b", qwen25, 7'615'616'512,
                      HfConfig("Qwen/Qwen2.5-7B") + "; count: HF num_parameters()"));
  // The rest of the Qwen2 / Qwen2.5 family (Qwen2ForCausalLM, as qwen2.5-7b: q/k/v biases,
  // rope_theta 1e6, rms_norm_eps 1e-6), the base models of most verl and ROLL examples; the small
  // ones tie the LM head to the embedding (tie_word_embeddings true).
  auto qwen2 = [](int layers, int64_t hidden, int heads, int kv, int64_t ffn, int64_t vocab,
                  int64_t positions, bool tied) {
    ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, kv, ffn), vocab, positions), 1e6, 1e-6);
    s.qkv_bias = true;
    s.tied_embeddings = tied;
    return s;
  };
  const std::string hf_count = "; count: HF num_parameters()";
  p->push_back(Preset("qwen2-7b", qwen2(28, 3584, 28, 4, 18944, 152064, 131072, false),
                      7'615'616'512, HfConfig("Qwen/Qwen2-7B") + hf_count));
  p->push_back(Preset("qwen2-72b", qwen2(80, 8192, 64, 8, 29568, 152064, 131072, false),
                      72'706'203'648, HfConfig("Qwen/Qwen2-72B") + hf_count));
  p->push_back(Preset("qwen2.5-0.5b", qwen2(24, 896, 14, 2, 4864, 151936, 32768, true),
                      494'032'768, HfConfig("Qwen/Qwen2.5-0.5B") + hf_count));
  p->push_back(Preset("qwen2.5-1.5b", qwen2(28, 1536, 12, 2, 8960, 151936, 131072, true),
                      1'543'714'304, HfConfig("Qwen/Qwen2.5-1.5B") + hf_count));
  p->push_back(Preset("qwen2.5-3b", qwen2(36, 2048, 16, 2, 11008, 151936, 32768, true),
                      3'085'938'688, HfConfig("Qwen/Qwen2.5-3B") + hf_count));
  p->push_back(Preset("qwen2.5-14b", qwen2(48, 5120, 40, 8, 13824, 152064, 131072, false),
                      14'770'033'664, HfConfig("Qwen/Qwen2.5-14B") + hf_count));
  p->push_back(Preset("qwen2.5-32b", qwen2(64, 5120, 40, 8, 27648, 152064, 131072, false),
                      32'763'876'352, HfConfig("Qwen/Qwen2.5-32B") + hf_count));
  p->push_back(Preset("qwen2.5-72b", qwen2(80, 8192, 64, 8, 29568, 152064, 131072, false),
                      72'706'203'648, HfConfig("Qwen/Qwen2.5-72B") + hf_count));
  // deepseek-llm-7b-base / -chat (verl's PPO examples): LlamaForCausalLM, multi-head attention
  // (num_key_value_heads 32), 30 layers, vocab 102400, rope_theta 10000, rms_norm_eps 1e-6.
  p->push_back(Preset("deepseek-llm-7b",
                      Rope(WithVocab(Shape(30, 4096, 32, 32, 11008), 102400, 4096), 10000.0, 1e-6),
                      6'910'365'696, HfConfig("deepseek-ai/deepseek-llm-7b-base") + hf_count));
  // Qwen3Attention: q_norm / k_norm RMSNorm(head_dim); attention_bias false.
  ModelSpec qwen3 = Rope(WithVocab(Shape(36, 4096, 32, 8, 12288), 151936, 40960), 1e6, 1e-6);
  qwen3.head_dim = 128;
  qwen3.qk_norm = true;
  p->push_back(Preset("qwen3-8b", qwen3, 8'190'735'360,
                      HfConfig("Qwen/Qwen3-8B") + "; count: HF num_parameters()"));
  // The rest of the dense Qwen3 family (Qwen3ForCausalLM as qwen3-8b: head_dim 128 whatever
  // hidden / heads is, q/k norms, 8 kv heads, rope_theta 1e6, rms_norm_eps 1e-6, 40,960
  // positions); the three small ones tie the LM head (tie_word_embeddings true). Counts: HF
  // num_parameters(), which keras-hub's qwen3_presets.py lists for each size; the 4B, 14B and 32B
  // bf16 safetensors indexes agree (metadata.total_size / 2). The post-trained 0.6B and 1.7B
  // checkpoints also store lm_head.weight (V x H more values in the files), one parameter with
  // the embedding to transformers.
  auto qwen3_dense = [](int layers, int64_t hidden, int heads, int64_t ffn, bool tied) {
    ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, 8, ffn), 151936, 40960), 1e6, 1e-6);
    s.head_dim = 128;
    s.qk_norm = true;
    s.tied_embeddings = tied;
    return s;
  };
  const std::string keras_count = "; count: HF num_parameters() (keras-hub qwen3_presets.py)";
  const std::string index_too = " = safetensors index metadata.total_size / 2 (bf16)";
  p->push_back(Preset("qwen3-0.6b", qwen3_dense(28, 1024, 16, 3072, true), 596'049'920,
                      HfConfig("Qwen/Qwen3-0.6B") + keras_count));
  p->push_back(Preset("qwen3-1.7b", qwen3_dense(28, 2048, 16, 6144, true), 1'720'574'976,
                      HfConfig("Qwen/Qwen3-1.7B") + keras_count));
  p->push_back(Preset("qwen3-4b", qwen3_dense(36, 2560, 32, 9728, true), 4'022'468'096,
                      HfConfig("Qwen/Qwen3-4B") + keras_count + index_too));
  p->push_back(Preset("qwen3-14b", qwen3_dense(40, 5120, 40, 17408, false), 14'768'307'200,
                      HfConfig("Qwen/Qwen3-14B") + keras_count + index_too));
  p->push_back(Preset("qwen3-32b", qwen3_dense(64, 5120, 64, 25600, false), 32'762'123'264,
                      HfConfig("Qwen/Qwen3-32B") + keras_count + index_too));
  ModelSpec mixtral = Rope(WithVocab(Shape(32, 4096, 32, 8, 14336), 32000, 32768), 1e6, 1e-5);
  mixtral.moe.num_experts = 8;  // num_local_experts
  mixtral.moe.top_k = 2;        // num_experts_per_tok
  p->push_back(Preset("mixtral-8x7b", mixtral, 46'702'792'704,
                      HfConfig("mistralai/Mixtral-8x7B-v0.1") + "; count: HF num_parameters()"));
}

// The 2025-2026 fine-tuning set (transformers modeling_qwen3_moe.py, modeling_phi3.py,
// modeling_olmo2.py), with the exact counts of the published checkpoints (the safetensors
// index's metadata.total_size / 2 bytes for the bf16 Qwen3 MoEs; HF num_parameters() else).
void Add2026(std::vector<PresetInfo>* p) {
  const std::string index = "; count: safetensors index metadata.total_size / 2 (bf16)";
  // Qwen3MoeSparseMoeBlock in every layer (decoder_sparse_step 1, mlp_only_layers []): 128
  // routed experts of moe_intermediate_size, top 8, no shared expert; Qwen3's qk norms.
  auto qwen3_moe = [](int layers, int64_t hidden, int heads, int64_t expert_ffn) {
    ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, 4, 6144), 151936, 40960), 1e6, 1e-6);
    s.head_dim = 128;
    s.qk_norm = true;
    s.moe.num_experts = 128;
    s.moe.top_k = 8;
    s.moe.expert_ffn_hidden = expert_ffn;
    return s;
  };
  ModelSpec a3b = qwen3_moe(48, 2048, 32, 768);
  p->push_back(Preset("qwen3-30b-a3b", a3b, 30'532'122'624, HfConfig("Qwen/Qwen3-30B-A3B") + index));
  ModelSpec a22b = qwen3_moe(94, 4096, 64, 1536);
  a22b.ffn_hidden = 12288;  // intermediate_size (the dense MLP of mlp_only_layers; none here)
  p->push_back(
      Preset("qwen3-235b-a22b", a22b, 235'093'634'560, HfConfig("Qwen/Qwen3-235B-A22B") + index));
  // Phi3ForCausalLM: fused qkv_proj and gate_up_proj, rope_theta 250000, 16k positions.
  ModelSpec phi4 = Rope(WithVocab(Shape(40, 5120, 40, 10, 17920), 100352, 16384), 250000.0, 1e-5);
  phi4.fused_qkv = phi4.fused_gate_up = true;
  p->push_back(Preset("phi-4", phi4, 14'659'507'200,
                      HfConfig("microsoft/phi-4") + "; count: HF num_parameters()"));
  // Olmo2ForCausalLM: post-norms, q/k norms over the whole projections, fp32 weight multiply.
  auto olmo2 = [](int layers, int64_t hidden, int heads, int64_t ffn) {
    ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, heads, ffn), 100352, 4096), 500000.0,
                       1e-6);
    s.qk_norm = s.qk_norm_full_width = true;
    s.norm_placement = NormPlacement::kPost;
    s.norm_weight_fp32 = true;
    return s;
  };
  const std::string olmo_count = "; count: HF num_parameters() of the 1124 release";
  p->push_back(Preset("olmo2-7b", olmo2(32, 4096, 32, 11008), 7'298'617'344,
                      HfConfig("allenai/OLMo-2-1124-7B") + olmo_count));
  p->push_back(Preset("olmo2-13b", olmo2(40, 5120, 40, 13824), 13'716'198'400,
                      HfConfig("allenai/OLMo-2-1124-13B") + olmo_count));
  p->push_back(Preset("gemma2-9b", Gemma2Shape(42, 3584, 16, 8, 14336), 9'241'705'984,
                      HfConfig("google/gemma-2-9b") + "; count: HF num_parameters()"));
  // Gemma 3 27B (Gemma3ForConditionalGeneration): its text_config, what it lists plus
  // Gemma3TextConfig's defaults, and its SigLIP tower (vision_config, mm_tokens_per_image 256).
  ModelSpec g3 = GemmaShape(62, 5376, 32, 16, 128, 21504, 262208, 131072, NormPlacement::kSandwich);
  g3.qk_norm = true;
  g3.rope_theta = 1e6;
  g3.rope_scaling.type = "linear";
  g3.rope_scaling.factor = 8.0;
  g3.rope_local_theta = 10000.0;
  g3.query_pre_attn_scalar = 168;
  g3.sliding_window = 1024;
  g3.full_attention_every = 6;
  g3.vision.kind = VisionKind::kSiglip;
  g3.vision.depth = 27;
  g3.vision.hidden = 1152;
  g3.vision.num_heads = 16;
  g3.vision.intermediate = 4304;
  g3.vision.image_size = 896;
  g3.vision.patch_size = 14;
  g3.vision.mm_tokens_per_image = 256;
  g3.vision.out_hidden = 5376;
  // GptOssForCausalLM: 3-D experts with biases and the clamped SwiGLU, a router with a bias,
  // attention biases and sinks, 128-token sliding windows on alternate layers, YaRN x32. The
  // published experts are MXFP4; training dequantizes them (the estimate is for bf16).
  auto gpt_oss = [](int layers, int experts) {
    ModelSpec s = Rope(WithVocab(Shape(layers, 2880, 64, 8, 2880), 201088, 131072), 150000.0, 1e-5);
    s.head_dim = 64;
    s.qkv_bias = s.attn_out_bias = true;
    s.attention_sinks = true;
    s.norm_weight_fp32 = true;
    s.moe.num_experts = experts;
    s.moe.top_k = 4;
    s.moe.expert_ffn_hidden = 2880;
    s.moe.gpt_oss_experts = true;
    s.sliding_window = 128;
    s.full_attention_every = 2;
    s.rope_scaling.type = "yarn";  // rope_scaling {"rope_type": "yarn", "factor": 32, ...}
    s.rope_scaling.factor = 32.0;
    s.rope_scaling.original_max_position_embeddings = 4096;
    s.rope_scaling.original_given = true;
    s.rope_scaling.truncate = false;
    return s;
  };
  const std::string oss_count = "; count: HF num_parameters() (bf16, experts dequantized)";
  p->push_back(Preset("gpt-oss-20b", gpt_oss(24, 32), 20'914'757'184,
                      HfConfig("openai/gpt-oss-20b") + oss_count));
  p->push_back(Preset("gpt-oss-120b", gpt_oss(36, 128), 116'829'156'672,
                      HfConfig("openai/gpt-oss-120b") + oss_count));
  p->push_back(Preset("gemma3-27b", g3, 27'432'406'640,
                      HfConfig("google/gemma-3-27b-pt") +
                          "; count: the safetensors' total (SigLIP tower 423,060,336)"));
  // DeepSeek (modeling_deepseek_v3.py): multi-head latent attention, first_k_dense_replace dense
  // blocks then the MoE with one shared MLP, the DeepSeek router. Counts: HF num_parameters() of
  // DeepseekV3ForCausalLM / DeepseekV2ForCausalLM (the e_score_correction_bias buffers and V3's
  // multi-token-prediction layer 61 are not parameters of it); DeepSeek publishes 671B (V3, 685B
  // with the MTP module) and 15.7B (V2-Lite).
  auto deepseek = [](int layers, int64_t hidden, int heads, int64_t ffn, int64_t vocab,
                     int experts, int top_k, int64_t expert_ffn, int shared, int dense) {
    ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, heads, ffn), vocab, 163840), 10000.0,
                       1e-6);
    s.mla.kv_lora_rank = 512;
    s.mla.qk_nope_head_dim = 128;
    s.mla.qk_rope_head_dim = 64;
    s.mla.v_head_dim = 128;
    s.head_dim = 192;  // qk_nope_head_dim + qk_rope_head_dim
    s.moe.num_experts = experts;
    s.moe.top_k = top_k;
    s.moe.expert_ffn_hidden = expert_ffn;
    s.moe.num_shared_experts = 1;
    s.moe.shared_expert_ffn_hidden = shared * expert_ffn;
    s.moe.first_dense_layers = dense;
    s.moe.deepseek_router = true;
    // rope_scaling {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
    // "original_max_position_embeddings": 4096, "mscale": m, "mscale_all_dim": m} in both (V3: m
    // 1.0, V2-Lite: 0.707).
    s.rope_scaling.type = "yarn";
    s.rope_scaling.factor = 40;
    s.rope_scaling.original_max_position_embeddings = 4096;
    s.rope_scaling.original_given = true;
    s.rope_scaling.mscale = s.rope_scaling.mscale_all_dim = 1.0;
    return s;
  };
  ModelSpec v3 = deepseek(61, 7168, 128, 18432, 129280, 256, 8, 2048, 1, 3);
  v3.mla.q_lora_rank = 1536;
  v3.moe.norm_topk_prob = true;
  v3.moe.n_group = 8;
  v3.moe.topk_group = 4;
  v3.moe.routed_scaling_factor = 2.5;
  v3.moe.sigmoid_scores = true;  // scoring_func "sigmoid", topk_method "noaux_tc"
  v3.moe.topk_method = "noaux_tc";
  p->push_back(Preset("deepseek-v3", v3, 671'026'404'352,
                      HfConfig("deepseek-ai/DeepSeek-V3") + "; count: HF num_parameters()"));
  // V2-Lite: no q LoRA (q_proj directly), 2 shared experts, greedy softmax routing, one dense
  // block.
  ModelSpec v2_lite = deepseek(27, 2048, 16, 10944, 102400, 64, 6, 1408, 2, 1);
  v2_lite.moe.norm_topk_prob = false;
  v2_lite.rope_scaling.mscale = v2_lite.rope_scaling.mscale_all_dim = 0.707;
  p->push_back(Preset("deepseek-v2-lite", v2_lite, 15'706'484'224,
                      HfConfig("deepseek-ai/DeepSeek-V2-Lite") + "; count: HF num_parameters()"));
}

// The models verl's and ROLL's example configs and recipes name (model.path, pretrain) that the
// families above do not cover: the math / code / R1-distilled Qwen2.5 checkpoints RL recipes
// start from, DeepSeek-Coder, Mistral NeMo, Gemma 1 and Gemma 2 2B (verl's SFT and PPO examples)
// and Seed-OSS. Shapes from each config.json; counts as each comment says.
void AddRecipeModels(std::vector<PresetInfo>* p) {
  auto qwen2 = [](int layers, int64_t hidden, int heads, int kv, int64_t ffn, int64_t vocab,
                  int64_t positions, bool tied, double theta, double eps) {
    ModelSpec s = WithVocab(Shape(layers, hidden, heads, kv, ffn), vocab, positions);
    s = Rope(s, theta, eps);
    s.qkv_bias = true;  // Qwen2Attention: q/k/v bias=True, o_proj without
    s.tied_embeddings = tied;
    return s;
  };
  // Qwen2.5-Math (config.json: rope_theta 10000, max_position_embeddings 4096, the 1.5B tied as
  // Qwen2.5-1.5B, the 7B untied with Qwen2.5-7B's vocabulary of 152,064). Counts: keras-hub's
  // qwen_presets.py (qwen2.5_math_1.5b_en, qwen2.5_math_7b_en), Qwen2.5-1.5B's and -7B's.
  const std::string keras = "; count: HF num_parameters() (keras-hub qwen_presets.py)";
  p->push_back(Preset("qwen2.5-math-1.5b",
                      qwen2(28, 1536, 12, 2, 8960, 151936, 4096, true, 10000.0, 1e-6),
                      1'543'714'304, HfConfig("Qwen/Qwen2.5-Math-1.5B") + keras));
  p->push_back(Preset("qwen2.5-math-7b",
                      qwen2(28, 3584, 28, 4, 18944, 152064, 4096, false, 10000.0, 1e-6),
                      7'615'616'512, HfConfig("Qwen/Qwen2.5-Math-7B") + keras));
  // Qwen2.5-Coder: Qwen2.5-7B's and -14B's shapes with 32,768 positions (verl's 14B GRPO tuning
  // example trains Qwen2.5-Coder-14B-Instruct), the counts Qwen2.5-7B's / -14B's.
  const std::string gguf = "; count: llama.cpp n_params of the GGUF conversion";
  p->push_back(Preset("qwen2.5-coder-7b",
                      qwen2(28, 3584, 28, 4, 18944, 152064, 32768, false, 1e6, 1e-6),
                      7'615'616'512,
                      HfConfig("Qwen/Qwen2.5-Coder-7B") +
                          "; count: computed from config.json shapes (no published exact figure "
                          "found; the card's 7.61B)"));
  // rms_norm_eps: Qwen2.5-14B's 1e-5 (the Coder-14B config.json itself not seen).
  p->push_back(Preset("qwen2.5-coder-14b",
                      qwen2(48, 5120, 40, 8, 13824, 152064, 32768, false, 1e6, 1e-5),
                      14'770'033'664,
                      HfConfig("Qwen/Qwen2.5-Coder-14B") + gguf + " (Coder-14B-Instruct)"));
  // DeepSeek-R1-Distill-Qwen (Qwen2ForCausalLM): the 1.5B and 7B from Qwen2.5-Math (rope_theta
  // 10000) with 131,072 positions, the 1.5B UNTIED (tie_word_embeddings false, unlike
  // Qwen2.5-Math-1.5B); the 14B and 32B from Qwen2.5-14B / -32B (rope_theta 1e6 and
  // rms_norm_eps 1e-5 as those; the distills' own config.json not seen for these two keys).
  p->push_back(Preset("deepseek-r1-distill-qwen-1.5b",
                      qwen2(28, 1536, 12, 2, 8960, 151936, 131072, false, 10000.0, 1e-6),
                      1'777'088'000,
                      HfConfig("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B") +
                          "; count: the checkpoint's, as public training and pruning scripts "
                          "record it (339 tensors: the LM head is untied)"));
  p->push_back(Preset("deepseek-r1-distill-qwen-7b",
                      qwen2(28, 3584, 28, 4, 18944, 152064, 131072, false, 10000.0, 1e-6),
                      7'615'616'512,
                      HfConfig("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") +
                          "; count: the GGUF conversion's general.parameter_count (ollama "
                          "deepseek-r1 7.6B)"));
  p->push_back(Preset("deepseek-r1-distill-qwen-14b",
                      qwen2(48, 5120, 40, 8, 13824, 152064, 131072, false, 1e6, 1e-5),
                      14'770'033'664,
                      HfConfig("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B") +
                          "; count: llama.cpp n_params of the GGUF conversion (ollama "
                          "deepseek-r1:14b)"));
  p->push_back(Preset("deepseek-r1-distill-qwen-32b",
                      qwen2(64, 5120, 40, 8, 27648, 152064, 131072, false, 1e6, 1e-5),
                      32'763'876'352,
                      HfConfig("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B") +
                          "; count: the Hub API's safetensors.total (BF16)"));
  // deepseek-coder-6.7b-instruct (verl's GSM8K SFT example): LlamaForCausalLM, multi-head
  // attention, vocab 32,256, 16,384 positions by linear RoPE scaling (rope_scaling {"type":
  // "linear", "factor": 4.0}, rope_theta 100000, rms_norm_eps 1e-6, as the DeepSeek-Coder
  // paper's section 3.5 and the 1.3B sibling's config.json give them).
  ModelSpec coder = Rope(WithVocab(Shape(32, 4096, 32, 32, 11008), 32256, 16384), 100000.0, 1e-6);
  coder.rope_scaling.type = "linear";
  coder.rope_scaling.factor = 4.0;
  p->push_back(Preset("deepseek-coder-6.7b", coder, 6'740'512'768,
                      HfConfig("deepseek-ai/deepseek-coder-6.7b-instruct") +
                          "; count: the safetensors' total (model catalogues' total_parameters)"));
  // Mistral-Nemo-Instruct-2407 (verl's GRPO example with a Skywork reward model):
  // MistralForCausalLM with head_dim 128 (32 heads x 128 = 4096 != hidden 5120), 8 kv heads,
  // vocab 131,072 (Tekken), rope_theta 1e6, 1,024,000 positions, no sliding window.
  ModelSpec nemo = Rope(WithVocab(Shape(40, 5120, 32, 8, 14336), 131072, 1024000), 1e6, 1e-5);
  nemo.head_dim = 128;
  p->push_back(Preset("mistral-nemo-12b", nemo, 12'247'782'400,
                      HfConfig("mistralai/Mistral-Nemo-Instruct-2407") +
                          "; count: llama.cpp n_params of the GGUF conversion (12.25B)"));
  // Gemma 1 (GemmaForCausalLM, modeling_gemma.py; verl's SFT examples train gemma-2b-it and
  // gemma-1.1-7b-it): Llama's pre-norm layout with GemmaRMSNorm ((x_hat * (1 + w.float())) in
  // fp32), the GeGLU MLP (gelu_pytorch_tanh: transformers 4.x ignores the configs' legacy
  // hidden_act "gelu" for hidden_activation, default gelu_pytorch_tanh), embeddings times
  // sqrt(H), tied LM head, head_dim 256, attention scaled by head_dim^-0.5, rope_theta 10000,
  // 8,192 positions; the 2B is multi-query (one kv head). The 1.1 releases (instruction-tuned
  // only) have the same shapes. Counts: keras-hub's gemma_presets.py.
  auto gemma1 = [](int layers, int64_t hidden, int heads, int kv, int64_t ffn) {
    return GemmaShape(layers, hidden, heads, kv, 256, ffn, 256000, 8192, NormPlacement::kPre);
  };
  const std::string gemma_count = "; count: HF num_parameters() (keras-hub gemma_presets.py)";
  p->push_back(Preset("gemma-2b", gemma1(18, 2048, 8, 1, 16384), 2'506'172'416,
                      HfConfig("google/gemma-2b") + gemma_count));
  p->push_back(Preset("gemma-7b", gemma1(28, 3072, 16, 16, 24576), 8'537'680'896,
                      HfConfig("google/gemma-7b") + gemma_count));
  p->push_back(Preset("gemma-1.1-2b", gemma1(18, 2048, 8, 1, 16384), 2'506'172'416,
                      HfConfig("google/gemma-1.1-2b-it") + gemma_count));
  p->push_back(Preset("gemma-1.1-7b", gemma1(28, 3072, 16, 16, 24576), 8'537'680'896,
                      HfConfig("google/gemma-1.1-7b-it") + gemma_count));
  // Gemma 2 2B (verl's PPO example run_gemma.sh trains gemma-2-2b-it): gemma2-9b's layout, 26
  // layers of 2304 with 8 heads / 4 kv heads of 256, GeGLU 9216, alternating 4096-token windows.
  p->push_back(Preset("gemma2-2b", Gemma2Shape(26, 2304, 8, 4, 9216), 2'614'341'888,
                      HfConfig("google/gemma-2-2b") + gemma_count));
  // Seed-OSS-36B (SeedOssForCausalLM, modeling_seed_oss.py; verl's GRPO and SFT examples): Llama's
  // layout with attention_bias true on q/k/v, attention_out_bias false on o_proj, mlp_bias false,
  // head_dim 128 (80 heads x 128 = 10240 != hidden 5120), 8 kv heads, vocab 155,136, rope_theta
  // 1e7, rms_norm_eps 1e-6, 524,288 positions, untied. SeedOssConfig's attention_dropout and
  // residual_dropout default to 0.1; the preset models none (training with residual dropout
  // saves a mask per element, which shardtune does not model; see ImportHfConfig).
  ModelSpec seed = Rope(WithVocab(Shape(64, 5120, 80, 8, 27648), 155136, 524288), 1e7, 1e-6);
  seed.head_dim = 128;
  seed.qkv_bias = true;
  p->push_back(Preset("seed-oss-36b", seed, 36'151'104'512,
                      HfConfig("ByteDance-Seed/Seed-OSS-36B-Base") +
                          "; count: safetensors index metadata.total_size / 2 (bf16)"));
}

// A few million parameters, for CPU runs and tests: the same code paths as the big ones. Vocab
// Vision-language models (issue #43; model/vision.h): the language model as its config.json
// describes it plus the vision tower of its vision_config (tests/data/model/*.config.json hold
// the same files). Counts: the safetensors totals of the published checkpoints (bf16 bytes / 2),
// equal to the modules' closed forms (tests/model/vision_test.cc); Qwen3-VL's are the closed form
// alone (no published total at hand).
void AddVisionLanguage(std::vector<PresetInfo>* p) {
  auto qwen2 = [](int layers, int64_t hidden, int heads, int kv, int64_t ffn, int64_t vocab,
                  int64_t positions, bool tied) {
    ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, kv, ffn), vocab, positions), 1e6, 1e-6);
    s.qkv_bias = true;  // the Qwen2 language model
    s.tied_embeddings = tied;
    s.mrope_section = {16, 24, 24};  // rope_scaling's M-RoPE sections (head_dim 128)
    return s;
  };
  auto qwen_vision = [](VisionKind kind, int depth, int64_t hidden, int64_t intermediate,
                        int64_t out) {
    VisionSpec v;
    v.kind = kind;
    v.depth = depth;
    v.hidden = hidden;
    v.num_heads = 16;
    v.intermediate = intermediate;
    v.patch_size = kind == VisionKind::kQwen3Vl ? 16 : 14;
    v.temporal_patch_size = 2;
    v.spatial_merge_size = 2;
    v.out_hidden = out;
    // The published preprocessor_config.json pixel bounds (model/hf_config.cc).
    v.min_pixels = kind == VisionKind::kQwen3Vl ? 65536 : 3136;
    v.max_pixels = kind == VisionKind::kQwen3Vl ? 16777216 : 12845056;
    if (kind == VisionKind::kQwen25Vl) {
      v.window_size = 112;
      v.fullatt_block_indexes = {7, 15, 23, 31};
    }
    return v;
  };
  const std::string st_count = "; count: the safetensors' total";
  ModelSpec q2vl7 = qwen2(28, 3584, 28, 4, 18944, 152064, 32768, false);
  q2vl7.vision = qwen_vision(VisionKind::kQwen2Vl, 32, 1280, 5120, 3584);
  p->push_back(Preset("qwen2-vl-7b", q2vl7, 8'291'375'616,
                      HfConfig("Qwen/Qwen2-VL-7B-Instruct") + st_count));
  ModelSpec q25vl3 = qwen2(36, 2048, 16, 2, 11008, 151936, 128000, true);
  q25vl3.vision = qwen_vision(VisionKind::kQwen25Vl, 32, 1280, 3420, 2048);
  p->push_back(Preset("qwen2.5-vl-3b", q25vl3, 3'754'622'976,
                      HfConfig("Qwen/Qwen2.5-VL-3B-Instruct") + st_count));
  ModelSpec q25vl7 = qwen2(28, 3584, 28, 4, 18944, 152064, 128000, false);
  q25vl7.vision = qwen_vision(VisionKind::kQwen25Vl, 32, 1280, 3420, 3584);
  p->push_back(Preset("qwen2.5-vl-7b", q25vl7, 8'292'166'656,
                      HfConfig("Qwen/Qwen2.5-VL-7B-Instruct") + st_count));
  // Qwen3-VL: a Qwen3 language model (head_dim 128, q/k norms, rope_theta 5e6, 262,144
  // positions), tied in the 2B and 4B; the tower's DeepStack mergers after blocks 5, 11, 17.
  auto qwen3vl = [&](int layers, int64_t hidden, int heads, int64_t ffn, int64_t out) {
    ModelSpec s = Rope(WithVocab(Shape(layers, hidden, heads, 8, ffn), 151936, 262144), 5e6, 1e-6);
    s.head_dim = 128;
    s.qk_norm = true;
    s.tied_embeddings = true;
    s.vision = qwen_vision(VisionKind::kQwen3Vl, 24, 1024, 4096, out);
    s.vision.num_position_embeddings = 2304;
    s.vision.deepstack_visual_indexes = {5, 11, 17};
    return s;
  };
  p->push_back(Preset("qwen3-vl-2b", qwen3vl(28, 2048, 16, 6144, 2048), 0,
                      HfConfig("Qwen/Qwen3-VL-2B-Instruct")));
  p->push_back(Preset("qwen3-vl-4b", qwen3vl(36, 2560, 32, 9728, 2560), 0,
                      HfConfig("Qwen/Qwen3-VL-4B-Instruct")));
}

// 512 = 256 byte values + spare ids (special tokens), so byte-level data needs no tokenizer.
void AddTiny(std::vector<PresetInfo>* p) {
  ModelSpec llama = WithVocab(Shape(4, 256, 8, 4, 688), 512, 256);
  p->push_back(Preset("tiny-llama", llama, 0, "shardtune: Llama layout at CPU scale"));
  p->push_back(Preset("tiny-gpt2", Gpt2Shape(4, 256, 4, 512, 256), 0,
                      "shardtune: GPT-2 layout at CPU scale"));
}

std::vector<PresetInfo> BuildPresets() {
  std::vector<PresetInfo> p;
  AddGpt(&p);
  AddLlama(&p);
  AddOthers(&p);
  Add2026(&p);
  AddRecipeModels(&p);
  AddVisionLanguage(&p);
  AddTiny(&p);
  for (const PresetInfo& info : p) info.spec.Validate("preset " + info.name);
  return p;
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

const std::vector<PresetInfo>& ModelPresets() {
  static const std::vector<PresetInfo> presets = BuildPresets();
  return presets;
}

ModelSpec FindModelPreset(const std::string& name) {
  std::vector<std::string> names;
  for (const PresetInfo& info : ModelPresets()) {
    if (info.name == name) return info.spec;
    names.push_back(info.name);
  }
  std::string hint = ClosestName(name, names);
  std::string known;
  for (size_t i = 0; i < names.size(); ++i) known += (i ? ", " : "") + names[i];
  throw InputError("--model: unknown preset \"" + name + "\"" +
                   DidYouMean(hint) + "; known: " +
                   known + " (or a shardtune.model JSON or a Hugging Face config.json file)");
}

std::string PresetHfId(const PresetInfo& info) {
  static const std::string kHub = "https://huggingface.co/";
  if (info.source.rfind(kHub, 0) != 0) return "";
  size_t end = info.source.find("/blob/", kHub.size());
  if (end == std::string::npos) return "";
  return info.source.substr(kHub.size(), end - kHub.size());
}

namespace {


// Suffixes of a repository name that mark a post-trained or base release of the same
// architecture (the same config.json shapes): Qwen's -Instruct / -Base / -Instruct-2507, Llama's
// -Instruct / -chat / -hf, Gemma's -it. Lower case; stripped repeatedly from the end.
const char* const kVariantSuffixes[] = {"-instruct-2507", "-thinking-2507", "-instruct", "-chat",
                                        "-base", "-it", "-hf", "-pt"};

std::string Stem(std::string repo) {
  for (bool again = true; again;) {
    again = false;
    for (const char* sfx : kVariantSuffixes) {
      std::string s = sfx;
      if (repo.size() > s.size() && repo.compare(repo.size() - s.size(), s.size(), s) == 0) {
        repo.resize(repo.size() - s.size());
        again = true;
      }
    }
  }
  return repo;
}

// The path components of `name` after "~" and trailing slashes, lower case; the hub cache's
// "models--org--repo/snapshots/<hash>" becomes "org", "repo".
std::vector<std::string> NameParts(const std::string& name) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : Lower(name)) {
    if (c == '/' || c == '\\') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].rfind("models--", 0) != 0) continue;
    std::string rest = parts[i].substr(8);
    size_t sep = rest.find("--");
    if (sep == std::string::npos) continue;
    return {rest.substr(0, sep), rest.substr(sep + 2)};
  }
  return parts;
}

std::string LastComponent(std::string name) {
  while (!name.empty() && (name.back() == '/' || name.back() == '\\')) name.pop_back();
  size_t slash = name.find_last_of("/\\");
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

std::string ExpandHome(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + path.substr(1) : path;
}

}  // namespace

std::optional<PresetMatch> FindPresetByHfName(const std::string& name) {
  std::vector<std::string> parts = NameParts(name);
  if (parts.empty()) return std::nullopt;
  const std::string& repo = parts.back();
  const std::string org = parts.size() >= 2 ? parts[parts.size() - 2] : "";
  std::optional<PresetMatch> by_dir, by_variant;
  for (const PresetInfo& info : ModelPresets()) {
    std::string id = PresetHfId(info);
    size_t slash = id.find('/');
    if (slash == std::string::npos) continue;
    std::string p_org = Lower(id.substr(0, slash)), p_repo = Lower(id.substr(slash + 1));
    if (repo == p_repo && org == p_org) return PresetMatch{info.name, id, ""};
    if (repo == p_repo && !by_dir) {
      by_dir = PresetMatch{info.name, id,
                           "its last path component is the repository name of " + id};
    }
    if (Stem(repo) == Stem(p_repo) && !by_variant) {
      by_variant = PresetMatch{
          info.name, id,
          LastComponent(name) + " is a post-trained or base release of " + id +
              " with the same architecture", /*variant=*/true};
    }
  }
  if (by_dir) return by_dir;
  return by_variant;
}

ModelSpec ResolveModelArg(const std::string& arg_in, std::vector<std::string>* warnings,
                          const std::string& where, const std::string& flag) {
  const std::string arg = ExpandHome(arg_in);
  if (IsDirectory(arg)) {
    std::string config = (std::filesystem::path(arg) / "config.json").string();
    if (!IsFile(config)) {
      throw InputError(where + ": expected a model directory holding a config.json, got \"" +
                       arg_in + "\" without one");
    }
    nlohmann::json j = ReadJsonFile(config);
    if (!LooksLikeHfConfig(j)) {
      throw InputError(config + ": expected a Hugging Face config.json (model_type, "
                       "architectures), got a file without them");
    }
    return ImportHfConfig(j, config, warnings);
  }
  if (IsFile(arg)) {
    nlohmann::json j = ReadJsonFile(arg);
    if (LooksLikeHfConfig(j)) return ImportHfConfig(j, arg, warnings);
    return ModelSpecFromJson(j, arg);
  }
  for (const PresetInfo& info : ModelPresets()) {
    if (info.name == arg) return info.spec;
  }
  if (std::optional<PresetMatch> m = FindPresetByHfName(arg)) {
    if (warnings && !m->how.empty()) {
      warnings->push_back(where + ": \"" + arg_in + "\" read as preset " + m->preset + " (" +
                          m->how +
                          (m->variant ? "; give " + flag + " its config.json to read it exactly" : "") +
                          ")");
    }
    return FindModelPreset(m->preset);
  }
  if (arg.size() > 5 && arg.compare(arg.size() - 5, 5, ".json") == 0) {
    throw InputError(where + ": cannot open file \"" + arg_in + "\"");
  }
  if (arg.find('/') != std::string::npos) {
    throw InputError(where + ": expected a preset, a Hugging Face id of one, a model directory "
                     "with config.json or a JSON file, got \"" + arg_in +
                     "\", which is none of them here (`shardtune models` lists the presets and "
                     "their ids; give " + flag + " path/to/config.json for another model)");
  }
  try {
    return FindModelPreset(arg);
  } catch (const InputError& e) {
    std::string msg = e.what();
    if (where != "--model" && msg.rfind("--model: ", 0) == 0) msg = where + ": " + msg.substr(9);
    throw InputError(msg);
  }
}

}  // namespace shardtune::model
