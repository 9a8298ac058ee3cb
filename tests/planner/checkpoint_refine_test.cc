// RefineBlockCheckpointing (planner/checkpoint_refine.h): after the search, a checkpointing plan
// narrowed to first:K, the fewest leading blocks that must rerun. Every expectation is checked
// against the estimate the list is judged on, not against today's answer.
#include "planner/checkpoint_refine.h"

#include <gtest/gtest.h>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"
#include "simulator/simulate.h"

namespace shardtune::planner {
namespace {

// Mixtral 8x7B on two 8 x H100 nodes, 64 x 4096: no plan fits without rerunning blocks, and
// full checkpointing reruns more of them than the memory needs.
SearchRequest MixtralRequest() {
  SearchRequest r;
  r.global_batch = 64;
  r.seq_len = 4096;
  r.top_k = 3;
  r.space.strategies = {model::ShardingStrategy::kFullShard};
  r.space.offloads = {model::Offload::kNone};
  r.space.forward_prefetch = {false};
  r.space.cp_sizes = {1};
  r.space.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kSelective,
                           model::Checkpointing::kFull, model::Checkpointing::kFirstK};
  return r;
}

sim::MemoryReport Replayed(const model::ModelSpec& spec, const profiles::ClusterSpec& c, const SearchRequest& req,
                           const model::Plan& p) {
  sim::MemoryOptions mo = req.options.memory;
  mo.skip_repeated_micro_batches = true;
  mo.host_estimate = false;
  return sim::EstimateMemoryWithProgram(spec, c, p, mo, false).report;
}

model::Plan With(model::Plan p, const std::string& ckpt) {
  model::ParseCheckpointingSpec(ckpt, "--checkpointing", &p);
  return p;
}

TEST(CheckpointRefineTest, MixtralRerunsOnlyTheLeadingBlocksItMust) {
  const auto spec = model::FindModelPreset("mixtral-8x7b");
  const auto c = profiles::ParseClusterShorthand("2x8xH100");
  const SearchRequest req = MixtralRequest();
  const SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  const model::Plan& best = r.top.front().plan;
  ASSERT_EQ(best.checkpointing, model::Checkpointing::kFirstK) << r.top.front().key;
  EXPECT_GE(r.refined_checkpointing, 1);
  const int k = best.checkpoint_first_k;
  ASSERT_GT(k, 0);
  ASSERT_LT(k, spec.num_layers);
  // K is the least that fits on the allocator replay the list is judged on.
  EXPECT_TRUE(Replayed(spec, c, req, best).fits);
  // (first:K or first:K+selective, whichever mix the refinement found faster).
  const std::string rest = best.checkpoint_rest_selective ? "+selective" : "";
  EXPECT_FALSE(Replayed(spec, c, req,
                        k == 1 ? With(best, best.checkpoint_rest_selective ? "selective" : "none")
                               : With(best, "first:" + std::to_string(k - 1) + rest))
                   .fits);
  // Faster than the same plan rerunning every block by more than the tie tolerance.
  sim::SimOptions so = req.options;
  so.with_timeline = false;
  const double full_s = sim::SimulateStep(spec, c, With(best, "full"), so).step_time.count();
  EXPECT_LT(r.top.front().step_time_s, full_s * (1.0 - kRankTolerance));
  // The bracketing's assumption: the replayed need never grows as more blocks rerun.
  int64_t previous = INT64_MAX;
  for (int kk = 1; kk <= spec.num_layers; kk += 5) {
    const int64_t need = Replayed(spec, c, req, With(best, "first:" + std::to_string(kk) + rest)).required.count();
    EXPECT_LE(need, previous) << "first:" << kk;
    previous = need;
  }
}

// A request whose checkpointing axis leaves first:K out (a format that cannot run it, as
// --export verl asks) gets no refined plan.
TEST(CheckpointRefineTest, NotRefinedWhenTheSpaceLeavesFirstKOut) {
  const auto spec = model::FindModelPreset("mixtral-8x7b");
  const auto c = profiles::ParseClusterShorthand("2x8xH100");
  SearchRequest req = MixtralRequest();
  req.space.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kFull};
  const SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(r.refined_checkpointing, 0);
  for (const Candidate& cand : r.top) EXPECT_NE(cand.plan.checkpointing, model::Checkpointing::kFirstK);
}

}  // namespace
}  // namespace shardtune::planner
