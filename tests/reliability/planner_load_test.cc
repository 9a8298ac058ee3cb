// Load test of the planner (issue #7): the largest space a user can ask for in one call
// (llama3-405b on 4096 H100s) and many concurrent searches in one process finish, agree with a
// lone search, and stay within a memory bound (getrusage max RSS of this process).
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "planner/search.h"
#include "profiles/cluster.h"

namespace shardtune::planner {
namespace {

// Bound on this process's peak RSS: the search keeps top-k, the Pareto front and grouped
// rejections, never every plan, so its memory does not grow with the space or the world.
// Measured on 2026-11-22: 17 MiB (4096 GPUs) and 31 MiB (8 threads), one thread per search;
// on 2026-11-25, with a thread per core (2) and program buffers recycled: 79 MiB and 152 MiB.
constexpr int64_t kMaxRssBytes = int64_t{256} << 20;

int64_t MaxRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

SearchRequest Request(int64_t global_batch, int64_t seq_len) {
  SearchRequest r;
  r.global_batch = global_batch;
  r.seq_len = seq_len;
  r.top_k = 5;
  return r;
}

TEST(PlannerLoadTest, Llama405bOn4096GpusFinishesWithinTheMemoryBound) {
  const model::ModelSpec spec = model::FindModelPreset("llama3-405b");
  const profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("512x8xH100-ib400");
  ASSERT_EQ(cluster.world_size(), 4096);
  auto t0 = std::chrono::steady_clock::now();
  SearchResult r = SearchPlans(spec, cluster, Request(4096, 8192));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "llama3-405b on 4096 GPUs: " << r.enumerated << " plans enumerated, "
            << r.simulated << " simulated in " << s << " s; max RSS "
            << MaxRssBytes() / (1 << 20) << " MiB\n";
  EXPECT_GT(r.enumerated, 1000);
  EXPECT_FALSE(r.top.empty()) << r.advice_if_none;
  EXPECT_LE(r.top.size(), 5u);
  EXPECT_LT(MaxRssBytes(), kMaxRssBytes);
}

TEST(PlannerLoadTest, ConcurrentSearchesAgreeWithALoneOneWithinTheMemoryBound) {
  const model::ModelSpec spec = model::FindModelPreset("llama3.2-1b");
  const profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("2x8xH100");
  const SearchRequest request = Request(64, 4096);
  const SearchResult alone = SearchPlans(spec, cluster, request);
  ASSERT_FALSE(alone.top.empty());
  constexpr int kThreads = 8;
  std::vector<SearchResult> results(kThreads);
  std::vector<std::thread> threads;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = SearchPlans(spec, cluster, request); });
  }
  for (std::thread& t : threads) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << kThreads << " concurrent searches of " << alone.enumerated << " plans in " << s
            << " s; max RSS " << MaxRssBytes() / (1 << 20) << " MiB\n";
  for (int i = 0; i < kThreads; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(results[i].top.size(), alone.top.size());
    EXPECT_EQ(results[i].enumerated, alone.enumerated);
    EXPECT_EQ(results[i].simulated, alone.simulated);
    for (size_t k = 0; k < alone.top.size(); ++k) {
      EXPECT_EQ(results[i].top[k].key, alone.top[k].key);
      EXPECT_EQ(results[i].top[k].step_time_s, alone.top[k].step_time_s);
    }
  }
  EXPECT_LT(MaxRssBytes(), kMaxRssBytes);
}

}  // namespace
}  // namespace shardtune::planner
