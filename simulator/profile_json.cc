// Strict reading and writing of "shardtune.profile" files (versions 1 to 3).
#include "simulator/profile_json.h"

#include <map>
#include <memory>
#include <mutex>

#include "model/errors.h"
#include "model/plan.h"
#include "model/strict_json.h"
#include "profiles/device_names.h"

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
  c->host_per_kernel =
      Seconds::Of(m.OptionalNumber("host_per_kernel_s", c->host_per_kernel.count(), 0, 1));
  c->host_per_fsdp_hook =
      Seconds::Of(m.OptionalNumber("host_per_fsdp_hook_s", c->host_per_fsdp_hook.count(), 0, 1));
  c->host_per_backward_kernel = Seconds::Of(
      m.OptionalNumber("host_per_backward_kernel_s", c->host_per_backward_kernel.count(), 0, 1));
  c->host_per_optimizer_param = Seconds::Of(
      m.OptionalNumber("host_per_optimizer_param_s", c->host_per_optimizer_param.count(), 0, 1));
  c->host_per_fused_optimizer_param = Seconds::Of(m.OptionalNumber(
      "host_per_fused_optimizer_param_s", c->host_per_fused_optimizer_param.count(), 0, 1));
  c->host_per_fsdp_hook_one_rank = Seconds::Of(
      m.OptionalNumber("host_per_fsdp_hook_one_rank_s", c->host_per_fsdp_hook_one_rank.count(), 0, 1));
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
  p->driver_version = r.OptionalString("driver_version", "");
  p->cuda_version = r.OptionalString("cuda_version", "");
  p->nccl_version = r.OptionalString("nccl_version", "");
  p->date = r.OptionalString("date", "");
  p->command = r.OptionalString("command", "");
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

// A measured time: positive and below an hour (a larger one is a unit mistake).
Seconds ReadTime(StrictReader& e, const std::string& key) {
  double t = e.RequiredNumber(key, 0, 3600);
  if (!(t > 0)) throw InputError(e.Where(key) + ": expected a time > 0 s, got " + std::to_string(t));
  return Seconds::Of(t);
}

constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxTableBytes = int64_t{1} << 45;

// The array `key` of `r` (absent: none), each element read by `read` with its own reader.
template <typename F>
void ReadArray(StrictReader& r, const std::string& key, F read) {
  auto arr = r.OptionalValue(key);
  if (!arr) return;
  if (!arr->is_array()) {
    throw InputError(r.Where(key) + ": expected an array, got " + model::Describe(*arr));
  }
  for (size_t i = 0; i < arr->size(); ++i) {
    StrictReader e((*arr)[i], r.file(), r.pointer() + "/" + key + "/" + std::to_string(i));
    read(e);
    e.Finish();
  }
}

