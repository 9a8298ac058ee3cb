// Tests for ReadClusterFile ("shardtune.cluster" files): defaults, every key, inline GPU and
// link objects, and one test per InputError path (unknown key, missing key, wrong type, ranges).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "model/errors.h"
#include "profiles/cluster.h"

namespace shardtune::profiles {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::ThrowsMessage;

std::string Data(const std::string& name) {
  return std::string(SHARDTUNE_TEST_DATA_DIR) + "/profiles/" + name;
}

TEST(ReadClusterFileTest, LeftOutKeysTakeTheKindsDefaults) {
  const ClusterSpec c = ReadClusterFile(Data("two_dgx_h100.json"));
  EXPECT_EQ(c.name, "two DGX H100");
  EXPECT_EQ(c.num_nodes, 2);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.gpu.name, "H100-SXM-80G");
  EXPECT_EQ(c.intra_node.name, "nvlink4");
  EXPECT_EQ(c.inter_node.name, "ib-ndr");
  EXPECT_EQ(c.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 400e9 / 8);
  EXPECT_EQ(c.host_memory_per_node, Bytes::GiB(2048));
  EXPECT_FALSE(c.cpu_only);
}

TEST(ReadClusterFileTest, EveryKeyOverridesItsDefault) {
  const ClusterSpec c = ReadClusterFile(Data("every_key.json"));
  EXPECT_EQ(c.name, "four A100 nodes on NDR");
  EXPECT_EQ(c.gpu.name, "A100-SXM-80G");
  EXPECT_EQ(c.intra_node.name, "nvlink3");
  EXPECT_EQ(c.inter_node.name, "ib-ndr");
  EXPECT_EQ(c.nics_per_node, 4);
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 400e9 / 8);
  EXPECT_EQ(c.host_memory_per_node, Bytes::GiB(1024));
  EXPECT_EQ(c.cpu_cores_per_node, 64);
  EXPECT_FALSE(c.nvls);
  EXPECT_TRUE(ReadClusterFile(Data("two_dgx_h100.json")).nvls);  // the default
  EXPECT_DOUBLE_EQ(c.net_latency.count(), 75e-6);
  EXPECT_DOUBLE_EQ(ReadClusterFile(Data("two_dgx_h100.json")).net_latency.count(), 0.0);  // the default
  EXPECT_EQ(c.nccl_tuner, NcclTuner::kAwsOfiP5);
  EXPECT_EQ(ReadClusterFile(Data("two_dgx_h100.json")).nccl_tuner, NcclTuner::kNone);  // the default
  EXPECT_TRUE(c.ib_sharp);
  EXPECT_FALSE(ReadClusterFile(Data("two_dgx_h100.json")).ib_sharp);  // the default
}

// SHARP aggregates in InfiniBand switches: on a RoCE fabric the key is a one-line error naming it.
TEST(ReadClusterFileTest, IbSharpNeedsAnInfiniBandFabric) {
  const std::string path = Data("ib_sharp_on_roce.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/ib_sharp: expected false unless inter_node_link is "
                                                        "an InfiniBand link (family \"ib\"), got true with "
                                                        "inter_node_link roce-200g (family \"roce\")"),
                                              Not(HasSubstr("\n")))));
}

TEST(ReadClusterFileTest, NcclTunerMustBeOneThePluginHasTablesFor) {
  const std::string path = Data("nccl_tuner_unknown.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/nccl_tuner: expected \"none\", \"aws-ofi-nccl:p5\", "
                                                        "\"aws-ofi-nccl:p5en\" or \"aws-ofi-nccl:p6\", got "
                                                        "\"aws-ofi-nccl:p7\""),
                                              Not(HasSubstr("\n")))));
}

TEST(ReadClusterFileTest, NetLatencyMustNotBeNegative) {
  const std::string path = Data("net_latency_negative.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/net_latency_us: expected a number in [0, 10000]"),
                                              HasSubstr("-5"), Not(HasSubstr("\n")))));
}

// A GB200 file takes its host size from the kind's compute tray; a host size that does not
// divide the node is a one-line error naming the key.
TEST(ReadClusterFileTest, Gb200HostsAreComputeTrays) {
  const ClusterSpec c = ReadClusterFile(Data("gb200_two_racks.json"));
  EXPECT_EQ(c.GpusPerHost(), 4);
  EXPECT_EQ(c.HostMemoryPerHost(), Bytes::GiB(960));
  EXPECT_EQ(c.nics_per_node, 72);
  const std::string path = Data("gpus_per_host_not_divisor.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/gpus_per_host: expected 0 (the node is one host) or a "
                                                        "divisor of gpus_per_node (72), got 7"),
                                              Not(HasSubstr("\n")))));
}

