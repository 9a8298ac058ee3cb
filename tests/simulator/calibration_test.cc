// Calibration: the measurements reader, the fits (synthetic measurements generated from known
// constants with the cost model's own formulas must give those constants back), validate's
// comparison rows and summary, provenance warnings, and the calibrated profile's round trip.
#include "simulator/calibration.h"

#include <cmath>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "model/measurements_json.h"
#include "simulator/profile_json.h"

namespace shardtune::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::ThrowsMessage;
using Json = nlohmann::json;

// A complete, valid measurements document of a 2-rank CPU run (the keys executor/train/measurements.cc
// writes).
Json GoodMeasurements() {
  return Json::parse(R"J({
    "schema": "shardtune.measurements", "schema_version": 1,
    "environment": {"shardtune_version": "0.1.0", "torch_version": "1.13.0", "backend": "gloo",
      "device": "cpu", "cpu_model": "AMD EPYC", "hostname": "vm", "date_utc": "2026-11-22T16:20:43Z",
      "world_size": 2, "emulated_world": 0, "threads_per_rank": 1},
    "model": {"name": "tiny-llama", "parameters": 3164416},
    "plan": {"schema": "shardtune.plan", "schema_version": 1, "strategy": "full_shard", "micro_batch": 2,
             "seq_len": 128},
    "run": {"micro_batch": 2, "grad_accum": 1, "data_parallel_ranks": 2, "seq_len": 128, "global_batch": 4,
            "tokens_per_step": 512, "resumed_from_step": 0, "data": "synthetic (seed 0)"},
    "steps": [{"step": 1, "loss": 6.3, "lr": 0.001, "grad_norm": 6.9, "time_s": 1.3, "tokens": 512,
               "tokens_per_s": 394.0},
              {"step": 2, "loss": 6.2, "lr": 0.0008, "grad_norm": 8.8, "time_s": 0.3, "tokens": 512,
               "tokens_per_s": 1706.0}],
    "summary": {"steps_measured": 1, "mean_step_time_s": 0.3, "tokens_per_s": 1706.0,
                "model_flops_per_token": 2.0e7, "achieved_flops_per_s": 3.4e10},
    "units": [{"name": "root", "numel": 262400, "padded_numel": 262400, "shard_numel": 131200}],
    "compute": [{"segment": "model.layers.0", "unit": "model.layers.0", "phase": "forward", "count": 2,
                 "total_s": 0.06, "mean_s": 0.03, "steady_count": 1, "steady_mean_s": 0.02}],
    "waits": [{"name": "optimizer", "phase": "optimizer", "count": 2, "total_s": 0.04,
               "steady_count": 1, "steady_total_s": 0.01}],
    "collectives": [{"kind": "all_gather", "group": "shard", "group_size": 2, "bytes": 1451008, "count": 8,
                     "time_s": 0.01, "total_time_s": 0.08, "busbw_bytes_per_s": 7.2e7,
                     "sent_bytes_per_call": 725504, "emulated": false, "steady_count": 4,
                     "steady_time_s": 0.005}],
    "memory": {"peak_tracked_bytes": 50062728, "peak_rss_bytes": 286117888, "judged_on": "tracked",
               "per_rank": [{"rank": 0, "tracked_peak_bytes": 49415688, "rss_peak_bytes": 286117888},
                            {"rank": 1, "tracked_peak_bytes": 50062728, "rss_peak_bytes": 278175744}]}
  })J");
}

