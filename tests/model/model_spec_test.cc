// Tests of ModelSpec checks, the closed-form parameter count by part, and "shardtune.model" JSON
// (model_spec.cc, model_spec_json.cc). Expected counts are written as formulas.
#include "model/model_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/model_spec_json.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "tests/model/decoder_shape.h"

namespace shardtune::model {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;

ModelSpec Small() {
  return testing_util::Decoder("small", {/*layers=*/2, /*hidden=*/64, /*heads=*/4, /*kv_heads=*/2,
                                         /*ffn_hidden=*/160, /*vocab=*/100, /*max_seq_len=*/32});
}

nlohmann::json SmallJson() {
  return ParseJsonText(R"({"schema": "shardtune.model", "schema_version": 1,
    "num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 160, "vocab_size": 100,
    "max_seq_len": 32})",
                       "m.json");
}

TEST(ModelSpecTest, FillDefaultsResolvesKvHeadsAndHeadDim) {
  ModelSpec s = Small();
  s.num_kv_heads = 0;
  s.head_dim = 0;
  s.FillDefaults();
  EXPECT_EQ(s.num_kv_heads, 4);
  EXPECT_EQ(s.head_dim, 64 / 4);
}

TEST(ModelSpecTest, ExplicitHeadDimIsKeptEvenWhenHeadsDoNotDivideHidden) {
  ModelSpec s = Small();
  s.hidden = 60;  // 60 % 8 != 0, but head_dim is given (as Gemma's 256 with hidden 3072, 16 heads)
  s.num_heads = 8;
  s.num_kv_heads = 8;
  s.head_dim = 16;
  s.FillDefaults();
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_TRUE(s.Problems("m").empty());
  EXPECT_EQ(s.q_dim(), 8 * 16);
}

TEST(ModelSpecTest, HiddenMustDivideByHeadsWithoutHeadDim) {
  ModelSpec s = Small();
  s.hidden = 66;
  s.head_dim = 0;
  s.FillDefaults();
  EXPECT_THAT([&] { s.Validate("m.json"); },
              ThrowsMessage<InputError>(
                  HasSubstr("m.json:/hidden: expected a multiple of num_heads = 4")));
}

TEST(ModelSpecTest, EachRuleReportsWhereWhatAndGot) {
  struct Case {
    void (*mutate)(ModelSpec*);
    const char* message;
  };
  const Case cases[] = {
      {[](ModelSpec* s) { s->num_layers = 0; }, "m:/num_layers: expected integer >= 1, got 0"},
      {[](ModelSpec* s) { s->hidden = -1; }, "m:/hidden: expected integer >= 1, got -1"},
      {[](ModelSpec* s) { s->num_heads = 0; }, "m:/num_heads: expected integer >= 1, got 0"},
      {[](ModelSpec* s) { s->num_kv_heads = 5; }, "m:/num_kv_heads: expected integer in [1, "},
      {[](ModelSpec* s) { s->num_kv_heads = 3; }, "m:/num_kv_heads: expected a divisor of"},
      {[](ModelSpec* s) { s->head_dim = -2; }, "m:/head_dim: expected integer >= 1"},
      {[](ModelSpec* s) { s->ffn_hidden = 0; }, "m:/ffn_hidden: expected integer >= 1, got 0"},
      {[](ModelSpec* s) { s->vocab_size = 0; }, "m:/vocab_size: expected integer >= 1, got 0"},
      {[](ModelSpec* s) { s->max_seq_len = 0; }, "m:/max_seq_len: expected integer >= 1, got 0"},
      {[](ModelSpec* s) { s->norm_bias = true; }, "m:/norm_bias: expected false with norm"},
      {[](ModelSpec* s) { s->moe.top_k = 1; }, "m:/moe/top_k: expected 0 without experts"},
      {[](ModelSpec* s) { s->moe.num_experts = -1; }, "m:/moe/num_experts: expected integer >= 0"},
      {[](ModelSpec* s) { s->moe = {4, 5}; }, "m:/moe/top_k: expected integer in [1, num_experts"},
      {[](ModelSpec* s) { s->moe = {4, 0}; }, "m:/moe/top_k: expected integer in [1, "},
      {[](ModelSpec* s) { s->moe = {4, 1, 0, 0, 0, true}; }, "m:/moe/shared_expert_gate"},
      {[](ModelSpec* s) { s->moe = {4, 1, -1}; }, "m:/moe/num_shared_experts: expected integer"},
      {[](ModelSpec* s) { s->moe = {4, 1, 0, -5}; }, "m:/moe/expert_ffn_hidden: expected"},
      {[](ModelSpec* s) { s->moe = {4, 1, 1, 0, -5}; }, "m:/moe/shared_expert_ffn_hidden"},
      {[](ModelSpec* s) {
         s->moe = {4, 1};
         s->mlp_bias = true;
       },
       "m:/mlp_bias: expected false"},
  };
  for (const Case& c : cases) {
    ModelSpec s = Small();
    c.mutate(&s);
    std::vector<std::string> problems = s.Problems("m");
    ASSERT_EQ(problems.size(), 1u) << c.message;
    EXPECT_THAT(problems[0], HasSubstr(c.message));
  }
  EXPECT_TRUE(Small().Problems("m").empty());
}

