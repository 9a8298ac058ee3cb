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

using testing::Not;
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

// The preset a Hugging Face name finds ("none" when none), and how it was found.
std::string preset(const std::string& name) {
  std::optional<PresetMatch> m = FindPresetByHfName(name);
  return m ? m->preset : std::string("none");
}
std::string how(const std::string& name) { return FindPresetByHfName(name)->how; }

// Trainer configs name models as Hugging Face ids or local directories (verl's model.path, ROLL's
// pretrain). The ids are the presets' own sources (https://huggingface.co/<id>/blob/main/...).
TEST(PresetsTest, HuggingFaceNamesFindTheirPreset) {
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
  // A variant's warning tells the user to give its config.json, by the flag that takes it.
  EXPECT_TRUE(FindPresetByHfName("Qwen/Qwen2.5-7B-Instruct")->variant);
  EXPECT_FALSE(FindPresetByHfName("~/models/Qwen3-8B")->variant);
  std::vector<std::string> w;
  ResolveModelArg("Qwen/Qwen2.5-7B-Instruct", &w);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("same architecture; give --model its config.json to read it exactly)"));
  w.clear();
  ResolveModelArg("Qwen/Qwen2.5-7B-Instruct", &w, "cfg.yaml:/reward_model/model/path", "--reward-model");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("give --reward-model its config.json to read it exactly)"));
  w.clear();
  ResolveModelArg("~/models/Qwen3-8B", &w);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], Not(HasSubstr("give --model")));
  EXPECT_EQ(preset("meta-llama/Llama-3.1-8B-Instruct"), "llama3.1-8b");
  EXPECT_EQ(preset("meta-llama/Llama-2-7b-chat-hf"), "llama2-7b");
  EXPECT_EQ(preset("google/gemma-2-9b-it"), "gemma2-9b");
  EXPECT_EQ(preset("Qwen/Qwen3-30B-A3B-Instruct-2507"), "qwen3-30b-a3b");
  // Other architectures, or the same shapes under another name, are not guessed.
  EXPECT_EQ(preset("deepseek-ai/deepseek-llm-7b-chat"), "deepseek-llm-7b");  // of -base
  EXPECT_EQ(preset("Qwen/Qwen2-7B-Instruct"), "qwen2-7b");
  EXPECT_EQ(preset("mistralai/Mistral-Large-Instruct-2407"), "none");
  EXPECT_EQ(preset("Qwen/Qwen2.5-Math-72B"), "none");
  EXPECT_EQ(preset("Qwen/Qwen3-8B-Extra"), "none");
  EXPECT_EQ(preset(""), "none");
  EXPECT_EQ(preset("/"), "none");
}

