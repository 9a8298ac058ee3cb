// Bus-bandwidth factors of the collectives, as defined by NVIDIA nccl-tests doc/PERFORMANCE.md:
// busbw = algbw * factor, algbw = S / t, S the total size. The factor makes busbw comparable
// with the link bandwidth for a ring: each rank sends and receives factor * S bytes.
#include "profiles/collective.h"

#include "model/errors.h"

namespace shardtune::profiles {

double BusBwFactor(Collective c, int n) {
  SHARDTUNE_CHECK(n >= 1) << "BusBwFactor needs n >= 1 ranks, got " << n;
  const double ranks = static_cast<double>(n);
  switch (c) {
    // All-reduce = reduce-scatter + all-gather: 2(n-1)/n (PERFORMANCE.md "AllReduce").
    case Collective::kAllReduce:
      return 2.0 * (ranks - 1.0) / ranks;
    // Each rank receives the n-1 chunks of size S/n it lacks (PERFORMANCE.md "AllGather",
    // "ReduceScatter"); all-to-all moves the same (n-1)/n of S per rank.
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (ranks - 1.0) / ranks;
    // Broadcast: busbw = algbw (PERFORMANCE.md "Broadcast").
    case Collective::kBroadcast:
      return 1.0;
  }
  SHARDTUNE_CHECK(false) << "unknown collective " << static_cast<int>(c);
  return 0.0;
}

}  // namespace shardtune::profiles
