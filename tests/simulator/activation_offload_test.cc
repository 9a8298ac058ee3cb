// verl's activation offload (Plan::activation_offload, verl/utils/activation_offload.py
// AsyncDoubleBufferGroupOffloadHandler with num_offload_group = layers - 1): expected figures come
// from the handler's rules written here (two layers on the GPU at a time, every layer but the last
// copied to pinned host blocks of a power-of-two size) and the block's own activation ledger.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "model/activations.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/job_phases.h"
#include "simulator/memory_model.h"
#include "tests/simulator/memory_test_util.h"
#include "simulator/step_program.h"

namespace shardtune::sim {
namespace {

using memtest::CategoryPeak;
using memtest::R512;

constexpr int64_t kTokens = 4096;

model::Plan Llama8bPlan(model::ActivationOffload offload) {
  model::Plan p;
  p.micro_batch = 1;
  p.seq_len = kTokens;
  p.grad_accum = 2;
  p.checkpointing = model::Checkpointing::kNone;
  p.activation_offload = offload;
  return p;
}

int64_t PowerOfTwoCeil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

TEST(ActivationOffloadTest, TwoBlocksStayOnTheGpuAndTheOthersArePinnedOnTheHost) {
  const model::ModelSpec spec = model::FindModelPreset("llama3-8b");
  const profiles::ClusterSpec c = profiles::ParseClusterShorthand("8xH100");
  const int L = spec.num_layers;
  const model::Plan base_plan = Llama8bPlan(model::ActivationOffload::kNone);
  const model::Plan off_plan = Llama8bPlan(model::ActivationOffload::kVerlAsync);
  const model::BlockActivations blk =
      model::ComputeBlockActivations(spec, model::ActivationOptionsFor(base_plan, kTokens));
  const auto block_saved = static_cast<int64_t>(blk.full.saved_per_token * kTokens);
  MemoryOptions o;
  const MemoryEstimate base = EstimateMemoryWithProgram(spec, c, base_plan, o);
  const MemoryEstimate off = EstimateMemoryWithProgram(spec, c, off_plan, o);
  const std::string saved = "activations saved for backward";
  // Without offload every block's saved tensors are alive at the forward's end.
  ASSERT_EQ(CategoryPeak(base.report, saved).count(), L * block_saved);
  // With it: the block computing and the one whose copy is in flight (forward: layer_window_map
  // frees block b-1 at block b's commit; backward: block b-1 is reloaded while b computes).
  EXPECT_EQ(CategoryPeak(off.report, saved).count(), 2 * block_saved);
  EXPECT_LT(off.report.peak_allocated, base.report.peak_allocated);
  // Pinned host copies: one CachingHostAllocator block per saved tensor, rounded up to a power of
  // two, for every block but the last; the node's 8 ranks each hold theirs.
  int64_t per_block_pinned = 0;
  for (const auto& t : blk.full.saved) per_block_pinned += PowerOfTwoCeil(static_cast<int64_t>(t.bytes_per_token * kTokens));
  EXPECT_EQ(off.report.activation_offload_pinned.count(), (L - 1) * per_block_pinned);
  EXPECT_EQ(base.report.activation_offload_pinned.count(), 0);
  // Host RAM per node: the training phases list them, model load does not (no forward yet).
  const JobPhases phases = EstimateJobPhases(off.program, off.report, spec, c, off_plan, o);
  for (const PhaseMemory& ph : phases.phases) {
    Bytes listed;
    for (const auto& [name, bytes] : ph.host_breakdown) {
      if (name.find("offloaded activations") != std::string::npos) listed = bytes;
    }
    const bool training = ph.phase == JobPhase::kStep0 || ph.phase == JobPhase::kSteady;
    if (training) EXPECT_EQ(listed.count(), 8 * (L - 1) * per_block_pinned) << ToString(ph.phase);
    if (ph.phase == JobPhase::kLoad || ph.phase == JobPhase::kResume) EXPECT_EQ(listed.count(), 0);
  }
  // One copy out and one back per offloaded block, micro-batch and step (two steps walked).
  int d2h = 0, h2d = 0;
  for (const ProgramOp& op : off.program.ops) {
    if (op.unit >= 0) continue;  // FSDP's own offload copies name their unit
    d2h += op.kind == OpKind::kDeviceToHost;
    h2d += op.kind == OpKind::kHostToDevice;
  }
  EXPECT_EQ(d2h, 2 * base_plan.grad_accum * (L - 1));
  EXPECT_EQ(h2d, 2 * base_plan.grad_accum * (L - 1));
  // The planner's lower bound stays below the walk's peak.
  ModelCache cache;
  EXPECT_LE(AllocatedLowerBound(spec, c, off_plan, o, &cache), off.report.peak_allocated);
}

// --activation-offload first:K (issue #46): the handler over the first K blocks and the one after,
// which closes the last group. At the forward's end every offloaded block is off the GPU (block
// K's commit dropped block K-1's copy source) and the L - K others keep theirs; in backward two
// blocks are on the GPU at a time (the one computing, the one coming back), so the saved
// tensors peak at max(L - K, 2) blocks. K blocks are pinned on the host, and K copies go out and
// come back per micro-batch. K = L - 1 is verl's own.
TEST(ActivationOffloadTest, TheFirstKBlocksOffloadAndTheRestKeepTheirs) {
  const model::ModelSpec spec = model::FindModelPreset("llama3-8b");
  const profiles::ClusterSpec c = profiles::ParseClusterShorthand("8xH100");
  const int L = spec.num_layers;
  model::Plan plan = Llama8bPlan(model::ActivationOffload::kVerlAsync);
  const model::BlockActivations blk = model::ComputeBlockActivations(spec, model::ActivationOptionsFor(plan, kTokens));
  const auto block_saved = static_cast<int64_t>(blk.full.saved_per_token * kTokens);
  int64_t per_block_pinned = 0;
  for (const auto& t : blk.full.saved) per_block_pinned += PowerOfTwoCeil(static_cast<int64_t>(t.bytes_per_token * kTokens));
  MemoryOptions o;
  const MemoryEstimate verl = EstimateMemoryWithProgram(spec, c, plan, o);
  const std::string saved = "activations saved for backward";
  Bytes last_peak;
  for (int k : {4, 16, L - 1}) {
    plan.activation_offload_blocks = k;
    const MemoryEstimate est = EstimateMemoryWithProgram(spec, c, plan, o);
    EXPECT_EQ(CategoryPeak(est.report, saved).count(), std::max(L - k, 2) * block_saved) << k;
    EXPECT_EQ(est.report.activation_offload_pinned.count(), k * per_block_pinned) << k;
    int d2h = 0;
    for (const ProgramOp& op : est.program.ops) d2h += op.unit < 0 && op.kind == OpKind::kDeviceToHost;
    EXPECT_EQ(d2h, 2 * plan.grad_accum * k) << k;
    if (k > 4) EXPECT_LT(est.report.peak_allocated, last_peak) << k;
    last_peak = est.report.peak_allocated;
  }
  EXPECT_EQ(last_peak, verl.report.peak_allocated);  // first:(L-1) is verl's every block but the last
}

TEST(ActivationOffloadTest, FewerThanThreeLayersOffloadNothing) {
  // enable_activation_offloading: "Find only N fsdp layers, not necessary to enable async
  // activation offloading" below three layers, and returns without hooks.
  model::ModelSpec spec = model::FindModelPreset("llama3-8b");
  spec.num_layers = 2;
  spec.FillDefaults();
  const profiles::ClusterSpec c = profiles::ParseClusterShorthand("8xH100");
  MemoryOptions o;
  const MemoryReport base = EstimateMemory(spec, c, Llama8bPlan(model::ActivationOffload::kNone), o);
  const MemoryReport off = EstimateMemory(spec, c, Llama8bPlan(model::ActivationOffload::kVerlAsync), o);
  EXPECT_EQ(off.peak_allocated, base.peak_allocated);
  EXPECT_EQ(off.activation_offload_pinned.count(), 0);
}

TEST(ActivationOffloadTest, OnlyBlockWrappingOffloads) {
  model::Plan p = Llama8bPlan(model::ActivationOffload::kVerlAsync);
  p.wrap = model::ParseWrapSpec("every:2", "--wrap");
  const auto problems = p.Problems("plan", 8, 8, 32, 8192);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("plan:/activation_offload: expected none unless wrap is block"), std::string::npos)
      << problems[0];
  EXPECT_NE(problems[0].find("got verl_async with wrap every:2"), std::string::npos) << problems[0];
}

}  // namespace
}  // namespace shardtune::sim
