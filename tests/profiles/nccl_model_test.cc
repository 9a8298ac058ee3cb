// Tests for NCCL's model (profiles/nccl_model.h). Expected figures are NCCL's own rules, written
// out here with the constant each uses (NVIDIA/nccl 2.30.7 src/graph/search.cc and tuning.cc;
// profiles/nccl_model_notes.md): never today's output.
#include "profiles/nccl_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "model/errors.h"

namespace shardtune::profiles {
namespace {

std::vector<int> Iota(int n, int first = 0, int stride = 1) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i * stride);
  return v;
}

// NCCL's figures for an H100 node (topo.h:22, topo.cc:554/657/418).
constexpr double kH100Nvlink = 18 * 20.6;  // 370.8
constexpr double kGen5 = 48.0;
constexpr double kTreeRatio = 0.5;          // tuning.cc:380
constexpr double kPerChTreeN2Hopper = 41.4;  // perChMaxTreeBws Hopper N2
constexpr double kPerChTreeN2Ampere = 23.6;  // perChMaxTreeBws Ampere N2
constexpr double kPerChNvlsTreeN2 = 57.7, kPerChNvlsTreeN4 = 45.5;
constexpr double kNvlsEff = 0.85;

// nccl-tests busbw for an algorithm bandwidth (doc/PERFORMANCE.md).
double ArBus(double alg, int n) { return alg * 2.0 * (n - 1) / n; }

NcclComm CommOf(const char* cluster, const std::vector<int>& ranks) {
  const ClusterSpec c = ParseClusterShorthand(cluster);
  EXPECT_TRUE(NcclModelApplies(c, ranks));
  return NcclComm(NcclShapeOf(c, ranks));
}

const Bytes kLarge = Bytes::Of(int64_t{16} << 30);

TEST(NcclModelTest, ShapeOfADgxH100PairIsEightRailsOfOneGpuAndOneNic) {
  const NcclCommShape s = NcclShapeOf(ParseClusterShorthand("2x8xH100"), Iota(16));
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.ranks_per_node, 8);
  EXPECT_EQ(s.compute_capability, 90);
  EXPECT_NEAR(s.nvlink_GBps, kH100Nvlink, 1e-9);
  EXPECT_DOUBLE_EQ(s.pcie_GBps, kGen5);
  EXPECT_DOUBLE_EQ(s.nic_GBps, 400.0 / 8);  // Gb/s / 8
  ASSERT_EQ(s.switches.size(), 8u);
  for (const auto& sw : s.switches) {
    EXPECT_EQ(sw.gpus, 1);
    EXPECT_EQ(sw.nics, 1);
  }
  // One NIC per node sits beside GPU 0 alone; a replica group (one GPU per node) sees its own rail.
  const NcclCommShape one = NcclShapeOf(ParseClusterShorthand("2x8xH100-roce400/node"), Iota(16));
  ASSERT_EQ(one.switches.size(), 1u);
  EXPECT_EQ(one.switches[0].gpus, 1);
  const NcclCommShape rail = NcclShapeOf(ParseClusterShorthand("2x8xH100"), {3, 11});
  EXPECT_EQ(rail.ranks_per_node, 1);
  EXPECT_EQ(rail.switches[3].gpus, 1);
  EXPECT_EQ(rail.switches[0].gpus, 0);
}

