// This machine's memory (/proc/meminfo and the process's cgroup) and cores.
#include "profiles/this_machine.h"
#include "model/text.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace shardtune::profiles {
namespace {

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = static_cast<bool>(in);
  std::ostringstream s;
  if (*ok) s << in.rdbuf();
  return s.str();
}

// A cgroup file holding one integer (or "max"): the value, 0 for "max" or a missing file.
int64_t CgroupValue(const std::string& path) {
  bool ok = false;
  std::string text = ReadFile(path, &ok);
  if (!ok) return 0;
  std::istringstream in(text);
  std::string word;
  in >> word;
  if (word.empty() || word == "max") return 0;
  const int64_t v = model::ParseInt64(word).value_or(0);
  return v > 0 ? v : 0;
}

// The process's cgroup folder: the v2 line "0::/path" of /proc/self/cgroup under
// /sys/fs/cgroup, or v1's "N:memory:/path" under /sys/fs/cgroup/memory. Inside a container the
// path names the host's hierarchy while the container's own cgroup is mounted at the root, so a
// path that does not exist falls back to the root.
std::string CgroupDir(bool* v2) {
  bool ok = false;
  std::string text = ReadFile("/proc/self/cgroup", &ok);
  std::istringstream in(text);
  std::string line, v1_path, v2_path;
  bool has_v2 = false;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) {
      has_v2 = true;
      v2_path = line.substr(3);
    }
    size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find(",memory,") != std::string::npos) v1_path = line.substr(b + 1);
  }
  auto exists = [](const std::string& p) { return static_cast<bool>(std::ifstream(p)); };
  if (!v1_path.empty()) {
    *v2 = false;
    std::string dir = "/sys/fs/cgroup/memory" + v1_path;
    return exists(dir + "/memory.limit_in_bytes") ? dir : "/sys/fs/cgroup/memory";
  }
  *v2 = has_v2;
  std::string dir = "/sys/fs/cgroup" + v2_path;
  return exists(dir + "/memory.max") ? dir : "/sys/fs/cgroup";
}

}  // namespace

MeminfoFigures ParseMeminfo(const std::string& text) {
  MeminfoFigures f;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string key;
    long long kib = 0;
    if (!(l >> key >> kib) || kib < 0) continue;
    if (key == "MemTotal:") f.total_bytes = kib * 1024;
    if (key == "MemAvailable:") f.available_bytes = kib * 1024;
  }
  return f;
}

void ReadCgroupMemory(const std::string& dir, int64_t* limit, int64_t* usage) {
  *limit = CgroupValue(dir + "/memory.max");
  *usage = CgroupValue(dir + "/memory.current");
  if (*limit == 0 && *usage == 0) {
    *limit = CgroupValue(dir + "/memory.limit_in_bytes");
    *usage = CgroupValue(dir + "/memory.usage_in_bytes");
    // cgroup v1 writes its page counter's maximum (LONG_MAX rounded down to a page) for "none".
    if (*limit >= (int64_t{1} << 62)) *limit = 0;
  }
}

MachineMemory ReadThisMachine() {
  MachineMemory m;
  const char* fake = std::getenv("SHARDTUNE_TEST_MEMINFO");
  const std::string path = fake != nullptr && *fake != '\0' ? fake : "/proc/meminfo";
  bool ok = false;
  MeminfoFigures f = ParseMeminfo(ReadFile(path, &ok));
  m.read = ok && f.total_bytes > 0;
  m.total = Bytes::Of(f.total_bytes);
  // Kernels before 3.14 have no MemAvailable: the total is then the only figure.
  m.available = Bytes::Of(f.available_bytes > 0 ? f.available_bytes : f.total_bytes);
  m.source = path;
  if (fake == nullptr || *fake == '\0') {
    bool v2 = false;
    const std::string dir = CgroupDir(&v2);
    int64_t limit = 0, usage = 0;
    ReadCgroupMemory(dir, &limit, &usage);
    if (limit > 0) {
      m.cgroup_limit = Bytes::Of(limit);
      m.cgroup_usage = Bytes::Of(usage);
      if (m.cgroup_limit < m.total) m.total = m.cgroup_limit;
      const Bytes left = Bytes::Of(std::max<int64_t>(0, limit - usage));
      if (left < m.available) m.available = left;
      m.source += std::string(", cgroup ") + (v2 ? "v2 memory.max" : "v1 memory.limit_in_bytes");
    }
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    m.cpu_cores = std::max(1, CPU_COUNT(&set));
  } else {
    m.cpu_cores = std::max(1u, std::thread::hardware_concurrency());
  }
  return m;
}