profiles::KernelTables ReadKernels(StrictReader& r) {
  profiles::KernelTables t;
  const std::vector<std::string>& dtypes = model::EnumNames<model::DType>();
  ReadArray(r, "gemm", [&](StrictReader& e) {
    profiles::GemmSample g;
    g.dtype = model::ParseEnum<model::DType>(e.RequiredEnum("dtype", dtypes), e.Where("dtype"));
    g.tf32 = e.OptionalBool("tf32", false);
    g.m = e.RequiredInt("m", 1, kMaxDim);
    g.n = e.RequiredInt("n", 1, kMaxDim);
    g.k = e.RequiredInt("k", 1, kMaxDim);
    g.time = ReadTime(e, "time_s");
    t.gemm.push_back(g);
  });
  ReadArray(r, "attention", [&](StrictReader& e) {
    profiles::AttentionSample a;
    a.backend = e.RequiredEnum("backend", {"flash", "efficient", "math", "cudnn", "cpu"});
    a.dtype = model::ParseEnum<model::DType>(e.RequiredEnum("dtype", dtypes), e.Where("dtype"));
    a.batch = e.RequiredInt("batch", 1, kMaxDim);
    a.seq_len = e.RequiredInt("seq_len", 1, kMaxDim);
    a.heads = e.RequiredInt("heads", 1, 1 << 16);
    a.kv_heads = e.RequiredInt("kv_heads", 1, a.heads);
    if (a.heads % a.kv_heads != 0) {
      throw InputError(e.Where("kv_heads") + ": expected a divisor of heads " +
                       std::to_string(a.heads) + ", got " + std::to_string(a.kv_heads));
    }
    a.head_dim = e.RequiredInt("head_dim", 1, 1 << 16);
    a.causal = e.OptionalBool("causal", true);
    a.pytorch_default = e.OptionalBool("pytorch_default", false);
    a.forward = ReadTime(e, "forward_s");
    a.backward = ReadTime(e, "backward_s");
    t.attention.push_back(a);
  });
  std::vector<std::string> names;
  for (int i = 0; i < profiles::kNumMemoryKernels; ++i) {
    names.push_back(profiles::ToString(static_cast<profiles::MemoryKernel>(i)));
  }
  ReadArray(r, "memory", [&](StrictReader& e) {
    profiles::MemoryKernelSample m;
    m.kernel = *profiles::MemoryKernelFromString(e.RequiredEnum("kernel", names));
    m.bytes = e.RequiredInt("bytes", 1, kMaxTableBytes);
    m.time = ReadTime(e, "time_s");
    t.memory.push_back(m);
  });
  if (auto host = r.OptionalValue("host")) {
    StrictReader h(*host, r.file(), r.pointer() + "/host");
    for (auto [key, field] : {std::pair{"kernel_launch_s", &t.host.kernel_launch},
                              std::pair{"op_dispatch_s", &t.host.op_dispatch},
                              std::pair{"module_hook_s", &t.host.module_hook}}) {
      if (h.Has(key)) *field = ReadTime(h, key);
    }
    h.Finish();
  }
  ReadArray(r, "copies", [&](StrictReader& e) {
    profiles::CopySample c;
    c.host_to_device = e.RequiredEnum("direction", {"h2d", "d2h"}) == "h2d";
    c.pinned = e.RequiredEnum("host_memory", {"pinned", "pageable"}) == "pinned";
    c.bytes = e.RequiredInt("bytes", 1, kMaxTableBytes);
    c.time = ReadTime(e, "time_s");
    t.copies.push_back(c);
  });
  ReadArray(r, "collectives", [&](StrictReader& e) {
    profiles::CollectiveSample c;
    std::string kind = e.RequiredEnum("kind", {kKinds[0], kKinds[1], kKinds[2], kKinds[3], kKinds[4]});
    for (int i = 0; i < 5; ++i) {
      if (kind == kKinds[i]) c.kind = static_cast<profiles::Collective>(i);
    }
    c.backend = e.RequiredEnum("backend", {"nccl", "gloo"});
    c.ranks = static_cast<int>(e.RequiredInt("ranks", 2, 1 << 24));
    c.bytes = e.RequiredInt("bytes", 1, kMaxTableBytes);
    c.time = ReadTime(e, "time_s");
    t.collectives.push_back(c);
  });
  return t;
}

nlohmann::ordered_json KernelsToJson(const profiles::KernelTables& t) {
  using OJson = nlohmann::ordered_json;
  OJson j = OJson::object();
  OJson gemm = OJson::array();
  for (const auto& g : t.gemm) {
    gemm.push_back({{"dtype", model::ToString(g.dtype)}, {"tf32", g.tf32}, {"m", g.m}, {"n", g.n},
                    {"k", g.k}, {"time_s", g.time.count()}});
  }
  j["gemm"] = gemm;
  OJson attn = OJson::array();
  for (const auto& a : t.attention) {
    attn.push_back({{"backend", a.backend}, {"dtype", model::ToString(a.dtype)}, {"batch", a.batch},
                    {"seq_len", a.seq_len}, {"heads", a.heads}, {"kv_heads", a.kv_heads},
                    {"head_dim", a.head_dim}, {"causal", a.causal}, {"pytorch_default", a.pytorch_default},
                    {"forward_s", a.forward.count()}, {"backward_s", a.backward.count()}});
  }
  j["attention"] = attn;
  OJson mem = OJson::array();
  for (const auto& m : t.memory) {
    mem.push_back({{"kernel", profiles::ToString(m.kernel)}, {"bytes", m.bytes},
                   {"time_s", m.time.count()}});
  }
  j["memory"] = mem;
  OJson host = OJson::object();
  if (t.host.kernel_launch) host["kernel_launch_s"] = t.host.kernel_launch->count();
  if (t.host.op_dispatch) host["op_dispatch_s"] = t.host.op_dispatch->count();
  if (t.host.module_hook) host["module_hook_s"] = t.host.module_hook->count();
  j["host"] = host;
  OJson copies = OJson::array();
  for (const auto& c : t.copies) {
    copies.push_back({{"direction", c.host_to_device ? "h2d" : "d2h"},
                      {"host_memory", c.pinned ? "pinned" : "pageable"}, {"bytes", c.bytes},
                      {"time_s", c.time.count()}});
  }
  j["copies"] = copies;
  OJson coll = OJson::array();
  for (const auto& c : t.collectives) {
    coll.push_back({{"kind", kKinds[static_cast<int>(c.kind)]}, {"backend", c.backend},
                    {"ranks", c.ranks}, {"bytes", c.bytes}, {"time_s", c.time.count()}});
  }
  j["collectives"] = coll;
  return j;
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
  if (auto kernels = r.OptionalValue("kernels")) {
    StrictReader m(*kernels, path, "/kernels");
    auto tables = std::make_shared<profiles::KernelTables>(ReadKernels(m));
    m.Finish();
    if (!tables->empty()) c.tables = std::move(tables);
  }
  r.Finish();
  return p;
}