TEST(MeasurementsJsonTest, ReadsEveryFieldOfAValidFile) {
  model::Measurements m = model::MeasurementsFromJson(GoodMeasurements(), "m.json");
  EXPECT_EQ(m.environment.hostname, "vm");
  EXPECT_EQ(m.environment.world_size, 2);
  EXPECT_EQ(m.model_name, "tiny-llama");
  EXPECT_EQ(m.plan.micro_batch, 2);
  EXPECT_EQ(m.seq_len, 128);
  ASSERT_EQ(m.steps.size(), 2u);
  ASSERT_EQ(m.compute.size(), 1u);
  EXPECT_DOUBLE_EQ(m.compute[0].PerCallS(), 0.02);  // steady, not the mean with step 1
  EXPECT_TRUE(m.HasSteadyCompute());
  EXPECT_DOUBLE_EQ(*m.OptimizerPerStepS(), 0.01 / 1);
  ASSERT_EQ(m.collectives.size(), 1u);
  EXPECT_EQ(m.collectives[0].kind, profiles::Collective::kAllGather);
  EXPECT_DOUBLE_EQ(m.collectives[0].PerCallS(), 0.005);
  EXPECT_EQ(m.memory_per_rank.size(), 2u);
}

// Ulysses runs log their all-to-alls on the "cp" group (executor/README.md); other group names
// are still refused.
TEST(MeasurementsJsonTest, ReadsCpAllToAllsAndRejectsUnknownGroups) {
  Json j = GoodMeasurements();
  Json a2a = j["collectives"][0];
  a2a["kind"] = "all_to_all";
  a2a["group"] = "cp";
  j["collectives"].push_back(a2a);
  model::Measurements m = model::MeasurementsFromJson(j, "cp.json");
  ASSERT_EQ(m.collectives.size(), 2u);
  EXPECT_EQ(m.collectives[1].kind, profiles::Collective::kAllToAll);
  EXPECT_EQ(m.collectives[1].group, "cp");
  j["collectives"][1]["group"] = "pipeline";
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "pp.json"); },
              ThrowsMessage<InputError>(HasSubstr("pp.json:/collectives/1/group: expected one of world, shard, replicate, cp")));
}

TEST(MeasurementsJsonTest, CudaRunsAreJudgedOnDeviceMemoryUsed) {
  Json j = GoodMeasurements();
  j["memory"]["peak_device_reserved_bytes"] = 60000000;
  j["memory"]["device_used_bytes"] = 900000000;
  for (auto& r : j["memory"]["per_rank"]) {
    r["device_allocated_peak_bytes"] = r["tracked_peak_bytes"];
    r["device_reserved_peak_bytes"] = 60000000;
    r["device_used_bytes"] = 900000000;
    r["device_alloc_retries"] = 0;
  }
  model::Measurements m = model::MeasurementsFromJson(j, "cuda.json");
  EXPECT_EQ(m.device_used_bytes, 900000000);
  EXPECT_EQ(m.memory_per_rank[1].RequiredBytes(), 900000000);
  model::Measurements cpu = model::MeasurementsFromJson(GoodMeasurements(), "cpu.json");
  EXPECT_EQ(cpu.memory_per_rank[1].RequiredBytes(), 278175744);  // the RSS
}

TEST(MeasurementsJsonTest, ReportsEveryProblemInOneErrorNamingFileAndPointer) {
  Json j = GoodMeasurements();
  j["environment"].erase("hostname");
  j["run"]["seq_len"] = "long";
  j["collectives"][0]["kind"] = "all_gathr";
  j["memory"]["per_rank"][0]["rss_peak_bytes"] = -5;
  try {
    model::MeasurementsFromJson(j, "bad.json");
    FAIL() << "no error";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("bad.json:/environment: missing required key \"hostname\""));
    EXPECT_THAT(msg, Not(HasSubstr("unknown key")));
    EXPECT_THAT(msg, HasSubstr("bad.json:/run/seq_len"));
    EXPECT_THAT(msg, HasSubstr("bad.json:/collectives/0/kind"));
    EXPECT_THAT(msg, HasSubstr("bad.json:/memory/per_rank/0/rss_peak_bytes"));
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
  }
}

