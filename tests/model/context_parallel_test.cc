// Ulysses cp against the model: verl's head rules, KV-head repetition, the FSDP mesh rule, and
// the per-layer all-to-all sizes, each from its formula.
#include "model/context_parallel.h"

#include <gtest/gtest.h>

#include "model/presets.h"

namespace shardtune::model {
namespace {

Plan WithCp(int cp) {
  Plan p;
  p.cp = cp;
  return p;
}

bool Mentions(const std::vector<std::string>& v, const std::string& text) {
  for (const auto& s : v) {
    if (s.find(text) != std::string::npos) return true;
  }
  return false;
}

// llama3-8b: 32 heads, 8 KV heads. repeats = max(cp / 8, 1) (verl monkey_patch.py).
TEST(ContextParallelTest, KvHeadsRepeatOnlyWhenCpExceedsThem) {
  ModelSpec s = FindModelPreset("llama3-8b");
  for (int cp : {1, 2, 4, 8}) EXPECT_EQ(KvRepeat(s, cp), 1) << cp;
  EXPECT_EQ(KvRepeat(s, 16), 2);
  EXPECT_EQ(KvRepeat(s, 32), 4);
}

TEST(ContextParallelTest, ValidCpHasNoProblems) {
  ModelSpec s = FindModelPreset("llama3-8b");
  for (int cp : {1, 2, 4, 8, 16, 32})
    EXPECT_TRUE(CpProblems(s, WithCp(cp), 32, 8, "plan").empty()) << cp;
}

// Each rejection is one line naming the key and what was expected.
TEST(ContextParallelTest, CpMustDivideHeads) {
  ModelSpec s = FindModelPreset("llama3-8b");
  auto p = CpProblems(s, WithCp(3), 6, 6, "plan");
  ASSERT_EQ(p.size(), 2u);  // 32 % 3 and neither 8 % 3 nor 3 % 8
  EXPECT_EQ(p[0].rfind("plan:/cp: expected a divisor of num_heads 32", 0), 0u) << p[0];
  EXPECT_NE(p[0].find("got 3"), std::string::npos);
  EXPECT_NE(p[0].find("--cp"), std::string::npos);
  for (const auto& m : p) EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(ContextParallelTest, KvHeadsMustDivideOrBeDividedByCp) {
  ModelSpec s = FindModelPreset("llama3-8b");
  s.num_heads = 24;
  s.num_kv_heads = 6;  // cp 4: 24 % 4 == 0, but 6 % 4 and 4 % 6 are not
  auto p = CpProblems(s, WithCp(4), 8, 8, "plan.json");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(
      Mentions(p, "plan.json:/cp: expected a divisor or a multiple of num_key_value_heads 6"));
}

// cp x dp_shard x dp_replicate = world: with dp_cp the shard group holds whole cp groups.
TEST(ContextParallelTest, ShardGroupMustHoldWholeCpGroups) {
  ModelSpec s = FindModelPreset("llama3-8b");
  Plan p = WithCp(4);
  p.strategy = ShardingStrategy::kHybridShard;
  p.shard_group_size = 2;
  auto problems = CpProblems(s, p, 8, 8, "plan");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(Mentions(problems, "cp x dp_shard x dp_replicate = world 8"));
  // With cp_fsdp_mesh dp, FSDP sees world / cp = 2 ranks: a shard group of 2 tiles it.
  p.cp_fsdp_mesh = CpFsdpMesh::kDp;
  EXPECT_TRUE(CpProblems(s, p, 8, 8, "plan").empty());
}

// [B, S/cp, heads, d] in bf16: q and out a·d, k and v a_kv·d·repeat elements per token.
TEST(ContextParallelTest, AllToAllSizesPerLayer) {
  ModelSpec s = FindModelPreset("llama3-8b");
  Plan p = WithCp(4);
  p.micro_batch = 2;
  UlyssesAllToAll a = UlyssesAllToAllPerLayer(s, p, 65536);
  const int64_t t = 2 * 65536 / 4;
  EXPECT_EQ(a.q_bytes, t * 32 * 128 * 2);
  EXPECT_EQ(a.k_bytes, t * 8 * 128 * 2);
  EXPECT_EQ(a.v_bytes, a.k_bytes);
  EXPECT_EQ(a.out_bytes, a.q_bytes);
  EXPECT_EQ(a.calls, 4);
  p.cp = 16;  // 8 KV heads repeated twice
  a = UlyssesAllToAllPerLayer(s, p, 65536);
  EXPECT_EQ(a.k_bytes, (2 * 65536 / 16) * 8 * 2 * 128 * 2);
  EXPECT_EQ(UlyssesAllToAllPerLayer(s, WithCp(1), 65536).forward_bytes(), 0);
}

}  // namespace
}  // namespace shardtune::model