TEST(ModelSpecTest, ValidateJoinsAllProblems) {
  ModelSpec s = Small();
  s.num_layers = 0;
  s.vocab_size = 0;
  EXPECT_THAT([&] { s.Validate("m.json"); },
              ThrowsMessage<InputError>(AllOf(
                  HasSubstr("m.json:/num_layers: expected integer >= 1, got 0; "
                            "m.json:/vocab_size: expected integer >= 1, got 0"))));
}

TEST(ParameterCountTest, SwiGluDenseByPart) {
  ModelSpec s = Small();  // H 64, 4 heads of 16, 2 kv heads, F 160, V 100, RMSNorm, untied
  const int64_t H = 64, d = 16, a = 4, kv = 2, F = 160, V = 100;
  ParameterCounts c = CountParameters(s);
  EXPECT_EQ(c.embedding, V * H);
  EXPECT_EQ(c.positions, 0);
  EXPECT_EQ(c.block, H * a * d + 2 * H * kv * d + a * d * H + 3 * H * F + 2 * H);
  EXPECT_EQ(c.final_norm, H);
  EXPECT_EQ(c.lm_head, V * H);
  EXPECT_EQ(c.total, V * H + 2 * c.block + H + V * H);
  EXPECT_EQ(ParameterCount(s), c.total);
}

TEST(ParameterCountTest, BiasesQkNormAndTying) {
  ModelSpec s = Small();
  const int64_t H = 64, d = 16, a = 4, kv = 2, F = 160;
  int64_t base_block = CountParameters(s).block;
  s.qkv_bias = true;
  s.attn_out_bias = true;
  s.mlp_bias = true;  // SwiGLU: gate and up (F each) + down (H)
  s.qk_norm = true;   // Qwen3: RMSNorm(head_dim) on q and on k
  EXPECT_EQ(CountParameters(s).block, base_block + (a * d + 2 * kv * d) + H + (2 * F + H) + 2 * d);
  s.tied_embeddings = true;
  EXPECT_EQ(CountParameters(s).lm_head, 0);
}

TEST(ParameterCountTest, GeluLayerNormLearnedPositions) {
  ModelSpec s = Small();
  s.mlp = MlpKind::kGelu;
  s.norm = NormKind::kLayerNorm;
  s.norm_bias = true;
  s.positions = PositionKind::kLearned;
  s.mlp_bias = true;
  const int64_t H = 64, d = 16, a = 4, kv = 2, F = 160, S = 32;
  ParameterCounts c = CountParameters(s);
  EXPECT_EQ(c.positions, S * H);
  EXPECT_EQ(c.block, H * a * d + 2 * H * kv * d + a * d * H + 2 * H * F + (F + H) + 2 * (2 * H));
  EXPECT_EQ(c.final_norm, 2 * H);
}

TEST(ParameterCountTest, MoeWithSharedExpertAndGate) {
  ModelSpec s = Small();
  s.moe = {4, 2, 1, 48, 96, true};
  const int64_t H = 64, d = 16, a = 4, kv = 2, E = 4, Fe = 48, Fs = 96;
  int64_t attention = H * a * d + 2 * H * kv * d + a * d * H;
  int64_t moe = H * E + E * 3 * H * Fe + 3 * H * Fs + H;  // router, experts, shared, gate
  EXPECT_EQ(CountParameters(s).block, attention + moe + 2 * H);
}

TEST(ModelSpecJsonTest, MinimalDocumentGetsDefaults) {
  ModelSpec s = ModelSpecFromJson(SmallJson(), "m.json");
  EXPECT_EQ(s.name, "m.json");
  EXPECT_EQ(s.num_kv_heads, 4);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_EQ(s.norm, NormKind::kRmsNorm);
  EXPECT_EQ(s.mlp, MlpKind::kSwiGlu);
  EXPECT_EQ(s.positions, PositionKind::kRotary);
  EXPECT_FALSE(s.moe.enabled());
  EXPECT_FALSE(s.tied_embeddings);
}

TEST(ModelSpecJsonTest, EveryPresetRoundTrips) {
  for (const PresetInfo& p : ModelPresets()) {
    nlohmann::ordered_json out = ModelSpecToJson(p.spec);
    ModelSpec back = ModelSpecFromJson(ParseJsonText(out.dump(), "x.json"), "x.json");
    EXPECT_EQ(ModelSpecToJson(back).dump(), out.dump()) << p.name;
    EXPECT_EQ(ParameterCount(back), ParameterCount(p.spec)) << p.name;
  }
}

