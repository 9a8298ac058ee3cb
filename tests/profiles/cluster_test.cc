// Tests for the --cluster shorthand [NODESx]GPUSxKIND[-FABRIC<Gbps>[/node]] and cpu:N, for
// ClusterSpec::Problems and for LoadCluster's choice between a file and a shorthand.
#include "profiles/cluster.h"
#include "profiles/cluster_presets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "model/errors.h"

namespace shardtune::profiles {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::StrEq;
using ::testing::ThrowsMessage;

constexpr char kGrammarPrefix[] = "--cluster: expected [NODESx]GPUSxKIND[-FABRIC<Gbps>[/node]]";

TEST(ClusterShorthandTest, GpusTimesKindIsOneNodeWithTheKindsLinks) {
  const ClusterSpec c = ParseClusterShorthand("8xH100");
  EXPECT_EQ(c.name, "8xH100");
  EXPECT_EQ(c.num_nodes, 1);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.world_size(), 8);
  EXPECT_FALSE(c.cpu_only);
  EXPECT_EQ(c.gpu.name, "H100-SXM-80G");
  EXPECT_EQ(c.intra_node.name, "nvlink4");
  EXPECT_TRUE(c.intra_node.nvlink_domain);
  EXPECT_EQ(c.nics_per_node, 0);  // one node: no inter-node NICs
  // DGX H100: 2 TB of host memory and 2 x 56 cores for its 8 GPUs.
  EXPECT_EQ(c.host_memory_per_node, Bytes::GiB(2048));
  EXPECT_EQ(c.cpu_cores_per_node, 2 * 56);
  EXPECT_TRUE(c.Problems("--cluster").empty());
}

TEST(ClusterShorthandTest, ConsumerCardsTalkOverPcieWithoutNvlink) {
  const ClusterSpec c = ParseClusterShorthand("4xRTX4090");
  EXPECT_EQ(c.gpu.name, "RTX4090");
  EXPECT_EQ(c.intra_node.name, "pcie4");
  EXPECT_EQ(c.intra_node.family, "pcie");
  EXPECT_FALSE(c.intra_node.nvlink_domain);
  EXPECT_EQ(c.host_memory_per_node, Bytes::GiB(128));  // the 4-GPU workstation assumption
}

TEST(ClusterShorthandTest, NodesTimesGpusUsesTheKindsFabricWithOneNicPerSxmGpu) {
  const ClusterSpec c = ParseClusterShorthand("2x8xA100-80G");
  EXPECT_EQ(c.num_nodes, 2);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.world_size(), 16);
  EXPECT_EQ(c.gpu.name, "A100-SXM-80G");
  EXPECT_EQ(c.intra_node.name, "nvlink3");
  EXPECT_EQ(c.inter_node.name, "ib-hdr");  // DGX A100: one HDR 200 Gb/s port per GPU
  EXPECT_EQ(c.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 200e9 / 8);
}

TEST(ClusterShorthandTest, PcieServersDefaultToOneNicPerNode) {
  const ClusterSpec c = ParseClusterShorthand("2x8xL40S");
  EXPECT_EQ(c.nics_per_node, 1);
  EXPECT_EQ(c.inter_node.name, "roce-200g");
}

TEST(ClusterShorthandTest, InfinibandRateGivesOneNicPerGpu) {
  const ClusterSpec c = ParseClusterShorthand("16x8xH100-ib400");
  EXPECT_EQ(c.num_nodes, 16);
  EXPECT_EQ(c.world_size(), 16 * 8);
  EXPECT_EQ(c.inter_node.name, "ib-ndr");
  EXPECT_EQ(c.nics_per_node, c.gpus_per_node);
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 400e9 / 8);
}

TEST(ClusterShorthandTest, SlashNodeGivesOneNicForTheWholeNode) {
  const ClusterSpec c = ParseClusterShorthand("12x8xH100-roce800/node");
  EXPECT_EQ(c.num_nodes, 12);
  EXPECT_EQ(c.nics_per_node, 1);
  EXPECT_EQ(c.inter_node.family, "roce");
  EXPECT_EQ(c.inter_node.name, "roce-800g");
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 800e9 / 8);
  EXPECT_DOUBLE_EQ(c.inter_node.bandwidth_per_direction.count(), 800e9 / 8);
}

TEST(ClusterShorthandTest, EthernetTakesAnyRate) {
  const ClusterSpec c = ParseClusterShorthand("2x4xRTX4090-eth25/node");
  EXPECT_EQ(c.inter_node.family, "eth");
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 25e9 / 8);
  EXPECT_EQ(c.nics_per_node, 1);
}

