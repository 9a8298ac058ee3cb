// Module tree (HF transformers attribute names and tensor shapes), FLOPs per token, and wrap
// policies turned into FSDP units.
#include "model/module_tree.h"

#include <algorithm>
#include <functional>
#include <set>

#include "model/errors.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

ModuleNode Leaf(const std::string& name, const std::string& type, int seg) {
  ModuleNode m;
  m.name = name;
  m.type = type;
  m.first_segment = m.last_segment = seg;
  return m;
}

// nn.Linear(in, out): weight [out, in], bias [out]. HF GPT-2's Conv1D stores weight [in, out],
// so FSDP shards its dim 0 = in (modeling_gpt2.py / pytorch_utils.py Conv1D).
ModuleNode Linear(const std::string& name, int64_t in, int64_t out, bool bias, int seg,
                  bool conv1d = false) {
  ModuleNode m = Leaf(name, conv1d ? "Conv1D" : "Linear", seg);
  m.params.push_back(conv1d ? ParamTensor{name + ".weight", in, out, seg}
                            : ParamTensor{name + ".weight", out, in, seg});
  if (bias) m.params.push_back({name + ".bias", out, 1, seg});
  return m;
}

ModuleNode Norm(const ModelSpec& s, const std::string& name, int64_t dim, int seg) {
  ModuleNode m = Leaf(name, s.norm == NormKind::kRmsNorm ? "RMSNorm" : "LayerNorm", seg);
  m.params.push_back({name + ".weight", dim, 1, seg});
  if (s.norm == NormKind::kLayerNorm && s.norm_bias) m.params.push_back({name + ".bias", dim, 1, seg});
  return m;
}

ModuleNode Parent(const std::string& name, const std::string& type, std::vector<ModuleNode> kids) {
  ModuleNode m;
  m.name = name;
  m.type = type;
  m.children = std::move(kids);
  m.first_segment = m.children.front().first_segment;
  m.last_segment = m.children.front().last_segment;
  for (const auto& c : m.children) {
    m.first_segment = std::min(m.first_segment, c.first_segment);
    m.last_segment = std::max(m.last_segment, c.last_segment);
  }
  return m;
}

ModuleNode DenseMlp(const ModelSpec& s, const std::string& p, int64_t ffn, int seg) {
  int64_t h = s.hidden;
  if (s.fused_gate_up) {  // Phi3MLP: gate_up_proj [2F, H], down_proj [H, F], no biases
    return Parent(p, "MLP", {Linear(p + ".gate_up_proj", h, 2 * ffn, s.mlp_bias, seg),
                             Linear(p + ".down_proj", ffn, h, s.mlp_bias, seg)});
  }
  if (s.mlp == MlpKind::kSwiGlu) {
    return Parent(p, "MLP", {Linear(p + ".gate_proj", h, ffn, s.mlp_bias, seg),
                             Linear(p + ".up_proj", h, ffn, s.mlp_bias, seg),
                             Linear(p + ".down_proj", ffn, h, s.mlp_bias, seg)});
  }
  bool gpt2 = s.positions == PositionKind::kLearned;
  return Parent(p, "MLP", {Linear(p + (gpt2 ? ".c_fc" : ".up_proj"), h, ffn, s.mlp_bias, seg, gpt2),
                           Linear(p + (gpt2 ? ".c_proj" : ".down_proj"), ffn, h, s.mlp_bias, seg, gpt2)});
}

ModuleNode MoeBlock(const ModelSpec& s, const std::string& p, int seg) {
  const MoeSpec& m = s.moe;
  int64_t fe = m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : s.ffn_hidden;
  if (m.gpt_oss_experts) {
    // GptOssMLP: router = GptOssTopKRouter (weight [E, H], bias [E]); experts = GptOssExperts,
    // four 3-D / 2-D parameters of its own (dim 0: the experts).
    ModuleNode experts = Leaf(p + ".experts", "Experts", seg);
    experts.params = {{p + ".experts.gate_up_proj", m.num_experts, s.hidden * 2 * fe, seg},
                      {p + ".experts.gate_up_proj_bias", m.num_experts, 2 * fe, seg},
                      {p + ".experts.down_proj", m.num_experts, fe * s.hidden, seg},
                      {p + ".experts.down_proj_bias", m.num_experts, s.hidden, seg}};
    return Parent(p, "SparseMoeBlock",
                  {Linear(p + ".gate", s.hidden, m.num_experts, true, seg), std::move(experts)});
  }
  std::vector<ModuleNode> experts;
  for (int e = 0; e < m.num_experts; ++e) {
    experts.push_back(DenseMlp(s, p + ".experts." + std::to_string(e), fe, seg));
  }
  std::vector<ModuleNode> kids{Linear(p + ".gate", s.hidden, m.num_experts, false, seg)};
  ModuleNode list = Parent(p + ".experts", "ModuleList", std::move(experts));
  list.is_container = true;
  kids.push_back(std::move(list));
  if (m.num_shared_experts > 0) {
    int64_t fs = m.shared_expert_ffn_hidden > 0 ? m.shared_expert_ffn_hidden : fe;
    kids.push_back(DenseMlp(s, p + ".shared_expert", fs * m.num_shared_experts, seg));
    if (m.shared_expert_gate) kids.push_back(Linear(p + ".shared_expert_gate", s.hidden, 1, false, seg));
  }
  return Parent(p, "SparseMoeBlock", std::move(kids));
}

