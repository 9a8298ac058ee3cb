// The preset table. Figures are the vendors' and providers' published node specifications
// (named per entry); host cores are physical cores (cloud vCPUs / 2: the instances expose
// hyperthreads).
#include "profiles/cluster_presets.h"

#include <sstream>

#include "model/errors.h"
#include "model/text.h"
#include "profiles/cluster_defaults.h"
#include "profiles/hardware.h"

namespace shardtune::profiles {
namespace {

using model::Lower;

// The latency aws-ofi-nccl reports to NCCL for EFA devices (ncclNetProperties_t.latency), by EC2
// platform: aws/aws-ofi-nccl src/platform-aws.cpp platform_data_map (commit 2daf7d3, 2026-08-21):
// p4d.24xlarge, p4de.24xlarge and p5/p5e 75.0 us ("Empirical testing on P5 had shown that NCCL's
// internal tuner choices work better with this value"), p5en and p6-b200 35.0 us.
constexpr double kAwsOfiLatencyP4P5Us = 75.0;
constexpr double kAwsOfiLatencyP5enUs = 35.0;

std::vector<ClusterPreset> BuildPresets() {
  std::vector<ClusterPreset> p = {
      {"dgx-h100", {"hgx-h100-ib400"}, "H100-SXM-80G", 8, 8, 400, "ib", 2048, 112, "InfiniBand NDR",
       "NVIDIA DGX H100 datasheet: 8x H100 SXM5, 8 single-port ConnectX-7 VPI (400 Gb/s InfiniBand) for the "
       "compute fabric, one per GPU, 2 TB system memory, 2x Xeon Platinum 8480C (112 cores)"},
      {"dgx-h200", {}, "H200-SXM-141G", 8, 8, 400, "ib", 2048, 112, "InfiniBand NDR",
       "NVIDIA DGX H200 datasheet: 8x H200, 8 single-port ConnectX-7 (400 Gb/s InfiniBand), 2 TB system "
       "memory, 2x Xeon Platinum 8480C (112 cores)"},
      {"dgx-b200", {"hgx-b200-ib400"}, "B200-180G", 8, 8, 400, "ib", 2048, 112, "InfiniBand NDR",
       "NVIDIA DGX B200 datasheet: 8x B200, 8 single-port ConnectX-7 VPI (400 Gb/s InfiniBand) for the "
       "compute fabric, 2 TB system memory, 2x Xeon Platinum 8570 (112 cores)"},
      {"dgx-a100", {"hgx-a100-ib200"}, "A100-SXM-80G", 8, 8, 200, "ib", 2048, 128, "InfiniBand HDR",
       "NVIDIA DGX A100 datasheet (640 GB system): 8 single-port ConnectX-6 VPI (200 Gb/s HDR InfiniBand) "
       "for the compute fabric, 2 TB system memory, 2x AMD EPYC 7742 (128 cores)"},
      {"p4d", {"p4d.24xlarge"}, "A100-SXM-40G", 8, 4, 100, "eth", 1152, 48, "EFA",
       "AWS EC2 P4 instances page, p4d.24xlarge: 8x A100 40 GB, 400 Gbps EFA as 4 network cards of "
       "100 Gb/s (one per PCIe switch of two GPUs), 1152 GiB, 96 vCPUs",
       kAwsOfiLatencyP4P5Us},
      {"p4de", {"p4de.24xlarge"}, "A100-SXM-80G", 8, 4, 100, "eth", 1152, 48, "EFA",
       "AWS EC2 P4 instances page, p4de.24xlarge: 8x A100 80 GB, 400 Gbps EFA as 4 x 100 Gb/s, 1152 GiB, "
       "96 vCPUs",
       kAwsOfiLatencyP4P5Us},
      // EFA through aws-ofi-nccl: since its RDMA protocol (1.7), the plugin stripes each GPU's
      // network cards as rails of one NCCL device, so NCCL's search sees one NIC per GPU with the
      // cards' summed rate (aws-ofi-nccl README, "multi-rail"; the p5 nccl-tests figures above
      // the 4 x 100 Gb/s = 48 GB/s-per-GPU path limit of separate cards agree).
      {"p5", {"p5.48xlarge"}, "H100-SXM-80G", 8, 8, 400, "eth", 2048, 96, "EFA",
       "AWS EC2 P5 instances page, p5.48xlarge: 8x H100 80 GB, 3200 Gbps EFAv2 as 32 network cards of "
       "100 Gb/s (4 beside each GPU; aws-ofi-nccl presents them to NCCL as one 400 Gb/s device per GPU), "
       "2 TiB, 192 vCPUs",
       kAwsOfiLatencyP4P5Us, 0, NcclTuner::kAwsOfiP5},
      {"p5en", {"p5en.48xlarge"}, "H200-SXM-141G", 8, 8, 400, "eth", 2048, 96, "EFA",
       "AWS EC2 P5 instances page, p5en.48xlarge: 8x H200, 3200 Gbps EFAv3 as 16 x 200 Gb/s (2 beside each "
       "GPU; one 400 Gb/s aws-ofi-nccl device per GPU), 2 TiB, 192 vCPUs",
       kAwsOfiLatencyP5enUs, 0, NcclTuner::kAwsOfiP5en},
      // aws-ofi-nccl's platform table groups p6-b200 with p5en: 2 GPUs and 2 NICs per PCIe switch,
      // 35 us reported latency (src/platform-aws.cpp "p5en/p6-b200").
      {"p6-b200", {"p6-b200.48xlarge"}, "B200-180G", 8, 8, 400, "eth", 2048, 96, "EFA",
       "AWS EC2 P6 instances page, p6-b200.48xlarge: 8x B200, 3.2 Tbps EFAv4 as 8 x 400 Gb/s (one per GPU, "
       "two GPUs and two NICs per PCIe switch: aws-ofi-nccl src/platform-aws.cpp), 2 TiB, 192 vCPUs",
       kAwsOfiLatencyP5enUs, 0, NcclTuner::kAwsOfiP6},
      {"nd-h100-v5", {"standard_nd96isr_h100_v5"}, "H100-SXM-80G", 8, 8, 400, "ib", 1900, 48, "InfiniBand NDR",
       "Azure ND H100 v5-series page, Standard_ND96isr_H100_v5: 8x H100 80 GB, 8 x 400 Gb/s NDR "
       "InfiniBand (one per GPU), 1900 GiB, 96 vCPUs"},
      {"nd-a100-v4", {"standard_nd96amsr_a100_v4", "ndm-a100-v4"}, "A100-SXM-80G", 8, 8, 200, "ib", 1900, 48,
       "InfiniBand HDR",
       "Azure NDm A100 v4-series page, Standard_ND96amsr_A100_v4: 8x A100 80 GB, 8 x 200 Gb/s HDR "
       "InfiniBand (one per GPU), 1900 GiB, 96 vCPUs"},
      {"a3-high", {"a3-highgpu-8g"}, "H100-SXM-80G", 8, 4, 200, "eth", 1872, 104, "GPUDirect-TCPX",
       "Google Cloud A3 machine types, a3-highgpu-8g: 8x H100 80 GB, 4 GPU NICs of 200 Gb/s (GPUDirect-TCPX; "
       "1,000 Gbps with the host NIC), 1872 GB, 208 vCPUs"},
      {"a3-mega", {"a3-megagpu-8g"}, "H100-SXM-80G", 8, 8, 200, "eth", 1872, 104, "GPUDirect-TCPXO",
       "Google Cloud A3 machine types, a3-megagpu-8g: 8x H100 80 GB, 8 GPU NICs of 200 Gb/s "
       "(GPUDirect-TCPXO; 1,800 Gbps with the host NIC), 1872 GB, 208 vCPUs"},
      // One NVL72 rack is one node: its 72 GPUs share a fifth-generation NVLink domain through
      // the rack's NVSwitch trays, and NCCL (MNNVL, 2.20+) fuses the clique into one node
      // (src/graph/topo.cc:1887, init.cc:1072), so sharding and HSDP groups of up to 72 stay
      // on NVLink. Host RAM is per compute tray (gpus_per_host 4).
      {"gb200-nvl72", {"nvl72", "gb200-nvl72-ib400"}, "GB200-186G", 72, 72, 400, "ib", 18 * 960.0, 18 * 144,
       "InfiniBand NDR",
       "NVIDIA GB200 NVL72 specifications: 72 Blackwell GPUs and 36 Grace CPUs (2,592 Arm Neoverse V2 cores, "
       "up to 17 TB LPDDR5X) in one NVLink domain (130 TB/s), 18 compute trays of 2 GB200 superchips (4 GPUs, "
       "960 GB, 144 cores each); scale-out through ConnectX-7 400 Gb/s, one per GPU (4 per tray; NVIDIA DGX "
       "GB200 user guide)",
       0, 4},
      {"hgx-h100-roce200", {}, "H100-SXM-80G", 8, 8, 200, "roce", 2048, 112, "RoCE",
       "assumption: a common 8-GPU HGX H100 node with 8 x 200 Gb/s RoCE NICs (ConnectX-6/7, one per GPU); "
       "host memory and cores as a DGX H100"},
  };
  for (const auto& e : p) {
    SHARDTUNE_CHECK(LookupGpu(e.gpu) != nullptr) << "preset " << e.name << ": unknown GPU " << e.gpu;
    SHARDTUNE_CHECK(LookupGpu(e.name) == nullptr) << "preset " << e.name << " is also a GPU kind";
    for (const auto& a : e.aliases) SHARDTUNE_CHECK(LookupGpu(a) == nullptr) << "preset alias " << a;
  }
  return p;
}

std::string Rate(int gbps) { return std::to_string(gbps) + " Gb/s"; }

}  // namespace

const std::vector<ClusterPreset>& ClusterPresets() {
  static const std::vector<ClusterPreset> presets = BuildPresets();
  return presets;
}

const ClusterPreset* LookupClusterPreset(const std::string& name) {
  const std::string key = Lower(name);
  for (const auto& p : ClusterPresets()) {
    if (Lower(p.name) == key) return &p;
    for (const auto& a : p.aliases) {
      if (Lower(a) == key) return &p;
    }
  }
  return nullptr;
}

ClusterSpec ClusterFromPreset(const ClusterPreset& preset, int nodes, const std::string& text) {
  ClusterSpec c;
  c.name = text;
  c.num_nodes = nodes;
  c.gpus_per_node = preset.gpus_per_node;
  c.gpu = FindGpu(preset.gpu, "cluster preset " + preset.name);
  c.intra_node = FindLink(c.gpu.intra_node_link, "cluster preset " + preset.name);
  std::string why;
  auto link = internal::FabricLink(preset.fabric, preset.nic_gbps, &why);
  SHARDTUNE_CHECK(link.has_value()) << "preset " << preset.name << ": " << why;
  c.inter_node = *link;
  c.nics_per_node = nodes > 1 ? preset.nics_per_node : 0;
  c.nic_bandwidth = BytesPerSecond::Gbps(preset.nic_gbps);
  c.host_memory_per_node = Bytes::GiB(preset.host_memory_gib);
  c.cpu_cores_per_node = preset.cpu_cores;
  c.gpus_per_host = preset.gpus_per_host;
  c.net_latency = Seconds::Micros(preset.net_latency_us);
  c.nccl_tuner = preset.nccl_tuner;
  auto problems = c.Problems("cluster preset " + preset.name);
  SHARDTUNE_CHECK(problems.empty()) << problems.front();
  return c;
}

std::string DescribeNics(const ClusterSpec& c) {
  if (c.cpu_only || c.num_nodes <= 1 || c.nics_per_node <= 0) return "";
  std::ostringstream out;
  const double gbps = c.nic_bandwidth.count() * 8 / 1e9;
  out << c.nics_per_node << " x " << Rate(static_cast<int>(gbps + 0.5)) << " " << c.inter_node.name << " NIC"
      << (c.nics_per_node > 1 ? "s" : "") << " per node (";
  if (c.nics_per_node == c.gpus_per_node) {
    out << "one per GPU";
  } else if (c.nics_per_node > c.gpus_per_node) {
    out << c.nics_per_node / c.gpus_per_node << " per GPU";
  } else if (c.nics_per_node == 1) {
    out << "one for the node, beside GPU 0";
  } else {
    out << "one per " << c.gpus_per_node / c.nics_per_node << " GPUs";
  }
  // The latency the net plugin reports, which NCCL's tuner adds to every inter-node step.
  if (c.net_latency.count() > 0) out << "; the net plugin reports " << c.net_latency.count() * 1e6 << " us to NCCL";
  // Its tuner, which overrides NCCL's choice of algorithm on more than two nodes.
  if (c.nccl_tuner != NcclTuner::kNone) out << "; its tuner (" << ToString(c.nccl_tuner) << ") picks NCCL's algorithms";
  // InfiniBand SHARP as NCCL's CollNet.
  if (c.ib_sharp) out << "; InfiniBand SHARP as NCCL's CollNet, NCCL_COLLNET_ENABLE=1";
  out << ")";
  return out.str();
}

}  // namespace shardtune::profiles