TEST(MeasurementsJsonTest, RejectsUnknownKeysIncompleteFilesAndOtherSchemas) {
  Json j = GoodMeasurements();
  j["compute"][0]["mean_sec"] = 1;
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "u.json"); },
              ThrowsMessage<InputError>(HasSubstr("u.json:/compute/0/mean_sec")));
  j = GoodMeasurements();
  j["steps"] = Json::array();
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "e.json"); },
              ThrowsMessage<InputError>(HasSubstr("e.json:/steps: expected at least one step")));
  j = GoodMeasurements();
  j["schema_version"] = 7;
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "v.json"); }, ThrowsMessage<InputError>(HasSubstr("schema_version")));
  j = GoodMeasurements();
  j.erase("memory");
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "n.json"); }, ThrowsMessage<InputError>(HasSubstr("memory")));
}

TEST(CostModelCalibrationTest, OverheadAndFittedCollectiveReplaceTheDefaults) {
  profiles::ClusterSpec c = profiles::ParseClusterShorthand("cpu:2");
  CostConstants k;
  k.compute_op_overhead = Seconds::Of(2e-4);
  double flops = 1e9;
  // ComputeTime = flops / (peak · e_mm) + overhead (cost_model.h).
  EXPECT_NEAR(ComputeTime(flops, 0, 0, c.gpu, model::DType::kBf16, k).count(),
              flops / (c.gpu.bf16_dense.count() * k.matmul_efficiency) + 2e-4, 1e-12);
  CollectiveCalibration cal;
  cal.link_family = c.intra_node.family;
  cal.group_size = 2;
  cal.bus_bandwidth = BytesPerSecond::Of(3e8);
  cal.latency[static_cast<size_t>(profiles::Collective::kReduceScatter)] = Seconds::Of(1e-3);
  k.collectives.push_back(cal);
  profiles::Topology topo(c);
  GroupLink g = DescribeGroup(topo, c, {{0, 1}}, k);
  Bytes s = Bytes::Of(4000000);
  // t = latency + S · (n-1)/n / busbw (nccl-tests PERFORMANCE.md).
  EXPECT_NEAR(CollectiveTime(profiles::Collective::kReduceScatter, s, g).count(), 1e-3 + 4e6 * 0.5 / 3e8, 1e-12);
  // No fitted latency for all-gather: NCCL's model, with the fitted bandwidth.
  EXPECT_NEAR(CollectiveTime(profiles::Collective::kAllGather, s, g).count(),
              CollectiveLatency(profiles::Collective::kAllGather, g).count() + 4e6 * 0.5 / 3e8, 1e-12);
}

// Measured times generated from `truth` by the cost model's formulas for the runs' own work.
struct Synthetic {
  std::vector<model::Measurements> measurements;
  std::vector<RunPrediction> predictions;
};