ModuleNode Block(const ModelSpec& s, int i) {
  std::string p = "model.layers." + std::to_string(i);
  int seg = BlockSegment(s.VisionBlocks() + i);
  int64_t h = s.hidden, qd = s.q_dim(), kvd = s.kv_dim();
  bool gpt2 = s.positions == PositionKind::kLearned;
  std::vector<ModuleNode> attn;
  if (s.mla.enabled()) {
    // DeepseekV3Attention's modules in their __init__ order (model_spec.h MlaSpec).
    const MlaSpec& m = s.mla;
    const int64_t a = s.num_heads, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    if (m.q_lora_rank > 0) {
      attn = {Linear(p + ".self_attn.q_a_proj", h, m.q_lora_rank, false, seg),
              Norm(s, p + ".self_attn.q_a_layernorm", m.q_lora_rank, seg),
              Linear(p + ".self_attn.q_b_proj", m.q_lora_rank, a * qk, false, seg)};
    } else {
      attn = {Linear(p + ".self_attn.q_proj", h, a * qk, false, seg)};
    }
    attn.push_back(Linear(p + ".self_attn.kv_a_proj_with_mqa", h, m.kv_lora_rank + m.qk_rope_head_dim,
                          false, seg));
    attn.push_back(Norm(s, p + ".self_attn.kv_a_layernorm", m.kv_lora_rank, seg));
    attn.push_back(Linear(p + ".self_attn.kv_b_proj", m.kv_lora_rank,
                          a * (m.qk_nope_head_dim + m.v_head_dim), false, seg));
    attn.push_back(Linear(p + ".self_attn.o_proj", s.v_dim(), h, false, seg));
  } else if (gpt2) {  // GPT2Attention: fused c_attn [H, 3H] (Conv1D) and c_proj
    attn = {Linear(p + ".attn.c_attn", h, qd + 2 * kvd, s.qkv_bias, seg, true),
            Linear(p + ".attn.c_proj", qd, h, s.attn_out_bias, seg, true)};
  } else if (s.fused_qkv) {  // Phi3Attention: o_proj, then qkv_proj [a*d + 2 kv*d, H]
    attn = {Linear(p + ".self_attn.o_proj", qd, h, s.attn_out_bias, seg),
            Linear(p + ".self_attn.qkv_proj", h, qd + 2 * kvd, s.qkv_bias, seg)};
  } else {
    attn = {Linear(p + ".self_attn.q_proj", h, qd, s.qkv_bias, seg),
            Linear(p + ".self_attn.k_proj", h, kvd, s.qkv_bias, seg),
            Linear(p + ".self_attn.v_proj", h, kvd, s.qkv_bias, seg),
            Linear(p + ".self_attn.o_proj", qd, h, s.attn_out_bias, seg)};
  }
  if (s.attention_sinks) {  // GptOssAttention.sinks [heads], after the projections
    ModuleNode sinks = Leaf(p + ".self_attn.sinks", "Sinks", seg);
    sinks.params.push_back({p + ".self_attn.sinks", s.num_heads, 1, seg});
    attn.push_back(std::move(sinks));
  }
  if (s.qk_norm) {  // Qwen3: RMSNorm(head_dim); OLMo 2: over the whole q and k projections
    attn.push_back(Norm(s, p + ".self_attn.q_norm", s.qk_norm_full_width ? qd : s.head_dim, seg));
    attn.push_back(Norm(s, p + ".self_attn.k_norm", s.qk_norm_full_width ? kvd : s.head_dim, seg));
  }
  ModuleNode mlp = s.MoeLayer(i) ? MoeBlock(s, p + ".block_sparse_moe", seg)
                                 : DenseMlp(s, p + ".mlp", s.ffn_hidden, seg);
  std::vector<ModuleNode> kids;
  if (s.norm_placement == NormPlacement::kPost) {
    // Olmo2DecoderLayer: self_attn, mlp, post_attention_layernorm, post_feedforward_layernorm.
    kids.push_back(Parent(p + ".self_attn", "Attention", std::move(attn)));
    kids.push_back(std::move(mlp));
    kids.push_back(Norm(s, p + ".post_attention_layernorm", h, seg));
    kids.push_back(Norm(s, p + ".post_feedforward_layernorm", h, seg));
    return Parent(p, "DecoderLayer", std::move(kids));
  }
  if (s.norm_placement == NormPlacement::kSandwich) {
    // Gemma2DecoderLayer / Gemma3DecoderLayer: self_attn, mlp, then the four norms.
    kids.push_back(Parent(p + ".self_attn", "Attention", std::move(attn)));
    kids.push_back(std::move(mlp));
    for (const char* n : {".input_layernorm", ".post_attention_layernorm",
                          ".pre_feedforward_layernorm", ".post_feedforward_layernorm"}) {
      kids.push_back(Norm(s, p + n, h, seg));
    }
    return Parent(p, "DecoderLayer", std::move(kids));
  }
  kids.push_back(Norm(s, p + (gpt2 ? ".ln_1" : ".input_layernorm"), h, seg));
  kids.push_back(Parent(p + (gpt2 ? ".attn" : ".self_attn"), "Attention", std::move(attn)));
  kids.push_back(Norm(s, p + (gpt2 ? ".ln_2" : ".post_attention_layernorm"), h, seg));
  kids.push_back(std::move(mlp));
  return Parent(p, "DecoderLayer", std::move(kids));
}

