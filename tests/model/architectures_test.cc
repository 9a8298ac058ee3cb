// The architectures added for 2026 fine-tuning (issue #20): Qwen3-MoE, Phi-3 (Phi-3, Phi-3.5,
// Phi-4, Phi-4-mini) and OLMo 2. Each imports from its published config.json's keys
// (tests/data/model/*.config.json, copied from the Hugging Face repos with the factor lists of
// Phi-4-mini's longrope shortened), its count follows the architecture's formula written here and
// equals the published total, and what its new ops save for backward follows a hand count from
// its modeling_*.py.
#include <algorithm>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/activations.h"
#include "model/autograd_ledger.h"
#include "model/errors.h"
#include "model/gemm_shapes.h"
#include "model/hf_config.h"
#include "model/model_spec_json.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "model/trainable.h"
#include "tests/model/hf_test_util.h"

namespace shardtune::model {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;

using testing_util::Bf16Sdpa;
using testing_util::Data;
using testing_util::Shape;

ModelSpec Import(const std::string& file, std::vector<std::string>* warnings = nullptr) {
  return ReadHfConfigFile(Data(file), warnings);
}

TEST(ArchitecturesTest, PublishedConfigsImportToThePresetsWithoutWarnings) {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen3-30b-a3b.config.json", "qwen3-30b-a3b"},
      {"qwen3-235b-a22b.config.json", "qwen3-235b-a22b"},
      {"phi-4.config.json", "phi-4"},
      {"olmo2-13b.config.json", "olmo2-13b"},
  };
  for (const auto& [file, preset] : cases) {
    std::vector<std::string> warnings;
    ModelSpec s = Import(file, &warnings);
    EXPECT_TRUE(warnings.empty()) << file << ": " << (warnings.empty() ? "" : warnings[0]);
    EXPECT_EQ(Shape(s), Shape(FindModelPreset(preset))) << file;
  }
}

