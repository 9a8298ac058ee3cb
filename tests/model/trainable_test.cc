// Frozen prefixes, LoRA adapters, expert units and tiled MLP on the module tree: counts derived
// from the model's shapes in each test.
#include "model/trainable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/presets.h"
#include "model/tiled_mlp.h"
#include "tests/model/decoder_shape.h"

namespace shardtune::model {
namespace {

using ::testing::HasSubstr;
using testing_util::TinyMoe;

TEST(TrainableTest, LoraTrainableCountIsRankTimesInPlusOutPerBlockAndTarget) {
  ModelSpec s = FindModelPreset("llama3-8b");
  Plan p;
  p.lora.rank = 16;
  p.lora.targets = {"q_proj", "v_proj"};
  auto units = ApplyTrainability(s, p, BuildFsdpUnits(s, p.wrap));
  TrainableCounts c = CountTrainable(units);
  // Hu et al. 2021: A [r, in] + B [out, r]; q_proj H -> q_dim, v_proj H -> kv_dim.
  int64_t r = 16, h = s.hidden;
  int64_t expected = s.num_layers * (r * (h + s.q_dim()) + r * (h + s.kv_dim()));
  EXPECT_EQ(c.trainable, expected);
  EXPECT_EQ(c.adapters, expected);
  EXPECT_EQ(c.total, ParameterCount(s) + expected);
}

TEST(TrainableTest, FrozenPrefixFreezesExactlyTheMatchingParameters) {
  ModelSpec s = FindModelPreset("tiny-llama");
  Plan p;
  p.frozen_prefixes = {"model.embed_tokens", "model.layers.0."};
  TrainableCounts c = CountTrainable(ApplyTrainability(s, p, BuildFsdpUnits(s, p.wrap)));
  ParameterCounts pc = CountParameters(s);
  EXPECT_EQ(c.frozen, pc.embedding + pc.block);
  EXPECT_EQ(c.trainable, pc.total - pc.embedding - pc.block);
}

TEST(TrainableTest, BackwardStartsAtTheFirstTrainableSegment) {
  ModelSpec s = FindModelPreset("tiny-llama");
  Plan p;
  p.frozen_prefixes = {"model.embed_tokens", "model.layers.0.", "model.layers.1."};
  auto units = ApplyTrainability(s, p, BuildFsdpUnits(s, p.wrap));
  EXPECT_EQ(FirstBackwardSegment(units, s.num_layers), BlockSegment(2));
  Plan full;
  EXPECT_EQ(
      FirstBackwardSegment(ApplyTrainability(s, full, BuildFsdpUnits(s, full.wrap)), s.num_layers),
      0);
  Plan infer;
  infer.role = Role::kInfer;
  EXPECT_EQ(FirstBackwardSegment(ApplyTrainability(s, infer, BuildFsdpUnits(s, infer.wrap)),
                                 s.num_layers),
            NumSegments(s.num_layers));
}

TEST(TrainableTest, ProblemsNameTheKeyExpectedAndGot) {
  ModelSpec s = FindModelPreset("tiny-llama");
  Plan p;
  p.frozen_prefixes = {"model.layers.0.", "visual."};
  p.lora.rank = 8;
  p.lora.targets = {"q_proj", "c_attn"};
  p.wrap.expert_units = true;
  p.tiled_mlp_shards = 3;
  auto problems = TrainabilityProblems(s, p, 256, "plan.json");
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_THAT(problems[0],
              HasSubstr("plan.json:/frozen_prefixes/1: expected a prefix of a parameter name"));
  EXPECT_THAT(problems[0], HasSubstr("got \"visual.\""));
  EXPECT_THAT(problems[1], HasSubstr("plan.json:/lora/targets/1: expected a projection of"));
  EXPECT_THAT(problems[1], HasSubstr("got \"c_attn\""));
  EXPECT_THAT(problems[2], HasSubstr("plan.json:/wrap/expert_units: expected a MoE model"));
  EXPECT_THAT(problems[3],
              HasSubstr("plan.json:/tiled_mlp_shards: expected a divisor of seq_len 256"));
  EXPECT_THAT(problems[3], HasSubstr("got 3"));
  Plan all;
  all.frozen_prefixes = {"model.", "lm_head"};
  auto frozen_all = TrainabilityProblems(s, all, 256, "plan.json");
  ASSERT_EQ(frozen_all.size(), 1u);
  EXPECT_THAT(frozen_all[0],
              HasSubstr("plan.json:/frozen_prefixes: expected at least one trainable parameter"));
  p.frozen_prefixes = {"model.layers.0."};
  p.lora.targets = {"q_proj"};
  p.wrap.expert_units = false;
  p.tiled_mlp_shards = 4;
  EXPECT_TRUE(TrainabilityProblems(s, p, 256, "plan.json").empty());
}

TEST(TrainableTest, TiedLmHeadPrefixFreezesTheSharedEmbedding) {
  ModelSpec s = FindModelPreset("gpt2");
  ASSERT_TRUE(s.tied_embeddings);
  Plan p;
  p.frozen_prefixes = {"lm_head"};
  EXPECT_TRUE(TrainabilityProblems(s, p, 1024, "plan").empty());
  TrainableCounts c = CountTrainable(ApplyTrainability(s, p, BuildFsdpUnits(s, p.wrap)));
  EXPECT_EQ(c.frozen, CountParameters(s).embedding);
}

TEST(TrainableTest, ExpertUnitsMakeOneUnitPerExpert) {
  ModelSpec s = TinyMoe();
  WrapPolicy w;
  w.expert_units = true;
  auto units = BuildFsdpUnits(s, w);
  int experts = 0;
  // SwiGLU expert: gate and up [fe, H], down [H, fe].
  int64_t expert_numel = 3 * s.hidden * s.moe.expert_ffn_hidden;
  int64_t total = 0;
  for (const auto& u : units) {
    total += u.NumParams();
    if (!u.is_expert) continue;
    ++experts;
    EXPECT_EQ(u.NumParams(), expert_numel) << u.name;
  }
  EXPECT_EQ(experts, s.num_layers * s.moe.num_experts);
  EXPECT_EQ(total, ParameterCount(s));
  // Each block's unit comes before its experts (outer first) and keeps attention and router.
  for (size_t i = 0; i + 1 < units.size(); ++i) {
    if (units[i + 1].is_expert && !units[i].is_expert && !units[i].is_root) {
      EXPECT_EQ(units[i].NumParams(), CountParameters(s).block - s.moe.num_experts * expert_numel);
    }
  }
}

TEST(TrainableTest, TiledMlpDropsTheMlpIntermediatesFromSavedActivations) {
  ModelSpec s = FindModelPreset("llama3-8b");
  ActivationOptions o;
  o.seq_len = 4096;
  BlockActivations full = ComputeBlockActivations(s, o);
  BlockActivations tiled = TiledMlpBlockActivations(s, o, 4);
  // HF LlamaMLP down(silu(gate(x)) * up(x)): autograd saves gate(x) (silu's input), silu(gate(x))
  // and up(x) (the product's inputs) and the product (down_proj's input): 4 x F x e per token.
  double e = 2, f = static_cast<double>(s.ffn_hidden);
  EXPECT_DOUBLE_EQ(full.full.saved_per_token - tiled.full.saved_per_token, 4 * f * e);
  // One tile of S / 4 tokens is live at a time: the forward peak falls by at least 3/4 of
  // the product and silu output live at the MLP's peak.
  EXPECT_LE(tiled.full.forward_peak_per_token, full.full.forward_peak_per_token - 0.75 * 2 * f * e);
  EXPECT_DOUBLE_EQ(MlpForwardFlopsPerToken(s, 0).count(), 2.0 * 3 * static_cast<double>(s.hidden) * f);
}

// A capacity factor C gives each routed expert C x its balanced tokens: the experts' saved
// intermediates (gate, silu, up and product of each of the top_k routed copies, 4 x F_e x e per
// routed token) grow by (C - 1) x 4 x F_e x top_k x e per token.
TEST(TrainableTest, MoeCapacityFactorScalesTheExpertIntermediates) {
  ModelSpec s = TinyMoe();
  ActivationOptions o;
  o.seq_len = 128;
  BlockActivations one = ComputeBlockActivations(s, o);
  BlockActivations two = TiledMlpBlockActivations(s, o, 1, 2.0);
  double e = 2, fe = static_cast<double>(s.moe.expert_ffn_hidden), k = s.moe.top_k;
  EXPECT_DOUBLE_EQ(two.full.saved_per_token - one.full.saved_per_token,
                   (2.0 - 1.0) * 4 * fe * k * e);
  BlockActivations same = TiledMlpBlockActivations(s, o, 1, 1.0);
  EXPECT_DOUBLE_EQ(same.full.saved_per_token, one.full.saved_per_token);
}

// What each block records: under LoRA on q, v (base frozen, embedding frozen) block 0's input
// does not require grad and later blocks' does; every block names the adapted projections and no
// trainable base weight; the head's input requires grad and nothing in it trains. Freezing a
// block's MLP leaves its attention and norms trainable.
TEST(TrainableTest, SubgraphTrainabilitiesFollowRequiresGradAndAdapters) {
  ModelSpec s = FindModelPreset("llama3.2-1b");
  Plan lora;
  lora.lora.rank = 16;
  lora.lora.targets = {"q_proj", "v_proj"};
  auto t =
      SubgraphTrainabilities(s, lora, ApplyTrainability(s, lora, BuildFsdpUnits(s, lora.wrap)));
  ASSERT_EQ(t.blocks.size(), static_cast<size_t>(s.num_layers));
  EXPECT_FALSE(t.blocks[0].input_requires_grad);
  EXPECT_TRUE(t.blocks[1].input_requires_grad);
  for (const auto& b : t.blocks) {
    EXPECT_FALSE(b.all_params_train);
    EXPECT_TRUE(b.trainable.empty());
    EXPECT_EQ(b.lora_modules, (std::vector<std::string>{"self_attn.q_proj", "self_attn.v_proj"}));
    EXPECT_EQ(b.lora_rank, 16);
  }
  EXPECT_TRUE(t.head.input_requires_grad);
  EXPECT_FALSE(t.head.all_params_train);
  EXPECT_TRUE(t.head.lora_modules.empty());
  Plan mlp;
  mlp.frozen_prefixes = {"model.layers.3.mlp"};
  auto f = SubgraphTrainabilities(s, mlp, ApplyTrainability(s, mlp, BuildFsdpUnits(s, mlp.wrap)));
  EXPECT_TRUE(f.blocks[2].FullFinetune());
  EXPECT_FALSE(f.blocks[3].all_params_train);
  EXPECT_EQ(f.blocks[3].trainable,
            (std::vector<std::string>{"input_layernorm.weight", "post_attention_layernorm.weight",
                                      "self_attn.k_proj.weight", "self_attn.o_proj.weight",
                                      "self_attn.q_proj.weight", "self_attn.v_proj.weight"}));
  EXPECT_TRUE(f.head.input_requires_grad);
}

// MFU's numerator: a full fine-tune is PaLM's 6N + 12·L·q_dim·S; inference is its forward third;
// freezing the embedding and block 0 removes their input gradients (2 x their N and block 0's
// 8·q_dim·S attention backward) and their weight gradients (2 x their N).
TEST(TrainableTest, ModelFlopsFollowWhatBackwardComputes) {
  ModelSpec s = FindModelPreset("llama3-8b");
  int64_t seq = 4096;
  double n = static_cast<double>(ParameterCount(s)),
         attn = 4.0 * static_cast<double>(s.q_dim()) * static_cast<double>(seq);
  double palm = 6 * n + 3 * s.num_layers * attn;
  Plan full;
  auto units = [&](const Plan& p) { return ApplyTrainability(s, p, BuildFsdpUnits(s, p.wrap)); };
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(s, units(full), full, seq), palm);
  Plan infer;
  infer.role = Role::kInfer;
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(s, units(infer), infer, seq), palm / 3);
  Plan frozen;
  frozen.frozen_prefixes = {"model.embed_tokens", "model.layers.0."};
  double f = static_cast<double>(CountParameters(s).embedding + CountParameters(s).block);
  EXPECT_NEAR(ModelFlopsPerToken(s, units(frozen), frozen, seq), palm - 4 * f - 2 * attn,
              palm * 1e-12);
}

}  // namespace
}  // namespace shardtune::model
