// What the host is, read from /proc: the CPU model, the memory, the NVIDIA driver. Torch-free;
// shared by measurements.json's environment, the probe's provenance and `shardtune env`.
#pragma once

#include <cstdint>
#include <string>

namespace shardtune::exec {

// "model name" of /proc/cpuinfo's first processor; "unknown CPU" when there is none.
std::string CpuModel();
// MemTotal of /proc/meminfo in bytes; 0 when unreadable.
int64_t HostMemoryBytes();
// The NVIDIA kernel module's version from /proc/driver/nvidia/version ("580.65.06"); "" when
// no NVIDIA driver is loaded.
std::string NvidiaDriverVersion();
// The version in that file's first line: the first word of digits and dots with a dot in it
// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..." and the open
// module's "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build
// ..."); "" when there is none.
std::string ParseNvidiaDriverVersion(const std::string& first_line);

// Makes this process keep the host memory it frees for its next allocations, as PyTorch's CUDA
// caching allocator does on a GPU, instead of glibc's defaults: blocks above a dynamic mmap
// threshold (128 KiB at start) are mmapped and unmapped on free, and a free heap top above 128 KiB
// is trimmed, so every step's activations, gradients and gathered parameters fault their pages in
// again (zeroed by the kernel). A CPU rank of a 20.8M Llama spent 15.4 s of 23.3 s in the kernel
// that way (2026-11-28, 2-core VM; perf: exc_page_fault, clear_page_erms). Sets M_MMAP_THRESHOLD
// to glibc's ceiling (32 MiB on 64-bit, malloc.c DEFAULT_MMAP_THRESHOLD_MAX: larger blocks are
// still mapped) and M_TRIM_THRESHOLD to 1 GiB: the RSS then stays near the step's peak between
// steps. Nothing is changed where the user set GLIBC_TUNABLES for malloc, or off glibc. Returns
// whether it changed the settings.
bool KeepFreedHostMemory();

// Returns the heap memory this process has freed to the kernel (glibc malloc_trim(0): the top of
// every arena and whole free pages inside them, MADV_DONTNEED), undoing KeepFreedHostMemory's
// retention once. CPU ranks call it before a checkpoint save and a resume, the moments a host
// runs out (issue #50): the save then holds the live state and the process, not the last step's
// freed activations too (qwen2.5-0.5b, 2 CPU ranks: 1.0 GiB of a rank's 4.0 GiB save RSS was
// retained free heap, 2026-11-28). The step after re-faults what it allocates again. Returns
// whether memory was released.
bool ReleaseFreedHostMemory();

}  // namespace shardtune::exec
