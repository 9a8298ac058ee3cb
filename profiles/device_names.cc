// CUDA device names -> catalog entries (device_names.h). The names are the ones NVIDIA's driver
// reports (nvidia-smi --query-gpu=name, cudaDeviceProp::name), e.g. "NVIDIA H100 80GB HBM3",
// "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-32GB", "NVIDIA GeForce RTX 4090".
#include "profiles/device_names.h"

#include <cctype>
#include <cmath>
#include <set>
#include <sstream>
#include <vector>

namespace shardtune::profiles {
namespace {

// Tokens of a device name: upper case, split at spaces, '-' and '_', vendor words dropped.
std::set<std::string> Tokens(const std::string& name) {
  std::string s;
  for (char c : name) {
    s += (c == '-' || c == '_') ? ' '
                                : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  std::set<std::string> out;
  std::istringstream in(s);
  std::string t;
  while (in >> t) {
    if (t != "NVIDIA" && t != "TESLA" && t != "GEFORCE") out.insert(t);
  }
  return out;
}

struct Rule {
  std::vector<std::string> all;      // every token must be present
  std::vector<std::string> none;     // no token may be present (other form factors, variants)
  std::vector<std::string> entries;  // catalog names of this family; memory picks among them
};

// One rule per catalog family. Variants without an entry are excluded by name so that they are
// reported as unknown rather than mapped to a part with other clocks, links or memory:
// H100/H200 NVL (PCIe cards with NVLink bridges), RTX 4090 D (fewer SMs), Ti and laptop parts,
// PCIe A100/V100 (lower TDP and PCIe links).
const std::vector<Rule>& Rules() {
  static const std::vector<Rule> rules = {
      {{"H100"}, {"PCIE", "NVL"}, {"H100-SXM-80G"}},
      {{"H100", "PCIE"}, {"NVL"}, {"H100-PCIe-80G"}},
      {{"H200"}, {"NVL"}, {"H200-SXM-141G"}},
      {{"B200"}, {}, {"B200-180G"}},
      {{"H800"}, {"PCIE", "NVL"}, {"H800-SXM-80G"}},
      {{"H20"}, {}, {"H20-96G"}},
      {{"L20"}, {}, {"L20"}},
      {{"L4"}, {}, {"L4"}},
      {{"A100", "SXM4"}, {}, {"A100-SXM-80G", "A100-SXM-40G"}},
      {{"L40S"}, {}, {"L40S"}},
      {{"RTX", "4090"}, {"D", "TI", "LAPTOP"}, {"RTX4090"}},
      {{"RTX", "3090"}, {"TI", "LAPTOP"}, {"RTX3090"}},
      {{"A10G"}, {}, {"A10G"}},
      {{"V100", "SXM2"}, {}, {"V100-SXM2-32G", "V100-SXM2-16G"}},
  };
  return rules;
}

bool Matches(const Rule& r, const std::set<std::string>& tokens) {
  for (const auto& t : r.all) {
    if (tokens.count(t) == 0) return false;
  }
  for (const auto& t : r.none) {
    if (tokens.count(t) != 0) return false;
  }
  return true;
}

// Relative distance of a device's memory from an entry's usable memory.
double MemoryGap(const GpuSpec& g, Bytes total) {
  double want = static_cast<double>(g.usable_memory.count());
  return std::abs(static_cast<double>(total.count()) - want) / want;
}

// The largest difference between a device's reported total and the entry's usable memory that
// still counts as the same part: driver versions move total_memory by tens of MiB (gpus.json's
// note), while the nearest other capacity of a family differs by >= 20% (A100 40 vs 80 GB,
// H100 64 vs 80 GB, V100 16 vs 32 GB).
constexpr double kMaxMemoryGap = 0.10;

}  // namespace

DeviceMatch MatchCudaDevice(const std::string& device_name, Bytes total_memory) {
  const std::set<std::string> tokens = Tokens(device_name);
  for (const Rule& r : Rules()) {
    if (!Matches(r, tokens)) continue;
    const GpuSpec* best = nullptr;
    for (const std::string& name : r.entries) {
      const GpuSpec* g = LookupGpu(name);
      if (g == nullptr) continue;
      if (total_memory.count() <= 0) {
        // Unknown memory: the capacity written in the name ("40GB"), else the family's first.
        std::string gb =
            std::to_string(static_cast<int>(std::lround(g->marketed_memory.gb()))) + "GB";
        if (best == nullptr || tokens.count(gb) != 0) best = g;
        continue;
      }
      if (best == nullptr || MemoryGap(*g, total_memory) < MemoryGap(*best, total_memory)) best = g;
    }
    if (best == nullptr) break;
    if (total_memory.count() > 0 && MemoryGap(*best, total_memory) > kMaxMemoryGap) {
      std::ostringstream why;
      why.precision(1);
      why << std::fixed << "\"" << device_name << "\" has " << total_memory.gib()
          << " GiB; the catalog's " << best->name << " has " << best->usable_memory.gib()
          << " GiB: no catalog entry for this part";
      return {nullptr, why.str()};
    }
    return {best, ""};
  }
  return {nullptr, "\"" + device_name +
                       "\" is not in the catalog (shardtune gpus); use a cluster JSON with this "
                       "GPU's figures"};
}

}  // namespace shardtune::profiles
