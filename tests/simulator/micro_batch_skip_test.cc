// The planner's memory screening walks micro-batches 1, 2 and the last only
// (MemoryOptions::skip_repeated_micro_batches): over random plans, its report must equal the full
// walk's field for field, and its step-time lower bound must equal the full program's.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "model/trainable.h"
#include "profiles/cluster.h"
#include "simulator/allocator_sim.h"
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
  testing::SeededRng rng(20261124);
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  MemoryOptions full;
  full.allocator_replay = false;
  MemoryOptions skip = full;
  skip.skip_repeated_micro_batches = true;
  int skipped_plans = 0, same_bound = 0, valid_plans = 0;
  for (int i = 0; i < 60; ++i) {
    Plan p = RandomPlan(rng);
    if (!testing::Valid(p, spec, cluster)) continue;
    ++valid_plans;
    SCOPED_TRACE("plan " + std::to_string(i) + " grad_accum " + std::to_string(p.grad_accum));
    MemoryEstimate a = EstimateMemoryWithProgram(spec, cluster, p, full, false);
    MemoryEstimate b = EstimateMemoryWithProgram(spec, cluster, p, skip, false);
    auto ja = MemoryReportToJson(a.report, true, ""), jb = MemoryReportToJson(b.report, true, "");
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
    // program. The screening program's bound runs its recurrence over every copy of the repeated
    // micro-batch, each copy depending on the one before as the full program's micro-batches do,
    // so it is the full program's bound; it may be lower (a dependency the copies cannot map),
    // never higher.
    SimOptions o;
    o.memory = full;
    SimContext ctx(cluster);
    StepTimeBound la = StepLowerBound(a, spec, cluster, p, o, &ctx);
    StepTimeBound lb = StepLowerBound(b, spec, cluster, p, o, &ctx);
    EXPECT_LE(lb.seconds, la.seconds) << lb.resource << " vs " << la.resource;
    if (lb.seconds == la.seconds) ++same_bound;
    SimReport r = SimulateProgram(std::move(a), spec, cluster, p, o, &ctx);
    EXPECT_LE(la.seconds, r.step_time.count()) << la.resource;
    EXPECT_GT(lb.seconds, 0.0);
    if (p.grad_accum <= kWalkedLeadingMicroBatches + 1) {
      EXPECT_DOUBLE_EQ(la.seconds, lb.seconds);  // nothing left out: the same program
    }
  }
  EXPECT_GT(skipped_plans, 5);
  EXPECT_EQ(same_bound, valid_plans);
}

