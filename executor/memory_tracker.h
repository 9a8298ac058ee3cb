// Memory of a CPU rank: bytes of tensor storage LibTorch allocated (a counting wrapper around
// its CPU allocator, the analogue of torch.cuda.memory_allocated) and the process's resident
// set (VmRSS / VmHWM). The wrapper is process-wide by nature: LibTorch has one CPU allocator.
#pragma once

#include <cstdint>

namespace shardtune::exec {

// Installs the counting allocator (idempotent, thread-safe). Storage allocated before stays
// uncounted. LibTorch keeps calling it for the life of the process.
void InstallCpuMemoryTracker();
int64_t TrackedBytes();       // live tensor storage bytes allocated through the tracker
int64_t TrackedPeakBytes();   // maximum of TrackedBytes() since the last reset
void ResetTrackedPeak();      // peak := current
// The maximum of TrackedBytes() since the previous call (or the install), then resets that
// window to the current bytes; independent of TrackedPeakBytes().
int64_t TakeTrackedWindowPeakBytes();
int64_t ResidentBytes();      // VmRSS
int64_t ResidentPeakBytes();  // VmHWM
// VmHWM := VmRSS (writes "5" to /proc/self/clear_refs, Linux >= 4.0). False when the kernel
// refused; VmHWM then stays the process's peak so far.
bool ResetResidentPeak();

}  // namespace shardtune::exec