// GB200 NVL72: NCCL's MNNVL fuses a rack's clique into one node (src/graph/topo.cc:1887), so a
// rack is ppn 72 on NVLink (18 links x 40.1 GB/s, SM100_NVLINK_BW in topo.h) with NVSwitch, and
// two racks are two nodes of 72 rails. Eight GPUs on two trays of one rack never touch a NIC:
// the same shape as eight GPUs of one node, several times what two 4-GPU hosts get over IB,
// whose ring all-gather is bounded by the node's 4 NICs of 50 GB/s (each byte leaves a node
// once per ring: busbw <= 4 x 50).
TEST(NcclModelTest, Nvl72RackIsOneNodeOfSeventyTwoOnNvlink) {
  const NcclCommShape two = NcclShapeOf(ParseClusterShorthand("2xgb200-nvl72"), Iota(144));
  EXPECT_EQ(two.nodes, 2);
  EXPECT_EQ(two.ranks_per_node, 72);
  EXPECT_EQ(two.compute_capability, 100);
  EXPECT_NEAR(two.nvlink_GBps, 18 * 40.1, 1e-9);
  EXPECT_TRUE(two.nvswitch);
  ASSERT_EQ(two.switches.size(), 72u);
  for (const auto& sw : two.switches) {
    EXPECT_EQ(sw.gpus, 1);
    EXPECT_EQ(sw.nics, 1);
  }
  const NcclCommShape trays = NcclShapeOf(ParseClusterShorthand("gb200-nvl72"), Iota(8));
  EXPECT_EQ(trays.nodes, 1);
  EXPECT_EQ(trays.ranks_per_node, 8);
  EXPECT_TRUE(trays.switches.empty());
  const NcclComm rack = CommOf("gb200-nvl72", Iota(8));
  const NcclComm ib = CommOf("2x4xGB200-ib400", Iota(8));
  const double rack_bus = rack.Cost(Collective::kAllGather, kLarge).bus_bandwidth.count() / 1e9;
  const double ib_bus = ib.Cost(Collective::kAllGather, kLarge).bus_bandwidth.count() / 1e9;
  EXPECT_LE(ib_bus, 4 * 50.0 + 1e-6);
  EXPECT_GT(rack_bus, 2 * 4 * 50.0);
  EXPECT_DOUBLE_EQ(rack_bus, CommOf("8xGB200", Iota(8)).Cost(Collective::kAllGather, kLarge).bus_bandwidth.count() / 1e9);
}

TEST(NcclModelTest, SingleH100NodeRingIsSixChannelsAtSixtyDoubled) {
  // sm90SpeedArrayIntra starts at 60: floor(370.8 / 60) = 6 channels (360); 50, 40, 30 give
  // 350, 360, 360, none strictly better; DupChannels (60 >= 50) doubles to 12 x 30.
  const NcclGraphs g = SearchNcclGraphs(NcclShapeOf(ParseClusterShorthand("8xH100"), Iota(8)));
  EXPECT_EQ(g.ring.channels, 12);
  EXPECT_DOUBLE_EQ(g.ring.bw_intra_GBps, 30.0);
  // NVLS: 8 heads; 9 x bwIntra <= 370.8 gives 40 (50 would need 450); pass 2 lifts bwInter to 60.
  EXPECT_EQ(g.nvls.channels, 8);
  EXPECT_DOUBLE_EQ(g.nvls.bw_intra_GBps, 40.0);
  EXPECT_DOUBLE_EQ(g.nvls.bw_inter_GBps, 60.0);
}

TEST(NcclModelTest, SingleH100NodeAllReduceUsesNvlsAndAllGatherTheRing) {
  const NcclComm c = CommOf("8xH100", Iota(8));
  const NcclCollectiveCost ar = c.Cost(Collective::kAllReduce, kLarge);
  EXPECT_EQ(ar.algo, NcclAlgo::kNvls);
  // busBw = heads x min(40 x .85 x 7/8 x 2, 60) = 476; alg = bus x n / (2(n-1)).
  const double nvls_bus = 8 * std::min(40 * kNvlsEff * 7 / 8 * 2, 60.0);
  EXPECT_NEAR(ar.bus_bandwidth.count() / 1e9, nvls_bus, 1e-6);
  const NcclCollectiveCost ag = c.Cost(Collective::kAllGather, kLarge);
  EXPECT_EQ(ag.algo, NcclAlgo::kRing);
  EXPECT_EQ(ag.proto, NcclProto::kSimple);
  EXPECT_NEAR(ag.bus_bandwidth.count() / 1e9, 12 * 30.0, 1e-6);  // the ring's nCh x bw
  // NVLS all-gather would give 8 x 40 x .85 x 7/8 x 7/8 = 208 alg (182 bus): the ring's wins.
  EXPECT_EQ(c.Cost(Collective::kReduceScatter, kLarge).algo, NcclAlgo::kRing);
}