// The forward-end bound (AllocatedLowerBound) never exceeds the walk's allocated peak, over
// random plans of a dense model, an MoE model with per-expert units, frozen prefixes and
// inference roles (the search rules plans out on it without walking them).
TEST(MicroBatchSkipTest, ForwardEndBoundNeverExceedsTheWalk) {
  testing::SeededRng rng(20261125);
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  MemoryOptions o;
  o.allocator_replay = false;
  o.skip_repeated_micro_batches = true;
  int checked = 0, backward_binds = 0;
  for (const char* name : {"llama3.2-1b", "mixtral-8x7b", "gpt2"}) {
    auto spec = model::FindModelPreset(name);
    if (spec.num_layers > 8) spec.num_layers = 8;  // the rules are per block: fewer walk faster
    for (int i = 0; i < 40; ++i) {
      Plan p = RandomPlan(rng);
      if (spec.moe.enabled()) p.wrap.expert_units = rng() % 2 == 0;
      if (rng() % 5 == 0) p.frozen_prefixes = {"model.embed_tokens", "model.layers.0."};
      if (rng() % 6 == 0) p.role = model::Role::kInfer;
      if (!testing::Valid(p, spec, cluster) ||
          !model::TrainabilityProblems(spec, p, p.seq_len, "plan").empty()) {
        continue;
      }
      SCOPED_TRACE(std::string(name) + " plan " + std::to_string(i));
      ModelCache cache;
      MemoryEstimate est = EstimateMemoryWithProgram(spec, cluster, p, o, false, &cache);
      ForwardEndBound parts;
      Bytes bound = AllocatedLowerBound(spec, cluster, p, o, &cache, &parts);
      const bool pre = p.backward_prefetch == model::BackwardPrefetch::kPre;
      EXPECT_EQ(bound.count(), parts.total(pre));
      EXPECT_LE(bound, est.report.peak_allocated);
      // The backward moments are modelled for dense training of every parameter.
      bool modelled = p.Trains() && !model::ChangesTrainability(spec, p) && !spec.moe.enabled();
      EXPECT_EQ(parts.backward_states_bytes.size(),
                modelled ? static_cast<size_t>(spec.num_layers) : 0u);
      if (parts.backward(pre) > parts.forward_end()) ++backward_binds;
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
  // The backward moments are what binds for some plans (the bound is not the forward end's alone).
  EXPECT_GT(backward_binds, 5);
}

// A micro-batch's collectives move parameters and gradients, not activations: the planner bounds
// a plan's all-gather and reduce-scatter transfers by its micro-batch count times the least one
// micro-batch of another plan moves (StepTimeBound::*_per_micro_batch_ns). Over random plans:
// that product never exceeds the plan's own transfers (equals them without no_sync), and the
// per-micro-batch figure is the same at twice the micro-batch and half the accumulation.
TEST(MicroBatchSkipTest, CollectivesPerMicroBatchDoNotDependOnItsSize) {
  testing::SeededRng rng(20261125);
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto cluster = profiles::ParseClusterShorthand("2x8xH100-ib400");
  testing::RandomPlanSpace space;
  space.grad_accums = {2, 4, 6, 8};
  space.hybrid_groups = {8};
  MemoryOptions mo;
  mo.allocator_replay = false;
  mo.skip_repeated_micro_batches = true;
  SimOptions o;
  o.memory = mo;
  int checked = 0;
  for (int i = 0; i < 40; ++i) {
    Plan p = RandomPlan(rng, space);
    Plan q = p;  // the same tokens in micro-batches twice as large
    q.micro_batch = 2 * p.micro_batch;
    q.grad_accum = p.grad_accum / 2;
    if (!testing::Valid(p, spec, cluster) || !testing::Valid(q, spec, cluster)) continue;
    SCOPED_TRACE("plan " + std::to_string(i));
    SimContext ctx(cluster);
    StepTimeBound a = StepLowerBound(EstimateMemoryWithProgram(spec, cluster, p, mo, false), spec,
                                     cluster, p, o, &ctx);
    StepTimeBound b = StepLowerBound(EstimateMemoryWithProgram(spec, cluster, q, mo, false), spec,
                                     cluster, q, o, &ctx);
    EXPECT_EQ(a.all_gather_per_micro_batch_ns, b.all_gather_per_micro_batch_ns);
    // So do the per-unit kernels on the compute stream (copy-outs, post-backward) and the GPU optimizer step, which
    // the planner adds to the compute bound from another plan of the same units.
    EXPECT_EQ(a.unit_kernels_per_micro_batch_ns, b.unit_kernels_per_micro_batch_ns);
    EXPECT_EQ(a.gpu_optimizer_s, b.gpu_optimizer_s);
    EXPECT_LE(static_cast<double>(p.grad_accum * a.unit_kernels_per_micro_batch_ns) * 1e-9,
              a.unit_kernels_s);
    EXPECT_LE(a.segment_compute_s + a.unit_kernels_s + a.gpu_optimizer_s, a.compute_s * (1 + 1e-12));
    // Under no_sync only the last micro-batch reduces: the least is 0 with two or more, that
    // micro-batch's with one (the planner then counts one reduction, never more).
    if (!p.no_sync) {
      EXPECT_EQ(a.reduce_scatter_per_micro_batch_ns, b.reduce_scatter_per_micro_batch_ns);
    } else {
      EXPECT_LE(a.reduce_scatter_per_micro_batch_ns, b.reduce_scatter_per_micro_batch_ns);
      EXPECT_LE(static_cast<double>(b.reduce_scatter_per_micro_batch_ns) * 1e-9,
                a.reduce_scatter_transfer_s);
    }
    double ag = static_cast<double>(p.grad_accum * a.all_gather_per_micro_batch_ns) * 1e-9;
    double rs = static_cast<double>((p.no_sync ? 1 : p.grad_accum) *
                                    a.reduce_scatter_per_micro_batch_ns) * 1e-9;
    EXPECT_LE(ag, a.all_gather_transfer_s);
    EXPECT_LE(rs, a.reduce_scatter_transfer_s);
    if (!p.no_sync) {
      EXPECT_EQ(ag, a.all_gather_transfer_s);
      EXPECT_EQ(rs, a.reduce_scatter_transfer_s);
    }
    ++checked;
  }
  EXPECT_GT(checked, 15);
}

// The caching-allocator replay of a walk that left out repeated micro-batches (allocator_sim.h
// ReplayAllocator: the copies replayed from their template until the allocator's layout
// repeats): every figure equals the full program's replay, free and pressed under a capacity
// that forces cache releases, and so does the estimate's report.
TEST(MicroBatchSkipTest, AllocatorReplayOfTheShortProgramEqualsTheFullOne) {
  testing::SeededRng rng(20261125);
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  testing::RandomPlanSpace space;
  space.grad_accums = {5, 6, 8, 12};
  MemoryOptions full;  // the allocator replay is on by default
  MemoryOptions skip = full;
  skip.skip_repeated_micro_batches = true;
  int verified = 0, pressed_checked = 0, retried = 0;
  for (int i = 0; i < 60; ++i) {
    Plan p = RandomPlan(rng, space);
    if (!testing::Valid(p, spec, cluster)) continue;
    SCOPED_TRACE("plan " + std::to_string(i) + " grad_accum " + std::to_string(p.grad_accum));
    MemoryEstimate a = EstimateMemoryWithProgram(spec, cluster, p, full, false);
    MemoryEstimate b = EstimateMemoryWithProgram(spec, cluster, p, skip, false);
    ASSERT_TRUE(a.report.allocator_replayed);
    EXPECT_EQ(MemoryReportToJson(a.report, true, "").dump(), MemoryReportToJson(b.report, true, "").dump());
    if (b.program.repeats_of_last_leading_micro_batch == 0) continue;  // fell back: full program
    ++verified;
    AllocatorReplay ra = ReplayAllocator(a.program), rb = ReplayAllocator(b.program);
    ASSERT_TRUE(rb.repeats_verified);
    EXPECT_EQ(ra.reserved_peak_bytes, rb.reserved_peak_bytes);
    EXPECT_EQ(ra.reserved_step0_bytes, rb.reserved_step0_bytes);
    EXPECT_EQ(ra.reserved_steady_bytes, rb.reserved_steady_bytes);
    EXPECT_EQ(ra.allocated_peak_bytes, rb.allocated_peak_bytes);
    EXPECT_EQ(ra.segments, rb.segments);
    EXPECT_EQ(ra.reserved_at_allocated_peak_bytes, rb.reserved_at_allocated_peak_bytes);
    EXPECT_EQ(ra.free_at_allocated_peak_bytes, rb.free_at_allocated_peak_bytes);
    EXPECT_EQ(ra.largest_free_block_bytes, rb.largest_free_block_bytes);
    // Under pressure: a capacity between the allocated and the reserved peak makes the allocator
    // release its cache and retry, perhaps in every micro-batch.
    int64_t cap = ra.allocated_peak_bytes + (ra.reserved_peak_bytes - ra.allocated_peak_bytes) / 3;
    AllocatorReplay pa = ReplayAllocator(a.program, cap), pb = ReplayAllocator(b.program, cap);
    if (!pb.repeats_verified) continue;
    ++pressed_checked;
    if (pa.retries > 0) ++retried;
    EXPECT_EQ(pa.out_of_memory, pb.out_of_memory);
    if (pa.out_of_memory) continue;  // the failed request lies in the walked leading copies
    EXPECT_EQ(pa.retries, pb.retries);
    EXPECT_EQ(pa.reserved_peak_bytes, pb.reserved_peak_bytes);
    EXPECT_EQ(pa.reserved_steady_bytes, pb.reserved_steady_bytes);
    EXPECT_EQ(pa.segments, pb.segments);
  }
  // Seed 20261125: all 60 plans kept the short program and matched free and pressed (each
  // pressed replay retried).
  EXPECT_GT(verified, 30);
  EXPECT_GT(pressed_checked, 30);
  EXPECT_GT(retried, 30);
}

// A short program whose last leading micro-batch is not self-contained (here it keeps a tensor for
// good, which each copy would add to) cannot stand for the copies: reported unverified.
TEST(MicroBatchSkipTest, AllocatorReplayRefusesATemplateThatIsNotSelfContained) {
  StepProgram p;
  p.grad_accum = 6;
  p.repeats_of_last_leading_micro_batch = 6 - kWalkedLeadingMicroBatches - 1;
  for (int micro : {0, 1, 2, 5}) {
    ProgramOp o;
    o.kind = OpKind::kForward;
    o.step = 0;
    o.micro = static_cast<int16_t>(micro);
    p.ops.push_back(o);
    auto op = static_cast<uint32_t>(p.ops.size() - 1);
    int32_t act = p.num_tensor_ids++;
    p.tensors.push_back({op, act, 64 << 20, Stream::kDefault});
    p.tensors.push_back({op, act, 0, Stream::kDefault});
    if (micro == 2) p.tensors.push_back({op, p.num_tensor_ids++, 64 << 20, Stream::kDefault});
  }
  EXPECT_FALSE(ReplayAllocator(p).repeats_verified);
  p.tensors.clear();
  p.num_tensor_ids = 0;
  for (uint32_t op = 0; op < p.ops.size(); ++op) {  // the same micro-batches, nothing kept
    int32_t act = p.num_tensor_ids++;
    p.tensors.push_back({op, act, 64 << 20, Stream::kDefault});
    p.tensors.push_back({op, act, 0, Stream::kDefault});
  }
  EXPECT_TRUE(ReplayAllocator(p).repeats_verified);
}

// A timeline needs every op: the option is ignored for it. The replay keeps the short program
// when the allocator repeats itself (this plan: it does).
TEST(MicroBatchSkipTest, IgnoredWhenTheProgramIsShown) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  Plan p;
  p.grad_accum = 6;
  p.seq_len = 512;
  MemoryOptions o;
  o.skip_repeated_micro_batches = true;
  const int repeats = 6 - kWalkedLeadingMicroBatches - 1;
  EXPECT_EQ(EstimateMemoryWithProgram(spec, cluster, p, o, false).program.repeats_of_last_leading_micro_batch, repeats);
  EXPECT_EQ(EstimateMemoryWithProgram(spec, cluster, p, o, true).program.repeats_of_last_leading_micro_batch, 0);
  o.allocator_replay = false;
  EXPECT_EQ(EstimateMemoryWithProgram(spec, cluster, p, o, true).program.repeats_of_last_leading_micro_batch, 0);
  EXPECT_EQ(EstimateMemoryWithProgram(spec, cluster, p, o, false).program.repeats_of_last_leading_micro_batch, repeats);
}

}  // namespace
}  // namespace shardtune::sim