// Qwen3MoeForCausalLM: embed and untied lm_head V x H, final norm H; per layer q_proj [a·d, H],
// k_proj and v_proj [kv·d, H], o_proj [H, a·d], q_norm and k_norm [d], two norms [H], the router
// gate [E, H] and E experts of gate, up [Fe, H] and down [H, Fe]. Published totals: the bf16
// safetensors indexes' metadata.total_size / 2 (61,064,245,248 and 470,187,269,120 bytes).
TEST(ArchitecturesTest, Qwen3MoeCountsFollowTheFormula) {
  auto formula = [](double L, double H, double a, double kv, double d, double E, double Fe) {
    double V = 151936;
    double attn = H * a * d + 2 * H * kv * d + a * d * H + 2 * d;
    double moe = E * H + E * 3 * H * Fe;
    return 2 * V * H + H + L * (attn + 2 * H + moe);
  };
  ModelSpec a3b = Import("qwen3-30b-a3b.config.json");
  EXPECT_EQ(ParameterCount(a3b), static_cast<int64_t>(formula(48, 2048, 32, 4, 128, 128, 768)));
  EXPECT_EQ(ParameterCount(a3b), 30'532'122'624);
  EXPECT_TRUE(a3b.qk_norm);
  EXPECT_EQ(a3b.hf_architecture, "Qwen3MoeForCausalLM");  // the checkpoint names (HfParameter)
  EXPECT_EQ(a3b.moe.num_shared_experts, 0);
  EXPECT_EQ(a3b.moe.top_k, 8);
  ModelSpec a22b = Import("qwen3-235b-a22b.config.json");
  EXPECT_EQ(ParameterCount(a22b), static_cast<int64_t>(formula(94, 4096, 64, 4, 128, 128, 1536)));
  EXPECT_EQ(ParameterCount(a22b), 235'093'634'560);
  // Activated per token, as the model cards count it ("3.3B", "22B"): every parameter but the
  // 120 unrouted experts of each layer. ActiveParamsPerToken (the FLOP count's N) leaves out the
  // embedding lookup and the norms, so add them: V·H + L·(2H + 2d) + H.
  auto activated = [](const ModelSpec& s) {
    double d = 128, H = static_cast<double>(s.hidden), L = s.num_layers;
    return static_cast<double>(ActiveParamsPerToken(s)) + 151936 * H + L * (2 * H + 2 * d) + H;
  };
  double attn_a3b = 2048.0 * 4096 + 2 * 2048.0 * 512 + 4096.0 * 2048;
  EXPECT_DOUBLE_EQ(activated(a3b), 2 * 151936.0 * 2048 + 2048 +
                                       48 * (attn_a3b + 2 * 128 + 2 * 2048 + 2048.0 * 128 +
                                             8 * 3 * 2048.0 * 768));
  EXPECT_GE(activated(a3b), 3.3e9);
  EXPECT_LT(activated(a3b), 3.4e9);
  EXPECT_GE(activated(a22b), 22.0e9);
  EXPECT_LT(activated(a22b), 22.3e9);
}

// Phi3ForCausalLM: qkv_proj [a·d + 2 kv·d, H], o_proj [H, a·d], gate_up_proj [2F, H], down_proj
// [H, F], two norms [H]; Phi-4 untied, Phi-4-mini tied. Published: HF num_parameters().
TEST(ArchitecturesTest, Phi3CountsFollowTheFormula) {
  auto formula = [](double L, double H, double a, double kv, double d, double F, double V,
                    bool tied) {
    double block = H * (a * d + 2 * kv * d) + a * d * H + 2 * F * H + F * H + 2 * H;
    return (tied ? 1 : 2) * V * H + H + L * block;
  };
  ModelSpec phi4 = Import("phi-4.config.json");
  EXPECT_TRUE(phi4.fused_qkv && phi4.fused_gate_up);
  EXPECT_EQ(ParameterCount(phi4),
            static_cast<int64_t>(formula(40, 5120, 40, 10, 128, 17920, 100352, false)));
  EXPECT_EQ(ParameterCount(phi4), 14'659'507'200);
  std::vector<std::string> warnings;
  ModelSpec mini = Import("phi-4-mini.config.json", &warnings);
  EXPECT_TRUE(warnings.empty()) << (warnings.empty() ? "" : warnings[0]);
  EXPECT_EQ(ParameterCount(mini),
            static_cast<int64_t>(formula(32, 3072, 24, 8, 128, 8192, 200064, true)));
  EXPECT_EQ(ParameterCount(mini), 3'836'021'760);
  EXPECT_DOUBLE_EQ(mini.rotary_fraction, 0.75);
  EXPECT_EQ(mini.rope_scaling.type, "longrope");
  EXPECT_TRUE(mini.tied_embeddings);
}

// Olmo2ForCausalLM: Llama's projections, q_norm [a·d] and k_norm [kv·d] over the whole
// projections, post_attention_layernorm and post_feedforward_layernorm [H] (no input norm).
TEST(ArchitecturesTest, Olmo2CountsFollowTheFormula) {
  auto formula = [](double L, double H, double a, double F) {
    double V = 100352, d = H / a;
    double block = 4 * H * a * d + 2 * a * d + 3 * H * F + 2 * H;
    return 2 * V * H + H + L * block;
  };
  ModelSpec s = Import("olmo2-13b.config.json");
  EXPECT_TRUE(s.norm_placement == NormPlacement::kPost && s.qk_norm && s.qk_norm_full_width &&
              s.norm_weight_fp32);
  EXPECT_EQ(ParameterCount(s), static_cast<int64_t>(formula(40, 5120, 40, 13824)));
  EXPECT_EQ(ParameterCount(s), 13'716'198'400);
  EXPECT_EQ(ParameterCount(FindModelPreset("olmo2-7b")),
            static_cast<int64_t>(formula(32, 4096, 32, 11008)));
}

// The module tree carries the HF names and shapes FSDP2 shards (dim 0 of each tensor).
TEST(ArchitecturesTest, ModuleTreesUseTheHfNamesAndShapes) {
  auto params = [](const ModelSpec& s) {
    std::map<std::string, std::pair<int64_t, int64_t>> out;
    for (const FsdpUnit& u : BuildFsdpUnits(s, WrapPolicy{})) {
      for (const ParamTensor& p : u.params) out[p.name] = {p.dim0, p.inner};
    }
    return out;
  };
  auto phi = params(FindModelPreset("phi-4"));
  EXPECT_EQ(phi.at("model.layers.0.self_attn.qkv_proj.weight"), std::make_pair(7680L, 5120L));
  EXPECT_EQ(phi.at("model.layers.0.mlp.gate_up_proj.weight"), std::make_pair(35840L, 5120L));
  EXPECT_EQ(phi.count("model.layers.0.self_attn.q_proj.weight"), 0u);
  auto olmo = params(FindModelPreset("olmo2-13b"));
  EXPECT_EQ(olmo.at("model.layers.3.self_attn.q_norm.weight"), std::make_pair(5120L, 1L));
  EXPECT_EQ(olmo.count("model.layers.3.post_feedforward_layernorm.weight"), 1u);
  EXPECT_EQ(olmo.count("model.layers.3.input_layernorm.weight"), 0u);
  auto qwen = params(FindModelPreset("qwen3-30b-a3b"));
  EXPECT_EQ(qwen.at("model.layers.0.self_attn.q_norm.weight"), std::make_pair(128L, 1L));
  EXPECT_EQ(qwen.at("model.layers.0.block_sparse_moe.experts.127.down_proj.weight"),
            std::make_pair(2048L, 768L));
}

// Fusing changes the GEMMs' shapes, not their FLOPs: Phi-4's qkv_proj is one [T, 7680, 5120]
// GEMM and gate_up_proj one [T, 35840, 5120].
TEST(ArchitecturesTest, FusedProjectionsAreWiderGemmsOfTheSameFlops) {
  ModelSpec fused = FindModelPreset("phi-4");
  ModelSpec split = fused;
  split.fused_qkv = split.fused_gate_up = false;
  auto total = [](const std::vector<GemmShape>& g) {
    double f = 0;
    for (const GemmShape& s : g) f += s.flops() * static_cast<double>(s.count);
    return f;
  };
  std::vector<GemmShape> g = BlockForwardGemms(fused, 4096, 0);
  EXPECT_EQ(g.size(), 4u);  // qkv, o, gate_up, down
  EXPECT_EQ(g[0].n, 7680);
  EXPECT_EQ(g[2].n, 35840);
  EXPECT_EQ(g[2].count, 1);
  EXPECT_DOUBLE_EQ(total(g), total(BlockForwardGemms(split, 4096, 0)));
}

// Phi3DecoderLayer, bf16, SDPA, per token (e = 2). As HF Llama (activations_test.cc) except:
// q, k, v are slices of one qkv output and SDPA saves v, so the whole qkv [a·d + 2 kv·d] stays
// (not v alone); gate and up are chunks of one gate_up output kept whole by SiLU (gate) and the
// product (up), the same 2 x 2F as Llama's two outputs; rope with Phi-3's slices and cat saves
// nothing per token.
//   norms 2 x (fp32 copy 4H + rsqrt 4 + x_hat 2H + output 2H)
//   attention: q_embed 2qd, k_embed 2kv, qkv 2(qd + 2kv), output 2qd, logsumexp 4·heads
//   MLP: gate_up 4F, silu 2F, product 2F
TEST(ArchitecturesTest, Phi3BlockSavesTheWholeQkvOutput) {
  ModelSpec s = FindModelPreset("phi-4");
  double h = 5120, qd = 5120, kv = 1280, f = 17920, heads = 40;
  double expected = 2 * (4 * h + 4 + 2 * h + 2 * h) +
                    (2 * qd + 2 * kv + 2 * (qd + 2 * kv) + 2 * qd + 4 * heads) + 8 * f;
  BlockActivations b = ComputeBlockActivations(s, Bf16Sdpa());
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, expected);
  // Against the same shapes unfused: exactly the q and k parts of qkv more.
  ModelSpec split = s;
  split.fused_qkv = split.fused_gate_up = false;
  BlockActivations u = ComputeBlockActivations(split, Bf16Sdpa());
  EXPECT_DOUBLE_EQ(b.full.saved_per_token - u.full.saved_per_token, 2 * (qd + kv));
  // Selective checkpointing keeps projection outputs: qkv and gate_up are saved whole.
  EXPECT_LE(b.selective_per_token, b.full.saved_per_token);
}

// Olmo2DecoderLayer, bf16, SDPA, per token. Olmo2RMSNorm multiplies the weight into the fp32
// x_hat, so each norm saves fp32 copy 4n + rsqrt 4 + fp32 x_hat 4n (n its width); no pre-norm,
// so q/k/v_proj save the block input itself (2H) and gate/up_proj the residual h (2H):
//   q_norm (n = qd), k_norm (n = kv), post_attention_layernorm and post_feedforward_layernorm
//   (n = H) at 8n + 4 each; SDPA as Llama's; MLP 8F.
TEST(ArchitecturesTest, Olmo2BlockSavesFp32NormsAroundEachSublayer) {
  ModelSpec s = FindModelPreset("olmo2-13b");
  double h = 5120, qd = 5120, kv = 5120, f = 13824, heads = 40;
  double norms = (8 * qd + 4) + (8 * kv + 4) + 2 * (8 * h + 4);
  double expected = 2 * h + norms + (2 * qd + 2 * kv + 2 * kv + 2 * qd + 4 * heads) + 2 * h + 8 * f;
  BlockActivations b = ComputeBlockActivations(s, Bf16Sdpa());
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, expected);
}

// The ledger's views: a saved view keeps its base's storage; a chunk's backward is one node.
TEST(ArchitecturesTest, SavedViewKeepsItsBaseAndChunkBackwardIsOneNode) {
  AutogradLedger g;
  int x = g.Tensor("x", 10);
  int base = g.Tensor("base", 40);
  g.Op("proj", {x}, base, {});
  std::vector<int> halves = g.Views(base, {"a", "b"}, {20, 20});
  int y = g.Tensor("y", 20);
  g.Op("f(a)", {halves[0]}, y, {halves[0]});  // saves the view a: keeps base (40)
  int z = g.Tensor("z", 20);
  g.Op("y*b", {y, halves[1]}, z, {});
  ActivationLedger r = g.Run(x, z);
  EXPECT_DOUBLE_EQ(r.saved_per_token, 40);
  ASSERT_EQ(r.saved.size(), 1u);
  EXPECT_EQ(r.saved[0].name, "base");
  // Forward: x + base (50), then + y (70, the views own nothing), x freed after proj; then
  // base + y + z = 80.
  EXPECT_DOUBLE_EQ(r.forward_peak_per_token, 80);
  EXPECT_EQ(r.forward_ops, 3);  // the view op launches nothing
  // Backward: saved 40 + dz 20 + fresh dy 20 and db 20 = 100; then f(a) backward: 40 + dy 20 +
  // db 20 + fresh da 20 = 100, after which the saved view (and with it base) is released; the
  // split node, once for both views: da 20 + db 20 + fresh dbase 40 = 80.
  EXPECT_DOUBLE_EQ(r.backward_peak_per_token, 100);
  // The profile: start, y*b, f(a), the split node, proj (da/db gone: dbase 40 + fresh dx 10).
  ASSERT_EQ(r.backward_profile.size(), 5u);
  EXPECT_DOUBLE_EQ(r.backward_profile[3].live_per_token, 80);
  EXPECT_DOUBLE_EQ(r.backward_profile[4].live_per_token, 50);
}

// Qwen3MoeDecoderLayer, bf16, SDPA, per token (H 2048, q_dim 4096, kv_dim 512, 32 / 4 heads,
// E 128 experts of Fe 768, top 8), as transformers 5's default experts path
// (integrations/moe.py grouped_mm_experts_forward) saves it:
//   two RMSNorms (fp32 copy 4H, rsqrt 4, x_hat 2H) whose outputs the projections and the router
//   save (2H each); per-head q_norm / k_norm: fp32 copy, one rsqrt per head, x_hat;
//   SDPA as Llama's; the router's softmax in fp32 (4E), topk's int64 indices (8k), the
//   norm_topk_prob division's sum (4) and top-k values (4k);
//   the dispatch's int64 token_idx, perm and inv_perm (8k each), the sorted fp32 routing weights
//   (4k), the top_k sorted copies of the token (2H·k, saved by the grouped gate/up GEMMs); the
//   SwiGLU over them (8·Fe·k); the experts' outputs, saved by the routing-weight multiply (2H·k).
// Forward transients on top: selected_hidden_states (2H·k), the fp32 weighted outputs and
// their unsorted copy (4H·k each) live together until the experts' function returns.
TEST(ArchitecturesTest, Qwen3MoeBlockSavesTheRoutedCopies) {
  ModelSpec s = FindModelPreset("qwen3-30b-a3b");
  double h = 2048, qd = 4096, kv = 512, heads = 32, kvh = 4, E = 128, k = 8, fe = 768;
  double norm = 4 * h + 4 + 2 * h;
  double qk = (4 * qd + 4 * heads + 2 * qd) + (4 * kv + 4 * kvh + 2 * kv);
  double sdpa = 2 * qd + 2 * kv + 2 * kv + 2 * qd + 4 * heads;
  double router = 4 * E + 8 * k + 4 + 4 * k;
  double dispatch = 3 * 8 * k + 4 * k;
  double moe = router + dispatch + 2 * h * k + 8 * fe * k + 2 * h * k;
  double expected = 2 * (norm + 2 * h) + qk + sdpa + moe;
  BlockActivations b = ComputeBlockActivations(s, Bf16Sdpa());
  EXPECT_DOUBLE_EQ(b.full.saved_per_token, expected);
  EXPECT_GE(b.full.forward_peak_per_token, expected + 2 * h * k + 4 * h * k + 4 * h * k);
}

// output_router_logits: load_balancing_loss_func after the LM loss. At the moment of
// expert_mask.float() the head holds what the plain loss path saved, the logits (held through
// forward, e·V), every layer's router logits (e·L·E, live since the blocks) and their softmax
// (e·L·E, saved for backward), the int64 one_hot and its fp32 copy (12·L·k·E). Before that, the
// held router logits add e·L·E to every moment of the plain head's forward.
TEST(ArchitecturesTest, RouterAuxLossAddsTheOneHotSpikeToTheHead) {
  ModelSpec s = Import("qwen3-30b-a3b.config.json");
  ASSERT_FALSE(s.moe.router_aux_loss);
  ActivationLedger plain = ComputeHeadActivations(s, Bf16Sdpa());
  nlohmann::json j = ReadJsonFile(Data("qwen3-30b-a3b.config.json"));
  j["output_router_logits"] = true;
  ModelSpec aux_spec = ImportHfConfig(j, "q.json", nullptr);
  ASSERT_TRUE(aux_spec.moe.router_aux_loss);
  ActivationLedger aux = ComputeHeadActivations(aux_spec, Bf16Sdpa());
  double e = 2, L = 48, E = 128, k = 8, V = 151936;
  EXPECT_DOUBLE_EQ(aux.saved_per_token, plain.saved_per_token + e * L * E);
  double one_hot_moment = plain.saved_per_token + e * V + 2 * e * L * E + 12 * L * k * E;
  EXPECT_DOUBLE_EQ(aux.forward_peak_per_token,
                   std::max(plain.forward_peak_per_token + e * L * E, one_hot_moment));
  // 12·L·k·E = 590 KB a token for Qwen3-30B-A3B, the order of its fp32 logits (4V = 608 KB):
  // the one_hot's moment comes within 0.4% of the logits upcast's.
  EXPECT_GT(one_hot_moment, 0.99 * (plain.forward_peak_per_token + e * L * E));
  // torchtitan's MoE balances with a bias instead (no auxiliary loss): nothing is added.
  ActivationOptions tt = Bf16Sdpa();
  tt.modeling = Modeling::kTorchtitan;
  EXPECT_DOUBLE_EQ(ComputeHeadActivations(aux_spec, tt).saved_per_token,
                   ComputeHeadActivations(s, tt).saved_per_token);
}

// Imports `file` with `warnings` warnings, as the preset `preset`, with the count of the formula
// and the published one.
ModelSpec ExpectImportsAsPreset(const std::string& file, const std::string& preset,
                                size_t warnings, double formula, int64_t published) {
  std::vector<std::string> got;
  ModelSpec s = Import(file, &got);
  EXPECT_EQ(got.size(), warnings) << file << ": " << (got.empty() ? "" : got[0]);
  EXPECT_EQ(Shape(s), Shape(FindModelPreset(preset))) << file;
  EXPECT_EQ(ParameterCount(s), static_cast<int64_t>(formula)) << file;
  EXPECT_EQ(ParameterCount(s), published) << file;
  return s;
}

// Gemma2ForCausalLM and Gemma3 (the text_config of Gemma3ForConditionalGeneration): Llama's
// projections, four norms [H] per layer, Gemma 3's per-head q_norm and k_norm [d], tied head.
// Published: google/gemma-2-9b's HF num_parameters(); Gemma 3 27B's text model (the vision
// tower's ~0.4B left out) as llama.cpp's GGUF reports it.
TEST(ArchitecturesTest, GemmaCountsFollowTheFormula) {
  auto formula = [](double L, double H, double a, double kv, double d, double F, double V,
                    bool qk_norm) {
    double block = H * a * d + 2 * H * kv * d + a * d * H + 3 * H * F + 4 * H +
                   (qk_norm ? 2 * d : 0);
    return V * H + H + L * block;
  };
  ModelSpec g2 = ExpectImportsAsPreset("gemma2-9b.config.json", "gemma2-9b", 0,
                                       formula(42, 3584, 16, 8, 256, 14336, 256000, false),
                                       9'241'705'984);
  EXPECT_DOUBLE_EQ(g2.final_logit_softcap, 30);
  EXPECT_DOUBLE_EQ(g2.attn_logit_softcap, 50);
  EXPECT_EQ(g2.full_attention_every, 2);
  // The config is the gemma3-27b preset; its text model's count (the tower's:
  // tests/model/vision_test.cc).
  ModelSpec g3 = Import("gemma-3-27b.config.json", nullptr);
  EXPECT_EQ(Shape(g3), Shape(FindModelPreset("gemma3-27b")));
  g3.vision = VisionSpec{};
  EXPECT_EQ(ParameterCount(g3), static_cast<int64_t>(formula(62, 5376, 32, 16, 128, 21504, 262208, true)));
  EXPECT_EQ(ParameterCount(g3), 27'009'346'304);
  // Gemma3TextConfig's defaults fill what the published text_config leaves out.
  EXPECT_EQ(g3.vocab_size, 262208);
  EXPECT_EQ(g3.full_attention_every, 6);
  EXPECT_DOUBLE_EQ(g3.rope_local_theta, 10000);
  EXPECT_EQ(g3.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(g3.final_logit_softcap, 0);
}

TEST(ArchitecturesTest, GemmaLayerTypesAreReadAndIrregularPatternsRefused) {
  nlohmann::json j = ReadJsonFile(Data("gemma2-9b.config.json"));
  j["num_hidden_layers"] = 6;
  j["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention",
                      "sliding_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(ImportHfConfig(j, "g.json", nullptr).full_attention_every, 3);
  j["layer_types"][4] = "full_attention";
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("g.json:/layer_types/4")));
  j["layer_types"] = {"sliding_attention"};
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("expected an array of num_hidden_layers = 6")));
  j = ReadJsonFile(Data("gemma2-9b.config.json"));
  j["hidden_activation"] = "gelu";
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("g.json:/hidden_activation")));
  j = ReadJsonFile(Data("gemma-3-27b.config.json"));
  j["text_config"]["num_hidden_layers"] = 0;
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("g.json:/text_config/num_hidden_layers")));
  j["text_config"] = 3;
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("g.json:/text_config: expected an object")));
}

