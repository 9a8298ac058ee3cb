// A VL model's vision tower in the executor (issue #43): Qwen2-VL's and Qwen2.5-VL's patch ViTs
// as transformers computes them (modeling_qwen2_vl.py Qwen2VisionTransformerPretrainedModel,
// modeling_qwen2_5_vl.py Qwen2_5_VisionTransformerPretrainedModel, read at transformers commit
// efa7189), and the scatter of their merged output into the text embeddings
// (Qwen2_5_VLModel.forward). Parameter names and shapes are model/module_tree.cc's.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "executor/nn/transformer.h"
#include "executor/nn/transformer_pieces.h"
#include "model/errors.h"
#include "model/module_tree.h"
#include "model/vision.h"

namespace shardtune::exec {
namespace {

using internal::Get;
using internal::RotateHalf;

// rot_pos_emb's position ids of one image of h x w patches (t = 1): each patch's (row, column),
// listed in the processor's order, merge group by merge group (m x m patches each).
void AppendPositions(int64_t h, int64_t w, int64_t m, std::vector<int64_t>* rows,
                     std::vector<int64_t>* cols) {
  for (int64_t gr = 0; gr < h / m; ++gr) {
    for (int64_t gc = 0; gc < w / m; ++gc) {
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < m; ++c) {
          rows->push_back(gr * m + r);
          cols->push_back(gc * m + c);
        }
      }
    }
  }
}

// get_window_index of one image of gh x gw merge groups, windows of `ws` x `ws` groups
// (vit_merger_window_size = window_size / spatial_merge_size / patch_size): the groups window by
// window (windows row-major, groups row-major inside each), offset by `first`, and each
// non-empty window's group count. HF pads the grid with -100 to whole windows (a full extra row
// or column of windows when a side is already a multiple) and drops the padding and the empty
// windows (unique_consecutive on cu_window_seqlens): the same windows as these.
void AppendWindows(int64_t gh, int64_t gw, int64_t ws, int64_t first, std::vector<int64_t>* index,
                   std::vector<int64_t>* groups_per_window) {
  for (int64_t wr = 0; wr * ws < gh; ++wr) {
    for (int64_t wc = 0; wc * ws < gw; ++wc) {
      int64_t n = 0;
      for (int64_t r = wr * ws; r < std::min(gh, (wr + 1) * ws); ++r) {
        for (int64_t c = wc * ws; c < std::min(gw, (wc + 1) * ws); ++c) {
          index->push_back(first + r * gw + c);
          ++n;
        }
      }
      if (n > 0) groups_per_window->push_back(n);
    }
  }
}


}  // namespace

at::Tensor MropePositionIds(const at::Tensor& image_mask, const std::vector<std::pair<int64_t, int64_t>>& grids,
                            int64_t merge) {
  SHARDTUNE_CHECK(image_mask.is_cpu() && image_mask.dim() == 2) << "a host mask [B, S]";
  const at::Tensor mask = image_mask.to(at::kBool).contiguous();
  const int64_t B = mask.size(0), S = mask.size(1);
  const bool* m = mask.data_ptr<bool>();
  std::vector<int64_t> pos(static_cast<size_t>(3 * B * S));
  auto at3 = [&](int r, int64_t b, int64_t s) -> int64_t& { return pos[static_cast<size_t>((r * B + b) * S + s)]; };
  size_t image = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t next = 0;  // st_idx: the position after everything so far
    for (int64_t s = 0; s < S;) {
      if (!m[b * S + s]) {
        for (int r = 0; r < 3; ++r) at3(r, b, s) = next;
        ++next;
        ++s;
        continue;
      }
      SHARDTUNE_CHECK(image < grids.size()) << "more image tokens than images";
      const int64_t gh = grids[image].first / merge, gw = grids[image].second / merge;
      ++image;
      SHARDTUNE_CHECK(s + gh * gw <= S) << "an image's tokens run past the sequence";
      for (int64_t i = 0; i < gh * gw; ++i) {
        at3(0, b, s + i) = next;  // llm_grid_t = 1: the temporal index is 0
        at3(1, b, s + i) = next + i / gw;
        at3(2, b, s + i) = next + i % gw;
      }
      next += std::max(gh, gw);
      s += gh * gw;
    }
  }
  SHARDTUNE_CHECK(image == grids.size()) << "images without tokens";
  return at::tensor(pos, at::TensorOptions().dtype(at::kLong)).view({3, B, S});
}