// The models verl's and ROLL's example configs name (examples/, recipe/, their docs), as they name
// them: hub ids, ~/ directories named as the repository, hub-cache snapshots, base and
// post-trained variants.
TEST(PresetsTest, RecipeModelNamesFindTheirPreset) {
  EXPECT_EQ(preset("Qwen/Qwen2.5-Math-7B"), "qwen2.5-math-7b");
  EXPECT_EQ(how("Qwen/Qwen2.5-Math-7B"), "");
  EXPECT_EQ(preset("~/verl/models/Qwen2.5-Math-7B"), "qwen2.5-math-7b");
  EXPECT_THAT(how("~/verl/models/Qwen2.5-Math-7B"),
              HasSubstr("repository name of Qwen/Qwen2.5-Math-7B"));
  EXPECT_EQ(preset("${RAY_DATA_HOME}/models/Qwen2.5-Math-7B"), "qwen2.5-math-7b");
  EXPECT_EQ(preset("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-Math-1.5B/snapshots/ab12"),
            "qwen2.5-math-1.5b");
  EXPECT_EQ(preset("Qwen/Qwen2.5-Math-7B-Instruct"), "qwen2.5-math-7b");
  EXPECT_EQ(preset("google/gemma-1.1-7b-it"), "gemma-1.1-7b");
  EXPECT_EQ(how("google/gemma-1.1-7b-it"), "");
  EXPECT_EQ(preset("~/models/gemma-1.1-7b-it"), "gemma-1.1-7b");
  EXPECT_EQ(preset("google/gemma-2b-it"), "gemma-2b");
  EXPECT_THAT(how("google/gemma-2b-it"), HasSubstr("release of google/gemma-2b"));
  EXPECT_EQ(preset("google/gemma-2-2b-it"), "gemma2-2b");
  EXPECT_EQ(preset("Qwen/Qwen3-1.7B"), "qwen3-1.7b");
  EXPECT_EQ(preset("Qwen/Qwen3-4B-Base"), "qwen3-4b");  // ROLL's pretrain
  EXPECT_EQ(preset("Qwen/Qwen3-4B-Instruct-2507"), "qwen3-4b");
  EXPECT_EQ(preset("Qwen/Qwen3-32B"), "qwen3-32b");
  EXPECT_EQ(preset("Qwen/Qwen3-30B-A3B-Base"), "qwen3-30b-a3b");
  EXPECT_EQ(preset("Qwen/Qwen2.5-Coder-14B-Instruct"), "qwen2.5-coder-14b");
  EXPECT_EQ(preset("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"), "deepseek-r1-distill-qwen-1.5b");
  EXPECT_EQ(preset("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"), "deepseek-r1-distill-qwen-32b");
  EXPECT_EQ(preset("deepseek-ai/deepseek-coder-6.7b-instruct"), "deepseek-coder-6.7b");
  EXPECT_EQ(preset("mistralai/Mistral-Nemo-Instruct-2407"), "mistral-nemo-12b");
  EXPECT_EQ(preset("ByteDance-Seed/Seed-OSS-36B-Base"), "seed-oss-36b");
  EXPECT_EQ(preset("ByteDance-Seed/Seed-OSS-36B-Instruct"), "seed-oss-36b");
  std::vector<std::string> warnings;
  EXPECT_EQ(ResolveModelArg("Qwen/Qwen2.5-Math-7B", &warnings).name, "qwen2.5-math-7b");
  EXPECT_EQ(ResolveModelArg("google/gemma-1.1-7b-it", &warnings).name, "gemma-1.1-7b");
  EXPECT_TRUE(warnings.empty());
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
  EXPECT_THAT([] { ResolveModelArg("mistralai/Mistral-Large-Instruct-2407", nullptr, "cfg.yaml:/x"); },
              ThrowsMessage<InputError>(HasSubstr(
                  "cfg.yaml:/x: expected a preset, a Hugging Face id of one, a model directory "
                  "with config.json or a JSON file, got "
                  "\"mistralai/Mistral-Large-Instruct-2407\"")));
  EXPECT_THAT([] { ResolveModelArg("gtp2", nullptr, "cfg.yaml:/x"); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/x: unknown preset \"gtp2\"")));
}

// A Llama-layout decoder with every width written out (modeling_llama.py and its copies): embed
// V*H; per layer q_proj [qd, H], k_proj and v_proj [kvd, H], o_proj [H, qd], the gated MLP 3*H*F,
// two norms [H]; with biases on q/k/v (qd + 2 kvd) and on o_proj (H) when asked; final norm H;
// the LM head V*H unless tied. qd = heads x head_dim, which need not be H.
int64_t DecoderFormula(int64_t L, int64_t H, int64_t qd, int64_t kvd, int64_t F, int64_t V,
                       bool tied, bool qkv_bias = false, bool o_bias = false) {
  int64_t layer = 2 * H * qd + 2 * H * kvd + 3 * H * F + 2 * H;
  if (qkv_bias) layer += qd + 2 * kvd;
  if (o_bias) layer += H;
  return V * H + L * layer + H + (tied ? 0 : V * H);
}

