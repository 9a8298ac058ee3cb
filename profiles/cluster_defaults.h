// Defaults a cluster spec takes when a shorthand or file leaves them out: host memory and CPU
// cores per node, NICs per node, the fabric link for "-ib400"/"-roce800", the CPU pseudo-GPU of
// "cpu:N". Every figure is a named constant with its source or marked as an assumption.
#pragma once

#include <optional>
#include <string>

#include "model/units.h"
#include "profiles/hardware.h"

namespace shardtune::profiles::internal {

struct NodeDefaults {
  Bytes host_memory;      // host RAM of the node
  int cpu_cores = 0;      // physical cores of the node
  int gpus_per_host = 0;  // ClusterSpec::gpus_per_host: 0 unless the kind's hosts are smaller
                          // than an NVLink domain (GB200: 4 per compute tray)
};

// Host memory and cores of a node holding `gpus_per_node` GPUs of kind `gpu_name` (a catalog
// name): the kind's reference machine (e.g. a DGX H100 for H100-SXM-80G) scaled by
// gpus_per_node / reference GPU count. Unknown kinds get a fallback assumption.
NodeDefaults DefaultNode(const std::string& gpu_name, int gpus_per_node);

// NICs per node when none is given: 0 on one node; one per GPU when the GPUs share an NVLink
// domain (DGX/HGX style: SXM parts), one per node otherwise (PCIe servers, workstations).
int DefaultNicsPerNode(const LinkSpec& intra_node, int gpus_per_node, int num_nodes);

// The link of a shorthand fabric: "ib" needs an InfiniBand generation of exactly that rate in
// the catalog (100/200/400/800 Gb/s); "roce" and "eth" take any rate (the family's first
// catalog entry with its bandwidth replaced, named e.g. "roce-800g"). On failure returns
// nullopt and sets *why to a one-line reason.
std::optional<LinkSpec> FabricLink(const std::string& family, int gbps, std::string* why);

// Host memory assumed for "cpu:N" when this machine's /proc/meminfo cannot be read.
Bytes CpuHostMemory();
// The pseudo-GPU of one of `ranks` CPU ranks sharing a host with `host_memory` and `host_cores`:
// memory and memory bandwidth are the host's divided by the ranks, compute is the rank's share
// of the cores (whole cores per rank as the executor threads them, a fraction when oversubscribed).
GpuSpec CpuRankSpec(int ranks, Bytes host_memory, int host_cores);

}  // namespace shardtune::profiles::internal
