// Cost models against closed forms written here.
#include "simulator/cost_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "profiles/cluster.h"
#include "profiles/topology.h"

namespace shardtune::sim {
namespace {

// The link of one shard group of all `cluster`'s GPUs (ranks 0 to n-1) under constants `k`.
GroupLink WholeClusterLink(const std::string& cluster, const CostConstants& k) {
  auto c = profiles::ParseClusterShorthand(cluster);
  profiles::Topology topo(c);
  return DescribeGroup(topo, c, {topo.ShardGroup(c.world_size(), 0)}, k);
}

TEST(CostModelTest, ComputeTimeAddsTermsAtTheirEfficiencies) {
  auto c = profiles::ParseClusterShorthand("1xH100");
  CostConstants k;
  double mm = 1e15, attn = 2e14, bytes = 3e11;
  double peak = c.gpu.bf16_dense.count(), bw = c.gpu.memory_bandwidth.count();
  double expected = mm / (peak * k.matmul_efficiency) + attn / (peak * k.attention_efficiency) +
                    bytes / (bw * k.memory_efficiency);
  EXPECT_DOUBLE_EQ(ComputeTime(mm, attn, bytes, c.gpu, model::DType::kBf16, k).count(), expected);
  // GEMMs in fp32 without tensor cores (TRL's chunked NLL head) at the FP32 peak.
  const double fp32 = 4e13;
  EXPECT_DOUBLE_EQ(ComputeTime(mm, attn, bytes, c.gpu, model::DType::kBf16, k, fp32).count(),
                   expected + fp32 / (c.gpu.fp32.count() * kFp32GemmEfficiency));
}

// One node of 8 H100s: ring all-gather latency = baseLat 8.4 us + 7 steps x 3.4 us (NCCL
// tuning.cc, Simple), serialization = S (n-1)/n / (450 GB/s x NVLink efficiency).
// Inside an H100 node NCCL's search builds 12 ring channels of 30 GB/s (6 x 60 doubled; NVLink
// counted as 18 x 20.6 = 370.8 GB/s per GPU, nccl/src/graph/topo.h): a 1 GiB all-gather runs the
// Simple ring at busbw 360 GB/s with latency 8.4 + 7 x 3.4 us (tuning.cc base and hw latencies).
// The graph's ring bottleneck (450 GB/s x the NVLink efficiency) stays for all-to-alls.
TEST(CostModelTest, RingAllGatherInsideOneNode) {
  CostConstants k;
  GroupLink g = WholeClusterLink("8xH100", k);
  EXPECT_EQ(g.ranks, 8);
  EXPECT_EQ(g.nodes, 1);
  EXPECT_NEAR(g.bus_bandwidth.count(), 450e9 * k.nvlink_efficiency, 1);
  ASSERT_NE(g.nccl, nullptr);
  Bytes s = Bytes::Of(1 << 30);
  const double busbw = 12 * 30e9;
  double expected = 8.4e-6 + 7 * 3.4e-6 + static_cast<double>(s.count()) * 7 / 8 / busbw;
  EXPECT_NEAR(CollectiveTime(profiles::Collective::kAllGather, s, g).count(), expected, 1e-9);
  const CollectiveTerms t = CollectiveCost(profiles::Collective::kAllGather, s, g);
  ASSERT_TRUE(t.nccl.has_value());
  EXPECT_EQ(t.nccl->algo, profiles::NcclAlgo::kRing);
  EXPECT_EQ(t.nccl->proto, profiles::NcclProto::kSimple);
  // The all-to-all has no NCCL tuning row: the graph's bandwidth and ring latency.
  EXPECT_FALSE(CollectiveCost(profiles::Collective::kAllToAll, s, g).nccl.has_value());
}

// Two nodes of 8, one 400 Gb/s NIC per GPU: the graph's lone ring would leave each node by one
// NIC (50 GB/s); NCCL runs 8 channels of 48 GB/s, one per rail, and all-reduces by NVLS tree.
// The graph's latency model (for groups NCCL's does not describe): 2 of the ring's 15 steps are
// inter-node for all-gather; all-reduce takes the faster of ring (30 steps, 2 inter) and tree.
TEST(CostModelTest, TwoNodeGroupUsesNetworkAndTreeForAllReduce) {
  CostConstants k;
  GroupLink g = WholeClusterLink("2x8xH100-ib400", k);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_NEAR(g.bus_bandwidth.count(), 50e9 * k.network_efficiency, 1);
  double intra = 3.4e-6, inter = 14e-6;
  EXPECT_NEAR(CollectiveLatency(profiles::Collective::kAllGather, g).count(),
              8.4e-6 + 14 * intra + 1 * inter, 1e-12);
  double ring = 8.4e-6 + 28 * intra + 2 * inter;
  double tree = 8.4e-6 + 2 * (7 * intra + 1 * inter);
  EXPECT_NEAR(CollectiveLatency(profiles::Collective::kAllReduce, g).count(), std::min(ring, tree), 1e-12);
  const Bytes s = Bytes::GiB(4);
  const CollectiveTerms ag = CollectiveCost(profiles::Collective::kAllGather, s, g);
  EXPECT_NEAR(ag.bus_bandwidth.count(), 8 * 48e9, 1);
  EXPECT_EQ(CollectiveCost(profiles::Collective::kAllReduce, s, g).nccl->algo, profiles::NcclAlgo::kNvlsTree);
}

// HSDP replica groups (GPU j of every node) all-reduce at once. With a NIC per GPU each uses its
// own rail at full speed; with one NIC per node the eight share it (the graph's concurrent
// bottleneck), so each gets an eighth of NCCL's one-group figure.
TEST(CostModelTest, ConcurrentReplicaGroupsShareANodesNic) {
  CostConstants k;
  const Bytes s = Bytes::GiB(1);
  auto rail = profiles::ParseClusterShorthand("2x8xH100-ib400");
  profiles::Topology rt(rail);
  std::vector<std::vector<int>> rings;
  for (int j = 0; j < 8; ++j) rings.push_back(rt.ReplicaGroup(8, j));
  GroupLink alone = DescribeGroup(rt, rail, {rings[0]}, k);
  GroupLink together = DescribeGroup(rt, rail, rings, k);
  EXPECT_DOUBLE_EQ(together.concurrent_share, 1.0);
  EXPECT_NEAR(CollectiveCost(profiles::Collective::kAllReduce, s, together).bus_bandwidth.count(),
              CollectiveCost(profiles::Collective::kAllReduce, s, alone).bus_bandwidth.count(), 1);
  auto one = profiles::ParseClusterShorthand("2x8xH100-ib400/node");
  profiles::Topology ot(one);
  GroupLink shared = DescribeGroup(ot, one, rings, k);
  GroupLink lone = DescribeGroup(ot, one, {rings[0]}, k);
  EXPECT_DOUBLE_EQ(shared.concurrent_share, 1.0 / 8);
  EXPECT_NEAR(CollectiveCost(profiles::Collective::kAllReduce, s, shared).bus_bandwidth.count(),
              CollectiveCost(profiles::Collective::kAllReduce, s, lone).bus_bandwidth.count() / 8, 1);
}

// An all-to-all across nodes is point-to-point to every peer: a GPU's bytes for other nodes
// leave through its node's NICs (all GPUs at once, PXN balancing the rails), so its share is the
// node's NIC bandwidth / 8. Of S, (n - g)/n cross the network; bus bandwidth S (n-1)/n / time =
// per-GPU network x (n-1)/(n-g) (nccl-tests#130: "2x network bandwidth per GPU" on 2 nodes,
// falling to 1x). Inside one node there is no such term: the group's own bus bandwidth.
TEST(CostModelTest, AllToAllAcrossNodesIsThePerGpuNetworkShare) {
  CostConstants k;
  auto expected = [&](const profiles::ClusterSpec& c, int n, int g) {
    const double net = c.nics_per_node * c.nic_bandwidth.count() / c.gpus_per_node * k.network_efficiency;
    return net * (n - 1.0) / (n - g);
  };
  for (const char* name : {"2x8xH100-ib400", "4x8xH100-ib400", "2x8xH100-ib400/node", "2xp4d"}) {
    auto c = profiles::ParseClusterShorthand(name);
    profiles::Topology topo(c);
    const int n = c.world_size();
    std::vector<std::vector<int>> groups{topo.ShardGroup(n, 0)};
    GroupLink g = DescribeGroup(topo, c, groups, k);
    EXPECT_NEAR(g.AllToAllBandwidth().count(), expected(c, n, 8), 1e3) << name;
  }
  // Eight NICs per node against one of the same speed: eight times the bandwidth.
  const GroupLink rail = WholeClusterLink("2x8xH100-ib400", k);
  EXPECT_NEAR(rail.AllToAllBandwidth().count(),
              8 * WholeClusterLink("2x8xH100-ib400/node", k).AllToAllBandwidth().count(), 1e3);
  // On 2 nodes the bus bandwidth is 15/8 of a GPU's network share; on 4, 31/24.
  EXPECT_NEAR(rail.AllToAllBandwidth().count(), 50e9 * k.network_efficiency * 15 / 8, 1e3);
  // Inside a node: no all-to-all term, the group's bus bandwidth.
  GroupLink in = WholeClusterLink("8xH100", k);
  EXPECT_EQ(in.all_to_all_bus_bandwidth.count(), 0);
  EXPECT_EQ(in.AllToAllBandwidth().count(), in.bus_bandwidth.count());
}

// Faster NICs never make a collective slower, at any size, nor does the graph's bandwidth for
// a group NCCL's model does not describe (PCIe-only nodes).
TEST(CostModelTest, MoreBandwidthIsNeverSlower) {
  CostConstants k;
  const std::vector<std::string> nics = {"2x8xH100-roce100", "2x8xH100-roce200", "2x8xH100-roce400",
                                         "2x8xH100-roce800"};
  for (size_t i = 0; i + 1 < nics.size(); ++i) {
    GroupLink a = WholeClusterLink(nics[i], k);
    GroupLink b = WholeClusterLink(nics[i + 1], k);
    for (int64_t s : {int64_t{1} << 10, int64_t{1} << 20, int64_t{1} << 26, int64_t{1} << 30}) {
      for (auto coll : {profiles::Collective::kAllGather, profiles::Collective::kReduceScatter,
                        profiles::Collective::kAllReduce}) {
        EXPECT_LE(CollectiveTime(coll, Bytes::Of(s), b).count(), CollectiveTime(coll, Bytes::Of(s), a).count())
            << nics[i + 1] << " vs " << nics[i] << ", " << s << " bytes, " << profiles::ToString(coll);
      }
    }
  }
  CostConstants slow, fast;
  fast.pcie_efficiency = slow.pcie_efficiency * 1.1;
  GroupLink a = WholeClusterLink("4xL40S", slow);
  GroupLink b = WholeClusterLink("4xL40S", fast);
  ASSERT_EQ(a.nccl, nullptr);
  EXPECT_LT(CollectiveTime(profiles::Collective::kAllGather, Bytes::GiB(1), b).count(),
            CollectiveTime(profiles::Collective::kAllGather, Bytes::GiB(1), a).count());
}

TEST(CostModelTest, SingleRankCollectiveIsFree) {
  GroupLink g;
  EXPECT_EQ(CollectiveTime(profiles::Collective::kAllReduce, Bytes::GiB(1), g).count(), 0.0);
}

}  // namespace
}  // namespace shardtune::sim
