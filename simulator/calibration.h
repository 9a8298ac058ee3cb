// Closing the loop (README.md "Architecture": measurements.json -> validate / calibrate ->
// --profile): what the simulator predicts for a measured run, side by side with what was measured
// (`validate`), and least-squares fits of the cost model's constants to many measured runs
// (`calibrate`).
#pragma once

#include <string>
#include <vector>

#include "model/measurements_json.h"
#include "model/model_spec.h"
#include "profiles/cluster.h"
#include "simulator/cost_model.h"
#include "simulator/job_phases.h"
#include "simulator/profile_json.h"
#include "simulator/simulate.h"

namespace shardtune::sim {

// The work of the simulated ops that correspond to one measured span (ComputeTime's inputs).
struct ComputeWork {
  double matmul_flops = 0, attention_flops = 0, memory_bytes = 0;
  int ops = 0;  // 0: the program has no op for it
};

// The simulator's view of one measured run: the report for its plan, and the work and group of
// every measured compute span and collective (parallel to Measurements::compute/collectives).
struct RunPrediction {
  SimReport report;
  std::vector<ComputeWork> compute;
  ComputeWork optimizer;                 // the step-1 optimizer op(s)
  std::vector<GroupLink> collective_links;
  std::vector<std::string> collective_families;  // bottleneck link family of each group
  profiles::GpuSpec gpu;
  model::DType dtype = model::DType::kBf16;
  model::ModelSpec spec;  // the run's model and plan (as simulated: micro-batch, S, attention)
  model::Plan plan;
  int communicators = 0;  // process groups with a peer (shard, replicate)
  // The job's phases as `estimate` reports them, for the executor's way of running: every rank
  // builds the model then shards it (ModelLoad::kEveryRank), sharded checkpoints.
  JobPhases phases;
};

// Simulates the measured run's plan (its micro-batch, accumulation and sequence length) on
// `cluster` with `options` and maps every measured span and collective to the program.
// REQUIRES: spec and cluster are the run's (cluster.world_size() == the run's world).
RunPrediction PredictRun(const model::Measurements& m, const model::ModelSpec& spec,
                         const profiles::ClusterSpec& cluster, const SimOptions& options);

// One predicted-vs-measured figure.
struct ComparisonRow {
  std::string kind;  // "step", "phase", "compute", "collective", "memory"
  std::string name;
  double predicted = 0, measured = 0;
  bool bytes = false;  // false: seconds
  // (predicted - measured) / measured.
  double RelativeError() const { return (predicted - measured) / measured; }
};

// Every figure of one run: step time, forward/backward/optimizer per step, each (segment, phase)
// span, each collective (kind, group, size) with a peer, peak allocated (vs tracked) and peak
// required (vs RSS), and per measured job phase its predicted allocated peak vs the worst
// rank's tracked peak ("memory: step 0 peak", "memory: steady peak", "memory: save peak", ...;
// on CUDA tracked is the allocator's allocated peak). Left out: rows whose measured value is 0,
// spans the program has no work for, and collectives seen only in the first step of a run that has
// steady figures (start-up).
std::vector<ComparisonRow> CompareRun(const model::Measurements& m, const RunPrediction& p,
                                      const CostConstants& costs);

struct ErrorSummary {
  int rows = 0;
  double median_abs_error = 0;  // fractions (0.05 = 5 %)
  double worst_abs_error = 0;
  std::string worst;            // the worst row's name
};
// Median and worst absolute relative error of `rows` (all of them when kind is empty).
ErrorSummary Summarize(const std::vector<ComparisonRow>& rows, const std::string& kind = "");

// Warnings when `m` was measured on another machine or software than the profile's provenance
// (host, CPU, device, backend, torch or shardtune version). Empty when they match or the profile
// has no provenance.
std::vector<std::string> ProvenanceWarnings(const Profile& profile, const model::Measurements& m);

struct CalibrationRun {
  const model::Measurements* measurements = nullptr;  // not owned; outlives the call
  RunPrediction prediction;                    // PredictRun with any constants (work is fixed)
};

struct CalibrationResult {
  Profile profile;                    // base's constants with the fitted ones replaced
  std::vector<std::string> warnings;  // mixed machines, terms that could not be identified
};

// Fits collective timings a probe measured (`shardtune probe --nproc N`) into the cost model's
// form, one CollectiveCalibration per group size for `link_family` (the family of the link the
// probe's ranks shared: "loopback" for CPU ranks), appended to out->profile with a fit summary
// each. All-to-all and broadcast samples stay in the tables only (the fit's unknowns are the
// all-gather, reduce-scatter and all-reduce latencies and one bus bandwidth).
void FitProbedCollectives(const std::vector<profiles::CollectiveSample>& samples,
                          const std::string& link_family, CalibrationResult* out);

// Fits, by non-negative least squares over every run (compute rows weighted by their share of
// the step, collective rows relative to their time):
//  - compute: t = matmul/(peak·e_mm) + attention/(peak·e_att) + bytes/(bw·e_mem) + overhead, over
//    every (segment, phase) span and the optimizer (the memory-bound class);
//  - collectives, per bottleneck link family and group size: t = latency[kind] + S·f(kind,
// n)/busbw;
//  - memory overheads: rss - tracked = context + per_communicator·communicators + frag·tracked.
// Each fit's residual goes to profile.fits. Terms without measurements keep base's values.
// REQUIRES: runs non-empty.
CalibrationResult Calibrate(const std::vector<CalibrationRun>& runs, const Profile& base);

}  // namespace shardtune::sim
