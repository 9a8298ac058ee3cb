// Vision towers (vision.h): checks, parameter counts, the processors' image-to-token rules and a
// vision block as a transformer block.
#include "model/vision.h"

#include <algorithm>
#include <cmath>

#include "model/activations.h"
#include "model/errors.h"
#include "model/model_spec.h"
#include "model/plan.h"

namespace shardtune::model {

const char* ToString(VisionKind k) {
  switch (k) {
    case VisionKind::kNone: return "none";
    case VisionKind::kQwen2Vl: return "qwen2_vl";
    case VisionKind::kQwen25Vl: return "qwen2_5_vl";
    case VisionKind::kQwen3Vl: return "qwen3_vl";
    case VisionKind::kSiglip: return "siglip";
  }
  return "?";
}

int64_t VisionSpec::PatchesPerToken() const {
  if (kind == VisionKind::kSiglip) {
    const int64_t side = patch_size > 0 ? image_size / patch_size : 0;
    return mm_tokens_per_image > 0 ? side * side / mm_tokens_per_image : 1;
  }
  return spatial_merge_size * spatial_merge_size;
}

bool VisionSpec::WindowedBlock(int b) const {
  return kind == VisionKind::kQwen25Vl && window_size > 0 &&
         std::find(fullatt_block_indexes.begin(), fullatt_block_indexes.end(), b) ==
             fullatt_block_indexes.end();
}

int64_t VisionSpec::WindowPatches() const {
  // Qwen2_5_VisionTransformerPretrainedModel.get_window_index: vit_merger_window_size =
  // window_size // spatial_merge_size // patch_size merged tokens a side, each m x m patches.
  if (kind != VisionKind::kQwen25Vl || window_size <= 0 || patch_size <= 0 ||
      spatial_merge_size <= 0) {
    return 0;
  }
  const int64_t merged = window_size / spatial_merge_size / patch_size;
  return merged * merged * spatial_merge_size * spatial_merge_size;
}

std::vector<std::string> VisionSpec::Problems(const std::string& where) const {
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& key, const std::string& expected, const std::string& got) {
    if (!ok) out.push_back(where + ":/vision/" + key + ": expected " + expected + ", got " + got);
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  if (!enabled()) return out;
  expect(depth >= 1 && depth <= 1000, "depth", "integer in [1, 1000]", num(depth));
  expect(hidden >= 1 && hidden <= 65536, "hidden", "integer in [1, 65536]", num(hidden));
  expect(num_heads >= 1, "num_heads", "integer >= 1", num(num_heads));
  if (num_heads >= 1 && hidden >= 1) {
    expect(hidden % num_heads == 0, "hidden",
           "a multiple of num_heads = " + num(num_heads) + " (head_dim = hidden / num_heads)",
           num(hidden));
  }
  expect(intermediate >= 1 && intermediate <= (1 << 20), "intermediate", "integer in [1, 2^20]",
         num(intermediate));
  expect(patch_size >= 1 && patch_size <= 1024, "patch_size", "integer in [1, 1024]", num(patch_size));
  expect(temporal_patch_size >= 1 && temporal_patch_size <= 64, "temporal_patch_size",
         "integer in [1, 64]", num(temporal_patch_size));
  expect(in_channels >= 1 && in_channels <= 64, "in_channels", "integer in [1, 64]", num(in_channels));
  // The caps keep every count of CountVisionParameters inside int64 (a merger's (C m^2)^2 at most
  // 2.8e14, times at most `depth` DeepStack mergers).
  expect(spatial_merge_size >= 1 && spatial_merge_size <= 16, "spatial_merge_size",
         "integer in [1, 16]", num(spatial_merge_size));
  expect(out_hidden >= 1 && out_hidden <= 65536, "out_hidden",
         "integer in [1, 65536] (the text model's hidden size)", num(out_hidden));
  expect(norm_eps > 0 && norm_eps < 1, "norm_eps", "a number in (0, 1)", std::to_string(norm_eps));
  for (int b : fullatt_block_indexes) {
    expect(b >= 0 && b < depth, "fullatt_block_indexes", "block indexes in [0, depth - 1]", num(b));
  }
  for (int b : deepstack_visual_indexes) {
    expect(b >= 0 && b < depth, "deepstack_visual_indexes", "block indexes in [0, depth - 1]", num(b));
  }
  expect(static_cast<int64_t>(deepstack_visual_indexes.size()) <= std::max(0, depth),
         "deepstack_visual_indexes", "at most depth entries (one merger per block)",
         num(static_cast<int64_t>(deepstack_visual_indexes.size())));
  const bool qwen = kind != VisionKind::kSiglip;
  if (qwen) {
    expect(window_size >= 0 && window_size <= (1 << 20), "window_size", "integer in [0, 2^20] (0: no windows)",
           num(window_size));
    expect(kind == VisionKind::kQwen3Vl || num_position_embeddings == 0, "num_position_embeddings",
           "0 outside Qwen3-VL", num(num_position_embeddings));
    if (kind == VisionKind::kQwen3Vl) {
      const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(num_position_embeddings))));
      expect(num_position_embeddings >= 1 && num_position_embeddings <= (1 << 24) &&
                 side * side == num_position_embeddings,
             "num_position_embeddings", "a square >= 1 (the grid it interpolates)",
             num(num_position_embeddings));
    }
    expect(min_pixels >= 1 && max_pixels >= min_pixels, "max_pixels",
           "min_pixels >= 1 and max_pixels >= min_pixels",
           num(min_pixels) + " and " + num(max_pixels));
  } else {
    expect(image_size >= 1 && image_size <= 65536 && patch_size >= 1 && image_size % patch_size == 0,
           "image_size",
           "a multiple of patch_size = " + num(patch_size), num(image_size));
    const int64_t side = patch_size >= 1 ? image_size / patch_size : 0;
    const int64_t tokens = std::clamp<int64_t>(mm_tokens_per_image, 0, int64_t{1} << 24);
    const auto tside = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
    expect(mm_tokens_per_image >= 1 && mm_tokens_per_image == tokens && tside * tside == tokens && tside <= side &&
               side % std::max<int64_t>(1, tside) == 0,
           "mm_tokens_per_image",
           "a square whose side divides the patches a side (" + num(side) + ")",
           num(mm_tokens_per_image));
    expect(temporal_patch_size == 1 && spatial_merge_size == 1, "temporal_patch_size",
           "1 (with spatial_merge_size 1) for SigLIP", num(temporal_patch_size));
  }
  return out;
}

