// Tests for CollNet (InfiniBand SHARP) and scaled reductions in NCCL's model
// (profiles/nccl_model.h). Expected figures are NCCL's rules written out here with the constants
// each uses (NVIDIA/nccl 2.30.7 src/graph/search.cc, tuning.cc, enqueue.cc), never today's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "model/errors.h"
#include "profiles/cluster.h"
#include "profiles/cluster_presets.h"
#include "profiles/nccl_model.h"

namespace shardtune::profiles {
namespace {

std::vector<int> Iota(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

NcclComm SharpComm(const char* shorthand, int ranks, bool ib_sharp = true, int nics_per_node = 0) {
  ClusterSpec c = ParseClusterShorthand(shorthand);
  c.ib_sharp = ib_sharp;
  if (nics_per_node > 0) c.nics_per_node = nics_per_node;
  return NcclComm(NcclShapeOf(c, Iota(ranks)));
}

const Bytes kLarge = Bytes::Of(int64_t{16} << 30);
constexpr double kNicPath = 48.0;   // min(Gen5 x16 48, 400 Gb/s / 8 = 50): sm90SpeedArrayInter[0]
constexpr double kHopperCollNetDirect = 0.85;  // tuning.cc:347 "if (minCompCap >= 90) busBw *= .85"
constexpr double kCollNetRatio = 0.5;          // tuning.cc:380: non-ring all-reduce bus to algorithm
double ArBus(double alg, int n) { return alg * 2.0 * (n - 1) / n; }

// 16 rail-optimised H100 nodes (8 x 400 Gb/s): CollNetDirect has one head per NIC with a GPU of
// its own (8); each head's NVLink carries bwIntra x (1 + 7/7) = 96 <= 370.8, so the NIC path's 48
// is the speed, and pass 2 cannot raise bwIntra past the array's top. CollNetChain is the tree
// search with the ring's 8 channels at 48.
TEST(NcclCollNetTest, IbSharpAddsCollNetGraphsOnTwoNodesOrMore) {
  const NcclComm c = SharpComm("16x8xH100-ib400", 128);
  EXPECT_EQ(c.graphs().collnet_direct.channels, 8);
  EXPECT_DOUBLE_EQ(c.graphs().collnet_direct.bw_intra_GBps, kNicPath);
  EXPECT_DOUBLE_EQ(c.graphs().collnet_direct.bw_inter_GBps, kNicPath);
  EXPECT_EQ(c.graphs().collnet_chain.channels, 8);
  EXPECT_DOUBLE_EQ(c.graphs().collnet_chain.bw_intra_GBps, kNicPath);
  // NCCL_COLLNET_ENABLE unset (the default): no CollNet graphs.
  const NcclComm off = SharpComm("16x8xH100-ib400", 128, /*ib_sharp=*/false);
  EXPECT_EQ(off.graphs().collnet_direct.channels, 0);
  EXPECT_EQ(off.graphs().collnet_chain.channels, 0);
  // One node is below NCCL_COLLNET_NODE_THRESHOLD (2): CollNet is turned off (init.cc:1468-1475).
  EXPECT_EQ(SharpComm("8xH100", 8).graphs().collnet_direct.channels, 0);
  EXPECT_FALSE(SharpComm("8xH100", 8).CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kCollNetChain,
                                              NcclProto::kSimple).has_value());
}

TEST(NcclCollNetTest, AllReduceBandwidthsAndLatenciesAreNcclsFormulas) {
  const NcclComm c = SharpComm("16x8xH100-ib400", 128);
  const int n = 128;
  // CollNetDirect: 8 heads x bwIntra 48, GPU/NIC ratio 8/8 = 1, x .85 on Hopper, x .5 to algbw;
  // latency 2 x (min(1, 7) x 3.7 + 7 x 0.4) + NET CollNetDirect Simple 31 (tuning.cc:418-421).
  const auto direct = c.CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kCollNetDirect, NcclProto::kSimple);
  ASSERT_TRUE(direct.has_value());
  const double direct_alg = 8 * kNicPath * kHopperCollNetDirect * kCollNetRatio;
  EXPECT_NEAR(direct->alg_bw_GBps, direct_alg, 1e-9);
  EXPECT_NEAR(direct->bus_bandwidth.count() / 1e9, ArBus(direct_alg, n), 1e-6);
  EXPECT_NEAR(direct->latency.count() * 1e6, 2 * (3.7 + 7 * 0.4) + 31, 1e-9);
  EXPECT_EQ(direct->channels, 8);
  // CollNetChain: 8 channels x bwIntra 48 x .5; latency 2 x 7 x 2.8 + 30 (tuning.cc:422-423).
  const auto chain = c.CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kCollNetChain, NcclProto::kSimple);
  ASSERT_TRUE(chain.has_value());
  EXPECT_NEAR(chain->alg_bw_GBps, 8 * kNicPath * kCollNetRatio, 1e-9);
  EXPECT_NEAR(chain->latency.count() * 1e6, 2 * 7 * 2.8 + 30, 1e-9);
  // CollNet runs Simple only (tuning.cc:338-339).
  EXPECT_FALSE(c.CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kCollNetChain, NcclProto::kLL128).has_value());
  // NVLS across nodes (NVLink SHARP inside, CollNet between): 8 heads at bwIntra 40 ((8+1) x 40 <=
  // 370.8) and bwInter raised to the NIC path's 48; 8 x min(40 x .85 x 7/8 x 2, 48) x n/(2(n-1));
  // latency NVLINK NVLS 25 + NET NVLS 18.
  const auto nvls = c.CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kNvls, NcclProto::kSimple);
  ASSERT_TRUE(nvls.has_value());
  const double nvls_bus = 8 * std::min(40 * 0.85 * 7 / 8 * 2, kNicPath);
  EXPECT_NEAR(nvls->alg_bw_GBps, nvls_bus * n / (2.0 * (n - 1)), 1e-9);
  EXPECT_NEAR(nvls->latency.count() * 1e6, 25 + 18, 1e-9);
  EXPECT_FALSE(SharpComm("16x8xH100-ib400", 128, false)
                   .CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kNvls, NcclProto::kSimple)
                   .has_value());
  // A sum (nccl-tests) over 16 GiB: NVLS ties the ring's bandwidth (8 x 48) at 43 us of latency
  // against the ring's 30 network steps, and beats CollNet's halved bandwidths.
  EXPECT_EQ(c.Cost(Collective::kAllReduce, kLarge).algo, NcclAlgo::kNvls);
}