std::pair<at::Tensor, at::Tensor> Transformer::MropeCosSin(int64_t B, int64_t S, const at::Tensor& like) const {
  const int64_t D = spec_.head_dim;
  if (!mrope_cos_.defined() || mrope_cos_.size(1) != B || mrope_cos_.size(2) != S) {
    // Qwen2_5_VLRotaryEmbedding.forward: freqs = inv_freq (fp32) x position_ids per row, emb =
    // cat(freqs, freqs), cos and sin in fp32, cast to the compute dtype; [3, B, S, D].
    at::NoGradGuard no_grad;
    const auto f32 = like.options().dtype(at::kFloat);
    at::Tensor pos = vision_.images.position_ids.defined()
                         ? vision_.images.position_ids.to(like.device())
                         : at::arange(S, f32.dtype(at::kLong)).view({1, 1, S}).expand({3, B, S});
    SHARDTUNE_CHECK(pos.size(1) == B && pos.size(2) == S) << "M-RoPE positions for " << B << " x " << S;
    at::Tensor freqs = pos.to(at::kFloat).unsqueeze(-1) * InverseFrequencies(D, f32);  // [3, B, S, D/2]
    at::Tensor emb = at::cat({freqs, freqs}, -1);
    mrope_cos_ = emb.cos().to(like.scalar_type());
    mrope_sin_ = emb.sin().to(like.scalar_type());
  }
  // apply_multimodal_rotary_pos_emb: mrope_section * 2 splits D; split i takes row i % 3.
  auto sections = [&](const at::Tensor& t) {
    std::vector<at::Tensor> parts;
    int64_t start = 0;
    for (int i = 0; i < 6; ++i) {
      const int64_t n = spec_.mrope_section[static_cast<size_t>(i % 3)];
      parts.push_back(t[i % 3].narrow(-1, start, n));
      start += n;
    }
    return at::cat(parts, -1).unsqueeze(1);  // [B, 1, S, D]
  };
  return {sections(mrope_cos_), sections(mrope_sin_)};
}

void Transformer::SetImages(ImageBatch images) const {
  vision_ = VisionState{};
  mrope_cos_ = at::Tensor();
  mrope_sin_ = at::Tensor();
  if (images.empty()) return;
  const model::VisionSpec& v = spec_.vision;
  SHARDTUNE_CHECK(nv_ > 0) << "images for a model without a vision tower";
  const int64_t m = v.spatial_merge_size, m2 = m * m, D = v.head_dim();
  std::vector<int64_t> rows, cols, index, windows;
  int64_t patches = 0;
  for (const auto& [h, w] : images.grids) {
    SHARDTUNE_CHECK(h % m == 0 && w % m == 0 && h > 0 && w > 0)
        << "image grid " << h << " x " << w << " patches: sides must be multiples of " << m;
    AppendPositions(h, w, m, &rows, &cols);
    if (v.window_size > 0) {
      const int64_t ws = std::max<int64_t>(1, v.window_size / m / v.patch_size);
      AppendWindows(h / m, w / m, ws, patches / m2, &index, &windows);
    } else {
      for (int64_t g = 0; g < h * w / m2; ++g) index.push_back(patches / m2 + g);
      windows.push_back(h * w / m2);
    }
    vision_.image_lengths.push_back(h * w);
    patches += h * w;
  }
  SHARDTUNE_CHECK(images.pixel_values.dim() == 2 && images.pixel_values.size(0) == patches)
      << "pixel values for " << patches << " patches";
  // (Checked where the mask is on the host: on a GPU the count would cost a sync per micro-batch;
  // Trainer::Images makes both from the same layout.)
  SHARDTUNE_CHECK(!images.image_mask.is_cpu() || images.image_mask.sum().item<int64_t>() == patches / m2)
      << "the image tokens must be the merged patches, " << patches / m2;
  for (int64_t g : windows) vision_.window_lengths.push_back(g * m2);
  const at::Device device = images.pixel_values.device();
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  vision_.window_index = at::tensor(index, i64).to(device);
  vision_.reverse_index = at::argsort(vision_.window_index);
  {
    // Qwen2_5_VisionRotaryEmbedding(head_dim / 2), theta 10000: inv_freq [D / 4]; a patch's
    // rotary angles are cat(freqs[row], freqs[col]) [D / 2], then emb = cat(those, those) [D];
    // position_embeddings = (emb.cos(), emb.sin()) in fp32, in window order.
    at::NoGradGuard no_grad;
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    const int64_t dim = D / 2;
    at::Tensor inv = at::pow(10000.0, at::arange(0, dim, 2, f32) / static_cast<double>(dim)).reciprocal();
    at::Tensor r = at::tensor(rows, i64).to(device).to(at::kFloat), c = at::tensor(cols, i64).to(device).to(at::kFloat);
    at::Tensor angles = at::cat({at::outer(r, inv), at::outer(c, inv)}, -1);  // [P, D/2]
    angles = angles.view({patches / m2, m2, dim}).index_select(0, vision_.window_index).view({patches, dim});
    at::Tensor emb = at::cat({angles, angles}, -1);  // [P, D]
    vision_.cos = emb.cos();
    vision_.sin = emb.sin();
  }
  vision_.images = std::move(images);
}

