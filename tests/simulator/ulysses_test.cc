// Ulysses context parallelism in the memory and time models: per-rank activations on S/cp
// tokens, all-to-all sizes and times from their formulas, the all-to-all track of the trace,
// attention waiting for its all-to-alls, recomputation rerunning them, and both FSDP meshes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "profiles/hardware.h"
#include "simulator/simulate.h"
#include "simulator/trace_json.h"

namespace shardtune::sim {
namespace {

// Llama-3.1-8B shapes (llama3-8b with 131,072 positions): H 4096, 32 heads, 8 KV heads, d 128.
model::ModelSpec Llama() {
  model::ModelSpec s = model::FindModelPreset("llama3-8b");
  s.max_seq_len = 131072;
  return s;
}

model::Plan CpPlan(int cp, int64_t seq) {
  model::Plan p;
  p.cp = cp;
  p.seq_len = seq;
  return p;
}

int64_t CategoryPeak(const MemoryReport& r, Category c) {
  for (const auto& [name, b] : r.category_peaks) {
    if (name == ToString(c)) return b.count();
  }
  return 0;
}

// HF Llama block saved bytes per token (tests/model/activations_test.cc's hand count) with
// `kvd` KV elements per token; Ulysses adds the output on both sides of its all-to-all (2qd).
double BlockSavedPerToken(double kvd, bool ulysses) {
  double h = 4096, qd = 4096, f = 14336, heads = 32;
  return 2 * (4 * h + 4 + 2 * h + 2 * h) + (2 * qd * 2 + 2 * kvd * 2 + 4 * heads) + 8 * f +
         (ulysses ? 2 * qd : 0);
}

TEST(UlyssesTest, SavedActivationsPerRankAreTheSliceOfTheSequence) {
  auto spec = Llama();
  auto c = profiles::ParseClusterShorthand("8xH100");
  const int64_t S = 16384;
  for (int cp : {1, 2, 4}) {
    MemoryReport r = EstimateMemory(spec, c, CpPlan(cp, S));
    double tokens = static_cast<double>(S / cp);  // micro-batch 1
    auto per_block = static_cast<int64_t>(BlockSavedPerToken(1024, cp > 1) * tokens);
    EXPECT_EQ(CategoryPeak(r, Category::kActivations), 32 * per_block) << "cp " << cp;
    EXPECT_EQ(r.cp, cp);
    EXPECT_EQ(r.cp_fsdp_mesh, "dp_cp");
  }
}

// Per layer and pass: q and out are B·(S/cp)·a·d·e, k and v B·(S/cp)·a_kv·d·e each.
TEST(UlyssesTest, AllToAllBytesPerLayerFollowTheShapes) {
  auto spec = Llama();
  auto c = profiles::ParseClusterShorthand("8xH100");
  const int64_t S = 8192, B = 2;
  for (int cp : {2, 4, 8}) {
    model::Plan p = CpPlan(cp, S);
    p.micro_batch = B;
    SimReport r = SimulateStep(spec, c, p);
    int64_t per_layer = B * (S / cp) * (4096 + 1024 + 1024 + 4096) * 2;
    EXPECT_EQ(r.memory.all_to_all_bytes_per_layer.count(), per_layer) << cp;
    // Forward and backward, 32 layers, one micro-batch per step.
    EXPECT_EQ(r.all_to_all_per_step.count(), 2 * 32 * per_layer) << cp;
    EXPECT_EQ(r.all_to_all_calls_per_step, 2 * 32 * 4) << cp;
  }
}

// KV heads fewer than cp are repeated first (verl repeat_kv): with 2 KV heads and cp 4 each is
// sent twice, so k and v are B·(S/cp)·2·a_kv·d·e.
TEST(UlyssesTest, RepeatedKvHeadsCostTraffic) {
  auto spec = Llama();
  spec.num_kv_heads = 2;
  auto c = profiles::ParseClusterShorthand("8xH100");
  const int64_t S = 8192;
  SimReport r = SimulateStep(spec, c, CpPlan(4, S));
  int64_t tokens = S / 4;
  int64_t per_layer = tokens * (4096 + 2 * (2 * 2 * 128) + 4096) * 2;
  EXPECT_EQ(r.memory.all_to_all_bytes_per_layer.count(), per_layer);
}

TEST(UlyssesTest, FullCheckpointingRerunsTheForwardAllToAlls) {
  auto spec = Llama();
  auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan p = CpPlan(4, 8192);
  p.checkpointing = model::Checkpointing::kFull;
  SimReport r = SimulateStep(spec, c, p);
  EXPECT_EQ(r.all_to_all_per_step.count(), 3 * 32 * r.memory.all_to_all_bytes_per_layer.count());
  EXPECT_EQ(r.all_to_all_calls_per_step, 3 * 32 * 4);
  p.checkpointing = model::Checkpointing::kSelective;  // keeps all-to-all outputs: no rerun
  SimReport sel = SimulateStep(spec, c, p);
  EXPECT_EQ(sel.all_to_all_per_step.count(), 2 * 32 * sel.memory.all_to_all_bytes_per_layer.count());
}

// Attention never overlaps its own all-to-alls: an op that waits for an all-to-all starts after
// it ends; every all-to-all is on its own stream and trace track.
TEST(UlyssesTest, AllToAllsAreOnTheCriticalPathAndTheirOwnTrack) {
  auto spec = Llama();
  auto c = profiles::ParseClusterShorthand("8xH100");
  SimReport r = SimulateStep(spec, c, CpPlan(2, 8192));
  const auto& ops = r.program.ops;
  int a2a = 0, waits = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kAllToAll) {
      ++a2a;
      EXPECT_EQ(ops[i].stream, Stream::kAllToAll);
    }
    for (int32_t d : ops[i].deps) {
      if (d < 0 || ops[static_cast<size_t>(d)].kind != OpKind::kAllToAll) continue;
      ++waits;
      EXPECT_GE(r.schedule.start_ns[i], r.schedule.end_ns[static_cast<size_t>(d)]);
    }
  }
  EXPECT_EQ(a2a, 2 * 2 * 32 * 2);  // 2 steps x (forward + backward) x 32 layers x 2 ops
  EXPECT_EQ(waits, a2a);           // each feeds the next piece of compute
  auto trace = ChromeTrace(r, "test");
  const int tid = static_cast<int>(Stream::kAllToAll);
  bool named = false;
  int on_track = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e.contains("tid") && e["tid"] == tid) {
      named = e["args"]["name"] == "all-to-all (Ulysses cp, expert parallel)";
    }
    if (e["ph"] == "X" && e["tid"] == tid) ++on_track;
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(on_track, a2a);
}

