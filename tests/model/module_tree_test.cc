// Module tree and FSDP units: parameter totals match the closed form, every parameter lands in
// exactly one unit, and the wrap policies make the units PyTorch would.
#include "model/module_tree.h"

#include <set>

#include <gtest/gtest.h>

#include "model/presets.h"

namespace shardtune::model {
namespace {

TEST(ModuleTreeTest, TreeParamsEqualClosedFormForEveryPreset) {
  for (const auto& p : ModelPresets()) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(BuildModuleTree(p.spec).NumParams(), ParameterCount(p.spec));
  }
}

TEST(ModuleTreeTest, EveryParameterInExactlyOneUnitForEachPolicy) {
  ModelSpec s = FindModelPreset("llama2-7b");
  std::vector<WrapPolicy> policies(5);
  policies[1].kind = WrapPolicy::Kind::kEveryK;
  policies[1].every_k = 5;
  policies[2].kind = WrapPolicy::Kind::kRanges;
  policies[2].ranges = {{0, 7}, {8, 31}};
  policies[3].kind = WrapPolicy::Kind::kSize;
  policies[3].min_num_params = 100'000'000;
  policies[4].embedding_unit = policies[4].head_unit = true;
  for (const auto& w : policies) {
    std::set<std::string> seen;
    int64_t total = 0;
    for (const auto& u : BuildFsdpUnits(s, w)) {
      for (const auto& prm : u.params) EXPECT_TRUE(seen.insert(prm.name).second) << prm.name;
      total += u.NumParams();
    }
    EXPECT_EQ(total, ParameterCount(s));
  }
}

TEST(ModuleTreeTest, BlockPolicyMakesOneUnitPerBlockPlusRoot) {
  ModelSpec s = FindModelPreset("llama3-8b");
  auto units = BuildFsdpUnits(s, WrapPolicy{});
  ASSERT_EQ(units.size(), static_cast<size_t>(s.num_layers + 1));
  EXPECT_TRUE(units.front().is_root);  // root spans from segment 0, outermost first
  // Root holds embedding, final norm and LM head: 2·V·H + H.
  EXPECT_EQ(units.front().NumParams(), 2 * s.vocab_size * s.hidden + s.hidden);
  EXPECT_EQ(units[1].first_segment, BlockSegment(0));
}

TEST(ModuleTreeTest, EveryKGroupsConsecutiveBlocks) {
  ModelSpec s = FindModelPreset("llama2-7b");  // 32 blocks
  WrapPolicy w;
  w.kind = WrapPolicy::Kind::kEveryK;
  w.every_k = 5;
  auto units = BuildFsdpUnits(s, w);
  EXPECT_EQ(units.size(), 7u + 1u);  // ceil(32 / 5) block units + root
  EXPECT_EQ(units.back().first_segment, BlockSegment(30));
  EXPECT_EQ(units.back().last_segment, BlockSegment(31));
}

// size_based_auto_wrap_policy (min 100M) on Llama-2-7B, per torch/distributed/fsdp/wrap.py:
// each MLP (3·4096·11008 = 135M) is wrapped; the rest of each layer (attention 4·4096² = 67M +
// norms) is not, nor is the ModuleList, so every layer's attention falls to "model", which also
// holds the final norm: one unit of 32·(4·4096² + 2·4096) + 4096 params gathered for the whole
// forward. The embedding (131M) and the LM head (131M) are wrapped on their own.
TEST(ModuleTreeTest, SizePolicyLeavesAttentionToOneHugeUnit) {
  ModelSpec s = FindModelPreset("llama2-7b");
  WrapPolicy w;
  w.kind = WrapPolicy::Kind::kSize;
  w.min_num_params = 100'000'000;
  auto units = BuildFsdpUnits(s, w);
  int64_t h = s.hidden;
  const FsdpUnit* model_unit = nullptr;
  int mlp_units = 0;
  for (const auto& u : units) {
    if (u.name == "model") model_unit = &u;
    if (u.name.find(".mlp") != std::string::npos) {
      ++mlp_units;
      EXPECT_EQ(u.NumParams(), 3 * h * s.ffn_hidden);
    }
  }
  ASSERT_NE(model_unit, nullptr);
  EXPECT_EQ(model_unit->NumParams(), 32 * (4 * h * h + 2 * h) + h);
  EXPECT_EQ(model_unit->first_segment, 0);
  EXPECT_EQ(model_unit->last_segment, FinalNormSegment(s.num_layers));
  EXPECT_EQ(mlp_units, 32);
}

TEST(ModuleTreeTest, PaddedShardRoundsDim0UpPerParameter) {
  ParamTensor t{"w", 10, 3, 0};
  EXPECT_EQ(t.PaddedShardNumel(4), 3 * 3);  // ceil(10/4) = 3 rows of 3
  EXPECT_EQ(t.PaddedShardNumel(1), 30);
  EXPECT_GE(t.PaddedShardNumel(4) * 4, t.numel());
}

TEST(ModuleTreeTest, BlockFlopsFollowNarayananFormula) {
  ModelSpec s = FindModelPreset("llama2-7b");
  int64_t S = 4096;
  double h = 4096, f = 11008;
  // 2 FLOPs per MAC over q,k,v,o (4·H²) and the SwiGLU MLP (3·H·F), plus QK^T and PV: 4·S·H.
  double expected = 2 * (4 * h * h + 3 * h * f) + 4.0 * static_cast<double>(S) * h;
  EXPECT_DOUBLE_EQ(BlockForwardFlopsPerToken(s, S, 0).count(), expected);
}

TEST(ModuleTreeTest, TiedEmbeddingHasNoSeparateHeadWeight) {
  ModelSpec s = FindModelPreset("gpt2");
  auto root = BuildModuleTree(s);
  EXPECT_TRUE(root.children.back().params.empty());  // lm_head reuses wte
  EXPECT_EQ(root.NumParams(), 124'439'808);
}

}  // namespace
}  // namespace shardtune::model
