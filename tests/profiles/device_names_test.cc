// Tests for MatchCudaDevice: the names NVIDIA's driver reports (nvidia-smi --query-gpu=name) for
// each catalog part map to that entry, other parts and other capacities to none.
#include "profiles/device_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace shardtune::profiles {
namespace {

using ::testing::HasSubstr;

std::string Entry(const std::string& name, Bytes memory) {
  DeviceMatch m = MatchCudaDevice(name, memory);
  return m.gpu != nullptr ? m.gpu->name : "none: " + m.why;
}

// The device's total memory as the catalog records it for that entry (what torch reports).
Bytes Usable(const std::string& entry) { return FindGpu(entry, "test").usable_memory; }

TEST(DeviceNamesTest, DriverNamesOfCatalogPartsMapToTheirEntries) {
  EXPECT_EQ(Entry("NVIDIA H100 80GB HBM3", Usable("H100-SXM-80G")), "H100-SXM-80G");
  EXPECT_EQ(Entry("NVIDIA H100 PCIe", Usable("H100-PCIe-80G")), "H100-PCIe-80G");
  EXPECT_EQ(Entry("NVIDIA H200", Usable("H200-SXM-141G")), "H200-SXM-141G");
  EXPECT_EQ(Entry("NVIDIA A100-SXM4-80GB", Usable("A100-SXM-80G")), "A100-SXM-80G");
  EXPECT_EQ(Entry("NVIDIA A100-SXM4-40GB", Usable("A100-SXM-40G")), "A100-SXM-40G");
  EXPECT_EQ(Entry("NVIDIA L40S", Usable("L40S")), "L40S");
  EXPECT_EQ(Entry("NVIDIA GeForce RTX 4090", Usable("RTX4090")), "RTX4090");
  EXPECT_EQ(Entry("NVIDIA GeForce RTX 3090", Usable("RTX3090")), "RTX3090");
  EXPECT_EQ(Entry("NVIDIA A10G", Usable("A10G")), "A10G");
  EXPECT_EQ(Entry("Tesla V100-SXM2-32GB", Usable("V100-SXM2-32G")), "V100-SXM2-32G");
  EXPECT_EQ(Entry("Tesla V100-SXM2-16GB", Usable("V100-SXM2-16G")), "V100-SXM2-16G");
}

TEST(DeviceNamesTest, DriverVersionsDriftOfTensOfMiBStillMatches) {
  Bytes h100 = Usable("H100-SXM-80G");
  EXPECT_EQ(Entry("NVIDIA H100 80GB HBM3", h100 + Bytes::MiB(80)), "H100-SXM-80G");
  EXPECT_EQ(Entry("NVIDIA H100 80GB HBM3", h100 - Bytes::MiB(80)), "H100-SXM-80G");
}

TEST(DeviceNamesTest, MemoryPicksTheCapacityWithinAFamily) {
  // The same family name with the other capacity's memory: the memory decides.
  EXPECT_EQ(Entry("NVIDIA A100-SXM4-80GB", Usable("A100-SXM-40G")), "A100-SXM-40G");
  // Unknown memory (0): the capacity written in the name.
  EXPECT_EQ(Entry("NVIDIA A100-SXM4-40GB", Bytes::Of(0)), "A100-SXM-40G");
  EXPECT_EQ(Entry("NVIDIA A100-SXM4-80GB", Bytes::Of(0)), "A100-SXM-80G");
  EXPECT_EQ(Entry("Tesla V100-SXM2-16GB", Bytes::Of(0)), "V100-SXM2-16G");
}

TEST(DeviceNamesTest, TheTwentyTwentySixPartsMapToTheirEntries) {
  EXPECT_EQ(Entry("NVIDIA B200", Usable("B200-180G")), "B200-180G");
  EXPECT_EQ(Entry("NVIDIA H800", Usable("H800-SXM-80G")), "H800-SXM-80G");
  EXPECT_EQ(Entry("NVIDIA H20", Usable("H20-96G")), "H20-96G");
  EXPECT_EQ(Entry("NVIDIA L20", Usable("L20")), "L20");
  EXPECT_EQ(Entry("NVIDIA L4", Usable("L4")), "L4");
}

TEST(DeviceNamesTest, PartsWithoutAnEntryMapToNone) {
  for (const char* name : {"NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GeForce RTX 4090 D",
                           "NVIDIA GeForce RTX 3090 Ti", "NVIDIA A100 80GB PCIe",
                           "Tesla V100-PCIE-32GB", "NVIDIA GB200", "AMD Instinct MI300X"}) {
    SCOPED_TRACE(name);
    DeviceMatch m = MatchCudaDevice(name, Bytes::GiB(80));
    EXPECT_EQ(m.gpu, nullptr);
    EXPECT_THAT(m.why, HasSubstr(name));
  }
}

TEST(DeviceNamesTest, AFamilyNameWithOtherMemoryIsNotThatEntry) {
  // An H100 SXM part with 64 GB (H100 64GB HBM2e boards) is 20% below the 80 GB entry.
  DeviceMatch m = MatchCudaDevice("NVIDIA H100 64GB HBM2e", Bytes::GiB(63.4));
  EXPECT_EQ(m.gpu, nullptr);
  EXPECT_THAT(m.why, HasSubstr("H100-SXM-80G"));
  EXPECT_THAT(m.why, HasSubstr("63.4 GiB"));
}

}  // namespace
}  // namespace shardtune::profiles