// Sliding layers attend to min(S, W) keys: Gemma 3 27B at S = 8192 has 10 full layers (every
// 6th) and 52 sliding ones with W = 1024, so the attention FLOPs per token of a block, averaged,
// are 4 x q_dim x (10 x 8192 + 52 x 1024) / 62.
TEST(ArchitecturesTest, SlidingWindowsShortenTheAttentionFlops) {
  ModelSpec g3 = FindModelPreset("gemma3-27b");
  double qd = 32 * 128;
  EXPECT_DOUBLE_EQ(AttentionForwardFlopsPerToken(g3, 8192).count(),
                   4 * qd * (10 * 8192.0 + 52 * 1024.0) / 62);
  // Below the window every layer attends to all S.
  EXPECT_DOUBLE_EQ(AttentionForwardFlopsPerToken(g3, 512).count(), 4 * qd * 512);
  ModelSpec full = g3;
  full.sliding_window = 0;
  EXPECT_DOUBLE_EQ(BlockForwardFlopsPerToken(full, 8192, 0).count() -
                       BlockForwardFlopsPerToken(g3, 8192, 0).count(),
                   4 * qd * 8192 - AttentionForwardFlopsPerToken(g3, 8192).count());
}

// Gemma3DecoderLayer, bf16, SDPA, per token (H 5376, qd 4096, kv 2048, F 21504, 32 / 16 heads).
// Each of the four sandwich norms (Gemma's (x_hat * (1 + w.float())) in fp32) saves the fp32
// input copy 4H, its rsqrt 4 and the fp32 x_hat 4H; the per-head q_norm and k_norm the same over
// q_dim and kv_dim with one rsqrt per head; input_layernorm's and pre_feedforward_layernorm's
// bf16 outputs (2H each) are saved by the projections; SDPA as Llama's; GeGLU as SwiGLU (F.gelu
// saves its input): 8F.
TEST(ArchitecturesTest, GemmaBlockSavesFourFp32NormsAndPerHeadQkNorms) {
  ModelSpec s = FindModelPreset("gemma3-27b");
  double h = 5376, qd = 4096, kv = 2048, f = 21504, heads = 32, kv_heads = 16;
  double norms = 4 * (8 * h + 4) + (8 * qd + 4 * heads) + (8 * kv + 4 * kv_heads);
  double expected = norms + 2 * h + 2 * h + (2 * qd + 2 * kv + 2 * kv + 2 * qd + 4 * heads) + 8 * f;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, Bf16Sdpa()).full.saved_per_token, expected);
}

