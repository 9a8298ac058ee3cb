// Collective kinds and their names in files (measurements.json, profiles): vocabulary shared by
// the executor (which runs and reports them), profiles/ (their bus-bandwidth factors) and the
// simulator (which predicts them). A vocabulary header: no dependencies, any folder includes it.
#pragma once

#include <array>
#include <cstddef>

namespace shardtune::model {

enum class Collective { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kAllToAll };

// By Collective's value; the names nccl-tests and torch.distributed use.
inline constexpr std::array<const char*, 5> kCollectiveNames = {"all_gather", "reduce_scatter", "all_reduce",
                                                                "broadcast", "all_to_all"};

inline const char* ToString(Collective c) { return kCollectiveNames[static_cast<size_t>(c)]; }

}  // namespace shardtune::model
