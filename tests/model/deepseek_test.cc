// DeepSeek-V3 and DeepSeek-V2 (issue #20): multi-head latent attention, the dense blocks before
// the MoE ones (first_k_dense_replace), the shared MLP and DeepSeek's fp32 router. The configs in
// tests/data/model/ are the published config.json files of deepseek-ai/DeepSeek-V3 and
// deepseek-ai/DeepSeek-V2-Lite (auto_map kept); counts follow the formula written here from
// modeling_deepseek_v3.py's modules and are checked against DeepSeek's published totals; what the
// new ops save for backward follows a hand count from the modeling code.
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/activations.h"
#include "model/context_parallel.h"
#include "model/errors.h"
#include "model/gemm_shapes.h"
#include "model/hf_config.h"
#include "model/model_spec_json.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "tests/model/hf_test_util.h"

namespace shardtune::model {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;
using testing_util::Bf16Sdpa;
using testing_util::Data;
using testing_util::Shape;

// DeepseekV3ForCausalLM's parameters: embed_tokens and lm_head V x H, the final norm H; per block
// two norms H and the attention: q_a_proj [ql, H], q_a_layernorm ql, q_b_proj [a·(n + r), ql] (or
// q_proj [a·(n + r), H] when ql is 0), kv_a_proj_with_mqa [kvl + r, H], kv_a_layernorm kvl,
// kv_b_proj [a·(n + v), kvl], o_proj [H, a·v]; a dense block's MLP 3·H·F, an MoE block's router
// gate [E, H], E experts of 3·H·Fe and the shared MLP 3·H·(shared·Fe).
double DeepseekFormula(double L, double H, double a, double ql, double kvl, double n, double r,
                       double v, double F, double V, double E, double Fe, double shared,
                       double dense) {
  double q = ql > 0 ? H * ql + ql + ql * a * (n + r) : H * a * (n + r);
  double attn = q + H * (kvl + r) + kvl + kvl * a * (n + v) + a * v * H;
  double dense_block = attn + 2 * H + 3 * H * F;
  double moe_block = attn + 2 * H + E * H + E * 3 * H * Fe + 3 * H * shared * Fe;
  return 2 * V * H + H + dense * dense_block + (L - dense) * moe_block;
}

TEST(DeepseekTest, V3ImportsToThePresetWithTheQuantizationWarningOnly) {
  std::vector<std::string> warnings;
  ModelSpec s = ReadHfConfigFile(Data("deepseek-v3.config.json"), &warnings);
  ASSERT_EQ(warnings.size(), 1u) << warnings[0];
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("quantization_config"), HasSubstr("fp8")));
  EXPECT_EQ(Shape(s), Shape(FindModelPreset("deepseek-v3")));
  EXPECT_EQ(s.mla.q_lora_rank, 1536);
  EXPECT_EQ(s.mla.kv_lora_rank, 512);
  EXPECT_EQ(s.head_dim, 192);  // qk_nope_head_dim + qk_rope_head_dim
  EXPECT_EQ(s.v_dim(), 128 * 128);
  EXPECT_EQ(s.moe.first_dense_layers, 3);
  EXPECT_TRUE(s.moe.deepseek_router);
  EXPECT_EQ(s.moe.shared_expert_ffn_hidden, 2048);
  EXPECT_EQ(s.moe.n_group, 8);
  EXPECT_EQ(s.moe.topk_group, 4);
  EXPECT_DOUBLE_EQ(s.moe.routed_scaling_factor, 2.5);
  EXPECT_FALSE(s.MoeLayer(2));
  EXPECT_TRUE(s.MoeLayer(3));
  // rope_scaling: YaRN with every key the executor computes with, as the preset carries them.
  const RopeScaling& r = s.rope_scaling;
  const RopeScaling& preset = FindModelPreset("deepseek-v3").rope_scaling;
  EXPECT_EQ(r.type, "yarn");
  EXPECT_DOUBLE_EQ(r.factor, 40);
  EXPECT_DOUBLE_EQ(r.beta_fast, 32);
  EXPECT_DOUBLE_EQ(r.beta_slow, 1);
  EXPECT_DOUBLE_EQ(r.mscale, 1.0);
  EXPECT_DOUBLE_EQ(r.mscale_all_dim, 1.0);
  EXPECT_TRUE(r.original_given);
  EXPECT_EQ(r.original_max_position_embeddings, 4096);
  EXPECT_TRUE(r.truncate);
  EXPECT_EQ(std::make_tuple(r.factor, r.mscale, r.mscale_all_dim, r.original_max_position_embeddings, r.original_given),
            std::make_tuple(preset.factor, preset.mscale, preset.mscale_all_dim,
                            preset.original_max_position_embeddings, preset.original_given));
}