TEST(ModelSpecJsonTest, ReadsMoeFileFromTestData) {
  ModelSpec s = ReadModelSpecFile(std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/tiny-moe.model.json");
  EXPECT_EQ(s.name, "tiny-moe");
  EXPECT_EQ(s.moe.num_experts, 4);
  EXPECT_EQ(s.moe.top_k, 2);
  EXPECT_TRUE(s.moe.shared_expert_gate);
  const int64_t L = 2, H = 128, d = 32, a = 4, kv = 2, E = 4, Fe = 96, Fs = 192, V = 512;
  int64_t block = H * a * d + 2 * H * kv * d + a * d * H + H * E + E * 3 * H * Fe + 3 * H * Fs +
                  H + 2 * H;
  EXPECT_EQ(ParameterCount(s), V * H + L * block + H + V * H);
}

TEST(ModelSpecJsonTest, EnumsAndFlagsAreRead) {
  nlohmann::json j = SmallJson();
  j["norm"] = "layer_norm";
  j["norm_bias"] = true;
  j["mlp"] = "gelu";
  j["positions"] = "learned";
  j["parallel_residual"] = true;
  ModelSpec s = ModelSpecFromJson(j, "m.json");
  EXPECT_EQ(s.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(s.norm_bias);
  EXPECT_EQ(s.mlp, MlpKind::kGelu);
  EXPECT_EQ(s.positions, PositionKind::kLearned);
  EXPECT_TRUE(s.parallel_residual);
}

TEST(ModelSpecJsonTest, BadInputIsReportedWithPointer) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* message;
  };
  const Case cases[] = {
      {"num_layers", "32", "m.json:/num_layers: expected integer"},
      {"hidden", 1.5, "m.json:/hidden: expected integer"},
      {"norm", "rmsnorm", "m.json:/norm: expected one of rms_norm, layer_norm, got \"rmsnorm\" "
                          "(did you mean \"rms_norm\"?)"},
      {"mlp", "swiglu2", "(did you mean \"swiglu\"?)"},
      {"qkv_bias", 1, "m.json:/qkv_bias: expected true or false, got 1"},
      {"num_layer", 2, "m.json:/num_layer: unknown key (did you mean \"num_layers\"?)"},
      {"moe", nlohmann::json::object({{"num_experts", 2}}), "m.json:/moe: missing required key "
                                                            "\"top_k\""},
      {"moe", nlohmann::json::object({{"num_experts", 2}, {"top_k", 1}, {"topk", 1}}),
       "m.json:/moe/topk: unknown key"},
      {"schema", "shardtune.plan", "m.json:/schema: expected \"shardtune.model\""},
      {"schema_version", 2, "m.json:/schema_version: this shardtune reads shardtune.model up to "
                            "version 1, got 2"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = SmallJson();
    j[c.key] = c.value;
    EXPECT_THAT([&] { ModelSpecFromJson(j, "m.json"); },
                ThrowsMessage<InputError>(HasSubstr(c.message)))
        << c.key;
  }
  nlohmann::json j = SmallJson();
  j.erase("vocab_size");
  EXPECT_THAT([&] { ModelSpecFromJson(j, "m.json"); },
              ThrowsMessage<InputError>(HasSubstr("m.json:/: missing required key \"vocab_size\"")));
}

TEST(ModelSpecJsonTest, AllRangeProblemsAreReportedTogether) {
  nlohmann::json j = SmallJson();
  j["num_layers"] = 0;
  j["num_kv_heads"] = 3;
  j["moe"] = {{"num_experts", 2}, {"top_k", 3}};
  EXPECT_THAT([&] { ModelSpecFromJson(j, "m.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("m.json:/num_layers"),
                                              HasSubstr("m.json:/num_kv_heads"),
                                              HasSubstr("m.json:/moe/top_k"))));
}

TEST(ModelSpecJsonTest, MissingFileIsAnInputError) {
  EXPECT_THAT([] { ReadModelSpecFile("/nonexistent/model.json"); },
              ThrowsMessage<InputError>(HasSubstr("/nonexistent/model.json: cannot open")));
}

// Learned positions stop at their table; rotary positions extend (up to a sanity cap).
TEST(ModelSpecTest, SeqLenLimitFollowsThePositionKind) {
  ModelSpec s;
  s.max_seq_len = 1024;
  s.positions = PositionKind::kLearned;
  EXPECT_EQ(s.SeqLenLimit(), 1024);
  s.positions = PositionKind::kRotary;
  EXPECT_EQ(s.SeqLenLimit(), int64_t{1} << 24);
}

}  // namespace
}  // namespace shardtune::model
