// ReadClusterFile: the "shardtune.cluster" JSON file. Strict (unknown keys are errors naming the
// file and JSON pointer); types are checked while parsing, ranges and cross-field rules by
// ClusterSpec::Problems, all reported together in one InputError.
//
// {"schema": "shardtune.cluster", "schema_version": 1,
//  "name": "...",                           optional, default: the file path
//  "nodes": N, "gpus_per_node": G,           required
//  "gpu": "H100" | {gpus.json entry},        required: a catalog kind or an inline GPU object
//  "intra_node_link": "nvlink4" | {...},     optional, default: the GPU's intra_node_link
//  "inter_node_link": "ib-ndr" | {...},      optional, default: the GPU's default_fabric
//  "nics_per_node": M,                       optional, default: G with NVLink, else 1 (0 on 1 node);
//                                            a divisor or a multiple of G (AWS p5: 32 EFA cards)
//  "nic_bandwidth_bits_per_s": 400e9,        optional, default: the inter-node link's rate
//  "host_memory_bytes_per_node": B,          optional, default: the kind's reference machine
//  "cpu_cores_per_node": C,                  optional, default: the kind's reference machine
//  "gpus_per_host": H,                       optional, default: the kind's reference machine (GB200:
//                                            4, a compute tray), else 0 = the node is one host;
//                                            a divisor of G: host RAM is judged per host
//  "nvls": false,                            optional, default true: NVLink SHARP where the GPUs
//                                            have it (Hopper on, NVSwitch); false as under
//                                            NCCL_NVLS_ENABLE=0 or without multicast support
//  "net_latency_us": 75,                      optional, default 0: the latency the NCCL net plugin
//                                            reports (aws-ofi-nccl: 75 on p4d/p5, 35 on p5en;
//                                            NCCL's IB and socket transports 0), ClusterSpec::net_latency
//  "nccl_tuner": "aws-ofi-nccl:p5",          optional, default "none": the tuner plugin NCCL loads
//                                            ("aws-ofi-nccl:p5" for p5/p5e, "aws-ofi-nccl:p5en",
//                                            "aws-ofi-nccl:p6" for p6-b200),
//                                            ClusterSpec::nccl_tuner
//  "ib_sharp": true}                         optional, default false: InfiniBand SHARP as NCCL's
//                                            CollNet (SHARP plugin, NCCL_COLLNET_ENABLE=1);
//                                            "ib" inter-node links only, ClusterSpec::ib_sharp
#include <algorithm>
#include <cstdint>
#include <string>

#include "model/errors.h"
#include "model/strict_json.h"
#include "profiles/cluster.h"
#include "profiles/cluster_defaults.h"
#include "profiles/hardware_json.h"

namespace shardtune::profiles {
namespace {

constexpr int64_t kIntBound = int64_t{1} << 30;  // keeps int fields clear of overflow

GpuSpec ReadGpu(model::StrictReader& r) {
  const nlohmann::json& v = r.RequiredValue("gpu");
  if (v.is_string()) return FindGpu(v.get<std::string>(), r.Where("gpu"));
  if (!v.is_object()) {
    throw InputError(r.Where("gpu") +
                     ": expected a GPU kind (e.g. \"H100\") or a GPU object, got " +
                     model::Describe(v));
  }
  model::StrictReader gr(v, r.file(), r.pointer() + "/gpu");
  GpuSpec g = internal::ReadGpuSpec(gr);
  gr.Finish();
  // The inline GPU's link names must exist, as a catalog entry's do.
  FindLink(g.intra_node_link, gr.Where("intra_node_link"));
  FindLink(g.default_fabric, gr.Where("default_fabric"));
  FindLink(g.host_link, gr.Where("host_link"));
  if (!g.host_copy_link.empty()) FindLink(g.host_copy_link, gr.Where("host_copy_link"));
  return g;
}

// A link given by catalog name or as an inline object; `fallback` names the default link.
LinkSpec ReadLink(model::StrictReader& r, const std::string& key, const std::string& fallback,
                  const std::string& fallback_where) {
  auto v = r.OptionalValue(key);
  if (!v) return FindLink(fallback, fallback_where);
  if (v->is_string()) return FindLink(v->get<std::string>(), r.Where(key));
  if (!v->is_object()) {
    throw InputError(r.Where(key) +
                     ": expected a link kind (e.g. \"ib-ndr\") or a link object, got " +
                     model::Describe(*v));
  }
  const nlohmann::json& obj = r.RequiredValue(key);
  model::StrictReader lr(obj, r.file(), r.pointer() + "/" + key);
  LinkSpec l = internal::ReadLinkSpec(lr);
  lr.Finish();
  return l;
}

}  // namespace

ClusterSpec ReadClusterFile(const std::string& path) {
  const nlohmann::json doc = model::ReadJsonFile(path);
  model::StrictReader r(doc, path);
  r.CheckSchema("shardtune.cluster", 1);
  ClusterSpec c;
  c.name = r.OptionalString("name", path);
  c.num_nodes = static_cast<int>(r.RequiredInt("nodes", -kIntBound, kIntBound));
  c.gpus_per_node = static_cast<int>(r.RequiredInt("gpus_per_node", -kIntBound, kIntBound));
  c.gpu = ReadGpu(r);
  const std::string gpu_where = r.Where("gpu");
  c.intra_node = ReadLink(r, "intra_node_link", c.gpu.intra_node_link, gpu_where);
  c.inter_node = ReadLink(r, "inter_node_link", c.gpu.default_fabric, gpu_where);
  const int default_nics =
      internal::DefaultNicsPerNode(c.intra_node, std::max(c.gpus_per_node, 1), c.num_nodes);
  c.nics_per_node =
      static_cast<int>(r.OptionalInt("nics_per_node", default_nics, -kIntBound, kIntBound));
  c.nic_bandwidth = BytesPerSecond::Of(
      r.OptionalNumber("nic_bandwidth_bits_per_s", c.inter_node.bandwidth_per_direction.count() * 8,
                       -1e18, 1e18) /
      8);
  const internal::NodeDefaults node = internal::DefaultNode(c.gpu.name, c.gpus_per_node);
  c.host_memory_per_node = Bytes::Of(
      r.OptionalInt("host_memory_bytes_per_node", node.host_memory.count(), INT64_MIN, INT64_MAX));
  c.cpu_cores_per_node =
      static_cast<int>(r.OptionalInt("cpu_cores_per_node", node.cpu_cores, -kIntBound, kIntBound));
  c.gpus_per_host = static_cast<int>(r.OptionalInt("gpus_per_host", node.gpus_per_host, -kIntBound, kIntBound));
  c.nvls = r.OptionalBool("nvls", true);
  c.net_latency = Seconds::Micros(r.OptionalNumber("net_latency_us", 0.0, -1e18, 1e18));
  c.nccl_tuner = ParseNcclTuner(r.OptionalString("nccl_tuner", ToString(NcclTuner::kNone)), r.Where("nccl_tuner"));
  c.ib_sharp = r.OptionalBool("ib_sharp", false);
  r.Finish();
  const auto problems = c.Problems(path + ":");
  ThrowIfProblems(problems);
  return c;
}

}  // namespace shardtune::profiles
