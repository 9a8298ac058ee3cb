// Strict reading of "shardtune.profile" files.
#include "simulator/profile_json.h"

#include "model/strict_json.h"

namespace shardtune::sim {

Profile ReadProfileFile(const std::string& path) {
  nlohmann::json j = model::ReadJsonFile(path);
  model::StrictReader r(j, path);
  r.CheckSchema("shardtune.profile", 1);
  Profile p;
  p.name = r.OptionalString("name", "");
  if (auto mem = r.OptionalValue("memory")) {
    model::StrictReader m(*mem, path, "/memory");
    constexpr int64_t kMax = int64_t{1} << 45;  // 32 TiB: anything larger is a typo
    MemoryConstants& k = p.memory;
    k.cuda_context = Bytes::Of(m.OptionalInt("cuda_context_bytes", k.cuda_context.count(), 0, kMax));
    k.nccl_per_communicator = Bytes::Of(
        m.OptionalInt("nccl_per_communicator_bytes", k.nccl_per_communicator.count(), 0, kMax));
    k.nvls_per_communicator = Bytes::Of(
        m.OptionalInt("nvls_per_communicator_bytes", k.nvls_per_communicator.count(), 0, kMax));
    k.cublas_workspace = Bytes::Of(m.OptionalInt("cublas_workspace_bytes", k.cublas_workspace.count(), 0, kMax));
    k.fragmentation_fraction = m.OptionalNumber("fragmentation_fraction", k.fragmentation_fraction, 0, 1);
    k.host_process_baseline = Bytes::Of(
        m.OptionalInt("host_process_baseline_bytes", k.host_process_baseline.count(), 0, kMax));
    m.Finish();
  }
  CostConstants& c = p.costs;
  if (auto comp = r.OptionalValue("compute")) {
    model::StrictReader m(*comp, path, "/compute");
    c.matmul_efficiency = m.OptionalNumber("matmul_efficiency", c.matmul_efficiency, 1e-3, 1);
    c.attention_efficiency = m.OptionalNumber("attention_efficiency", c.attention_efficiency, 1e-3, 1);
    c.memory_efficiency = m.OptionalNumber("memory_efficiency", c.memory_efficiency, 1e-3, 1);
    c.host_memory_bandwidth_per_node = BytesPerSecond::Of(m.OptionalNumber(
        "host_memory_bytes_per_s_per_node", c.host_memory_bandwidth_per_node.count(), 1e6, 1e15));
    m.Finish();
  }
  if (auto net = r.OptionalValue("network")) {
    model::StrictReader m(*net, path, "/network");
    c.nvlink_efficiency = m.OptionalNumber("nvlink_efficiency", c.nvlink_efficiency, 1e-3, 1);
    c.pcie_efficiency = m.OptionalNumber("pcie_efficiency", c.pcie_efficiency, 1e-3, 1);
    c.network_efficiency = m.OptionalNumber("network_efficiency", c.network_efficiency, 1e-3, 1);
    m.Finish();
  }
  r.Finish();
  return p;
}

}  // namespace shardtune::sim