VisionParameterCounts CountVisionParameters(const VisionSpec& v) {
  SHARDTUNE_CHECK(v.enabled() && v.Problems("vision").empty()) << "CountVisionParameters: invalid tower";
  const int64_t c = v.hidden, i = v.intermediate, o = v.out_hidden;
  const int64_t m2 = v.spatial_merge_size * v.spatial_merge_size;
  const int64_t kernel = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size;
  VisionParameterCounts n;
  const bool conv_bias = v.kind == VisionKind::kQwen3Vl || v.kind == VisionKind::kSiglip;
  n.patch_embed = c * kernel + (conv_bias ? c : 0);
  if (v.kind == VisionKind::kQwen3Vl) n.positions = v.num_position_embeddings * c;
  if (v.kind == VisionKind::kSiglip) {
    const int64_t side = v.image_size / v.patch_size;
    n.positions = side * side * c;  // SiglipVisionEmbeddings.position_embedding(num_patches, C)
  }
  // Every tower: qkv (or q, k, v) with biases and an output projection with a bias.
  const int64_t attention = 3 * c * c + 3 * c + c * c + c;
  const bool rms = v.kind == VisionKind::kQwen25Vl;
  const int64_t norm = rms ? c : 2 * c;  // Qwen2RMSNorm weight; nn.LayerNorm weight + bias
  const int64_t mlp = v.kind == VisionKind::kQwen25Vl ? 2 * (c * i + i) + (i * c + c)  // gate, up, down
                                                      : (c * i + i) + (i * c + c);      // fc1, fc2
  n.block = 2 * norm + attention + mlp;
  if (v.kind == VisionKind::kSiglip) {
    n.merger = 2 * c;                  // post_layernorm
    n.projector = c + c * o;           // mm_soft_emb_norm (Gemma3RMSNorm) + mm_input_projection_weight
  } else {
    // The merger: its norm over C, Linear(4C, 4C) and Linear(4C, out) with biases.
    const int64_t w = c * m2;
    n.merger = norm + (w * w + w) + (w * o + o);
    // Qwen3-VL's DeepStack mergers: LayerNorm over 4C (use_postshuffle_norm), the same Linears.
    n.deepstack = static_cast<int64_t>(v.deepstack_visual_indexes.size()) *
                  (2 * w + (w * w + w) + (w * o + o));
  }
  n.total = n.patch_embed + n.positions + v.depth * n.block + n.merger + n.deepstack + n.projector;
  return n;
}

