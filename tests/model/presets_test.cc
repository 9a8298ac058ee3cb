// Tests of the preset table (presets.cc): every preset's closed-form count equals its published
// count, several also equal a hand formula written here, and --model resolution.
#include "model/presets.h"

#include <filesystem>
#include <optional>
#include <set>

#include <unistd.h>

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

TEST(PresetsTest, Qwen25SmallModelsTieTheHead) {
  // tie_word_embeddings true: the LM head is the embedding, counted once (V*H less than untied).
  auto qwen2 = [](int64_t L, int64_t H, int64_t kv_dim, int64_t F, int64_t V) {
    return LlamaFormula(L, H, kv_dim, F, V) + L * (H + 2 * kv_dim);
  };
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-3b")),
            qwen2(36, 2048, 2 * 128, 11008, 151936) - 151936 * 2048);
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-0.5b")),
            qwen2(24, 896, 2 * 64, 4864, 151936) - 151936 * 896);
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-32b")), qwen2(64, 5120, 8 * 128, 27648, 152064));
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2-7b")), ParameterCount(FindModelPreset("qwen2.5-7b")));
  EXPECT_EQ(ParameterCount(FindModelPreset("deepseek-llm-7b")),
            LlamaFormula(30, 4096, 4096, 11008, 102400));  // MHA: kv_dim = H
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

// Trainer configs name models as Hugging Face ids or local directories (verl's model.path, ROLL's
// pretrain). The ids are the presets' own sources (https://huggingface.co/<id>/blob/main/...).
TEST(PresetsTest, HuggingFaceNamesFindTheirPreset) {
  auto preset = [](const std::string& name) {
    std::optional<PresetMatch> m = FindPresetByHfName(name);
    return m ? m->preset : std::string("none");
  };
  auto how = [](const std::string& name) { return FindPresetByHfName(name)->how; };
  EXPECT_EQ(preset("Qwen/Qwen3-8B"), "qwen3-8b");
  EXPECT_EQ(how("Qwen/Qwen3-8B"), "");
  EXPECT_EQ(preset("qwen/qwen3-8b"), "qwen3-8b");  // the hub is case-insensitive
  EXPECT_EQ(preset("/mnt/hf/Qwen/Qwen3-8B/"), "qwen3-8b");
  EXPECT_EQ(how("/mnt/hf/Qwen/Qwen3-8B/"), "");
  EXPECT_EQ(preset("/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/0a1b2c"),
            "qwen3-8b");
  EXPECT_EQ(preset("~/models/Qwen3-8B"), "qwen3-8b");
  EXPECT_THAT(how("~/models/Qwen3-8B"), HasSubstr("repository name of Qwen/Qwen3-8B"));
  EXPECT_EQ(preset("Qwen/Qwen2.5-7B-Instruct"), "qwen2.5-7b");
  EXPECT_THAT(how("Qwen/Qwen2.5-7B-Instruct"),
              HasSubstr("Qwen2.5-7B-Instruct is a post-trained or base release of Qwen/Qwen2.5-7B"));
  EXPECT_EQ(preset("meta-llama/Llama-3.1-8B-Instruct"), "llama3.1-8b");
  EXPECT_EQ(preset("meta-llama/Llama-2-7b-chat-hf"), "llama2-7b");
  EXPECT_EQ(preset("google/gemma-2-9b-it"), "gemma2-9b");
  EXPECT_EQ(preset("Qwen/Qwen3-30B-A3B-Instruct-2507"), "qwen3-30b-a3b");
  // Other architectures, or the same shapes under another name, are not guessed.
  EXPECT_EQ(preset("deepseek-ai/deepseek-llm-7b-chat"), "deepseek-llm-7b");  // of -base
  EXPECT_EQ(preset("Qwen/Qwen2-7B-Instruct"), "qwen2-7b");
  EXPECT_EQ(preset("mistralai/Mistral-Nemo-Instruct-2407"), "none");
  EXPECT_EQ(preset("Qwen/Qwen2.5-Math-7B"), "none");
  EXPECT_EQ(preset("Qwen/Qwen3-8B-Extra"), "none");
  EXPECT_EQ(preset(""), "none");
  EXPECT_EQ(preset("/"), "none");
}

TEST(PresetsTest, ResolveModelArgTakesHubNamesAndModelDirectories) {
  std::vector<std::string> warnings;
  EXPECT_EQ(ResolveModelArg("Qwen/Qwen3-8B", &warnings).name, "qwen3-8b");
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(ResolveModelArg("Qwen/Qwen2.5-7B-Instruct", &warnings, "cfg.yaml:/pretrain").name,
            "qwen2.5-7b");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("cfg.yaml:/pretrain: \"Qwen/Qwen2.5-7B-Instruct\" read as "
                                     "preset qwen2.5-7b"));
  // A downloaded model: its directory's config.json.
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("shardtune_model_dir_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_THAT([&] { ResolveModelArg(dir.string(), nullptr, "cfg.yaml:/pretrain"); },
              ThrowsMessage<InputError>(HasSubstr(
                  "cfg.yaml:/pretrain: expected a model directory holding a config.json")));
  std::filesystem::copy_file(std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/llama3-8b.config.json",
                             dir / "config.json");
  EXPECT_EQ(ParameterCount(ResolveModelArg(dir.string(), nullptr)), 8'030'261'248);
  std::filesystem::remove_all(dir);
  EXPECT_THAT([] { ResolveModelArg("mistralai/Mistral-Nemo-Instruct-2407", nullptr, "cfg.yaml:/x"); },
              ThrowsMessage<InputError>(HasSubstr(
                  "cfg.yaml:/x: expected a preset, a Hugging Face id of one, a model directory "
                  "with config.json or a JSON file, got \"mistralai/Mistral-Nemo-Instruct-2407\"")));
  EXPECT_THAT([] { ResolveModelArg("gtp2", nullptr, "cfg.yaml:/x"); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/x: unknown preset \"gtp2\"")));
}

}  // namespace
}  // namespace shardtune::model
