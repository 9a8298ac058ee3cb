// Plan search: pruning never changes the answer (compared with exhaustive simulation of every
// plan that fits), the pick is never infeasible nor slower than any enumerated plan, results are
// deterministic, and a model that fits nowhere gets an answer, not an error.
#include "planner/search.h"

#include <gtest/gtest.h>

#include "model/presets.h"
#include "profiles/cluster.h"

namespace shardtune::plan {
namespace {

SearchRequest SmallSpace(int64_t global_batch, int64_t seq) {
  SearchRequest r;
  r.global_batch = global_batch;
  r.seq_len = seq;
  r.top_k = 3;
  r.space.wraps = {model::WrapPolicy{}};
  r.space.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kFull};
  r.space.forward_prefetch = {false};
  return r;
}

TEST(SearchTest, PruningGivesTheExhaustiveAnswer) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(32, 4096);
  SearchResult pruned = SearchPlans(spec, c, req);
  req.prune = false;
  SearchResult full = SearchPlans(spec, c, req);
  ASSERT_FALSE(full.top.empty());
  ASSERT_FALSE(pruned.top.empty());
  EXPECT_EQ(pruned.top.front().key, full.top.front().key);
  EXPECT_EQ(pruned.top.front().step_time_s, full.top.front().step_time_s);
  EXPECT_GE(full.simulated, pruned.simulated);
  EXPECT_GT(pruned.pruned_by_memory_bound + pruned.pruned_by_time_bound, 0);
}

TEST(SearchTest, PickFitsAndIsNoSlowerThanAnyEnumeratedPlan) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("2x8xH100");
  SearchRequest req = SmallSpace(64, 2048);
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  const Candidate& best = r.top.front();
  EXPECT_LE(best.required, best.capacity);
  sim::SimOptions o;
  for (const auto& p : EnumeratePlans(spec, c, req)) {
    auto s = sim::SimulateStep(spec, c, p, o);
    if (s.memory.fits) {
      EXPECT_LE(best.step_time_s, s.step_time_s) << PlanKey(p);
    }
  }
  for (size_t i = 1; i < r.top.size(); ++i) EXPECT_LE(r.top[i - 1].objective, r.top[i].objective);
}

TEST(SearchTest, ParetoFrontIsMonotone) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(16, 2048);
  req.prune = false;
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_GE(r.pareto.size(), 1u);
  for (size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_LE(r.pareto[i - 1].required, r.pareto[i].required);
    EXPECT_LT(r.pareto[i - 1].tokens_per_s, r.pareto[i].tokens_per_s);
  }
}

TEST(SearchTest, SameInputsSameResult) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(16, 1024);
  SearchResult a = SearchPlans(spec, c, req), b = SearchPlans(spec, c, req);
  ASSERT_EQ(a.top.size(), b.top.size());
  for (size_t i = 0; i < a.top.size(); ++i) {
    EXPECT_EQ(a.top[i].key, b.top[i].key);
    EXPECT_EQ(a.top[i].step_time_s, b.top[i].step_time_s);
  }
  EXPECT_EQ(a.rejected.size(), b.rejected.size());
}

// 405B parameters on 8 GPUs of 24 GB: 16 bytes x 405e9 / 8 is ~760 GB of model states per GPU
// without offload; no plan fits, and the answer says so with the smallest need found.
TEST(SearchTest, NothingFitsIsAnAnswer) {
  auto spec = model::FindModelPreset("llama3-405b");
  auto c = profiles::ParseClusterShorthand("8xRTX4090");
  SearchRequest req = SmallSpace(8, 2048);
  SearchResult r = SearchPlans(spec, c, req);
  EXPECT_TRUE(r.top.empty());
  EXPECT_GT(r.smallest_required, c.gpu.usable_memory);
  EXPECT_NE(r.advice_if_none.find("No plan fits"), std::string::npos);
  EXPECT_FALSE(r.rejected.empty());
}

TEST(SearchTest, HybridGroupsStayInsideNodesOrSpanWholeNodes) {
  auto spec = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("4x8xH100");
  SearchRequest req = SmallSpace(32, 128);
  req.space.strategies = {model::ShardingStrategy::kHybridShard};
  for (const auto& p : EnumeratePlans(spec, c, req)) {
    int g = p.shard_group_size;
    EXPECT_TRUE(8 % g == 0 || g % 8 == 0) << g;
    EXPECT_EQ(32 % g, 0);
    EXPECT_LT(g, 32);
  }
}

TEST(SearchTest, CpuRanksAreNotOfferedOffload) {
  auto spec = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("cpu:4");
  SearchRequest req = SmallSpace(8, 64);
  for (const auto& p : EnumeratePlans(spec, c, req)) EXPECT_EQ(p.offload, model::Offload::kNone);
}

// A LoRA base plan passes through the search: every plan keeps its adapters, and the memory
// lower bound counts 16 bytes only for trainable elements (4 for frozen ones), so LoRA on a model
// whose full fine-tune cannot fit without offload (llama3-70b: 16 x 70.6 B / 8 = 141 GB per
// rank) still finds plans without offload.
TEST(SearchTest, LoraBasePlanPassesThroughAndFitsWhereFullFineTuneCannot) {
  auto spec = model::FindModelPreset("llama3-70b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(8, 2048);
  req.space.strategies = {model::ShardingStrategy::kFullShard};
  req.space.checkpointing = {model::Checkpointing::kFull};
  req.space.offloads = {model::Offload::kNone};
  req.space.backward_prefetch = {model::BackwardPrefetch::kPre};
  req.space.micro_batches = {1};
  EXPECT_TRUE(SearchPlans(spec, c, req).top.empty());
  req.base.lora.rank = 16;
  req.base.lora.targets = {"q_proj", "v_proj"};
  req.base.frozen_prefixes = {"model.embed_tokens"};
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(r.top.front().plan.lora.rank, 16);
  EXPECT_EQ(r.top.front().plan.frozen_prefixes, req.base.frozen_prefixes);
  EXPECT_EQ(r.top.front().plan.offload, model::Offload::kNone);
}

}  // namespace
}  // namespace shardtune::plan