TEST(ClusterShorthandTest, FabricOnOneNodeLeavesNoNics) {
  const ClusterSpec c = ParseClusterShorthand("8xH100-ib400");
  EXPECT_EQ(c.nics_per_node, 0);
  EXPECT_EQ(c.inter_node.name, "ib-ndr");
}

TEST(ClusterShorthandTest, DashesInsideKindNamesAreNotFabrics) {
  EXPECT_EQ(ParseClusterShorthand("8xA100-40G").gpu.name, "A100-SXM-40G");
  EXPECT_EQ(ParseClusterShorthand("8xH100-SXM5").gpu.name, "H100-SXM-80G");
  EXPECT_EQ(ParseClusterShorthand("8xH100-SXM-80G").gpu.name, "H100-SXM-80G");
  const ClusterSpec c = ParseClusterShorthand("4x8xA100-80G-ib200");
  EXPECT_EQ(c.gpu.name, "A100-SXM-80G");
  EXPECT_EQ(c.inter_node.name, "ib-hdr");
}

TEST(ClusterShorthandTest, KindAndSeparatorAreCaseInsensitive) {
  EXPECT_EQ(ParseClusterShorthand("8Xh100").gpu.name, "H100-SXM-80G");
  EXPECT_EQ(ParseClusterShorthand("2x4090").gpu.name, "RTX4090");
  EXPECT_EQ(ParseClusterShorthand("2x8xH100-IB400").inter_node.name, "ib-ndr");
}

TEST(ClusterShorthandTest, CpuRanksShareOneHost) {
  const ClusterSpec c = ParseClusterShorthand("cpu:4");
  EXPECT_TRUE(c.cpu_only);
  EXPECT_EQ(c.num_nodes, 1);
  EXPECT_EQ(c.world_size(), 4);
  EXPECT_EQ(c.gpu.name, "CPU");
  EXPECT_EQ(c.intra_node.name, "loopback");
  EXPECT_EQ(c.gpu.usable_memory, c.host_memory_per_node / 4);  // each rank's share
  EXPECT_GE(c.cpu_cores_per_node, 1);  // this machine's cores (this_machine_test.cc)
  EXPECT_TRUE(c.Problems("--cluster").empty());
}

TEST(ClusterShorthandTest, UnknownKindGivesTheGrammarAndASuggestionOnOneLine) {
  EXPECT_THAT([] { ParseClusterShorthand("8xH1OO"); },
              ThrowsMessage<InputError>(
                  StrEq("--cluster: expected [NODESx]GPUSxKIND[-FABRIC<Gbps>[/node]] or [NODESx]PRESET "
                        "(e.g. 8xH100, 2x8xA100-80G, 4xp5; presets: shardtune gpus), got \"8xH1OO\"; unknown "
                        "GPU kind \"H1OO\" (did you mean \"H100\"?)")));
}

TEST(ClusterShorthandTest, UnknownKindWithoutSuggestionListsKnownKinds) {
  EXPECT_THAT([] { ParseClusterShorthand("8xQuantum"); },
              ThrowsMessage<InputError>(HasSubstr("known kinds: H100-SXM-80G")));
}

struct BadShorthand {
  const char* text;
  const char* reason;
};

class BadShorthandTest : public ::testing::TestWithParam<BadShorthand> {};

TEST_P(BadShorthandTest, ThrowsInputErrorWithGrammarAndReason) {
  const BadShorthand bad = GetParam();
  EXPECT_THAT([&] { ParseClusterShorthand(bad.text); },
              ThrowsMessage<InputError>(
                  AllOf(StartsWith(kGrammarPrefix), HasSubstr(bad.reason), Not(HasSubstr("\n")))));
}

