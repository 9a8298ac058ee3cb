// Vision-language models (model/vision.h, issue #43): the published configs of Qwen2-VL,
// Qwen2.5-VL, Qwen3-VL and Gemma 3 read with their vision towers; parameter counts written out
// here from the modules transformers builds and checked against the published totals; the
// processors' image-to-token rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hf_test_util.h"
#include "model/errors.h"
#include "model/activations.h"
#include "model/hf_config.h"
#include "model/model_spec_json.h"
#include "model/module_tree.h"
#include "model/plan.h"
#include "model/trainable.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "model/vision.h"

namespace shardtune::model {
namespace {

using testing_util::Data;
using testing_util::ExpectEachImportFails;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

ModelSpec Import(const std::string& file, std::vector<std::string>* warnings = nullptr) {
  return ReadHfConfigFile(Data(file), warnings);
}

// One Qwen2 / Qwen2.5 text model (Qwen2Model: q/k/v biases, no o bias, SwiGLU, two RMSNorms a
// block, final norm, untied or tied head).
double Qwen2Text(double L, double H, double a, double kv, double F, double V, bool tied) {
  const double d = H / a;
  const double block = (H * a * d + a * d) + 2 * (H * kv * d + kv * d) + a * d * H + 3 * H * F + 2 * H;
  return V * H + L * block + H + (tied ? 0 : V * H);
}

// Qwen2.5-VL's tower (modeling_qwen2_5_vl.py): Conv3d [C, 3, 2, 14, 14] without bias; per block
// norm1, norm2 (RMSNorm [C]), attn.qkv [3C, C] + [3C], attn.proj [C, C] + [C], mlp gate_proj and
// up_proj [I, C] + [I], down_proj [C, I] + [C]; the merger ln_q [C], mlp.0 [4C, 4C] + [4C],
// mlp.2 [out, 4C] + [out].
double Qwen25Tower(double depth, double C, double I, double out) {
  const double block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * (C * I + I) + (I * C + C);
  const double w = 4 * C;
  return C * 3 * 2 * 14 * 14 + depth * block + C + (w * w + w) + (w * out + out);
}

TEST(VisionTest, Qwen25VlCountsEqualThePublishedTotals) {
  std::vector<std::string> warnings;
  ModelSpec s7 = Import("qwen2.5-vl-7b.config.json", &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(s7.vision.kind, VisionKind::kQwen25Vl);
  EXPECT_EQ(s7.vision.depth, 32);
  EXPECT_EQ(s7.vision.fullatt_block_indexes, (std::vector<int>{7, 15, 23, 31}));
  EXPECT_FALSE(s7.rope_scaling.enabled());  // M-RoPE: the same tensors as RoPE
  const double tower7 = Qwen25Tower(32, 1280, 3420, 3584);
  EXPECT_EQ(CountParameters(s7).vision, static_cast<int64_t>(tower7));
  EXPECT_EQ(ParameterCount(s7),
            static_cast<int64_t>(Qwen2Text(28, 3584, 28, 4, 18944, 152064, false) + tower7));
  // Qwen/Qwen2.5-VL-7B-Instruct and -3B-Instruct: the safetensors' parameter totals (bf16 bytes / 2).
  EXPECT_EQ(ParameterCount(s7), 8'292'166'656);
  ModelSpec s3 = Import("qwen2.5-vl-3b.config.json");
  const double tower3 = Qwen25Tower(32, 1280, 3420, 2048);
  EXPECT_EQ(ParameterCount(s3),
            static_cast<int64_t>(Qwen2Text(36, 2048, 16, 2, 11008, 151936, true) + tower3));
  EXPECT_EQ(ParameterCount(s3), 3'754'622'976);
}

// Qwen2-VL's tower (modeling_qwen2_vl.py): LayerNorm (weight + bias) norms, fc1 [4C, C] + [4C],
// fc2 [C, 4C] + [C] (mlp_ratio 4), the merger's ln_q LayerNorm.
TEST(VisionTest, Qwen2VlCountEqualsThePublishedTotal) {
  ModelSpec s = Import("qwen2-vl-7b.config.json");
  ASSERT_EQ(s.vision.kind, VisionKind::kQwen2Vl);
  const double C = 1280, I = 4 * C, w = 4 * C;
  const double block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (C * I + I) + (I * C + C);
  const double tower = C * 3 * 2 * 14 * 14 + 32 * block + 2 * C + (w * w + w) + (w * 3584 + 3584);
  EXPECT_EQ(CountParameters(s).vision, static_cast<int64_t>(tower));
  // Qwen/Qwen2-VL-7B-Instruct's safetensors total.
  EXPECT_EQ(ParameterCount(s), 8'291'375'616);
}

// Qwen3-VL's tower (modeling_qwen3_vl.py): Conv3d [C, 3, 2, 16, 16] with bias, pos_embed
// [2304, C], LayerNorm blocks with linear_fc1 / linear_fc2 (biases), the merger (LayerNorm [C])
// and three DeepStack mergers (LayerNorm [4C]); the text model is Qwen3's (q_norm, k_norm
// [head_dim], no biases), head tied.
TEST(VisionTest, Qwen3VlCountFollowsTheModules) {
  std::vector<std::string> warnings;
  ModelSpec s = Import("qwen3-vl-2b.config.json", &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  ASSERT_EQ(s.vision.kind, VisionKind::kQwen3Vl);
  EXPECT_EQ(s.vision.deepstack_visual_indexes, (std::vector<int>{5, 11, 17}));
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_TRUE(s.qk_norm);
  const double C = 1024, I = 4096, out = 2048, w = 4 * C;
  const double block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (C * I + I) + (I * C + C);
  const double merger = (w * w + w) + (w * out + out);
  const double tower = (C * 3 * 2 * 16 * 16 + C) + 2304 * C + 24 * block + (2 * C + merger) +
                       3 * (2 * w + merger);
  const double H = 2048, d = 128, a = 16, kv = 8, F = 6144, V = 151936;
  const double text_block = H * a * d + 2 * H * kv * d + a * d * H + 2 * d + 3 * H * F + 2 * H;
  const double text = V * H + 28 * text_block + H;
  EXPECT_EQ(CountParameters(s).vision, static_cast<int64_t>(tower));
  EXPECT_EQ(ParameterCount(s), static_cast<int64_t>(text + tower));
}

// Gemma 3 (modeling_gemma3.py, modeling_siglip.py): SiglipVisionEmbeddings (Conv2d [C, 3, 14,
// 14] + bias, position_embedding [(896/14)^2, C]), 27 encoder layers (layer_norm1/2 weight +
// bias, q/k/v/out_proj [C, C] + [C], fc1 [I, C] + [I], fc2 [C, I] + [C]), post_layernorm, and
// Gemma3MultiModalProjector (mm_soft_emb_norm [C], mm_input_projection_weight [C, H]).
TEST(VisionTest, Gemma3CountsEqualThePublishedTotal) {
  ModelSpec g = Import("gemma-3-27b.config.json");
  ASSERT_EQ(g.vision.kind, VisionKind::kSiglip);
  const double C = 1152, I = 4304, H = 5376;
  const double layer = 4 * C + 4 * (C * C + C) + (C * I + I) + (I * C + C);
  const double tower = (C * 3 * 14 * 14 + C) + 4096 * C + 27 * layer + 2 * C + (C + C * H);
  EXPECT_EQ(CountParameters(g).vision, static_cast<int64_t>(tower));
  // google/gemma-3-27b-it's safetensors total.
  EXPECT_EQ(ParameterCount(g), 27'432'406'640);
  EXPECT_EQ(g.vision.mm_tokens_per_image, 256);
  EXPECT_EQ(g.vision.PatchesPerToken(), 16);
}

// The VL presets are the published configs (their JSON form, vision included, round-trips).
TEST(VisionTest, PresetsAreThePublishedConfigs) {
  const std::pair<const char*, const char*> pairs[] = {
      {"qwen2.5-vl-7b.config.json", "qwen2.5-vl-7b"}, {"qwen2.5-vl-3b.config.json", "qwen2.5-vl-3b"},
      {"qwen2-vl-7b.config.json", "qwen2-vl-7b"},     {"qwen3-vl-2b.config.json", "qwen3-vl-2b"},
      {"gemma-3-27b.config.json", "gemma3-27b"}};
  for (const auto& [file, preset] : pairs) {
    ModelSpec imported = Import(file);
    ModelSpec p = FindModelPreset(preset);
    EXPECT_EQ(testing_util::Shape(imported), testing_util::Shape(p)) << file;
    EXPECT_NE(testing_util::Shape(p).find("\"vision\""), std::string::npos) << preset;
    ModelSpec back = ModelSpecFromJson(ModelSpecToJson(p), "p.json");
    EXPECT_EQ(testing_util::Shape(back), testing_util::Shape(p)) << preset;
    EXPECT_EQ(ParameterCount(back), ParameterCount(p)) << preset;
  }
  // A verl config's model path names the preset (FindPresetByHfName).
  EXPECT_EQ(FindPresetByHfName("Qwen/Qwen2.5-VL-7B-Instruct")->preset, "qwen2.5-vl-7b");
}

// smart_resize (image_processing_qwen2_vl.py), worked by hand: 1280 x 720 with factor 28 rounds
// to 1288 x 728 (46 x 26 patch pairs), inside [3136, 12845056] pixels: 92 x 52 patches = 4784,
// / 4 = 1196 tokens. A 4000 x 3000 image over max_pixels 1003520 (a verl setting) is scaled by
// beta = sqrt(12e6 / 1003520) = 3.458: floor(3000 / 3.458 / 28) x 28 = 840, floor(4000 / 3.458 /
// 28) x 28 = 1148; 60 x 82 patches = 4920, 1230 tokens. A 20 x 20 image under min_pixels 3136
// is raised: beta = sqrt(3136 / 400) = 2.8, ceil(56 / 28) x 28 = 56: 4 x 4 patches, 4 tokens.
TEST(VisionTest, ImageTokensFollowTheProcessorRules) {
  ModelSpec s = Import("qwen2.5-vl-7b.config.json");
  ImageTokens t = TokensForImage(s.vision, 1280, 720);
  EXPECT_EQ(t.resized_width, 1288);
  EXPECT_EQ(t.resized_height, 728);
  EXPECT_EQ(t.patches, 92 * 52);
  EXPECT_EQ(t.tokens, 92 * 52 / 4);
  VisionSpec v = s.vision;
  v.max_pixels = 1003520;
  t = TokensForImage(v, 4000, 3000);
  EXPECT_EQ(t.resized_height, 840);
  EXPECT_EQ(t.resized_width, 1148);
  EXPECT_EQ(t.tokens, 60 * 82 / 4);
  t = TokensForImage(s.vision, 20, 20);
  EXPECT_EQ(t.patches, 16);
  EXPECT_EQ(t.tokens, 4);
  // Gemma 3: every image is 896 x 896, 4096 patches pooled to 256 tokens.
  ModelSpec g = Import("gemma-3-27b.config.json");
  t = TokensForImage(g.vision, 1280, 720);
  EXPECT_EQ(t.patches, 4096);
  EXPECT_EQ(t.tokens, 256);
  // Qwen2.5-VL's windows: 112 px / 14 = 8 patches a side.
  EXPECT_EQ(s.vision.WindowPatches(), 64);
  EXPECT_TRUE(s.vision.WindowedBlock(0));
  EXPECT_FALSE(s.vision.WindowedBlock(7));
}

TEST(VisionTest, BadVisionConfigsAreOneLineErrors) {
  ExpectEachImportFails({
      {"qwen2.5-vl-7b.config.json",
       [](nlohmann::json& j) { j["vision_config"]["out_hidden_size"] = 4096; }, "q.json",
       "vision/out_hidden: expected the text model's hidden = 3584"},
      {"qwen2.5-vl-7b.config.json",
       [](nlohmann::json& j) { j["vision_config"]["fullatt_block_indexes"] = {7, "x"}; }, "q.json",
       "q.json:/vision_config/fullatt_block_indexes/1"},
      // M-RoPE's sections: integers (named by index), three of them summing to head_dim / 2 = 64.
      {"qwen2.5-vl-7b.config.json",
       [](nlohmann::json& j) { j["rope_scaling"]["mrope_section"] = {16, "x", 24}; }, "q.json",
       "q.json:/rope_scaling/mrope_section/1: expected a section size"},
      {"qwen2.5-vl-7b.config.json",
       [](nlohmann::json& j) { j["rope_scaling"]["mrope_section"] = {16, 24, 20}; }, "q.json",
       "mrope_section: expected 3 positive section sizes summing to head_dim / 2 = 64 (rotary "
       "positions, all of head_dim rotated), got 3 sections summing to 60"},
      {"qwen2.5-vl-7b.config.json",
       [](nlohmann::json& j) { j["vision_config"]["fullatt_block_indexes"] = {40}; }, "q.json",
       "vision/fullatt_block_indexes: expected block indexes in [0, depth - 1]"},
      {"qwen2.5-vl-7b.config.json", [](nlohmann::json& j) { j["vision_config"].erase("depth"); },
       "q.json", "q.json:/vision_config: missing required key \"depth\""},
      {"qwen2.5-vl-7b.config.json", [](nlohmann::json& j) { j["vision_config"] = 3; }, "q.json",
       "q.json:/vision_config: expected an object"},
      {"gemma-3-27b.config.json",
       [](nlohmann::json& j) { j["vision_config"]["vision_use_head"] = true; }, "g.json",
       "g.json:/vision_config/vision_use_head: expected false"},
      {"gemma-3-27b.config.json", [](nlohmann::json& j) { j["mm_tokens_per_image"] = 250; },
       "g.json", "vision/mm_tokens_per_image: expected a square"},
      {"qwen3-vl-2b.config.json",
       [](nlohmann::json& j) { j["architectures"] = {"Qwen3VLMoeForConditionalGeneration"}; },
       "m.json", "Qwen3VLMoeForConditionalGeneration is not modelled yet"},
  });
  nlohmann::json m = ModelSpecToJson(FindModelPreset("qwen2.5-vl-7b"));
  m["mrope_section"] = "16,24,24";
  EXPECT_THAT([&] { ModelSpecFromJson(m, "m.json"); },
              ThrowsMessage<InputError>(HasSubstr("m.json:/mrope_section: expected an array of section sizes")));
}

// The module tree holds every counted parameter once, with transformers' module names; the tower's
// blocks come first in forward order (segments 1..V), the text layers after them, and each vision
// block is an FSDP unit of its own under the block policies.
TEST(VisionTest, TowerIsInTheModuleTreeAndItsBlocksAreUnits) {
  for (const char* f : {"qwen2.5-vl-7b.config.json", "qwen2-vl-7b.config.json",
                        "qwen3-vl-2b.config.json", "gemma-3-27b.config.json"}) {
    SCOPED_TRACE(f);
    ModelSpec s = Import(f);
    const int V = s.vision.depth, L = s.num_layers;
    ASSERT_EQ(s.NumBlocks(), V + L);
    ModuleNode root = BuildModuleTree(s);
    EXPECT_EQ(root.NumParams(), ParameterCount(s));
    std::vector<FsdpUnit> units = BuildFsdpUnits(s, WrapPolicy{});
    int64_t in_units = 0;
    std::vector<const FsdpUnit*> vision_units;
    for (const auto& u : units) {
      in_units += u.NumParams();
      for (const auto& p : u.params) {
        if (p.name.find(".blocks.0.") != std::string::npos || p.name.find(".layers.0.") != std::string::npos) {
          // Vision block 0 is segment 1; text layer 0 follows the V vision blocks.
          EXPECT_EQ(p.segment, IsVisionParameter(p.name) ? 1 : 1 + V) << p.name;
        }
        if (p.name == "lm_head.weight") EXPECT_EQ(p.segment, V + L + 2);
      }
      if (!u.is_root && IsVisionParameter(u.params.front().name)) vision_units.push_back(&u);
    }
    EXPECT_EQ(in_units, ParameterCount(s));
    ASSERT_EQ(static_cast<int>(vision_units.size()), V);
    for (int b = 0; b < V; ++b) {
      EXPECT_EQ(vision_units[static_cast<size_t>(b)]->name, VisionBlockName(s, b));
      EXPECT_EQ(vision_units[static_cast<size_t>(b)]->NumParams(), CountVisionParameters(s.vision).block);
      EXPECT_EQ(vision_units[static_cast<size_t>(b)]->first_segment, 1 + b);
    }
    // Units come in forward order: the vision blocks' before the text layers'.
    EXPECT_LT(vision_units.back()->first_segment, BlockSegment(V));
  }
}

// Freezing the tower by prefix (ROLL's freeze_module_prefix, verl's freeze_vision_tower): its
// blocks record no graph (no trainable parameter, and their input is the pixels, whatever the
// embeddings do); the text layers train as before.
TEST(VisionTest, AFrozenTowerRecordsNoGraph) {
  ModelSpec s = Import("qwen2.5-vl-7b.config.json");
  Plan plan;
  plan.frozen_prefixes = {"model.visual"};
  std::vector<FsdpUnit> units = ApplyTrainability(s, plan, BuildFsdpUnits(s, plan.wrap));
  SubgraphTrainability t = SubgraphTrainabilities(s, plan, units);
  ASSERT_EQ(static_cast<int>(t.blocks.size()), s.NumBlocks());
  for (int b = 0; b < s.vision.depth; ++b) {
    EXPECT_FALSE(t.blocks[static_cast<size_t>(b)].all_params_train) << b;
    EXPECT_FALSE(t.blocks[static_cast<size_t>(b)].input_requires_grad) << b;
  }
  const Trainability& text0 = t.blocks[static_cast<size_t>(s.vision.depth)];
  EXPECT_TRUE(text0.all_params_train);
  EXPECT_TRUE(text0.input_requires_grad);  // the embeddings train: their output needs a gradient
  Plan full;
  full.images = 1;
  full.image_tokens = 1024;
  t = SubgraphTrainabilities(s, full, ApplyTrainability(s, full, BuildFsdpUnits(s, full.wrap)));
  EXPECT_TRUE(t.blocks.front().all_params_train);
  // Without images the tower idles (no gradient, no optimizer state) without a frozen prefix.
  Plan text;
  EXPECT_TRUE(VisionTowerIdle(s, text));
  t = SubgraphTrainabilities(s, text, ApplyTrainability(s, text, BuildFsdpUnits(s, text.wrap)));
  EXPECT_FALSE(t.blocks.front().all_params_train);
  EXPECT_TRUE(t.blocks[static_cast<size_t>(s.vision.depth)].all_params_train);
  // transformers < 4.52 named the tower "visual" at the top level: the same prefix.
  Plan old_names;
  old_names.frozen_prefixes = {"visual"};
  EXPECT_TRUE(TrainabilityProblems(s, old_names, 4096, "plan").empty());
  t = SubgraphTrainabilities(s, old_names, ApplyTrainability(s, old_names, BuildFsdpUnits(s, old_names.wrap)));
  EXPECT_FALSE(t.blocks.front().all_params_train);
}

// LoRA on a VL model: PEFT's target names also name the tower's projections (Qwen2.5-VL's
// vision MLP has gate_proj), which the vision ledgers do not model, so they are refused by name
// unless exclude_modules (a regular expression matched against the whole module name) leaves
// the tower out, as verl's Qwen2.5-VL LoRA example does with ".*visual.*".
TEST(VisionTest, LoraOnTheTowerIsRefusedUnlessExcluded) {
  ModelSpec s = Import("qwen2.5-vl-7b.config.json");
  Plan plan;
  plan.lora.rank = 16;
  plan.lora.targets = {"q_proj", "gate_proj"};
  std::vector<std::string> p = TrainabilityProblems(s, plan, 4096, "plan");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_THAT(p[0], HasSubstr("an adapter on model.visual.blocks.0.mlp.gate_proj"));
  plan.lora.exclude = ".*visual.*";
  EXPECT_TRUE(TrainabilityProblems(s, plan, 4096, "plan").empty());
  int64_t adapters = 0, vision_adapters = 0;
  for (const auto& u : ApplyTrainability(s, plan, BuildFsdpUnits(s, plan.wrap))) {
    for (const auto& t : u.params) {
      adapters += t.lora_adapter ? 1 : 0;
      vision_adapters += t.lora_adapter && IsVisionParameter(t.name) ? 1 : 0;
    }
  }
  EXPECT_EQ(adapters, 28 * 2 * 2);  // q_proj and gate_proj of each text layer, A and B
  EXPECT_EQ(vision_adapters, 0);
  // re.fullmatch: "visual" alone matches no module name whole.
  plan.lora.exclude = "visual";
  EXPECT_EQ(TrainabilityProblems(s, plan, 4096, "plan").size(), 1u);
  plan.lora.exclude = "(";
  EXPECT_THAT(TrainabilityProblems(s, plan, 4096, "plan").at(0), HasSubstr("plan:/lora/exclude: expected a regular expression"));
}

// A vision block's saved tensors per patch, bf16, SDPA, written out from the modules (as the text
// blocks' tests in architectures_test.cc): Qwen2.5-VL (C 1280, I 3420, 16 heads): each
// Qwen2RMSNorm saves its fp32 input 4C, rsqrt 4 and bf16 x_hat 2C; the projections save the two
// norm outputs (2C each); SDPA saves q and k after the rotary (2C each), v (a view of the fused
// qkv output, which it keeps whole: 6C), its output 2C and the fp32 logsumexp per head; the
// SwiGLU MLP 8I. SigLIP (Gemma 3: C 1152, I 4304, 16 heads): each LayerNorm saves its input 2C
// and fp32 mean and rstd (8); q, k, v 2C each and the output 2C, the logsumexp; the GELU MLP
// fc1's output (GELU's input) and GELU's output (fc2's input): 4I. The walk's tokens are text
// tokens: per token, the patches per token times that.
TEST(VisionTest, VisionBlockSavesWhatItsModulesSave) {
  ModelSpec q = Import("qwen2.5-vl-7b.config.json");
  Plan plan;
  plan.images = 2;
  plan.image_tokens = 2 * 1196;  // two 1280 x 720 images
  const VisionLoad load = VisionLoadOf(q, plan, 4096);
  EXPECT_DOUBLE_EQ(load.patches, 4 * 2392.0);
  EXPECT_DOUBLE_EQ(load.patches_per_image, 4784);
  EXPECT_DOUBLE_EQ(load.patches_per_token, 4 * 2392.0 / 4096);
  ActivationOptions o = testing_util::Bf16Sdpa();
  const double C = 1280, I = 3420, heads = 16;
  const double per_patch = 2 * (4 * C + 4 + 2 * C) + 2 * C + 2 * C +
                           (2 * C + 2 * C + 6 * C + 2 * C + 4 * heads) + 8 * I;
  EXPECT_DOUBLE_EQ(VisionBlockActivations(q, o, Trainability{}, 3, load).full.saved_per_token,
                   per_patch * load.patches_per_token);
  // Block 0 keeps the patch embedding's input (the pixels in bf16: 3 x 2 x 14 x 14 a patch); the
  // last the merger's RMSNorm (4C + 2C) and its fc1, GELU and fc2 inputs (4C / 4 per patch each).
  EXPECT_DOUBLE_EQ(VisionBlockActivations(q, o, Trainability{}, 0, load).full.saved_per_token,
                   (per_patch + 2 * 1176) * load.patches_per_token);
  EXPECT_DOUBLE_EQ(VisionBlockActivations(q, o, Trainability{}, 31, load).full.saved_per_token,
                   (per_patch + 6 * C + 3 * 2 * C) * load.patches_per_token);
  // A frozen tower records nothing.
  Trainability frozen;
  frozen.input_requires_grad = false;
  frozen.all_params_train = false;
  EXPECT_DOUBLE_EQ(VisionBlockActivations(q, o, frozen, 3, load).full.saved_per_token, 0);
  // Full checkpointing keeps each block's input [patches, C].
  EXPECT_DOUBLE_EQ(VisionBlockActivations(q, o, Trainability{}, 3, load).checkpoint_input_per_token,
                   2 * C * load.patches_per_token);

  ModelSpec g = Import("gemma-3-27b.config.json");
  Plan gp;
  gp.images = 1;
  gp.image_tokens = 256;
  const VisionLoad gl = VisionLoadOf(g, gp, 2048);
  EXPECT_DOUBLE_EQ(gl.patches_per_token, 4096.0 / 2048);
  const double c = 1152, i = 4304;
  EXPECT_DOUBLE_EQ(VisionBlockActivations(g, o, Trainability{}, 5, gl).full.saved_per_token,
                   (2 * (2 * c + 8) + 2 * c + 2 * c + (2 * c + 2 * c + 2 * c + 2 * c + 4 * heads) + 4 * i) *
                       gl.patches_per_token);
}

// The text layers of Qwen2/2.5-VL (M-RoPE: apply_multimodal_rotary_pos_emb cats the sections of
// cos and sin per layer, new [B, 1, S, head_dim] tensors in bf16 that q's and k's rotary muls
// save) keep 2 x 128 x 2 bytes a token more than the same layer with plain RoPE, whose cos and sin
// are shared constants. Eager attention on a fused qkv with rotary (the vision blocks) keeps
// matmul's copy of v, not the whole qkv output: 2C x 2 bytes less a patch than SDPA, which keeps
// the qkv view.
TEST(VisionTest, MropeSectionsAndEagerFusedQkvAreWhatTheKernelsKeep) {
  ModelSpec q = Import("qwen2.5-vl-7b.config.json");
  EXPECT_EQ(q.mrope_section, (std::vector<int>{16, 24, 24}));
  ModelSpec plain = q;
  plain.mrope_section.clear();
  ActivationOptions o = testing_util::Bf16Sdpa();
  o.seq_len = 4096;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(q, o, Trainability{}).full.saved_per_token -
                       ComputeBlockActivations(plain, o, Trainability{}).full.saved_per_token,
                   2 * 128 * 2);
  Plan plan;
  plan.images = 2;
  plan.image_tokens = 2 * 1196;
  const VisionLoad load = VisionLoadOf(q, plan, 4096);
  ActivationOptions eager = o;
  eager.attention = Attention::kEager;
  // Block 3 is windowed (64 patches): the eager softmax's scores differ too, so compare the
  // attention's saved inputs by name.
  auto bytes = [&](const ActivationOptions& opt, const std::string& name) {
    double b = 0;
    for (const auto& t : VisionBlockActivations(q, opt, Trainability{}, 3, load).full.saved) {
      if (t.name.find(name) != std::string::npos) b += t.bytes_per_token;
    }
    return b / load.patches_per_token;
  };
  EXPECT_DOUBLE_EQ(bytes(o, "qkv_proj output"), 3 * 1280 * 2);
  EXPECT_DOUBLE_EQ(bytes(eager, "qkv_proj output"), 0);
  EXPECT_DOUBLE_EQ(bytes(eager, "matmul's contiguous copy"), 1280 * 2);
}

// FLOPs per patch: 2 x (qkv 3C^2 + proj C^2 + the MLP's matrices) and 4 x span x C of attention,
// the span a Qwen2.5-VL window (64 patches) except in the full-attention blocks (the image).
TEST(VisionTest, VisionBlockFlopsFollowTheSpan) {
  ModelSpec q = Import("qwen2.5-vl-7b.config.json");
  Plan plan;
  plan.images = 1;
  plan.image_tokens = 1196;
  const VisionLoad load = VisionLoadOf(q, plan, 4096);
  const double C = 1280, I = 3420, r = load.patches_per_token;
  VisionBlockFlops windowed = VisionBlockForwardFlops(q, 3, load);
  EXPECT_DOUBLE_EQ(windowed.matmul, 2 * (4 * C * C + 3 * C * I) * r);
  EXPECT_DOUBLE_EQ(windowed.attention, 4 * 64 * C * r);
  EXPECT_DOUBLE_EQ(VisionBlockForwardFlops(q, 7, load).attention, 4 * 4784 * C * r);
}

}  // namespace
}  // namespace shardtune::model
