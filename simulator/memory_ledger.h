// A byte ledger of one rank's GPU memory through a training step, per category and per CUDA
// stream, recording the peak of what PyTorch allocates, the moment it happens and the breakdown
// then. Per-stream peaks matter because the caching allocator reuses a freed block only for the
// same stream (c10/cuda/CUDACachingAllocator.cpp, get_free_block keys on stream).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/units.h"

namespace shardtune::sim {

enum class Stream { kDefault = 0, kAllGather = 1, kReduceScatter = 2 };
inline constexpr int kNumStreams = 3;

// One moment of the step (the end of a phase) in the timeline.
struct TimelinePoint {
  std::string phase;      // e.g. "step 1 · mb 2/4 · backward · model.layers.3"
  Bytes allocated_peak;   // most bytes allocated during the phase
  Bytes allocated_after;  // bytes allocated when it ends
};

class MemoryLedger {
 public:
  // Sets the phase that following allocations belong to; closes the previous one.
  void Phase(const std::string& name);
  void Alloc(const std::string& category, Stream s, int64_t bytes);
  void Free(const std::string& category, Stream s, int64_t bytes);
  // Allocates and frees at once: the moment counts for the peak.
  void Transient(const std::string& category, Stream s, int64_t bytes);
  void Finish();

  int64_t Current(const std::string& category) const;
  int64_t peak_bytes() const { return peak_; }
  const std::string& peak_phase() const { return peak_phase_; }
  // Categories with their bytes at the peak, largest first (zero entries dropped).
  std::vector<std::pair<std::string, int64_t>> PeakBreakdown() const;
  // Peak bytes each stream's pool held: allocations rounded up to the allocator's 2 MiB
  // granule, as segments are (kLargeBuffer/kSmallBuffer; blocks >10 MiB get their own segment).
  std::array<int64_t, kNumStreams> stream_pool_peaks() const { return pool_peak_; }
  const std::vector<TimelinePoint>& timeline() const { return timeline_; }
  // The most bytes each category ever held (not necessarily at the same moment).
  const std::map<std::string, int64_t>& category_peaks() const { return cat_peak_; }
  // Peak allocated inside phases whose name contains `needle`.
  int64_t PeakWhere(const std::string& needle) const;

 private:
  void Touch();
  std::map<std::string, int64_t> cur_;
  std::map<std::string, int64_t> at_peak_;
  std::map<std::string, int64_t> cat_peak_;
  std::array<int64_t, kNumStreams> pool_cur_{}, pool_peak_{};
  int64_t total_ = 0, peak_ = 0, phase_peak_ = 0;
  std::string phase_, peak_phase_;
  std::vector<TimelinePoint> timeline_;
};

// The caching allocator rounds every block to 512 bytes (kMinBlockSize, round_size).
int64_t RoundToBlock(int64_t bytes);

}  // namespace shardtune::sim
