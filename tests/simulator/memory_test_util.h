// What the memory tests share: a category's peak in a report, and the caching allocator's
// rounding of each allocation to 512 bytes (c10/cuda/CUDACachingAllocator.cpp kMinBlockSize).
#pragma once

#include <cstdint>
#include <string>

#include "simulator/memory_model.h"

namespace shardtune::sim::memtest {

inline int64_t R512(int64_t b) { return (b + 511) / 512 * 512; }

// The most category `name` (step_program.cc ToString(Category)) held during the two steps.
inline Bytes CategoryPeak(const MemoryReport& r, const std::string& name) {
  for (const auto& kv : r.category_peaks) {
    if (kv.first == name) return kv.second;
  }
  return Bytes();
}
inline Bytes CategoryPeak(const MemoryReport& r, Category c) { return CategoryPeak(r, ToString(c)); }

}  // namespace shardtune::sim::memtest
