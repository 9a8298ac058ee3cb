// model/packing.h: verl's token-budget micro-batches and a run's sequence lengths.
// The expected partitions were computed by verl's own functions (volcengine/verl@b178a3c,
// verl/utils/seqlen_balancing.py: karmarkar_karp, get_seqlen_balanced_partitions and the
// ordering rearrange_micro_batches applies, run under CPython 3 on these inputs, 2026-11-29);
// the rest is derived from the formulas written in each test.
#include "model/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "model/errors.h"

namespace shardtune::model {
namespace {

using Parts = std::vector<std::vector<int>>;

TEST(PackingTest, KarmarkarKarpPartitionsAsVerlDoes) {
  EXPECT_EQ(KarmarkarKarp({5, 1, 4, 2, 3, 3}, 3), (Parts{{4, 5}, {2, 3}, {0, 1}}));
  // Ties everywhere: the heap's and the stable sorts' tie-breaking decide.
  EXPECT_EQ(KarmarkarKarp({1000, 1000, 1000, 1000, 1000}, 2), (Parts{{0, 3, 1}, {4, 2}}));
  EXPECT_EQ(KarmarkarKarp({37, 512, 9, 300, 300, 128, 77, 1024, 5, 640}, 4),
            (Parts{{7}, {4, 3, 6}, {9, 0}, {1, 5, 2, 8}}));
}

TEST(PackingTest, MicroBatchesInVerlsOrder) {
  EXPECT_EQ(PackedMicroBatches({1000, 1000, 1000, 1000, 1000}, 2), (Parts{{0, 1, 3}, {2, 4}}));
  EXPECT_EQ(PackedMicroBatches({37, 512, 9, 300, 300, 128, 77, 1024, 5, 640}, 3),
            (Parts{{0, 2, 3, 8, 9}, {7}, {1, 4, 5, 6}}));
  EXPECT_EQ(PackedMicroBatches({64, 64, 64, 64, 64, 64, 64, 64}, 2),
            (Parts{{1, 3, 5, 6}, {0, 2, 4, 7}}));
  EXPECT_EQ(PackedMicroBatches({20, 31, 8, 17, 25, 30, 12, 9}, 3),
            (Parts{{2, 3, 4}, {0, 1}, {5, 6, 7}}));
}

TEST(PackingTest, EverySequenceOnceAndBalancedNotCapped) {
  // 5 sequences of 1,000 under a budget of 2,500: ceil(5,000 / 2,500) = 2 micro-batches, and
  // the balanced split puts 3,000 tokens in one of them (more than the budget).
  std::vector<int64_t> l(5, 1000);
  ASSERT_EQ(PackedMicroBatchCount(l, 2500), 2);
  Parts parts = PackedMicroBatches(l, 2);
  std::vector<int64_t> tokens;
  std::multiset<int> seen;
  for (const auto& p : parts) {
    int64_t t = 0;
    for (int i : p) {
      t += l[static_cast<size_t>(i)];
      seen.insert(i);
    }
    tokens.push_back(t);
  }
  EXPECT_EQ(seen, (std::multiset<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(*std::max_element(tokens.begin(), tokens.end()), 3000);
  // The count: min(sequences, ceil(tokens / budget)).
  EXPECT_EQ(PackedMicroBatchCount({100, 100, 100}, 1000), 1);
  EXPECT_EQ(PackedMicroBatchCount({100, 100, 100}, 150), 2);
  EXPECT_EQ(PackedMicroBatchCount({100, 100, 100}, 100), 3);
}

TEST(PackingTest, RowsAtTheLongest) {
  // min(n, ceil(n x longest / row))
  EXPECT_EQ(PackedRowsAtLongest(32, 2048, 16384), 4);
  EXPECT_EQ(PackedRowsAtLongest(5, 1000, 2500), 2);
  EXPECT_EQ(PackedRowsAtLongest(3, 4096, 4096), 3);
  EXPECT_EQ(PackedRowsAtLongest(3, 100, 100000), 1);
}

TEST(PackingTest, LargestRowAtTheLongestIsWhatKarmarkarKarpMakes) {
  // Against the partitions themselves: n equal sequences spread over PackedRowsAtLongest rows.
  struct Case {
    int64_t n, longest, budget;
  };
  for (const Case& c : {Case{32, 1536, 16384}, Case{5, 1000, 2500}, Case{8, 64, 256}, Case{32, 64, 100},
                        Case{3, 4096, 4096}, Case{7, 300, 1000}}) {
    std::vector<int64_t> l(static_cast<size_t>(c.n), c.longest);
    int rows = PackedMicroBatchCount(l, c.budget);
    ASSERT_EQ(rows, PackedRowsAtLongest(c.n, c.longest, c.budget));
    int64_t largest = 0;
    for (const auto& p : PackedMicroBatches(l, rows)) {
      largest = std::max<int64_t>(largest, static_cast<int64_t>(p.size()) * c.longest);
    }
    EXPECT_EQ(LargestPackedRowAtLongest(c.n, c.longest, c.budget), largest) << c.n << " " << c.budget;
  }
  // 32 x 1536 under 16384: 3 rows, 11 sequences = 16896 tokens in the largest (above the budget).
  EXPECT_EQ(LargestPackedRowAtLongest(32, 1536, 16384), 16896);
}

TEST(PackingTest, RowsOverStepsOfEqualLengthsAreTheLargestAtTheLongest) {
  // Every sequence 1536 tokens: each step's rows are those of LargestPackedRowAtLongest.
  SequenceLengths equal = SequenceLengths::Parse("uniform:1536-1536", "--lengths", 1536);
  EXPECT_EQ(LargestPackedRowOverSteps(equal, 0, 1536, 16384, 32, 8, 16),
            LargestPackedRowAtLongest(32, 1536, 16384));
  // Mixed lengths: at least the mean row of a step (its tokens over its rows) and at most all of a
  // rank's sequences in one row; the same answer every time.
  SequenceLengths mixed = SequenceLengths::Parse("uniform:256-2048", "--lengths", 2048);
  const int64_t largest = LargestPackedRowOverSteps(mixed, 0, 2048, 4096, 32, 8, 64);
  EXPECT_EQ(largest, LargestPackedRowOverSteps(mixed, 0, 2048, 4096, 32, 8, 64));
  std::vector<int64_t> first(32);
  for (int64_t i = 0; i < 32; ++i) first[static_cast<size_t>(i)] = mixed.Length(0, i, 2048);
  int64_t total = 0;
  for (int64_t x : first) total += x;
  EXPECT_GE(largest, total / PackedMicroBatchCount(first, 4096));
  EXPECT_LE(largest, 32 * 2048);
}

TEST(PackingTest, UniformLengthsAreDeterministicAndCoverTheRange) {
  SequenceLengths l = SequenceLengths::Parse("uniform:8-32", "--lengths", 32);
  ASSERT_TRUE(l.uniform());
  EXPECT_DOUBLE_EQ(l.Mean(32), 20.0);
  std::map<int64_t, int> count;
  for (int64_t i = 0; i < 25000; ++i) {
    int64_t s = l.Length(7, i, 32);
    ASSERT_GE(s, 8);
    ASSERT_LE(s, 32);
    ++count[s];
    ASSERT_EQ(s, l.Length(7, i, 32));  // a pure function of (seed, index)
  }
  EXPECT_EQ(count.size(), 25u);  // every length drawn
  // Each of the 25 lengths about 1,000 times (binomial sd ~31: 6 sd either side).
  for (const auto& [s, n] : count) EXPECT_NEAR(n, 1000, 190) << s;
  int differ = 0;
  for (int64_t i = 0; i < 100; ++i) differ += l.Length(7, i, 32) != l.Length(8, i, 32);
  EXPECT_GT(differ, 50);  // another seed, other lengths
  SequenceLengths every = SequenceLengths::Parse("", "--lengths", 32);
  EXPECT_FALSE(every.uniform());
  EXPECT_EQ(every.Length(7, 3, 32), 32);
}

TEST(PackingTest, LengthsErrorsNameTheFlag) {
  for (const char* bad : {"mean:20", "uniform:8", "uniform:a-9", "uniform:1-9", "uniform:9-8", "uniform:8-33"}) {
    try {
      SequenceLengths::Parse(bad, "--lengths", 32);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--lengths"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace shardtune::model