TEST(ReadClusterFileTest, NvlsMustBeABoolean) {
  const std::string path = Data("nvls_not_bool.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/nvls: expected"), HasSubstr("\"off\""),
                                              Not(HasSubstr("\n")))));
}

TEST(ReadClusterFileTest, AcceptsInlineGpuAndLinkObjects) {
  const ClusterSpec c = ReadClusterFile(Data("inline_gpu.json"));
  EXPECT_EQ(c.name, Data("inline_gpu.json"));  // no "name": the path
  EXPECT_EQ(c.gpu.name, "MyAccel-96G");
  EXPECT_EQ(c.gpu.usable_memory, Bytes::GB(100));
  EXPECT_DOUBLE_EQ(c.gpu.bf16_dense.count(), 500e12);
  EXPECT_EQ(c.intra_node.name, "pcie5");  // the inline GPU's intra_node_link
  EXPECT_EQ(c.inter_node.name, "my-fabric");
  EXPECT_EQ(c.nics_per_node, 1);  // PCIe GPUs: one NIC per node
  EXPECT_DOUBLE_EQ(c.nic_bandwidth.count(), 50e9);
  EXPECT_EQ(c.host_memory_per_node, Bytes::GiB(512));
}

TEST(ReadClusterFileTest, UnknownKeyNamesFilePointerAndSuggestion) {
  const std::string path = Data("unknown_key.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/nic_per_node: unknown key"),
                                              HasSubstr("did you mean \"nics_per_node\""))));
}

TEST(ReadClusterFileTest, UnknownKeyInsideAnInlineObjectNamesTheNestedPointer) {
  const std::string path = Data("unknown_nested_key.json");
  EXPECT_THAT(
      [&] { ReadClusterFile(path); },
      ThrowsMessage<InputError>(HasSubstr(path + ":/intra_node_link/bandwith_gbps: unknown key")));
}

TEST(ReadClusterFileTest, MissingRequiredKeyIsNamed) {
  EXPECT_THAT([] { ReadClusterFile(Data("missing_key.json")); },
              ThrowsMessage<InputError>(HasSubstr("missing required key \"gpus_per_node\"")));
}

TEST(ReadClusterFileTest, WrongTypeNamesTheKeyAndTheValue) {
  const std::string path = Data("wrong_type.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/nodes: expected integer"),
                                              HasSubstr("got string \"two\""))));
}

TEST(ReadClusterFileTest, ReportsAllRangeProblemsTogetherOnOneLine) {
  const std::string path = Data("nodes_zero.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(
                  HasSubstr(path + ":/nodes: expected integer >= 1, got 0"),
                  HasSubstr(path + ":/nics_per_node: expected a divisor or a multiple of gpus_per_node (8)"),
                  HasSubstr(path + ":/host_memory_bytes_per_node: expected integer > 0, got -1"),
                  Not(HasSubstr("\n")))));
}

TEST(ReadClusterFileTest, UnknownGpuKindIsReportedAtItsPointer) {
  const std::string path = Data("unknown_gpu.json");
  EXPECT_THAT([&] { ReadClusterFile(path); },
              ThrowsMessage<InputError>(AllOf(HasSubstr(path + ":/gpu: unknown GPU kind \"H1OO\""),
                                              HasSubstr("did you mean \"H100\""))));
}

// A kind holding a newline (found by fuzz_cluster_json, 2026-11-28): the name is echoed with
// its control characters escaped, so the message stays one line.
TEST(ReadClusterFileTest, UnknownGpuKindWithANewlineIsEchoedOnOneLine) {
  EXPECT_THAT([] { profiles::FindGpu("A\\\nk3", "c.json:/gpu"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("c.json:/gpu: unknown GPU kind \"A\\\\u000ak3\""),
                                              Not(HasSubstr("\n")))));
}

TEST(ReadClusterFileTest, RejectsAnotherSchemaAndNewerVersions) {
  EXPECT_THAT([] { ReadClusterFile(Data("wrong_schema.json")); },
              ThrowsMessage<InputError>(HasSubstr("expected \"shardtune.cluster\"")));
  EXPECT_THAT([] { ReadClusterFile(Data("newer_version.json")); },
              ThrowsMessage<InputError>(HasSubstr("reads shardtune.cluster up to version 1")));
}

TEST(ReadClusterFileTest, SyntaxErrorGivesLineAndColumn) {
  const std::string path = Data("syntax_error.json");
  EXPECT_THAT([&] { ReadClusterFile(path); }, ThrowsMessage<InputError>(HasSubstr(path + ":2:")));
}

}  // namespace
}  // namespace shardtune::profiles
