// The executor's rotary frequencies follow the model spec: rope_theta, and rope_scaling "linear",
// "llama3" and "yarn" as transformers' modeling_rope_utils.py computes them (a double-precision
// reference written here from that file's formulas; YaRN's from the published configs of
// DeepSeek-V3, DeepSeek-V2-Lite and GPT-OSS); partial rotary rotates the leading
// int(head_dim x fraction) features with their own frequencies, as GPT-NeoX and Phi-3 do; other
// schemes and rotary dims that cannot be rotated are refused by name before a rank starts.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "executor/nn/transformer.h"
#include "executor/nn/transformer_support.h"
#include "model/hf_config.h"
#include "model/model_spec_json.h"
#include "model/presets.h"
#include "tests/model/decoder_shape.h"

namespace shardtune::exec {
namespace {

using ::testing::HasSubstr;

// _compute_default_rope_parameters and _compute_llama3_parameters, in doubles.
std::vector<double> Reference(int64_t D, double theta, const model::RopeScaling& r) {
  std::vector<double> inv;
  for (int64_t i = 0; i < D; i += 2) {
    inv.push_back(1.0 / std::pow(theta, static_cast<double>(i) / static_cast<double>(D)));
  }
  for (double& f : inv) {
    if (r.type == "linear") f /= r.factor;
    if (r.type != "llama3") continue;
    double old_ctx = static_cast<double>(r.original_max_position_embeddings);
    double wavelen = 2 * M_PI / f;
    if (wavelen < old_ctx / r.high_freq_factor) continue;  // high frequency: kept
    if (wavelen > old_ctx / r.low_freq_factor) {           // low frequency: / factor
      f /= r.factor;
      continue;
    }
    double smooth =
        (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    f = (1 - smooth) * f / r.factor + smooth * f;
  }
  return inv;
}

void ExpectFrequencies(const model::ModelSpec& spec) {
  model::ModelSpec s = spec;
  s.FillDefaults();
  TransformerOptions o;
  o.rope_theta = s.rope_theta;
  o.rope_scaling = s.rope_scaling;
  Transformer t(s, o);
  at::Tensor got = t.InverseFrequencies(s.head_dim, at::TensorOptions().dtype(at::kFloat));
  std::vector<double> want = Reference(s.head_dim, s.rope_theta, s.rope_scaling);
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  double max_rel = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got[static_cast<int64_t>(i)].item<double>();
    max_rel = std::max(max_rel, std::abs(g - want[i]) / want[i]);
  }
  EXPECT_LT(max_rel, 1e-5) << s.name << " (fp32 against double)";
}

model::ModelSpec Small(model::ModelSpec s) {  // the preset's rotary settings on a small body
  s.head_dim = 128;
  return model::testing_util::Decoder(s.name,
                                      {/*layers=*/1, /*hidden=*/512, /*heads=*/4, /*kv_heads=*/4,
                                       /*ffn_hidden=*/256, /*vocab=*/256},
                                      s);
}

TEST(RotaryTest, FrequenciesFollowThetaAndLlama3AndLinearScaling) {
  ExpectFrequencies(Small(model::FindModelPreset("tiny-llama")));   // 10000, plain
  ExpectFrequencies(Small(model::FindModelPreset("llama3-8b")));    // 500000, plain
  model::ModelSpec l31 = Small(model::FindModelPreset("llama3.1-8b"));
  ASSERT_EQ(l31.rope_scaling.type, "llama3");
  ExpectFrequencies(l31);
  ExpectFrequencies(Small(model::FindModelPreset("llama3.2-1b")));  // llama3, factor 32
  model::ModelSpec linear = Small(model::FindModelPreset("tiny-llama"));
  linear.rope_scaling.type = "linear";
  linear.rope_scaling.factor = 4;
  ExpectFrequencies(linear);
  // Llama 3.1's scaling moves the low frequencies: the two presets' tables differ.
  TransformerOptions plain, scaled;
  plain.rope_theta = scaled.rope_theta = 500000;
  scaled.rope_scaling = l31.rope_scaling;
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  EXPECT_FALSE(at::allclose(Transformer(l31, plain).InverseFrequencies(128, f32),
                            Transformer(l31, scaled).InverseFrequencies(128, f32)));
}

// _compute_yarn_parameters in doubles (Peng et al. 2023, YaRN): the factor is
// max_position_embeddings / original when the config names the original, else "factor"; the ramp
// runs over the dims between find_correction_dim(beta_fast) and (beta_slow), floored / ceiled when
// truncate; the attention factor from get_mscale.
std::vector<double> YarnReference(int64_t D, double theta, const model::RopeScaling& r, int64_t max_pos,
                                  double* attention) {
  const double factor = r.original_given ? static_cast<double>(max_pos) / static_cast<double>(r.original_max_position_embeddings) : r.factor;
  const double original = r.original_given ? static_cast<double>(r.original_max_position_embeddings)
                                           : static_cast<double>(max_pos);
  auto corr = [&](double rot) {
    return static_cast<double>(D) * std::log(original / (rot * 2 * M_PI)) / (2 * std::log(theta));
  };
  double low = corr(r.beta_fast), high = corr(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(D - 1));
  if (low == high) high += 0.001;
  std::vector<double> inv;
  for (int64_t i = 0; i < D / 2; ++i) {
    double extrap = 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(D));
    double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    double keep = 1 - ramp;  // inv_freq_extrapolation_factor
    inv.push_back(extrap / factor * (1 - keep) + extrap * keep);
  }
  auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  *attention = r.attention_factor > 0 ? r.attention_factor
               : r.mscale > 0 && r.mscale_all_dim > 0 ? mscale(factor, r.mscale) / mscale(factor, r.mscale_all_dim)
                                                      : mscale(factor, 1.0);
  return inv;
}

// A Llama-layout body (which the executor builds) with `s`'s rotary settings.
model::ModelSpec WithRopeOf(const model::ModelSpec& s) {
  model::ModelSpec body = Small(model::FindModelPreset("tiny-llama"));
  body.head_dim = s.head_dim;
  body.hidden = body.num_heads * s.head_dim;
  body.rope_theta = s.rope_theta;
  body.rope_scaling = s.rope_scaling;
  body.max_seq_len = s.max_seq_len;
  body.FillDefaults();
  return body;
}

TEST(RotaryTest, YarnFollowsThePublishedConfigs) {
  struct Case {
    const char* file;
    int64_t rotary_dims;
    double attention, mla_scale;
  };
  // DeepSeek-V3: factor 40 (163840 / 4096), mscale = mscale_all_dim = 1: attention factor 1, MLA's
  // softmax scale x (0.1 ln 40 + 1)^2. V2-Lite: mscale 0.707 both ways: again 1. GPT-OSS: factor 32
  // (131072 / 4096), no mscale: 0.1 ln 32 + 1, truncate false; no MLA.
  const double v3 = std::pow(0.1 * std::log(40.0) + 1, 2), v2 = std::pow(0.1 * 0.707 * std::log(40.0) + 1, 2);
  for (const Case& k : {Case{"deepseek-v3", 64, 1.0, v3}, Case{"deepseek-v2-lite", 64, 1.0, v2},
                        Case{"gpt-oss-20b", 64, 0.1 * std::log(32.0) + 1, 1.0}}) {
    model::ModelSpec s = model::ReadHfConfigFile(std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/" + k.file + ".config.json");
    s.FillDefaults();
    if (s.moe.gpt_oss_experts) s = WithRopeOf(s);  // the rotary alone, on a small dense model
    ASSERT_EQ(s.rope_scaling.type, "yarn") << k.file;
    TransformerOptions o;
    o.rope_theta = s.rope_theta;
    o.rope_scaling = s.rope_scaling;
    Transformer t(s, o);
    double attention = 0;
    std::vector<double> want = YarnReference(k.rotary_dims, s.rope_theta, s.rope_scaling, s.max_seq_len, &attention);
    at::Tensor got = t.InverseFrequencies(k.rotary_dims, at::TensorOptions().dtype(at::kFloat));
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << k.file;
    double max_rel = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_rel = std::max(max_rel, std::abs(got[static_cast<int64_t>(i)].item<double>() - want[i]) / want[i]);
    }
    EXPECT_LT(max_rel, 1e-5) << k.file;
    EXPECT_NEAR(attention, k.attention, 1e-12) << k.file;
    EXPECT_NEAR(t.RopeAttentionScaling(), k.attention, 1e-12) << k.file;
    EXPECT_NEAR(t.MlaSoftmaxScaleFactor(), k.mla_scale, 1e-12) << k.file;
    // The frequencies differ from plain RoPE's (interpolated low frequencies).
    TransformerOptions plain;
    plain.rope_theta = s.rope_theta;
    EXPECT_FALSE(at::allclose(got, Transformer(s, plain).InverseFrequencies(k.rotary_dims, at::TensorOptions().dtype(at::kFloat))));
  }
  // The rotary embedding multiplies cos and sin by the attention factor: a rotation at position 0
  // (cos 1, sin 0) scales the vector by it.
  model::ModelSpec oss = model::ReadHfConfigFile(std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/gpt-oss-20b.config.json");
  oss.FillDefaults();
  oss = WithRopeOf(oss);
  TransformerOptions o;
  o.rope_theta = oss.rope_theta;
  o.rope_scaling = oss.rope_scaling;
  o.dtype = at::kDouble;
  Transformer t(oss, o);
  at::Tensor x = at::randn({1, 1, 1, 64}, at::TensorOptions().dtype(at::kDouble));
  EXPECT_TRUE(at::allclose(t.Rotary(x, 0), x * (0.1 * std::log(32.0) + 1), 1e-6, 1e-6));
}

TEST(RotaryTest, OtherScalingSchemesAndUnrotatableDimsAreRefusedByName) {
  model::ModelSpec s = model::FindModelPreset("tiny-llama");
  s.rope_scaling.type = "dynamic";
  EXPECT_THAT(TransformerSupportProblem(s), HasSubstr("rope_scaling \"dynamic\" is not implemented"));
  s.rope_scaling.type = "llama3";
  EXPECT_EQ(TransformerSupportProblem(s), "");
  s.FillDefaults();
  s.rotary_fraction = 0.25;  // Pythia's rotary_pct: int(64 x 0.25) = 16 dims
  EXPECT_EQ(TransformerSupportProblem(s), "");
  s.rotary_fraction = 0.3;  // int(64 x 0.3) = 19: rotate_half needs an even count
  EXPECT_THAT(TransformerSupportProblem(s), HasSubstr("even number of rotary dims"));
  s.rotary_fraction = 0.01;  // int(0.64) = 0
  EXPECT_THAT(TransformerSupportProblem(s), HasSubstr("no rotary dims"));
}

// Partial rotary against apply_rotary_pos_emb written out in doubles: the leading R = int(D x f)
// features of each head rotate in pairs (i, i + R/2) by position x theta^(-2i/R), the other
// D - R pass through unchanged (modeling_gpt_neox.py, modeling_phi3.py).
TEST(RotaryTest, PartialRotaryRotatesTheLeadingDimsWithTheirOwnFrequencies) {
  model::ModelSpec s = Small(model::FindModelPreset("tiny-llama"));
  s.head_dim = 16;
  s.hidden = 64;
  s.rotary_fraction = 0.25;  // R = 4
  s.FillDefaults();
  ASSERT_EQ(TransformerSupportProblem(s), "");
  TransformerOptions o;
  o.rope_theta = 10000;
  Transformer t(s, o);
  const int64_t B = 1, h = 2, S = 5, D = 16, R = 4, offset = 3;
  at::Tensor x = at::randn({B, h, S, D}, at::TensorOptions().dtype(at::kDouble));
  at::Tensor got = t.Rotary(x, offset);
  ASSERT_EQ(got.sizes(), x.sizes());
  double max_err = 0;
  for (int64_t head = 0; head < h; ++head) {
    for (int64_t pos = 0; pos < S; ++pos) {
      for (int64_t d = 0; d < D; ++d) {
        double want = x[0][head][pos][d].item<double>();
        if (d < R) {
          int64_t i = d % (R / 2);
          double angle = static_cast<double>(offset + pos) *
                         std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(R));
          double a = x[0][head][pos][i].item<double>(), b = x[0][head][pos][i + R / 2].item<double>();
          want = d < R / 2 ? a * std::cos(angle) - b * std::sin(angle)
                           : b * std::cos(angle) + a * std::sin(angle);
        }
        max_err = std::max(max_err, std::abs(got[0][head][pos][d].item<double>() - want));
      }
    }
  }
  EXPECT_LT(max_err, 1e-5);  // the frequencies are fp32, as transformers computes them
  // Whole rotary (fraction 1) is unchanged by the split: the same as before.
  s.rotary_fraction = 1.0;
  Transformer whole(s, o);
  at::Tensor full = whole.Rotary(x, offset);
  EXPECT_FALSE(at::allclose(full.narrow(-1, R, D - R), x.narrow(-1, R, D - R)));
}

// Qwen2-VL's get_rope_index, worked by hand from its formula (modeling_qwen2_5_vl.py): a text
// token, an image of 4 x 6 patches (2 x 3 merge groups: 6 tokens) at 1..6, then text. The image
// starts at the next position 1: (t, h, w) = (1, 1 + row, 1 + column); the text after it
// continues at 1 + max(2, 3) = 4.
TEST(MropeTest, PositionIdsFollowGetRopeIndex) {
  at::Tensor mask = at::zeros({1, 10}, at::TensorOptions().dtype(at::kBool));
  mask[0].narrow(0, 1, 6).fill_(true);
  at::Tensor pos = MropePositionIds(mask, {{4, 6}}, 2);
  const std::vector<std::vector<int64_t>> want = {{0, 1, 1, 1, 1, 1, 1, 4, 5, 6},
                                                  {0, 1, 1, 1, 2, 2, 2, 4, 5, 6},
                                                  {0, 1, 2, 3, 1, 2, 3, 4, 5, 6}};
  ASSERT_EQ(pos.sizes(), (std::vector<int64_t>{3, 1, 10}));
  for (int r = 0; r < 3; ++r) {
    for (int64_t s = 0; s < 10; ++s) EXPECT_EQ(pos[r][0][s].item<int64_t>(), want[static_cast<size_t>(r)][static_cast<size_t>(s)]) << r << " " << s;
  }
}

// apply_multimodal_rotary_pos_emb's cos: feature f of D takes the position row of its section
// (mrope_section [2, 3, 3] repeated over the two halves: rows t t h h h w w w, then again) and the
// frequency theta^(-2 (f mod D/2) / D); written out here in doubles.
TEST(MropeTest, CosSinTakeEachSectionsPositionRow) {
  model::ModelSpec s = model::ReadModelSpecFile(std::string(SHARDTUNE_EXECUTOR_TEST_DATA_DIR) + "/micro-qwen2.5-vl.model.json");
  s.FillDefaults();
  TransformerOptions o;
  o.rope_theta = s.rope_theta;
  Transformer t(s, o);
  at::Tensor mask = at::zeros({1, 10}, at::TensorOptions().dtype(at::kBool));
  mask[0].narrow(0, 1, 6).fill_(true);
  ImageBatch images;
  images.grids = {{4, 6}};
  images.image_mask = mask;
  const int64_t kernel = s.vision.in_channels * s.vision.temporal_patch_size * s.vision.patch_size * s.vision.patch_size;
  images.pixel_values = at::zeros({24, kernel});
  images.position_ids = MropePositionIds(mask, images.grids, 2);
  const at::Tensor pos = images.position_ids.clone();
  t.SetImages(images);
  auto [cos, sin] = t.MropeCosSin(1, 10, at::zeros({1}, at::TensorOptions().dtype(at::kFloat)));
  const int64_t D = s.head_dim;
  ASSERT_EQ(cos.sizes(), (std::vector<int64_t>{1, 1, 10, D}));
  const int rows[] = {0, 0, 1, 1, 1, 2, 2, 2};  // sections 2, 3, 3 over D/2 = 8
  for (int64_t f = 0; f < D; ++f) {
    const int64_t j = f % (D / 2);
    const double inv = 1.0 / std::pow(s.rope_theta, 2.0 * static_cast<double>(j) / static_cast<double>(D));
    for (int64_t p = 0; p < 10; ++p) {
      const double angle = static_cast<double>(pos[rows[j]][0][p].item<int64_t>()) * inv;
      EXPECT_NEAR(cos[0][0][p][f].item<double>(), std::cos(angle), 1e-5) << f << " " << p;
      EXPECT_NEAR(sin[0][0][p][f].item<double>(), std::sin(angle), 1e-5) << f << " " << p;
    }
  }
}

}  // namespace
}  // namespace shardtune::exec
