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

}  // namespace shardtune::exec
