// Non-uniform wrap partition: the dynamic program against brute force over every composition,
// and its limiting cases derived from the exposure formula.
#include "planner/wrap_partition.h"

#include <functional>

#include <gtest/gtest.h>

namespace shardtune::planner {
namespace {

// Every composition of L into parts of at most K blocks, by brute force.
double BruteForce(int L, const PartitionCosts& c) {
  double best = 1e300;
  std::vector<int> sizes;
  std::function<void(int)> rec = [&](int left) {
    if (left == 0) {
      best = std::min(best, ExposedGatherTime(sizes, c));
      return;
    }
    for (int s = 1; s <= std::min(left, c.max_blocks_per_unit); ++s) {
      sizes.push_back(s);
      rec(left - s);
      sizes.pop_back();
    }
  };
  rec(L);
  return best;
}

std::vector<int> Sizes(const std::vector<std::pair<int, int>>& r) {
  std::vector<int> s;
  for (const auto& [a, b] : r) s.push_back(b - a + 1);
  return s;
}

TEST(WrapPartitionTest, DynamicProgramMatchesBruteForce) {
  for (double latency : {0.0, 1e-4, 5e-3}) {
    for (double gather : {1e-4, 1e-3, 3e-3}) {
      PartitionCosts c{1e-3, 2e-3, gather, latency, 4};
      for (int L : {1, 3, 7, 10}) {
        SCOPED_TRACE("L=" + std::to_string(L) + " gather=" + std::to_string(gather) + " lat=" + std::to_string(latency));
        auto r = OptimalPartition(L, c);
        EXPECT_EQ(r.front().first, 0);
        EXPECT_EQ(r.back().second, L - 1);
        EXPECT_NEAR(ExposedGatherTime(Sizes(r), c), BruteForce(L, c), 1e-12);
      }
    }
  }
}

// No latency and gathers hidden behind compute: only the first forward and first backward
// all-gathers are exposed, b·s_first + b·s_last, so both end units are single blocks.
TEST(WrapPartitionTest, HiddenGathersMakeTheEndUnitsSmall) {
  PartitionCosts c{1e-3, 2e-3, 1e-4, 0.0, 4};
  auto s = Sizes(OptimalPartition(12, c));
  EXPECT_EQ(s.front(), 1);
  EXPECT_EQ(s.back(), 1);
}

// A latency far above everything else: exposure ~ latency x (units + 1), so the fewest units,
// ceil(L / K), win.
TEST(WrapPartitionTest, LargeLatencyMakesFewUnits) {
  PartitionCosts c{1e-4, 2e-4, 1e-5, 1.0, 4};
  EXPECT_EQ(OptimalPartition(12, c).size(), 3u);
}

}  // namespace
}  // namespace shardtune::planner