// One vision block (model/vision.h VisionKind) with its HF module names, in __init__ order.
ModuleNode VisionBlock(const ModelSpec& spec, const ModelSpec& vb, int b) {
  const VisionSpec& v = spec.vision;
  const int seg = BlockSegment(b);
  const int64_t c = v.hidden, i = v.intermediate;
  if (v.kind == VisionKind::kSiglip) {
    // SiglipEncoderLayer: self_attn (k_proj, v_proj, q_proj, out_proj), layer_norm1, mlp (fc1,
    // fc2), layer_norm2.
    const std::string p = VisionBlockName(spec, b);
    std::vector<ModuleNode> attn;
    for (const char* n : {".k_proj", ".v_proj", ".q_proj", ".out_proj"}) {
      attn.push_back(Linear(p + ".self_attn" + n, c, c, true, seg));
    }
    return Parent(p, "SiglipEncoderLayer",
                  {Parent(p + ".self_attn", "SiglipAttention", std::move(attn)),
                   Norm(vb, p + ".layer_norm1", c, seg),
                   Parent(p + ".mlp", "SiglipMLP", {Linear(p + ".mlp.fc1", c, i, true, seg),
                                                    Linear(p + ".mlp.fc2", i, c, true, seg)}),
                   Norm(vb, p + ".layer_norm2", c, seg)});
  }
  // Qwen2VLVisionBlock / Qwen2_5_VLVisionBlock / Qwen3VLVisionBlock: norm1, norm2, attn (qkv,
  // proj), mlp.
  const std::string p = VisionBlockName(spec, b);
  ModuleNode mlp;
  if (v.kind == VisionKind::kQwen25Vl) {
    mlp = Parent(p + ".mlp", "Qwen2_5_VLMLP", {Linear(p + ".mlp.gate_proj", c, i, true, seg),
                                               Linear(p + ".mlp.up_proj", c, i, true, seg),
                                               Linear(p + ".mlp.down_proj", i, c, true, seg)});
  } else {
    const std::string fc = v.kind == VisionKind::kQwen3Vl ? ".mlp.linear_fc" : ".mlp.fc";
    mlp = Parent(p + ".mlp", "VisionMlp", {Linear(p + fc + "1", c, i, true, seg),
                                           Linear(p + fc + "2", i, c, true, seg)});
  }
  return Parent(p, "VisionBlock",
                {Norm(vb, p + ".norm1", c, seg), Norm(vb, p + ".norm2", c, seg),
                 Parent(p + ".attn", "VisionAttention", {Linear(p + ".attn.qkv", c, 3 * c, true, seg),
                                                         Linear(p + ".attn.proj", c, c, true, seg)}),
                 std::move(mlp)});
}

// A Qwen patch merger: its norm (over C, or 4C for Qwen3-VL's DeepStack mergers), Linear(4C,
// 4C) and Linear(4C, out) with biases (mlp.0 / mlp.2, or linear_fc1 / linear_fc2 in Qwen3-VL).
ModuleNode QwenMerger(const ModelSpec& spec, const ModelSpec& vb, const std::string& p, bool postshuffle,
                      int seg) {
  const VisionSpec& v = spec.vision;
  const int64_t w = v.hidden * v.spatial_merge_size * v.spatial_merge_size;
  const bool q3 = v.kind == VisionKind::kQwen3Vl;
  return Parent(p, "PatchMerger",
                {Norm(vb, p + (q3 ? ".norm" : ".ln_q"), postshuffle ? w : v.hidden, seg),
                 Linear(p + (q3 ? ".linear_fc1" : ".mlp.0"), w, w, true, seg),
                 Linear(p + (q3 ? ".linear_fc2" : ".mlp.2"), w, v.out_hidden, true, seg)});
}

