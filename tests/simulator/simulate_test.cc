// FSDP semantics of the simulated step, one test each, and properties of the time model.
#include "simulator/simulate.h"

#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "model/module_tree.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::sim {
namespace {

model::Plan Plan(int64_t seq = 512) {
  model::Plan p;
  p.seq_len = seq;
  return p;
}

int Count(const SimReport& r, OpKind k, int step = 1, int micro = -1) {
  int n = 0;
  for (const auto& op : r.program.ops) {
    n += op.kind == k && op.step == step && (micro < 0 || op.micro == micro);
  }
  return n;
}

// llama3-8b's step at 2048 tokens on `cluster` under backward prefetch `prefetch` (the prefetch
// tests compare the policies on one model and cluster).
SimReport Llama8bStepUnderPrefetch(const std::string& cluster, model::BackwardPrefetch prefetch) {
  model::Plan p = Plan(2048);
  p.backward_prefetch = prefetch;
  return SimulateStep(model::FindModelPreset("llama3-8b"), profiles::ParseClusterShorthand(cluster),
                      p);
}

int Units(const model::ModelSpec& s, const model::Plan& p) {
  return static_cast<int>(model::BuildFsdpUnits(s, p.wrap).size());
}

// FULL_SHARD: every unit is all-gathered for forward and, being resharded, again for backward;
// the root stays gathered, so it is gathered once.
TEST(SimulateTest, FullShardGathersTwicePerUnitExceptRoot) {
  auto s = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  auto r = SimulateStep(s, c, Plan());
  int u = Units(s, Plan());
  EXPECT_EQ(Count(r, OpKind::kAllGather), 2 * (u - 1) + 1);
  EXPECT_EQ(Count(r, OpKind::kReduceScatter), u);
}

TEST(SimulateTest, ShardGradOpGathersOncePerUnit) {
  auto s = model::FindModelPreset("llama3.2-1b");
  model::Plan p = Plan();
  p.strategy = model::ShardingStrategy::kShardGradOp;
  p.reshard_after_forward = false;
  auto r = SimulateStep(s, profiles::ParseClusterShorthand("8xH100"), p);
  EXPECT_EQ(Count(r, OpKind::kAllGather), Units(s, p));
}

// Accumulation: without no_sync every micro-batch reduce-scatters; with it only the last does.
TEST(SimulateTest, NoSyncReducesOnlyOnTheLastMicroBatch) {
  auto s = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan p = Plan();
  p.grad_accum = 3;
  int u = Units(s, p);
  auto sync = SimulateStep(s, c, p);
  EXPECT_EQ(Count(sync, OpKind::kReduceScatter), 3 * u);
  p.no_sync = true;
  auto nosync = SimulateStep(s, c, p);
  EXPECT_EQ(Count(nosync, OpKind::kReduceScatter, 1, 0), 0);
  EXPECT_EQ(Count(nosync, OpKind::kReduceScatter, 1, 2), u);
}

// HSDP: reduce-scatter in the shard group, then all-reduce of the shard across replicas.
TEST(SimulateTest, HybridShardAllReducesAcrossReplicas) {
  auto s = model::FindModelPreset("llama3.2-1b");
  model::Plan p = Plan();
  p.strategy = model::ShardingStrategy::kHybridShard;
  auto r = SimulateStep(s, profiles::ParseClusterShorthand("2x8xH100"), p);
  int u = Units(s, p);
  EXPECT_EQ(Count(r, OpKind::kReduceScatter), u);
  EXPECT_EQ(Count(r, OpKind::kAllReduce), u);
  for (const auto& op : r.program.ops) {
    if (op.kind == OpKind::kAllReduce) {
      EXPECT_EQ(op.group, 1);
    }
  }
}

// The optimizer step waits for the last gradient reduction of the step.
TEST(SimulateTest, OptimizerStartsAfterTheLastReduction) {
  auto s = model::FindModelPreset("llama3.2-1b");
  auto r = SimulateStep(s, profiles::ParseClusterShorthand("8xH100"), Plan());
  int64_t last_rs = 0, opt_start = -1;
  for (size_t i = 0; i < r.program.ops.size(); ++i) {
    const auto& op = r.program.ops[i];
    if (op.step != 1) continue;
    if (op.kind == OpKind::kReduceScatter) last_rs = std::max(last_rs, r.schedule.end_ns[i]);
    if (op.kind == OpKind::kOptimizer) opt_start = r.schedule.start_ns[i];
  }
  EXPECT_GE(opt_start, last_rs);
}

// CPU offload: the optimizer step runs on the host at the probe's host AdamW rate. With one GPU
// per node the rank has the node's whole rate; with 8, an eighth (the ranks share the host's
// memory bandwidth): 80 bytes of foreach traffic per trainable element over it.
TEST(SimulateTest, OffloadedOptimizerTakesTheMeasuredHostRate) {
  auto s = model::FindModelPreset("llama3.2-1b");
  const double node_bytes_per_s = 40e9;
  profiles::KernelTables t;
  const int64_t n = int64_t{1} << 27;
  t.memory = {{profiles::MemoryKernel::kHostAdamwForeach, 16 * n,
               Seconds::Of(80.0 * static_cast<double>(n) / node_bytes_per_s)}};
  SimOptions o;
  o.costs.tables = std::make_shared<profiles::KernelTables>(t);
  model::Plan p = Plan();
  p.offload = model::Offload::kAll;
  for (const char* cluster : {"1xH100", "8xH100"}) {
    profiles::ClusterSpec c = profiles::ParseClusterShorthand(cluster);
    auto r = SimulateStep(s, c, p, o);
    double host_s = -1;
    for (size_t i = 0; i < r.program.ops.size(); ++i) {
      const auto& op = r.program.ops[i];
      if (op.step == 1 && op.kind == OpKind::kOptimizer) {
        host_s = static_cast<double>(r.schedule.end_ns[i] - r.schedule.start_ns[i]) * 1e-9;
      }
    }
    const double shard = static_cast<double>(model::ParameterCount(s)) / c.world_size();
    EXPECT_NEAR(host_s, 80.0 * shard / (node_bytes_per_s / c.gpus_per_node), 2e-3 * host_s) << cluster;
  }
}

// Backward prefetch: with BACKWARD_PRE the next unit's all-gather is issued at this unit's
// pre-backward and overlaps its compute; with none it waits for that compute to end.
TEST(SimulateTest, BackwardPrefetchOverlapsTheNextAllGather) {
  // One 100 Gb/s NIC per node: communication-bound, so what prefetch hides shows (eight rail
  // NICs carry 384 GB/s and hide every all-gather behind backward either way).
  const std::string cluster = "2x8xH100-roce100/node";
  auto a = Llama8bStepUnderPrefetch(cluster, model::BackwardPrefetch::kPre);
  auto b = Llama8bStepUnderPrefetch(cluster, model::BackwardPrefetch::kNone);
  EXPECT_LT(a.step_time.count(), b.step_time.count());
  EXPECT_LE(a.exposed_comm.count(), b.exposed_comm.count());
}

TEST(SimulateTest, EstimateAndSimulateAgreeOnThePeak) {
  auto s = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan p = Plan(4096);
  p.grad_accum = 2;
  auto sim = SimulateStep(s, c, p);
  auto est = EstimateMemory(s, c, p);
  EXPECT_EQ(sim.memory.peak_allocated, est.peak_allocated);
  EXPECT_EQ(sim.memory.peak_phase, est.peak_phase);
}

// A serial case: one GPU, fp32 params (no gather copy), NO_SHARD: every op is on the compute
// stream. With memory-bound and attention work made free, the step is the matmul FLOPs of
// forward (2 per weight per token) and backward (4) for blocks and LM head over peak x eff.
TEST(SimulateTest, SerialCaseEqualsClosedForm) {
  auto s = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("1xH100");
  model::Plan p = Plan(256);
  p.strategy = model::ShardingStrategy::kNoShard;
  p.param_dtype = model::DType::kFp32;
  SimOptions o;
  o.costs.memory_efficiency = 1e12;
  o.costs.attention_efficiency = 1e12;
  o.costs.host_per_kernel = Seconds::Of(0);  // the GPU-bound closed form: no host issue time
  o.costs.host_per_backward_kernel = Seconds::Of(0);
  o.costs.host_per_optimizer_param = Seconds::Of(0);
  o.costs.host_per_fsdp_hook = Seconds::Of(0);
  o.costs.host_per_fsdp_hook_one_rank = Seconds::Of(0);
  auto r = SimulateStep(s, c, p, o);
  double h = static_cast<double>(s.hidden), kv = static_cast<double>(s.kv_dim());
  double block_w = 2 * h * h + 2 * h * kv + 3 * h * static_cast<double>(s.ffn_hidden);
  double head_w = static_cast<double>(s.vocab_size) * h;
  double tokens = 256;
  double flops = 6 * (block_w * s.num_layers + head_w) * tokens;
  double expected = flops / (c.gpu.tf32_dense.count() * o.costs.matmul_efficiency);
  EXPECT_NEAR(r.step_time.count(), expected, expected * 1e-3 + 1e-8);
  EXPECT_NEAR(r.exposed_comm.count(), 0, 1e-8);
}

// Properties: more FLOP/s or more bandwidth never makes a step slower; results are repeatable.
// A launch-bound step: tiny-llama at 256 tokens is microseconds of GPU work, so the step is
// the host's issue time: per step, forward kernels x host_per_kernel (Python), backward kernels
// x host_per_backward_kernel (the autograd engine), the optimizer's parameter tensors x
// host_per_optimizer_param, plus one FSDP2 hook (one-rank mesh) per unit for pre-forward,
// pre-backward and post-backward each; the GPU adds at most the last op's work.
TEST(SimulateTest, LaunchBoundStepIsTheHostTime) {
  auto s = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("1xH100");
  model::Plan p = Plan(256);
  SimOptions o;
  auto r = SimulateStep(s, c, p, o);
  int64_t forward = 0, backward = 0, params = 0, hooks = 0;
  for (const auto& op : r.program.ops) {
    if (op.step != 1) continue;
    if (op.kind == OpKind::kBackward) backward += op.host_kernels;
    else if (op.kind == OpKind::kOptimizer) params += op.host_params;
    else forward += op.host_kernels;
    hooks += op.host_hooks;
  }
  ASSERT_GT(backward, forward);
  ASSERT_GT(params, 0);
  double host = forward * o.costs.host_per_kernel.count() + backward * o.costs.host_per_backward_kernel.count() +
                params * o.costs.host_per_optimizer_param.count() +
                hooks * o.costs.host_per_fsdp_hook_one_rank.count();
  EXPECT_GE(r.step_time.count(), host);
  EXPECT_LE(r.step_time.count(), host * 1.05);
  int units = static_cast<int>(r.memory.units.size());
  EXPECT_GE(hooks, 3 * units - 1);  // the root is gathered once per step (not resharded)
}

// FSDP2's root final callback calls post_backward on every unit; one backward never reached
// (a frozen prefix, resharded after forward) has no gradient to reduce and nothing to reshard and
// returns, so its post-backward charges no hook. A frozen block after a trainable one is reached
// (gradients flow through it): it was all-gathered again and is resharded by its hook.
TEST(SimulateTest, OnlyUnitsBackwardReachesChargeAPostBackwardHook) {
  auto s = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("1x8xH100");
  auto hooks_by_unit = [&](const model::Plan& p) {
    SimReport r = SimulateStep(s, c, p, SimOptions{});
    std::map<std::string, int> hooks;
    for (const auto& op : r.program.ops) {
      if (op.step != 1 || op.kind != OpKind::kPostBackward || op.unit < 0) continue;
      hooks[r.memory.units[static_cast<size_t>(op.unit)].name] += op.host_hooks;
    }
    return hooks;
  };
  model::Plan prefix = Plan(256);
  prefix.frozen_prefixes = {"model.embed_tokens", "model.layers.0.", "model.layers.1."};
  std::map<std::string, int> h = hooks_by_unit(prefix);
  ASSERT_TRUE(h.count("model.layers.0") && h.count("model.layers.2"));
  EXPECT_EQ(h["model.layers.0"], 0);
  EXPECT_EQ(h["model.layers.1"], 0);
  EXPECT_EQ(h["model.layers.2"], 1);
  model::Plan middle = Plan(256);
  middle.frozen_prefixes = {"model.layers.1."};
  h = hooks_by_unit(middle);
  EXPECT_EQ(h["model.layers.0"], 1);
  EXPECT_EQ(h["model.layers.1"], 1);
  EXPECT_EQ(h["model.layers.2"], 1);
}

TEST(SimulateTest, StepTimeMonotoneInHardware) {
  testing::SeededRng rng(7);
  auto s = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("2x8xH100");
  for (int i = 0; i < 6; ++i) {
    model::Plan p = Plan(256 << (rng() % 3));
    p.micro_batch = 1 + static_cast<int>(rng() % 3);
    p.grad_accum = 1 + static_cast<int>(rng() % 2);
    SimOptions base, faster_gpu, faster_net;
    faster_gpu.costs.matmul_efficiency *= 1.2;
    faster_net.costs.network_efficiency *= 1.2;
    faster_net.costs.nvlink_efficiency *= 1.1;
    double t = SimulateStep(s, c, p, base).step_time.count();
    EXPECT_LE(SimulateStep(s, c, p, faster_gpu).step_time.count(), t);
    EXPECT_LE(SimulateStep(s, c, p, faster_net).step_time.count(), t);
    EXPECT_EQ(SimulateStep(s, c, p, base).step_time.count(), t);
  }
}

}  // namespace
}  // namespace shardtune::sim