TEST(NcclModelTest, WithoutNvlsAllReduceInsideANodeIsTheRing) {
  // A cluster file's "nvls": false (NCCL_NVLS_ENABLE=0): no NVLS graph, so the 8 GPUs all-reduce
  // over the ring's 12 x 30 (published: 367.2 GB/s with NVLS off against 480 with it, on H200).
  ClusterSpec c = ParseClusterShorthand("8xH100");
  c.nvls = false;
  const NcclComm comm(NcclShapeOf(c, Iota(8)));
  EXPECT_EQ(comm.graphs().nvls.channels, 0);
  const NcclCollectiveCost ar = comm.Cost(Collective::kAllReduce, kLarge);
  EXPECT_EQ(ar.algo, NcclAlgo::kRing);
  EXPECT_NEAR(ar.bus_bandwidth.count() / 1e9, 12 * 30.0, 1e-6);
}

TEST(NcclModelTest, SmallMessagesTakeTheLowLatencyProtocol) {
  const NcclComm c = CommOf("8xH100", Iota(8));
  // 64 KiB all-reduce: ring/LL costs 6.6 + 14 x 0.6 = 15 us of latency; NVLS 25 us; Simple 8.4 +
  // 14 x 3.4 = 56 us.
  const NcclCollectiveCost small = c.Cost(Collective::kAllReduce, Bytes::Of(64 << 10));
  EXPECT_EQ(small.algo, NcclAlgo::kRing);
  EXPECT_EQ(small.proto, NcclProto::kLL);
  EXPECT_NEAR(small.latency.count(), (6.6 + 14 * 0.6) * 1e-6, 1e-12);
  // The estimate is latency + S / algBw, in NCCL's units (us, GB/s).
  EXPECT_NEAR(small.time.count(), small.latency.count() + (64 << 10) / (small.alg_bw_GBps * 1e9), 1e-12);
}

TEST(NcclModelTest, EightRailNodesCarryEightChannelsOfFortyEight) {
  // 400 Gb/s = 50 GB/s per NIC behind a Gen5 switch: path min(48, 50) = 48, one channel per NIC;
  // NVLink carries 8 x 48 x 7/8 = 336 <= 370.8; 8 x 48 = 384 >= totalBw, and DupChannels skips
  // (Hopper, bw < 50, more than 4 channels).
  const NcclComm c = CommOf("2x8xH100-ib400", Iota(16));
  EXPECT_EQ(c.graphs().ring.channels, 8);
  EXPECT_DOUBLE_EQ(c.graphs().ring.bw_inter_GBps, 48.0);
  const NcclCollectiveCost ag = c.Cost(Collective::kAllGather, kLarge);
  EXPECT_EQ(ag.algo, NcclAlgo::kRing);
  EXPECT_NEAR(ag.bus_bandwidth.count() / 1e9, 8 * 48.0, 1e-6);
  // Two nodes: NVLSTree = 8 x min(40 x .85 x 7/8 x 2, 48 x 2, 57.7) = 461.6 beats the ring.
  const NcclCollectiveCost ar = c.Cost(Collective::kAllReduce, kLarge);
  EXPECT_EQ(ar.algo, NcclAlgo::kNvlsTree);
  EXPECT_NEAR(ar.bus_bandwidth.count() / 1e9, 8 * std::min({40 * kNvlsEff * 7 / 8 * 2, 96.0, kPerChNvlsTreeN2}), 1e-6);
  // Four nodes: NVLSTree drops to 8 x min(59.5, 48, 45.5) = 364 < the ring's 384.
  const NcclComm four = CommOf("4x8xH100-ib400", Iota(32));
  const NcclCollectiveCost ar4 = four.Cost(Collective::kAllReduce, kLarge);
  EXPECT_EQ(ar4.algo, NcclAlgo::kRing);
  EXPECT_NEAR(ar4.bus_bandwidth.count() / 1e9, 384.0, 1e-6);
  EXPECT_LT(8 * std::min({40 * kNvlsEff * 7 / 8 * 2, 48.0, kPerChNvlsTreeN4}), 384.0);
}

