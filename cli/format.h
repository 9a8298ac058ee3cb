// Human formatting of numbers for the CLI (only cli/ formats for people, STYLE.md §4).
#pragma once

#include <cstdint>
#include <string>

#include "model/units.h"

namespace shardtune::cli {

// "83.1 GiB", "512.0 MiB", "4.0 KiB", "12 B" (binary units: capacities).
std::string FormatBytes(Bytes b);
// "6.74 B", "124.4 M", "512 K" (decimal: parameter counts).
std::string FormatCount(int64_t n);

}  // namespace shardtune::cli