Profile ReadProfileFile(const std::string& path) { return ProfileFromJson(model::ReadJsonFile(path), path); }

const Profile* CatalogProfile(const profiles::GpuSpec& gpu) {
  const char* text = profiles::MeasuredProfileText(gpu.measured_profile);
  if (text == nullptr) return nullptr;
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<const Profile>> parsed;  // by file
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = parsed[gpu.measured_profile];
  if (!slot) {
    const std::string where = "profiles/measured/" + gpu.measured_profile + " (embedded)";
    slot = std::make_unique<const Profile>(ProfileFromJson(Json::parse(text), where));
  }
  return slot.get();
}

std::string ProfileDeviceMismatch(const Profile& p, const profiles::ClusterSpec& cluster) {
  if (!p.has_provenance || p.provenance.device.empty()) return "";
  const std::string& d = p.provenance.device;
  const bool cpu_profile = d.rfind("cpu", 0) == 0;
  const std::string cluster_kind = cluster.cpu_only ? "CPU ranks" : cluster.gpu.name + " GPUs";
  if (cpu_profile != cluster.cpu_only) {
    return "measured on \"" + d + "\", but --cluster " + cluster.name + " is " + cluster_kind;
  }
  if (cpu_profile) return "";
  std::string device = d.rfind("cuda:", 0) == 0 ? d.substr(5) : d;
  profiles::DeviceMatch m = profiles::MatchCudaDevice(device, Bytes());
  if (m.gpu != nullptr && m.gpu->name != cluster.gpu.name) {
    return "measured on \"" + d + "\" (" + m.gpu->name + "), but --cluster " + cluster.name + " is " +
           cluster_kind;
  }
  return "";
}

Profile JobProfile(const std::string& file, const profiles::GpuSpec& gpu) {
  if (!file.empty()) return ReadProfileFile(file);
  if (const Profile* p = CatalogProfile(gpu)) return *p;
  return Profile{};
}

nlohmann::ordered_json ProfileToJson(const Profile& p) {
  nlohmann::ordered_json j;
  j["schema"] = "shardtune.profile";
  j["schema_version"] = kProfileSchemaVersion;
  j["name"] = p.name;
  if (p.has_provenance) {
    const ProfileProvenance& v = p.provenance;
    j["provenance"] = {{"hostname", v.hostname}, {"cpu_model", v.cpu_model}, {"device", v.device},
                       {"backend", v.backend}, {"torch_version", v.torch_version},
                       {"shardtune_version", v.shardtune_version},
                       {"driver_version", v.driver_version}, {"cuda_version", v.cuda_version},
                       {"nccl_version", v.nccl_version}, {"date", v.date}, {"command", v.command},
                       {"measurements", v.measurements}};
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
                  {"host_memory_bytes_per_s_per_node", c.host_memory_bandwidth_per_node.count()},
                  {"host_per_kernel_s", c.host_per_kernel.count()},
                  {"host_per_fsdp_hook_s", c.host_per_fsdp_hook.count()},
                  {"host_per_backward_kernel_s", c.host_per_backward_kernel.count()},
                  {"host_per_optimizer_param_s", c.host_per_optimizer_param.count()},
                  {"host_per_fused_optimizer_param_s", c.host_per_fused_optimizer_param.count()},
                  {"host_per_fsdp_hook_one_rank_s", c.host_per_fsdp_hook_one_rank.count()}};
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
  if (c.tables) j["kernels"] = KernelsToJson(*c.tables);
  return j;
}

}  // namespace shardtune::sim
