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
    k.fragmentation_fraction = m.OptionalNumber("fragmentation_fraction", k.fragmentation_fraction, 0, 1);
    k.host_process_baseline = Bytes::Of(
        m.OptionalInt("host_process_baseline_bytes", k.host_process_baseline.count(), 0, kMax));
    m.Finish();
  }
  r.Finish();
  return p;
}

}  // namespace shardtune::sim
