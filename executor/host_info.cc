// Host facts from /proc (host_info.h).
#include "executor/host_info.h"

#include <fstream>
#include <sstream>

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

std::string NvidiaDriverVersion() {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..." (or "Open
  // Kernel Module"): the version is the token after "Module".
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  std::istringstream words(line);
  std::string w, prev;
  while (words >> w) {
    if (prev == "Module") return w;
    prev = w;
  }
  return "";
}

}  // namespace shardtune::exec
