// Tests for MatchCudaDevice: the names NVIDIA's driver reports (nvidia-smi --query-gpu=name) for
// each catalog part map to that entry, other parts and other capacities to none.
#include "profiles/device_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

namespace shardtune::profiles {
namespace {

using ::testing::HasSubstr;

std::string Entry(const std::string& name, Bytes memory) {
  DeviceMatch m = MatchCudaDevice(name, memory);
  return m.gpu != nullptr ? m.gpu->name : "none: " + m.why;
}

// The device's total memory as the catalog records it for that entry (what torch reports).
Bytes Usable(const std::string& entry) { return FindGpu(entry, "test").usable_memory; }

// Expects each driver name, reporting its catalog entry's memory, to map to that entry.
void ExpectNamesMapToEntries(
    std::initializer_list<std::pair<const char*, const char*>> name_and_entry) {
  for (const auto& [name, entry] : name_and_entry) {
    SCOPED_TRACE(name);
    EXPECT_EQ(Entry(name, Usable(entry)), entry);
  }
}

TEST(DeviceNamesTest, DriverNamesOfCatalogPartsMapToTheirEntries) {
  ExpectNamesMapToEntries({{"NVIDIA H100 80GB HBM3", "H100-SXM-80G"},
                           {"NVIDIA H100 PCIe", "H100-PCIe-80G"},
                           {"NVIDIA H200", "H200-SXM-141G"},
                           {"NVIDIA A100-SXM4-80GB", "A100-SXM-80G"},
                           {"NVIDIA A100-SXM4-40GB", "A100-SXM-40G"},
                           {"NVIDIA L40S", "L40S"},
                           {"NVIDIA GeForce RTX 4090", "RTX4090"},
                           {"NVIDIA GeForce RTX 3090", "RTX3090"},
                           {"NVIDIA A10G", "A10G"},
                           {"Tesla V100-SXM2-32GB", "V100-SXM2-32G"},
                           {"Tesla V100-SXM2-16GB", "V100-SXM2-16G"}});
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
  ExpectNamesMapToEntries({{"NVIDIA B200", "B200-180G"},
                           {"NVIDIA H800", "H800-SXM-80G"},
                           {"NVIDIA H20", "H20-96G"},
                           {"NVIDIA L20", "L20"},
                           {"NVIDIA L4", "L4"}});
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