// ncclAvg on bf16/fp32 runs as ncclDevPreMulSum (enqueue.cc hostToDevRedOp), which NVLink SHARP
// does not reduce (ncclNvlsSupported: sum and min/max only), so NVLS and NVLS tree leave the
// table for it; CollNet reduces it as a sum (ncclGetCollNetSupport translates it).
TEST(NcclCollNetTest, ScaledReductionsLeaveNvlsButKeepCollNet) {
  const NcclComm node = SharpComm("8xH100", 8, false);
  EXPECT_EQ(node.Cost(Collective::kAllReduce, kLarge).algo, NcclAlgo::kNvls);
  EXPECT_EQ(node.Cost(Collective::kAllReduce, kLarge, NcclReduceOp::kScaled).algo, NcclAlgo::kRing);
  EXPECT_FALSE(node.CostOf(Collective::kReduceScatter, kLarge, NcclAlgo::kNvls, NcclProto::kSimple,
                           NcclReduceOp::kScaled)
                   .has_value());
  // An all-gather reduces nothing: its NVLS entry stays.
  EXPECT_EQ(node.CostOf(Collective::kAllGather, kLarge, NcclAlgo::kNvls, NcclProto::kSimple, NcclReduceOp::kScaled)
                .has_value(),
            node.CostOf(Collective::kAllGather, kLarge, NcclAlgo::kNvls, NcclProto::kSimple).has_value());
  // Two DGX H100 without SHARP: a sum takes NVLS tree, a scaled sum does not.
  const NcclComm pair = SharpComm("2x8xH100-ib400", 16, false);
  EXPECT_EQ(pair.Cost(Collective::kAllReduce, kLarge).algo, NcclAlgo::kNvlsTree);
  EXPECT_NE(pair.Cost(Collective::kAllReduce, kLarge, NcclReduceOp::kScaled).algo, NcclAlgo::kNvlsTree);
  // With SHARP on 16 nodes, the scaled all-reduce of 1 GiB: CollNetChain (alg 192 GB/s, 69.2 us)
  // against the ring (alg 8 x 48 x 128/254, latency 8.4 + 224 x 3.4 + 30 x 14 us x 1.4 plateau).
  const NcclComm c = SharpComm("16x8xH100-ib400", 128);
  const Bytes gib = Bytes::Of(int64_t{1} << 30);
  const double chain_us = 69.2 + gib.count() / (1000.0 * 8 * kNicPath * kCollNetRatio);
  const double ring_us = (8.4 + 224 * 3.4 + 30 * 14.0) * 1.4 + gib.count() / (1000.0 * 8 * kNicPath * 128 / 254);
  ASSERT_LT(chain_us, ring_us);
  const NcclCollectiveCost scaled = c.Cost(Collective::kAllReduce, gib, NcclReduceOp::kScaled);
  EXPECT_EQ(scaled.algo, NcclAlgo::kCollNetChain);
  EXPECT_NEAR(scaled.time.count() * 1e6, chain_us, 1e-6);
}

