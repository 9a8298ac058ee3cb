// Tests for aws-ofi-nccl's region tuner (profiles/nccl_tuner_regions.h) and for how NCCL's model
// lets it choose (profiles/nccl_model.h). Expected regions are worked out here from the plugin's
// vertices (aws-ofi-nccl src/tuner/nccl_ofi_regions.cpp, commit 2daf7d3) in the log2 plane, and
// PAT's figures from NCCL's tuning rules (tuning.cc:215-223, :337, :429-433): never today's output.
#include "profiles/nccl_tuner_regions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "model/errors.h"
#include "profiles/nccl_model.h"

namespace shardtune::profiles {
namespace {

const auto kAll = [](TunerAlgo, TunerProto) { return true; };
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<int> Iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(AwsOfiRegionTunerTest, P5AllReduceOnFourNodesFollowsTheRegionsBoundaries) {
  // 32 ranks: log2 = 5. On that row the Tree/LL128 region ends on its edge (31457280, 16) ->
  // (37748736, 32), i.e. at 36 MiB; Ring/LL128 runs from there to its edge (37748736, 32) ->
  // ... (1610612736, 32) -> (2684354560, 64) of Ring/Simple, i.e. 1.5 GiB on the row.
  const AwsOfiRegionTuner t(NcclTuner::kAwsOfiP5, 32, 4);
  ASSERT_TRUE(t.active());
  auto at = [&](int64_t bytes) { return t.Choose(Collective::kAllReduce, bytes, kAll); };
  ASSERT_TRUE(at(16 * kMiB));
  EXPECT_EQ(at(16 * kMiB)->algo, TunerAlgo::kTree);
  EXPECT_EQ(at(16 * kMiB)->proto, TunerProto::kLL128);
  ASSERT_TRUE(at(64 * kMiB));
  EXPECT_EQ(at(64 * kMiB)->algo, TunerAlgo::kRing);
  EXPECT_EQ(at(64 * kMiB)->proto, TunerProto::kLL128);
  ASSERT_TRUE(at(8 * kGiB));
  EXPECT_EQ(at(8 * kGiB)->algo, TunerAlgo::kRing);
  EXPECT_EQ(at(8 * kGiB)->proto, TunerProto::kSimple);
  // The edge itself counts as inside (is_inside_region returns 0, which the plugin accepts):
  // exactly 37748736 bytes on 32 ranks is a vertex of Tree/LL128, listed first.
  ASSERT_TRUE(at(37748736));
  EXPECT_EQ(at(37748736)->algo, TunerAlgo::kTree);
  // The plugin has no p5 regions for all-gather or reduce-scatter at 8 GPUs per node.
  EXPECT_FALSE(t.Choose(Collective::kAllGather, 64 * kMiB, kAll));
  EXPECT_FALSE(t.Choose(Collective::kReduceScatter, 64 * kMiB, kAll));
}

TEST(AwsOfiRegionTunerTest, P5AtScaleLargeAllReducesGoToNvlsTreeAboveTheRingSimpleEdge) {
  // 8 GiB (log2 33): Ring/Simple's upper edge runs (8053063680, 160) -> (9663676416, 192) and on
  // (log2 slope ~1). At 128 ranks (7) the edge (2684354560, 64) -> (8053063680, 160) is at
  // log2 x = 31.32 + (7 - 6) / 1.32 x 1.58 = 32.5 < 33: Ring/Simple. At 256 ranks (8) the edge from
  // (9663676416, 192) climbs to x = 33.6 > 33: NVLS-tree/Simple's region.
  const AwsOfiRegionTuner sixteen(NcclTuner::kAwsOfiP5, 128, 16);
  const AwsOfiRegionTuner thirty_two(NcclTuner::kAwsOfiP5, 256, 32);
  auto a = sixteen.Choose(Collective::kAllReduce, 8 * kGiB, kAll);
  auto b = thirty_two.Choose(Collective::kAllReduce, 8 * kGiB, kAll);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->algo, TunerAlgo::kRing);
  EXPECT_EQ(a->proto, TunerProto::kSimple);
  EXPECT_EQ(b->algo, TunerAlgo::kNvlsTree);
  // A region whose entry NCCL disabled is skipped: without NVLS no other region holds the point,
  // and the choice is NCCL's own.
  auto no_nvls = thirty_two.Choose(Collective::kAllReduce, 8 * kGiB,
                                   [](TunerAlgo x, TunerProto) { return x != TunerAlgo::kNvlsTree; });
  EXPECT_FALSE(no_nvls);
}

TEST(AwsOfiRegionTunerTest, P6AllReduceOnFourNodes) {
  // p6-b200, 32 ranks (log2 5): Tree/LL up to its vertical edge at 393216 bytes; NVLS tree left of
  // the diagonal (kMaxSize, 16) -> (435159040, 32), i.e. below 415 MiB on the row (256 MiB lies
  // right of Ring/LL128's (133693440, 32) and Tree/LL128's (18350080, 32) vertices); Ring/Simple
  // right of it.
  const AwsOfiRegionTuner t(NcclTuner::kAwsOfiP6, 32, 4);
  auto at = [&](int64_t bytes) { return t.Choose(Collective::kAllReduce, bytes, kAll); };
  ASSERT_TRUE(at(64 * 1024) && at(256 * kMiB) && at(8 * kGiB));
  EXPECT_EQ(at(64 * 1024)->algo, TunerAlgo::kTree);
  EXPECT_EQ(at(64 * 1024)->proto, TunerProto::kLL);
  EXPECT_EQ(at(256 * kMiB)->algo, TunerAlgo::kNvlsTree);
  EXPECT_EQ(at(8 * kGiB)->algo, TunerAlgo::kRing);
  EXPECT_EQ(at(8 * kGiB)->proto, TunerProto::kSimple);
  // The preset carries the tuner and the platform's 35 us latency (aws-ofi-nccl "p5en/p6-b200").
  const ClusterSpec p6 = ParseClusterShorthand("4xp6-b200");
  EXPECT_EQ(p6.nccl_tuner, NcclTuner::kAwsOfiP6);
  EXPECT_DOUBLE_EQ(p6.net_latency.count(), 35e-6);
  EXPECT_EQ(p6.gpu.name, "B200-180G");
}

TEST(AwsOfiRegionTunerTest, TwoNodesOrFewerAndUncoveredLayoutsAreLeftToNccl) {
  // "Skip when two nodes or lesser because the regions are not well defined".
  const AwsOfiRegionTuner two(NcclTuner::kAwsOfiP5, 16, 2);
  EXPECT_FALSE(two.active());
  EXPECT_FALSE(two.Choose(Collective::kAllReduce, 64 * kMiB, kAll));
  // p5 has tables for 8, 2 and 1 GPU per node; 4 per node has none.
  EXPECT_FALSE(AwsOfiRegionTuner(NcclTuner::kAwsOfiP5, 16, 4).active());
  EXPECT_TRUE(AwsOfiRegionTuner(NcclTuner::kAwsOfiP5, 8, 4).active());
  // p5en: 8 and 1 per node; no tuner: nothing.
  EXPECT_FALSE(AwsOfiRegionTuner(NcclTuner::kAwsOfiP5en, 8, 4).active());
  EXPECT_TRUE(AwsOfiRegionTuner(NcclTuner::kAwsOfiP5en, 4, 4).active());
  EXPECT_FALSE(AwsOfiRegionTuner(NcclTuner::kNone, 32, 4).active());
}

TEST(AwsOfiRegionTunerTest, P5enOneGpuPerNodeGathersSmallSizesWithPat) {
  // p5en, one GPU per node: PAT/Simple's region is listed first and spans (0, 2) ... (1048576, 2)
  // -> (8388608, 8) -> (16777216, 16): 1 MiB on 4 ranks lies left of that edge; 1 GiB lies in
  // Ring/Simple's region (right of (4194304, 2) -> (50331648, 16)).
  const AwsOfiRegionTuner t(NcclTuner::kAwsOfiP5en, 4, 4);
  auto small = t.Choose(Collective::kAllGather, kMiB, kAll);
  auto large = t.Choose(Collective::kAllGather, kGiB, kAll);
  ASSERT_TRUE(small && large);
  EXPECT_EQ(small->algo, TunerAlgo::kPat);
  EXPECT_EQ(large->algo, TunerAlgo::kRing);
  EXPECT_EQ(large->proto, TunerProto::kSimple);
}

TEST(NcclModelTunerTest, ThePluginsRegionOverridesNcclsLeastTimeChoiceOnlyPastTwoNodes) {
  // 8 x p5 all-reduce at 8 GiB: NCCL's own model picks NVLS-tree (A6-8 in the nccl_busbw
  // bench); the plugin's Ring/Simple region holds the point (64 ranks: the edge (1610612736, 32)
  // -> (2684354560, 64) is at 2.5 GiB on the row).
  const ClusterSpec p5 = ParseClusterShorthand("8xp5");
  EXPECT_EQ(p5.nccl_tuner, NcclTuner::kAwsOfiP5);
  const NcclCommShape with = NcclShapeOf(p5, Iota(64));
  NcclCommShape without = with;
  without.tuner = NcclTuner::kNone;
  const Bytes size = Bytes::Of(8 * kGiB);
  const NcclCollectiveCost own = NcclComm(without).Cost(Collective::kAllReduce, size);
  const NcclCollectiveCost tuned = NcclComm(with).Cost(Collective::kAllReduce, size);
  EXPECT_EQ(own.algo, NcclAlgo::kNvlsTree);
  EXPECT_FALSE(own.by_tuner);
  EXPECT_EQ(tuned.algo, NcclAlgo::kRing);
  EXPECT_EQ(tuned.proto, NcclProto::kSimple);
  EXPECT_TRUE(tuned.by_tuner);
  // The time is still NCCL's estimate of the entry the plugin chose, so it is no faster than
  // NCCL's least-time pick.
  EXPECT_GE(tuned.time.count(), own.time.count());
  // Two nodes: the same comm shape leaves the choice to NCCL.
  const NcclCommShape two = NcclShapeOf(ParseClusterShorthand("2xp5"), Iota(16));
  EXPECT_EQ(two.tuner, NcclTuner::kAwsOfiP5);
  for (int64_t s = kMiB; s <= 8 * kGiB; s *= 4) {
    EXPECT_FALSE(NcclComm(two).Cost(Collective::kAllReduce, Bytes::Of(s)).by_tuner) << s;
  }
  // Clusters without a tuner plugin: none.
  EXPECT_EQ(ParseClusterShorthand("8xdgx-h100").nccl_tuner, NcclTuner::kNone);
  EXPECT_EQ(ParseClusterShorthand("8xp4d").nccl_tuner, NcclTuner::kNone);
  EXPECT_EQ(ParseClusterShorthand("8xp5en").nccl_tuner, NcclTuner::kAwsOfiP5en);
}

TEST(NcclModelTunerTest, PatGathersAndReduceScattersWithOneGpuPerNodeUnlessTheReductionIsScaled) {
  // Four nodes of one GPU on NCCL's own model. PAT's entry: Simple only, the tree graph's
  // channels x bandwidth x 0.75, stored as the algorithm bandwidth (no nRanks/nsteps ratio for
  // non-ring all-gathers), and latency 8.0 + log2(nodes) x interLat / 3.5 + nRanks x 2.8 us with
  // interLat the tree's network Simple latency (14 us, ppn 1) plus twice the plugin's.
  const ClusterSpec four = ParseClusterShorthand("4x1xH100-ib400");
  ASSERT_TRUE(NcclModelApplies(four, Iota(4)));
  const NcclCommShape sh = NcclShapeOf(four, Iota(4));
  ASSERT_EQ(sh.ranks_per_node, 1);
  const NcclComm comm(sh);
  const double pat_latency_us = 8.0 + 2 * 14.0 / 3.5 + 4 * 2.8;
  const double pat_alg_GBps = comm.graphs().tree.channels * comm.graphs().tree.bw_inter_GBps * 0.75;
  ASSERT_GT(pat_alg_GBps, 0);
  // Some size picks PAT (between the LL ring's latency edge and the Simple ring's bandwidth).
  int64_t pat_size = 0;
  for (int64_t s = 4096; s <= kGiB && pat_size == 0; s *= 2) {
    if (comm.Cost(Collective::kAllGather, Bytes::Of(s)).algo == NcclAlgo::kPat) pat_size = s;
  }
  ASSERT_GT(pat_size, 0) << "PAT never chosen on 4 x 1 GPU";
  const NcclCollectiveCost pat = comm.Cost(Collective::kAllGather, Bytes::Of(pat_size));
  EXPECT_EQ(pat.proto, NcclProto::kSimple);
  EXPECT_NEAR(pat.latency.count(), pat_latency_us * 1e-6, 1e-12);
  EXPECT_NEAR(pat.alg_bw_GBps, pat_alg_GBps, 1e-9);
  EXPECT_NEAR(pat.time.count(), (pat_latency_us + static_cast<double>(pat_size) / (1000.0 * pat_alg_GBps)) * 1e-6,
              1e-12);
  // A plain-sum reduce-scatter may run PAT; FSDP2's AVG (a scaled sum) may not.
  EXPECT_EQ(comm.Cost(Collective::kReduceScatter, Bytes::Of(pat_size), NcclReduceOp::kSum).algo, NcclAlgo::kPat);
  EXPECT_NE(comm.Cost(Collective::kReduceScatter, Bytes::Of(pat_size), NcclReduceOp::kScaled).algo, NcclAlgo::kPat);
  // Never for all-reduce, nor with two GPUs per node.
  for (int64_t s = 4096; s <= kGiB; s *= 2) {
    EXPECT_NE(comm.Cost(Collective::kAllReduce, Bytes::Of(s)).algo, NcclAlgo::kPat) << s;
  }
  const NcclCommShape two_per_node = NcclShapeOf(ParseClusterShorthand("4x2xH100-ib400"), Iota(8));
  ASSERT_EQ(two_per_node.ranks_per_node, 2);
  const NcclComm pairs(two_per_node);
  for (int64_t s = 4096; s <= kGiB; s *= 2) {
    EXPECT_NE(pairs.Cost(Collective::kAllGather, Bytes::Of(s)).algo, NcclAlgo::kPat) << s;
  }
}

}  // namespace
}  // namespace shardtune::profiles
