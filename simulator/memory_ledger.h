// Replays a StepProgram's memory actions in program order: bytes per category and per allocator
// pool (stream), the peak of what PyTorch allocates, the op it happens in and the breakdown then.
// Per-pool peaks matter because the caching allocator reuses a freed block only for the same
// stream (c10/cuda/CUDACachingAllocator.cpp, get_free_block compares block->stream).
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "simulator/step_program.h"

namespace shardtune::sim {

class MemoryLedger {
 public:
  explicit MemoryLedger(const StepProgram& program);

  int64_t peak_bytes() const { return peak_; }
  size_t peak_op() const { return peak_op_; }
  // Bytes per category at the peak, and the most each category ever held.
  const std::array<int64_t, kNumCategories>& at_peak() const { return at_peak_; }
  const std::array<int64_t, kNumCategories>& category_peaks() const { return cat_peak_; }
  // Peak bytes each pool held with blocks rounded up to the allocator's 2 MiB segment granule.
  const std::array<int64_t, kNumStreams>& pool_peaks() const { return pool_peak_; }
  // Per op: the most bytes allocated while it was issued, and the bytes allocated after it.
  const std::vector<int64_t>& op_peak() const { return op_peak_; }
  const std::vector<int64_t>& op_after() const { return op_after_; }
  std::vector<int64_t> TakeOpAfter() { return std::move(op_after_); }
  // The most bytes allocated while an op of optimizer step `step` (0 or 1) was issued.
  int64_t PeakOfStep(int step) const;
  int64_t final_bytes() const { return total_; }

 private:
  const StepProgram& program_;
  std::array<int64_t, kNumCategories> cur_{}, at_peak_{}, cat_peak_{};
  std::array<int64_t, kNumStreams> pool_cur_{}, pool_peak_{};
  static constexpr int kSteps = 2;  // the walk's optimizer steps (step_walk.h)
  std::array<int64_t, kSteps> step_peak_{};
  int64_t total_ = 0, peak_ = 0;
  size_t peak_op_ = 0;
  std::vector<int64_t> op_peak_, op_after_;
};

// The caching allocator rounds every block to 512 bytes (kMinBlockSize, round_size).
int64_t RoundToBlock(int64_t bytes);

}  // namespace shardtune::sim