TEST(NcclModelTest, OneNicPerNodeIsOneNicWorthAndTreeWinsOnTwoNodes) {
  // One 400G NIC per node: one channel at 48 (DupChannels -> 2 x 24), so the ring is 48 GB/s
  // against the rail pair's 384: an eighth.
  const NcclComm c = CommOf("2x8xH100-roce400/node", Iota(16));
  EXPECT_EQ(c.graphs().ring.channels, 2);
  EXPECT_DOUBLE_EQ(c.graphs().ring.bw_inter_GBps, 24.0);
  EXPECT_NEAR(c.Cost(Collective::kAllGather, kLarge).bus_bandwidth.count() / 1e9, 48.0, 1e-6);
  // Tree: bwIntra lifted to 48 (2 x bwInter); bus = min(2 x 48 x .92, 2 x 41.4) x .85 (TREE
  // pattern: the NIC's switch holds one GPU), alg = bus / 2. No NVLS: one head.
  EXPECT_TRUE(c.graphs().tree.tree_pattern);
  EXPECT_DOUBLE_EQ(c.graphs().tree.bw_intra_GBps, 48.0);
  const NcclCollectiveCost ar = c.Cost(Collective::kAllReduce, kLarge);
  EXPECT_EQ(ar.algo, NcclAlgo::kTree);
  const double alg = std::min(2 * 48 * 0.92, 2 * kPerChTreeN2Hopper) * 0.85 * kTreeRatio;
  EXPECT_NEAR(ar.bus_bandwidth.count() / 1e9, ArBus(alg, 16), 1e-6);
  // The table: 8 rail NICs give several times one NIC.
  const NcclComm rail = CommOf("2x8xH100-ib400", Iota(16));
  EXPECT_GT(rail.Cost(Collective::kAllGather, kLarge).bus_bandwidth.count(),
            6 * c.Cost(Collective::kAllGather, kLarge).bus_bandwidth.count());
}

TEST(NcclModelTest, FourNicsPerNodeOfOneHundredGigabit) {
  // p4d-like layout on Hopper: 4 switches of {2 GPUs, 1 NIC} at 12.5 GB/s: speed 12, one channel
  // per NIC (48); balanced trees (two GPUs per NIC switch) with bwIntra lifted to 24.
  NcclCommShape s = NcclShapeOf(ParseClusterShorthand("2x8xH100-roce100"), Iota(16));
  s.switches.assign(4, {2, 1});
  s.nic_GBps = 12.5;
  const NcclComm c(s);
  EXPECT_EQ(c.graphs().ring.channels, 4);
  EXPECT_DOUBLE_EQ(c.graphs().ring.bw_inter_GBps, 12.0);
  EXPECT_FALSE(c.graphs().tree.tree_pattern);
  EXPECT_DOUBLE_EQ(c.graphs().tree.bw_intra_GBps, 24.0);
  const NcclCollectiveCost ar = c.Cost(Collective::kAllReduce, kLarge);
  EXPECT_EQ(ar.algo, NcclAlgo::kTree);
  EXPECT_NEAR(ar.bus_bandwidth.count() / 1e9, ArBus(std::min(4 * 24 * 0.92, 4 * kPerChTreeN2Hopper) * kTreeRatio, 16), 1e-6);
}

TEST(NcclModelTest, FourNicsPerGpuAreBoundByTheSearchsChannelCap) {
  // 32 x 100 Gb/s cards (4 per GPU switch) seen separately: speed 12, 4 channels per GPU = 32;
  // NVLink admits floor(370.8 / (12 x 7/8)) = 35, the search at most 32; 32 x 12 = 384.
  ClusterSpec c = ParseClusterShorthand("2x8xH100-roce100");
  c.nics_per_node = 32;
  const NcclCommShape s = NcclShapeOf(c, Iota(16));
  ASSERT_EQ(s.switches.size(), 8u);
  EXPECT_EQ(s.switches[5].nics, 4);
  EXPECT_EQ(s.switches[5].gpus, 1);
  const NcclGraphs g = SearchNcclGraphs(s);
  EXPECT_EQ(g.ring.channels, 32);
  EXPECT_DOUBLE_EQ(g.ring.bw_inter_GBps, 12.0);
}