TEST(DeepseekTest, V2LiteImportsToThePresetWithoutWarnings) {
  std::vector<std::string> warnings;
  ModelSpec s = ReadHfConfigFile(Data("deepseek-v2-lite.config.json"), &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  EXPECT_EQ(Shape(s), Shape(FindModelPreset("deepseek-v2-lite")));
  EXPECT_EQ(s.mla.q_lora_rank, 0);  // null: q_proj
  EXPECT_EQ(s.moe.shared_expert_ffn_hidden, 2 * 1408);
  EXPECT_EQ(s.moe.first_dense_layers, 1);
  EXPECT_FALSE(s.moe.norm_topk_prob);
  EXPECT_DOUBLE_EQ(s.rope_scaling.mscale, 0.707);
  EXPECT_DOUBLE_EQ(s.rope_scaling.mscale_all_dim, 0.707);
  EXPECT_DOUBLE_EQ(FindModelPreset("deepseek-v2-lite").rope_scaling.mscale_all_dim, 0.707);
}

// YaRN's keys are checked like the others: a negative mscale or a non-boolean truncate is a
// one-line error naming the key.
TEST(DeepseekTest, YarnKeysAreValidated) {
  nlohmann::json j = ReadJsonFile(Data("deepseek-v3.config.json"));
  j["rope_scaling"]["mscale"] = -1;
  EXPECT_THAT([&] { ImportHfConfig(j, "v3.json"); },
              ThrowsMessage<InputError>(HasSubstr("v3.json:/rope_scaling/mscale: expected a number >= 0, got -1")));
  j = ReadJsonFile(Data("deepseek-v3.config.json"));
  j["rope_scaling"]["truncate"] = "yes";
  EXPECT_THAT([&] { ImportHfConfig(j, "v3.json"); },
              ThrowsMessage<InputError>(HasSubstr("/rope_scaling/truncate: expected true or false")));
}

// DeepSeek publishes 671B for V3's main model (685B with the multi-token-prediction module) and
// 15.7B for V2-Lite.
TEST(DeepseekTest, CountsFollowTheFormulaAndThePublishedTotals) {
  double v3 = DeepseekFormula(61, 7168, 128, 1536, 512, 128, 64, 128, 18432, 129280, 256, 2048, 1, 3);
  ModelSpec s3 = FindModelPreset("deepseek-v3");
  EXPECT_EQ(ParameterCount(s3), static_cast<int64_t>(v3));
  EXPECT_NEAR(v3 / 671e9, 1.0, 0.0005);
  ParameterCounts c = CountParameters(s3);
  EXPECT_EQ(c.total, 2 * c.embedding + c.final_norm + 3 * c.dense_block + 58 * c.block);
  EXPECT_GT(c.block, 19 * c.dense_block);  // 256 experts against one dense MLP
  double v2 = DeepseekFormula(27, 2048, 16, 0, 512, 128, 64, 128, 10944, 102400, 64, 1408, 2, 1);
  EXPECT_EQ(ParameterCount(FindModelPreset("deepseek-v2-lite")), static_cast<int64_t>(v2));
  EXPECT_NEAR(v2 / 15.7e9, 1.0, 0.001);
  // The module tree holds the same parameters with transformers' names, dense blocks first.
  ModuleNode root = BuildModuleTree(s3);
  EXPECT_EQ(root.NumParams(), ParameterCount(s3));
  std::vector<FsdpUnit> units = BuildFsdpUnits(s3, WrapPolicy{});
  auto find = [&](const std::string& name) -> const FsdpUnit* {
    for (const auto& u : units) {
      if (u.name == name) return &u;
    }
    return nullptr;
  };
  ASSERT_NE(find("model.layers.2"), nullptr);
  ASSERT_NE(find("model.layers.3"), nullptr);
  EXPECT_EQ(find("model.layers.2")->NumParams(), c.dense_block);
  EXPECT_EQ(find("model.layers.3")->NumParams(), c.block);
  bool has_kv_b = false;
  for (const auto& p : find("model.layers.0")->params) {
    if (p.name == "model.layers.0.self_attn.kv_b_proj.weight") {
      has_kv_b = true;
      EXPECT_EQ(p.dim0, 128 * (128 + 128));
      EXPECT_EQ(p.inner, 512);
    }
  }
  EXPECT_TRUE(has_kv_b);
}

// Per token, forward: 2 x weights (the MLA chain and the layer's MLP or active experts) and
// attention 2·S·(a·(n + r)) for the scores plus 2·S·(a·v) for the values.
TEST(DeepseekTest, FlopsAndGemmsFollowTheLayer) {
  ModelSpec s = FindModelPreset("deepseek-v3");
  const double H = 7168, a = 128, ql = 1536, kvl = 512, n = 128, r = 64, v = 128, S = 4096;
  double attn_w = H * ql + ql * a * (n + r) + H * (kvl + r) + kvl * a * (n + v) + a * v * H;
  double attn = 2 * S * a * (n + r) + 2 * S * a * v;
  EXPECT_DOUBLE_EQ(AttentionForwardFlopsPerToken(s, 4096).count(), attn);
  EXPECT_DOUBLE_EQ(BlockForwardFlopsPerToken(s, 4096, 0).count(),
                   2 * (attn_w + 3 * H * 18432) + attn);
  EXPECT_DOUBLE_EQ(BlockForwardFlopsPerToken(s, 4096, 3).count(),
                   2 * (attn_w + 256 * H + 8 * 3 * H * 2048 + 3 * H * 2048) + attn);
  // The GEMMs carry the same matmul FLOPs (router, routed experts at tokens·k/E rows, shared).
  for (int layer : {0, 60}) {
    double gemm = 0;
    const int64_t tokens = 4096;
    for (const GemmShape& g : BlockForwardGemms(s, tokens, layer)) {
      gemm += g.flops() * static_cast<double>(g.count);
    }
    const double per_token = gemm / static_cast<double>(tokens);
    EXPECT_NEAR(per_token, BlockForwardFlopsPerToken(s, 4096, layer).count() - attn,
                1e-6 * per_token)
        << layer;
  }
}

// DeepseekV3DecoderLayer, bf16, SDPA (memory-efficient: q/k and v head dims differ), per token
// (e = 2), from modeling_deepseek_v3.py:
//   two RMSNorms (fp32 copy 4H, rsqrt 4, x_hat 2H) and their outputs 2H, which q_a_proj and
//   kv_a_proj_with_mqa (attention) or the shared MLP (MLP) save;
//   q_a_layernorm and kv_a_layernorm likewise over ql and kvl (their inputs die: the fp32 copies
//   are what pow and the normalisation save), their outputs saved by q_b_proj and kv_b_proj;
//   kv_b_proj's output [a·(n + v)] kept whole by SDPA saving value_states, a view of it;
//   query_states and key_states (the cats) [a·(n + r)] each, the output [a·v] (also o_proj's
//   input), the fp32 logsumexp per head.
// A dense block adds LlamaMLP's SwiGLU, 8F. An MoE block: the router's fp32 copy of its input 4H,
// its fp32 scores 4E, the int64 top-k indices the gather saves 8k; transformers 5's grouped_mm
// experts path: int64 token_idx, perm and inv_perm 8k each, the sorted fp32 weights 4k the
// weighting multiply saves, the top-k sorted copies 2H·k and their SwiGLU 8·Fe·k, the experts'
// outputs 2H·k (saved by the multiply); the shared MLP's SwiGLU 8·Fs.
TEST(DeepseekTest, BlocksSaveTheLatentChainAndTheFp32Router) {
  ModelSpec s = FindModelPreset("deepseek-v3");
  const double H = 7168, a = 128, ql = 1536, kvl = 512, n = 128, r = 64, v = 128;
  const double F = 18432, E = 256, k = 8, Fe = 2048, Fs = 2048;
  const double qd = a * (n + r);
  double norm = 4 * H + 4 + 2 * H;
  double mla = (4 * ql + 4 + 2 * ql) + 2 * ql + (4 * kvl + 4 + 2 * kvl) + 2 * kvl +
               2 * a * (n + v) + 2 * qd + 2 * qd + 2 * a * v + 4 * a;
  double dense = 2 * (norm + 2 * H) + mla + 8 * F;
  double moe = 2 * (norm + 2 * H) + mla + 4 * H + 4 * E + 8 * k + 3 * 8 * k + 4 * k + 2 * H * k +
               8 * Fe * k + 2 * H * k + 8 * Fs;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, Bf16Sdpa()).full.saved_per_token, moe);
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s.DenseLayerSpec(), Bf16Sdpa()).full.saved_per_token,
                   dense);
  // The dispatch's locals are forward transients on top: selected_hidden_states (2H·k), the
  // fp32 weighted outputs and their unsorted copy (4H·k each).
  EXPECT_GE(ComputeBlockActivations(s, Bf16Sdpa()).full.forward_peak_per_token, moe + 10 * H * k);
}

