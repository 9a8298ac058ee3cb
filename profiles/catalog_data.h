// The text of profiles/gpus.json and profiles/links.json, embedded at build time by
// profiles/CMakeLists.txt (configure_file of catalog_data.cc.in). Internal to shardtune_profiles.
#pragma once

#include <string>
#include <vector>

namespace shardtune::profiles::internal {

// NUL-terminated JSON text of profiles/gpus.json as it was when the build was configured.
const char* GpuCatalogJsonText();
// NUL-terminated JSON text of profiles/links.json as it was when the build was configured.
const char* LinkCatalogJsonText();
// NUL-terminated JSON text of profiles/measured/<file> (e.g. "h100-sxm-80g.profile.json");
// nullptr when no such file was embedded.
const char* MeasuredProfileJsonText(const char* file);
// The embedded profiles/measured/ file names, sorted.
std::vector<std::string> MeasuredProfileFiles();

}  // namespace shardtune::profiles::internal
