// The hardware catalog: profiles/gpus.json and profiles/links.json, embedded at build time, parsed
// once on first use (function-local statics, thread-safe since C++11) and looked up by name.
#include "profiles/hardware.h"

#include <algorithm>
#include <cctype>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"
#include "profiles/catalog_data.h"
#include "profiles/hardware_json.h"

namespace shardtune::profiles {
namespace {

bool EqualsIgnoreCase(const std::string& a, const std::string& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
           return std::tolower(x) == std::tolower(y);
         });
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

std::vector<std::string> GpuNamesAndAliases() {
  std::vector<std::string> out;
  for (const auto& g : GpuCatalog()) {
    out.push_back(g.name);
    out.insert(out.end(), g.aliases.begin(), g.aliases.end());
  }
  return out;
}

std::vector<std::string> LinkNames() {
  std::vector<std::string> out;
  for (const auto& l : LinkCatalog()) out.push_back(l.name);
  return out;
}

}  // namespace

const std::vector<GpuSpec>& GpuCatalog() {
  static const std::vector<GpuSpec> catalog =
      internal::ParseGpuCatalog(internal::GpuCatalogJsonText(), "profiles/gpus.json (embedded)");
  return catalog;
}

const std::vector<LinkSpec>& LinkCatalog() {
  static const std::vector<LinkSpec> catalog =
      internal::ParseLinkCatalog(internal::LinkCatalogJsonText(), "profiles/links.json (embedded)");
  return catalog;
}

const char* MeasuredProfileText(const std::string& file) {
  return file.empty() ? nullptr : internal::MeasuredProfileJsonText(file.c_str());
}

const GpuSpec* LookupGpu(const std::string& name) {
  for (const auto& g : GpuCatalog()) {
    if (EqualsIgnoreCase(g.name, name)) return &g;
    for (const auto& a : g.aliases) {
      if (EqualsIgnoreCase(a, name)) return &g;
    }
  }
  return nullptr;
}

std::string UnknownGpuMessage(const std::string& name, bool list_known) {
  // The name as written, its control characters escaped: the message stays one line.
  std::string msg = "unknown GPU kind \"" + model::EscapeControls(name) + "\"";
  std::string hint = model::ClosestName(name, GpuNamesAndAliases());
  msg += model::DidYouMean(hint);
  if (list_known || hint.empty()) {
    std::vector<std::string> names;
    for (const auto& g : GpuCatalog()) names.push_back(g.name);
    msg += "; known kinds: " + JoinNames(names);
  }
  return msg;
}

const GpuSpec& FindGpu(const std::string& name, const std::string& where) {
  if (const GpuSpec* g = LookupGpu(name)) return *g;
  throw InputError(where + ": " + UnknownGpuMessage(name, /*list_known=*/true));
}

const LinkSpec& FindLink(const std::string& name, const std::string& where) {
  for (const auto& l : LinkCatalog()) {
    if (EqualsIgnoreCase(l.name, name)) return l;
  }
  std::string hint = model::ClosestName(name, LinkNames());
  throw InputError(where + ": unknown link kind \"" + model::EscapeControls(name) + "\"" +
                   model::DidYouMean(hint) +
                   "; known kinds: " + JoinNames(LinkNames()));
}

}  // namespace shardtune::profiles