TEST(NcclModelTest, DgxA100RingAndTreeOnTwoNodes) {
  // A100: 12 NVLinks x 20 = 240; Gen4 = 24; 200 Gb/s = 25: speed 24 (speedArrayInter), 8 rails,
  // no DupChannels (24 < 25): ring 192. Tree: bwIntra lifted to 30 (48 would need 8 x 48 x 7/8 =
  // 336 > 240), bus = min(8 x 30 x .92, 8 x 23.6) = 188.8, alg 94.4: the ring wins.
  const NcclComm c = CommOf("2x8xA100-ib200", Iota(16));
  EXPECT_EQ(c.graphs().ring.channels, 8);
  EXPECT_DOUBLE_EQ(c.graphs().ring.bw_inter_GBps, 24.0);
  EXPECT_DOUBLE_EQ(c.graphs().tree.bw_intra_GBps, 30.0);
  EXPECT_EQ(c.graphs().nvls.channels, 0);  // NVLS needs Hopper
  const NcclCollectiveCost ar = c.Cost(Collective::kAllReduce, kLarge);
  EXPECT_EQ(ar.algo, NcclAlgo::kRing);
  EXPECT_NEAR(ar.bus_bandwidth.count() / 1e9, 192.0, 1e-6);
  EXPECT_LT(ArBus(std::min(8 * 30 * 0.92, 8 * kPerChTreeN2Ampere) * kTreeRatio, 16), 192.0);
  // One node: floor(240 / 40) = 6 channels reach totalBw; DupChannels (A100 is not > 80) gives 12 x 20.
  const NcclGraphs one = SearchNcclGraphs(NcclShapeOf(ParseClusterShorthand("8xA100"), Iota(8)));
  EXPECT_EQ(one.ring.channels, 12);
  EXPECT_DOUBLE_EQ(one.ring.bw_intra_GBps, 20.0);
}

TEST(NcclModelTest, OneGpuPerNodeUsesItsOwnRail) {
  // An HSDP replica group: GPU 3 of each node. Its PCIe link carries every channel in and out:
  // one at 48, doubled to 2 x 24 = 48.
  const NcclComm c = CommOf("4x8xH100", Iota(4, 3, 8));
  EXPECT_EQ(c.shape().ranks_per_node, 1);
  EXPECT_NEAR(c.graphs().ring.channels * c.graphs().ring.bw_inter_GBps, 48.0, 1e-9);
  EXPECT_EQ(c.graphs().nvls.channels, 0);
  EXPECT_NEAR(c.Cost(Collective::kAllReduce, kLarge).bus_bandwidth.count() / 1e9, 48.0, 1e-6);
}

TEST(NcclModelTest, RingLatencyGrowsWithStepsAndNetworkHops) {
  // tuning.cc:402-412: Simple ring all-gather over 2 nodes x 8: 8.4 + 14 x max(3.4, 3 x 1.0) +
  // 1 x 14.0 us.
  const NcclComm c = CommOf("2x8xH100", Iota(16));
  const NcclCollectiveCost ag = c.Cost(Collective::kAllGather, kLarge);
  ASSERT_EQ(ag.proto, NcclProto::kSimple);
  EXPECT_NEAR(ag.latency.count(), (8.4 + 14 * 3.4 + 14.0) * 1e-6, 1e-12);
}

