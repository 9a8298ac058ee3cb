// Calibrated profile files: overrides land in MemoryConstants; bad files are one-line errors.
#include "simulator/profile_json.h"

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"

namespace shardtune::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::string Write(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ProfileJsonTest, MemorySectionOverridesDefaults) {
  auto p = ReadProfileFile(Write("p_ok.json", R"({"schema": "shardtune.profile", "schema_version": 1,
      "name": "h100", "memory": {"cuda_context_bytes": 536870912, "fragmentation_fraction": 0.02}})"));
  EXPECT_EQ(p.memory.cuda_context, Bytes::MiB(512));
  EXPECT_DOUBLE_EQ(p.memory.fragmentation_fraction, 0.02);
  EXPECT_EQ(p.memory.nccl_per_communicator, MemoryConstants{}.nccl_per_communicator);
}

TEST(ProfileJsonTest, ComputeAndNetworkSectionsOverrideCostConstants) {
  auto p = ReadProfileFile(Write("p_cost.json", R"({"schema": "shardtune.profile", "schema_version": 1,
      "compute": {"matmul_efficiency": 0.62}, "network": {"nvlink_efficiency": 0.7}})"));
  EXPECT_DOUBLE_EQ(p.costs.matmul_efficiency, 0.62);
  EXPECT_DOUBLE_EQ(p.costs.nvlink_efficiency, 0.7);
  EXPECT_DOUBLE_EQ(p.costs.memory_efficiency, CostConstants{}.memory_efficiency);
  std::string bad = Write("p_cost_bad.json", R"({"schema": "shardtune.profile", "schema_version": 1,
      "compute": {"matmul_efficency": 0.62}})");
  EXPECT_THAT([&] { ReadProfileFile(bad); }, ThrowsMessage<InputError>(HasSubstr("/compute/matmul_efficency")));
}

TEST(ProfileJsonTest, UnknownMemoryKeyIsNamedWithPointer) {
  std::string f = Write("p_bad.json", R"({"schema": "shardtune.profile", "schema_version": 1,
      "memory": {"cuda_contxt_bytes": 1}})");
  EXPECT_THAT([&] { ReadProfileFile(f); },
              ThrowsMessage<InputError>(HasSubstr("/memory/cuda_contxt_bytes: unknown key")));
}

TEST(ProfileJsonTest, OutOfRangeFractionRejected) {
  std::string f = Write("p_range.json", R"({"schema": "shardtune.profile", "schema_version": 1,
      "memory": {"fragmentation_fraction": 1.5}})");
  EXPECT_THAT([&] { ReadProfileFile(f); }, ThrowsMessage<InputError>(HasSubstr("fragmentation_fraction")));
}

TEST(ProfileJsonTest, WrongSchemaRejected) {
  std::string f = Write("p_schema.json", R"({"schema": "shardtune.plan", "schema_version": 1})");
  EXPECT_THAT([&] { ReadProfileFile(f); }, ThrowsMessage<InputError>(HasSubstr("shardtune.profile")));
}

}  // namespace
}  // namespace shardtune::sim
