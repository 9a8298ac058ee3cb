// Tests for the embedded hardware catalog (profiles/gpus.json, profiles/links.json), FindGpu,
// FindLink and the strict catalog parser.
#include "profiles/hardware.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "model/errors.h"
#include "profiles/hardware_json.h"

namespace shardtune::profiles {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(GpuCatalogTest, EveryEntryHasPositiveFiguresAndSources) {
  ASSERT_FALSE(GpuCatalog().empty());
  for (const GpuSpec& g : GpuCatalog()) {
    SCOPED_TRACE(g.name);
    EXPECT_GT(g.marketed_memory.count(), 0);
    EXPECT_GT(g.usable_memory.count(), 0);
    EXPECT_GT(g.bf16_dense.count(), 0);
    EXPECT_GT(g.fp16_dense.count(), 0);
    EXPECT_GT(g.tf32_dense.count(), 0);
    EXPECT_GT(g.fp32.count(), 0);
    EXPECT_GT(g.memory_bandwidth.count(), 0);
    EXPECT_FALSE(g.source.empty());
    EXPECT_FALSE(g.usable_memory_source.empty());
    // The driver reports within 10% of the marketed size (80 GB parts carry 80 GiB of HBM).
    EXPECT_GT(g.usable_memory.gb(), 0.9 * g.marketed_memory.gb());
    EXPECT_LT(g.usable_memory.gb(), 1.1 * g.marketed_memory.gb());
    // Tensor-core peaks are never below the CUDA-core fp32 rate.
    EXPECT_GE(g.bf16_dense.count(), g.fp32.count());
    EXPECT_GE(g.fp16_dense.count(), g.fp32.count());
    EXPECT_EQ(FindLink(g.host_link, "test").family, "pcie");
    EXPECT_NO_THROW(FindLink(g.intra_node_link, "test"));
    EXPECT_NO_THROW(FindLink(g.default_fabric, "test"));
  }
}

TEST(GpuCatalogTest, HoldsEveryRequiredKindUnderItsCatalogName) {
  for (const char* name : {"H100-SXM-80G", "H100-PCIe-80G", "H200-SXM-141G", "A100-SXM-40G",
                           "A100-SXM-80G", "L40S", "RTX4090", "RTX3090", "A10G", "V100-SXM2-32G"}) {
    const GpuSpec* g = LookupGpu(name);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(g->name, name);
  }
}

TEST(GpuCatalogTest, AliasesResolveCaseInsensitively) {
  EXPECT_EQ(FindGpu("H100", "t").name, "H100-SXM-80G");
  EXPECT_EQ(FindGpu("h100-sxm", "t").name, "H100-SXM-80G");
  EXPECT_EQ(FindGpu("A100", "t").name, "A100-SXM-80G");
  EXPECT_EQ(FindGpu("A100-80G", "t").name, "A100-SXM-80G");
  EXPECT_EQ(FindGpu("a100-40g", "t").name, "A100-SXM-40G");
  EXPECT_EQ(FindGpu("4090", "t").name, "RTX4090");
  EXPECT_EQ(FindGpu("rtx4090", "t").name, "RTX4090");
  EXPECT_EQ(FindGpu("H200", "t").name, "H200-SXM-141G");
  EXPECT_EQ(FindGpu("V100", "t").name, "V100-SXM2-32G");
  EXPECT_EQ(LookupGpu("H1OO"), nullptr);
}

TEST(GpuCatalogTest, DensePeaksAreHalfTheSparsityFigures) {
  // NVIDIA H100 datasheet, SXM: BF16 1,979 TFLOPS with sparsity; H100 PCIe: 1,513.
  EXPECT_NEAR(FindGpu("H100", "t").bf16_dense.count(), 1979e12 / 2, 0.5e12);
  EXPECT_NEAR(FindGpu("H100-PCIe", "t").bf16_dense.count(), 1513e12 / 2, 0.5e12);
  // A100 datasheet: BF16 624 TFLOPS with sparsity.
  EXPECT_DOUBLE_EQ(FindGpu("A100", "t").bf16_dense.count(), 624e12 / 2);
  // HBM3 at 3.35 TB/s (decimal, as datasheets and nccl-tests count).
  EXPECT_DOUBLE_EQ(FindGpu("H100", "t").memory_bandwidth.count(), 3.35 * kGB * 1000);
}

TEST(GpuCatalogTest, UsableMemoryIsTheGibFigureTorchReports) {
  // "79.11 GiB total capacity" (H100) and "23.64 GiB" (RTX 4090), to the message's 0.005 GiB.
  EXPECT_NEAR(FindGpu("H100", "t").usable_memory.gib(), 79.11, 0.005);
  EXPECT_NEAR(FindGpu("RTX4090", "t").usable_memory.gib(), 23.64, 0.005);
  EXPECT_EQ(FindGpu("H100", "t").marketed_memory, Bytes::GB(80));
}

TEST(FindGpuTest, UnknownKindNamesWhereSuggestsAndListsKnownKinds) {
  EXPECT_THAT([] { FindGpu("H1OO", "cluster.json:/gpu"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("cluster.json:/gpu: unknown GPU kind"),
                                              HasSubstr("(did you mean \"H100\"?)"),
                                              HasSubstr("known kinds: H100-SXM-80G, "))));
}

TEST(FindLinkTest, UnknownLinkSuggestsClosest) {
  EXPECT_EQ(FindLink("NVLink4", "t").name, "nvlink4");
  EXPECT_THAT([] { FindLink("nvlnk4", "f.json:/intra_node_link"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("f.json:/intra_node_link"),
                                              HasSubstr("did you mean \"nvlink4\""))));
}

TEST(LinkCatalogTest, EveryEntryHasPositiveFiguresAndNvlinkMarksItsDomain) {
  for (const LinkSpec& l : LinkCatalog()) {
    SCOPED_TRACE(l.name);
    EXPECT_GT(l.bandwidth_per_direction.count(), 0);
    EXPECT_GT(l.latency.count(), 0);
    EXPECT_FALSE(l.source.empty());
    // NVLink between GPUs (links counted) is a domain; NVLink-C2C to a Grace CPU is not.
    EXPECT_EQ(l.nvlink_domain, l.family == "nvlink" && l.nvlink_links > 0);
  }
  EXPECT_FALSE(FindLink("nvlink-c2c", "t").nvlink_domain);
}

TEST(LinkCatalogTest, NvlinkIsHalfTheBidirectionalDatasheetFigure) {
  EXPECT_DOUBLE_EQ(FindLink("nvlink4", "t").bandwidth_per_direction.count(), 900e9 / 2);
  EXPECT_DOUBLE_EQ(FindLink("nvlink3", "t").bandwidth_per_direction.count(), 600e9 / 2);
  EXPECT_DOUBLE_EQ(FindLink("nvlink2", "t").bandwidth_per_direction.count(), 300e9 / 2);
}

TEST(LinkCatalogTest, InfinibandRatesAreGigabitsOverEight) {
  EXPECT_DOUBLE_EQ(FindLink("ib-hdr", "t").bandwidth_per_direction.count(), 200e9 / 8);
  EXPECT_DOUBLE_EQ(FindLink("ib-ndr", "t").bandwidth_per_direction.count(), 400e9 / 8);
}

TEST(LinkCatalogTest, PcieIsBetweenSeventyPercentOfNominalAndNominal) {
  // Per direction, x16: GT/s x 16 lanes x 128/130 encoding / 8 bits.
  const double lanes = 16, encoding = 128.0 / 130.0;
  const std::pair<const char*, double> gens[] = {{"pcie3", 8e9}, {"pcie4", 16e9}, {"pcie5", 32e9}};
  for (const auto& [name, transfers] : gens) {
    const double nominal = transfers * lanes * encoding / 8;
    const double bw = FindLink(name, "t").bandwidth_per_direction.count();
    EXPECT_LT(bw, nominal) << name;
    EXPECT_GT(bw, 0.7 * nominal) << name;
  }
}

TEST(LinkCatalogTest, LatenciesFollowNcclOrderNvlinkThenPcieThenNetwork) {
  EXPECT_LT(FindLink("nvlink4", "t").latency, FindLink("pcie5", "t").latency);
  EXPECT_LT(FindLink("pcie5", "t").latency, FindLink("ib-ndr", "t").latency);
}

// One valid gpus.json entry; `extra` is spliced in before its closing brace.
std::string GpuEntry(const std::string& name, const std::string& aliases,
                     const std::string& extra = "") {
  return R"({"name": ")" + name + R"(", "aliases": )" + aliases + R"(,
    "marketed_memory_bytes": 1, "usable_memory_bytes": 1, "bf16_dense_flops_per_s": 1,
    "fp16_dense_flops_per_s": 1, "tf32_dense_flops_per_s": 1, "fp32_flops_per_s": 1,
    "memory_bytes_per_s": 1, "intra_node_link": "pcie4", "default_fabric": "eth-10g",
    "host_link": "pcie4", "source": "s")" +
         extra + "}";
}

