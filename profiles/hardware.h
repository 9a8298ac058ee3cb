// Hardware catalog: GPU kinds and link kinds with their datasheet figures and sources. The data
// lives in profiles/gpus.json and profiles/links.json, embedded into the library at build time.
#pragma once

#include <string>
#include <vector>

#include "model/units.h"

namespace shardtune::profiles {

struct GpuSpec {
  std::string name;                  // catalog key, e.g. "H100-SXM-80G"
  std::vector<std::string> aliases;  // accepted in shorthands, e.g. "H100", "H100-SXM"
  Bytes marketed_memory;             // the datasheet figure (80 GB = 80e9 bytes)
  Bytes usable_memory;               // what the CUDA driver reports as total (torch total_memory)
  FlopsPerSecond bf16_dense;         // tensor-core peak, dense (no sparsity)
  FlopsPerSecond fp16_dense;
  FlopsPerSecond tf32_dense;
  FlopsPerSecond fp32;               // non-tensor-core FP32
  BytesPerSecond memory_bandwidth;   // HBM/GDDR peak
  std::string intra_node_link;       // link kind between GPUs of one node (links.json key)
  std::string default_fabric;        // link kind between nodes when a shorthand names none
  std::string host_link;             // GPU <-> host link (PCIe generation): NCCL's GPU-NIC path
  // The link host <-> device copies (offload, pinned staging) run over when it is not the PCIe
  // link: NVLink-C2C on Grace superchips (GB200). "" = host_link. CopyLink() reads it.
  std::string host_copy_link;
  const std::string& CopyLink() const { return host_copy_link.empty() ? host_link : host_copy_link; }
  // SM version x 10 (H100 90, A100 80, L40S 89): picks NCCL's speed arrays, per-link NVLink
  // figure and tuning rows (profiles/nccl_model.h). 0 for the CPU pseudo-GPU.
  int compute_capability = 0;
  std::string source;                // datasheet / whitepaper the figures come from
  std::string usable_memory_source;  // where usable_memory was observed (or how it was derived)
  // A profile measured on this kind by `shardtune probe` that the catalog ships
  // (profiles/measured/<file>, gpus.json "measured_profile"); "": datasheet figures only.
  std::string measured_profile;
};

struct LinkSpec {
  std::string name;                        // e.g. "nvlink4", "pcie4", "ib-ndr"
  std::string family;                      // "nvlink", "pcie", "ib", "roce", "eth" or "loopback"
  BytesPerSecond bandwidth_per_direction;  // per GPU (NVLink: aggregate per GPU), per NIC otherwise
  Seconds latency;             // per-hop latency of this link class (NCCL's ring/Simple model)
  bool nvlink_domain = false;  // GPUs joined by this link are in one NVLink domain
  int nvlink_links = 0;        // NVLink links per GPU (NCCL counts links x its per-link figure)
  std::string source;
};

// All catalog entries, in file order. Never empty.
const std::vector<GpuSpec>& GpuCatalog();
const std::vector<LinkSpec>& LinkCatalog();
// The JSON text of an embedded profiles/measured/ file (GpuSpec::measured_profile); nullptr when
// the catalog has no such file.
const char* MeasuredProfileText(const std::string& file);
// Looks a GPU up by name or alias (case-insensitive). Throws InputError naming `where`, listing
// the known kinds and suggesting the closest.
const GpuSpec& FindGpu(const std::string& name, const std::string& where);
const LinkSpec& FindLink(const std::string& name, const std::string& where);
// The GPU entry whose name or alias is `name` (case-insensitive), or nullptr when there is none.
const GpuSpec* LookupGpu(const std::string& name);
// `unknown GPU kind "X" (did you mean "Y"?)`, followed by the known kinds when `list_known` is
// set or nothing is close enough to suggest. For messages that put their own location first.
std::string UnknownGpuMessage(const std::string& name, bool list_known);

}  // namespace shardtune::profiles
