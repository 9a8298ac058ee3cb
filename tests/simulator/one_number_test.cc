// One number per quantity (issue #19): over random valid plans (models, strategies, HSDP, offload,
// checkpointing, cp, LoRA, wraps, no_sync, kept logits, checkpoint formats), the summary (MemoryReport) and the job phase
// table (JobPhases) show the same allocated peak, reserved and required for the training steps,
// the summary's required is the deciding training phase's, the host peak per node is the phase
// table's largest, and the JSON documents carry exactly these figures.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/job_phases.h"
#include "simulator/memory_model.h"
#include "simulator/memory_report_json.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::sim {
namespace {

using model::Plan;

using testing::Pick;

// Longer sequences and larger micro-batches than the skip test's: about a third run out of memory.
model::Plan RandomPlan(std::mt19937_64& rng) {
  testing::RandomPlanSpace space;
  space.micro_batches = {1, 2, 4};
  space.grad_accums = {1, 2, 3};
  space.seq_lens = {1024, 2048, 4096};
  space.hybrid_groups = {2, 4};
  return testing::RandomPlan(rng, space);
}

const PhaseMemory* Find(const JobPhases& j, JobPhase ph) {
  for (const auto& p : j.phases) {
    if (p.phase == ph) return &p;
  }
  return nullptr;
}

TEST(OneNumberTest, SummaryAndPhaseTableAgreeOverRandomPlans) {
  const uint64_t seed = testing::TestSeed(20261125);
  SCOPED_TRACE("SHARDTUNE_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int checked = 0, oom = 0, pressed = 0;
  // Issue #19: at least 500 random valid plans (invalid draws are skipped, not counted).
  for (int i = 0; i < 4000 && checked < 500; ++i) {
    const std::string model = Pick<std::string>(rng, {"llama3.2-1b", "qwen2.5-7b", "llama3-8b"});
    const std::string cluster = Pick<std::string>(rng, {"8xH100", "4xRTX4090", "2x4xA100-40G"});
    auto spec = model::FindModelPreset(model);
    auto c = profiles::ParseClusterShorthand(cluster);
    Plan p = RandomPlan(rng);
    if (!testing::Valid(p, spec, c)) continue;
    MemoryOptions o;
    o.checkpoint_format = Pick(rng, {CheckpointFormat::kNone, CheckpointFormat::kSharded,
                                     CheckpointFormat::kFull, CheckpointFormat::kFullCpuOffload});
    SCOPED_TRACE("plan " + std::to_string(i) + ": " + model + " on " + cluster);
    MemoryEstimate est = EstimateMemoryWithProgram(spec, c, p, o, false);
    const MemoryReport& r = est.report;
    JobPhases j = EstimateJobPhases(est.program, r, spec, c, p, o);
    const PhaseMemory* step0 = Find(j, JobPhase::kStep0);
    const PhaseMemory* steady = Find(j, JobPhase::kSteady);
    ASSERT_NE(step0, nullptr);
    ASSERT_NE(steady, nullptr);
    ++checked;
    oom += r.fits ? 0 : 1;
    pressed += r.allocator_retries > 0 ? 1 : 0;
    // GPU: one allocated peak, reserved and required per training step.
    EXPECT_EQ(steady->allocated_peak, r.steady_peak);
    EXPECT_EQ(step0->allocated_peak, r.step0_peak);
    EXPECT_EQ(std::max(step0->allocated_peak, steady->allocated_peak), r.peak_allocated);
    ASSERT_TRUE(r.allocator_replayed);
    EXPECT_EQ(steady->reserved, r.reserved_steady);
    EXPECT_EQ(step0->reserved, r.reserved_step0);
    EXPECT_EQ(steady->required, r.required);
    EXPECT_EQ(step0->required, r.required_step0);
    EXPECT_LE(step0->required, steady->required);
    EXPECT_EQ(steady->fits, r.fits);
    // The training steps fit exactly when the summary says so.
    EXPECT_EQ(step0->fits && steady->fits, r.fits);
    for (const PhaseMemory* ph : {step0, steady}) {
      EXPECT_EQ(ph->nvidia_smi, ph->reserved + ph->outside);
      EXPECT_EQ(ph->headroom, r.capacity - ph->required);
      EXPECT_EQ(ph->outside, r.outside_total);
    }
    // Host: the summary's peak per node is the phase table's largest, with its breakdown.
    const PhaseMemory* host_peak = &j.phases.front();
    for (const auto& ph : j.phases) {
      if (ph.host_total > host_peak->host_total) host_peak = &ph;
    }
    EXPECT_EQ(r.host.peak_per_node, host_peak->host_total);
    EXPECT_EQ(r.host.breakdown, host_peak->host_breakdown);
    EXPECT_EQ(r.host.fits, host_peak->host_fits);
    // JSON carries the same figures.
    auto rj = MemoryReportToJson(r, false, "");
    auto pj = JobPhasesToJson(j);
    EXPECT_EQ(rj["per_rank"]["required_bytes"].get<int64_t>(), r.required.count());
    EXPECT_EQ(rj["host"]["peak_bytes_per_node"].get<int64_t>(), r.host.peak_per_node.count());
    for (const auto& row : pj["list"]) {
      if (row["phase"] == "steady step") {
        EXPECT_EQ(row["required_bytes"].get<int64_t>(), rj["per_rank"]["required_bytes"].get<int64_t>());
        EXPECT_EQ(row["reserved_bytes"].get<int64_t>(),
                  rj["per_rank"]["reserved_steady_bytes"].get<int64_t>());
      }
    }
  }
  // The random plans reach both verdicts and the replay under pressure.
  EXPECT_EQ(checked, 500);
  EXPECT_GT(oom, 0);
  EXPECT_LT(oom, checked);
  std::printf("checked %d, out of memory %d, replayed under pressure %d\n", checked, oom, pressed);
}

}  // namespace
}  // namespace shardtune::sim
