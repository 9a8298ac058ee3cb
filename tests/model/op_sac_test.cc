// Op-level SAC save sets and per-block checkpointing policies (issue #46): the --checkpointing
// syntaxes sac:OPS and blocks:RUNS, their plan JSON, the per-block rules, and the bytes and FLOPs
// a block keeps and reruns under any save set, derived here from the block's shapes.
#include <gtest/gtest.h>

#include <string>

#include "model/activations.h"
#include "model/errors.h"
#include "model/plan.h"
#include "model/plan_json.h"
#include "tests/model/decoder_shape.h"

namespace shardtune::model {
namespace {

Plan Parsed(const std::string& text) {
  Plan p;
  ParseCheckpointingSpec(text, "--checkpointing", &p);
  return p;
}

std::string ErrorOf(const std::string& text) {
  try {
    Parsed(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

constexpr SacSave Bit(int i) { return SacSave{1} << i; }

TEST(OpSacPlanTest, SacSyntaxNamesTheOpsKept) {
  Plan p = Parsed("sac:wk+w3+sdpa");
  EXPECT_EQ(p.checkpointing, Checkpointing::kSelective);
  EXPECT_EQ(p.sac_save, Bit(1) | Bit(5) | Bit(7));  // wk, w3, sdpa in kSacOpNames
  EXPECT_EQ(CheckpointingSpecToString(p), "sac:wk+w3+sdpa");
  EXPECT_EQ(Parsed("sac:none").sac_save, 0u);
  EXPECT_EQ(CheckpointingSpecToString(Parsed("sac:none")), "sac:none");
  // Plain selective is torchtitan's rule, and says so.
  EXPECT_EQ(Parsed("selective").sac_save, kTorchtitanSacSave);
  EXPECT_EQ(CheckpointingSpecToString(Parsed("selective")), "selective");
}

TEST(OpSacPlanTest, BlocksSyntaxRoundTripsAndAnswersPerBlock) {
  Plan p = Parsed("blocks:0-1=full,2=sac:wq+sdpa,3-5=selective,6-7=none");
  ASSERT_EQ(p.checkpointing, Checkpointing::kBlocks);
  ASSERT_EQ(p.checkpoint_blocks.size(), 4u);
  EXPECT_EQ(CheckpointingSpecToString(p), "blocks:0-1=full,2=sac:wq+sdpa,3-5=selective,6-7=none");
  EXPECT_TRUE(p.Problems("plan", 1, 1, 8, 0).empty());
  for (int b = 0; b < 8; ++b) {
    EXPECT_EQ(BlockCheckpointed(p, b, 0), b <= 1) << b;
    EXPECT_EQ(BlockSelective(p, b, 0), b >= 2 && b <= 5) << b;
  }
  EXPECT_EQ(BlockSacSave(p, 2, 0), Bit(0) | Bit(7));
  EXPECT_EQ(BlockSacSave(p, 4, 0), kTorchtitanSacSave);
  // A VL tower's blocks come first and keep theirs; the runs count text blocks.
  EXPECT_FALSE(BlockCheckpointed(p, 0, 3));
  EXPECT_TRUE(BlockCheckpointed(p, 3, 3));
  EXPECT_TRUE(BlockSelective(p, 5, 3));
  EXPECT_TRUE(AnySelectiveBlock(p));
  EXPECT_FALSE(AnySelectiveBlock(Parsed("blocks:0-7=full")));
}

TEST(OpSacPlanTest, BadTextAndBadRunsAreOneLineErrors) {
  EXPECT_NE(ErrorOf("sac:wq+wx").find("got \"wx\" in \"sac:wq+wx\" (did you mean \"wq\"?)"), std::string::npos)
      << ErrorOf("sac:wq+wx");
  EXPECT_NE(ErrorOf("sac:wq+wq").find("each once"), std::string::npos);
  EXPECT_NE(ErrorOf("blocks:0-3=fulll").find("did you mean \"full\""), std::string::npos) << ErrorOf("blocks:0-3=fulll");
  EXPECT_NE(ErrorOf("blocks:0-3").find("blocks:A-B=POLICY"), std::string::npos);
  const auto problems = [](const std::string& text, int layers) {
    return Parsed(text).Problems("plan", 1, 1, layers, 0);
  };
  ASSERT_EQ(problems("blocks:0-3=full,5-7=none", 8).size(), 1u);
  EXPECT_EQ(problems("blocks:0-3=full,5-7=none", 8)[0],
            "plan:/checkpoint_blocks: expected runs in order from block 0 without gaps or overlaps (the next "
            "starting at block 4), got \"0-3=full,5-7=none\"");
  ASSERT_EQ(problems("blocks:0-3=full", 8).size(), 1u);
  EXPECT_NE(problems("blocks:0-3=full", 8)[0].find("ending at the model's last block 7"), std::string::npos);
  EXPECT_EQ(problems("blocks:0-3=full,2-7=none", 8).size(), 1u);
}

TEST(OpSacPlanTest, PlanJsonCarriesSaveSetsAndRuns) {
  for (const std::string text : {"sac:wk+w3+sdpa", "blocks:0=full,1-6=sac:none,7=none", "first:2+selective",
                                 "selective"}) {
    Plan p = Parsed(text);
    Plan back = PlanFromJson(nlohmann::json::parse(PlanToJson(p).dump()), "plan.json");
    EXPECT_EQ(CheckpointingSpecToString(back), text);
  }
  EXPECT_THROW(PlanFromJson(nlohmann::json{{"checkpointing", "blocks"}}, "plan.json"), InputError);
  EXPECT_THROW(PlanFromJson(nlohmann::json{{"checkpointing", "full"}, {"sac_save", "wq"}}, "plan.json"),
               InputError);
}

// Llama-3-8B's block (hidden 4096, q 4096, kv 1024, ffn 14336), bf16, SDPA: under a save set the
// block keeps its input and the kept outputs (2 B each), and reruns 2 x in x out FLOPs per token of
// every projection it does not keep; the attention forward reruns unless sdpa is kept.
TEST(OpSacActivationsTest, BytesAndRecomputeOfAnySaveSetFollowTheShapes) {
  const ModelSpec spec = testing_util::Decoder("llama-8b-shape", {32, 4096, 32, 8, 14336, 128256, 8192});
  ActivationOptions o;
  o.modeling = Modeling::kTorchtitan;
  o.seq_len = 8192;
  const BlockActivations b = ComputeBlockActivations(spec, o);
  ASSERT_TRUE(b.HasOpSac());
  const double h = 4096, q = 4096, kv = 1024, f = 14336, e = 2;
  // The SDPA kernel's saved outputs: output [tokens, q] in bf16 and logsumexp, fp32 per head.
  double sdpa = 0;
  for (const auto& t : b.full.saved) {
    if (t.name.find("attn.core") != std::string::npos) sdpa += t.bytes_per_token;
  }
  EXPECT_DOUBLE_EQ(sdpa, e * q + 4 * 32);
  // wk + w3 + sdpa.
  const SacSave s = Bit(1) | Bit(5) | Bit(7);
  EXPECT_DOUBLE_EQ(b.SacSavedPerToken(s), e * (h + kv + f) + sdpa);
  EXPECT_DOUBLE_EQ(b.SacRecomputeMatmulFlopsPerToken(s), 2 * (h * q + h * kv + q * h + h * f + f * h));
  EXPECT_DOUBLE_EQ(b.SacRecomputeAttention(s), 0.0);
  EXPECT_DOUBLE_EQ(b.SacRecomputeAttention(Bit(0)), 1.0);
  // Nothing kept: the input only, every projection reruns (full checkpointing's bytes).
  EXPECT_DOUBLE_EQ(b.SacSavedPerToken(0), b.checkpoint_input_per_token);
  EXPECT_DOUBLE_EQ(b.SacRecomputeMatmulFlopsPerToken(0), 2 * (h * q + 2 * h * kv + q * h + 3 * h * f));
  // Everything kept: more than no checkpointing keeps less the norms and the activation, and no
  // projection reruns.
  EXPECT_DOUBLE_EQ(b.SacSavedPerToken(kSacAll), e * (h + q + 2 * kv + h + 2 * f + h) + sdpa);
  EXPECT_DOUBLE_EQ(b.SacRecomputeMatmulFlopsPerToken(kSacAll), 0.0);
  // torchtitan's rule on a bias-free block is wq, wv, w1, w2 and sdpa, as selective counts it.
  EXPECT_EQ(b.SacOps(kTorchtitanSacSave), Bit(0) | Bit(2) | Bit(4) | Bit(6) | Bit(7));
  EXPECT_DOUBLE_EQ(b.selective_per_token, e * (h + q + kv + f + h) + sdpa);
}

// Qwen2's q/k/v carry biases: aten.addmm, outside torchtitan's mm count, so its rule keeps the
// first and third bias-free mm (wo, w3); eager attention keeps nothing of the core.
TEST(OpSacActivationsTest, TorchtitanRuleSkipsBiasedProjections) {
  ModelSpec base;
  base.qkv_bias = true;
  const ModelSpec spec = testing_util::Decoder("qwen2-shape", {2, 64, 4, 2, 128, 256, 64}, base);
  ActivationOptions o;
  o.modeling = Modeling::kTorchtitan;
  o.attention = Attention::kEager;
  o.seq_len = 64;
  const BlockActivations b = ComputeBlockActivations(spec, o);
  ASSERT_TRUE(b.HasOpSac());
  EXPECT_EQ(b.SacOps(kTorchtitanSacSave), Bit(3) | Bit(5));
  EXPECT_DOUBLE_EQ(b.SacRecomputeAttention(kSacAll), 1.0);
  EXPECT_DOUBLE_EQ(b.selective_per_token, 2 * (64 + 64 + 128));
}

TEST(OpSacActivationsTest, SaveSetsAreRefusedWhereOpSacDoesNotApply) {
  const ModelSpec spec = testing_util::Decoder("llama-shape", {4, 64, 4, 2, 128, 256, 64});
  Plan p = Parsed("sac:wq+sdpa");
  ASSERT_EQ(OpSacProblems(spec, p, "plan").size(), 1u);  // Hugging Face modeling
  EXPECT_NE(OpSacProblems(spec, p, "plan")[0].find("plan:/checkpointing: expected an op-level SAC save set only"),
            std::string::npos);
  p.modeling = Modeling::kTorchtitan;
  EXPECT_TRUE(OpSacProblems(spec, p, "plan").empty());
  p.lora.rank = 8;
  EXPECT_EQ(OpSacProblems(spec, p, "plan").size(), 1u);
  // torchtitan's own rule under HF modeling is the per-piece selective recompute: no problem.
  EXPECT_TRUE(OpSacProblems(spec, Parsed("blocks:0-1=selective,2-3=full"), "plan").empty());
}

// An MoE block of routed experts takes save sets under torchtitan's modeling (w1, w3, w2: the
// experts' grouped GEMMs); with expert parallelism, a shared expert or DeepSeek's router it does not.
TEST(OpSacActivationsTest, MoeBlocksOfRoutedExpertsTakeSaveSets) {
  ModelSpec base;
  base.moe.num_experts = 4;
  base.moe.top_k = 2;
  base.moe.expert_ffn_hidden = 48;
  const ModelSpec spec = testing_util::Decoder("mixtral-shape", {4, 64, 4, 2, 128, 256, 64}, base);
  Plan p = Parsed("sac:w1+w2+sdpa");
  p.modeling = Modeling::kTorchtitan;
  EXPECT_TRUE(OpSacProblems(spec, p, "plan").empty());
  p.ep = 2;
  EXPECT_EQ(OpSacProblems(spec, p, "plan").size(), 1u);
  p.ep = 1;
  ModelSpec shared = spec;
  shared.moe.num_shared_experts = 1;
  EXPECT_EQ(OpSacProblems(shared, p, "plan").size(), 1u);
  ModelSpec deepseek = spec;
  deepseek.moe.deepseek_router = true;
  EXPECT_EQ(OpSacProblems(deepseek, p, "plan").size(), 1u);
}

// --activation-offload first:K: verl's handler over the first K blocks (issue #46's per-block
// offload); the plan JSON carries K, and K must leave the last block on the device.
TEST(BlockOffloadPlanTest, FirstKParsesRoundTripsAndIsChecked) {
  Plan p;
  ParseActivationOffloadSpec("first:5", "--activation-offload", &p);
  EXPECT_EQ(p.activation_offload, ActivationOffload::kVerlAsync);
  EXPECT_EQ(p.activation_offload_blocks, 5);
  EXPECT_EQ(ActivationOffloadSpecToString(p), "first:5");
  const Plan back = PlanFromJson(nlohmann::json::parse(PlanToJson(p).dump()), "plan.json");
  EXPECT_EQ(back.activation_offload_blocks, 5);
  ParseActivationOffloadSpec("verl_async", "--activation-offload", &p);
  EXPECT_EQ(p.activation_offload_blocks, 0);
  EXPECT_EQ(ActivationOffloadSpecToString(p), "verl_async");
  for (const std::string bad : {"first:0", "first:x", "first:", "verl"}) {
    EXPECT_THROW(ParseActivationOffloadSpec(bad, "--activation-offload", &p), InputError) << bad;
  }
  ParseActivationOffloadSpec("first:8", "--activation-offload", &p);
  const auto problems = p.Problems("plan", 1, 1, 8, 0);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "plan:/activation_offload_blocks: expected with activation_offload verl_async, an integer from 1 to 7 "
            "(the model's blocks less the last), got 8");
  EXPECT_TRUE(Parsed("none").Problems("plan", 1, 1, 8, 0).empty());
  EXPECT_THROW(PlanFromJson(nlohmann::json{{"activation_offload_blocks", 3}}, "plan.json"), InputError);
  // The blocks whose saved tensors go to the host: K under first:K (at most every block but the
  // last), every block but the last under verl_async, none below three blocks (verl's rule).
  ParseActivationOffloadSpec("first:5", "--activation-offload", &p);
  EXPECT_EQ(ActivationOffloadedBlocks(p, 32), 5);
  EXPECT_EQ(ActivationOffloadedBlocks(p, 4), 3);
  EXPECT_EQ(ActivationOffloadedBlocks(p, 2), 0);
  ParseActivationOffloadSpec("verl_async", "--activation-offload", &p);
  EXPECT_EQ(ActivationOffloadedBlocks(p, 32), 31);
  EXPECT_EQ(ActivationOffloadedBlocks(Parsed("none"), 32), 0);
}

// The per-block policy in words (estimate's and tune's "activations:" line): one clause per run,
// and the blocks whose activations verl's handler takes to the host say so; a run across the last
// of them is told as two.
TEST(BlockPolicyTextTest, EachRunAndTheOffloadedBlocksInWords) {
  Plan p = Parsed("blocks:0-5=full,6-20=sac:wq+wk+w2+sdpa,21-31=none");
  EXPECT_EQ(DescribeBlockPolicy(p),
            "blocks 0-5: rerun whole in backward; blocks 6-20: op-SAC keeps wq, wk, w2, sdpa, reruns wv, wo, w1, w3 "
            "and the elementwise ops; blocks 21-31: keep every activation");
  p = Parsed("blocks:0-32=none,33-79=selective");
  ParseActivationOffloadSpec("first:33", "--activation-offload", &p);
  EXPECT_EQ(DescribeBlockPolicy(p),
            "blocks 0-32: keep every activation, offloaded to pinned host memory; blocks 33-79: selective recompute "
            "(the model's own rule)");
  p = Parsed("blocks:0-9=none,10=full,11-15=none");
  ParseActivationOffloadSpec("first:4", "--activation-offload", &p);
  EXPECT_EQ(DescribeBlockPolicy(p),
            "blocks 0-3: keep every activation, offloaded to pinned host memory; blocks 4-9: keep every activation; "
            "block 10: rerun whole in backward; blocks 11-15: keep every activation");
  // verl's own handler: every block but the last.
  ParseActivationOffloadSpec("verl_async", "--activation-offload", &p);
  EXPECT_EQ(DescribeBlockPolicy(p),
            "blocks 0-9: keep every activation, offloaded to pinned host memory; block 10: rerun whole in backward, "
            "offloaded to pinned host memory; blocks 11-14: keep every activation, offloaded to pinned host memory; "
            "block 15: keep every activation");
}

}  // namespace
}  // namespace shardtune::model
