// Host facts from /proc (host_info.h).
#include "executor/host_info.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shardtune::exec {

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t c = line.find(':');
      if (c == std::string::npos) continue;
      size_t start = line.find_first_not_of(' ', c + 1);
      if (start != std::string::npos) return line.substr(start);
    }
  }
  return "unknown CPU";
}

int64_t HostMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") return kib * 1024;  // the kernel writes "MemTotal: N kB" (KiB)
  }
  return 0;
}

std::string ParseNvidiaDriverVersion(const std::string& first_line) {
  // The word after "Module" is not it: the open kernel module writes "Module for x86_64".
  std::istringstream words(first_line);
  std::string w;
  while (words >> w) {
    bool digits_and_dots = std::isdigit(static_cast<unsigned char>(w[0])) != 0 &&
                           w.find_first_not_of("0123456789.") == std::string::npos;
    if (digits_and_dots && w.find('.') != std::string::npos) return w;
  }
  return "";
}

std::string NvidiaDriverVersion() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  return ParseNvidiaDriverVersion(line);
}

bool KeepFreedHostMemory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
  constexpr int kMmapThresholdBytes = 32 * 1024 * 1024;  // DEFAULT_MMAP_THRESHOLD_MAX, 64-bit
  constexpr int kTrimThresholdBytes = 1024 * 1024 * 1024;
  return mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) == 1 &&
         mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1;
#else
  return false;
#endif
}

bool ReleaseFreedHostMemory() {
#if defined(__GLIBC__)
  return malloc_trim(0) == 1;
#else
  return false;
#endif
}

}  // namespace shardtune::exec
