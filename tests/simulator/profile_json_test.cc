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

// Version 3: measured kernel tables (`shardtune probe`) and host costs round-trip, and every
// sample is validated with the pointer of the bad value.
TEST(ProfileJsonTest, KernelTablesRoundTripAndAreValidated) {
  const char* text = R"({"schema": "shardtune.profile", "schema_version": 3,
      "compute": {"host_per_kernel_s": 4e-6},
      "provenance": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-25",
                     "command": "shardtune probe --device cuda", "nccl_version": "2.28.3"},
      "kernels": {
        "gemm": [{"dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "time_s": 1.8e-4}],
        "attention": [{"backend": "flash", "dtype": "bf16", "batch": 1, "seq_len": 2048,
                       "heads": 32, "kv_heads": 8, "head_dim": 128, "forward_s": 1e-4,
                       "backward_s": 2.5e-4},
                      {"backend": "cudnn", "dtype": "bf16", "batch": 1, "seq_len": 2048,
                       "heads": 32, "kv_heads": 8, "head_dim": 128, "forward_s": 1e-4,
                       "backward_s": 2e-4, "pytorch_default": true}],
        "memory": [{"kernel": "cast", "bytes": 1048576, "time_s": 2e-6}],
        "host": {"kernel_launch_s": 5e-6},
        "copies": [{"direction": "h2d", "host_memory": "pinned", "bytes": 1048576, "time_s": 4e-5}],
        "collectives": [{"kind": "all_gather", "backend": "nccl", "ranks": 8, "bytes": 1048576,
                         "time_s": 3e-5}]}})";
  Profile p = ReadProfileFile(Write("p_k.json", text));
  ASSERT_TRUE(p.costs.tables);
  EXPECT_EQ(p.costs.tables->gemm.size(), 1u);
  EXPECT_EQ(p.costs.tables->attention[0].kv_heads, 8);
  EXPECT_EQ(p.costs.tables->memory[0].kernel, profiles::MemoryKernel::kCast);
  EXPECT_DOUBLE_EQ(p.costs.tables->host.kernel_launch->count(), 5e-6);
  EXPECT_DOUBLE_EQ(p.costs.host_per_kernel.count(), 4e-6);
  EXPECT_EQ(p.provenance.nccl_version, "2.28.3");
  Profile q = ProfileFromJson(nlohmann::json::parse(ProfileToJson(p).dump()), "again");
  ASSERT_TRUE(q.costs.tables);
  EXPECT_DOUBLE_EQ(q.costs.tables->gemm[0].time.count(), p.costs.tables->gemm[0].time.count());
  EXPECT_EQ(q.costs.tables->collectives[0].ranks, 8);
  EXPECT_FALSE(q.costs.tables->attention[0].pytorch_default);  // absent: false (older probes)
  EXPECT_TRUE(q.costs.tables->attention[1].pytorch_default);
  EXPECT_EQ(q.costs.tables->copies[0].pinned, true);
  EXPECT_EQ(q.provenance.command, "shardtune probe --device cuda");

  auto expect_error = [](const std::string& name, const std::string& json, const std::string& what) {
    std::string f = Write(name, json);
    EXPECT_THAT([&] { ReadProfileFile(f); }, ThrowsMessage<InputError>(HasSubstr(what))) << json;
  };
  const std::string head = R"({"schema": "shardtune.profile", "schema_version": 3, "kernels": )";
  expect_error("p_k1.json", head + R"({"gemm": [{"dtype": "bf16", "m": 8, "n": 8, "k": 8, "time_s": -1}]}})",
               "/kernels/gemm/0/time_s");
  expect_error("p_k2.json", head + R"({"memory": [{"kernel": "softmax", "bytes": 8, "time_s": 1}]}})",
               "/kernels/memory/0/kernel");
  expect_error("p_k3.json", head + R"({"collectives": [{"kind": "all_gather", "backend": "nccl", "ranks": 2, "bytes": -5, "time_s": 1}]}})",
               "/kernels/collectives/0/bytes");
  expect_error("p_k4.json", head + R"({"attention": [{"backend": "flash", "dtype": "bf16", "batch": 1, "seq_len": 8, "heads": 32, "kv_heads": 5, "head_dim": 8, "forward_s": 1, "backward_s": 1}]}})",
               "/kernels/attention/0/kv_heads");
  expect_error("p_k5.json", head + R"({"gemms": []}})", "/kernels/gemms");
  expect_error("p_k7.json", head + R"({"attention": [{"backend": "flash", "dtype": "bf16", "batch": 1, "seq_len": 8, "heads": 4, "kv_heads": 4, "head_dim": 8, "forward_s": 1, "backward_s": 1, "pytorch_default": "yes"}]}})",
               "/kernels/attention/0/pytorch_default");
  expect_error("p_k6.json", R"({"schema": "shardtune.profile", "schema_version": 4})",
               "up to version 3, got 4");
}

TEST(ProfileJsonTest, TheCatalogShipsTheH100sMeasuredKernelsAndAFileReplacesThem) {
  const profiles::GpuSpec& h100 = profiles::FindGpu("H100", "test");
  const Profile* p = CatalogProfile(h100);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->provenance.device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(p->provenance.date, "2026-11-26");
  ASSERT_TRUE(p->costs.tables);
  EXPECT_FALSE(p->costs.tables->gemm.empty());
  EXPECT_FALSE(p->costs.tables->memory.empty());
  // Only the kernels: the memory constants and the efficiencies stay the defaults.
  EXPECT_EQ(p->memory.cuda_context, MemoryConstants{}.cuda_context);
  EXPECT_EQ(p->costs.host_per_kernel, CostConstants{}.host_per_kernel);
  EXPECT_EQ(CatalogProfile(h100), p);  // parsed once
  // A job on that kind gets it; one on a kind without a measured profile gets the defaults.
  EXPECT_TRUE(JobProfile("", h100).costs.tables);
  EXPECT_EQ(CatalogProfile(profiles::FindGpu("A100-SXM-80G", "test")), nullptr);
  EXPECT_FALSE(JobProfile("", profiles::FindGpu("A100-SXM-80G", "test")).costs.tables);
  // A --profile file is taken whole, even on the H100: no catalog tables underneath.
  std::string path = ::testing::TempDir() + "/plain_profile.json";
  {
    std::ofstream f(path);
    f << R"({"schema": "shardtune.profile", "schema_version": 1, "compute": {"matmul_efficiency": 0.5}})";
  }
  Profile from_file = JobProfile(path, h100);
  EXPECT_EQ(from_file.costs.matmul_efficiency, 0.5);
  EXPECT_FALSE(from_file.costs.tables);
}

}  // namespace
}  // namespace shardtune::sim
