// The catalog entry a real device maps to: CUDA reports "NVIDIA H100 80GB HBM3" or "Tesla
// V100-SXM2-32GB" (cudaDeviceProp::name), the catalog says "H100-SXM-80G". Used by
// `shardtune env` and by whatever records a measured device, so a measurement names the
// catalog kind its figures belong to.
#pragma once

#include <string>

#include "model/units.h"
#include "profiles/hardware.h"

namespace shardtune::profiles {

struct DeviceMatch {
  const GpuSpec* gpu = nullptr;  // the catalog entry, or nullptr
  std::string why;               // when gpu is null: why no entry fits (one line)
};

// Maps a CUDA device name and its total memory (cudaDeviceProp::totalGlobalMem; Bytes::Of(0)
// when unknown) to the catalog. The name decides the family and form factor (H100 SXM vs PCIe vs
// NVL, A100 SXM4, V100 SXM2, ...); the memory picks between capacities of one family and rejects
// a match whose memory differs from the entry's usable memory by more than 10% (an H100 64GB
// part is not the 80 GB entry).
DeviceMatch MatchCudaDevice(const std::string& device_name, Bytes total_memory);

}  // namespace shardtune::profiles
