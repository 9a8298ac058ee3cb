// Tests of the preset table (presets.cc): every preset's closed-form count equals its published
// count, several also equal a hand formula written here, and --model resolution.
#include "model/presets.h"

#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"

namespace shardtune::model {
namespace {

using testing::HasSubstr;
using testing::ThrowsMessage;

// Llama-style decoder (modeling_llama.py): embed V*H, per layer q/o H*H each, k/v H*kv*d each,
// SwiGLU 3*H*F, two RMSNorms H each; final norm H; untied lm_head V*H.
int64_t LlamaFormula(int64_t L, int64_t H, int64_t kv_dim, int64_t F, int64_t V) {
  int64_t layer = 2 * H * H + 2 * H * kv_dim + 3 * H * F + 2 * H;
  return V * H + L * layer + H + V * H;
}

TEST(PresetsTest, EveryPresetMatchesItsPublishedCount) {
  int with_published = 0;
  for (const PresetInfo& p : ModelPresets()) {
    if (p.published_parameters == 0) continue;
    ++with_published;
    EXPECT_EQ(ParameterCount(p.spec), p.published_parameters) << p.name;
  }
  EXPECT_GE(with_published, 16);
}

TEST(PresetsTest, Llama2_7bByHand) {
  // 32 layers, H 4096, MHA (kv_dim = H), F 11008, V 32000: 6,738,415,616.
  EXPECT_EQ(ParameterCount(FindModelPreset("llama2-7b")), LlamaFormula(32, 4096, 4096, 11008, 32000));
}

TEST(PresetsTest, Llama3_8bByHand) {
  // 32 layers, H 4096, 8 kv heads of 128 (kv_dim 1024), F 14336, V 128256: 8,030,261,248.
  EXPECT_EQ(ParameterCount(FindModelPreset("llama3-8b")),
            LlamaFormula(32, 4096, 8 * 128, 14336, 128256));
  // Llama 3.1 8B: the same shapes with 131,072 positions (config.json max_position_embeddings).
  EXPECT_EQ(ParameterCount(FindModelPreset("llama3.1-8b")),
            LlamaFormula(32, 4096, 8 * 128, 14336, 128256));
  EXPECT_EQ(FindModelPreset("llama3.1-8b").max_seq_len, 131072);
}

TEST(PresetsTest, Llama3_2_1bByHandIsTied) {
  // 16 layers, H 2048, 32 heads of 64, 8 kv heads, F 8192, V 128256, lm_head tied.
  const int64_t L = 16, H = 2048, kv_dim = 8 * 64, F = 8192, V = 128256;
  EXPECT_EQ(ParameterCount(FindModelPreset("llama3.2-1b")),
            LlamaFormula(L, H, kv_dim, F, V) - V * H);
}

// modeling_gpt2.py: wte V*H + wpe P*H; per layer ln_1, ln_2 (2H each), c_attn H*3H + 3H,
// c_proj H*H + H, c_fc H*4H + 4H, mlp c_proj 4H*H + H; ln_f 2H; lm_head tied to wte.
int64_t Gpt2Formula(int64_t L, int64_t H, int64_t V, int64_t P) {
  int64_t layer = 2 * (2 * H) + (H * 3 * H + 3 * H) + (H * H + H) + (H * 4 * H + 4 * H) +
                  (4 * H * H + H);
  return V * H + P * H + L * layer + 2 * H;
}

TEST(PresetsTest, Gpt2ByHand) {
  EXPECT_EQ(ParameterCount(FindModelPreset("gpt2")), Gpt2Formula(12, 768, 50257, 1024));
  EXPECT_EQ(ParameterCount(FindModelPreset("gpt2-xl")), Gpt2Formula(48, 1600, 50257, 1024));
}

TEST(PresetsTest, Qwen25_7bHasQkvBias) {
  // Qwen2Attention: q/k/v with bias (q_dim + 2 kv_dim per layer), o_proj without.
  const int64_t L = 28, H = 3584, kv_dim = 4 * 128, F = 18944, V = 152064;
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-7b")),
            LlamaFormula(L, H, kv_dim, F, V) + L * (H + 2 * kv_dim));
}

TEST(PresetsTest, Qwen3_8bHasQkNorm) {
  // head_dim 128 = H / heads here; q_norm and k_norm add 2 * 128 per layer.
  const int64_t L = 36, H = 4096, kv_dim = 8 * 128, F = 12288, V = 151936;
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen3-8b")),
            LlamaFormula(L, H, kv_dim, F, V) + L * 2 * 128);
}