Synthetic Synthesize(const CostConstants& truth, const MemoryConstants& mem_truth) {
  model::ModelSpec spec = model::ResolveModelArg("tiny-llama", nullptr);
  profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("cpu:2");
  Synthetic s;
  struct Shape { int mb; int64_t seq; model::ShardingStrategy strategy; };
  const Shape shapes[] = {{1, 64, model::ShardingStrategy::kFullShard}, {2, 128, model::ShardingStrategy::kFullShard},
                          {4, 256, model::ShardingStrategy::kNoShard}, {1, 192, model::ShardingStrategy::kShardGradOp}};
  for (const Shape& sh : shapes) {
    model::Measurements m = model::MeasurementsFromJson(GoodMeasurements(), "synthetic.json");
    m.plan.micro_batch = m.micro_batch = sh.mb;
    m.plan.seq_len = m.seq_len = sh.seq;
    m.plan.strategy = sh.strategy;
    m.compute.clear();
    for (int seg = 0; seg < model::NumSegments(spec.num_layers); ++seg) {
      std::string name = seg == 0 ? "model.embed_tokens"
                         : seg <= spec.num_layers ? "model.layers." + std::to_string(seg - 1)
                         : seg == model::FinalNormSegment(spec.num_layers) ? "model.norm" : "lm_head";
      for (const char* phase : {"forward", "backward"}) m.compute.push_back({name, name, phase, 1, 0, 0, {}, 0});
    }
    m.collectives.clear();
    for (auto kind : {profiles::Collective::kAllGather, profiles::Collective::kReduceScatter,
                      profiles::Collective::kAllReduce}) {
      for (int64_t bytes : {int64_t{8}, int64_t{1} << 20, int64_t{1} << 24}) {
        model::MeasuredCollective c;
        c.kind = kind;
        c.group = "shard";
        c.group_size = 2;
        c.bytes = bytes * sh.mb;
        c.count = 4;
        m.collectives.push_back(c);
      }
    }
    RunPrediction p = PredictRun(m, spec, cluster, SimOptions{});
    // On 2 ranks every strategy has one communicator; vary the count (as HSDP runs on more ranks
    // would: shard + replicate group) so the per-communicator term is identifiable.
    p.communicators = static_cast<int>(s.measurements.size() % 3);
    for (size_t i = 0; i < m.compute.size(); ++i) {
      const ComputeWork& w = p.compute[i];
      m.compute[i].mean_s = ComputeTime(w.matmul_flops, w.attention_flops, w.memory_bytes, cluster.gpu,
                                        p.dtype, truth).count() + (w.ops - 1) * truth.compute_op_overhead.count();
      m.compute[i].steady_mean_s = m.compute[i].mean_s;
    }
    const ComputeWork& o = p.optimizer;
    m.waits = {{"optimizer", "optimizer", 1,
                ComputeTime(0, 0, o.memory_bytes, cluster.gpu, p.dtype, truth).count(), {}, 0}};
    for (auto& c : m.collectives) {
      const CollectiveCalibration& cal = truth.collectives.front();
      c.time_s = cal.latency[static_cast<size_t>(c.kind)]->count() +
                 static_cast<double>(c.bytes) * profiles::BusBwFactor(c.kind, 2) / cal.bus_bandwidth.count();
      c.steady_time_s = c.time_s;
      c.steady_count = c.count;
    }
    // rss = tracked · (1 + frag) + context + per-communicator · communicators (memory_model.h).
    for (auto& r : m.memory_per_rank) {
      r.tracked_peak_bytes = 40000000 + 10000000 * sh.mb;
      r.rss_peak_bytes = static_cast<int64_t>(std::llround(
          static_cast<double>(r.tracked_peak_bytes) * (1 + mem_truth.fragmentation_fraction) +
          static_cast<double>(mem_truth.cuda_context.count()) +
          static_cast<double>(mem_truth.nccl_per_communicator.count()) * p.communicators));
    }
    s.measurements.push_back(m);
    s.predictions.push_back(std::move(p));
  }
  return s;
}

CostConstants TrueCosts() {
  CostConstants t;
  t.matmul_efficiency = 0.37;
  t.attention_efficiency = 0.11;
  t.memory_efficiency = 0.6;
  t.compute_op_overhead = Seconds::Of(3e-4);
  CollectiveCalibration cal;
  cal.link_family = "loopback";
  cal.group_size = 2;
  cal.bus_bandwidth = BytesPerSecond::Of(8e8);
  cal.latency[0] = Seconds::Of(2e-4);
  cal.latency[1] = Seconds::Of(5e-4);
  cal.latency[2] = Seconds::Of(1e-4);
  t.collectives.push_back(cal);
  return t;
}