std::string GpuCatalogText(const std::string& entries) {
  return R"({"schema": "shardtune.gpu_catalog", "schema_version": 1, "gpus": [)" + entries + "]}";
}

TEST(CatalogJsonTest, AcceptsAMinimalEntry) {
  auto gpus = internal::ParseGpuCatalog(GpuCatalogText(GpuEntry("G", R"(["X"])")), "g.json");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].aliases, std::vector<std::string>{"X"});
}

TEST(CatalogJsonTest, RejectsAnUnknownKeyWithItsPointer) {
  const std::string text = GpuCatalogText(GpuEntry("G", "[]", R"(, "sorce": "t")"));
  EXPECT_THAT([&] { internal::ParseGpuCatalog(text, "g.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("g.json:/gpus/0/sorce: unknown key"),
                                              HasSubstr("did you mean \"source\""))));
}

TEST(CatalogJsonTest, AMeasuredProfileMustBeOneTheCatalogEmbeds) {
  auto gpus = internal::ParseGpuCatalog(
      GpuCatalogText(GpuEntry("G", "[]", R"(, "measured_profile": "h100-sxm-80g.profile.json")")), "g.json");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].measured_profile, "h100-sxm-80g.profile.json");
  EXPECT_NE(MeasuredProfileText(gpus[0].measured_profile), nullptr);
  const std::string text = GpuCatalogText(GpuEntry("G", "[]", R"(, "measured_profile": "b200.json")"));
  EXPECT_THAT([&] { internal::ParseGpuCatalog(text, "g.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("g.json:/gpus/0/measured_profile"),
                                              HasSubstr("h100-sxm-80g.profile.json"), HasSubstr("b200.json"))));
}