TEST(PresetsTest, Mixtral8x7bByHand) {
  // MixtralSparseMoeBlock: router H*8 + 8 experts of 3*H*F instead of one MLP.
  const int64_t L = 32, H = 4096, kv_dim = 8 * 128, F = 14336, V = 32000, E = 8;
  EXPECT_EQ(ParameterCount(FindModelPreset("mixtral-8x7b")),
            LlamaFormula(L, H, kv_dim, F, V) + L * (H * E + (E - 1) * 3 * H * F));
}

TEST(PresetsTest, Gpt3_175bIsAbout175Billion) {
  int64_t n = ParameterCount(FindModelPreset("gpt3-175b"));
  EXPECT_EQ(n, Gpt2Formula(96, 12288, 50257, 2048));
  // The paper rounds to "175.0B"; the exact GPT-2-layout count is within 0.5% of it.
  EXPECT_NEAR(static_cast<double>(n), 175.0e9, 0.005 * 175.0e9);
}

TEST(PresetsTest, TinyPresetsHaveAFewMillionParameters) {
  for (const char* name : {"tiny-llama", "tiny-gpt2"}) {
    int64_t n = ParameterCount(FindModelPreset(name));
    EXPECT_GE(n, 1'000'000) << name;
    EXPECT_LE(n, 10'000'000) << name;
    EXPECT_GE(FindModelPreset(name).vocab_size, 256 + 1) << name;  // bytes + special ids
  }
  ModelSpec llama = FindModelPreset("tiny-llama");
  EXPECT_LT(llama.num_kv_heads, llama.num_heads);  // exercises GQA on a CPU
  EXPECT_TRUE(FindModelPreset("tiny-gpt2").tied_embeddings);
}

TEST(PresetsTest, NamesAreUniqueAndSpecsAreSelfDescribing) {
  std::set<std::string> names;
  for (const PresetInfo& p : ModelPresets()) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_EQ(p.spec.name, p.name);
    EXPECT_EQ(p.spec.source, p.source);
    EXPECT_FALSE(p.source.empty()) << p.name;
    EXPECT_TRUE(p.spec.Problems(p.name).empty()) << p.name;
    EXPECT_GT(p.spec.head_dim, 0) << p.name;
  }
}

TEST(PresetsTest, UnknownPresetSuggestsAndListsKnown) {
  EXPECT_THAT([] { FindModelPreset("llama3-8bb"); },
              ThrowsMessage<InputError>(HasSubstr(
                  "--model: unknown preset \"llama3-8bb\" (did you mean \"llama3-8b\"?); known: "
                  "gpt2, gpt2-medium")));
  EXPECT_THAT([] { FindModelPreset("zzzzzzzzzz"); },
              ThrowsMessage<InputError>(testing::Not(HasSubstr("did you mean"))));
}

TEST(PresetsTest, ResolveModelArgTakesPresetSpecFileOrHfConfig) {
  std::string dir = std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/";
  std::vector<std::string> warnings;
  EXPECT_EQ(ResolveModelArg("tiny-llama", &warnings).name, "tiny-llama");
  EXPECT_EQ(ResolveModelArg(dir + "tiny-moe.model.json", &warnings).name, "tiny-moe");
  EXPECT_EQ(ParameterCount(ResolveModelArg(dir + "llama3-8b.config.json", &warnings)),
            8'030'261'248);
  EXPECT_TRUE(warnings.empty());
  EXPECT_THAT([&] { ResolveModelArg(dir + "missing.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("--model: cannot open file")));
  EXPECT_THAT([] { ResolveModelArg("gtp2", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("did you mean \"gpt2\"")));
}

}  // namespace
}  // namespace shardtune::model
