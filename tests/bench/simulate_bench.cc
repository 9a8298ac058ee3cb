// Benchmark (not a test): full event simulations per second, as the planner will run them.
// Prints median and p90 over repetitions of llama3-70b on 16x8xH100 with per-block wrapping.
// Usage: simulate_bench [seconds_per_repetition=1] [repetitions=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/simulate.h"

int main(int argc, char** argv) {
  using namespace shardtune;
  sim::RetainFreedHeap();  // as the CLI runs (simulator/simulate.h)
  double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  auto spec = model::FindModelPreset("llama3-70b");
  auto cluster = profiles::ParseClusterShorthand("16x8xH100");
  model::Plan plan;
  plan.seq_len = 8192;
  plan.checkpointing = model::Checkpointing::kFull;
  sim::SimOptions opt;
  opt.with_timeline = false;
  // As the planner's simulation pass runs them (planner/search_rank.cc full_opt_): no allocator
  // replay (the planner replays only the plans entering its list; `simulate` replays every time),
  // no host-memory estimate (tune reports none), the steady step scheduled alone.
  opt.memory.allocator_replay = false;
  opt.memory.host_estimate = false;
  opt.steady_step_only = true;
  sim::SimContext ctx(cluster);
  std::vector<double> rates;
  size_t ops = 0;
  double step_s = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    double el = 0;
    do {
      auto rep = sim::SimulateStep(spec, cluster, plan, opt, &ctx);
      ops = rep.program.ops.size();
      step_s = rep.step_time.count();
      ++n;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < seconds);
    rates.push_back(n / el);
  }
  std::sort(rates.begin(), rates.end());
  double median = rates[rates.size() / 2];
  double p90_low = rates[rates.size() / 10];  // the slowest 10%
  std::printf("simulate_bench: llama3-70b on 16x8xH100, block wrap, seq 8192, full checkpointing\n");
  std::printf("ops_per_simulation=%zu predicted_step_s=%.4f\n", ops, step_s);
  std::printf("simulations_per_s median=%.0f p10=%.0f reps=%d (one core)\n", median, p90_low, reps);
  return 0;
}
