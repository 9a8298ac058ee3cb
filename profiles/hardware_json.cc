// JSON glue for the hardware catalog: strict readers for GPU and link objects and for the two
// catalog documents. Figures are read in the units named by their keys (bytes, bytes/s, FLOP/s, s).
#include "profiles/hardware_json.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>

#include "model/errors.h"
#include "model/text.h"
#include "profiles/catalog_data.h"

namespace shardtune::profiles::internal {
namespace {

constexpr double kMaxRate = 1e18;  // generous upper bound: catches typos such as an extra e6

using model::Lower;

std::vector<std::string> ReadStringList(model::StrictReader& r, const std::string& key) {
  std::vector<std::string> out;
  auto v = r.OptionalValue(key);
  if (!v) return out;
  if (!v->is_array()) {
    throw InputError(r.Where(key) + ": expected an array of strings, got " + model::Describe(*v));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& item = (*v)[i];
    if (!item.is_string()) {
      throw InputError(r.Where(key) + "/" + std::to_string(i) + ": expected a string, got " +
                       model::Describe(item));
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

// Reads the array under `key` of a catalog root and calls `read` on each element's reader.
template <typename T, typename Fn>
std::vector<T> ReadArray(model::StrictReader& root, const std::string& key, Fn read) {
  const auto& arr = root.RequiredValue(key);
  if (!arr.is_array() || arr.empty()) {
    throw InputError(root.Where(key) + ": expected a non-empty array, got " + model::Describe(arr));
  }
  std::vector<T> out;
  for (size_t i = 0; i < arr.size(); ++i) {
    model::StrictReader r(arr[i], root.file(), "/" + key + "/" + std::to_string(i));
    out.push_back(read(r));
    r.Finish();
  }
  return out;
}

// Throws when two entries share a name or alias (compared case-insensitively).
void CheckUnique(const std::vector<std::vector<std::string>>& names, const std::string& where,
                 const std::string& key) {
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    for (const auto& n : names[i]) {
      auto [it, inserted] = seen.emplace(Lower(n), i);
      if (!inserted && it->second != i) {
        throw InputError(where + ":/" + key + "/" + std::to_string(i) + ": name or alias \"" + model::EscapeControls(n) +
                         "\" is already used by entry " + std::to_string(it->second));
      }
    }
  }
}

// A catalog document ({"schema": `schema`, "about": ..., `key`: [...]}, version 1): each entry
// read by `read`, then the entries' names (`names_of`: its name and aliases) checked unique.
template <typename T, typename Read, typename Names>
std::vector<T> ReadCatalog(const std::string& text, const std::string& name,
                           const std::string& schema, const std::string& key, Read read,
                           Names names_of) {
  nlohmann::json doc = model::ParseJsonText(text, name);
  model::StrictReader root(doc, name);
  root.CheckSchema(schema, 1);
  root.OptionalString("about", "");
  std::vector<T> entries = ReadArray<T>(root, key, read);
  root.Finish();
  std::vector<std::vector<std::string>> names;
  for (const T& e : entries) names.push_back(names_of(e));
  CheckUnique(names, name, key);
  return entries;
}

}  // namespace

GpuSpec ReadGpuSpec(model::StrictReader& r) {
  GpuSpec g;
  g.name = r.RequiredString("name");
  g.aliases = ReadStringList(r, "aliases");
  g.marketed_memory = Bytes::Of(r.RequiredInt("marketed_memory_bytes", INT64_MIN, INT64_MAX));
  g.usable_memory = Bytes::Of(r.RequiredInt("usable_memory_bytes", INT64_MIN, INT64_MAX));
  g.bf16_dense =
      FlopsPerSecond::Of(r.RequiredNumber("bf16_dense_flops_per_s", -kMaxRate, kMaxRate));
  g.fp16_dense =
      FlopsPerSecond::Of(r.RequiredNumber("fp16_dense_flops_per_s", -kMaxRate, kMaxRate));
  g.tf32_dense =
      FlopsPerSecond::Of(r.RequiredNumber("tf32_dense_flops_per_s", -kMaxRate, kMaxRate));
  g.fp32 = FlopsPerSecond::Of(r.RequiredNumber("fp32_flops_per_s", -kMaxRate, kMaxRate));
  g.memory_bandwidth =
      BytesPerSecond::Of(r.RequiredNumber("memory_bytes_per_s", -kMaxRate, kMaxRate));
  g.intra_node_link = r.RequiredString("intra_node_link");
  g.default_fabric = r.RequiredString("default_fabric");
  g.host_link = r.RequiredString("host_link");
  g.host_copy_link = r.OptionalString("host_copy_link", "");
  // Optional in inline GPU objects: 0 leaves collectives to the topology graph, not NCCL's model.
  g.compute_capability = static_cast<int>(r.OptionalInt("compute_capability", 0, 0, 1000));
  g.source = r.RequiredString("source");
  g.usable_memory_source = r.OptionalString("usable_memory_source", "");
  std::vector<std::string> measured = internal::MeasuredProfileFiles();
  measured.insert(measured.begin(), "");
  g.measured_profile = r.OptionalEnum("measured_profile", "", measured);
  return g;
}

LinkSpec ReadLinkSpec(model::StrictReader& r) {
  LinkSpec l;
  l.name = r.RequiredString("name");
  l.family = r.RequiredEnum("family", {"nvlink", "pcie", "ib", "roce", "eth", "loopback"});
  l.bandwidth_per_direction = BytesPerSecond::Of(
      r.RequiredNumber("bandwidth_per_direction_bytes_per_s", -kMaxRate, kMaxRate));
  l.latency = Seconds::Of(r.RequiredNumber("latency_s", -1e3, 1e3));
  l.nvlink_domain = r.OptionalBool("nvlink_domain", false);
  l.nvlink_links = static_cast<int>(r.OptionalInt("nvlink_links", 0, 0, 64));
  l.source = r.RequiredString("source");
  return l;
}

std::vector<GpuSpec> ParseGpuCatalog(const std::string& text, const std::string& name) {
  return ReadCatalog<GpuSpec>(text, name, "shardtune.gpu_catalog", "gpus", ReadGpuSpec,
                              [](const GpuSpec& g) {
                                std::vector<std::string> names = g.aliases;
                                names.push_back(g.name);
                                return names;
                              });
}

std::vector<LinkSpec> ParseLinkCatalog(const std::string& text, const std::string& name) {
  return ReadCatalog<LinkSpec>(text, name, "shardtune.link_catalog", "links", ReadLinkSpec,
                               [](const LinkSpec& l) { return std::vector<std::string>{l.name}; });
}

}  // namespace shardtune::profiles::internal
