// Defaults for cluster specs: reference machines per GPU kind (host memory, cores), NIC counts,
// shorthand fabric links and the CPU pseudo-GPU of "cpu:N".
#include "profiles/cluster_defaults.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shardtune::profiles::internal {
namespace {

// A machine whose host memory and cores stand for every node of a GPU kind class.
struct ReferenceMachine {
  int gpus;
  double host_memory_gib;
  int cpu_cores;
  // The machine is one host of a larger NVLink domain (a GB200 compute tray in an NVL72 rack):
  // nodes of more GPUs are several such hosts.
  bool host_in_larger_domain = false;
};

// NVIDIA DGX H100 / DGX H200 datasheets: 8 GPUs, 2 TB system memory, 2x Xeon Platinum 8480C
// (2 x 56 cores).
constexpr ReferenceMachine kDgxH100{8, 2048, 112};
// NVIDIA DGX B200 datasheet: 8 GPUs, 2 TB system memory (configurable to 4 TB), 2x Xeon Platinum
// 8570 (112 cores).
constexpr ReferenceMachine kDgxB200{8, 2048, 112};
// A GB200 NVL72 compute tray (NVIDIA GB200 NVL72 specifications: 36 Grace CPUs with 2,592 Arm
// Neoverse V2 cores and up to 17 TB LPDDR5X for 72 GPUs): 2 Grace Blackwell superchips, each
// one Grace (72 cores, 480 GB LPDDR5X) and two GPUs = 4 GPUs, 960 GiB (the 480 GB taken as GiB,
// as the DGX "2 TB" are), 144 cores. One host of the rack's 72-GPU NVLink domain.
constexpr ReferenceMachine kGb200Tray{4, 960, 144, true};
// NVIDIA DGX A100 datasheet: 8 GPUs, 2x AMD EPYC 7742 (2 x 64 cores); 2 TB system memory in the
// 640 GB (80 GB GPU) system, 1 TB in the 320 GB (40 GB GPU) system.
constexpr ReferenceMachine kDgxA100_640{8, 2048, 128};
constexpr ReferenceMachine kDgxA100_320{8, 1024, 128};
// NVIDIA DGX-1 with Tesla V100 datasheet: 8 GPUs, 512 GB DDR4, 2x Xeon E5-2698 v4 (2 x 20 cores).
constexpr ReferenceMachine kDgx1V100{8, 512, 40};
// Assumption: an 8-GPU PCIe server (H100 PCIe, L40S) with 1 TiB and 64 cores.
constexpr ReferenceMachine kPcieServerAssumed{8, 1024, 64};
// AWS EC2 instance types, g5.48xlarge: 8x A10G, 768 GiB, 192 vCPUs (96 cores).
constexpr ReferenceMachine kAwsG5_48xlarge{8, 768, 96};
// Assumption: a workstation with 4 consumer GPUs (RTX 4090/3090), 128 GiB and 32 cores.
constexpr ReferenceMachine kWorkstationAssumed{4, 128, 32};
// Assumption for GPU kinds not listed below (inline GPUs in cluster files): 64 GiB and 8 cores
// per GPU. Cluster files should set host_memory_bytes_per_node for them.
constexpr ReferenceMachine kFallbackAssumed{1, 64, 8};

struct KindMachine {
  const char* gpu_name;
  ReferenceMachine machine;
};
constexpr KindMachine kKindMachines[] = {
    {"H100-SXM-80G", kDgxH100},
    {"H200-SXM-141G", kDgxH100},
    {"B200-180G", kDgxB200},
    {"GB200-186G", kGb200Tray},
    // Assumption: HGX H800 / H20 servers are built as a DGX H100 (8 GPUs, 2 TB, 112 cores).
    {"H800-SXM-80G", kDgxH100},
    {"H20-96G", kDgxH100},
    {"A100-SXM-80G", kDgxA100_640},
    {"A100-SXM-40G", kDgxA100_320},
    {"V100-SXM2-32G", kDgx1V100},
    {"V100-SXM2-16G", kDgx1V100},
    {"H100-PCIe-80G", kPcieServerAssumed},
    {"L40S", kPcieServerAssumed},
    {"L20", kPcieServerAssumed},
    {"L4", kPcieServerAssumed},
    {"A10G", kAwsG5_48xlarge},
    {"RTX4090", kWorkstationAssumed},
    {"RTX3090", kWorkstationAssumed},
};

// Assumption for "cpu:N" where /proc/meminfo cannot be read: a 32 GiB development machine.
constexpr double kCpuHostMemoryGiB = 32;
// One AVX2 core: 2 FMA units x 8 fp32 lanes x 2 FLOPs x 3.0 GHz = 96 GFLOP/s (no AMX assumed,
// so bf16/fp16 run at the fp32 rate).
constexpr double kCpuCoreFlopsPerS = 2 * 8 * 2 * 3.0e9;
// Dual-channel DDR4-3200: 2 channels x 8 bytes x 3.2e9 transfers/s = 51.2 GB/s per host.
constexpr double kCpuHostMemoryBytesPerS = 2 * 8 * 3.2e9;

}  // namespace