TEST(CalibrateTest, RecoversTheConstantsSyntheticMeasurementsWereMadeWith) {
  CostConstants truth = TrueCosts();
  MemoryConstants mem;
  mem.cuda_context = Bytes::MiB(230);
  mem.nccl_per_communicator = Bytes::MiB(3);
  mem.fragmentation_fraction = 0.07;
  Synthetic s = Synthesize(truth, mem);
  std::vector<CalibrationRun> runs;
  for (size_t i = 0; i < s.measurements.size(); ++i) runs.push_back({&s.measurements[i], s.predictions[i]});
  CalibrationResult r = Calibrate(runs, Profile{});
  const CostConstants& k = r.profile.costs;
  EXPECT_NEAR(k.matmul_efficiency, truth.matmul_efficiency, 1e-6 * truth.matmul_efficiency);
  EXPECT_NEAR(k.attention_efficiency, truth.attention_efficiency, 1e-6 * truth.attention_efficiency);
  EXPECT_NEAR(k.memory_efficiency, truth.memory_efficiency, 1e-6 * truth.memory_efficiency);
  EXPECT_NEAR(k.compute_op_overhead.count(), 3e-4, 1e-9);
  ASSERT_EQ(k.collectives.size(), 1u);
  EXPECT_EQ(k.collectives[0].link_family, "loopback");
  EXPECT_NEAR(k.collectives[0].bus_bandwidth.count(), 8e8, 8e8 * 1e-6);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(k.collectives[0].latency[i].has_value());
    EXPECT_NEAR(k.collectives[0].latency[i]->count(), truth.collectives[0].latency[i]->count(), 1e-9);
  }
  EXPECT_NEAR(static_cast<double>(r.profile.memory.cuda_context.count()),
              static_cast<double>(mem.cuda_context.count()), 2.0);
  EXPECT_NEAR(static_cast<double>(r.profile.memory.nccl_per_communicator.count()),
              static_cast<double>(mem.nccl_per_communicator.count()), 2.0);
  EXPECT_NEAR(r.profile.memory.fragmentation_fraction, 0.07, 1e-7);
  // Exact data: every fitted term's residual is ~0.
  for (const FitSummary& f : r.profile.fits) {
    if (f.term.rfind("peak allocated", 0) == 0) continue;  // the mechanism, not a fit
    EXPECT_LT(f.max_relative_residual, 1e-6) << f.term;
  }
  EXPECT_TRUE(r.profile.has_provenance);
  EXPECT_EQ(r.profile.provenance.hostname, "vm");
}

TEST(CalibrateTest, ValidationWithTheFittedProfileMatchesTheSyntheticRuns) {
  CostConstants truth = TrueCosts();
  Synthetic s = Synthesize(truth, MemoryConstants{});
  std::vector<CalibrationRun> runs;
  for (size_t i = 0; i < s.measurements.size(); ++i) runs.push_back({&s.measurements[i], s.predictions[i]});
  CalibrationResult r = Calibrate(runs, Profile{});
  for (size_t i = 0; i < s.measurements.size(); ++i) {
    std::vector<ComparisonRow> rows = CompareRun(s.measurements[i], s.predictions[i], r.profile.costs);
    // PredictRun used the default bandwidth for its links: rebuild them with the fitted costs.
    RunPrediction p = s.predictions[i];
    profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("cpu:2");
    profiles::Topology topo(cluster);
    for (auto& g : p.collective_links) g = DescribeGroup(topo, cluster, {{0, 1}}, r.profile.costs);
    rows = CompareRun(s.measurements[i], p, r.profile.costs);
    for (const auto& row : rows) {
      if (row.kind == "compute" || row.kind == "collective" || row.name == "optimizer step") {
        EXPECT_NEAR(row.RelativeError(), 0, 1e-6) << row.name;
      }
    }
  }
}

TEST(CalibrateTest, CollinearWorkIsReportedNotInvented) {
  // Every row has the same ratio of matmul to memory work: the split is not identifiable.
  model::Measurements m = model::MeasurementsFromJson(GoodMeasurements(), "c.json");
  RunPrediction p;
  p.gpu = profiles::ParseClusterShorthand("cpu:2").gpu;
  m.compute.clear();
  m.collectives.clear();
  m.waits.clear();
  for (int i = 1; i <= 4; ++i) {
    m.compute.push_back({"model.layers.0", "u", "forward", 1, 0, 0.01 * i, 0.01 * i, 1});
    p.compute.push_back({1e8 * i, 0, 1e6 * i, 1});
  }
  CalibrationResult r = Calibrate({{&m, p}}, Profile{});
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("not identifiable"));
  // The class that cannot be separated keeps its prior; the other absorbs the time, so every
  // row is still explained: t_i = 1e8·i/(peak·e_mm) + 1e6·i/(bw·e_mem).
  const CostConstants prior;
  const CostConstants& k = r.profile.costs;
  EXPECT_TRUE(k.matmul_efficiency == prior.matmul_efficiency || k.memory_efficiency == prior.memory_efficiency);
  for (int i = 1; i <= 4; ++i) {
    double t = 1e8 * i / (p.gpu.bf16_dense.count() * k.matmul_efficiency) +
               1e6 * i / (p.gpu.memory_bandwidth.count() * k.memory_efficiency) + k.compute_op_overhead.count();
    EXPECT_NEAR(t, 0.01 * i, 1e-9) << i;
  }
}

