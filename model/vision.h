// The vision tower of a vision-language model (README.md "Architecture", issue #43): Qwen2-VL's,
// Qwen2.5-VL's and Qwen3-VL's patch ViTs with their patch mergers, and Gemma 3's SigLIP encoder
// with its multi-modal projector. What transformers builds (modeling_qwen2_vl.py,
// modeling_qwen2_5_vl.py, modeling_qwen3_vl.py, modeling_siglip.py, modeling_gemma3.py), how many
// patches and tokens an image becomes (the image processors' resize rules), and one vision block
// as a transformer block the activation recipes can walk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtune::model {

struct ModelSpec;
struct Plan;
struct BlockActivations;
struct ActivationOptions;
struct Trainability;

enum class VisionKind {
  kNone,
  // Qwen2VisionTransformerPretrainedModel: LayerNorm blocks, fused qkv (bias), GELU MLP fc1/fc2
  // (quick_gelu), Conv3d patch embedding without bias, PatchMerger (LayerNorm ln_q, Linear 4C->4C,
  // GELU, Linear 4C->out).
  kQwen2Vl,
  // Qwen2_5_VisionTransformerPretrainedModel: RMSNorm blocks, fused qkv (bias), SwiGLU MLP with
  // biases, Conv3d without bias, Qwen2_5_VLPatchMerger (RMSNorm ln_q); window attention except in
  // fullatt_block_indexes.
  kQwen25Vl,
  // Qwen3VLVisionModel: LayerNorm blocks, fused qkv (bias), GELU-tanh MLP linear_fc1/fc2 with
  // biases, Conv3d with bias, a learned position table (num_position_embeddings, bilinearly
  // interpolated), the merger (LayerNorm norm) and one DeepStack merger per
  // deepstack_visual_indexes (LayerNorm over the merged 4C), whose outputs are added to the first
  // decoder layers' hidden states at the image positions.
  kQwen3Vl,
  // Gemma 3: SiglipVisionModel (LayerNorm blocks, q/k/v/out with biases, GELU-tanh MLP fc1/fc2,
  // Conv2d patch embedding with bias, a learned position table, post_layernorm; no pooling head)
  // and Gemma3MultiModalProjector (AvgPool2d to mm_tokens_per_image, Gemma3RMSNorm
  // mm_soft_emb_norm, mm_input_projection_weight [C, text hidden]).
  kSiglip,
};
const char* ToString(VisionKind k);

struct VisionSpec {
  VisionKind kind = VisionKind::kNone;
  int depth = 0;                // vision blocks
  int64_t hidden = 0;           // C: the tower's width (Qwen2-VL's embed_dim)
  int num_heads = 0;
  int64_t intermediate = 0;     // the MLP's inner size
  int64_t patch_size = 14;      // pixels per patch side
  int64_t temporal_patch_size = 1;  // frames per patch (Qwen: 2; an image is repeated to fill it)
  int64_t in_channels = 3;
  int64_t spatial_merge_size = 1;   // Qwen: m x m patches become one token (2)
  int64_t out_hidden = 0;       // the text model's hidden size the tokens are projected to
  // Qwen2.5-VL: window attention over window_size x window_size pixels (112: 8 x 8 patches) in
  // every block but fullatt_block_indexes, which attend over the whole image.
  int64_t window_size = 0;
  std::vector<int> fullatt_block_indexes;
  // Qwen3-VL: the learned position table's rows and the blocks whose outputs DeepStack injects.
  int64_t num_position_embeddings = 0;
  std::vector<int> deepstack_visual_indexes;
  // SigLIP (Gemma 3): the square input side in pixels (896) and the tokens an image becomes after
  // the projector's average pooling (256).
  int64_t image_size = 0;
  int64_t mm_tokens_per_image = 0;
  double norm_eps = 1e-6;
  std::string hidden_act;  // as the config names it (no effect on memory or time)
  // The image processor's pixel bounds (Qwen: smart_resize's min_pixels / max_pixels).
  int64_t min_pixels = 0, max_pixels = 0;

  bool enabled() const { return kind != VisionKind::kNone; }
  int64_t head_dim() const { return num_heads > 0 ? hidden / num_heads : 0; }
  // Patches (the vision blocks' sequence) per token the text model sees: m^2 for Qwen's merger,
  // (image_size / patch)^2 / mm_tokens_per_image for SigLIP's pooling (16 in Gemma 3).
  int64_t PatchesPerToken() const;
  // Block `b` attends within windows (Qwen2.5-VL's windowed blocks).
  bool WindowedBlock(int b) const;
  // Patches in one attention window (Qwen2.5-VL: (window_size / patch)^2 = 64), 0 without windows.
  int64_t WindowPatches() const;
  // Every problem (empty when valid), "where:/vision/key: expected ..., got ...".
  std::vector<std::string> Problems(const std::string& where) const;
};