std::string DescribeMachine(const MachineMemory& m) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << m.total.count() / static_cast<double>(int64_t{1} << 30) << " GiB RAM ("
    << (m.cgroup_limit.count() > 0 && m.cgroup_limit <= m.total ? "cgroup limit" : "MemTotal")
    << "), " << m.cpu_cores << " core" << (m.cpu_cores == 1 ? "" : "s");
  return o.str();
}

namespace {

// NVML's C API (nvml.h, CUDA Toolkit): the few entry points used, by their documented signatures.
struct NvmlMemory {
  unsigned long long total, free, used;
};
using NvmlDevice = void*;
using NvmlInit = int (*)();
using NvmlShutdown = int (*)();
using NvmlByIndex = int (*)(unsigned int, NvmlDevice*);
using NvmlByUuid = int (*)(const char*, NvmlDevice*);
using NvmlMemoryInfo = int (*)(NvmlDevice, NvmlMemory*);
using NvmlName = int (*)(NvmlDevice, char*, unsigned int);

}  // namespace

std::vector<GpuMemoryNow> ReadGpuMemory(int count, std::string* why) {
  std::vector<GpuMemoryNow> out;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *why = "libnvidia-ml.so.1 (the NVIDIA driver's NVML) cannot be loaded";
    return out;
  }
  auto sym = [&](const char* n) { return ::dlsym(lib, n); };
  auto init = reinterpret_cast<NvmlInit>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlShutdown>(sym("nvmlShutdown"));
  auto by_index = reinterpret_cast<NvmlByIndex>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto by_uuid = reinterpret_cast<NvmlByUuid>(sym("nvmlDeviceGetHandleByUUID"));
  auto memory = reinterpret_cast<NvmlMemoryInfo>(sym("nvmlDeviceGetMemoryInfo"));
  auto name = reinterpret_cast<NvmlName>(sym("nvmlDeviceGetName"));
  if (!init || !shutdown || !by_index || !by_uuid || !memory || !name || init() != 0) {
    *why = "NVML did not initialise (no NVIDIA driver loaded?)";
    ::dlclose(lib);
    return out;
  }
  // CUDA_VISIBLE_DEVICES "2,3" or "GPU-<uuid>,...": CUDA device i is the i-th entry.
  std::vector<std::string> visible;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    std::istringstream in(v);
    std::string item;
    while (std::getline(in, item, ',')) {
      if (!item.empty()) visible.push_back(item);
    }
  }
  const bool restricted = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
  for (int i = 0; i < count; ++i) {
    NvmlDevice d = nullptr;
    int rc = -1;  // also: past the visible list, MIG-<uuid> and other forms
    const std::string entry = static_cast<size_t>(i) < visible.size() ? visible[static_cast<size_t>(i)] : "";
    if (!restricted) {
      rc = by_index(static_cast<unsigned int>(i), &d);
    } else if (entry.rfind("GPU-", 0) == 0) {
      rc = by_uuid(entry.c_str(), &d);
    } else if (!entry.empty() && entry.size() <= 9 &&
               entry.find_first_not_of("0123456789") == std::string::npos) {
      rc = by_index(static_cast<unsigned int>(std::stoul(entry)), &d);
    }
    NvmlMemory m{};
    if (rc != 0 || memory(d, &m) != 0) {
      *why = "NVML cannot read CUDA device " + std::to_string(i) +
             (restricted ? " (CUDA_VISIBLE_DEVICES entry \"" + entry + "\")" : "");
      out.clear();
      break;
    }
    char text[96] = {0};
    name(d, text, sizeof(text) - 1);
    out.push_back({i, text, Bytes::Of(static_cast<int64_t>(m.total)), Bytes::Of(static_cast<int64_t>(m.free))});
  }
  shutdown();
  ::dlclose(lib);
  return out;
}

}  // namespace shardtune::profiles