INSTANTIATE_TEST_SUITE_P(
    Shorthands, BadShorthandTest,
    ::testing::Values(BadShorthand{"", "the value is empty"},
                      BadShorthand{"0xH100", "GPUS must be >= 1, got 0"},
                      BadShorthand{"0x8xH100", "NODES must be >= 1, got 0"},
                      BadShorthand{"8x", "the GPU KIND is missing"},
                      BadShorthand{"H100", "must start with a GPU count"},
                      BadShorthand{"-8xH100", "counts must be positive integers"},
                      BadShorthand{"2x-8xH100", "counts must be positive integers"},
                      BadShorthand{"99999999999xH100", "GPUS must be at most 1024"},
                      BadShorthand{"2x8xH100-opa400", "unknown fabric \"opa\" (expected ib, roce"},
                      BadShorthand{"2x8xH100-ib", "fabric \"ib\" needs its rate in Gb/s"},
                      BadShorthand{"2x8xH100-ib300", "no InfiniBand generation runs at 300 Gb/s"},
                      BadShorthand{"2x8xH100-roce0", "fabric rate must be in [1, "},
                      BadShorthand{"8xH100/node", "\"/node\" may only follow a fabric"},
                      BadShorthand{"8xH1OO-ib400", "unknown GPU kind \"H1OO\""},
                      BadShorthand{"2x8xp5", "preset \"p5\" fixes its GPUs per node; write NODESxp5"},
                      BadShorthand{"0xdgx-h100", "NODES must be >= 1, got 0"}));

TEST(ClusterShorthandTest, BadCpuCountNamesTheCpuForm) {
  for (const char* text : {"cpu:0", "cpu:", "cpu:x", "cpu:-2"}) {
    EXPECT_THAT([&] { ParseClusterShorthand(text); },
                ThrowsMessage<InputError>(HasSubstr("--cluster: expected cpu:N with N in [1, ")))
        << text;
  }
}

TEST(ClusterPresetTest, NodesTimesPresetFixesGpusNicsAndHost) {
  const ClusterSpec c = ParseClusterShorthand("4xdgx-h100");
  EXPECT_EQ(c.num_nodes, 4);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.gpu.name, "H100-SXM-80G");
  EXPECT_EQ(c.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 400e9 / 8);
  EXPECT_EQ(c.inter_node.family, "ib");
  EXPECT_EQ(c.host_memory_per_node.count(), Bytes::GiB(2048).count());
  // p4d: 4 EFA cards of 100 Gb/s for 8 GPUs; aliases and case do not matter; one node has no NICs.
  const ClusterSpec p4d = ParseClusterShorthand("2xP4D.24xlarge");
  EXPECT_EQ(p4d.gpu.name, "A100-SXM-40G");
  EXPECT_EQ(p4d.nics_per_node, 4);
  EXPECT_DOUBLE_EQ(p4d.nic_bandwidth.count(), 100e9 / 8);
  EXPECT_EQ(ParseClusterShorthand("a3-mega").nics_per_node, 0);
  EXPECT_THAT(DescribeNics(p4d), HasSubstr("4 x 100 Gb/s"));
  EXPECT_THAT(DescribeNics(p4d), HasSubstr("one per 2 GPUs"));
  EXPECT_EQ(DescribeNics(ParseClusterShorthand("8xH100")), "");
  EXPECT_THAT(DescribeNics(p4d), HasSubstr("; the net plugin reports 75 us to NCCL)"));
  EXPECT_THAT(DescribeNics(ParseClusterShorthand("2xdgx-h100")), Not(HasSubstr("net plugin")));
  // Every preset builds, and none shadows a GPU kind.
  for (const auto& p : ClusterPresets()) {
    EXPECT_NO_THROW(ParseClusterShorthand("2x" + p.name)) << p.name;
    EXPECT_EQ(LookupGpu(p.name), nullptr) << p.name;
  }
}

// GB200 NVL72: one rack is one node of 72 GPUs on one NVLink domain (what NCCL's MNNVL and the
// sharding see), built from 18 hosts of 4 GPUs (what host RAM is judged against). Figures from
// the preset's source: 18 trays x 960 GiB and 144 cores, one 400 Gb/s NIC per GPU.
TEST(ClusterPresetTest, Gb200Nvl72IsOneNvlinkDomainOfEighteenHosts) {
  const ClusterSpec c = ParseClusterShorthand("2xgb200-nvl72");
  EXPECT_EQ(c.gpu.name, "GB200-186G");
  EXPECT_EQ(c.gpus_per_node, 72);
  EXPECT_EQ(c.GpusPerHost(), 4);
  EXPECT_EQ(c.HostsPerNode(), 18);
  EXPECT_EQ(c.HostMemoryPerHost(), Bytes::GiB(960));
  EXPECT_EQ(c.cpu_cores_per_node, 18 * 144);
  EXPECT_EQ(c.nics_per_node, 72);
  EXPECT_TRUE(c.intra_node.nvlink_domain);
  EXPECT_EQ(c.intra_node.name, "nvlink5");
  // Host copies run over NVLink-C2C, NCCL's NIC path over PCIe.
  EXPECT_EQ(c.gpu.CopyLink(), "nvlink-c2c");
  EXPECT_EQ(c.gpu.host_link, "pcie5");
  // A node of one host keeps its own figures.
  const ClusterSpec dgx = ParseClusterShorthand("2xdgx-h100");
  EXPECT_EQ(dgx.GpusPerHost(), 8);
  EXPECT_EQ(dgx.HostMemoryPerHost(), dgx.host_memory_per_node);
}