namespace shardtune::sim {
namespace {

Bytes AgPeak(const SimReport& r) {
  for (const auto& kv : r.memory.category_peaks) {
    if (kv.first == "all-gather buffers") return kv.second;
  }
  return Bytes();
}

// Explicit forward prefetch with a limit of N in-flight all-gathers keeps up to N-1 units'
// flat buffers ahead of the one computing: raising the limit raises the all-gather buffer peak.
TEST(SimulateTest, InflightAllGatherLimitBoundsPrefetchedBuffers) {
  auto s = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan two = Plan(1024);
  two.forward_prefetch = true;
  two.max_inflight_allgathers = 2;
  model::Plan four = two;
  four.max_inflight_allgathers = 4;
  auto a = SimulateStep(s, c, two), b = SimulateStep(s, c, four);
  EXPECT_GT(AgPeak(b), AgPeak(a));
  EXPECT_EQ(Count(a, OpKind::kAllGather), Count(b, OpKind::kAllGather));
}

// BACKWARD_POST issues the next all-gather only after this unit's gradients are computed, so it
// cannot overlap that compute: never faster than BACKWARD_PRE.
TEST(SimulateTest, BackwardPostPrefetchesLaterThanPre) {
  SimReport pre = Llama8bStepUnderPrefetch("2x8xH100", model::BackwardPrefetch::kPre);
  SimReport post = Llama8bStepUnderPrefetch("2x8xH100", model::BackwardPrefetch::kPost);
  EXPECT_LE(pre.step_time.count(), post.step_time.count());
  EXPECT_EQ(Count(post, OpKind::kAllGather), Count(pre, OpKind::kAllGather));
}

}  // namespace
}  // namespace shardtune::sim