ImageTokens TokensForImage(const VisionSpec& v, int64_t width, int64_t height) {
  ImageTokens t;
  if (v.kind == VisionKind::kSiglip) {
    const int64_t side = v.image_size / v.patch_size;
    t.resized_width = t.resized_height = v.image_size;
    t.patches = side * side;
    t.tokens = v.mm_tokens_per_image;
    return t;
  }
  // image_processing_qwen2_vl.py smart_resize (Python's round is half-to-even; std::nearbyint
  // rounds so under the default rounding mode).
  const double factor = static_cast<double>(v.patch_size * v.spatial_merge_size);
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  double h_bar = std::max(factor, std::nearbyint(h / factor) * factor);
  double w_bar = std::max(factor, std::nearbyint(w / factor) * factor);
  if (h_bar * w_bar > static_cast<double>(v.max_pixels)) {
    const double beta = std::sqrt(h * w / static_cast<double>(v.max_pixels));
    h_bar = std::max(factor, std::floor(h / beta / factor) * factor);
    w_bar = std::max(factor, std::floor(w / beta / factor) * factor);
  } else if (h_bar * w_bar < static_cast<double>(v.min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(v.min_pixels) / (h * w));
    h_bar = std::ceil(h * beta / factor) * factor;
    w_bar = std::ceil(w * beta / factor) * factor;
  }
  t.resized_height = static_cast<int64_t>(h_bar);
  t.resized_width = static_cast<int64_t>(w_bar);
  t.patches = (t.resized_height / v.patch_size) * (t.resized_width / v.patch_size);
  t.tokens = t.patches / (v.spatial_merge_size * v.spatial_merge_size);
  return t;
}

std::vector<std::string> VisionProblems(const ModelSpec& spec, const Plan& plan, const std::string& where) {
  std::vector<std::string> out;
  if (plan.images <= 0 && plan.image_tokens <= 0) return out;
  if (!spec.vision.enabled()) {
    out.push_back(where + ":/images: expected 0 for " + spec.name +
                  " (a text model: no vision tower), got " + std::to_string(plan.images));
    return out;
  }
  const VisionSpec& v = spec.vision;
  if (v.kind == VisionKind::kSiglip && plan.images > 0 &&
      plan.image_tokens != plan.images * v.mm_tokens_per_image) {
    out.push_back(where + ":/image_tokens: expected images x mm_tokens_per_image = " +
                  std::to_string(plan.images) + " x " + std::to_string(v.mm_tokens_per_image) +
                  " (Gemma 3 pools every image to that many tokens), got " +
                  std::to_string(plan.image_tokens));
  }
  return out;
}

VisionLoad VisionLoadOf(const ModelSpec& spec, const Plan& plan, int64_t sequence_len) {
  VisionLoad l;
  if (!spec.vision.enabled() || plan.images <= 0 || plan.image_tokens <= 0) return l;
  l.patches = static_cast<double>(plan.image_tokens) * static_cast<double>(spec.vision.PatchesPerToken());
  l.patches_per_image = l.patches / plan.images;
  // Under Ulysses (cp) a rank holds sequence_len / cp of the text positions but runs the tower
  // over all of its sequences' patches (verl's VL models compute the image embeddings before
  // slicing the sequence), so per token of its slice it sees cp times the patches.
  l.patches_per_token = l.patches * std::max(1, plan.cp) / static_cast<double>(std::max<int64_t>(1, sequence_len));
  return l;
}