TEST(DeepseekTest, UnmodelledSettingsAreRefusedByName) {
  nlohmann::json j = ReadJsonFile(Data("deepseek-v3.config.json"));
  auto refused = [](nlohmann::json c, const std::string& key, const std::string& what) {
    EXPECT_THAT([&] { ImportHfConfig(c, "ds.json", nullptr); },
                ThrowsMessage<InputError>(AllOf(HasSubstr("ds.json:/" + key), HasSubstr(what))))
        << key;
  };
  nlohmann::json c = j;
  c["attention_bias"] = true;
  refused(c, "attention_bias", "expected false");
  c = j;
  c["moe_layer_freq"] = 2;
  refused(c, "moe_layer_freq", "expected 1");
  c = j;
  c["scoring_func"] = "softmax";
  refused(c, "scoring_func", "sigmoid");
  c = j;
  c["topk_method"] = "greedy";
  refused(c, "topk_method", "noaux_tc");
  c = j;
  c["first_k_dense_replace"] = 61;
  refused(c, "first_k_dense_replace", "[0, 60]");
  c = j;
  c["qk_head_dim"] = 128;
  refused(c, "qk_head_dim", "192");
  // transformers writes head_dim = qk_rope_head_dim: accepted.
  c = j;
  c["head_dim"] = 64;
  EXPECT_EQ(ImportHfConfig(c, "ds.json", nullptr).head_dim, 192);
}