namespace shardtune::sim {
namespace {

// SimOptions::steady_step_only schedules step 1 alone: every step-1 figure must equal the full
// schedule's, over random plans (strategies, offload, prefetch, cp, LoRA) on one and two nodes,
// also when step 0's repeated micro-batches were not walked (the planner's simulations).
TEST(SimulateTest, SteadyStepAloneGivesTheSameFigures) {
  testing::SeededRng rng(20261125);
  auto spec = model::FindModelPreset("llama3.2-1b");
  int checked = 0;
  for (const char* name : {"8xH100", "2x8xH100-ib400"}) {
    auto cluster = profiles::ParseClusterShorthand(name);
    testing::RandomPlanSpace space;
    space.hybrid_groups = {2, 8};
    for (int i = 0; i < 30; ++i) {
      model::Plan p = testing::RandomPlan(rng, space);
      if (!testing::Valid(p, spec, cluster)) continue;
      SCOPED_TRACE(std::string(name) + " plan " + std::to_string(i));
      SimOptions full;
      full.memory.allocator_replay = false;
      full.with_timeline = false;
      SimOptions steady = full;
      steady.steady_step_only = true;
      // As the planner runs it: step 0's repeated micro-batches left out too.
      steady.memory.skip_repeated_micro_batches_in_step0 = i % 2 == 0;
      SimReport a = SimulateStep(spec, cluster, p, full);
      SimReport b = SimulateStep(spec, cluster, p, steady);
      if (steady.memory.skip_repeated_micro_batches_in_step0 && p.grad_accum > 4) {
        EXPECT_GT(b.program.repeats_in_step0, 0);
        EXPECT_LT(b.program.ops.size(), a.program.ops.size());
      }
      EXPECT_EQ(a.memory.required, b.memory.required);
      EXPECT_EQ(a.memory.peak_phase, b.memory.peak_phase);
      EXPECT_EQ(a.step_time.count(), b.step_time.count());
      EXPECT_EQ(a.compute.count(), b.compute.count());
      EXPECT_EQ(a.exposed_comm.count(), b.exposed_comm.count());
      EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
      EXPECT_EQ(a.mfu, b.mfu);
      EXPECT_EQ(a.phases, b.phases);
      EXPECT_EQ(a.time_by_category, b.time_by_category);
      EXPECT_EQ(a.all_to_all.count(), b.all_to_all.count());
      if (a.memory.peak_phase.rfind("step 1", 0) == 0) {
        EXPECT_EQ(a.peak_time.count(), b.peak_time.count());
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace shardtune::sim

namespace shardtune::sim {
namespace {

// One sequence of 2048 tokens under torchtitan's modeling and checkpointing `ck`: the op SAC
// tests' plan.
model::Plan TorchtitanPlan(model::Checkpointing ck) {
  model::Plan p;
  p.modeling = model::Modeling::kTorchtitan;
  p.seq_len = 2048;
  p.micro_batch = 1;
  p.checkpointing = ck;
  return p;
}

// The sum of `field` (a FLOP count of ProgramOp) over the steady step's (step 1's) ops.
double Step1Total(const SimReport& r, double ProgramOp::*field) {
  double total = 0;
  for (const auto& op : r.program.ops) {
    if (op.step == 1) total += op.*field;
  }
  return total;
}

// torchtitan's op SAC reruns the block mms its policy did not save (wk, wo, w3 of a Llama
// block): the step's matmul FLOPs exceed those without checkpointing by exactly that per token
// per block, and full checkpointing reruns every block mm.
TEST(SimulateTest, TorchtitanSelectiveRerunsEveryOtherMatmul) {
  model::ModelSpec s = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  auto matmul = [&](model::Checkpointing ck) {
    return Step1Total(SimulateStep(s, c, TorchtitanPlan(ck)), &ProgramOp::matmul_flops);
  };
  double h = 4096, qd = 4096, kv = 1024, f = 14336, tokens = 2048;
  double rerun = 2 * (h * kv + qd * h + h * f) * tokens * s.num_layers;
  double block_forward = 2 * (h * qd + 2 * h * kv + qd * h + 3 * h * f) * tokens * s.num_layers;
  double none = matmul(model::Checkpointing::kNone);
  EXPECT_NEAR(matmul(model::Checkpointing::kSelective) - none, rerun, 1e-9 * none);
  EXPECT_NEAR(matmul(model::Checkpointing::kFull) - none, block_forward, 1e-9 * none);
}

// Under eager attention torchtitan's policy keeps nothing of the attention core (bmm and softmax
// are not in its save list): selective's backward reruns the attention forward, as full does;
// over SDPA it reruns none of it.
TEST(SimulateTest, TorchtitanSelectiveOverEagerAttentionRerunsTheAttention) {
  model::ModelSpec s = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  auto attention = [&](model::Checkpointing ck, model::Attention a) {
    model::Plan p = TorchtitanPlan(ck);
    p.attention = a;
    return Step1Total(SimulateStep(s, c, p), &ProgramOp::attention_flops);
  };
  for (model::Attention a : {model::Attention::kEager, model::Attention::kSdpa}) {
    double none = attention(model::Checkpointing::kNone, a);
    double full_rerun = attention(model::Checkpointing::kFull, a) - none;
    ASSERT_GT(full_rerun, 0);
    double sel_rerun = attention(model::Checkpointing::kSelective, a) - none;
    EXPECT_NEAR(sel_rerun, a == model::Attention::kEager ? full_rerun : 0.0, 1e-9 * none);
  }
}

}  // namespace
}  // namespace shardtune::sim
