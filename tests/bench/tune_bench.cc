// Benchmark (not a test): whole plan-search time and plans evaluated per second, for
// llama3-405b on 16x8xH100 and llama3-8b on 8xH100 (issue #4's speed cases). One core. Each case
// runs as the planner does it (caching-allocator replay for the best plans only) and with the
// replay for every memory-checked plan (MemoryOptions::allocator_replay, sim/allocator_sim.h;
// llama3-8b only, once: on llama3-405b that takes minutes).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "model/presets.h"
#include "planner/search.h"
#include "profiles/cluster.h"
#include "simulator/simulate.h"

int main() {
  shardtune::sim::RetainFreedHeap();  // as the CLI runs (simulator/simulate.h)
  using namespace shardtune;
  struct Case { const char* model; const char* cluster; int64_t batch; int64_t seq; };
  for (const Case& k : {Case{"llama3-405b", "16x8xH100", 256, 8192}, Case{"llama3-8b", "8xH100", 64, 8192}}) {
  for (bool replay_all : {false, true}) {
    if (replay_all && std::string(k.model) != "llama3-8b") continue;
    auto spec = model::FindModelPreset(k.model);
    auto cluster = profiles::ParseClusterShorthand(k.cluster);
    planner::SearchRequest req;
    req.global_batch = k.batch;
    req.seq_len = k.seq;
    req.replay_every_plan = replay_all;
    std::vector<double> secs;
    planner::SearchResult r;
    for (int rep = 0; rep < (replay_all ? 1 : 3); ++rep) {
      r = planner::SearchPlans(spec, cluster, req);
      secs.push_back(r.search_s);
    }
    std::sort(secs.begin(), secs.end());
    double med = secs[secs.size() / 2];
    std::printf("%s on %s, global batch %lld x %lld: search median %.3f s (min %.3f, max %.3f) over %zu; "
                "%lld plans, %.0f plans/s; %lld memory-checked, %lld simulated; %s [%s]\n",
                k.model, k.cluster, static_cast<long long>(k.batch), static_cast<long long>(k.seq), med,
                secs.front(), secs.back(), secs.size(), static_cast<long long>(r.enumerated), static_cast<double>(r.enumerated) / med,
                static_cast<long long>(r.memory_checked), static_cast<long long>(r.simulated),
                r.top.empty() ? "no plan fits" : r.top.front().key.c_str(),
                replay_all ? "allocator replay for every plan" : "allocator replay for the top plans");
  }
  }
  return 0;
}
