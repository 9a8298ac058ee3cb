// This machine's memory and cores, as the kernel and its cgroup give them to a process: what
// `cpu:N` clusters describe (CPU ranks share one host) and what `run`'s pre-flight check judges a
// plan against before it starts any rank (issue #50). Plain C++, reads /proc and /sys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/units.h"

namespace shardtune::profiles {

struct MachineMemory {
  Bytes total;           // MemTotal, lowered to the cgroup's limit when one is set
  Bytes available;       // MemAvailable, lowered to the cgroup's limit - its usage when set
  Bytes cgroup_limit;    // memory.max (v2) / memory.limit_in_bytes (v1); 0: none
  Bytes cgroup_usage;    // memory.current (v2) / memory.usage_in_bytes (v1) when limited
  int cpu_cores = 1;     // CPUs this process may run on (sched_getaffinity)
  std::string source;    // where the figures came from, e.g. "/proc/meminfo, cgroup v2 memory.max"
  bool read = false;     // false: /proc/meminfo was unreadable (total and available are 0)
};

// The figures of /proc/meminfo-formatted `text` ("MemTotal:  24558576 kB" lines): MemTotal and
// MemAvailable in bytes (the kernel's "kB" are KiB); missing keys stay 0.
struct MeminfoFigures {
  int64_t total_bytes = 0, available_bytes = 0;
};
MeminfoFigures ParseMeminfo(const std::string& text);

// The cgroup memory limit and usage of the cgroup at `cgroup_dir` (v2 files memory.max and
// memory.current, else v1 memory.limit_in_bytes and memory.usage_in_bytes); limit 0 when there
// is none ("max", or v1's page-counter maximum). Missing files: 0.
void ReadCgroupMemory(const std::string& cgroup_dir, int64_t* limit_bytes, int64_t* usage_bytes);

// This machine now. /proc/meminfo is read from the file SHARDTUNE_TEST_MEMINFO names when that
// variable is set (tests fake MemTotal and MemAvailable that way; the cgroup is then not read,
// as a fake meminfo would be judged against the real machine's cgroup otherwise).
MachineMemory ReadThisMachine();

// "23.4 GiB RAM (MemTotal), 2 cores" or "... (cgroup limit 16.0 GiB)": for messages.
std::string DescribeMachine(const MachineMemory& m);

}  // namespace shardtune::profiles

namespace shardtune::profiles {

// One GPU as the NVIDIA driver reports it now (NVML, what nvidia-smi reads; no CUDA context).
struct GpuMemoryNow {
  int index = 0;  // the CUDA index in this process (after CUDA_VISIBLE_DEVICES)
  std::string name;
  Bytes total, free;
};

// The GPUs ranks 0..count-1 of this host will use (CUDA device LOCAL_RANK, CUDA_VISIBLE_DEVICES
// honoured: integers or GPU-UUIDs), read through libnvidia-ml.so.1 (dlopen). Empty with *why set
// when the library, the driver or a device cannot be read (MIG instances are not read).
std::vector<GpuMemoryNow> ReadGpuMemory(int count, std::string* why);

}  // namespace shardtune::profiles