// The vision tower: its embeddings with the first block's segment, its blocks (a ModuleList) and
// what follows them (merger, DeepStack mergers after their blocks, SigLIP's post-norm and Gemma
// 3's projector) with the segments of the blocks they follow.
std::vector<ModuleNode> VisionTower(const ModelSpec& s) {
  const VisionSpec& v = s.vision;
  const ModelSpec vb = VisionBlockSpec(s);
  const int first = BlockSegment(0), last = BlockSegment(v.depth - 1);
  const int64_t c = v.hidden;
  const int64_t kernel = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size;
  const bool siglip = v.kind == VisionKind::kSiglip;
  const std::string root = siglip ? "model.vision_tower.vision_model" : "model.visual";
  std::vector<ModuleNode> kids;
  const std::string pe = root + (siglip ? ".embeddings.patch_embedding" : ".patch_embed.proj");
  ModuleNode conv = Leaf(pe, siglip ? "Conv2d" : "Conv3d", first);
  conv.params.push_back({pe + ".weight", c, kernel, first});
  if (siglip || v.kind == VisionKind::kQwen3Vl) conv.params.push_back({pe + ".bias", c, 1, first});
  const int64_t side = siglip ? v.image_size / v.patch_size : 0;
  const int64_t positions = siglip ? side * side : v.num_position_embeddings;
  if (positions > 0) {
    const std::string pn = root + (siglip ? ".embeddings.position_embedding" : ".pos_embed");
    ModuleNode pos = Leaf(pn, "Embedding", first);
    pos.params.push_back({pn + ".weight", positions, c, first});
    kids.push_back(siglip ? Parent(root + ".embeddings", "SiglipVisionEmbeddings", {std::move(conv), std::move(pos)})
                          : std::move(conv));
    if (!siglip) kids.push_back(std::move(pos));
  } else {
    kids.push_back(std::move(conv));
  }
  std::vector<ModuleNode> blocks;
  for (int b = 0; b < v.depth; ++b) blocks.push_back(VisionBlock(s, vb, b));
  ModuleNode list = Parent(root + (siglip ? ".encoder.layers" : ".blocks"), "ModuleList", std::move(blocks));
  list.is_container = true;
  if (siglip) {
    kids.push_back(Parent(root + ".encoder", "SiglipEncoder", {std::move(list)}));
    kids.push_back(Norm(vb, root + ".post_layernorm", c, last));
    ModuleNode tower = Parent(root, "SiglipVisionTransformer", std::move(kids));
    ModuleNode proj = Leaf("model.multi_modal_projector.mm_input_projection_weight", "Parameter", last);
    proj.params.push_back({proj.name, c, v.out_hidden, last});
    ModelSpec rms = vb;
    rms.norm = NormKind::kRmsNorm;  // Gemma3RMSNorm mm_soft_emb_norm: a weight [C]
    return {Parent("model.vision_tower", "SiglipVisionModel", {std::move(tower)}),
            Parent("model.multi_modal_projector", "Gemma3MultiModalProjector",
                   {Norm(rms, "model.multi_modal_projector.mm_soft_emb_norm", c, last), std::move(proj)})};
  }
  kids.push_back(std::move(list));
  kids.push_back(QwenMerger(s, vb, root + ".merger", false, last));
  if (!v.deepstack_visual_indexes.empty()) {
    std::vector<ModuleNode> ds;
    for (size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k) {
      ds.push_back(QwenMerger(s, vb, root + ".deepstack_merger_list." + std::to_string(k), true,
                              BlockSegment(v.deepstack_visual_indexes[k])));
    }
    ModuleNode dl = Parent(root + ".deepstack_merger_list", "ModuleList", std::move(ds));
    dl.is_container = true;
    kids.push_back(std::move(dl));
  }
  return {Parent(root, "VisionModel", std::move(kids))};
}

void CollectParams(const ModuleNode& m, std::set<std::string>* taken, std::vector<ParamTensor>* out) {
  for (const auto& p : m.params) {
    if (taken->insert(p.name).second) out->push_back(p);
  }
  for (const auto& c : m.children) CollectParams(c, taken, out);
}

// The vision tower's block lists (model.visual.blocks, ...encoder.layers) under `inner`.
std::vector<const ModuleNode*> VisionBlockLists(const ModuleNode& inner) {
  std::vector<const ModuleNode*> out;
  std::function<void(const ModuleNode&)> walk = [&](const ModuleNode& m) {
    if (m.is_container && (EndsWith(m.name, ".blocks") || EndsWith(m.name, ".encoder.layers"))) {
      out.push_back(&m);
      return;
    }
    for (const auto& c : m.children) walk(c);
  };
  for (const auto& c : inner.children) {
    if (c.name == "model.visual" || c.name == "model.vision_tower") walk(c);
  }
  return out;
}

