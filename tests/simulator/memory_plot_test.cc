// The memory picture (issue #19): the per-op category bytes it stacks add up to the ledger's op
// peaks (an independent replay of the same actions), the drawing marks the peak, the capacity and
// the reserved outline with the report's figures, and --plot refuses a name it cannot write.
#include "simulator/memory_plot.h"

#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_ledger.h"

namespace shardtune::sim {
namespace {

struct Case {
  MemoryEstimate est;
  JobPhases phases;
};

Case Estimate(const std::string& model, const std::string& cluster, model::Plan p) {
  auto spec = model::FindModelPreset(model);
  auto c = profiles::ParseClusterShorthand(cluster);
  Case k;
  MemoryOptions o;
  k.est = EstimateMemoryWithProgram(spec, c, p, o, false);
  k.phases = EstimateJobPhases(k.est.program, k.est.report, spec, c, p, o);
  return k;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string GiBLabel(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b.count()) / (1024.0 * 1024 * 1024));
  return buf;
}

TEST(MemoryPlotTest, StackedCategoriesAddUpToTheLedgersOpPeaks) {
  model::Plan p;
  p.seq_len = 2048;
  p.grad_accum = 2;
  p.offload = model::Offload::kOptimizer;
  Case k = Estimate("llama3.2-1b", "8xH100", p);
  std::vector<CategoryBytes> cats = CategoriesAtOpPeaks(k.est.program);
  MemoryLedger ledger(k.est.program);
  ASSERT_EQ(cats.size(), ledger.op_peak().size());
  int64_t most = 0;
  for (size_t i = 0; i < cats.size(); ++i) {
    int64_t sum = std::accumulate(cats[i].begin(), cats[i].end(), int64_t{0});
    EXPECT_EQ(sum, ledger.op_peak()[i]) << k.est.program.OpName(i);
    for (int64_t v : cats[i]) EXPECT_GE(v, 0);
    most = std::max(most, sum);
  }
  EXPECT_EQ(most, k.est.report.peak_allocated.count());
}

TEST(MemoryPlotTest, DrawsThePeakCapacityReservedAndEveryPhase) {
  model::Plan p;
  p.seq_len = 4096;
  Case k = Estimate("llama3-8b", "8xH100", p);
  const MemoryReport& r = k.est.report;
  std::string svg = MemoryPlotSvg(k.est.program, r, &k.phases, "t <&> \"q\"");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("t &lt;&amp;&gt; &quot;q&quot;"), std::string::npos);  // escaped title
  // One band per category that ever holds bytes, plus the memory outside the allocator.
  int bands = 0;
  for (int c = 0; c < kNumCategories; ++c) {
    for (const auto& [name, bytes] : r.category_peaks) {
      if (name == ToString(static_cast<Category>(c)) && bytes.count() > 0) ++bands;
    }
  }
  EXPECT_EQ(Count(svg, "<polygon"), bands + 1);
  EXPECT_NE(svg.find("peak " + GiBLabel(r.peak_allocated) + " allocated: " + r.peak_phase),
            std::string::npos);
  EXPECT_NE(svg.find("usable capacity " + GiBLabel(r.capacity)), std::string::npos);
  ASSERT_TRUE(r.allocator_replayed);
  EXPECT_NE(svg.find("reserved + outside, steady: " + GiBLabel(r.reserved_steady + r.outside_total)),
            std::string::npos);
  for (const auto& ph : k.phases.phases) {
    EXPECT_NE(svg.find(">" + std::string(ToString(ph.phase)) + "<"), std::string::npos);
    EXPECT_NE(svg.find(GiBLabel(ph.required)), std::string::npos);
  }
}

TEST(MemoryPlotTest, WritesSvgOrHtmlAndRefusesOtherNames) {
  model::Plan p;
  p.seq_len = 1024;
  Case k = Estimate("llama3.2-1b", "8xH100", p);
  auto dir = std::filesystem::temp_directory_path() / "shardtune_memory_plot_test";
  std::filesystem::create_directories(dir);
  std::string svg = (dir / "m.svg").string(), html = (dir / "m.html").string();
  WriteMemoryPlot(svg, "--plot", k.est.program, k.est.report, &k.phases, "x");
  WriteMemoryPlot(html, "--plot", k.est.program, k.est.report, nullptr, "x");
  std::stringstream a, b;
  a << std::ifstream(svg).rdbuf();
  b << std::ifstream(html).rdbuf();
  EXPECT_EQ(a.str().rfind("<svg", 0), 0u);
  EXPECT_EQ(b.str().rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(b.str().find("<svg"), std::string::npos);
  EXPECT_EQ(b.str().find("<script"), std::string::npos);  // self-contained, nothing to run
  std::string png = (dir / "m.png").string();
  try {
    WriteMemoryPlot(png, "--plot", k.est.program, k.est.report, nullptr, "x");
    FAIL() << "a .png name was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--plot: expected a file name ending in .svg or .html"),
              std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(png));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardtune::sim
