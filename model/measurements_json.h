// DIR/measurements.json ("shardtune.measurements", version 1): what a run measured, as plain data.
// The one definition of the file: the executor fills a Measurements from its run and writes it
// with MeasurementsToJson (executor/train/measurements.cc); `validate` and `calibrate` read it with
// MeasurementsFromJson (strict). Torch-free, so the simulator and the CLI read it without linking
// the executor; tests/model/measurements_json_test.cc checks that writing and reading round-trip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/collective.h"
#include "model/plan.h"

namespace shardtune::model {

inline constexpr const char* kMeasurementsSchema = "shardtune.measurements";
inline constexpr int kMeasurementsSchemaVersion = 1;

// Where and with what the run was measured (calibrated profiles carry the same fields, so a
// mismatch can be warned about).
struct MeasuredEnvironment {
  std::string shardtune_version, torch_version, backend, device, cpu_model, hostname, date_utc;
  int world_size = 1;
  int emulated_world = 0;  // > 0: one process emulated rank 0 of this many (collectives are fake)
  int threads_per_rank = 1;
  std::string blas;  // CPU runs: the BLAS LibTorch resolved, "OpenBLAS ... (path)"; optional
};

struct MeasuredStep {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double time_s = 0;
  int64_t tokens = 0;
  double tokens_per_s = 0;
};

// One FSDP unit of the run: its flat parameter's elements, padded to the world, and its shard.
struct MeasuredUnit {
  std::string name;
  int64_t numel = 0, padded_numel = 0, shard_numel = 0;
};

// One (segment, phase) compute span total of rank 0. `steady_*` leave out the first step of the
// process (absent when the run kept no trace or ran one step).
struct MeasuredCompute {
  std::string segment;  // "model.embed_tokens", "model.layers.3", "model.norm", "lm_head"
  std::string unit;
  std::string phase;    // "forward" | "backward"
  int64_t count = 0;
  double total_s = 0, mean_s = 0;
  std::optional<double> steady_mean_s;
  int64_t steady_count = 0;
  // The best per-call figure: steady_mean_s when present, else mean_s.
  double PerCallS() const { return steady_mean_s ? *steady_mean_s : mean_s; }
};

struct MeasuredWait {
  std::string name, phase;  // e.g. {"optimizer", "optimizer"}, {"model.layers.0", "reduce_wait"}
  int64_t count = 0;
  double total_s = 0;
  std::optional<double> steady_total_s;
  int64_t steady_count = 0;
};

// Rank 0's collectives of one (kind, group, size): S = bytes (nccl-tests' total size).
struct MeasuredCollective {
  Collective kind = Collective::kAllGather;
  std::string group;  // "world" | "shard" | "replicate" | "cp" (Ulysses all-to-alls)
  int group_size = 1;
  int64_t bytes = 0;
  int64_t count = 0;
  double time_s = 0;  // mean, issue to the Wait() that saw it complete
  double total_time_s = 0;
  double busbw_bytes_per_s = 0;
  int64_t sent_bytes_per_call = 0;
  bool emulated = false;
  std::optional<double> steady_time_s;
  int64_t steady_count = 0;
  double PerCallS() const { return steady_time_s ? *steady_time_s : time_s; }
};

struct MeasuredRankMemory {
  int rank = 0;
  int64_t tracked_peak_bytes = 0;  // tensor storage through the allocator (max_memory_allocated)
  int64_t rss_peak_bytes = 0;      // VmHWM
  // CUDA runs only (0 on CPU): the caching allocator's reserved peak, and the device memory in
  // use at the end (cudaMemGetInfo: allocator reservations + CUDA context + NCCL buffers).
  int64_t device_allocated_peak_bytes = 0, device_reserved_peak_bytes = 0, device_used_bytes = 0;
  int64_t device_alloc_retries = 0;
  // What `required` (memory_model.h: peak + fragmentation + outside the allocator) is compared
  // with: the device memory used on a GPU, the process's RSS on CPU ranks.
  int64_t RequiredBytes() const { return device_used_bytes > 0 ? device_used_bytes : rss_peak_bytes; }
};

// One phase of the job as the executor measured it (executor/train/phase_meter.h), named as
// JobPhase's ToString: "model load", "step 0", "steady step", "checkpoint save", "resume".
struct MeasuredPhaseRank {
  int rank = 0;
  int64_t count = 0;
  double duration_s = 0;
  int64_t tracked_start_bytes = 0;  // live tracked (CUDA: allocated) bytes when first entered
  int64_t tracked_peak_bytes = 0;   // CPU: tensor bytes; CUDA: max_memory_allocated
  int64_t rss_peak_bytes = 0;       // host VmHWM within the phase
  int64_t device_allocated_peak_bytes = 0, device_reserved_peak_bytes = 0, device_used_bytes = 0;
};
struct MeasuredPhase {
  std::string name;
  int64_t count = 0;      // times rank 0 entered it (steady: steps after the first)
  double duration_s = 0;  // rank 0's, summed
  int64_t peak_tracked_bytes = 0, peak_rss_bytes = 0;  // the worst rank's
  int64_t peak_device_allocated_bytes = 0, peak_device_reserved_bytes = 0, device_used_bytes = 0;
  std::vector<MeasuredPhaseRank> per_rank;
};

struct Measurements {
  std::string path;  // the file it was read from (for messages)
  int schema_version = 1;
  MeasuredEnvironment environment;
  std::string model_name;
  int64_t parameters = 0;
  model::Plan plan;
  int micro_batch = 1, grad_accum = 1, data_parallel_ranks = 1;
  int64_t seq_len = 0, global_batch = 0, tokens_per_step = 0, resumed_from_step = 0;
  std::string data;  // "synthetic (seed N)" or the --data file
  std::vector<MeasuredStep> steps;
  // Summary of the steps after the first (all when one).
  int64_t steps_measured = 0;
  double mean_step_time_s = 0;
  double tokens_per_s = 0;
  double model_flops_per_token = 0, achieved_flops_per_s = 0;  // 6N + 12·L·H·S (README MFU)
  std::vector<MeasuredUnit> units;
  std::vector<MeasuredCompute> compute;
  std::vector<MeasuredWait> waits;
  std::vector<MeasuredCollective> collectives;
  int64_t peak_tracked_bytes = 0, peak_rss_bytes = 0;
  int64_t peak_device_reserved_bytes = 0, device_used_bytes = 0;  // CUDA runs only
  std::string memory_judged_on;  // what peak_tracked_bytes is, in words
  std::vector<MeasuredRankMemory> memory_per_rank;
  // Optional "phases" (files written before issue #11 have none: empty).
  std::vector<MeasuredPhase> phases;

  // True when the compute figures leave out the first step (the run kept its trace).
  bool HasSteadyCompute() const;
  // The optimizer's mean seconds per step (steady when known); nullopt when not recorded.
  std::optional<double> OptimizerPerStepS() const;
};

// The document, keys in the order the executor has always written them; optional keys (CUDA
// figures, steady_* spans, the BLAS) only where set.
nlohmann::ordered_json MeasurementsToJson(const Measurements& m);

// Reads and checks a measurements file. Every problem (missing key, wrong type, out-of-range
// value, unknown key, empty steps) is collected and thrown together as one InputError, each
// "FILE:/json/pointer: expected ..., got ...". Throws InputError.
Measurements ReadMeasurementsFile(const std::string& path);
// The same from parsed JSON; `name` stands for the file in messages.
Measurements MeasurementsFromJson(const nlohmann::json& j, const std::string& name);

}  // namespace shardtune::model
