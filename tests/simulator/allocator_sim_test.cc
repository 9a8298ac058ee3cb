// The caching allocator model on hand-built sequences: each expected segment count and reserved
// figure is derived in the test from the rules of c10/cuda/CUDACachingAllocator.cpp (round_size,
// get_allocation_size, get_free_block, should_split, free_block, release_cached_blocks).
#include "simulator/allocator_sim.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>
#include <utility>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_ledger.h"
#include "simulator/memory_model.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::sim {
namespace {

constexpr int64_t kMiB = 1 << 20;

// The free list (sorted chunks) against std::set, the container torch's BlockPool uses, over
// random inserts, exact erases, best-fit takes and releases: sizes from a few values, so equal
// sizes tie on the address as BlockComparatorSize orders them, and up to some 10,000 entries, so
// chunks split and empty ones go.
TEST(CachingAllocatorModelTest, FreeListOrdersAsTorchsBlockPool) {
  using Entry = CachingAllocatorModel::FreeEntry;
  testing::SeededRng rng(20261126);
  CachingAllocatorModel::FreeList list;
  std::set<std::pair<int64_t, uint64_t>> ref;
  uint64_t next_addr = 0;
  auto check_first_not_below = [&](int64_t size) {
    Entry got{};
    bool found = list.TakeFirstNotBelow(Entry{size, 0}, &got);
    auto it = ref.lower_bound({size, 0});
    ASSERT_EQ(found, it != ref.end()) << size;
    if (!found) return;
    EXPECT_EQ(got.size, it->first);
    EXPECT_EQ(got.addr_slot, it->second);
    ref.erase(it);
  };
  for (int round = 0; round < 3; ++round) {
    // Grow to ~10,000 entries, then shrink, with takes and erases mixed in.
    for (int i = 0; i < 40000; ++i) {
      uint64_t r = rng() % 10;
      bool grow = i < 25000;
      if (r < (grow ? 7u : 3u)) {
        int64_t size = 512 * static_cast<int64_t>(1 + rng() % 64);
        uint64_t addr_slot = ++next_addr << 8;
        list.Insert(Entry{size, addr_slot});
        ref.insert({size, addr_slot});
      } else if (r < 8 && !ref.empty()) {
        auto it = ref.begin();
        std::advance(it, static_cast<long>(rng() % std::min<size_t>(ref.size(), 64)));
        if (rng() % 2) {
          it = std::prev(ref.end(), static_cast<long>(1 + rng() % std::min<size_t>(ref.size(), 64)));
        }
        list.Erase(Entry{it->first, it->second});
        ref.erase(it);
      } else {
        check_first_not_below(512 * static_cast<int64_t>(1 + rng() % 70));
      }
      ASSERT_EQ(list.empty(), ref.empty());
      if (!ref.empty()) {
        ASSERT_EQ(list.Last().size, std::prev(ref.end())->first);
        ASSERT_EQ(list.Last().addr_slot, std::prev(ref.end())->second);
      }
    }
    // release_cached_blocks' walk: in order, dropping some.
    std::vector<std::pair<int64_t, uint64_t>> seen;
    list.RemoveIf([&](const Entry& e) {
      seen.push_back({e.size, e.addr_slot});
      return (e.addr_slot >> 8) % 3 == 0;
    });
    std::vector<std::pair<int64_t, uint64_t>> expected(ref.begin(), ref.end());
    ASSERT_EQ(seen, expected);
    for (auto it = ref.begin(); it != ref.end();) {
      it = (it->second >> 8) % 3 == 0 ? ref.erase(it) : std::next(it);
    }
  }
  while (!ref.empty()) check_first_not_below(0);
  EXPECT_TRUE(list.empty());
}

TEST(CachingAllocatorModelTest, RoundsRequestsTo512Bytes) {
  EXPECT_EQ(AllocatorRoundSize(1), kMinBlockBytes);
  EXPECT_EQ(AllocatorRoundSize(512), 512);
  EXPECT_EQ(AllocatorRoundSize(513), 1024);
  // get_allocation_size: <= 1 MiB -> 2 MiB; < 10 MiB -> 20 MiB; else rounded up to 2 MiB.
  EXPECT_EQ(AllocatorSegmentSize(kSmallSizeBytes), kSmallBufferBytes);
  EXPECT_EQ(AllocatorSegmentSize(kSmallSizeBytes + 512), kLargeBufferBytes);
  EXPECT_EQ(AllocatorSegmentSize(kMinLargeAllocBytes), kMinLargeAllocBytes);
  EXPECT_EQ(AllocatorSegmentSize(11 * kMiB), 12 * kMiB);
}

TEST(CachingAllocatorModelTest, TwoSixMiBAllocationsShareOneLargeBufferSegment) {
  CachingAllocatorModel a;
  // 6 MiB < kMinLargeAlloc: a 20 MiB segment; the 14 MiB left (> kSmallSize) is split off and
  // serves the second 6 MiB request, leaving 8 MiB free in the same segment.
  a.Malloc(0, 6 * kMiB);
  a.Malloc(0, 6 * kMiB);
  EXPECT_EQ(a.segments(), 1);
  EXPECT_EQ(a.reserved_bytes(), kLargeBufferBytes);
  EXPECT_EQ(a.allocated_bytes(), 12 * kMiB);
  EXPECT_EQ(a.LargestFreeBlock(), kLargeBufferBytes - 12 * kMiB);
}

TEST(CachingAllocatorModelTest, LargeRequestTakesFreedBlockOnlyOnceMergedWithItsNeighbour) {
  CachingAllocatorModel a;
  int32_t x = a.Malloc(0, 4 * kMiB);  // 20 MiB segment: [x 4 | free 16]
  int32_t y = a.Malloc(0, 6 * kMiB);  // best fit 16: [x 4 | y 6 | free 10]
  (void)x;
  EXPECT_EQ(a.segments(), 1);
  // 12 MiB: no free block >= 12 MiB (only 10), so a segment of 12 MiB (>= kMinLargeAlloc:
  // rounded to kRoundLarge) is cudaMalloc'd.
  int32_t z = a.Malloc(0, 12 * kMiB);
  EXPECT_EQ(a.segments(), 2);
  EXPECT_EQ(a.reserved_bytes(), kLargeBufferBytes + 12 * kMiB);
  a.Free(z);
  a.Free(y);  // merges with the free 10 MiB after it: [x 4 | free 16]
  EXPECT_EQ(a.LargestFreeBlock(), 16 * kMiB);
  // 14 MiB now has two candidates, 12 (segment 2) and 16 (segment 1); best fit is 16 (smallest
  // that holds it); 2 MiB remain (> kSmallSize), so it is split.
  a.Malloc(0, 14 * kMiB);
  EXPECT_EQ(a.reserved_bytes(), kLargeBufferBytes + 12 * kMiB);
  EXPECT_EQ(a.allocated_bytes(), 4 * kMiB + 14 * kMiB);
  EXPECT_EQ(a.LargestFreeBlock(), 12 * kMiB);
}

TEST(CachingAllocatorModelTest, LargeBlockKeepsRemainderOfOneMiBOrLess) {
  CachingAllocatorModel a;
  // 19.5 MiB: a 20 MiB segment; 0.5 MiB left is not > kSmallSize, so the whole block is handed
  // out and counted as allocated.
  a.Malloc(0, 19 * kMiB + kMiB / 2);
  EXPECT_EQ(a.allocated_bytes(), 20 * kMiB);
  EXPECT_EQ(a.LargestFreeBlock(), 0);
}

TEST(CachingAllocatorModelTest, SmallPoolPacksTwoMiBSegments) {
  CachingAllocatorModel a;
  // 1000 bytes round to 1024; a 2 MiB small segment holds 2 MiB / 1024 of them (the remainder
  // is split off while >= 512 bytes).
  int64_t per_segment = kSmallBufferBytes / AllocatorRoundSize(1000);
  for (int64_t i = 0; i < per_segment; ++i) a.Malloc(0, 1000);
  EXPECT_EQ(a.segments(), 1);
  a.Malloc(0, 1000);
  EXPECT_EQ(a.segments(), 2);
  EXPECT_EQ(a.reserved_bytes(), 2 * kSmallBufferBytes);
  // Exactly kSmallSize is still small: two share a fresh 2 MiB segment; 512 bytes more go to the
  // large pool and its 20 MiB segment, even with small-pool space free.
  CachingAllocatorModel b;
  b.Malloc(0, kSmallSizeBytes);
  b.Malloc(0, kSmallSizeBytes);
  EXPECT_EQ(b.reserved_bytes(), kSmallBufferBytes);
  b.Malloc(0, kSmallSizeBytes + 512);
  EXPECT_EQ(b.reserved_bytes(), kSmallBufferBytes + kLargeBufferBytes);
}

TEST(CachingAllocatorModelTest, FreedBlocksServeOnlyTheirOwnStream) {
  CachingAllocatorModel a;
  a.Free(a.Malloc(0, 6 * kMiB));  // a cached 20 MiB segment of stream 0
  a.Malloc(1, 6 * kMiB);          // stream 1 cannot use it: a second segment
  EXPECT_EQ(a.segments(), 2);
  EXPECT_EQ(a.reserved_bytes(), 2 * kLargeBufferBytes);
  a.Malloc(0, 6 * kMiB);  // stream 0 reuses its own
  EXPECT_EQ(a.reserved_bytes(), 2 * kLargeBufferBytes);
}

TEST(CachingAllocatorModelTest, ReleasesCachedSegmentsAndRetriesUnderCapacity) {
  const int64_t capacity = 40 * kMiB;
  CachingAllocatorModel a(capacity);
  a.Free(a.Malloc(0, 30 * kMiB));  // one cached, wholly free 30 MiB segment
  // Stream 1 needs 30 MiB: 30 + 30 > 40 fails, release_cached_blocks frees the cached segment,
  // the retry succeeds (num_alloc_retries 1).
  EXPECT_GE(a.Malloc(1, 30 * kMiB), 0);
  EXPECT_EQ(a.retries(), 1);
  EXPECT_EQ(a.reserved_bytes(), 30 * kMiB);
  EXPECT_EQ(a.peak_reserved_bytes(), 30 * kMiB);  // the cached one was released first
  // 20 MiB more: 30 + 20 > 40, nothing cached to release: the retry fails too (OOM).
  EXPECT_LT(a.Malloc(1, 20 * kMiB), 0);
  EXPECT_EQ(a.retries(), 2);
}

TEST(CachingAllocatorModelTest, SplitSegmentsCanRunOutBelowCapacity) {
  const int64_t capacity = 44 * kMiB;
  CachingAllocatorModel a(capacity);
  int32_t a1 = a.Malloc(0, 4 * kMiB);   // segment A (20 MiB): [a1 4 | free 16]
  int32_t a2 = a.Malloc(0, 12 * kMiB);  // best fit 16: [a1 4 | a2 12 | free 4]
  a.Malloc(0, 20 * kMiB);               // segment B: 20 MiB
  (void)a1;
  a.Free(a2);  // [a1 4 | free 16]: free, but not a whole segment, so never released
  int64_t allocated = a.allocated_bytes();
  EXPECT_EQ(allocated, 24 * kMiB);
  // 18 MiB: the free 16 MiB block is too small; 40 + 18 > 44; releasing frees nothing.
  EXPECT_LT(a.Malloc(0, 18 * kMiB), 0);
  EXPECT_LE(allocated + 18 * kMiB, capacity);  // what a sum of allocations would call a fit
  EXPECT_EQ(a.retries(), 1);
}

// A two-step program: the replay reports reserved through step 0 and during step 1.
TEST(AllocatorReplayTest, ReportsReservedPerStepAndPlacesFreesByIdentity) {
  StepProgram p;
  auto op = [&](int16_t step) {
    ProgramOp o;
    o.kind = OpKind::kForward;
    o.step = step;
    p.ops.push_back(o);
    return static_cast<uint32_t>(p.ops.size() - 1);
  };
  auto alloc = [&](uint32_t o, int64_t bytes, Stream s) {
    p.tensors.push_back({o, p.num_tensor_ids, bytes, s});
    return p.num_tensor_ids++;
  };
  auto release = [&](uint32_t o, int32_t id) { p.tensors.push_back({o, id, 0, Stream::kDefault}); };
  uint32_t s0 = op(0);
  int32_t big = alloc(s0, 30 * kMiB, Stream::kDefault);
  int32_t ag = alloc(s0, 6 * kMiB, Stream::kAllGather);
  release(s0, big);
  release(s0, ag);
  uint32_t s1 = op(1);
  alloc(s1, 30 * kMiB, Stream::kDefault);    // reuses the cached 30 MiB segment
  alloc(s1, 6 * kMiB, Stream::kReduceScatter);  // a new stream: a new 20 MiB segment
  AllocatorReplay r = ReplayAllocator(p);
  EXPECT_EQ(r.reserved_step0_bytes, 30 * kMiB + kLargeBufferBytes);
  EXPECT_EQ(r.reserved_steady_bytes, 30 * kMiB + 2 * kLargeBufferBytes);
  EXPECT_EQ(r.reserved_peak_bytes, r.reserved_steady_bytes);
  EXPECT_EQ(r.segments, 3);
  EXPECT_FALSE(r.out_of_memory);
  // Under 60 MiB, the reduce-scatter segment needs the all-gather stream's cached one released.
  AllocatorReplay pressed = ReplayAllocator(p, 60 * kMiB);
  EXPECT_FALSE(pressed.out_of_memory);
  EXPECT_EQ(pressed.retries, 1);
  EXPECT_EQ(pressed.reserved_steady_bytes, 30 * kMiB + kLargeBufferBytes);
}

// The tensor events and the ledger's lumped actions describe the same steps: replayed tensor by
// tensor, the allocated peak differs from the ledger's only by what the replay adds (the
// all-gather's cast copy-in, at most one unit's shard in the param dtype) and by 512-byte
// rounding per tensor instead of per lump (at most 512 bytes per tensor event).
TEST(AllocatorReplayTest, AllocatedPeakMatchesTheLedger) {
  model::ModelSpec spec = model::FindModelPreset("llama3.2-1b");
  for (const char* cluster_name : {"1xH100", "8xH100"}) {
    auto cluster = profiles::ParseClusterShorthand(cluster_name);
    model::Plan plan;
    plan.micro_batch = 2;
    plan.seq_len = 2048;
    MemoryEstimate est = EstimateMemoryWithProgram(spec, cluster, plan, {}, false);
    ASSERT_FALSE(est.program.tensors.empty());
    int64_t ledger = MemoryLedger(est.program).peak_bytes();
    AllocatorReplay r = ReplayAllocator(est.program);
    int64_t largest_shard = 0;
    for (const auto& u : est.report.units) largest_shard = std::max(largest_shard, u.gathered_bytes.count());
    largest_shard /= est.report.shard_group;
    int64_t bound = largest_shard + kMinBlockBytes * static_cast<int64_t>(est.program.tensors.size());
    EXPECT_LE(std::abs(r.allocated_peak_bytes - ledger), bound) << cluster_name;
    EXPECT_GE(r.reserved_peak_bytes, r.allocated_peak_bytes) << cluster_name;
  }
}

}  // namespace
}  // namespace shardtune::sim
