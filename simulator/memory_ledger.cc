// Byte ledger with per-category, per-stream accounting and peak tracking.
#include "simulator/memory_ledger.h"

#include <algorithm>

#include "model/errors.h"

namespace shardtune::sim {
namespace {
constexpr int64_t kMinBlockSize = 512;              // CUDACachingAllocator.cpp kMinBlockSize
constexpr int64_t kSegmentGranule = 2 * 1024 * 1024;  // kSmallBuffer / kRoundLarge segments
int64_t RoundToSegment(int64_t b) { return (b + kSegmentGranule - 1) / kSegmentGranule * kSegmentGranule; }
}  // namespace

int64_t RoundToBlock(int64_t bytes) {
  if (bytes <= 0) return 0;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

void MemoryLedger::Phase(const std::string& name) {
  if (!phase_.empty()) timeline_.push_back({phase_, Bytes::Of(phase_peak_), Bytes::Of(total_)});
  phase_ = name;
  phase_peak_ = total_;
}

void MemoryLedger::Touch() {
  phase_peak_ = std::max(phase_peak_, total_);
  if (total_ > peak_) {
    peak_ = total_;
    peak_phase_ = phase_;
    at_peak_ = cur_;
  }
}

void MemoryLedger::Alloc(const std::string& category, Stream s, int64_t bytes) {
  int64_t b = RoundToBlock(bytes);
  if (b == 0) return;
  cur_[category] += b;
  cat_peak_[category] = std::max(cat_peak_[category], cur_[category]);
  total_ += b;
  auto i = static_cast<size_t>(s);
  pool_cur_[i] += RoundToSegment(b);
  pool_peak_[i] = std::max(pool_peak_[i], pool_cur_[i]);
  Touch();
}

void MemoryLedger::Free(const std::string& category, Stream s, int64_t bytes) {
  int64_t b = RoundToBlock(bytes);
  if (b == 0) return;
  SHARDTUNE_CHECK(cur_[category] >= b) << category << ": freeing " << b << " of " << cur_[category];
  cur_[category] -= b;
  total_ -= b;
  pool_cur_[static_cast<size_t>(s)] -= RoundToSegment(b);
}

void MemoryLedger::Transient(const std::string& category, Stream s, int64_t bytes) {
  Alloc(category, s, bytes);
  Free(category, s, bytes);
}

void MemoryLedger::Finish() { Phase(""); }

int64_t MemoryLedger::Current(const std::string& category) const {
  auto it = cur_.find(category);
  return it == cur_.end() ? 0 : it->second;
}

std::vector<std::pair<std::string, int64_t>> MemoryLedger::PeakBreakdown() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& kv : at_peak_) {
    if (kv.second > 0) out.push_back(kv);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

int64_t MemoryLedger::PeakWhere(const std::string& needle) const {
  int64_t p = 0;
  for (const auto& t : timeline_) {
    if (t.phase.find(needle) != std::string::npos) p = std::max(p, t.allocated_peak.count());
  }
  return p;
}

}  // namespace shardtune::sim