// "AllGather/ReduceScatter requires 1:1 GPU:NIC" (tuning.cc:351-373): CollNetDirect all-gathers at
// ppn x min(bwIntra, .9 x bwInter), stored as they are, only with a head for every GPU.
TEST(NcclCollNetTest, AllGatherByCollNetNeedsAHeadForEveryGpu) {
  const NcclComm rails = SharpComm("16x8xH100-ib400", 128);
  const auto ag = rails.CostOf(Collective::kAllGather, kLarge, NcclAlgo::kCollNetDirect, NcclProto::kSimple);
  ASSERT_TRUE(ag.has_value());
  EXPECT_NEAR(ag->alg_bw_GBps, 8 * std::min(kNicPath, 0.9 * kNicPath), 1e-9);
  // Four NICs for eight A100s (one per GPU pair): 4 heads for 8 GPUs. All-gather by CollNet is
  // off; its all-reduce divides by the GPU/NIC ratio halfway to 1: 8/4 = 2 -> 1.5, no Hopper .85.
  const NcclComm pairs = SharpComm("16x8xA100-80G-ib200", 128, true, /*nics_per_node=*/4);
  ASSERT_EQ(pairs.shape().switches.size(), 4u);
  EXPECT_EQ(pairs.graphs().collnet_direct.channels, 4);
  EXPECT_FALSE(pairs.CostOf(Collective::kAllGather, kLarge, NcclAlgo::kCollNetDirect, NcclProto::kSimple).has_value());
  const auto ar = pairs.CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kCollNetDirect, NcclProto::kSimple);
  ASSERT_TRUE(ar.has_value());
  const NcclGraph& g = pairs.graphs().collnet_direct;
  EXPECT_NEAR(ar->alg_bw_GBps, g.channels * g.bw_intra_GBps / 1.5 * kCollNetRatio, 1e-9);
}

// CollNet runs on at most 8 GPUs per node (enqueue.cc:2000-2003): a GB200 NVL72 rack, one node of
// 72 for NCCL, gets none.
TEST(NcclCollNetTest, NoCollNetPastEightGpusPerNode) {
  NcclCommShape s = NcclShapeOf(ParseClusterShorthand("2xgb200-nvl72"), Iota(144));
  s.collnet = true;
  const NcclComm c(s);
  EXPECT_EQ(c.graphs().collnet_direct.channels, 0);
  EXPECT_EQ(c.graphs().collnet_chain.channels, 0);
  EXPECT_FALSE(c.CostOf(Collective::kAllReduce, kLarge, NcclAlgo::kNvls, NcclProto::kSimple).has_value());
}

TEST(NcclCollNetTest, IbSharpIsForInfiniBandFabricsAndIsDescribed) {
  ClusterSpec roce = ParseClusterShorthand("2x8xH100-roce400");
  roce.ib_sharp = true;
  const auto problems = roce.Problems("c.json:");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("c.json:/ib_sharp: expected false unless inter_node_link is an InfiniBand link"),
            std::string::npos)
      << problems[0];
  ClusterSpec ib = ParseClusterShorthand("2x8xH100-ib400");
  EXPECT_EQ(DescribeNics(ib).find("SHARP"), std::string::npos);
  ib.ib_sharp = true;
  EXPECT_TRUE(ib.Problems("c.json:").empty());
  EXPECT_NE(DescribeNics(ib).find("InfiniBand SHARP as NCCL's CollNet"), std::string::npos) << DescribeNics(ib);
}

}  // namespace
}  // namespace shardtune::profiles
