// Preset and catalog listings.
#include "cli/list_cmds.h"

#include <algorithm>
#include <iomanip>

#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "model/model_spec_json.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "profiles/cluster_presets.h"
#include "profiles/hardware.h"
#include "simulator/profile_json.h"

namespace shardtune::cli {

void RunModels(bool json, std::ostream& out) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  // The name column fits the longest name and two spaces ("deepseek-v2-lite15.71 B" ran together).
  int name_width = 6;
  for (const auto& p : model::ModelPresets()) name_width = std::max(name_width, static_cast<int>(p.name.size()) + 2);
  if (!json) out << std::left << std::setw(name_width) << "name" << std::setw(12) << "parameters" << "source\n";
  for (const auto& p : model::ModelPresets()) {
    int64_t n = model::ParameterCount(p.spec);
    if (json) {
      arr.push_back({{"name", p.name}, {"parameters", n}, {"published_parameters", p.published_parameters},
                     {"source", p.source}, {"spec", model::ModelSpecToJson(p.spec)}});
    } else {
      out << std::setw(name_width) << p.name << std::setw(12) << FormatCount(n) << p.source << "\n";
    }
  }
  if (json) out << arr.dump(2) << "\n";
}

void RunGpus(bool json, std::ostream& out) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  int name_width = 6, link_width = 6;
  for (const auto& g : profiles::GpuCatalog()) {
    name_width = std::max(name_width, static_cast<int>(g.name.size()) + 2);
    link_width = std::max(link_width, static_cast<int>(g.intra_node_link.size()) + 2);
  }
  if (!json) {
    out << std::left << std::setw(name_width) << "name" << std::setw(12) << "usable" << std::setw(14)
        << "bf16 TFLOP/s" << std::setw(12) << "HBM GB/s" << std::setw(link_width) << "link" << std::setw(18)
        << "kernel times" << "source\n";
  }
  for (const auto& g : profiles::GpuCatalog()) {
    // Kernel times: measured on this kind (`shardtune probe`, the catalog's profiles/measured/
    // file) or the datasheet peaks times the cost model's efficiencies.
    const sim::Profile* measured = sim::CatalogProfile(g);
    if (json) {
      nlohmann::ordered_json kt = {{"source", measured != nullptr ? "measured" : "datasheet"}};
      if (measured != nullptr) {
        kt["profile"] = g.measured_profile;
        kt["device"] = measured->provenance.device;
        kt["date"] = measured->provenance.date;
        kt["torch_version"] = measured->provenance.torch_version;
        kt["cuda_version"] = measured->provenance.cuda_version;
        kt["driver_version"] = measured->provenance.driver_version;
      }
      arr.push_back({{"name", g.name}, {"aliases", g.aliases},
                     {"marketed_memory_bytes", g.marketed_memory.count()},
                     {"usable_memory_bytes", g.usable_memory.count()},
                     {"bf16_dense_flops_per_s", g.bf16_dense.count()},
                     {"memory_bytes_per_s", g.memory_bandwidth.count()},
                     {"intra_node_link", g.intra_node_link}, {"kernel_times", kt}, {"source", g.source}});
    } else {
      const std::string kernels = measured != nullptr ? "probe " + measured->provenance.date : "datasheet";
      out << std::setw(name_width) << g.name << std::setw(12) << FormatBytes(g.usable_memory) << std::setw(14)
          << std::fixed << std::setprecision(1) << g.bf16_dense.count() / 1e12 << std::setw(12)
          << std::setprecision(0) << g.memory_bandwidth.count() / 1e9 << std::setw(link_width)
          << g.intra_node_link << std::setw(18) << kernels << g.source << "\n";
    }
  }
  if (json) {
    out << arr.dump(2) << "\n";
    return;
  }
  // Node presets for --cluster NODESxPRESET (profiles/cluster_presets.h).
  out << "\nNode presets (--cluster NODESxPRESET, e.g. 4xp5; the NIC layout decides NCCL's channels)\n";
  for (const auto& p : profiles::ClusterPresets()) {
    std::string names = p.name;
    for (const auto& a : p.aliases) names += ", " + a;
    if (names.size() < 44) names.resize(44, ' ');
    else names += "  ";
    out << "  " << names << std::left << std::setw(15) << p.gpu << p.gpus_per_node << " GPUs";
    // A node whose NVLink domain spans hosts (GB200 NVL72): its host count and size.
    if (p.gpus_per_host > 0) {
      out << " in one NVLink domain (" << p.gpus_per_node / p.gpus_per_host << " hosts of " << p.gpus_per_host << ")";
    }
    out << ", " << p.nics_per_node << " x " << p.nic_gbps << " Gb/s " << p.network;
    // The latency its net plugin reports to NCCL's tuner (ClusterSpec::net_latency).
    if (p.net_latency_us > 0) out << ", net plugin latency " << p.net_latency_us << " us (aws-ofi-nccl)";
    // The tuner plugin that overrides NCCL's algorithm choice (ClusterSpec::nccl_tuner).
    if (p.nccl_tuner != profiles::NcclTuner::kNone) out << ", NCCL tuner " << profiles::ToString(p.nccl_tuner);
    out << "\n      " << p.source << "\n";
  }
}

}  // namespace shardtune::cli
