// measurements.json's one definition (model/measurements_json.h, issue #23 item 4): what the
// executor writes (MeasurementsToJson) is what validate and calibrate read (MeasurementsFromJson),
// field for field, for a CPU run and a CUDA run with every optional figure set.
#include "model/measurements_json.h"

#include <gtest/gtest.h>

#include "model/errors.h"

namespace shardtune::model {
namespace {

// Every field set to a value unlike its default; `cuda` adds the device figures and steady spans.
Measurements Example(bool cuda) {
  Measurements m;
  m.environment = {"0.1.0", "2.11.0", cuda ? "nccl" : "gloo", cuda ? "cuda:NVIDIA H100 80GB HBM3" : "cpu",
                   "AMD EPYC", "node-3", "2026-11-26T04:00:00Z", 2, cuda ? 8 : 0, 4,
                   cuda ? "" : "OpenBLAS 0.3.21 (openmp, /usr/lib/libopenblas.so.0)"};
  m.model_name = "tiny-llama";
  m.parameters = 20811264;
  m.plan.micro_batch = 2;
  m.plan.seq_len = 256;
  m.micro_batch = 2;
  m.grad_accum = 3;
  m.data_parallel_ranks = 2;
  m.seq_len = 256;
  m.global_batch = 12;
  m.tokens_per_step = 12 * 256;
  m.resumed_from_step = 5;
  m.data = "synthetic (seed 7)";
  m.steps = {{6, 10.5, 1e-3, 3.25, 0.75, 3072, 4096}, {7, 9.75, 9e-4, 2.5, 0.5, 3072, 6144}};
  m.steps_measured = 1;
  m.mean_step_time_s = 0.5;
  m.tokens_per_s = 6144;
  m.model_flops_per_token = 1.25e8;
  m.achieved_flops_per_s = 6144 * 1.25e8;
  m.units = {{"root", 100, 102, 51}, {"model.layers.0", 4000, 4000, 2000}};
  MeasuredCompute c{"model.layers.0", "model.layers.0", "forward", 4, 0.4, 0.1, std::nullopt, 0};
  if (cuda) {
    c.steady_count = 3;
    c.steady_mean_s = 0.09;
  }
  m.compute = {c, {"lm_head", "root", "backward", 4, 0.2, 0.05, std::nullopt, 0}};
  MeasuredWait w{"optimizer", "optimizer", 2, 0.125, std::nullopt, 0};
  if (cuda) {
    w.steady_count = 1;
    w.steady_total_s = 0.0625;
  }
  m.waits = {w};
  MeasuredCollective k;
  k.kind = Collective::kReduceScatter;
  k.group = "shard";
  k.group_size = 2;
  k.bytes = 1 << 20;
  k.count = 8;
  k.time_s = 0.001;
  k.total_time_s = 0.008;
  k.busbw_bytes_per_s = 524288000;
  k.sent_bytes_per_call = 1 << 19;
  k.emulated = cuda;
  if (cuda) {
    k.steady_count = 6;
    k.steady_time_s = 0.0009;
  }
  m.collectives = {k};
  m.peak_tracked_bytes = 3 << 20;
  m.peak_rss_bytes = 400 << 20;
  m.memory_judged_on = "peak_tracked_bytes: ...";
  for (int r = 0; r < 2; ++r) {
    MeasuredRankMemory rm;
    rm.rank = r;
    rm.tracked_peak_bytes = (3 << 20) - r;
    rm.rss_peak_bytes = (400 << 20) - r;
    if (cuda) {
      rm.device_allocated_peak_bytes = (3 << 20) - r;
      rm.device_reserved_peak_bytes = (4 << 20) - r;
      rm.device_used_bytes = (5 << 20) - r;
      rm.device_alloc_retries = r;
    }
    m.memory_per_rank.push_back(rm);
  }
  if (cuda) {
    m.peak_device_reserved_bytes = 4 << 20;
    m.device_used_bytes = 5 << 20;
  }
  MeasuredPhase ph;
  ph.name = "steady step";
  ph.count = 1;
  ph.duration_s = 0.5;
  ph.peak_tracked_bytes = 3 << 20;
  ph.peak_rss_bytes = 400 << 20;
  MeasuredPhaseRank pr{0, 1, 0.5, 1 << 20, 3 << 20, 400 << 20, 0, 0, 0};
  if (cuda) {
    ph.peak_device_allocated_bytes = 3 << 20;
    ph.peak_device_reserved_bytes = 4 << 20;
    ph.device_used_bytes = 5 << 20;
    pr.device_allocated_peak_bytes = 3 << 20;
    pr.device_reserved_peak_bytes = 4 << 20;
    pr.device_used_bytes = 5 << 20;
  }
  ph.per_rank = {pr};
  m.phases = {ph};
  return m;
}

void ExpectSame(const Measurements& a, const Measurements& b) {
  EXPECT_EQ(a.environment.blas, b.environment.blas);
  EXPECT_EQ(a.environment.emulated_world, b.environment.emulated_world);
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.plan.micro_batch, b.plan.micro_batch);
  EXPECT_EQ(a.data, b.data);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  EXPECT_EQ(a.steps[1].tokens_per_s, b.steps[1].tokens_per_s);
  EXPECT_EQ(a.achieved_flops_per_s, b.achieved_flops_per_s);
  ASSERT_EQ(a.units.size(), b.units.size());
  EXPECT_EQ(a.units[0].shard_numel, b.units[0].shard_numel);
  EXPECT_EQ(a.compute[0].steady_mean_s, b.compute[0].steady_mean_s);
  EXPECT_EQ(a.waits[0].steady_total_s, b.waits[0].steady_total_s);
  EXPECT_EQ(a.collectives[0].kind, b.collectives[0].kind);
  EXPECT_EQ(a.collectives[0].steady_time_s, b.collectives[0].steady_time_s);
  EXPECT_EQ(a.collectives[0].emulated, b.collectives[0].emulated);
  EXPECT_EQ(a.memory_per_rank[1].device_allocated_peak_bytes, b.memory_per_rank[1].device_allocated_peak_bytes);
  EXPECT_EQ(a.memory_per_rank[1].device_alloc_retries, b.memory_per_rank[1].device_alloc_retries);
  EXPECT_EQ(a.device_used_bytes, b.device_used_bytes);
  EXPECT_EQ(a.memory_judged_on, b.memory_judged_on);
  EXPECT_EQ(a.phases[0].per_rank[0].device_used_bytes, b.phases[0].per_rank[0].device_used_bytes);
  // And every field at once: the written documents are equal.
  EXPECT_EQ(MeasurementsToJson(a).dump(), MeasurementsToJson(b).dump());
}

TEST(MeasurementsJsonTest, WrittenIsReadFieldForField) {
  for (bool cuda : {false, true}) {
    Measurements m = Example(cuda);
    nlohmann::ordered_json j = MeasurementsToJson(m);
    Measurements back = MeasurementsFromJson(nlohmann::json::parse(j.dump()), "m.json");
    SCOPED_TRACE(cuda ? "cuda" : "cpu");
    ExpectSame(m, back);
    EXPECT_EQ(back.path, "m.json");
    EXPECT_EQ(back.schema_version, kMeasurementsSchemaVersion);
  }
}

// Optional keys appear only where set: a CPU run's file has no device figures or steady spans.
TEST(MeasurementsJsonTest, CpuRunsWriteNoDeviceFigures) {
  nlohmann::ordered_json j = MeasurementsToJson(Example(false));
  EXPECT_FALSE(j["memory"].contains("device_used_bytes"));
  EXPECT_FALSE(j["memory"]["per_rank"][0].contains("device_allocated_peak_bytes"));
  EXPECT_FALSE(j["compute"][0].contains("steady_mean_s"));
  EXPECT_TRUE(j["environment"].contains("blas"));
  nlohmann::ordered_json g = MeasurementsToJson(Example(true));
  EXPECT_TRUE(g["memory"].contains("device_used_bytes"));
  EXPECT_FALSE(g["environment"].contains("blas"));
}

// The reader stays strict about what the writer never writes.
TEST(MeasurementsJsonTest, UnknownKeysAndMissingStepsAreErrors) {
  nlohmann::json j = nlohmann::json::parse(MeasurementsToJson(Example(false)).dump());
  j["summary"]["speedup"] = 2;
  EXPECT_THROW(MeasurementsFromJson(j, "m.json"), InputError);
  nlohmann::json k = nlohmann::json::parse(MeasurementsToJson(Example(false)).dump());
  k["steps"] = nlohmann::json::array();
  try {
    MeasurementsFromJson(k, "m.json");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("m.json:/steps: expected at least one step"), std::string::npos);
  }
}

}  // namespace
}  // namespace shardtune::model
