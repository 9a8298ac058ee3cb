// Collective kinds and their bus-bandwidth factors: the one definition shared by the executor
// (to report) and the simulator (to predict). Source: NVIDIA nccl-tests, doc/PERFORMANCE.md.
#pragma once

#include <string>

#include "model/collective.h"

namespace shardtune::profiles {

using Collective = model::Collective;

// busbw = algbw * BusBwFactor(c, n), algbw = S / t with S the total size (nccl-tests):
// all-reduce 2(n-1)/n; all-gather, reduce-scatter and all-to-all (n-1)/n; broadcast 1.
// REQUIRES: n >= 1.
double BusBwFactor(Collective c, int n);
using model::ToString;  // ToString(Collective), the names in files

}  // namespace shardtune::profiles