bool Transformer::Skips(int segment) const { return IsVisionSegment(segment) && vision_.images.empty(); }

at::Tensor Transformer::EnterSegment(const ParamTable& p, int segment, const at::Tensor& x) const {
  if (segment != 1 || nv_ == 0) return x;
  const model::VisionSpec& v = spec_.vision;
  vision_.text_embeds = x;
  // Qwen2_5_VisionPatchEmbed: the flattened patches viewed as [P, C_in, T, p, p] and cast to the
  // weight's dtype, a Conv3d whose kernel is its stride and the whole patch: x [P, K] @ W^T
  // with W [C, K] (module_tree.cc's layout of the Conv3d weight); no bias in Qwen2/2.5-VL.
  const at::Tensor& w = Get(p, "model.visual.patch_embed.proj.weight");
  at::Tensor h = at::matmul(vision_.images.pixel_values.to(w.scalar_type()), w.t());  // [P, C]
  // hidden_states[window_index] at merge-group granularity.
  const int64_t P = h.size(0), m2 = v.spatial_merge_size * v.spatial_merge_size;
  return h.view({P / m2, m2, v.hidden}).index_select(0, vision_.window_index).view({P, v.hidden});
}

at::Tensor Transformer::LeaveSegment(const ParamTable& p, int segment, const at::Tensor& y) const {
  if (segment != nv_ || nv_ == 0) return y;
  const model::VisionSpec& v = spec_.vision;
  // Qwen2_5_VLPatchMerger / PatchMerger: ln_q over C, the m^2 patches of a group as one row
  // [P / m^2, m^2 C], Linear, GELU (nn.GELU: exact), Linear to the text width.
  const std::string mg = "model.visual.merger";
  const int64_t w = v.hidden * v.spatial_merge_size * v.spatial_merge_size;
  at::Tensor n = VisionNorm(p, mg + ".ln_q", y).view({-1, w});
  at::Tensor h = at::linear(n, Get(p, mg + ".mlp.0.weight"), Get(p, mg + ".mlp.0.bias"));
  h = internal::GeluPiece({h}, 0.0);
  h = at::linear(h, Get(p, mg + ".mlp.2.weight"), Get(p, mg + ".mlp.2.bias"));  // [T_img, H]
  // hidden_states[argsort(window_index)]: back to image order; then Qwen2_5_VLModel.forward:
  // image_embeds.to(inputs_embeds.dtype), inputs_embeds.masked_scatter(image_mask expanded over
  // the hidden size, image_embeds).
  h = h.index_select(0, vision_.reverse_index);
  at::Tensor text = std::move(vision_.text_embeds);
  vision_.text_embeds = at::Tensor();
  at::Tensor mask = vision_.images.image_mask.unsqueeze(-1).expand_as(text);
  if (!h.requires_grad()) {
    // No graph through the tower (frozen, or no grad): nothing keeps its position embeddings,
    // which Qwen2_5_VisionTransformerPretrainedModel.forward holds as locals until it returns.
    vision_.cos = at::Tensor();
    vision_.sin = at::Tensor();
  }
  return text.masked_scatter(mask, h.to(text.scalar_type()));
}

at::Tensor Transformer::VisionNorm(const ParamTable& p, const std::string& name, const at::Tensor& x) const {
  const model::VisionSpec& v = spec_.vision;
  if (v.kind == model::VisionKind::kQwen25Vl) return internal::RmsNormPiece({x, Get(p, name + ".weight")}, v.norm_eps);
  return internal::LayerNormPiece({x, Get(p, name + ".weight"), Get(p, name + ".bias")}, v.norm_eps);
}

