// Internals of EstimateJobPhases shared by job_phases.cc and job_phases_host.cc (and tests):
// the replay of memory actions by named category, and the sizes the phases need.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "simulator/job_phases.h"

namespace shardtune::sim::internal {

// Bytes per category name and per allocator pool, replayed in program order with the caching
// allocator's 512-byte blocks (RoundToBlock); tracks the current phase's peak, its moment (the
// label in force when it was reached) and the categories then. Pool peaks never reset: the cache
// keeps what it reserved for the life of the process.
class Replay {
 public:
  void Begin(const std::string& moment);  // starts a phase: its peak is the current total
  void set_label(const std::string& label) { label_ = Label{label, nullptr, 0}; }
  void Apply(const std::string& category, Stream pool, int64_t signed_bytes) {
    ApplyTo(Id(category), pool, signed_bytes);
  }
  void ApplyOp(const StepProgram& p, size_t i);       // labels with the op's name
  void ApplyActions(const StepProgram& p, size_t i);  // keeps the current label
  int64_t total() const { return total_; }
  int64_t phase_peak() const { return phase_peak_; }
  std::string moment() const;
  // The categories at the phase's peak (those seen by then, zeros included), by name.
  std::map<std::string, int64_t> at_peak() const;
  // Reserved with no memory pressure: per-pool peaks, 2 MiB segments per block (default) or
  // whole 20 MiB pages per pool (expandable segments).
  int64_t Reserved(bool expandable) const;
  int64_t RawPoolPeaks() const;

 private:
  // A label is a string or an op of a program, named only when a phase's moment is read (a
  // step has millions of ops; building each name cost seconds per estimate).
  struct Label {
    std::string text;
    const StepProgram* program = nullptr;
    size_t op = 0;
  };
  int Id(const std::string& category);
  void ApplyTo(int id, Stream pool, int64_t signed_bytes);
  // Category names in first-seen order and their ids; bytes per id now and at the peak.
  std::vector<std::string> names_;
  std::map<std::string, int> ids_;
  std::array<int, kNumCategories> program_ids_ = [] {
    std::array<int, kNumCategories> a{};
    a.fill(-1);
    return a;
  }();
  std::vector<int64_t> cur_, at_peak_;
  std::array<int64_t, kNumStreams> pool_raw_{}, pool_seg_{}, pool_raw_peak_{}, pool_seg_peak_{};
  int64_t total_ = 0, phase_peak_ = 0;
  Label label_, moment_;  // the label in force now, and when the phase's peak was reached
};

int64_t RoundToSegment(int64_t bytes);

// Sizes of the model the phases need, per rank (shard group of n).
struct JobSizes {
  int64_t param_tensors = 0;
  int64_t parameters = 0;
  int64_t shard_numel = 0;                       // padded shard elements per rank, all params
  int64_t trainable_parameters = 0;              // with gradients and optimizer state
  int64_t trainable_shard_numel = 0;             // their padded shard elements per rank
  int64_t largest_param_numel = 0;
  // Per parameter: padded full size in its sharded dtype (master; frozen: Plan::FrozenDtype).
  std::vector<int64_t> param_full_master_bytes;
  std::vector<int64_t> state_full_bytes;         // per optimizer state tensor, gathered in full
  int64_t full_state_bytes = 0;                  // sum of both lists: the full state dict
  std::string largest_unit_name;
  int64_t largest_unit_full_bytes = 0;           // unpadded, sharded dtypes
  std::string largest_param_name;
  int64_t largest_param_full_ckpt_bytes = 0;     // unpadded, dtype of the pretrained weights
  int64_t largest_param_shard_ckpt_bytes = 0;    // its padded shard in that dtype
  std::string largest_tensor_name;               // largest of params and state tensors, full
  int64_t largest_tensor_full_bytes = 0;
  int64_t largest_shard_item_bytes = 0;          // largest local shard of any state tensor
  int64_t full_ckpt_bytes = 0;                   // parameters x pretrained-weight dtype
  int64_t full_master_bytes = 0;                 // parameters x their sharded dtype (unpadded)
  int64_t largest_param_master_bytes = 0;        // unpadded
  // ModelLoad::kExecutor, per rank, over the units in construction order (unit i's peak is the
  // shards built before it + its own): what exceeds every shard at the worst unit, when the full
  // fp32 unit is in the same memory (CPU ranks) and when it is in host RAM (GPU ranks), and the
  // largest unit's full fp32 buffer (host RAM on GPU ranks).
  std::string executor_load_unit;
  int64_t executor_load_excess_cpu_bytes = 0, executor_load_excess_device_bytes = 0;
  int64_t executor_largest_unit_fp32_bytes = 0;
};

JobSizes ComputeSizes(const model::ModelSpec& spec, const model::Plan& plan, int shard_n,
                      const MemoryOptions& o);
// Fills host_* of every phase and out->host_limit (job_phases_host.cc).
void AddHostMemory(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                   const model::Plan& plan, const MemoryReport& report, const JobSizes& z,
                   const MemoryOptions& o, JobPhases* out);

}  // namespace shardtune::sim::internal