TEST(ValidateTest, SummaryIsMedianAndWorstAbsoluteError) {
  std::vector<ComparisonRow> rows = {{"step", "a", 1.1, 1.0, false},
                                     {"step", "b", 0.7, 1.0, false},
                                     {"memory", "c", 95, 100, true}};
  ErrorSummary all = Summarize(rows);
  EXPECT_EQ(all.rows, 3);
  EXPECT_NEAR(all.median_abs_error, 0.1, 1e-12);  // sorted |errors| 0.05, 0.1, 0.3
  EXPECT_NEAR(all.worst_abs_error, 0.3, 1e-12);
  EXPECT_EQ(all.worst, "b");
  ErrorSummary step = Summarize(rows, "step");
  EXPECT_NEAR(step.median_abs_error, (0.1 + 0.3) / 2, 1e-12);
}

TEST(ValidateTest, WarnsWhenMeasurementsComeFromAnotherMachine) {
  model::Measurements m = model::MeasurementsFromJson(GoodMeasurements(), "m.json");
  Profile p;
  p.name = "box";
  p.has_provenance = true;
  p.provenance.hostname = "vm";
  p.provenance.torch_version = "1.13.0";
  EXPECT_TRUE(ProvenanceWarnings(p, m).empty());
  p.provenance.hostname = "gpu-node-7";
  p.provenance.torch_version = "2.11.0";
  std::vector<std::string> w = ProvenanceWarnings(p, m);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0], AllOf(HasSubstr("m.json"), HasSubstr("gpu-node-7"), HasSubstr("\"vm\"")));
  EXPECT_THAT(w[1], HasSubstr("2.11.0"));
}

TEST(ProfileJsonTest, CalibratedProfileRoundTrips) {
  Profile p;
  p.name = "fitted";
  p.costs = TrueCosts();
  p.memory.cuda_context = Bytes::MiB(230);
  p.memory.fragmentation_fraction = 0.07;
  p.has_provenance = true;
  p.provenance.hostname = "vm";
  p.provenance.measurements = {"a.json", "b.json"};
  p.fits.push_back({"compute", 12, 0.03, 0.08, "note"});
  Json j = Json::parse(ProfileToJson(p).dump());
  EXPECT_EQ(j["schema_version"], kProfileSchemaVersion);
  Profile q = ProfileFromJson(j, "p.json");
  EXPECT_DOUBLE_EQ(q.costs.matmul_efficiency, 0.37);
  EXPECT_DOUBLE_EQ(q.costs.compute_op_overhead.count(), 3e-4);
  ASSERT_EQ(q.costs.collectives.size(), 1u);
  EXPECT_DOUBLE_EQ(q.costs.collectives[0].bus_bandwidth.count(), 8e8);
  EXPECT_DOUBLE_EQ(q.costs.collectives[0].latency[1]->count(), 5e-4);
  EXPECT_FALSE(q.costs.collectives[0].latency[3].has_value());
  EXPECT_EQ(q.memory.cuda_context, Bytes::MiB(230));
  EXPECT_EQ(q.provenance.measurements.size(), 2u);
  ASSERT_EQ(q.fits.size(), 1u);
  EXPECT_EQ(q.fits[0].rows, 12);
  j["collectives"][0]["latency_s"]["all_gathr"] = 1e-4;
  EXPECT_THAT([&] { ProfileFromJson(j, "p.json"); },
              ThrowsMessage<InputError>(HasSubstr("p.json:/collectives/0/latency_s/all_gathr")));
}

}  // namespace
}  // namespace shardtune::sim