// Gemma 2's soft-capping: the final one keeps tanh's output over the vocabulary (2V bytes in
// bf16) for the loss's backward; the attention one adds tanh's output over the score matrix
// (2 x heads x S) to eager attention and nothing to SDPA (HF's sdpa path does not apply it).
TEST(ArchitecturesTest, GemmaSoftCappingSavesTanhOutputs) {
  ModelSpec g2 = FindModelPreset("gemma2-9b");
  ModelSpec uncapped = g2;
  uncapped.final_logit_softcap = 0;
  uncapped.attn_logit_softcap = 0;
  EXPECT_DOUBLE_EQ(ComputeHeadActivations(g2, Bf16Sdpa()).saved_per_token -
                       ComputeHeadActivations(uncapped, Bf16Sdpa()).saved_per_token,
                   2 * 256000.0);
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(g2, Bf16Sdpa()).full.saved_per_token,
                   ComputeBlockActivations(uncapped, Bf16Sdpa()).full.saved_per_token);
  ActivationOptions eager = Bf16Sdpa();
  eager.attention = Attention::kEager;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(g2, eager).full.saved_per_token -
                       ComputeBlockActivations(uncapped, eager).full.saved_per_token,
                   2 * 16 * 4096.0);
}

// GptOssForCausalLM: attention with biases [q_dim + 2 kv_dim + H] and sinks [heads]; a router
// [E, H] with a bias [E]; 3-D experts gate_up_proj [E, H, 2F] + [E, 2F], down_proj [E, F, H] +
// [E, H]; two norms; untied head. Published: HF num_parameters() (20.91B, 116.83B on the cards).
TEST(ArchitecturesTest, GptOssCountsFollowTheFormula) {
  auto formula = [](double L, double E) {
    double H = 2880, qd = 64 * 64, kv = 8 * 64, F = 2880, V = 201088, heads = 64;
    double attn = H * qd + qd + 2 * (H * kv + kv) + qd * H + H + heads;
    double moe = E * H + E + E * (H * 2 * F + 2 * F + F * H + H);
    return 2 * V * H + H + L * (attn + moe + 2 * H);
  };
  ModelSpec s = ExpectImportsAsPreset("gpt-oss-20b.config.json", "gpt-oss-20b", 1,
                                      formula(24, 32), 20'914'757'184);
  EXPECT_TRUE(s.moe.gpt_oss_experts && s.attention_sinks && s.norm_weight_fp32);
  EXPECT_EQ(s.full_attention_every, 2);
  EXPECT_EQ(ParameterCount(FindModelPreset("gpt-oss-120b")),
            static_cast<int64_t>(formula(36, 128)));
  EXPECT_EQ(ParameterCount(FindModelPreset("gpt-oss-120b")), 116'829'156'672);
  // The experts are 3-D tensors sharded on dim 0 (the experts), no per-expert modules.
  auto units = BuildFsdpUnits(s, WrapPolicy{});
  bool found = false;
  for (const FsdpUnit& u : units) {
    for (const ParamTensor& p : u.params) {
      if (p.name == "model.layers.0.block_sparse_moe.experts.gate_up_proj") {
        found = true;
        EXPECT_EQ(p.dim0, 32);
        EXPECT_EQ(p.inner, 2880 * 2 * 2880);
      }
    }
  }
  EXPECT_TRUE(found);
  Plan plan;
  plan.wrap.expert_units = true;
  EXPECT_THAT(TrainabilityProblems(s, plan, 4096, "p.json"),
              testing::Contains(HasSubstr("p.json:/wrap/expert_units")));
}

// GptOssDecoderLayer, bf16, per token (H 2880, q_dim 4096, kv_dim 512, 64 heads, E 32, top 4,
// F 2880), with a flash kernel that takes the sinks (what flash saves):
//   two GptOssRMSNorms (fp32 copy, rsqrt, fp32 x_hat: 8H + 4), their outputs saved by the
//   projections and the router (2H each); SDPA as Llama's; the router's top-k indices (int64) and
//   its softmax over the k values; per routed copy (transformers 5's grouped_mm experts path):
//   the int64 token_idx, perm, inv_perm and expert_ids_g (the bias gathers') 32, the sorted bf16
//   routing weight 2, the sorted row 2H, gate_up 4F (kept by the clamps' saved views), the
//   clamped gate, sigmoid, up + 1, glu and gated_output 2F each, and the expert's output 2H.
TEST(ArchitecturesTest, GptOssBlockSavesTheClampedSwigluPerRoutedCopy) {
  ModelSpec s = FindModelPreset("gpt-oss-20b");
  double h = 2880, qd = 4096, kv = 512, heads = 64, k = 4, f = 2880;
  double norm = 8 * h + 4;
  double sdpa = 2 * qd + 2 * kv + 2 * kv + 2 * qd + 4 * heads;
  double router = 8 * k + 2 * k;
  double per_copy = 4 * 8 + 2 + 2 * h + 4 * f + 5 * 2 * f + 2 * h;
  double expected = norm + 2 * h + sdpa + norm + 2 * h + router + k * per_copy;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, Bf16Sdpa()).full.saved_per_token, expected);
  // Eager attention with sinks keeps one softmax (compute dtype) over S + 1 columns; without
  // sinks HF's eager path keeps the fp32 softmax and its cast (6 bytes per score).
  ActivationOptions eager = Bf16Sdpa();
  eager.attention = Attention::kEager;
  ModelSpec no_sinks = s;
  no_sinks.attention_sinks = false;
  double S = 4096;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, eager).full.saved_per_token -
                       ComputeBlockActivations(no_sinks, eager).full.saved_per_token,
                   heads * (2 * (S + 1) - 6 * S));
}