TEST(PresetsTest, Qwen3DenseFamilyByHand) {
  // head_dim 128 everywhere (q_dim 2048 != H 1024 for the 0.6B), q_norm and k_norm [128].
  auto qwen3 = [](int64_t L, int64_t H, int64_t heads, int64_t F, bool tied) {
    return DecoderFormula(L, H, heads * 128, 8 * 128, F, 151936, tied) + L * 2 * 128;
  };
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen3-0.6b")), qwen3(28, 1024, 16, 3072, true));
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen3-1.7b")), qwen3(28, 2048, 16, 6144, true));
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen3-4b")), qwen3(36, 2560, 32, 9728, true));
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen3-8b")), qwen3(36, 4096, 32, 12288, false));
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen3-14b")), qwen3(40, 5120, 40, 17408, false));
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen3-32b")), qwen3(64, 5120, 64, 25600, false));
  for (const char* name : {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-14b", "qwen3-32b"}) {
    ModelSpec s = FindModelPreset(name);
    EXPECT_EQ(s.hf_architecture, "Qwen3ForCausalLM") << name;
    EXPECT_EQ(s.max_seq_len, 40960) << name;
    EXPECT_EQ(s.rope_theta, 1e6) << name;
    EXPECT_TRUE(s.qk_norm) << name;
  }
  // The MoEs keep theirs ("qwen3-" is matched after "qwen3-30b" and "qwen3-235b").
  EXPECT_EQ(FindModelPreset("qwen3-30b-a3b").hf_architecture, "Qwen3MoeForCausalLM");
  EXPECT_EQ(FindModelPreset("qwen3-235b-a22b").hf_architecture, "Qwen3MoeForCausalLM");
}

TEST(PresetsTest, QwenMathCoderAndR1DistillsByHand) {
  auto qwen2 = [](int64_t L, int64_t H, int64_t heads, int64_t kv, int64_t F, int64_t V,
                  bool tied) {
    return DecoderFormula(L, H, heads * (H / heads), kv * (H / heads), F, V, tied, true);
  };
  const int64_t math15 = qwen2(28, 1536, 12, 2, 8960, 151936, true);
  const int64_t q7 = qwen2(28, 3584, 28, 4, 18944, 152064, false);
  const int64_t q14 = qwen2(48, 5120, 40, 8, 13824, 152064, false);
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-math-1.5b")), math15);
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-math-7b")), q7);
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-coder-7b")), q7);
  EXPECT_EQ(ParameterCount(FindModelPreset("qwen2.5-coder-14b")), q14);
  EXPECT_EQ(ParameterCount(FindModelPreset("deepseek-r1-distill-qwen-7b")), q7);
  EXPECT_EQ(ParameterCount(FindModelPreset("deepseek-r1-distill-qwen-14b")), q14);
  EXPECT_EQ(ParameterCount(FindModelPreset("deepseek-r1-distill-qwen-32b")),
            qwen2(64, 5120, 40, 8, 27648, 152064, false));
  // R1-Distill-Qwen-1.5B unties Qwen2.5-Math-1.5B's head: V x H more.
  EXPECT_EQ(ParameterCount(FindModelPreset("deepseek-r1-distill-qwen-1.5b")),
            math15 + 151936 * 1536);
  EXPECT_FALSE(FindModelPreset("deepseek-r1-distill-qwen-1.5b").tied_embeddings);
  EXPECT_TRUE(FindModelPreset("qwen2.5-math-1.5b").tied_embeddings);
  // The math base models' short context and rotary base (verl's DAPO recipe raises it to 32k).
  ModelSpec math7 = FindModelPreset("qwen2.5-math-7b");
  EXPECT_EQ(math7.max_seq_len, 4096);
  EXPECT_EQ(math7.rope_theta, 10000.0);
  EXPECT_EQ(FindModelPreset("deepseek-r1-distill-qwen-7b").max_seq_len, 131072);
  EXPECT_EQ(FindModelPreset("deepseek-r1-distill-qwen-7b").rope_theta, 10000.0);
  for (const char* name : {"qwen2.5-math-7b", "qwen2.5-coder-14b", "deepseek-r1-distill-qwen-1.5b",
                           "deepseek-r1-distill-qwen-32b"}) {
    EXPECT_EQ(FindModelPreset(name).hf_architecture, "Qwen2ForCausalLM") << name;
  }
}

TEST(PresetsTest, DeepseekCoderMistralNemoAndSeedOssByHand) {
  ModelSpec coder = FindModelPreset("deepseek-coder-6.7b");
  EXPECT_EQ(ParameterCount(coder), LlamaFormula(32, 4096, 4096, 11008, 32256));  // MHA
  EXPECT_EQ(coder.rope_scaling.type, "linear");
  EXPECT_EQ(coder.rope_scaling.factor, 4.0);
  EXPECT_EQ(coder.max_seq_len, 16384);
  EXPECT_EQ(coder.hf_architecture, "LlamaForCausalLM");
  // Mistral NeMo: 32 heads of 128 (q_dim 4096) on H 5120, 8 kv heads.
  ModelSpec nemo = FindModelPreset("mistral-nemo-12b");
  EXPECT_EQ(ParameterCount(nemo), DecoderFormula(40, 5120, 4096, 1024, 14336, 131072, false));
  EXPECT_EQ(nemo.hf_architecture, "MistralForCausalLM");
  // Seed-OSS: 80 heads of 128 (q_dim 10240) on H 5120, q/k/v biases, o_proj without.
  ModelSpec seed = FindModelPreset("seed-oss-36b");
  EXPECT_EQ(ParameterCount(seed),
            DecoderFormula(64, 5120, 10240, 1024, 27648, 155136, false, true, false));
  EXPECT_TRUE(seed.qkv_bias);
  EXPECT_FALSE(seed.attn_out_bias);
  EXPECT_EQ(seed.hf_architecture, "SeedOssForCausalLM");
}

TEST(PresetsTest, Gemma1ByHandIsPreNormGeGluTied) {
  // GemmaForCausalLM: Llama's layout with head_dim 256, two (1 + w) norms per layer, tied head.
  ModelSpec g2b = FindModelPreset("gemma-2b");
  EXPECT_EQ(ParameterCount(g2b), DecoderFormula(18, 2048, 8 * 256, 1 * 256, 16384, 256000, true));
  ModelSpec g7b = FindModelPreset("gemma-7b");
  EXPECT_EQ(ParameterCount(g7b), DecoderFormula(28, 3072, 16 * 256, 16 * 256, 24576, 256000, true));
  for (const ModelSpec& s : {g2b, g7b}) {
    EXPECT_EQ(s.norm_placement, NormPlacement::kPre) << s.name;
    EXPECT_TRUE(s.norm_unit_offset && s.norm_weight_fp32 && s.gelu_gate && s.scaled_embedding)
        << s.name;
    EXPECT_EQ(s.final_logit_softcap, 0) << s.name;
    EXPECT_EQ(s.sliding_window, 0) << s.name;
    EXPECT_EQ(s.query_pre_attn_scalar, 0) << s.name;  // head_dim^-0.5
    EXPECT_EQ(s.hf_architecture, "GemmaForCausalLM") << s.name;
  }
  EXPECT_EQ(g2b.num_kv_heads, 1);  // multi-query
  // The 1.1 releases are the same architecture under their own ids.
  EXPECT_EQ(ParameterCount(FindModelPreset("gemma-1.1-7b")), ParameterCount(g7b));
  EXPECT_EQ(ParameterCount(FindModelPreset("gemma-1.1-2b")), ParameterCount(g2b));
  // Gemma 2 2B: four norms per layer.
  ModelSpec g22 = FindModelPreset("gemma2-2b");
  EXPECT_EQ(ParameterCount(g22),
            DecoderFormula(26, 2304, 8 * 256, 4 * 256, 9216, 256000, true) + 26 * 2 * 2304);
  EXPECT_EQ(g22.hf_architecture, "Gemma2ForCausalLM");
}

}  // namespace
}  // namespace shardtune::model
