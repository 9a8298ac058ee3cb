// Tests of the HF config.json import (hf_config.cc) on real config.json files under
// tests/data/model/: imported counts equal the published ones, warnings, and every error path.
#include "model/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/model_spec_json.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "tests/model/hf_test_util.h"

namespace shardtune::model {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;

using testing_util::Data;
using testing_util::ExpectEachImportFails;
using testing_util::Shape;

nlohmann::json Load(const std::string& name) { return ReadJsonFile(Data(name)); }

TEST(HfConfigTest, RealConfigsImportToThePresetShapes) {
  const std::pair<const char*, const char*> cases[] = {
      {"llama2-7b.config.json", "llama2-7b"},     {"llama3-8b.config.json", "llama3-8b"},
      {"gpt2.config.json", "gpt2"},               {"mixtral-8x7b.config.json", "mixtral-8x7b"},
      {"qwen2.5-7b.config.json", "qwen2.5-7b"},   {"qwen3-8b.config.json", "qwen3-8b"},
  };
  for (const auto& [file, preset] : cases) {
    std::vector<std::string> warnings;
    ModelSpec s = ReadHfConfigFile(Data(file), &warnings);
    EXPECT_TRUE(warnings.empty()) << file << ": " << (warnings.empty() ? "" : warnings[0]);
    EXPECT_EQ(Shape(s), Shape(FindModelPreset(preset))) << file;
    EXPECT_EQ(ParameterCount(s), ParameterCount(FindModelPreset(preset))) << file;
  }
}

TEST(HfConfigTest, PublishedCountsOfImportedConfigs) {
  EXPECT_EQ(ParameterCount(ReadHfConfigFile(Data("llama3-8b.config.json"))), 8'030'261'248);
  EXPECT_EQ(ParameterCount(ReadHfConfigFile(Data("llama2-7b.config.json"))), 6'738'415'616);
  EXPECT_EQ(ParameterCount(ReadHfConfigFile(Data("gpt2.config.json"))), 124'439'808);
  EXPECT_EQ(ParameterCount(ReadHfConfigFile(Data("mixtral-8x7b.config.json"))), 46'702'792'704);
}

// A reward model's config.json (huggingface.co/Skywork/Skywork-Reward-Llama-3.1-8B, the reward
// model of verl's examples/grpo_trainer/run_mistral13b_skyworkrm_hhrlhf.sh):
// LlamaForSequenceClassification is LlamaModel plus score = Linear(H, num_labels, bias=False) in
// place of the LM head. verl loads it as AutoModelForTokenClassification with num_labels 1
// (score Linear(H, 1) with a bias), the value head: the count is Llama 3.1 8B's with a
// vocabulary of 128257 (a pad token added) less its V x H LM head, plus H + 1.
TEST(HfConfigTest, ClassifierConfigsAreTheDecoderWithAValueHead) {
  std::vector<std::string> warnings;
  ModelSpec rm = ReadHfConfigFile(Data("skywork-reward-llama3.1-8b.config.json"), &warnings);
  EXPECT_TRUE(warnings.empty()) << (warnings.empty() ? "" : warnings[0]);
  EXPECT_TRUE(rm.value_head);
  EXPECT_EQ(rm.HeadOutputs(), 1);
  EXPECT_EQ(rm.hf_architecture, "LlamaForCausalLM");
  EXPECT_THAT(rm.source, HasSubstr("LlamaForSequenceClassification"));
  nlohmann::json causal = Load("skywork-reward-llama3.1-8b.config.json");
  causal["architectures"] = {"LlamaForCausalLM"};
  ModelSpec lm = ImportHfConfig(causal, "config.json");
  EXPECT_FALSE(lm.value_head);
  const int64_t V = 128257, H = 4096;
  EXPECT_EQ(ParameterCount(rm), ParameterCount(lm) - V * H + H + 1);
  // Llama 3.1 8B's published 8,030,261,248 with one more embedding row and LM head row.
  EXPECT_EQ(ParameterCount(lm), 8'030'261'248 + 2 * H);
  causal["architectures"] = {"Qwen2ForTokenClassification"};
  causal["model_type"] = "qwen2";
  EXPECT_TRUE(ImportHfConfig(causal, "config.json").value_head);
  causal["architectures"] = {"BertForSequenceClassification"};
  EXPECT_THAT([&] { ImportHfConfig(causal, "config.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("config.json:/architectures/0"),
                                              HasSubstr("BertForSequenceClassification"))));
}

TEST(HfConfigTest, NameComesFromNameOrPathElseFile) {
  EXPECT_EQ(ReadHfConfigFile(Data("llama2-7b.config.json")).name, "meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(ReadHfConfigFile(Data("gpt2.config.json")).name, Data("gpt2.config.json"));
}

TEST(HfConfigTest, GptNeoxPythia160m) {
  // modeling_gpt_neox.py: embed_in and embed_out V*H (untied); per layer two LayerNorms (2H
  // each), query_key_value H*3H + 3H, dense H*H + H, dense_h_to_4h H*F + F, dense_4h_to_h F*H + H;
  // final_layer_norm 2H. Pythia paper (Biderman et al. 2023), Table: 162,322,944 for 160M.
  ModelSpec s = ReadHfConfigFile(Data("pythia-160m.config.json"));
  const int64_t L = 12, H = 768, F = 3072, V = 50304;
  int64_t layer = 2 * (2 * H) + (H * 3 * H + 3 * H) + (H * H + H) + (H * F + F) + (F * H + H);
  EXPECT_EQ(ParameterCount(s), 2 * V * H + L * layer + 2 * H);
  EXPECT_EQ(ParameterCount(s), 162'322'944);
  EXPECT_TRUE(s.parallel_residual);
  EXPECT_EQ(s.positions, PositionKind::kRotary);
  EXPECT_EQ(s.mlp, MlpKind::kGelu);
}

// What the layers compute with (the executor uses it): the published configs' rope_theta,
// rms_norm_eps / layer_norm_epsilon / layer_norm_eps, rotary_pct, and rope_scaling in both the
// rope_scaling and the newer rope_parameters spelling.
TEST(HfConfigTest, RotaryBaseScalingFractionAndEpsilonAreRead) {
  ModelSpec l3 = ReadHfConfigFile(Data("llama3-8b.config.json"));
  EXPECT_EQ(l3.rope_theta, 500000.0);
  EXPECT_EQ(l3.norm_eps, 1e-5);
  EXPECT_FALSE(l3.rope_scaling.enabled());
  ModelSpec q = ReadHfConfigFile(Data("qwen2.5-7b.config.json"));
  EXPECT_EQ(q.rope_theta, 1e6);
  EXPECT_EQ(q.norm_eps, 1e-6);
  ModelSpec neox = ReadHfConfigFile(Data("pythia-160m.config.json"));  // rotary_pct 0.25
  EXPECT_EQ(neox.rotary_fraction, 0.25);
  EXPECT_EQ(neox.rope_theta, 10000.0);  // rotary_emb_base
  EXPECT_EQ(ReadHfConfigFile(Data("gpt2.config.json")).norm_eps, 1e-5);  // layer_norm_epsilon
  // meta-llama/Llama-3.1-8B's config.json: Llama 3 8B's with 131072 positions and this.
  nlohmann::json j = Load("llama3-8b.config.json");
  j["max_position_embeddings"] = 131072;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelSpec l31 = ImportHfConfig(j, "config.json");
  EXPECT_EQ(Shape(l31), Shape(FindModelPreset("llama3.1-8b")));
  EXPECT_EQ(l31.rope_scaling.type, "llama3");
  EXPECT_EQ(l31.rope_scaling.factor, 8.0);
  // Newer transformers: rope_parameters carries rope_theta; "default" is plain RoPE.
  j = Load("llama3-8b.config.json");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_theta", 250000.0}, {"rope_type", "default"}};
  ModelSpec p = ImportHfConfig(j, "config.json");
  EXPECT_EQ(p.rope_theta, 250000.0);
  EXPECT_FALSE(p.rope_scaling.enabled());
  // The model spec JSON keeps all of it.
  EXPECT_EQ(ModelSpecToJson(ModelSpecFromJson(ModelSpecToJson(l31), "x.json")).dump(),
            ModelSpecToJson(l31).dump());
}

TEST(HfConfigTest, BadRotaryKeysAreOneLineErrors) {
  auto with = [](const char* key, const nlohmann::json& v) {
    nlohmann::json j = Load("llama3-8b.config.json");
    j[key] = v;
    return j;
  };
  EXPECT_THAT([&] { ImportHfConfig(with("rope_scaling", "yes"), "config.json"); },
              ThrowsMessage<InputError>(
                  HasSubstr("config.json:/rope_scaling: expected an object or null")));
  EXPECT_THAT(
      [&] {
        ImportHfConfig(with("rope_scaling", {{"rope_type", "llama3"}}), "config.json");
      },
      ThrowsMessage<InputError>(
          HasSubstr("config.json:/rope_scaling/factor: expected a number > 0, got nothing")));
  EXPECT_THAT([&] { ImportHfConfig(with("rms_norm_eps", -1), "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("config.json:/rms_norm_eps")));
  EXPECT_THAT([&] { ImportHfConfig(with("rope_theta", "big"), "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("config.json:/rope_theta")));
  // A token count a 64-bit integer cannot hold, or a fraction of a token, is an error (fuzz_hf_config
  // found 4.09e128 reaching an undefined double-to-int64 cast).
  for (const char* type : {"llama3", "yarn"}) {
    for (double bad : {4.08889e128, 8192.5}) {
      nlohmann::json rope = {{"rope_type", type}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0}, {"original_max_position_embeddings", bad}};
      EXPECT_THAT([&] { ImportHfConfig(with("rope_scaling", rope), "config.json"); },
                  ThrowsMessage<InputError>(HasSubstr(
                      "config.json:/rope_scaling/original_max_position_embeddings: expected a whole "
                      "number in [1, 1e15], got")))
          << type << " " << bad;
    }
  }
}

TEST(HfConfigTest, Qwen2MoeSharedExpertAndGate) {
  // Qwen1.5-MoE-A2.7B: 60 experts of 1408, one shared expert of 5632 with a sigmoid gate, q/k/v
  // bias. HF lists it as 14.3B parameters.
  ModelSpec s = ReadHfConfigFile(Data("qwen1.5-moe-a2.7b.config.json"));
  const int64_t L = 24, H = 2048, E = 60, Fe = 1408, Fs = 5632, V = 151936;
  int64_t layer = 4 * H * H + 3 * H + H * E + E * 3 * H * Fe + 3 * H * Fs + H + 2 * H;
  EXPECT_EQ(ParameterCount(s), 2 * V * H + L * layer + H);
  EXPECT_NEAR(static_cast<double>(ParameterCount(s)), 14.3e9, 0.05e9);
  EXPECT_EQ(s.moe.top_k, 4);
  EXPECT_EQ(s.moe.num_shared_experts, 1);
}

TEST(HfConfigTest, Gpt2NullInnerMeansFourTimesHidden) {
  nlohmann::json j = Load("gpt2.config.json");
  j["n_inner"] = nullptr;
  EXPECT_EQ(ImportHfConfig(j, "config.json").ffn_hidden, 4 * 768);
  j["n_inner"] = 1000;
  EXPECT_EQ(ImportHfConfig(j, "config.json").ffn_hidden, 1000);
}

TEST(HfConfigTest, LlamaBiasFlagsAndExplicitHeadDim) {
  nlohmann::json j = Load("llama3-8b.config.json");
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["head_dim"] = 64;  // kept as given: q_dim 32*64 != hidden
  ModelSpec s = ImportHfConfig(j, "config.json");
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_TRUE(s.attn_out_bias);
  EXPECT_TRUE(s.mlp_bias);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.q_dim(), 32 * 64);
}

TEST(HfConfigTest, ModelTypeAloneSelectsTheArchitecture) {
  nlohmann::json j = Load("llama3-8b.config.json");
  j.erase("architectures");
  EXPECT_EQ(ParameterCount(ImportHfConfig(j, "config.json")), 8'030'261'248);
}

TEST(HfConfigTest, UnknownKeysWarnWithPointerAndDoNotFail) {
  nlohmann::json j = Load("llama3-8b.config.json");
  j["quantization_config"] = {{"bits", 4}};
  j["n_layer"] = 3;  // a GPT-2 key means nothing to Llama
  std::vector<std::string> warnings;
  ImportHfConfig(j, "config.json", &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("config.json:/n_layer: unknown key for LlamaForCausalLM"));
  EXPECT_THAT(warnings[1], HasSubstr("config.json:/quantization_config: unknown key"));
  EXPECT_NO_THROW(ImportHfConfig(j, "config.json", nullptr));
}

TEST(HfConfigTest, MissingOrMistypedKeysFail) {
  ExpectEachImportFails({
      {"llama3-8b.config.json", [](nlohmann::json& j) { j.erase("hidden_size"); }, "config.json",
       "config.json:/: missing required key \"hidden_size\""},
      {"llama3-8b.config.json", [](nlohmann::json& j) { j["hidden_size"] = "4096"; },
       "config.json",
       "config.json:/hidden_size: expected integer in [1, 2147483647], got string \"4096\""},
      {"llama3-8b.config.json", [](nlohmann::json& j) { j["hidden_size"] = 0; }, "config.json",
       "config.json:/hidden_size: expected integer"},
      {"llama3-8b.config.json", [](nlohmann::json& j) { j["tie_word_embeddings"] = "no"; },
       "config.json", "config.json:/tie_word_embeddings: expected true or false"},
      {"mixtral-8x7b.config.json", [](nlohmann::json& j) { j.erase("num_local_experts"); },
       "config.json", "\"num_local_experts\""},
  });
}

TEST(HfConfigTest, CrossFieldProblemsAreValidated) {
  nlohmann::json j = Load("llama3-8b.config.json");
  j["num_key_value_heads"] = 6;  // does not divide 32
  EXPECT_THAT([&] { ImportHfConfig(j, "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("num_kv_heads: expected a divisor")));
}

TEST(HfConfigTest, UnsupportedArchitectureListsSupported) {
  nlohmann::json j = Load("llama3-8b.config.json");
  j["architectures"] = {"LlamaForCausalLMM"};
  EXPECT_THAT([&] { ImportHfConfig(j, "config.json"); },
              ThrowsMessage<InputError>(AllOf(
                  HasSubstr("config.json:/architectures/0: unsupported architecture"),
                  HasSubstr("(did you mean \"LlamaForCausalLM\"?)"),
                  HasSubstr("supported: LlamaForCausalLM, MistralForCausalLM"),
                  HasSubstr("GPTNeoXForCausalLM"))));
  j["architectures"] = {"T5ForConditionalGeneration"};
  EXPECT_THAT([&] { ImportHfConfig(j, "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("supported: ")));
  j["architectures"] = 5;
  EXPECT_THAT([&] { ImportHfConfig(j, "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("config.json:/architectures: expected a "
                                                  "non-empty array of strings")));
  j.erase("architectures");
  j["model_type"] = "bert";
  EXPECT_THAT([&] { ImportHfConfig(j, "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("config.json:/model_type: unsupported")));
}

TEST(HfConfigTest, Qwen2MoeWithDenseLayersIsRejected) {
  nlohmann::json j = Load("qwen1.5-moe-a2.7b.config.json");
  j["decoder_sparse_step"] = 2;
  EXPECT_THAT([&] { ImportHfConfig(j, "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("config.json:/decoder_sparse_step: expected 1")));
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = {0, 1};
  EXPECT_THAT([&] { ImportHfConfig(j, "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("config.json:/mlp_only_layers: expected []")));
}

TEST(HfConfigTest, LooksLikeHfConfig) {
  EXPECT_TRUE(LooksLikeHfConfig(Load("gpt2.config.json")));
  EXPECT_TRUE(LooksLikeHfConfig(nlohmann::json{{"model_type", "llama"}}));
  EXPECT_FALSE(LooksLikeHfConfig(Load("tiny-moe.model.json")));
  EXPECT_FALSE(LooksLikeHfConfig(nlohmann::json::array()));
  // + Qwen3-MoE, Phi-3, OLMo 2, Gemma 2 / 3, GPT-OSS, DeepSeek-V2 and V3, Gemma 1, Seed-OSS
  EXPECT_EQ(SupportedHfArchitectures().size(), 22u);
}

TEST(HfConfigTest, NotAnObjectFails) {
  EXPECT_THAT([] { ImportHfConfig(nlohmann::json::array(), "config.json"); },
              ThrowsMessage<InputError>(HasSubstr("config.json:/: expected a JSON object")));
}

}  // namespace
}  // namespace shardtune::model