// Alone on its link (NO_SHARD moves nothing on the shard link), each all-to-all op takes
// calls x latency + S·(n-1)/n / busbw, busbw the cp group's NVLink per direction x efficiency.
TEST(UlyssesTest, AllToAllTimeIsLatencyPlusBusBandwidthTerm) {
  auto spec = Llama();
  auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan p = CpPlan(4, 8192);
  p.strategy = model::ShardingStrategy::kNoShard;
  SimReport r = SimulateStep(spec, c, p);
  CostConstants k;
  double busbw = profiles::FindLink(c.gpu.intra_node_link, "test").bandwidth_per_direction.count() *
                 k.nvlink_efficiency;
  EXPECT_EQ(r.cp_group.ranks, 4);
  EXPECT_EQ(r.cp_group.nodes, 1);
  EXPECT_NEAR(r.cp_group.bus_bandwidth.count(), busbw, busbw * 1e-12);
  double expected = 0;
  int n_ops = 0;
  for (const auto& op : r.program.ops) {
    if (op.kind != OpKind::kAllToAll || op.step != 1) continue;
    double lat = op.calls * CollectiveLatency(profiles::Collective::kAllToAll, r.cp_group).count();
    expected +=
        static_cast<double>(ToNanos(lat)) * 1e-9 +
        static_cast<double>(ToNanos(static_cast<double>(op.comm_bytes) * 3.0 / 4.0 / busbw)) * 1e-9;
    ++n_ops;
  }
  EXPECT_NEAR(r.all_to_all.count(), expected, 2e-9 * n_ops);
}

// FLOPs per rank divide by cp: matmuls see S/cp tokens; attention keeps the full S for its
// heads/cp heads, so its S^2 term divides by cp too.
TEST(UlyssesTest, ComputePerRankDividesByCp) {
  auto spec = Llama();
  auto c = profiles::ParseClusterShorthand("8xH100");
  auto flops = [&](int cp) {
    SimReport r = SimulateStep(spec, c, CpPlan(cp, 16384));
    double mm = 0, attn = 0;
    for (const auto& op : r.program.ops) {
      if (op.step != 1) continue;
      mm += op.matmul_flops;
      attn += op.attention_flops;
    }
    return std::make_pair(mm, attn);
  };
  auto one = flops(1), four = flops(4);
  EXPECT_NEAR(four.first * 4, one.first, one.first * 1e-9);
  EXPECT_NEAR(four.second * 4, one.second, one.second * 1e-9);
}

// dp_cp (verl, torchtitan): FSDP shards over all 8 ranks. dp: over the 4 dp ranks, the 2 cp
// ranks of a group hold replicas (all-reduce), so sharded states double.
TEST(UlyssesTest, BothFsdpMeshesAreModelled) {
  auto spec = Llama();
  auto c = profiles::ParseClusterShorthand("8xH100");
  model::Plan p = CpPlan(2, 8192);
  MemoryReport dpcp = EstimateMemory(spec, c, p);
  p.cp_fsdp_mesh = model::CpFsdpMesh::kDp;
  MemoryReport dp = EstimateMemory(spec, c, p);
  EXPECT_EQ(dpcp.shard_group, 8);
  EXPECT_EQ(dpcp.replicas, 1);
  EXPECT_EQ(dp.shard_group, 4);
  EXPECT_EQ(dp.replicas, 2);
  EXPECT_EQ(dp.cp_fsdp_mesh, "dp");
  double n = static_cast<double>(model::ParameterCount(spec));
  EXPECT_NEAR(static_cast<double>(dpcp.sharded_params.count()), 4 * n / 8, 4 * n / 8 * 0.01);
  EXPECT_NEAR(static_cast<double>(dp.sharded_params.count()), 4 * n / 4, 4 * n / 4 * 0.01);
}

}  // namespace
}  // namespace shardtune::sim
