// Cost models against closed forms written here.
#include "simulator/cost_model.h"

#include <gtest/gtest.h>

#include "profiles/cluster.h"
#include "profiles/topology.h"

namespace shardtune::sim {
namespace {

TEST(CostModelTest, ComputeTimeAddsTermsAtTheirEfficiencies) {
  auto c = profiles::ParseClusterShorthand("1xH100");
  CostConstants k;
  double mm = 1e15, attn = 2e14, bytes = 3e11;
  double peak = c.gpu.bf16_dense.count(), bw = c.gpu.memory_bandwidth.count();
  double expected = mm / (peak * k.matmul_efficiency) + attn / (peak * k.attention_efficiency) +
                    bytes / (bw * k.memory_efficiency);
  EXPECT_DOUBLE_EQ(ComputeTime(mm, attn, bytes, c.gpu, model::DType::kBf16, k).count(), expected);
}

// One node of 8 H100s: ring all-gather latency = baseLat 8.4 us + 7 steps x 3.4 us (NCCL
// tuning.cc, Simple), serialization = S (n-1)/n / (450 GB/s x NVLink efficiency).
TEST(CostModelTest, RingAllGatherInsideOneNode) {
  auto c = profiles::ParseClusterShorthand("8xH100");
  profiles::Topology topo(c);
  CostConstants k;
  GroupLink g = DescribeGroup(topo, c, {topo.ShardGroup(8, 0)}, k);
  EXPECT_EQ(g.ranks, 8);
  EXPECT_EQ(g.nodes, 1);
  double busbw = 450e9 * k.nvlink_efficiency;
  EXPECT_NEAR(g.bus_bandwidth.count(), busbw, 1);
  Bytes s = Bytes::Of(1 << 30);
  double expected = 8.4e-6 + 7 * 3.4e-6 + static_cast<double>(s.count()) * 7 / 8 / busbw;
  EXPECT_NEAR(CollectiveTime(profiles::Collective::kAllGather, s, g).count(), expected, 1e-9);
}

// Two nodes of 8, one 400 Gb/s NIC per GPU: the ring crosses the network; 2 of its 15 steps are
// inter-node for all-gather; all-reduce takes the faster of ring (30 steps, 2 inter) and tree
// (2 x (7 intra + 1 inter)).
TEST(CostModelTest, TwoNodeGroupUsesNetworkAndTreeForAllReduce) {
  auto c = profiles::ParseClusterShorthand("2x8xH100-ib400");
  profiles::Topology topo(c);
  CostConstants k;
  GroupLink g = DescribeGroup(topo, c, {topo.ShardGroup(16, 0)}, k);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_NEAR(g.bus_bandwidth.count(), 50e9 * k.network_efficiency, 1);
  double intra = 3.4e-6, inter = 14e-6;
  EXPECT_NEAR(CollectiveLatency(profiles::Collective::kAllGather, g).count(),
              8.4e-6 + 14 * intra + 1 * inter, 1e-12);
  double ring = 8.4e-6 + 28 * intra + 2 * inter;
  double tree = 8.4e-6 + 2 * (7 * intra + 1 * inter);
  EXPECT_NEAR(CollectiveLatency(profiles::Collective::kAllReduce, g).count(), std::min(ring, tree), 1e-12);
}

TEST(CostModelTest, MoreBandwidthIsNeverSlower) {
  auto c = profiles::ParseClusterShorthand("8xH100");
  profiles::Topology topo(c);
  CostConstants slow, fast;
  fast.nvlink_efficiency = slow.nvlink_efficiency * 1.1;
  GroupLink a = DescribeGroup(topo, c, {topo.ShardGroup(8, 0)}, slow);
  GroupLink b = DescribeGroup(topo, c, {topo.ShardGroup(8, 0)}, fast);
  for (int64_t s : {int64_t{1} << 10, int64_t{1} << 20, int64_t{1} << 30}) {
    for (auto coll : {profiles::Collective::kAllGather, profiles::Collective::kReduceScatter,
                      profiles::Collective::kAllReduce}) {
      EXPECT_LE(CollectiveTime(coll, Bytes::Of(s), b).count(), CollectiveTime(coll, Bytes::Of(s), a).count());
    }
  }
}

TEST(CostModelTest, SingleRankCollectiveIsFree) {
  GroupLink g;
  EXPECT_EQ(CollectiveTime(profiles::Collective::kAllReduce, Bytes::GiB(1), g).count(), 0.0);
}

}  // namespace
}  // namespace shardtune::sim
