// Tests for the topology graph: ring bottlenecks inside a node (NVLink, PCIe) and across nodes
// (per-GPU and per-node NICs, rings sharing a NIC), latencies, NVLink domains, HSDP groups.
#include "profiles/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "model/errors.h"
#include "profiles/hardware.h"

namespace shardtune::profiles {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::vector<int> Iota(int n, int first = 0) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

double Bw(const char* link) { return FindLink(link, "test").bandwidth_per_direction.count(); }

TEST(TopologyTest, RingInsideADgxRunsAtPerGpuNvlinkBandwidth) {
  const Topology t(ParseClusterShorthand("8xH100"));
  EXPECT_EQ(t.world_size(), 8);
  // NVLink 4: 900 GB/s per GPU over both directions.
  EXPECT_DOUBLE_EQ(t.RingBottleneck(Iota(8)).count(), 900e9 / 2);
  EXPECT_DOUBLE_EQ(t.RingBottleneck({0, 5}).count(), 900e9 / 2);
}

TEST(TopologyTest, RingOverTwoNodesRunsAtNicBandwidth) {
  const Topology t(ParseClusterShorthand("2x8xH100-ib400"));
  // The ring leaves each node once per direction, through one 400 Gb/s NIC.
  EXPECT_DOUBLE_EQ(t.RingBottleneck(Iota(16)).count(), 400e9 / 8);
}

TEST(TopologyTest, SlowPerNodeNicBoundsTheRing) {
  const Topology t(ParseClusterShorthand("2x8xH100-ib200/node"));
  EXPECT_DOUBLE_EQ(t.RingBottleneck(Iota(16)).count(), 200e9 / 8);
}

TEST(TopologyTest, PerNodeNicFasterThanPcieLeavesTheCrossingGpusPcieAsBottleneck) {
  const Topology t(ParseClusterShorthand("12x8xH100-roce800/node"));
  EXPECT_DOUBLE_EQ(t.RingBottleneck(Iota(96)).count(), std::min(800e9 / 8, Bw("pcie5")));
}

TEST(TopologyTest, MoreNicsThanGpusSitFourBesideEachGpu) {
  // 32 cards of 100 Gb/s for 8 GPUs (AWS p5's EFA as the hardware has it): each GPU reaches 4 of
  // its own; the graph's lone ring leaves a node through one of them.
  ClusterSpec c = ParseClusterShorthand("2x8xH100-roce100");
  c.nics_per_node = 32;
  const Topology t(c);
  EXPECT_DOUBLE_EQ(t.RingBottleneck(Iota(16)).count(), 100e9 / 8);
  // Replica rings of GPU j use GPU j's cards: eight at once do not share any.
  std::vector<std::vector<int>> rings;
  for (int i = 0; i < 8; ++i) rings.push_back(t.ReplicaGroup(8, i));
  EXPECT_DOUBLE_EQ(t.ConcurrentRingBottleneck(rings).count(), 100e9 / 8);
}

TEST(TopologyTest, PerNodeNicIsSharedByConcurrentReplicaRings) {
  const Topology t(ParseClusterShorthand("2x8xH100-ib400/node"));
  std::vector<std::vector<int>> rings;
  for (int i = 0; i < 8; ++i) rings.push_back(t.ReplicaGroup(8, i));
  // One ring alone has the NIC; eight at once share each direction of it eight ways.
  EXPECT_DOUBLE_EQ(t.RingBottleneck(rings[0]).count(), 400e9 / 8);
  EXPECT_DOUBLE_EQ(t.ConcurrentRingBottleneck(rings).count(), 400e9 / 8 / 8);
}

TEST(TopologyTest, PerGpuNicsAreNotSharedByConcurrentReplicaRings) {
  const Topology t(ParseClusterShorthand("2x8xH100-ib400"));
  std::vector<std::vector<int>> rings;
  for (int i = 0; i < 8; ++i) rings.push_back(t.ReplicaGroup(8, i));
  EXPECT_DOUBLE_EQ(t.ConcurrentRingBottleneck(rings).count(), 400e9 / 8);
}

TEST(TopologyTest, RingThatCrossesNodesEveryHopSharesAPerNodeNic) {
  const Topology t(ParseClusterShorthand("2x8xH100-ib400/node"));
  std::vector<int> interleaved;
  for (int i = 0; i < 8; ++i) {
    interleaved.push_back(i);
    interleaved.push_back(8 + i);
  }
  // All 16 hops cross: 8 leave node 0 and 8 enter it through its single NIC.
  EXPECT_DOUBLE_EQ(t.RingBottleneck(interleaved).count(), 400e9 / 8 / 8);
}

TEST(TopologyTest, WorkstationRingRunsOverPcie) {
  const Topology t(ParseClusterShorthand("4xRTX4090"));
  EXPECT_DOUBLE_EQ(t.RingBottleneck(Iota(4)).count(), Bw("pcie4"));
}

TEST(TopologyTest, CpuRanksRingOverLoopback) {
  const Topology t(ParseClusterShorthand("cpu:4"));
  EXPECT_DOUBLE_EQ(t.RingBottleneck(Iota(4)).count(), Bw("loopback"));
}

TEST(TopologyTest, PathLatencyIsOneLinkClassLatencyPerHop) {
  const Topology t(ParseClusterShorthand("2x8xH100"));
  EXPECT_NEAR(t.PathLatency(0, 1).count(), FindLink("nvlink4", "t").latency.count(), 1e-15);
  EXPECT_NEAR(t.PathLatency(0, 8).count(), FindLink("ib-ndr", "t").latency.count(), 1e-15);
  EXPECT_NEAR(t.PathLatency(3, 12).count(), FindLink("ib-ndr", "t").latency.count(), 1e-15);
  EXPECT_EQ(t.PathLatency(5, 5).count(), 0.0);
  const Topology w(ParseClusterShorthand("4xRTX4090"));
  EXPECT_NEAR(w.PathLatency(0, 3).count(), FindLink("pcie4", "t").latency.count(), 1e-15);
}

TEST(TopologyTest, NvlinkDomainIsOneSxmNodeAndNeverPcie) {
  const Topology t(ParseClusterShorthand("2x8xH100"));
  EXPECT_TRUE(t.InOneNvlinkDomain(Iota(8)));
  EXPECT_TRUE(t.InOneNvlinkDomain(Iota(8, 8)));
  EXPECT_FALSE(t.InOneNvlinkDomain({7, 8}));
  EXPECT_FALSE(t.InOneNvlinkDomain(Iota(16)));
  EXPECT_TRUE(t.InOneNvlinkDomain({3}));
  const Topology w(ParseClusterShorthand("4xRTX4090"));
  EXPECT_FALSE(w.InOneNvlinkDomain({0, 1}));
}

TEST(TopologyTest, RanksAreLaidOutNodeMajor) {
  const Topology t(ParseClusterShorthand("4x8xA100"));
  EXPECT_EQ(t.NodeOf(0), 0);
  EXPECT_EQ(t.NodeOf(7), 0);
  EXPECT_EQ(t.NodeOf(8), 1);
  EXPECT_EQ(t.NodeOf(31), 3);
  EXPECT_EQ(t.NodesSpanned(Iota(8)), 1);
  EXPECT_EQ(t.NodesSpanned({0, 8, 16, 24}), 4);
  EXPECT_EQ(t.NodesSpanned(Iota(12, 4)), 2);
}

TEST(TopologyTest, ShardGroupsAreConsecutiveAndReplicaGroupsStrided) {
  const Topology t(ParseClusterShorthand("2x8xH100"));
  EXPECT_EQ(t.ShardGroup(8, 0), Iota(8));
  EXPECT_EQ(t.ShardGroup(8, 1), Iota(8, 8));
  EXPECT_THAT(t.ShardGroup(4, 3), ElementsAre(12, 13, 14, 15));
  EXPECT_THAT(t.ReplicaGroup(8, 3), ElementsAre(3, 11));
  EXPECT_THAT(t.ReplicaGroup(4, 1), ElementsAre(1, 5, 9, 13));
  // HSDP with shard groups of one node: shard rings on NVLink, replica rings across nodes.
  EXPECT_TRUE(t.InOneNvlinkDomain(t.ShardGroup(8, 1)));
  EXPECT_EQ(t.NodesSpanned(t.ReplicaGroup(8, 0)), 2);
}

TEST(TopologyTest, GroupSizeMustDivideTheWorld) {
  const Topology t(ParseClusterShorthand("2x8xH100"));
  EXPECT_THAT([&] { t.ShardGroup(3, 0); },
              ThrowsMessage<InputError>(HasSubstr("expected a divisor of the world size 16")));
  EXPECT_THAT([&] { t.ReplicaGroup(0, 0); },
              ThrowsMessage<InputError>(HasSubstr("expected a divisor of the world size 16")));
}

TEST(TopologyTest, MisuseIsABug) {
  const Topology t(ParseClusterShorthand("8xH100"));
  EXPECT_THROW(t.RingBottleneck({0}), InternalError);
  EXPECT_THROW(t.RingBottleneck({0, 1, 0}), InternalError);
  EXPECT_THROW(t.RingBottleneck({0, 8}), InternalError);
  EXPECT_THROW(t.NodeOf(-1), InternalError);
}

TEST(TopologyTest, RejectsAnInvalidClusterWithItsProblems) {
  ClusterSpec c = ParseClusterShorthand("2x8xH100");
  c.nics_per_node = 0;
  EXPECT_THAT([&] { Topology t(c); }, ThrowsMessage<InputError>(HasSubstr("/nics_per_node")));
}

TEST(TopologyTest, MovedTopologyAnswersTheSame) {
  Topology a(ParseClusterShorthand("2x8xH100-ib400"));
  const double before = a.RingBottleneck(Iota(16)).count();
  Topology b(std::move(a));
  EXPECT_DOUBLE_EQ(b.RingBottleneck(Iota(16)).count(), before);
}

}  // namespace
}  // namespace shardtune::profiles