TEST(GpuCatalogTest, OnlyTheH100SxmShipsAMeasuredProfile) {
  // Measured on the lent H100 SXM (profiles/measured/README.md); every other kind stays on its
  // datasheet figures until a session measures it.
  for (const auto& g : GpuCatalog()) {
    if (g.name == "H100-SXM-80G") {
      EXPECT_EQ(g.measured_profile, "h100-sxm-80g.profile.json");
    } else {
      EXPECT_EQ(g.measured_profile, "") << g.name;
    }
  }
  EXPECT_EQ(MeasuredProfileText(""), nullptr);
}

TEST(CatalogJsonTest, RejectsANameUsedTwice) {
  const std::string text =
      GpuCatalogText(GpuEntry("G", R"(["A"])") + "," + GpuEntry("H", R"(["g"])"));
  EXPECT_THAT([&] { internal::ParseGpuCatalog(text, "g.json"); },
              ThrowsMessage<InputError>(
                  HasSubstr("g.json:/gpus/1: name or alias \"g\" is already used by entry 0")));
}

TEST(CatalogJsonTest, RejectsAnotherSchema) {
  const std::string text = GpuCatalogText(GpuEntry("G", "[]"));
  EXPECT_THAT([&] { internal::ParseLinkCatalog(text, "g.json"); },
              ThrowsMessage<InputError>(HasSubstr("expected \"shardtune.link_catalog\"")));
}

}  // namespace
}  // namespace shardtune::profiles