at::Tensor Transformer::VisionBlock(const ParamTable& p, int b, const at::Tensor& x) const {
  const model::VisionSpec& v = spec_.vision;
  const std::string pre = model::VisionBlockName(spec_, b);
  // hidden_states + attn(norm1(hidden_states)); hidden_states + mlp(norm2(hidden_states)).
  at::Tensor qkv = Proj(p, pre + ".attn.qkv", VisionNorm(p, pre + ".norm1", x), true, false);
  at::Tensor h = x + Proj(p, pre + ".attn.proj", VisionAttention(b, qkv), true, false);
  at::Tensor n = VisionNorm(p, pre + ".norm2", h);
  at::Tensor mlp;
  if (v.kind == model::VisionKind::kQwen25Vl) {
    // Qwen2_5_VLMLP(bias=True): down_proj(silu(gate_proj(x)) * up_proj(x)).
    at::Tensor g = Proj(p, pre + ".mlp.gate_proj", n, true, false);
    at::Tensor u = Proj(p, pre + ".mlp.up_proj", n, true, false);
    mlp = Proj(p, pre + ".mlp.down_proj", internal::SwiGluPiece({g, u}, 0.0), true, false);
  } else {
    // Qwen2-VL's VisionMlp: fc2(act(fc1(x))) with hidden_act quick_gelu (QuickGELUActivation:
    // x * sigmoid(1.702 x), as written: sigmoid's output and x are what backward keeps).
    at::Tensor f = Proj(p, pre + ".mlp.fc1", n, true, false);
    mlp = Proj(p, pre + ".mlp.fc2", f * at::sigmoid(1.702 * f), true, false);
  }
  return h + mlp;
}

at::Tensor Transformer::VisionAttention(int b, const at::Tensor& qkv) const {
  const model::VisionSpec& v = spec_.vision;
  const int64_t P = qkv.size(0), a = v.num_heads, D = v.head_dim();
  // qkv(hidden).reshape(seq, 3, heads, -1).permute(1, 0, 2, 3).unbind(0): q, k, v [P, a, D].
  std::vector<at::Tensor> parts = qkv.view({P, 3, a, D}).permute({1, 0, 2, 3}).unbind(0);
  // apply_rotary_pos_emb_vision: q and k in fp32, (x * cos) + (rotate_half(x) * sin), cast back.
  auto rotary = [&](const at::Tensor& t) {
    at::Tensor f = t.to(at::kFloat);
    at::Tensor out = f * vision_.cos.unsqueeze(-2) + RotateHalf(f) * vision_.sin.unsqueeze(-2);
    return out.to(t.scalar_type());
  };
  // [P, a, D] -> [a, P, D] (transpose(0, 1).unsqueeze(0) without the batch of one).
  at::Tensor q = rotary(parts[0]).transpose(0, 1), k = rotary(parts[1]).transpose(0, 1);
  at::Tensor val = parts[2].transpose(0, 1);
  // Attention within each chunk of cu_seqlens (an image) or cu_window_seqlens (a Qwen2.5-VL
  // window): HF's eager and SDPA paths split the sequence and attend chunk by chunk; each run of
  // equal-length chunks here is one batch [n, a, s, D], as flash attention's varlen kernel keeps
  // the chunks apart in one call.
  const std::vector<int64_t>& lengths = v.WindowedBlock(b) ? vision_.window_lengths : vision_.image_lengths;
  std::vector<at::Tensor> outs;
  int64_t end = 0;
  for (const internal::EqualRun& r : internal::EqualRuns(lengths)) {
    auto run = [&](const at::Tensor& t) { return t.narrow(1, r.start, r.count * r.length).view({a, r.count, r.length, D}).transpose(0, 1); };
    at::Tensor o = Core(run(q), run(k), run(val), 0, {}, /*causal=*/false);  // [n, a, s, D]
    outs.push_back(o.transpose(1, 2).reshape({r.count * r.length, a * D}));
    end = r.start + r.count * r.length;
  }
  SHARDTUNE_CHECK(end == P) << "attention chunks cover " << end << " of " << P << " patches";
  return outs.size() == 1 ? outs[0] : at::cat(outs, 0);
}

}  // namespace shardtune::exec
