// The text of profiles/gpus.json and profiles/links.json, embedded at build time by
// profiles/CMakeLists.txt (configure_file of catalog_data.cc.in). Internal to shardtune_profiles.
#pragma once

namespace shardtune::profiles::internal {

// NUL-terminated JSON text of profiles/gpus.json as it was when the build was configured.
const char* GpuCatalogJsonText();
// NUL-terminated JSON text of profiles/links.json as it was when the build was configured.
const char* LinkCatalogJsonText();

}  // namespace shardtune::profiles::internal