// The GPUxKIND shorthand builds GB200 nodes from 4-GPU trays: up to 4 GPUs are one host, more
// are whole trays of the same NVLink domain.
TEST(ClusterShorthandTest, Gb200NodesAreWholeComputeTrays) {
  const ClusterSpec four = ParseClusterShorthand("4xGB200");
  EXPECT_EQ(four.gpus_per_host, 0);
  EXPECT_EQ(four.host_memory_per_node, Bytes::GiB(960));
  const ClusterSpec rack = ParseClusterShorthand("72xGB200");
  EXPECT_EQ(rack.GpusPerHost(), 4);
  EXPECT_EQ(rack.host_memory_per_node, Bytes::GiB(18 * 960));
  EXPECT_EQ(rack.HostMemoryPerHost(), Bytes::GiB(960));
  EXPECT_THAT([] { ParseClusterShorthand("6xGB200"); },
              ThrowsMessage<InputError>(HasSubstr("hosts of 4 GPUs (compute trays): GPUS must be 1-4 or a multiple of 4, got 6")));
}

TEST(ClusterSpecProblemsTest, GpusPerHostDividesTheNode) {
  ClusterSpec c = ParseClusterShorthand("72xGB200");
  c.gpus_per_host = 5;
  EXPECT_THAT(c.Problems("c.json:"),
              ::testing::ElementsAre("c.json:/gpus_per_host: expected 0 (the node is one host) or a divisor of "
                                     "gpus_per_node (72), got 5"));
  c.gpus_per_host = -1;
  EXPECT_EQ(c.Problems("c.json:").size(), 1u);
}

TEST(ClusterSpecProblemsTest, MoreNicsThanGpusAreAMultiple) {
  ClusterSpec c = ParseClusterShorthand("2x8xH100");
  c.nics_per_node = 32;  // AWS p5's 32 EFA cards, 4 beside each GPU
  EXPECT_TRUE(c.Problems("c.json:").empty());
  c.nics_per_node = 12;
  EXPECT_THAT(c.Problems("c.json:"),
              ::testing::ElementsAre(HasSubstr("expected a divisor or a multiple of gpus_per_node (8), got 12")));
}

TEST(ClusterSpecProblemsTest, ReportsEveryProblemWithItsKey) {
  ClusterSpec c = ParseClusterShorthand("2x8xH100");
  c.num_nodes = 0;
  c.nics_per_node = 3;
  c.host_memory_per_node = Bytes::Of(0);
  c.gpu.usable_memory = Bytes::Of(-1);
  const auto problems = c.Problems("c.json:");
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_EQ(problems[0], "c.json:/nodes: expected integer >= 1, got 0");
  EXPECT_EQ(problems[1], "c.json:/nics_per_node: expected a divisor or a multiple of gpus_per_node (8), got 3");
  EXPECT_THAT(problems[2], HasSubstr("c.json:/host_memory_bytes_per_node: expected integer > 0"));
  EXPECT_THAT(problems[3], HasSubstr("c.json:/gpu/usable_memory_bytes: expected a number > 0"));
}

TEST(ClusterSpecProblemsTest, SeveralNodesNeedNics) {
  ClusterSpec c = ParseClusterShorthand("2x8xH100");
  c.nics_per_node = 0;
  EXPECT_THAT(c.Problems("x:"),
              ::testing::ElementsAre(HasSubstr("x:/nics_per_node: expected integer >= 1")));
}

TEST(LoadClusterTest, TakesAShorthandWhenNoSuchFileExists) {
  EXPECT_EQ(LoadCluster("2x8xH100").world_size(), 16);
}

TEST(LoadClusterTest, ReadsAnExistingFile) {
  const ClusterSpec c = LoadCluster(SHARDTUNE_TEST_DATA_DIR "/profiles/two_dgx_h100.json");
  EXPECT_EQ(c.world_size(), 16);
}

TEST(LoadClusterTest, ReportsAMissingJsonFileAsAFile) {
  EXPECT_THAT([] { LoadCluster("/nonexistent/cluster.json"); },
              ThrowsMessage<InputError>(HasSubstr("/nonexistent/cluster.json: cannot open file")));
}

}  // namespace
}  // namespace shardtune::profiles
