// Tests for the bus-bandwidth factors (nccl-tests doc/PERFORMANCE.md) and collective names.
#include "profiles/collective.h"

#include <gtest/gtest.h>

#include <string>

#include "model/errors.h"

namespace shardtune::profiles {
namespace {

TEST(BusBwFactorTest, AllReduceMovesTwiceNMinusOneOverN) {
  for (int n : {1, 2, 3, 8, 64, 1024}) {
    EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, n), 2.0 * (n - 1) / n) << n;
  }
}

TEST(BusBwFactorTest, AllGatherReduceScatterAndAllToAllMoveNMinusOneOverN) {
  for (int n : {1, 2, 3, 8, 64, 1024}) {
    const double expected = static_cast<double>(n - 1) / n;
    EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllGather, n), expected) << n;
    EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kReduceScatter, n), expected) << n;
    EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllToAll, n), expected) << n;
  }
}

TEST(BusBwFactorTest, BroadcastBusBandwidthEqualsAlgorithmBandwidth) {
  for (int n : {1, 2, 8}) EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kBroadcast, n), 1.0);
}

TEST(BusBwFactorTest, AllReduceIsReduceScatterPlusAllGather) {
  const int n = 16;
  EXPECT_DOUBLE_EQ(
      BusBwFactor(Collective::kAllReduce, n),
      BusBwFactor(Collective::kReduceScatter, n) + BusBwFactor(Collective::kAllGather, n));
}

TEST(BusBwFactorTest, ZeroRanksIsABug) {
  EXPECT_THROW(BusBwFactor(Collective::kAllGather, 0), InternalError);
}

TEST(CollectiveToStringTest, EveryKindHasADistinctSnakeCaseName) {
  EXPECT_STREQ(ToString(Collective::kAllGather), "all_gather");
  EXPECT_STREQ(ToString(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_STREQ(ToString(Collective::kAllReduce), "all_reduce");
  EXPECT_STREQ(ToString(Collective::kBroadcast), "broadcast");
  EXPECT_STREQ(ToString(Collective::kAllToAll), "all_to_all");
}

}  // namespace
}  // namespace shardtune::profiles