TEST(ArchitecturesTest, Qwen3MoeSavedByTransformers5NamesItsExpertsNumLocalExperts) {
  // transformers 5 renamed Qwen3MoeConfig.num_experts to num_local_experts: a config it writes
  // (the ones measure_fsdp2.py recorded on the H100, 2026-11-26) imports as the Hub's does.
  nlohmann::json hub = ReadJsonFile(Data("qwen3-30b-a3b.config.json"));
  nlohmann::json v5 = hub;
  v5["num_local_experts"] = v5["num_experts"];
  v5.erase("num_experts");
  ModelSpec a = ImportHfConfig(hub, "hub.json", nullptr), b = ImportHfConfig(v5, "v5.json", nullptr);
  EXPECT_EQ(b.moe.num_experts, 128);
  EXPECT_EQ(ParameterCount(a), ParameterCount(b));
  nlohmann::json both = hub;
  both["num_local_experts"] = 64;  // the two names disagree
  EXPECT_THAT([&] { ImportHfConfig(both, "q.json", nullptr); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("q.json:/num_local_experts"),
                                              HasSubstr("num_experts (128)"), HasSubstr("got 64"))));
}

TEST(ArchitecturesTest, UnmodelledSettingsAreRefusedByName) {
  nlohmann::json phi = ReadJsonFile(Data("phi-4.config.json"));
  phi["resid_pdrop"] = 0.1;
  EXPECT_THAT([&] { ImportHfConfig(phi, "phi.json", nullptr); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("phi.json:/resid_pdrop"),
                                              HasSubstr("expected 0"), HasSubstr("0.1"))));
  nlohmann::json qwen = ReadJsonFile(Data("qwen3-30b-a3b.config.json"));
  qwen["mlp_only_layers"] = {0, 1};
  EXPECT_THAT([&] { ImportHfConfig(qwen, "q.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("q.json:/mlp_only_layers")));
  qwen = ReadJsonFile(Data("qwen3-30b-a3b.config.json"));
  qwen["decoder_sparse_step"] = 2;
  EXPECT_THAT([&] { ImportHfConfig(qwen, "q.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("q.json:/decoder_sparse_step")));
}

TEST(ArchitecturesTest, SpecFlagsRoundTripAndContradictionsAreProblems) {
  for (const char* name :
       {"phi-4", "olmo2-13b", "qwen3-30b-a3b", "gemma2-9b", "gemma3-27b", "gpt-oss-20b"}) {
    ModelSpec s = FindModelPreset(name);
    EXPECT_EQ(Shape(ModelSpecFromJson(nlohmann::json::parse(ModelSpecToJson(s).dump()), "m.json")),
              Shape(s))
        << name;
  }
  ModelSpec s = FindModelPreset("gpt2");
  s.fused_gate_up = true;  // GELU MLP has no gate
  s.norm_placement = NormPlacement::kPost;
  s.norm_weight_fp32 = true;  // LayerNorm
  std::vector<std::string> p = s.Problems("m.json");
  EXPECT_THAT(p, testing::Contains(HasSubstr("m.json:/fused_gate_up")));
  EXPECT_THAT(p, testing::Contains(HasSubstr("m.json:/norm_weight_fp32")));
  ModelSpec olmo = FindModelPreset("olmo2-13b");
  olmo.qk_norm = false;  // full width without qk norm
  EXPECT_THAT(olmo.Problems("m.json"), testing::Contains(HasSubstr("m.json:/qk_norm_full_width")));
}

}  // namespace
}  // namespace shardtune::model

namespace shardtune::model {
namespace {

// torchtitan's GPT-OSS block (models/gpt_oss/model.py, moe.py), bf16, SDPA-style flash with the
// sink rescale, per token (H 2880, q_dim 4096, kv_dim 512, 64 heads, E 32, top 4, F 2880):
//   attention_norm (F.rms_norm): input 2H + rstd 4, its output 2H saved by the q/k/v projections;
//   flash attention: q 2qd, k 2kv, v 2kv, output 2qd, lse 4·heads; the sink rescale
//   out * sigmoid(lse - sinks).to(bf16): sigmoid's fp32 output 4·heads, the cast scale 2·heads,
//   the rescaled output 2qd (saved by wo);
//   ffn_norm: input 2H + rstd 4 (its bf16 output is saved by nothing: the router saves the
//   autocast fp32 copy 4H, the row gather its int64 indices);
//   router: softmax over E in fp32 4E, the top-k ids 8k (gather), route_norm's division the
//   scores 4k and the denominator 4; the expert-sorted token indices 8k, the sorted scores 4k;
//   per routed row (k per token): the rows 2H (mlp1's weight gradient), h + b1 4F (kept by the
//   clamps' views), clamped x_glu, sigmoid, out_glu, clamped x_linear and the addcmul output 2F
//   each (14F with h + b1), the fp32 copy of the expert output 4H for the score product, and
//   the int64 row indices of the two bias repeat_interleaves (index_select saves them) 16.
TEST(ArchitecturesTest, TorchtitanGptOssBlockSavesItsGroupedSwigluAndSinkRescale) {
  ModelSpec s = FindModelPreset("gpt-oss-20b");
  double h = 2880, qd = 4096, kv = 512, heads = 64, k = 4, f = 2880, E = 32;
  double attention_norm = 2 * h + 4 + 2 * h;
  double attention = 2 * qd + 2 * kv + 2 * kv + 2 * qd + 4 * heads;
  double sinks = 4 * heads + 2 * heads + 2 * qd;
  double ffn_norm = 2 * h + 4;
  double router = 4 * h + 4 * E + 8 * k + 4 * k + 4;
  double dispatch = 8 * k + 4 * k;
  double per_row = 2 * h + 4 * f + 5 * 2 * f + 4 * h + 2 * 8;
  double expected = attention_norm + attention + sinks + ffn_norm + router + dispatch + k * per_row;
  ActivationOptions o = Bf16Sdpa();
  o.modeling = Modeling::kTorchtitan;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, o).full.saved_per_token, expected);
  // Without sinks the rescale is gone: wo saves the kernel's output itself.
  ModelSpec no_sinks = s;
  no_sinks.attention_sinks = false;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, o).full.saved_per_token -
                       ComputeBlockActivations(no_sinks, o).full.saved_per_token,
                   sinks);
}

// GemmaForCausalLM (Gemma 1): config.json files under tests/data/model/ (google/gemma-2b-it's and
// google/gemma-7b's, as public code quotes them: the legacy hidden_act "gelu" in both, the 7B's as
// transformers 4.45 reads it with hidden_activation). They import to the gemma-2b / gemma-7b
// presets without warnings; Llama's pre-norm layout with Gemma's (1 + w) fp32 norms, GeGLU and
// scaled embeddings, no soft-capping or windows; GemmaConfig's defaults are the 7B.
TEST(ArchitecturesTest, Gemma1ImportsToThePresetsAndRefusesWhatItDoesNotModel) {
  auto hf = [](const std::string& name) { return Data(name); };
  const std::pair<const char*, const char*> cases[] = {
      {"gemma-2b-it.config.json", "gemma-2b"}, {"gemma-7b.config.json", "gemma-7b"}};
  for (const auto& [file, preset] : cases) {
    std::vector<std::string> warnings;
    ModelSpec s = ReadHfConfigFile(hf(file), &warnings);
    EXPECT_TRUE(warnings.empty()) << file << ": " << (warnings.empty() ? "" : warnings[0]);
    EXPECT_EQ(Shape(s), Shape(FindModelPreset(preset))) << file;
    EXPECT_EQ(s.hf_architecture, "GemmaForCausalLM");
    EXPECT_EQ(s.norm_placement, NormPlacement::kPre);
    EXPECT_TRUE(s.norm_unit_offset && s.gelu_gate && s.scaled_embedding && s.tied_embeddings);
    EXPECT_EQ(s.sliding_window, 0);
    EXPECT_EQ(s.final_logit_softcap, 0);
  }
  EXPECT_EQ(ParameterCount(ReadHfConfigFile(hf("gemma-2b-it.config.json"))), 2'506'172'416);
  EXPECT_EQ(ParameterCount(ReadHfConfigFile(hf("gemma-7b.config.json"))), 8'537'680'896);
  EXPECT_EQ(Shape(ImportHfConfig(nlohmann::json{{"model_type", "gemma"}}, "g.json")),
            Shape(FindModelPreset("gemma-7b")));
  nlohmann::json j = ReadJsonFile(hf("gemma-7b.config.json"));
  j["hidden_activation"] = "gelu";
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("g.json:/hidden_activation: expected "
                                                  "\"gelu_pytorch_tanh\"")));
  j = ReadJsonFile(hf("gemma-7b.config.json"));
  j["use_bidirectional_attention"] = true;
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(HasSubstr("g.json:/use_bidirectional_attention")));
  j = ReadJsonFile(hf("gemma-7b.config.json"));
  j["attention_dropout"] = 0.1;
  EXPECT_THAT([&] { ImportHfConfig(j, "g.json", nullptr); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("g.json:/attention_dropout"),
                                              HasSubstr("expected 0"))));
}

