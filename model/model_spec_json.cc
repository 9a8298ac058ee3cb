// Reading and writing "shardtune.model" JSON. Parsing checks only types (ranges are left to
// ModelSpec::Validate() so that every range problem is reported at once).
#include "model/model_spec_json.h"

#include <climits>
#include <cstdint>

#include "model/errors.h"
#include "model/strict_json.h"

namespace shardtune::model {
namespace {

// Type-only bounds: sizes beyond 2^31 are typos, and keep V x H etc. far from int64 overflow.
constexpr int64_t kIntMin = INT_MIN;
constexpr int64_t kIntMax = INT_MAX;
constexpr int64_t kMaxExperts = 1 << 16;

int ReadInt(StrictReader* r, const std::string& key) {
  return static_cast<int>(r->RequiredInt(key, kIntMin, kIntMax));
}
int OptInt(StrictReader* r, const std::string& key, int def) {
  return static_cast<int>(r->OptionalInt(key, def, kIntMin, kIntMax));
}

MoeSpec ReadMoe(StrictReader* r) {
  MoeSpec m;
  m.num_experts = static_cast<int>(r->RequiredInt("num_experts", kIntMin, kMaxExperts));
  m.top_k = ReadInt(r, "top_k");
  m.num_shared_experts = OptInt(r, "num_shared_experts", 0);
  m.expert_ffn_hidden = r->OptionalInt("expert_ffn_hidden", 0, kIntMin, kIntMax);
  m.shared_expert_ffn_hidden = r->OptionalInt("shared_expert_ffn_hidden", 0, kIntMin, kIntMax);
  m.shared_expert_gate = r->OptionalBool("shared_expert_gate", false);
  m.router_aux_loss = r->OptionalBool("router_aux_loss", false);
  m.router_aux_loss_coef = r->OptionalNumber("router_aux_loss_coef", 0.001, 0, 1e6);
  m.norm_topk_prob = r->OptionalBool("norm_topk_prob", true);
  m.gpt_oss_experts = r->OptionalBool("gpt_oss_experts", false);
  m.first_dense_layers = OptInt(r, "first_dense_layers", 0);
  m.deepseek_router = r->OptionalBool("deepseek_router", false);
  m.sigmoid_scores = r->OptionalBool("sigmoid_scores", false);
  m.topk_method = r->OptionalString("topk_method", "greedy");
  m.n_group = OptInt(r, "n_group", 1);
  m.topk_group = OptInt(r, "topk_group", 1);
  m.routed_scaling_factor = r->OptionalNumber("routed_scaling_factor", 1.0, -1e300, 1e300);
  r->Finish();
  return m;
}

// "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
// "qk_rope_head_dim": 64, "v_head_dim": 128} (ModelSpec::mla; ranges in Problems()).
MlaSpec ReadMla(StrictReader* r) {
  MlaSpec m;
  m.q_lora_rank = r->OptionalInt("q_lora_rank", 0, kIntMin, kIntMax);
  m.kv_lora_rank = r->RequiredInt("kv_lora_rank", kIntMin, kIntMax);
  m.qk_nope_head_dim = r->RequiredInt("qk_nope_head_dim", kIntMin, kIntMax);
  m.qk_rope_head_dim = r->RequiredInt("qk_rope_head_dim", kIntMin, kIntMax);
  m.v_head_dim = r->RequiredInt("v_head_dim", kIntMin, kIntMax);
  r->Finish();
  return m;
}

// "vision": {"kind": "qwen2_5_vl", "depth": 32, "hidden": 1280, "num_heads": 16,
// "intermediate": 3420, "out_hidden": 3584, ...} (ModelSpec::vision, model/vision.h; ranges in
// VisionSpec::Problems()). Block-index lists are arrays of integers.
std::vector<int> ReadIndexes(StrictReader* r, const std::string& key) {
  return r->Has(key) ? BlockIndexes(r->RequiredValue(key), r->Where(key)) : std::vector<int>{};
}

VisionSpec ReadVision(StrictReader* r) {
  VisionSpec v;
  const std::string kind = r->RequiredString("kind");
  bool known = false;
  for (VisionKind k : {VisionKind::kQwen2Vl, VisionKind::kQwen25Vl, VisionKind::kQwen3Vl, VisionKind::kSiglip}) {
    if (kind == ToString(k)) {
      v.kind = k;
      known = true;
    }
  }
  if (!known) {
    throw InputError(r->Where("kind") + ": expected \"qwen2_vl\", \"qwen2_5_vl\", \"qwen3_vl\" or \"siglip\", got \"" +
                     kind + "\"");
  }
  v.depth = OptInt(r, "depth", 0);
  v.hidden = r->RequiredInt("hidden", kIntMin, kIntMax);
  v.num_heads = OptInt(r, "num_heads", 0);
  v.intermediate = r->RequiredInt("intermediate", kIntMin, kIntMax);
  v.patch_size = r->OptionalInt("patch_size", v.patch_size, kIntMin, kIntMax);
  v.temporal_patch_size = r->OptionalInt("temporal_patch_size", v.temporal_patch_size, kIntMin, kIntMax);
  v.in_channels = r->OptionalInt("in_channels", v.in_channels, kIntMin, kIntMax);
  v.spatial_merge_size = r->OptionalInt("spatial_merge_size", v.spatial_merge_size, kIntMin, kIntMax);
  v.out_hidden = r->RequiredInt("out_hidden", kIntMin, kIntMax);
  v.window_size = r->OptionalInt("window_size", 0, kIntMin, kIntMax);
  v.fullatt_block_indexes = ReadIndexes(r, "fullatt_block_indexes");
  v.num_position_embeddings = r->OptionalInt("num_position_embeddings", 0, kIntMin, kIntMax);
  v.deepstack_visual_indexes = ReadIndexes(r, "deepstack_visual_indexes");
  v.image_size = r->OptionalInt("image_size", 0, kIntMin, kIntMax);
  v.mm_tokens_per_image = r->OptionalInt("mm_tokens_per_image", 0, kIntMin, kIntMax);
  v.norm_eps = r->OptionalNumber("norm_eps", v.norm_eps, -1e300, 1e300);
  v.min_pixels = r->OptionalInt("min_pixels", 0, kIntMin, kIntMax);
  v.max_pixels = r->OptionalInt("max_pixels", 0, kIntMin, kIntMax);
  r->Finish();
  return v;
}

// "rope_scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
// "original_max_position_embeddings": 8192} (ModelSpec::rope_scaling; ranges in Problems()).
RopeScaling ReadRopeScaling(StrictReader* r) {
  RopeScaling s;
  s.type = r->RequiredString("type");
  s.factor = r->OptionalNumber("factor", 1, -1e300, 1e300);
  s.low_freq_factor = r->OptionalNumber("low_freq_factor", 1, -1e300, 1e300);
  s.high_freq_factor = r->OptionalNumber("high_freq_factor", 4, -1e300, 1e300);
  s.original_max_position_embeddings =
      r->OptionalInt("original_max_position_embeddings", 8192, kIntMin, kIntMax);
  if (s.type == "yarn") {  // RopeScaling's yarn keys (ranges in Problems())
    s.original_given = r->Has("original_max_position_embeddings");
    s.beta_fast = r->OptionalNumber("beta_fast", 32, -1e300, 1e300);
    s.beta_slow = r->OptionalNumber("beta_slow", 1, -1e300, 1e300);
    s.mscale = r->OptionalNumber("mscale", 0, -1e300, 1e300);
    s.mscale_all_dim = r->OptionalNumber("mscale_all_dim", 0, -1e300, 1e300);
    s.attention_factor = r->OptionalNumber("attention_factor", 0, -1e300, 1e300);
    s.truncate = r->OptionalBool("truncate", true);
  }
  r->Finish();
  return s;
}

// The object at `key`, when present, read by `read` into `out` (absent: `out` keeps its default,
// a disabled section).
template <typename T>
void ReadOptionalObject(StrictReader* r, const std::string& key, T (*read)(StrictReader*), T* out) {
  if (!r->Has(key)) return;
  StrictReader object = r->RequiredObject(key);
  *out = read(&object);
}

// The boolean layout flags, in the order they are read and written.
struct FlagKey {
  const char* key;
  bool ModelSpec::*member;
};
// Written always.
constexpr FlagKey kLayoutFlags[] = {{"qkv_bias", &ModelSpec::qkv_bias},
                                    {"attn_out_bias", &ModelSpec::attn_out_bias},
                                    {"mlp_bias", &ModelSpec::mlp_bias},
                                    {"qk_norm", &ModelSpec::qk_norm},
                                    {"parallel_residual", &ModelSpec::parallel_residual},
                                    {"tied_embeddings", &ModelSpec::tied_embeddings}};
// Added with later models (OLMo 2 and Phi-3's, then Gemma's and GPT-OSS's): written only when set,
// so files written before them stay as they were.
constexpr FlagKey kLaterLayoutFlags[] = {{"fused_qkv", &ModelSpec::fused_qkv},
                                         {"fused_gate_up", &ModelSpec::fused_gate_up},
                                         {"norm_weight_fp32", &ModelSpec::norm_weight_fp32},
                                         {"norm_unit_offset", &ModelSpec::norm_unit_offset},
                                         {"gelu_gate", &ModelSpec::gelu_gate},
                                         {"attention_sinks", &ModelSpec::attention_sinks},
                                         {"scaled_embedding", &ModelSpec::scaled_embedding}};

void ReadKinds(StrictReader* r, ModelSpec* s) {
  s->norm = r->OptionalEnum("norm", "rms_norm", {"rms_norm", "layer_norm"}) == "rms_norm"
                ? NormKind::kRmsNorm
                : NormKind::kLayerNorm;
  s->norm_bias = r->OptionalBool("norm_bias", false);
  s->mlp = r->OptionalEnum("mlp", "swiglu", {"swiglu", "gelu"}) == "swiglu" ? MlpKind::kSwiGlu
                                                                             : MlpKind::kGelu;
  s->positions = r->OptionalEnum("positions", "rotary", {"rotary", "learned"}) == "rotary"
                     ? PositionKind::kRotary
                     : PositionKind::kLearned;
  for (const FlagKey& f : kLayoutFlags) s->*f.member = r->OptionalBool(f.key, false);
  s->qk_norm_full_width = r->OptionalBool("qk_norm_full_width", false);
  const std::string placement =
      r->OptionalEnum("norm_placement", "pre", {"pre", "post", "sandwich"});
  s->norm_placement = placement == "pre"    ? NormPlacement::kPre
                      : placement == "post" ? NormPlacement::kPost
                                            : NormPlacement::kSandwich;
  for (const FlagKey& f : kLaterLayoutFlags) s->*f.member = r->OptionalBool(f.key, false);
  s->final_logit_softcap = r->OptionalNumber("final_logit_softcap", 0, -1e300, 1e300);
  s->attn_logit_softcap = r->OptionalNumber("attn_logit_softcap", 0, -1e300, 1e300);
  s->query_pre_attn_scalar = r->OptionalNumber("query_pre_attn_scalar", 0, -1e300, 1e300);
  s->sliding_window = r->OptionalInt("sliding_window", 0, INT64_MIN, INT64_MAX);
  s->full_attention_every = static_cast<int>(r->OptionalInt("full_attention_every", 1, INT_MIN, INT_MAX));
  s->rope_local_theta = r->OptionalNumber("rope_local_theta", 0, -1e300, 1e300);
  // Type-only bounds here; ModelSpec::Problems() checks the ranges.
  s->rope_theta = r->OptionalNumber("rope_theta", 0, -1e300, 1e300);
  s->norm_eps = r->OptionalNumber("norm_eps", 0, -1e300, 1e300);
  s->rotary_fraction = r->OptionalNumber("rotary_fraction", 1.0, -1e300, 1e300);
  if (r->Has("mrope_section")) {
    s->mrope_section = BlockIndexes(r->RequiredValue("mrope_section"), r->Where("mrope_section"), "a section size",
                                    "section sizes");
  }
}

}  // namespace

ModelSpec ModelSpecFromJson(const nlohmann::json& j, const std::string& file) {
  StrictReader r(j, file);
  r.CheckSchema(kModelSchema, kModelSchemaVersion);
  ModelSpec s;
  s.name = r.OptionalString("name", file);
  s.num_layers = ReadInt(&r, "num_layers");
  s.hidden = r.RequiredInt("hidden", kIntMin, kIntMax);
  s.num_heads = ReadInt(&r, "num_heads");
  s.num_kv_heads = OptInt(&r, "num_kv_heads", 0);
  s.head_dim = r.OptionalInt("head_dim", 0, kIntMin, kIntMax);
  s.ffn_hidden = r.RequiredInt("ffn_hidden", kIntMin, kIntMax);
  s.vocab_size = r.RequiredInt("vocab_size", kIntMin, kIntMax);
  s.max_seq_len = r.RequiredInt("max_seq_len", kIntMin, kIntMax);
  ReadKinds(&r, &s);
  ReadOptionalObject(&r, "moe", ReadMoe, &s.moe);
  ReadOptionalObject(&r, "mla", ReadMla, &s.mla);
  ReadOptionalObject(&r, "vision", ReadVision, &s.vision);
  ReadOptionalObject(&r, "rope_scaling", ReadRopeScaling, &s.rope_scaling);
  s.source = r.OptionalString("source", "");
  s.hf_architecture = r.OptionalString("hf_architecture", "");
  r.Finish();
  // An explicit 0 is "absent" too; Problems() reports what FillDefaults() could not resolve.
  s.FillDefaults();
  s.Validate(file);
  return s;
}

nlohmann::ordered_json ModelSpecToJson(const ModelSpec& spec) {
  ModelSpec s = spec;
  s.FillDefaults();
  nlohmann::ordered_json j;
  j["schema"] = kModelSchema;
  j["schema_version"] = kModelSchemaVersion;
  j["name"] = s.name;
  j["num_layers"] = s.num_layers;
  j["hidden"] = s.hidden;
  j["num_heads"] = s.num_heads;
  j["num_kv_heads"] = s.num_kv_heads;
  j["head_dim"] = s.head_dim;
  j["ffn_hidden"] = s.ffn_hidden;
  j["vocab_size"] = s.vocab_size;
  j["max_seq_len"] = s.max_seq_len;
  j["norm"] = ToString(s.norm);
  j["norm_bias"] = s.norm_bias;
  j["mlp"] = ToString(s.mlp);
  j["positions"] = ToString(s.positions);
  for (const FlagKey& f : kLayoutFlags) j[f.key] = s.*f.member;
  // The layouts added for OLMo 2 and Phi-3, written when set (older files never name them).
  if (s.qk_norm_full_width) j["qk_norm_full_width"] = true;
  if (s.norm_placement != NormPlacement::kPre) j["norm_placement"] = ToString(s.norm_placement);
  for (const FlagKey& f : kLaterLayoutFlags) {
    if (s.*f.member) j[f.key] = true;
  }
  if (s.final_logit_softcap != 0) j["final_logit_softcap"] = s.final_logit_softcap;
  if (s.attn_logit_softcap != 0) j["attn_logit_softcap"] = s.attn_logit_softcap;
  if (s.query_pre_attn_scalar != 0) j["query_pre_attn_scalar"] = s.query_pre_attn_scalar;
  if (s.sliding_window != 0) {
    j["sliding_window"] = s.sliding_window;
    j["full_attention_every"] = s.full_attention_every;
  }
  if (s.rope_local_theta != 0) j["rope_local_theta"] = s.rope_local_theta;
  j["rope_theta"] = s.rope_theta;
  j["norm_eps"] = s.norm_eps;
  if (s.rope_scaling.enabled()) {
    const RopeScaling& r = s.rope_scaling;
    j["rope_scaling"] = {{"type", r.type}, {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
    if (r.type == "yarn") {
      if (!r.original_given) j["rope_scaling"].erase("original_max_position_embeddings");
      j["rope_scaling"]["beta_fast"] = r.beta_fast;
      j["rope_scaling"]["beta_slow"] = r.beta_slow;
      j["rope_scaling"]["mscale"] = r.mscale;
      j["rope_scaling"]["mscale_all_dim"] = r.mscale_all_dim;
      j["rope_scaling"]["attention_factor"] = r.attention_factor;
      j["rope_scaling"]["truncate"] = r.truncate;
    }
  }
  if (s.rotary_fraction != 1.0) j["rotary_fraction"] = s.rotary_fraction;
  if (!s.mrope_section.empty()) j["mrope_section"] = s.mrope_section;
  if (s.moe.enabled()) {
    nlohmann::ordered_json m;
    m["num_experts"] = s.moe.num_experts;
    m["top_k"] = s.moe.top_k;
    m["num_shared_experts"] = s.moe.num_shared_experts;
    m["expert_ffn_hidden"] = s.moe.expert_ffn_hidden;
    m["shared_expert_ffn_hidden"] = s.moe.shared_expert_ffn_hidden;
    m["shared_expert_gate"] = s.moe.shared_expert_gate;
    if (s.moe.router_aux_loss) {
      m["router_aux_loss"] = true;
      m["router_aux_loss_coef"] = s.moe.router_aux_loss_coef;
    }
    if (!s.moe.norm_topk_prob) m["norm_topk_prob"] = false;
    if (s.moe.gpt_oss_experts) m["gpt_oss_experts"] = true;
    // DeepSeek's, written when set.
    if (s.moe.first_dense_layers != 0) m["first_dense_layers"] = s.moe.first_dense_layers;
    if (s.moe.deepseek_router) {
      m["deepseek_router"] = true;
      m["sigmoid_scores"] = s.moe.sigmoid_scores;
      m["topk_method"] = s.moe.topk_method;
      m["n_group"] = s.moe.n_group;
      m["topk_group"] = s.moe.topk_group;
      m["routed_scaling_factor"] = s.moe.routed_scaling_factor;
    }
    j["moe"] = m;
  }
  if (s.mla.enabled()) {
    j["mla"] = {{"q_lora_rank", s.mla.q_lora_rank},
                {"kv_lora_rank", s.mla.kv_lora_rank},
                {"qk_nope_head_dim", s.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", s.mla.qk_rope_head_dim},
                {"v_head_dim", s.mla.v_head_dim}};
  }
  if (s.vision.enabled()) {
    const VisionSpec& v = s.vision;
    nlohmann::ordered_json o = {{"kind", ToString(v.kind)}, {"depth", v.depth}, {"hidden", v.hidden},
                                {"num_heads", v.num_heads}, {"intermediate", v.intermediate},
                                {"patch_size", v.patch_size}, {"temporal_patch_size", v.temporal_patch_size},
                                {"in_channels", v.in_channels}, {"spatial_merge_size", v.spatial_merge_size},
                                {"out_hidden", v.out_hidden}, {"norm_eps", v.norm_eps}};
    if (v.window_size > 0) o["window_size"] = v.window_size;
    if (!v.fullatt_block_indexes.empty()) o["fullatt_block_indexes"] = v.fullatt_block_indexes;
    if (v.num_position_embeddings > 0) o["num_position_embeddings"] = v.num_position_embeddings;
    if (!v.deepstack_visual_indexes.empty()) o["deepstack_visual_indexes"] = v.deepstack_visual_indexes;
    if (v.image_size > 0) o["image_size"] = v.image_size;
    if (v.mm_tokens_per_image > 0) o["mm_tokens_per_image"] = v.mm_tokens_per_image;
    if (v.min_pixels > 0) o["min_pixels"] = v.min_pixels;
    if (v.max_pixels > 0) o["max_pixels"] = v.max_pixels;
    j["vision"] = o;
  }
  j["source"] = s.source;
  if (!s.hf_architecture.empty()) j["hf_architecture"] = s.hf_architecture;
  return j;
}

ModelSpec ReadModelSpecFile(const std::string& path) {
  return ModelSpecFromJson(ReadJsonFile(path), path);
}

}  // namespace shardtune::model