TEST(NcclModelTest, TheNetPluginsLatencyIsAddedToEveryInterNodeStepTwiceForSimple) {
  // tuning.cc:387-391: interLat = hwLat[NET][algo][proto] + latencyInter, + latencyInter again
  // for Simple; a ring all-gather over N nodes has N - 1 inter-node steps (tuning.cc:411). The
  // 75 us is aws-ofi-nccl's figure for p5 (src/platform-aws.cpp), which the p5 preset carries.
  const ClusterSpec c = ParseClusterShorthand("4xp5");
  EXPECT_DOUBLE_EQ(c.net_latency.count(), 75e-6);
  const NcclCommShape with = NcclShapeOf(c, Iota(32));
  EXPECT_DOUBLE_EQ(with.net_latency_us, 75.0);
  NcclCommShape without = with;
  without.net_latency_us = 0;
  const int inter_steps = 4 - 1;
  // Large: Simple ring on both, so the latency differs by 3 x 2 x 75 us.
  const NcclCollectiveCost big_with = NcclComm(with).Cost(Collective::kAllGather, kLarge);
  const NcclCollectiveCost big_without = NcclComm(without).Cost(Collective::kAllGather, kLarge);
  ASSERT_EQ(big_with.algo, NcclAlgo::kRing);
  ASSERT_EQ(big_without.algo, NcclAlgo::kRing);
  ASSERT_EQ(big_with.proto, NcclProto::kSimple);
  ASSERT_EQ(big_without.proto, NcclProto::kSimple);
  EXPECT_NEAR(big_with.latency.count() - big_without.latency.count(), inter_steps * 2 * 75e-6, 1e-12);
  // The same ring with LL128 pays it once per step: 14 + 28 x max(1.9, 1) + 3 x (4.0 + 75) us.
  const Bytes mid = Bytes::Of(int64_t{64} << 20);
  const NcclCollectiveCost ll128 = NcclComm(with).Cost(Collective::kAllGather, mid);
  ASSERT_EQ(ll128.algo, NcclAlgo::kRing);
  ASSERT_EQ(ll128.proto, NcclProto::kLL128);
  EXPECT_NEAR(ll128.latency.count(), (14.0 + 28 * 1.9 + inter_steps * (4.0 + 75.0)) * 1e-6, 1e-12);
  // Inside one node there is no inter-node step, so nothing changes.
  const ClusterSpec one = ParseClusterShorthand("p5");
  NcclCommShape one_without = NcclShapeOf(one, Iota(8));
  one_without.net_latency_us = 0;
  EXPECT_DOUBLE_EQ(NcclComm(NcclShapeOf(one, Iota(8))).Cost(Collective::kAllGather, mid).time.count(),
                   NcclComm(one_without).Cost(Collective::kAllGather, mid).time.count());
  // NCCL's own InfiniBand transport reports none; p5en's plugin figure is 35 us.
  EXPECT_DOUBLE_EQ(ParseClusterShorthand("2xdgx-h100").net_latency.count(), 0.0);
  EXPECT_DOUBLE_EQ(ParseClusterShorthand("2x8xH100-ib400").net_latency.count(), 0.0);
  EXPECT_DOUBLE_EQ(ParseClusterShorthand("2xp5en").net_latency.count(), 35e-6);
  EXPECT_DOUBLE_EQ(ParseClusterShorthand("2xp4d").net_latency.count(), 75e-6);
}

TEST(NcclModelTest, AppliesToNvlinkGpusButNotPcieNodesOrCpuRanks) {
  EXPECT_FALSE(NcclModelApplies(ParseClusterShorthand("cpu:2"), {0, 1}));
  EXPECT_FALSE(NcclModelApplies(ParseClusterShorthand("4xL40S"), Iota(4)));
  // PCIe GPUs one per node across nodes: no intra-node hop, so NCCL's model applies.
  EXPECT_TRUE(NcclModelApplies(ParseClusterShorthand("2x4xL40S"), {0, 4}));
  // Uneven groups (3 ranks on one node, 1 on another) are left to the topology graph.
  EXPECT_FALSE(NcclModelApplies(ParseClusterShorthand("2x8xH100"), {5, 6, 7, 8}));
  EXPECT_FALSE(NcclModelApplies(ParseClusterShorthand("8xH100"), {0}));
}

TEST(NcclModelTest, OnlyCollectivesOfTheTuningModel) {
  const NcclComm c = CommOf("8xH100", Iota(8));
  EXPECT_THROW(c.Cost(Collective::kAllToAll, kLarge), InternalError);
  EXPECT_STREQ(ToString(NcclAlgo::kNvlsTree), "nvls_tree");
  EXPECT_STREQ(ToString(NcclProto::kLL128), "LL128");
}

}  // namespace
}  // namespace shardtune::profiles