namespace shardtune::sim {
namespace {

// A "phases" entry as executor/train/measurements.cc PhasesJson writes it (one rank).
Json PhaseJson(const std::string& name, int64_t peak) {
  return Json{{"name", name}, {"count", 1}, {"duration_s", 0.1}, {"peak_tracked_bytes", peak},
              {"peak_rss_bytes", 2 * peak},
              {"per_rank", Json::array({Json{{"rank", 0}, {"count", 1}, {"duration_s", 0.1},
                                             {"tracked_start_bytes", peak / 2},
                                             {"tracked_peak_bytes", peak},
                                             {"rss_peak_bytes", 2 * peak}}})}};
}

TEST(ValidatePhasesTest, EachMeasuredPhaseIsComparedWithTheEstimatesPhase) {
  Json j = GoodMeasurements();
  const std::vector<std::pair<std::string, std::string>> phases = {
      {"model load", "memory: load peak"}, {"step 0", "memory: step 0 peak"},
      {"steady step", "memory: steady peak"}, {"checkpoint save", "memory: save peak"},
      {"resume", "memory: resume peak"}};
  j["phases"] = Json::array();
  for (size_t i = 0; i < phases.size(); ++i) {
    j["phases"].push_back(PhaseJson(phases[i].first, 1000000 * static_cast<int64_t>(i + 1)));
  }
  model::Measurements m = model::MeasurementsFromJson(j, "phases.json");
  ASSERT_EQ(m.phases.size(), 5u);
  EXPECT_EQ(m.phases[2].name, "steady step");
  EXPECT_EQ(m.phases[2].per_rank[0].tracked_start_bytes, 1500000);
  model::ModelSpec spec = model::ResolveModelArg("tiny-llama", nullptr);
  profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("cpu:2");
  RunPrediction p = PredictRun(m, spec, cluster, SimOptions{});
  std::vector<ComparisonRow> rows = CompareRun(m, p, CostConstants{});
  for (size_t i = 0; i < phases.size(); ++i) {
    SCOPED_TRACE(phases[i].first);
    const ComparisonRow* row = nullptr;
    for (const auto& r : rows) {
      if (r.name == phases[i].second) row = &r;
    }
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->kind, "memory");
    EXPECT_TRUE(row->bytes);
    EXPECT_EQ(row->measured, 1e6 * static_cast<double>(i + 1));
    // The prediction is the estimate's own phase (simulator/job_phases.cc) for the executor's
    // way of loading and checkpointing.
    const PhaseMemory* want = nullptr;
    for (const auto& ph : p.phases.phases) {
      if (phases[i].first == ToString(ph.phase)) want = &ph;
    }
    ASSERT_NE(want, nullptr);
    EXPECT_EQ(row->predicted, static_cast<double>(want->allocated_peak.count()));
  }
}

TEST(ValidatePhasesTest, FilesWithoutPhasesHaveNoPhaseRowsAndBadPhasesAreErrors) {
  model::Measurements m = model::MeasurementsFromJson(GoodMeasurements(), "old.json");
  EXPECT_TRUE(m.phases.empty());
  Json j = GoodMeasurements();
  j["phases"] = Json::array({PhaseJson("warmup", 1)});
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "p.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("p.json:/phases/0/name"), HasSubstr("warmup"))));
  j["phases"] = Json::array({PhaseJson("step 0", 1)});
  j["phases"][0]["per_rank"] = Json::array();
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "e.json"); },
              ThrowsMessage<InputError>(HasSubstr("e.json:/phases/0/per_rank: expected one entry per rank")));
  j["phases"] = Json::array({PhaseJson("step 0", 1)});
  j["phases"][0]["peak_tracked_bytes"] = -5;
  EXPECT_THAT([&] { model::MeasurementsFromJson(j, "n.json"); },
              ThrowsMessage<InputError>(HasSubstr("n.json:/phases/0/peak_tracked_bytes")));
}

}  // namespace
}  // namespace shardtune::sim
