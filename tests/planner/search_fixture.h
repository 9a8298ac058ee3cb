// The request the planner's search tests start from: a job's global batch and sequence length,
// every other field (objective, top_k, search space) at SearchRequest's defaults for the test to
// narrow.
#pragma once

#include <cstdint>

#include "planner/search.h"

namespace shardtune::planner::testing {

inline SearchRequest RequestFor(int64_t global_batch, int64_t seq_len) {
  SearchRequest r;
  r.global_batch = global_batch;
  r.seq_len = seq_len;
  return r;
}

}  // namespace shardtune::planner::testing
