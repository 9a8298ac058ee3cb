// DIR/measurements.json ("shardtune.measurements", version 1) and DIR/trace.json (Chrome trace
// event format, the simulator's format): what a run measured, for people and for calibration.
// Plain C++ (no Torch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "executor/collective_log.h"
#include "executor/phase_meter.h"
#include "executor/recorder.h"
#include "executor/run.h"
#include "model/plan.h"

namespace shardtune::exec {

inline constexpr const char* kMeasurementsSchema = "shardtune.measurements";
inline constexpr int kMeasurementsSchemaVersion = 1;

struct Environment {
  std::string shardtune_version, torch_version, backend, device, cpu_model, hostname, date_utc;
  int world_size = 1;      // processes
  int emulated_world = 0;  // > 0: one process emulated rank 0 of this many
  int threads_per_rank = 1;
  std::string blas;  // CPU runs: the BLAS LibTorch resolved (vendor, threading, library path)
};

struct UnitInfo {
  std::string name;
  int64_t numel = 0, padded_numel = 0, shard_numel = 0;
  int first_segment = 0, last_segment = 0;
};

struct RankMemory {
  int rank = 0;
  int64_t tracked_peak_bytes = 0;  // tensor storage through LibTorch's CPU allocator
  int64_t rss_peak_bytes = 0;      // VmHWM
  // CUDA runs (0 on CPU): the caching allocator's peaks and the device's used memory at the end
  // (cudaMemGetInfo: CUDA context, NCCL buffers and the allocator's reservations).
  int64_t device_allocated_peak_bytes = 0, device_reserved_peak_bytes = 0;
  int64_t device_used_bytes = 0, device_alloc_retries = 0;
};

struct RunShape {
  int micro_batch = 1, grad_accum = 1, dp_world = 1;
  int64_t seq_len = 0, global_batch = 0, resumed_from_step = 0;
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

// Writes the document atomically. Throws BackendError.
void WriteMeasurements(const std::string& path, const MeasurementsDoc& doc);
// One rank's spans as Chrome trace events (a JSON array), pid = rank, tid = lane; ts in µs.
std::string TraceEventsJson(const std::vector<Span>& spans, const std::vector<CollectiveRecord>& c,
                            int rank);
// Concatenates the per-rank arrays in `parts` into one trace file {"traceEvents": [...]},
// with time 0 at the earliest event, and removes the parts. Throws BackendError.
void MergeTraces(const std::vector<std::string>& parts, const std::string& out_path);

}  // namespace shardtune::exec