namespace {

// The attention span of vision block b: a Qwen2.5-VL window (at most the image) or the image.
double VisionSpan(const VisionSpec& v, int b, const VisionLoad& load) {
  const double image = std::max(1.0, load.patches_per_image);
  return v.WindowedBlock(b) ? std::min(image, static_cast<double>(v.WindowPatches())) : image;
}

bool RecordsGraph(const Trainability& t) {
  return t.input_requires_grad || t.all_params_train || !t.trainable.empty() || !t.lora_modules.empty();
}

// Multiplies every per-token figure of a ledger by r (kernel counts stay).
void Scale(ActivationLedger* l, double r) {
  for (auto& s : l->saved) s.bytes_per_token *= r;
  l->saved_per_token *= r;
  l->forward_peak_per_token *= r;
  l->backward_peak_per_token *= r;
  for (auto& p : l->backward_profile) p.live_per_token *= r;
  l->elementwise_traffic_per_token *= r;
}

}  // namespace

BlockActivations VisionBlockActivations(const ModelSpec& spec, const ActivationOptions& text_opt,
                                        const Trainability& t, int b, const VisionLoad& load) {
  const VisionSpec& v = spec.vision;
  SHARDTUNE_CHECK(v.enabled() && b >= 0 && b < v.depth) << "vision block " << b;
  ActivationOptions o = text_opt;
  o.seq_len = static_cast<int64_t>(VisionSpan(v, b, load));
  o.cp = 1;  // the tower is not sequence-parallel (Ulysses splits the text model's attention)
  o.ep = 1;
  o.liger = LigerKernels{};
  o.padding_mask = false;
  o.modeling = Modeling::kHf;
  BlockActivations a = ComputeBlockActivations(VisionBlockSpec(spec), o, t);
  if (RecordsGraph(t)) {
    // What the tower's other modules save, per patch (e: the compute dtype's bytes; derivatives
    // as in model/activation_recipes.cc: a Linear saves its input for its weight's gradient,
    // F.gelu its input, LayerNorm its input and fp32 mean / rstd per row, HF's RMSNorm its fp32
    // input copy and the normalised input in the compute dtype).
    const double e = static_cast<double>(BytesPerElement(o.dtype)), c = static_cast<double>(v.hidden);
    const double m2 = static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
    const bool rms = v.kind == VisionKind::kQwen25Vl;
    std::vector<SavedTensor> extra;
    if (b == 0 && (t.all_params_train || !t.trainable.empty())) {
      const double kernel = static_cast<double>(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size);
      // The patch embedding casts the fp32 pixel values to the weight's dtype and the conv saves
      // that copy for its weight gradient; in fp32 the cast returns the pixel values themselves,
      // which the walk counts with the batch (Walker: the images' pixel values).
      if (e < 4.0) extra.push_back({"patch embedding input (pixels in the compute dtype)", kernel * e});
      // Qwen3-VL's fast_pos_embed_interpolate: pos_embed(idx) [4, N, C] * weights [4, N, 1]:
      // the embedding saves its int64 indices, the product the weights.
      if (v.kind == VisionKind::kQwen3Vl) extra.push_back({"pos_embed indices (int64) and weights", 4 * 8 + 4 * e});
    }
    const double merger_linears = 3 * c * e;  // fc1's input, GELU's input, fc2's input (per patch)
    for (int k : v.deepstack_visual_indexes) {
      if (k != b) continue;
      // A DeepStack merger: LayerNorm over 4C per token (its input, C e per patch), then the MLP.
      extra.push_back({"DeepStack merger (norm over 4C, fc1, GELU, fc2 inputs)", c * e + 8 / m2 + merger_linears});
    }
    if (b == v.depth - 1) {
      if (v.kind == VisionKind::kSiglip) {
        // post_layernorm; Gemma3MultiModalProjector: avg_pool2d saves its input, then per pooled
        // token Gemma3RMSNorm (fp32 input and fp32 normalised product) and the projection's input.
        const double ppt = static_cast<double>(v.PatchesPerToken());
        extra.push_back({"post_layernorm input and stats", c * e + 8});
        extra.push_back({"projector avg_pool2d input", c * e});
        extra.push_back({"projector mm_soft_emb_norm (fp32) and projection input", (8 * c + c * e) / ppt});
      } else {
        // Qwen2RMSNorm: the fp32 input copy (4 bytes) and the normalised input (e) a feature.
        extra.push_back({"merger norm", rms ? (4 + e) * c : c * e + 8});
        extra.push_back({"merger fc1, GELU, fc2 inputs", merger_linears});
      }
    }
    if (v.kind == VisionKind::kQwen2Vl) {
      // Inside the block (recomputed with it): Qwen2-VL's hidden_act quick_gelu
      // (QuickGELUActivation: x * torch.sigmoid(1.702 * x)) saves the sigmoid's output beside x,
      // one [patches, intermediate] tensor more than F.gelu, which saves x alone.
      const SavedTensor s{"mlp quick_gelu's sigmoid output", static_cast<double>(v.intermediate) * e};
      a.full.saved.push_back(s);
      a.full.saved_per_token += s.bytes_per_token;
      a.full.forward_peak_per_token += s.bytes_per_token;
    }
    for (const SavedTensor& x : extra) {
      a.full.saved.push_back(x);
      a.full.saved_per_token += x.bytes_per_token;
      a.full.forward_peak_per_token += x.bytes_per_token;
      a.checkpoint_input_per_token += x.bytes_per_token;  // not in a checkpointed block
      a.selective_per_token += x.bytes_per_token;
    }
  }
  const double r = load.patches_per_token;
  Scale(&a.full, r);
  a.checkpoint_input_per_token *= r;
  a.selective_per_token *= r;
  a.selective_recompute_matmul_flops_per_token *= r;
  return a;
}