const ModuleNode* FindBlock(const ModuleNode& root, int i) {
  const ModuleNode& inner = root.children.front();  // "model"
  for (const auto& c : inner.children) {
    if (c.is_container) return &c.children.at(static_cast<size_t>(i));
  }
  SHARDTUNE_CHECK(false) << "no layers container";
  return nullptr;
}

}  // namespace

bool IsVisionParameter(const std::string& name) {
  return name.rfind("model.visual.", 0) == 0 || name.rfind("model.vision_tower.", 0) == 0 ||
         name.rfind("model.multi_modal_projector.", 0) == 0;
}

std::string VisionBlockName(const ModelSpec& spec, int b) {
  SHARDTUNE_CHECK(spec.vision.enabled()) << "VisionBlockName of a text model";
  return (spec.vision.kind == VisionKind::kSiglip ? "model.vision_tower.vision_model.encoder.layers."
                                                  : "model.visual.blocks.") +
         std::to_string(b);
}

std::string SegmentName(const ModelSpec& spec, int segment) {
  const int L = spec.NumBlocks(), V = spec.VisionBlocks();
  if (segment == 0) return "model.embed_tokens";
  if (segment <= V) return VisionBlockName(spec, segment - 1);
  if (segment <= L) return "model.layers." + std::to_string(segment - 1 - V);
  if (segment == FinalNormSegment(L)) return "model.norm";
  return "lm_head";
}

int64_t ModuleNode::NumParams() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  for (const auto& c : children) n += c.NumParams();
  return n;
}

ModuleNode BuildModuleTree(const ModelSpec& s) {
  const int L = s.NumBlocks();  // segments count every block, the vision tower's first
  std::vector<ModuleNode> inner;
  if (s.vision.enabled()) inner = VisionTower(s);
  ModuleNode embed = Leaf("model.embed_tokens", "Embedding", 0);
  // Tied: the weight's gradient first appears in the LM head's backward.
  const bool tied = s.tied_embeddings && !s.value_head;
  embed.params.push_back({"model.embed_tokens.weight", s.vocab_size, s.hidden,
                          tied ? HeadSegment(L) : 0});
  inner.push_back(embed);
  if (s.positions == PositionKind::kLearned) {
    ModuleNode pos = Leaf("model.embed_positions", "Embedding", 0);
    pos.params.push_back({"model.embed_positions.weight", s.max_seq_len, s.hidden, 0});
    inner.push_back(pos);
  }
  std::vector<ModuleNode> blocks;
  for (int i = 0; i < s.num_layers; ++i) blocks.push_back(Block(s, i));
  ModuleNode layers = Parent("model.layers", "ModuleList", std::move(blocks));
  layers.is_container = true;
  inner.push_back(std::move(layers));
  inner.push_back(Norm(s, "model.norm", s.hidden, FinalNormSegment(L)));
  if (s.value_head) {  // GenericForTokenClassification.score
    ModuleNode score = Leaf("score", "Linear", HeadSegment(L));
    score.params.push_back({"score.weight", 1, s.hidden, HeadSegment(L)});
    score.params.push_back({"score.bias", 1, 1, HeadSegment(L)});
    return Parent("", "ForTokenClassification", {Parent("model", "Model", std::move(inner)), score});
  }
  ModuleNode head = Leaf("lm_head", "Linear", HeadSegment(L));
  if (!s.tied_embeddings) {
    head.params.push_back({"lm_head.weight", s.vocab_size, s.hidden, HeadSegment(L)});
  }
  return Parent("", "ForCausalLM", {Parent("model", "Model", std::move(inner)), head});
}

namespace {
// The attention projections' weights a token multiplies: q, k, v, o (Llama), or MLA's chain
// (model_spec.h MlaSpec: the same matrices as its parameter count, less the norms).
double AttentionWeightsPerToken(const ModelSpec& s) {
  double h = static_cast<double>(s.hidden);
  if (s.mla.enabled()) {
    const MlaSpec& m = s.mla;
    double a = s.num_heads, qd = static_cast<double>(s.q_dim()), ql = static_cast<double>(m.q_lora_rank);
    double kvl = static_cast<double>(m.kv_lora_rank);
    double q = m.q_lora_rank > 0 ? h * ql + ql * qd : h * qd;
    double kv = h * (kvl + static_cast<double>(m.qk_rope_head_dim)) +
                kvl * a * static_cast<double>(m.qk_nope_head_dim + m.v_head_dim);
    return q + kv + static_cast<double>(s.v_dim()) * h;
  }
  double qd = static_cast<double>(s.q_dim()), kvd = static_cast<double>(s.kv_dim());
  return h * qd * 2 + h * kvd * 2;
}
}  // namespace