TEST(DeepseekTest, SpecRoundTripsAndContradictionsAreProblems) {
  for (const char* name : {"deepseek-v3", "deepseek-v2-lite"}) {
    ModelSpec s = FindModelPreset(name);
    EXPECT_EQ(Shape(ModelSpecFromJson(nlohmann::json::parse(ModelSpecToJson(s).dump()), "m.json")),
              Shape(s))
        << name;
  }
  ModelSpec s = FindModelPreset("deepseek-v3");
  s.num_kv_heads = 8;               // the latent serves every head
  s.moe.first_dense_layers = 61;    // all dense
  s.moe.topk_group = 9;             // more groups than n_group
  s.qk_norm = true;
  s.moe.topk_method = "top2";       // not one of DeepSeek's methods
  std::vector<std::string> p = s.Problems("m.json");
  EXPECT_THAT(p, testing::Contains(AllOf(HasSubstr("m.json:/moe/topk_method"), HasSubstr("top2"))));
  EXPECT_THAT(p, testing::Contains(HasSubstr("m.json:/num_kv_heads")));
  EXPECT_THAT(p, testing::Contains(HasSubstr("m.json:/moe/first_dense_layers")));
  EXPECT_THAT(p, testing::Contains(HasSubstr("m.json:/moe/topk_group")));
  EXPECT_THAT(p, testing::Contains(HasSubstr("m.json:/mla/kv_lora_rank")));
  ModelSpec mixtral = FindModelPreset("mixtral-8x7b");
  mixtral.moe.sigmoid_scores = true;  // DeepSeek's scoring without its router
  EXPECT_THAT(mixtral.Problems("m.json"), testing::Contains(HasSubstr("m.json:/moe/sigmoid_scores")));
  ModelSpec llama = FindModelPreset("llama3-8b");
  llama.mla.v_head_dim = 128;  // an mla key without kv_lora_rank
  EXPECT_THAT(llama.Problems("m.json"), testing::Contains(HasSubstr("m.json:/mla/kv_lora_rank")));
  // Ulysses cp is not modelled for MLA.
  Plan plan;
  plan.cp = 2;
  EXPECT_THAT(CpProblems(FindModelPreset("deepseek-v2-lite"), plan, 8, 8, "p.json"),
              testing::Contains(AllOf(HasSubstr("p.json:/cp"), HasSubstr("latent"))));
}

}  // namespace
}  // namespace shardtune::model