VisionBlockFlops VisionBlockForwardFlops(const ModelSpec& spec, int b, const VisionLoad& load) {
  const VisionSpec& v = spec.vision;
  const double c = static_cast<double>(v.hidden), i = static_cast<double>(v.intermediate);
  const double out = static_cast<double>(v.out_hidden);
  const double mats = v.kind == VisionKind::kQwen25Vl ? 3 : 2;
  double weights = 4 * c * c + mats * c * i;  // per patch: qkv, proj, the MLP
  const double w = c * static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double ppt = static_cast<double>(v.PatchesPerToken());
  if (b == 0) weights += c * static_cast<double>(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size);
  for (int k : v.deepstack_visual_indexes) {
    if (k == b) weights += (w * w + w * out) / ppt;
  }
  if (b == v.depth - 1) weights += v.kind == VisionKind::kSiglip ? c * out / ppt : (w * w + w * out) / ppt;
  VisionBlockFlops f;
  f.matmul = 2 * weights * load.patches_per_token;
  f.attention = 4 * VisionSpan(v, b, load) * c * load.patches_per_token;
  return f;
}

ModelSpec VisionBlockSpec(const ModelSpec& spec) {
  const VisionSpec& v = spec.vision;
  SHARDTUNE_CHECK(v.enabled()) << "VisionBlockSpec of a model without a vision tower: " << spec.name;
  ModelSpec b;
  b.name = spec.name + " vision block";
  b.num_layers = 1;
  b.hidden = v.hidden;
  b.num_heads = b.num_kv_heads = v.num_heads;
  b.head_dim = v.head_dim();
  b.ffn_hidden = v.intermediate;
  b.vocab_size = 1;
  b.max_seq_len = kRotarySeqLenCap;
  b.norm = v.kind == VisionKind::kQwen25Vl ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  b.norm_bias = b.norm == NormKind::kLayerNorm;
  b.mlp = v.kind == VisionKind::kQwen25Vl ? MlpKind::kSwiGlu : MlpKind::kGelu;
  b.qkv_bias = b.attn_out_bias = b.mlp_bias = true;
  // Qwen's qkv Linear(C, 3C) is one projection whose q, k, v are views (unbind) of its output;
  // SigLIP has q_proj, k_proj and v_proj.
  b.fused_qkv = v.kind != VisionKind::kSiglip;
  b.positions = PositionKind::kRotary;  // Qwen's 2-D rotary in each block; SigLIP adds its table
                                        // before the blocks (no per-block effect either way)
  b.norm_eps = v.norm_eps;
  b.FillDefaults();
  return b;
}

}  // namespace shardtune::model
