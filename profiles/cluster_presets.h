// Named node types people rent or buy (DGX H100, AWS p5, Azure ND H100 v5, GCP A3 Mega, ...):
// GPU kind, GPUs and NICs per node, NIC rate, host memory and cores, each with its source. Used as
// "--cluster NODESxPRESET" (e.g. 4xp5, 2xdgx-h100) or a bare preset name (one node). What a
// preset fixes beyond the "-ib400"/"/node" shorthands: how many NICs a node has as NCCL sees
// them, fewer than its GPUs (p4d: 4 x 100 Gb/s for 8 GPUs) or one per GPU where a net plugin
// joins several cards (p5's 32 x 100 Gb/s EFA cards are 8 aws-ofi-nccl devices of 400 Gb/s).
#pragma once

#include <string>
#include <vector>

#include "profiles/cluster.h"

namespace shardtune::profiles {

struct ClusterPreset {
  std::string name;                  // e.g. "p5"
  std::vector<std::string> aliases;  // e.g. "p5.48xlarge"
  std::string gpu;                   // gpus.json name
  int gpus_per_node = 8;
  int nics_per_node = 8;    // GPU-facing NICs as NCCL sees them (not the host front-end NIC)
  int nic_gbps = 400;       // per NIC, per direction
  std::string fabric;       // links.json kind of the NICs (latency, family)
  double host_memory_gib = 0;
  int cpu_cores = 0;        // physical cores (vCPUs / 2 where the provider counts hyperthreads)
  std::string network;      // what the provider calls the network, e.g. "EFA", "InfiniBand NDR"
  std::string source;
  // The latency the NCCL net plugin reports (ClusterSpec::net_latency): aws-ofi-nccl's platform
  // table for EFA (src/platform-aws.cpp platform_data_map), 0 for NCCL's own transports.
  double net_latency_us = 0;
  // GPUs per host where the node (an NVLink domain) spans several hosts (ClusterSpec::
  // gpus_per_host): GB200 NVL72, 18 compute trays of 4. 0: the node is one host.
  int gpus_per_host = 0;
  // The NCCL tuner plugin its net plugin brings (ClusterSpec::nccl_tuner): aws-ofi-nccl's
  // region tuner on the EC2 platforms it has tables for (p5/p5e, p5en).
  NcclTuner nccl_tuner = NcclTuner::kNone;
};

// All presets, in listing order. Names and aliases never collide with a GPU kind.
const std::vector<ClusterPreset>& ClusterPresets();
// The preset named `name` or one of its aliases (case-insensitive); nullptr when none.
const ClusterPreset* LookupClusterPreset(const std::string& name);
// A cluster of `nodes` nodes of `preset`, named `text`.
ClusterSpec ClusterFromPreset(const ClusterPreset& preset, int nodes, const std::string& text);
// "8 x 400 Gb/s InfiniBand NDR NICs per node (one per GPU)": the NIC layout a cluster assumes,
// for answers that name it, with "; the net plugin reports 75 us to NCCL" where one does. "" on
// one node and for CPU ranks.
std::string DescribeNics(const ClusterSpec& cluster);

}  // namespace shardtune::profiles
