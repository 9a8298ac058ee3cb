// JSON glue for the hardware catalog (README.md "Conventions"): GPU and link objects as they
// appear in profiles/gpus.json, profiles/links.json and inline in a cluster file. Internal to
// profiles/.
#pragma once

#include <string>
#include <vector>

#include "model/strict_json.h"
#include "profiles/hardware.h"

namespace shardtune::profiles::internal {

// Reads one GPU object (every key of a gpus.json entry; "aliases" optional, default none;
// "usable_memory_source" optional, default ""). Checks types only; ranges are checked by
// the catalog test and ClusterSpec::Problems. Throws InputError naming file and pointer.
GpuSpec ReadGpuSpec(model::StrictReader& r);
// Reads one link object (every key of a links.json entry).
LinkSpec ReadLinkSpec(model::StrictReader& r);

// Parses the text of a "shardtune.gpu_catalog" / "shardtune.link_catalog" document; `name`
// prefixes messages. Throws InputError on any problem, including duplicate names or aliases.
std::vector<GpuSpec> ParseGpuCatalog(const std::string& text, const std::string& name);
std::vector<LinkSpec> ParseLinkCatalog(const std::string& text, const std::string& name);

}  // namespace shardtune::profiles::internal
