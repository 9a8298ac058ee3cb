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

// ROLL's attention and MoE-block classes (WrapPolicy::sub_block_units): two units per block, the
// attention's q/k/v/o and q/k norms (Qwen3MoeAttention: H x (a + 2 kv) d + a d x H + 2 d) and
// the sparse block's router and experts (H x E + E x 3 x H x F_e); the block's two norms (2H
// each) stay in the root with the embedding, final norm and head.
TEST(ModuleTreeTest, SubBlockUnitsSplitEachBlockInTwoAndLeaveItsNormsToTheRoot) {
  ModelSpec s = FindModelPreset("qwen3-30b-a3b");
  WrapPolicy w;
  w.sub_block_units = true;
  auto units = BuildFsdpUnits(s, w);
  const int64_t h = s.hidden, d = 128, a = s.num_heads, kv = s.num_kv_heads;
  const int64_t e = s.moe.num_experts, fe = s.moe.expert_ffn_hidden, v = s.vocab_size;
  ASSERT_EQ(units.size(), static_cast<size_t>(2 * s.num_layers + 1));
  EXPECT_TRUE(units.front().is_root);
  EXPECT_EQ(units.front().NumParams(), 2 * v * h + h + 2 * h * s.num_layers);
  EXPECT_EQ(units[1].name, "model.layers.0.self_attn");
  EXPECT_EQ(units[1].NumParams(), h * (a + 2 * kv) * d + a * d * h + 2 * d);
  EXPECT_EQ(units[2].name, "model.layers.0.block_sparse_moe");
  EXPECT_EQ(units[2].NumParams(), h * e + e * 3 * h * fe);
  EXPECT_EQ(units[1].first_segment, BlockSegment(0));
  EXPECT_EQ(units[2].first_segment, BlockSegment(0));
  int64_t total = 0;
  for (const auto& u : units) total += u.NumParams();
  EXPECT_EQ(total, ParameterCount(s));
  // Only block wraps split.
  Plan p;
  p.wrap.sub_block_units = true;
  EXPECT_TRUE(p.Problems("plan", 8, 8, s.num_layers, s.max_seq_len).empty());
  p.wrap.kind = WrapPolicy::Kind::kEveryK;
  p.wrap.every_k = 2;
  EXPECT_EQ(p.Problems("plan", 8, 8, s.num_layers, s.max_seq_len).size(), 1u);
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

namespace shardtune::model {
namespace {

// The checkpoint names of each MoE family, written here from the Hub's safetensors indexes
// (mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen1.5-MoE-A2.7B, Qwen/Qwen3-30B-A3B,
// deepseek-ai/DeepSeek-V3, openai/gpt-oss-20b): the module tree's Mixtral-style names map to them.
TEST(HfParameterTest, EachMoeFamilyGetsItsCheckpointNames) {
  auto name = [](const std::string& arch, const std::string& n) {
    ModelSpec s = FindModelPreset("qwen3-30b-a3b");
    s.hf_architecture = arch;
    return HfParameter(s, n, {1}).name;
  };
  const std::string moe = "model.layers.3.block_sparse_moe";
  struct Case {
    std::string arch;             // the spec's hf_architecture
    std::string name;             // the module tree's
    std::string checkpoint_name;  // the safetensors index's
  };
  const Case cases[] = {
      {"MixtralForCausalLM", moe + ".experts.7.gate_proj.weight",
       "model.layers.3.block_sparse_moe.experts.7.w1.weight"},
      {"MixtralForCausalLM", moe + ".experts.7.up_proj.weight",
       "model.layers.3.block_sparse_moe.experts.7.w3.weight"},
      {"MixtralForCausalLM", moe + ".experts.7.down_proj.weight",
       "model.layers.3.block_sparse_moe.experts.7.w2.weight"},
      {"MixtralForCausalLM", moe + ".gate.weight", moe + ".gate.weight"},
      {"Qwen3MoeForCausalLM", moe + ".experts.7.up_proj.weight",
       "model.layers.3.mlp.experts.7.up_proj.weight"},
      {"Qwen3MoeForCausalLM", moe + ".gate.weight", "model.layers.3.mlp.gate.weight"},
      {"Qwen2MoeForCausalLM", moe + ".shared_expert.down_proj.weight",
       "model.layers.3.mlp.shared_expert.down_proj.weight"},
      {"Qwen2MoeForCausalLM", moe + ".shared_expert_gate.weight",
       "model.layers.3.mlp.shared_expert_gate.weight"},
      {"DeepseekV3ForCausalLM", moe + ".shared_expert.gate_proj.weight",
       "model.layers.3.mlp.shared_experts.gate_proj.weight"},
      {"DeepseekV2ForCausalLM", moe + ".experts.0.down_proj.weight",
       "model.layers.3.mlp.experts.0.down_proj.weight"},
      {"GptOssForCausalLM", moe + ".gate.bias", "model.layers.3.mlp.router.bias"},
      {"GptOssForCausalLM", moe + ".experts.down_proj_bias",
       "model.layers.3.mlp.experts.down_proj_bias"},
      // Unknown class (a hand-written file), and names outside the MoE blocks: unchanged.
      {"", moe + ".experts.7.gate_proj.weight", moe + ".experts.7.gate_proj.weight"},
      {"Qwen3MoeForCausalLM", "model.layers.3.self_attn.q_proj.weight",
       "model.layers.3.self_attn.q_proj.weight"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.arch + " " + c.name);
    EXPECT_EQ(name(c.arch, c.name), c.checkpoint_name);
  }
}

// GptOssExperts holds gate_up_proj [E, H, 2F] and down_proj [E, F, H] (modeling_gpt_oss.py);
// the module tree's [E, H·2F] and [E, F·H] are the same bytes.
TEST(HfParameterTest, GptOssExpertsAreThreeDimensional) {
  const ModelSpec s = FindModelPreset("gpt-oss-20b");
  const int64_t E = 32, H = 2880, F = 2880;
  HfTensor gu = HfParameter(s, "model.layers.0.block_sparse_moe.experts.gate_up_proj", {E, H * 2 * F});
  EXPECT_EQ(gu.name, "model.layers.0.mlp.experts.gate_up_proj");
  EXPECT_EQ(gu.shape, (std::vector<int64_t>{E, H, 2 * F}));
  HfTensor d = HfParameter(s, "model.layers.0.block_sparse_moe.experts.down_proj", {E, F * H});
  EXPECT_EQ(d.shape, (std::vector<int64_t>{E, F, H}));
  EXPECT_EQ(HfParameter(s, "model.layers.0.block_sparse_moe.experts.down_proj_bias", {E, H}).shape,
            (std::vector<int64_t>{E, H}));
}

// DeepSeek-V3's router keeps e_score_correction_bias [E] as a persistent buffer next to its
// weight; V2 has none.
TEST(HfParameterTest, DeepseekV3CheckpointsCarryTheScoreCorrectionBias) {
  const ModelSpec v3 = FindModelPreset("deepseek-v3");
  std::vector<HfTensor> b = HfBuffersAfter(v3, "model.layers.3.mlp.gate.weight");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].name, "model.layers.3.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(b[0].shape, (std::vector<int64_t>{256}));
  EXPECT_TRUE(HfBuffersAfter(v3, "model.layers.3.mlp.experts.0.up_proj.weight").empty());
  EXPECT_TRUE(HfBuffersAfter(FindModelPreset("deepseek-v2-lite"), "model.layers.3.mlp.gate.weight").empty());
}

// The HF config importer keeps the class; a model file may name it and writes it back.
TEST(HfParameterTest, PresetsAndImportsKnowTheirClass) {
  EXPECT_EQ(FindModelPreset("qwen3-30b-a3b").hf_architecture, "Qwen3MoeForCausalLM");
  EXPECT_EQ(FindModelPreset("mixtral-8x7b").hf_architecture, "MixtralForCausalLM");
  EXPECT_EQ(FindModelPreset("gpt-oss-120b").hf_architecture, "GptOssForCausalLM");
}

}  // namespace
}  // namespace shardtune::model
