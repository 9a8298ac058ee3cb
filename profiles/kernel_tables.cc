// Names of the measured memory-bound kernels (profile JSON spelling).
#include "profiles/kernel_tables.h"

namespace shardtune::profiles {
namespace {

constexpr const char* kMemoryKernelNames[kNumMemoryKernels] = {
    "elementwise",         "cast",
    "copy",                "adamw_foreach",
    "all_gather_copy_in",  "all_gather_copy_out",
    "reduce_scatter_chunk_cat", "cross_entropy",
    "host_adamw_foreach"};

}  // namespace

const char* ToString(MemoryKernel k) { return kMemoryKernelNames[static_cast<int>(k)]; }

std::optional<MemoryKernel> MemoryKernelFromString(const std::string& name) {
  for (int i = 0; i < kNumMemoryKernels; ++i) {
    if (name == kMemoryKernelNames[i]) return static_cast<MemoryKernel>(i);
  }
  return std::nullopt;
}

}  // namespace shardtune::profiles