NodeDefaults DefaultNode(const std::string& gpu_name, int gpus_per_node) {
  ReferenceMachine m = kFallbackAssumed;
  for (const auto& km : kKindMachines) {
    if (gpu_name == km.gpu_name) m = km.machine;
  }
  double share = static_cast<double>(std::max(gpus_per_node, 1)) / m.gpus;
  NodeDefaults d;
  d.host_memory = Bytes::GiB(m.host_memory_gib * share);
  d.cpu_cores = std::max(1, static_cast<int>(std::lround(m.cpu_cores * share)));
  if (m.host_in_larger_domain && gpus_per_node > m.gpus) d.gpus_per_host = m.gpus;
  return d;
}

int DefaultNicsPerNode(const LinkSpec& intra_node, int gpus_per_node, int num_nodes) {
  if (num_nodes <= 1) return 0;
  return intra_node.nvlink_domain ? gpus_per_node : 1;
}

std::optional<LinkSpec> FabricLink(const std::string& family, int gbps, std::string* why) {
  const BytesPerSecond rate = BytesPerSecond::Gbps(gbps);
  std::string known;
  for (const auto& l : LinkCatalog()) {
    if (l.family != family) continue;
    if (family != "ib") {
      LinkSpec out = l;
      out.bandwidth_per_direction = rate;
      out.name = family + "-" + std::to_string(gbps) + "g";
      return out;
    }
    // Compare in whole Gb/s: catalog bandwidths are exact multiples of 1 Gb/s.
    int catalog_gbps = static_cast<int>(std::lround(l.bandwidth_per_direction.count() * 8 / kGB));
    if (catalog_gbps == gbps) return l;
    known += (known.empty() ? "" : ", ") + std::string("ib") + std::to_string(catalog_gbps) + " (" +
             l.name + ")";
  }
  if (why) {
    *why = family == "ib" ? "no InfiniBand generation runs at " + std::to_string(gbps) +
                                " Gb/s; known: " + known
                          : "no \"" + family + "\" link in the catalog";
  }
  return std::nullopt;
}

Bytes CpuHostMemory() { return Bytes::GiB(kCpuHostMemoryGiB); }

GpuSpec CpuRankSpec(int ranks, Bytes host_memory, int host_cores) {
  const int n = std::max(ranks, 1);
  // Each rank runs cores / ranks intra-op threads (executor/train/run.cc SetUpThreadsAndDevice: at
  // least one); more ranks than cores share them.
  const int cores = std::max(host_cores, 1);
  const double cores_per_rank =
      cores >= n ? static_cast<double>(cores / n) : static_cast<double>(cores) / n;
  const double flops = kCpuCoreFlopsPerS * cores_per_rank;
  GpuSpec g;
  g.name = "CPU";
  g.marketed_memory = host_memory / n;
  g.usable_memory = host_memory / n;
  g.bf16_dense = FlopsPerSecond::Of(flops);
  g.fp16_dense = FlopsPerSecond::Of(flops);
  g.tf32_dense = FlopsPerSecond::Of(flops);
  g.fp32 = FlopsPerSecond::Of(flops);
  g.memory_bandwidth = BytesPerSecond::Of(kCpuHostMemoryBytesPerS / n);
  g.intra_node_link = "loopback";
  g.default_fabric = "loopback";
  g.host_link = "loopback";
  g.source =
      "assumption for cpu:N ranks, to be replaced by calibration: the rank's share of this "
      "machine's cores, each an AVX2 core at 3 GHz (96 GFLOP/s), and a 1/N share of a "
      "dual-channel DDR4-3200 host (51.2 GB/s)";
  g.usable_memory_source = "the rank's 1/N share of this machine's memory";
  return g;
}

}  // namespace shardtune::profiles::internal