// GemmaDecoderLayer (Gemma 1), bf16, SDPA, per token (gemma-7b: H 3072, qd = kv 4096, F 24576,
// 16 heads): Llama's block with two (1 + w) fp32 norms, each saving the fp32 input copy 4H, its
// rsqrt 4 and the fp32 x_hat 4H; their bf16 outputs (2H each) saved by the projections; SDPA as
// Llama's (q, k, v, output, logsumexp); GeGLU as SwiGLU (F.gelu saves its input): 8F.
TEST(ArchitecturesTest, Gemma1BlockSavesTwoFp32Norms) {
  ModelSpec s = FindModelPreset("gemma-7b");
  double h = 3072, qd = 4096, kv = 4096, f = 24576, heads = 16;
  double attention = 2 * qd + 2 * kv + 2 * kv + 2 * qd + 4 * heads;
  double expected = 2 * (8 * h + 4) + 2 * h + 2 * h + attention + 8 * f;
  EXPECT_DOUBLE_EQ(ComputeBlockActivations(s, Bf16Sdpa()).full.saved_per_token, expected);
}

// SeedOssForCausalLM: ByteDance-Seed/Seed-OSS-36B-Base's shape keys (hidden 5120, 64 layers, 80
// heads of 128, 8 kv heads, intermediate 27648, vocab 155136, 524288 positions, attention_bias
// true, attention_out_bias false, mlp_bias false, rope_theta 1e7 with rope_scaling
// {"rope_type": "default"}, rms_norm_eps 1e-6, untied) with both dropouts written as 0.
// Published: 36,151,104,512 (the bf16 safetensors index's total_size / 2).
TEST(ArchitecturesTest, SeedOssImportsToThePresetAndRefusesDropout) {
  nlohmann::json j = {{"architectures", {"SeedOssForCausalLM"}},
                      {"model_type", "seed_oss"},
                      {"attention_bias", true},
                      {"attention_out_bias", false},
                      {"attention_dropout", 0.0},
                      {"residual_dropout", 0.0},
                      {"bos_token_id", 0},
                      {"pad_token_id", 1},
                      {"eos_token_id", 2},
                      {"head_dim", 128},
                      {"hidden_act", "silu"},
                      {"hidden_size", 5120},
                      {"initializer_range", 0.02},
                      {"intermediate_size", 27648},
                      {"max_position_embeddings", 524288},
                      {"mlp_bias", false},
                      {"num_attention_heads", 80},
                      {"num_hidden_layers", 64},
                      {"num_key_value_heads", 8},
                      {"rms_norm_eps", 1e-6},
                      {"rope_scaling", {{"rope_type", "default"}}},
                      {"rope_theta", 10000000.0},
                      {"tie_word_embeddings", false},
                      {"torch_dtype", "bfloat16"},
                      {"use_cache", true},
                      {"vocab_size", 155136}};
  std::vector<std::string> warnings;
  ModelSpec s = ImportHfConfig(j, "seed.json", &warnings);
  EXPECT_TRUE(warnings.empty()) << (warnings.empty() ? "" : warnings[0]);
  EXPECT_EQ(Shape(s), Shape(FindModelPreset("seed-oss-36b")));
  EXPECT_EQ(ParameterCount(s), 36'151'104'512);
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_FALSE(s.attn_out_bias);
  // SeedOssConfig's head_dim default is 128, not hidden / heads (5120 / 80 = 64).
  nlohmann::json k = j;
  k.erase("head_dim");
  EXPECT_EQ(ImportHfConfig(k, "seed.json").head_dim, 128);
  k["attention_out_bias"] = true;
  EXPECT_TRUE(ImportHfConfig(k, "seed.json").attn_out_bias);
  // Dropout: 0.1 refused, and an absent key is SeedOssConfig's 0.1.
  k = j;
  k["residual_dropout"] = 0.1;
  EXPECT_THAT([&] { ImportHfConfig(k, "seed.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("seed.json:/residual_dropout"),
                                              HasSubstr("expected 0"), HasSubstr("0.1"))));
  k = j;
  k.erase("attention_dropout");
  EXPECT_THAT([&] { ImportHfConfig(k, "seed.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("seed.json:/attention_dropout"),
                                              HasSubstr("SeedOssConfig's default is 0.1"))));
}

}  // namespace
}  // namespace shardtune::model
