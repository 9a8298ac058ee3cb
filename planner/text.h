// Small text helpers shared by the planner's explanations (advice, search reasons).
#pragma once

#include <cstdio>
#include <string>

#include "model/units.h"

namespace shardtune::plan {

// "83.1 GiB" (binary units, one decimal).
inline std::string GiBText(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", b.gib());
  return buf;
}

}  // namespace shardtune::plan