Flops BlockForwardFlopsPerToken(const ModelSpec& s, int64_t seq_len, int layer) {
  double h = static_cast<double>(s.hidden);
  double attn_w = AttentionWeightsPerToken(s);
  double mats = s.mlp == MlpKind::kSwiGlu ? 3 : 2;
  double mlp_w;
  if (s.MoeLayer(layer)) {
    const MoeSpec& m = s.moe;
    double fe = static_cast<double>(m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : s.ffn_hidden);
    double fs = m.shared_expert_ffn_hidden > 0 ? static_cast<double>(m.shared_expert_ffn_hidden) : fe;
    mlp_w = h * m.num_experts + m.top_k * mats * h * fe + m.num_shared_experts * mats * h * fs;
  } else {
    mlp_w = mats * h * static_cast<double>(s.ffn_hidden);
  }
  return Flops::Of(2 * (attn_w + mlp_w)) + AttentionForwardFlopsPerToken(s, seq_len);
}

// Scores q·k^T over the q/k head dim and probs·v over the value head dim, 2 FLOPs a
// multiply-add each: 4·span·q_dim when they are equal (MLA: 2·span·(a·(nope + rope) + a·v)).
Flops AttentionForwardFlopsPerToken(const ModelSpec& s, int64_t seq_len) {
  return Flops::Of(2 * s.MeanAttentionSpan(seq_len) *
                   static_cast<double>(s.q_dim() + s.v_dim()));
}

Flops HeadForwardFlopsPerToken(const ModelSpec& s) {
  const double outputs = s.value_head ? 1.0 : static_cast<double>(s.vocab_size);
  return Flops::Of(2 * outputs * static_cast<double>(s.hidden));
}

namespace {
// Forward FLOPs per token summed over the blocks: the dense prefix's blocks and the others, each
// kind counted by its layers.
double AllBlocksForwardFlopsPerToken(const ModelSpec& s, int64_t seq_len) {
  const int dense = s.DenseLayers();
  double sum = BlockForwardFlopsPerToken(s, seq_len, s.num_layers - 1).count() * (s.num_layers - dense);
  if (dense > 0) sum += BlockForwardFlopsPerToken(s, seq_len, 0).count() * dense;
  return sum;
}
}  // namespace

int64_t ActiveParamsPerToken(const ModelSpec& s) {
  return static_cast<int64_t>(AllBlocksForwardFlopsPerToken(s, 0) / 2) +
         (s.value_head ? 1 : s.vocab_size) * s.hidden;
}

Flops MeanBlockForwardFlopsPerToken(const ModelSpec& s, int64_t seq_len) {
  return Flops::Of(AllBlocksForwardFlopsPerToken(s, seq_len) / std::max(1, s.num_layers));
}

int64_t FsdpUnit::NumParams() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t FsdpUnit::PaddedShardNumel(int n) const {
  int64_t t = 0;
  for (const auto& p : params) t += p.PaddedShardNumel(n);
  return t;
}

int64_t FsdpUnit::GatheredNumel(int n) const {
  int64_t t = 0;
  for (const auto& p : params) t += p.GatheredNumel(n);
  return t;
}

namespace {

// Units in the making: each parameter goes to the first unit that claims it (PyTorch wraps
// children before their parents, so a nested unit takes its parameters first).
struct UnitBuilder {
  std::set<std::string> taken;
  std::vector<FsdpUnit> units;

