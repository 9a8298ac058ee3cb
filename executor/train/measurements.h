// DIR/measurements.json (model/measurements_json.h, "shardtune.measurements" version 1) built from
// a run's recordings, and DIR/trace.json (Chrome trace event format, the simulator's format): what
// a run measured, for people and for calibration. Plain C++ (no Torch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "executor/comm/collective_log.h"
#include "executor/train/phase_meter.h"
#include "executor/recorder.h"
#include "executor/train/run.h"
#include "model/measurements_json.h"
#include "model/plan.h"

namespace shardtune::exec {

// One rank's environment and memory as measurements.json records them (model/measurements_json.h,
// the file's one definition).
using Environment = model::MeasuredEnvironment;
using RankMemory = model::MeasuredRankMemory;

struct UnitInfo {
  std::string name;
  int64_t numel = 0, padded_numel = 0, shard_numel = 0;
  int first_segment = 0, last_segment = 0;
};

struct RunShape {
  int micro_batch = 1, grad_accum = 1, dp_world = 1;
  int64_t seq_len = 0, global_batch = 0, resumed_from_step = 0;
  bool tokens_vary = false;  // --lengths or packed rows: a step's tokens are not batch x seq_len
  std::string data;
  double model_flops_per_token = 0;  // 6N + 12·L·H·S (Narayanan et al. 2021; README MFU)
  int64_t parameters = 0;
};

struct MeasurementsDoc {
  Environment environment;
  std::string model;
  model::Plan plan;
  RunShape run;
  std::vector<StepLog> steps;
  std::vector<UnitInfo> units;
  std::vector<std::string> segment_names;     // by segment index
  const Recorder* recorder = nullptr;         // compute and wait totals of rank 0
  std::vector<CollectiveRecord> collectives;  // rank 0's
  std::vector<RankMemory> memory;
  std::vector<RankPhases> phases;  // by rank (phase_meter.h); phases never entered are left out
};

// What the run measured, as the file's one definition: per-span and per-collective totals of
// rank 0 (with steady figures past the first step when the trace kept the spans), every rank's
// memory and phases, the summary of the steps after the first.
model::Measurements BuildMeasurements(const MeasurementsDoc& doc);
// Writes BuildMeasurements(doc) atomically (model::MeasurementsToJson). Throws BackendError.
void WriteMeasurements(const std::string& path, const MeasurementsDoc& doc);
// One rank's spans as Chrome trace events (a JSON array), pid = rank, tid = lane; ts in µs.
std::string TraceEventsJson(const std::vector<Span>& spans, const std::vector<CollectiveRecord>& c,
                            int rank);
// Concatenates the per-rank arrays in `parts` into one trace file {"traceEvents": [...]},
// with time 0 at the earliest event, and removes the parts. Throws BackendError.
void MergeTraces(const std::vector<std::string>& parts, const std::string& out_path);

}  // namespace shardtune::exec
