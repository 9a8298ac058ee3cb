// The planner's memory screening walks micro-batches 1, 2 and the last only
// (MemoryOptions::skip_repeated_micro_batches): over random plans, its report must equal the full
// walk's field for field, and its step-time lower bound must equal the full program's.
#include <cstdlib>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"
#include "simulator/memory_report_json.h"
#include "simulator/simulate.h"
#include "simulator/step_walk.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::sim {
namespace {

using model::Plan;

using testing::RandomPlan;

TEST(MicroBatchSkipTest, ScreeningReportEqualsTheFullWalkOverRandomPlans) {
  const char* env = std::getenv("SHARDTUNE_TEST_SEED");
  uint64_t seed = env ? std::strtoull(env, nullptr, 10) : 20261124;
  SCOPED_TRACE("SHARDTUNE_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  MemoryOptions full;
  full.allocator_replay = false;
  MemoryOptions skip = full;
  skip.skip_repeated_micro_batches = true;
  int skipped_plans = 0;
  for (int i = 0; i < 60; ++i) {
    Plan p = RandomPlan(rng);
    if (!p.Problems("plan", cluster.world_size(), cluster.gpus_per_node, spec.num_layers,
                    spec.SeqLenLimit()).empty()) {
      continue;
    }
    SCOPED_TRACE("plan " + std::to_string(i) + " grad_accum " + std::to_string(p.grad_accum));
    MemoryEstimate a = EstimateMemoryWithProgram(spec, cluster, p, full, false);
    MemoryEstimate b = EstimateMemoryWithProgram(spec, cluster, p, skip, false);
    auto ja = MemoryReportToJson(a.report, true), jb = MemoryReportToJson(b.report, true);
    // The one figure the screening leaves out (memory_model.h skip_repeated_micro_batches): the
    // ledger's no-replay reserved estimate and the nvidia-smi figure built on it.
    EXPECT_EQ(b.report.reserved_no_pressure.count(), 0);
    for (const char* k : {"reserved_bytes", "nvidia_smi_bytes"}) {
      ja["per_rank"].erase(k);
      jb["per_rank"].erase(k);
    }
    for (const auto& [key, value] : ja["per_rank"].items()) {
      EXPECT_EQ(value, jb["per_rank"][key]) << "key " << key;
    }
    EXPECT_EQ(ja.dump(), jb.dump());
    EXPECT_EQ(a.report.peak_phase, b.report.peak_phase);
    EXPECT_EQ(b.program.repeats_of_last_leading_micro_batch, std::max(0, p.grad_accum - kWalkedLeadingMicroBatches - 1));
    if (p.grad_accum > kWalkedLeadingMicroBatches + 1) {
      ++skipped_plans;
      EXPECT_LT(b.program.ops.size(), a.program.ops.size());
    }
    // The bound the search screens with never exceeds the walk's allocated peak.
    ModelCache cache;
    EXPECT_LE(AllocatedLowerBound(spec, cluster, p, full, &cache), a.report.peak_allocated);
    // The step-time bound the search prunes with never exceeds the simulated step, from either
    // program: the screening program's copies of the repeated micro-batch bound only its last
    // copy's end, so its bound may be lower than the full program's, never higher.
    SimOptions o;
    o.memory = full;
    SimContext ctx(cluster);
    StepTimeBound la = StepLowerBound(a, spec, cluster, p, o, &ctx);
    StepTimeBound lb = StepLowerBound(b, spec, cluster, p, o, &ctx);
    EXPECT_LE(lb.seconds, la.seconds) << lb.resource << " vs " << la.resource;
    SimReport r = SimulateProgram(std::move(a), spec, cluster, p, o, &ctx);
    EXPECT_LE(la.seconds, r.step_time_s) << la.resource;
    EXPECT_GT(lb.seconds, 0.0);
    if (p.grad_accum <= kWalkedLeadingMicroBatches + 1) {
      EXPECT_DOUBLE_EQ(la.seconds, lb.seconds);  // nothing left out: the same program
    }
  }
  EXPECT_GT(skipped_plans, 5);
}

// A timeline or an allocator replay needs every op: the option is ignored for them.
TEST(MicroBatchSkipTest, IgnoredWhenTheProgramIsReplayedOrShown) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  Plan p;
  p.grad_accum = 6;
  p.seq_len = 512;
  MemoryOptions o;
  o.skip_repeated_micro_batches = true;
  EXPECT_EQ(EstimateMemoryWithProgram(spec, cluster, p, o, false).program.repeats_of_last_leading_micro_batch, 0);
  o.allocator_replay = false;
  EXPECT_EQ(EstimateMemoryWithProgram(spec, cluster, p, o, true).program.repeats_of_last_leading_micro_batch, 0);
  EXPECT_EQ(EstimateMemoryWithProgram(spec, cluster, p, o, false).program.repeats_of_last_leading_micro_batch, 6 - kWalkedLeadingMicroBatches - 1);
}

}  // namespace
}  // namespace shardtune::sim