// Parameter counts of the tower by part, in elements (closed forms from the modules the modeling
// files build; the tests write the same formulas out and check the published totals).
struct VisionParameterCounts {
  int64_t patch_embed = 0;  // Conv3d / Conv2d weight (and bias)
  int64_t positions = 0;    // Qwen3-VL pos_embed, SigLIP position_embedding
  int64_t block = 0;        // one vision block
  int64_t merger = 0;       // Qwen's merger (+ SigLIP's post_layernorm)
  int64_t deepstack = 0;    // all of Qwen3-VL's DeepStack mergers
  int64_t projector = 0;    // Gemma 3's multi-modal projector
  int64_t total = 0;
};
// REQUIRES vision.Problems("") empty and enabled().
VisionParameterCounts CountVisionParameters(const VisionSpec& vision);

// An image of width x height pixels as the model's processor resizes it: patches the tower sees
// and tokens the text model sees.
struct ImageTokens {
  int64_t resized_width = 0, resized_height = 0;
  int64_t patches = 0;
  int64_t tokens = 0;
};
// Qwen2-VL / Qwen2.5-VL / Qwen3-VL: smart_resize (image_processing_qwen2_vl.py): each side rounded
// to a multiple of factor = patch x merge, then scaled by sqrt(pixels / max_pixels) (floor) or
// sqrt(min_pixels / pixels) (ceil) into [min_pixels, max_pixels]; one temporal patch (the image is
// repeated temporal_patch_size times); tokens = patches / merge^2. Gemma 3 (SigLIP): every image
// is resized to image_size x image_size (Gemma3ImageProcessor without pan-and-scan): its patches
// and mm_tokens_per_image tokens.
ImageTokens TokensForImage(const VisionSpec& vision, int64_t width, int64_t height);

// One vision block as a transformer block (the fields activation recipes and FLOP counts read):
// hidden C, num_heads = num_kv_heads, ffn intermediate, the tower's norm, MLP kind and biases,
// Qwen's fused qkv, rotary (2-D, Qwen) or no positions in the block (SigLIP). vocab_size and
// num_layers are placeholders (1) and the text head is not part of it.
ModelSpec VisionBlockSpec(const ModelSpec& spec);

// Problems of the plan's images for this model, "where:/images: expected ..., got ...": images
// need a vision tower; Gemma 3's images are mm_tokens_per_image tokens each. Empty when none.
std::vector<std::string> VisionProblems(const ModelSpec& spec, const Plan& plan, const std::string& where);

// The tower's work per sequence: patches in all (image_tokens x PatchesPerToken), per image (its
// attention span where no window applies), and per token of the sequence (what scales the
// vision blocks' per-token ledgers onto the walk's text tokens: a rank's tokens, B x S / cp).
struct VisionLoad {
  double patches = 0;
  double patches_per_image = 0;
  double patches_per_token = 0;
  bool runs() const { return patches > 0; }
};
// REQUIRES VisionProblems empty; `sequence_len`: the tokens one sequence holds
// (Plan::AttentionSeqLen of the resolved length).
VisionLoad VisionLoadOf(const ModelSpec& spec, const Plan& plan, int64_t sequence_len);

// What vision block `b` (0-based) records, per token of the text sequence (the walk multiplies
// by its tokens): the block as a transformer block over its patches (VisionBlockSpec through the
// block recipes at the attention span of an image, or of a Qwen2.5-VL window), plus what the
// tower's other modules save, on the block they run with: the patch embedding's input (block 0,
// when its weight trains), Qwen3-VL's interpolated position lookup (block 0), each DeepStack
// merger (after its block), and the merger or SigLIP's post-norm, pooling and projector (the last
// block). Scaled by load.patches_per_token. `text_opt`: the plan's activation options.
BlockActivations VisionBlockActivations(const ModelSpec& spec, const ActivationOptions& text_opt,
                                        const Trainability& t, int b, const VisionLoad& load);

// Forward FLOPs of vision block `b` per token of the text sequence: its projections and MLP (and
// the patch embedding, mergers and projector on the blocks they run with), 2 a multiply-add, and
// its attention, 4 x span x C (Narayanan et al. 2021 eq. 3's convention, full span).
struct VisionBlockFlops {
  double matmul = 0;
  double attention = 0;
};
VisionBlockFlops VisionBlockForwardFlops(const ModelSpec& spec, int b, const VisionLoad& load);

}  // namespace shardtune::model