  // A unit of `mods` spanning their segments; one that ends up with no parameter is left out.
  void Add(const std::string& name, const std::vector<const ModuleNode*>& mods) {
    FsdpUnit u;
    u.name = name;
    u.first_segment = mods.front()->first_segment;
    u.last_segment = mods.front()->last_segment;
    for (const ModuleNode* m : mods) {
      CollectParams(*m, &taken, &u.params);
      u.first_segment = std::min(u.first_segment, m->first_segment);
      u.last_segment = std::max(u.last_segment, m->last_segment);
    }
    if (!u.params.empty()) units.push_back(std::move(u));
  }
};

// ROLL's wrap_policy.moe_experts (roll/distributed/strategy/fsdp2_strategy.py): fully_shard on
// every module of the listed expert class (e.g. Qwen3MoeMLP) before its decoder layer, so each
// expert is its own unit nested in the block's unit (which keeps router, shared experts).
void AddExpertUnits(const ModuleNode& root, int num_layers, UnitBuilder* b) {
  for (int layer = 0; layer < num_layers; ++layer) {
    for (const auto& part : FindBlock(root, layer)->children) {
      for (const auto& list : part.children) {
        if (!list.is_container) continue;
        for (const auto& expert : list.children) {
          b->Add(expert.name, {&expert});
          b->units.back().is_expert = true;
        }
      }
    }
  }
}

// Expert parallelism (torchtitan apply_fsdp with ep_degree > 1): per MoE layer one unit of the
// ep-local experts as torchtitan's GroupedExperts holds them (models/common/moe: w1 [E, F, H],
// w2 [E, H, F], w3 [E, F, H]; GPT-OSS: gate_up_proj [E, H, 2F], its bias [E, 2F], down_proj
// [E, F, H], its bias [E, H]) with E the local count. The HF per-expert parameters are claimed
// so the block's unit does not take them: this rank holds no other experts.
void AddExpertParallelUnits(const ModelSpec& s, const ModuleNode& root, int ep, UnitBuilder* b) {
  const MoeSpec& m = s.moe;
  const int64_t el = m.num_experts / ep, h = s.hidden;
  const int64_t fe = m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : s.ffn_hidden;
  for (int layer = 0; layer < s.num_layers; ++layer) {
    if (!s.MoeLayer(layer)) continue;
    const ModuleNode* block = FindBlock(root, layer);
    for (const auto& part : block->children) {
      for (const auto& experts : part.children) {
        bool hf_list = experts.is_container;
        bool gpt_oss = m.gpt_oss_experts && experts.type == "Experts";
        if (!hf_list && !gpt_oss) continue;
        std::vector<ParamTensor> claimed;
        CollectParams(experts, &b->taken, &claimed);
        const int seg = experts.first_segment;
        auto tensor = [&](const std::string& name, int64_t d1, int64_t d2) {
          ParamTensor t{experts.name + "." + name, el, d1 * d2, seg};
          t.shard_divisor = ep;
          t.dim1 = d1;
          t.experts_total = m.num_experts;
          return t;
        };
        FsdpUnit u;
        u.name = experts.name;
        u.first_segment = u.last_segment = seg;
        u.expert_parallel = true;
        if (gpt_oss) {
          u.params = {tensor("gate_up_proj", h, 2 * fe), tensor("gate_up_proj_bias", 2 * fe, 1),
                      tensor("down_proj", fe, h), tensor("down_proj_bias", h, 1)};
        } else if (s.mlp == MlpKind::kSwiGlu) {
          u.params = {tensor("w1", fe, h), tensor("w2", h, fe), tensor("w3", fe, h)};
        } else {
          u.params = {tensor("w1", fe, h), tensor("w2", h, fe)};
        }
        if (s.mlp_bias && !gpt_oss) {
          u.params.push_back(tensor("b1", fe, 1));
          u.params.push_back(tensor("b2", h, 1));
        }
        // A claimed frozen / LoRA state is applied to the units later (ApplyTrainability).
        b->units.push_back(std::move(u));
      }
    }
  }
}

// torch/distributed/fsdp/wrap.py _recursive_wrap with size_based_auto_wrap_policy: children first;
// a module is wrapped when the numel not already wrapped below it reaches min_num_params
// (ModuleList/ModuleDict excluded); the root only wraps its children.
void AddSizeBasedUnits(const ModuleNode& root, int64_t min_num_params, UnitBuilder* b) {
  std::function<int64_t(const ModuleNode&, bool)> wrap = [&](const ModuleNode& m, bool only_children) {
    int64_t wrapped = 0;
    for (const auto& c : m.children) wrapped += wrap(c, false);
    int64_t remainder = m.NumParams() - wrapped;
    if (!only_children && !m.is_container && remainder >= min_num_params && remainder > 0) {
      b->Add(m.name, {&m});
      return m.NumParams();
    }
    return wrapped;
  };
  wrap(root, true);
}

// The block policies (block, every:K, ranges) with the optional embedding and head units.
void AddBlockUnits(const ModelSpec& s, const ModuleNode& root, const WrapPolicy& w, UnitBuilder* b) {
  const ModuleNode& inner = root.children.front();
  int L = s.num_layers;
  // A VL model's vision blocks: one unit each under every block policy, as verl's and ROLL's
  // transformer wrap policies wrap the classes in _no_split_modules (Qwen2_5_VLVisionBlock,
  // SiglipEncoderLayer ...); the tower's embeddings, merger and projector stay with the root.
  if (s.vision.enabled()) {
    for (const ModuleNode* list : VisionBlockLists(inner)) {
      for (const auto& blk : list->children) b->Add(blk.name, {&blk});
    }
  }
  if (w.embedding_unit) {
    std::vector<const ModuleNode*> mods;
    for (const auto& c : inner.children) {
      if (c.type == "Embedding") mods.push_back(&c);
    }
    b->Add("model.embed_tokens", mods);
    if (s.tied_embeddings && !b->units.empty()) b->units.back().last_segment = HeadSegment(s.NumBlocks());
  }
  std::vector<std::pair<int, int>> groups;
  if (w.kind == WrapPolicy::Kind::kRanges) {
    groups = w.ranges;
  } else {
    int k = w.kind == WrapPolicy::Kind::kEveryK ? std::max(1, w.every_k) : 1;
    for (int first = 0; first < L; first += k) groups.push_back({first, std::min(L, first + k) - 1});
  }
  if (w.sub_block_units) {
    // ROLL's attention and MLP classes: one unit each per block, in the block's order; its norms
    // stay with the root.
    for (int layer = 0; layer < L; ++layer) {
      for (const auto& part : FindBlock(root, layer)->children) {
        if (!part.children.empty()) b->Add(part.name, {&part});
      }
    }
    groups.clear();
  }
  for (auto [first, last] : groups) {
    std::vector<const ModuleNode*> mods;
    for (int layer = first; layer <= last; ++layer) mods.push_back(FindBlock(root, layer));
    b->Add(first == last ? mods.front()->name
                         : "model.layers." + std::to_string(first) + "-" + std::to_string(last),
           mods);
  }
  if (w.head_unit) b->Add("[model.norm, lm_head]", {&inner.children.back(), &root.children.back()});
}

}  // namespace

