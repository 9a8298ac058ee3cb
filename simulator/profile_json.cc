// Strict reading and writing of "shardtune.profile" files (versions 1 and 2).
#include "simulator/profile_json.h"

#include "model/errors.h"
#include "model/strict_json.h"

namespace shardtune::sim {
namespace {

using model::StrictReader;
using Json = nlohmann::json;

// Calibrated efficiencies are fractions of a device's peak; above 1 only where that peak is an
// assumption (the cpu:N pseudo-GPU's one AVX2 core), so 16 bounds typos, not physics.
constexpr double kMaxEfficiency = 16;
const char* kKinds[] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast", "all_to_all"};

void ReadMemory(StrictReader& m, MemoryConstants* k) {
  constexpr int64_t kMax = int64_t{1} << 45;  // 32 TiB: anything larger is a typo
  k->cuda_context = Bytes::Of(m.OptionalInt("cuda_context_bytes", k->cuda_context.count(), 0, kMax));
  k->nccl_per_communicator = Bytes::Of(
      m.OptionalInt("nccl_per_communicator_bytes", k->nccl_per_communicator.count(), 0, kMax));
  k->nvls_per_communicator = Bytes::Of(
      m.OptionalInt("nvls_per_communicator_bytes", k->nvls_per_communicator.count(), 0, kMax));
  k->cublas_workspace = Bytes::Of(m.OptionalInt("cublas_workspace_bytes", k->cublas_workspace.count(), 0, kMax));
  k->fragmentation_fraction = m.OptionalNumber("fragmentation_fraction", k->fragmentation_fraction, 0, 1);
  k->host_process_baseline = Bytes::Of(
      m.OptionalInt("host_process_baseline_bytes", k->host_process_baseline.count(), 0, kMax));
  m.Finish();
}

void ReadCompute(StrictReader& m, CostConstants* c) {
  c->matmul_efficiency = m.OptionalNumber("matmul_efficiency", c->matmul_efficiency, 1e-3, kMaxEfficiency);
  c->attention_efficiency =
      m.OptionalNumber("attention_efficiency", c->attention_efficiency, 1e-3, kMaxEfficiency);
  c->memory_efficiency = m.OptionalNumber("memory_efficiency", c->memory_efficiency, 1e-3, kMaxEfficiency);
  c->compute_op_overhead =
      Seconds::Of(m.OptionalNumber("op_overhead_s", c->compute_op_overhead.count(), 0, 1));
  c->host_memory_bandwidth_per_node = BytesPerSecond::Of(m.OptionalNumber(
      "host_memory_bytes_per_s_per_node", c->host_memory_bandwidth_per_node.count(), 1e6, 1e15));
  m.Finish();
}

CollectiveCalibration ReadCollective(StrictReader& e) {
  CollectiveCalibration c;
  c.link_family = e.RequiredString("link_family");
  c.group_size = static_cast<int>(e.RequiredInt("group_size", 2, 1 << 24));
  c.bus_bandwidth = BytesPerSecond::Of(e.RequiredNumber("bus_bandwidth_bytes_per_s", 1e3, 1e16));
  StrictReader lat = e.RequiredObject("latency_s");
  for (int i = 0; i < 5; ++i) {
    if (lat.Has(kKinds[i])) c.latency[static_cast<size_t>(i)] = Seconds::Of(lat.RequiredNumber(kKinds[i], 0, 10));
  }
  lat.Finish();
  e.Finish();
  return c;
}

void ReadProvenance(StrictReader& r, ProfileProvenance* p) {
  p->hostname = r.OptionalString("hostname", "");
  p->cpu_model = r.OptionalString("cpu_model", "");
  p->device = r.OptionalString("device", "");
  p->backend = r.OptionalString("backend", "");
  p->torch_version = r.OptionalString("torch_version", "");
  p->shardtune_version = r.OptionalString("shardtune_version", "");
  if (auto files = r.OptionalValue("measurements")) {
    if (!files->is_array()) {
      throw InputError(r.Where("measurements") + ": expected an array of file names, got " +
                       model::Describe(*files));
    }
    for (const auto& f : *files) {
      if (!f.is_string()) {
        throw InputError(r.Where("measurements") + ": expected file names (strings), got " + model::Describe(f));
      }
      p->measurements.push_back(f.get<std::string>());
    }
  }
  r.Finish();
}

void ReadFits(const Json& arr, const std::string& file, std::vector<FitSummary>* out) {
  if (!arr.is_array()) throw InputError(file + ":/fit: expected an array, got " + model::Describe(arr));
  for (size_t i = 0; i < arr.size(); ++i) {
    StrictReader e(arr[i], file, "/fit/" + std::to_string(i));
    FitSummary f;
    f.term = e.RequiredString("term");
    f.rows = static_cast<int>(e.RequiredInt("rows", 0, 1 << 30));
    f.rms_relative_residual = e.RequiredNumber("rms_relative_residual", 0, 1e9);
    f.max_relative_residual = e.RequiredNumber("max_relative_residual", 0, 1e9);
    f.note = e.OptionalString("note", "");
    e.Finish();
    out->push_back(f);
  }
}

}  // namespace

Profile ProfileFromJson(const Json& j, const std::string& path) {
  StrictReader r(j, path);
  r.CheckSchema("shardtune.profile", kProfileSchemaVersion);
  Profile p;
  p.name = r.OptionalString("name", "");
  if (auto mem = r.OptionalValue("memory")) {
    StrictReader m(*mem, path, "/memory");
    ReadMemory(m, &p.memory);
  }
  if (auto comp = r.OptionalValue("compute")) {
    StrictReader m(*comp, path, "/compute");
    ReadCompute(m, &p.costs);
  }
  CostConstants& c = p.costs;
  if (auto net = r.OptionalValue("network")) {
    StrictReader m(*net, path, "/network");
    c.nvlink_efficiency = m.OptionalNumber("nvlink_efficiency", c.nvlink_efficiency, 1e-3, kMaxEfficiency);
    c.pcie_efficiency = m.OptionalNumber("pcie_efficiency", c.pcie_efficiency, 1e-3, kMaxEfficiency);
    c.network_efficiency = m.OptionalNumber("network_efficiency", c.network_efficiency, 1e-3, kMaxEfficiency);
    m.Finish();
  }
  if (auto coll = r.OptionalValue("collectives")) {
    if (!coll->is_array()) {
      throw InputError(path + ":/collectives: expected an array, got " + model::Describe(*coll));
    }
    for (size_t i = 0; i < coll->size(); ++i) {
      StrictReader e((*coll)[i], path, "/collectives/" + std::to_string(i));
      c.collectives.push_back(ReadCollective(e));
    }
  }
  if (auto prov = r.OptionalValue("provenance")) {
    StrictReader m(*prov, path, "/provenance");
    ReadProvenance(m, &p.provenance);
    p.has_provenance = true;
  }
  if (auto fit = r.OptionalValue("fit")) ReadFits(*fit, path, &p.fits);
  r.Finish();
  return p;
}

Profile ReadProfileFile(const std::string& path) { return ProfileFromJson(model::ReadJsonFile(path), path); }

nlohmann::ordered_json ProfileToJson(const Profile& p) {
  nlohmann::ordered_json j;
  j["schema"] = "shardtune.profile";
  j["schema_version"] = kProfileSchemaVersion;
  j["name"] = p.name;
  if (p.has_provenance) {
    const ProfileProvenance& v = p.provenance;
    j["provenance"] = {{"hostname", v.hostname}, {"cpu_model", v.cpu_model}, {"device", v.device},
                       {"backend", v.backend}, {"torch_version", v.torch_version},
                       {"shardtune_version", v.shardtune_version}, {"measurements", v.measurements}};
  }
  const MemoryConstants& m = p.memory;
  j["memory"] = {{"cuda_context_bytes", m.cuda_context.count()},
                 {"nccl_per_communicator_bytes", m.nccl_per_communicator.count()},
                 {"nvls_per_communicator_bytes", m.nvls_per_communicator.count()},
                 {"cublas_workspace_bytes", m.cublas_workspace.count()},
                 {"fragmentation_fraction", m.fragmentation_fraction},
                 {"host_process_baseline_bytes", m.host_process_baseline.count()}};
  const CostConstants& c = p.costs;
  j["compute"] = {{"matmul_efficiency", c.matmul_efficiency},
                  {"attention_efficiency", c.attention_efficiency},
                  {"memory_efficiency", c.memory_efficiency},
                  {"op_overhead_s", c.compute_op_overhead.count()},
                  {"host_memory_bytes_per_s_per_node", c.host_memory_bandwidth_per_node.count()}};
  j["network"] = {{"nvlink_efficiency", c.nvlink_efficiency},
                  {"pcie_efficiency", c.pcie_efficiency},
                  {"network_efficiency", c.network_efficiency}};
  nlohmann::ordered_json coll = nlohmann::ordered_json::array();
  for (const CollectiveCalibration& k : c.collectives) {
    nlohmann::ordered_json lat = nlohmann::ordered_json::object();
    for (size_t i = 0; i < 5; ++i) {
      if (k.latency[i]) lat[kKinds[i]] = k.latency[i]->count();
    }
    coll.push_back({{"link_family", k.link_family}, {"group_size", k.group_size},
                    {"bus_bandwidth_bytes_per_s", k.bus_bandwidth.count()}, {"latency_s", lat}});
  }
  j["collectives"] = coll;
  nlohmann::ordered_json fits = nlohmann::ordered_json::array();
  for (const FitSummary& f : p.fits) {
    fits.push_back({{"term", f.term}, {"rows", f.rows}, {"rms_relative_residual", f.rms_relative_residual},
                    {"max_relative_residual", f.max_relative_residual}, {"note", f.note}});
  }
  j["fit"] = fits;
  return j;
}

}  // namespace shardtune::sim
