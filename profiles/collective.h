// Collective kinds and their bus-bandwidth factors: the one definition shared by the executor
// (to report) and the simulator (to predict). Source: NVIDIA nccl-tests, doc/PERFORMANCE.md.
#pragma once

#include <string>

namespace shardtune::profiles {

enum class Collective { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kAllToAll };

// busbw = algbw * BusBwFactor(c, n), algbw = S / t with S the total size (nccl-tests):
// all-reduce 2(n-1)/n; all-gather, reduce-scatter and all-to-all (n-1)/n; broadcast 1.
// REQUIRES: n >= 1.
double BusBwFactor(Collective c, int n);
const char* ToString(Collective c);

}  // namespace shardtune::profiles