std::vector<FsdpUnit> BuildFsdpUnits(const ModelSpec& s, const WrapPolicy& w, int ep) {
  ModuleNode root = BuildModuleTree(s);
  UnitBuilder b;
  if (ep > 1 && s.moe.enabled()) {
    SHARDTUNE_CHECK(s.moe.num_experts % ep == 0) << "ep " << ep << " experts " << s.moe.num_experts;
    AddExpertParallelUnits(s, root, ep, &b);
  } else if (w.expert_units && s.moe.enabled()) {
    AddExpertUnits(root, s.num_layers, &b);
  }
  if (w.kind == WrapPolicy::Kind::kSize) {
    AddSizeBasedUnits(root, w.min_num_params, &b);
  } else {
    AddBlockUnits(s, root, w, &b);
  }
  // The root (fully_shard(model)) takes every parameter no unit claimed.
  FsdpUnit r;
  r.name = "root";
  r.is_root = true;
  r.first_segment = 0;
  r.last_segment = HeadSegment(s.NumBlocks());
  CollectParams(root, &b.taken, &r.params);
  std::vector<FsdpUnit> units = std::move(b.units);
  units.push_back(std::move(r));
  std::stable_sort(units.begin(), units.end(), [](const FsdpUnit& x, const FsdpUnit& y) {
    if (x.first_segment != y.first_segment) return x.first_segment < y.first_segment;
    if (x.last_segment != y.last_segment) return x.last_segment > y.last_segment;
    // the block's unit before its experts (outer first)
    return !(x.is_expert || x.expert_parallel) && (y.is_expert || y.expert_parallel);
  });
  return units;
}

namespace {

void ReplaceFirst(std::string* s, const std::string& from, const std::string& to) {
  size_t at = s->find(from);
  if (at != std::string::npos) s->replace(at, from.size(), to);
}

}  // namespace

std::string GroupedExpertHfModule(const std::string& tensor, bool gated) {
  if (tensor == "w1") return gated ? "gate_proj" : "up_proj";
  if (tensor == "w3") return "up_proj";
  if (tensor == "w2") return "down_proj";
  return "";
}

HfTensor HfParameter(const ModelSpec& spec, const std::string& name, std::vector<int64_t> shape) {
  HfTensor t{name, std::move(shape)};
  const std::string& a = spec.hf_architecture;
  if (!spec.moe.enabled() || t.name.find(".block_sparse_moe.") == std::string::npos) return t;
  if (a == "MixtralForCausalLM") {
    if (t.name.find(".experts.") != std::string::npos) {
      ReplaceFirst(&t.name, ".gate_proj.", ".w1.");
      ReplaceFirst(&t.name, ".up_proj.", ".w3.");
      ReplaceFirst(&t.name, ".down_proj.", ".w2.");
    }
  } else if (a == "Qwen2MoeForCausalLM" || a == "Qwen3MoeForCausalLM") {
    ReplaceFirst(&t.name, ".block_sparse_moe.", ".mlp.");
  } else if (a == "DeepseekV2ForCausalLM" || a == "DeepseekV3ForCausalLM") {
    ReplaceFirst(&t.name, ".block_sparse_moe.", ".mlp.");
    ReplaceFirst(&t.name, ".mlp.shared_expert.", ".mlp.shared_experts.");
  } else if (a == "GptOssForCausalLM") {
    ReplaceFirst(&t.name, ".block_sparse_moe.gate.", ".mlp.router.");
    ReplaceFirst(&t.name, ".block_sparse_moe.", ".mlp.");
    const int64_t E = spec.moe.num_experts, H = spec.hidden;
    const int64_t F = spec.moe.expert_ffn_hidden > 0 ? spec.moe.expert_ffn_hidden : spec.ffn_hidden;
    if (EndsWith(t.name, ".experts.gate_up_proj")) t.shape = {E, H, 2 * F};
    if (EndsWith(t.name, ".experts.down_proj")) t.shape = {E, F, H};
  }
  return t;
}

std::vector<HfTensor> HfBuffersAfter(const ModelSpec& spec, const std::string& hf_name) {
  if (spec.hf_architecture == "DeepseekV3ForCausalLM" && EndsWith(hf_name, ".mlp.gate.weight")) {
    return {{hf_name.substr(0, hf_name.size() - 6) + "e_score_correction_bias", {spec.moe.num_experts}}};
  }
  return {};
}

}  // namespace shardtune::model
