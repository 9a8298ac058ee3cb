// Which model specs the executor's transformer can build (plain C++, for input validation).
#pragma once

#include <string>

#include "model/model_spec.h"

namespace shardtune::exec {

// Empty when the executor can build `spec`, else why not (e.g. mixture of experts).
std::string TransformerSupportProblem(const model::ModelSpec& spec);
// Empty when Ulysses context parallelism of degree `cp` can split `spec`'s attention, else why
// not: cp must divide num_heads, and num_kv_heads and cp must divide one another (each rank
// gets kv / cp kv heads, or one kv head repeated cp / kv times, as verl requires).
std::string UlyssesProblem(const model::ModelSpec& spec, int cp);

}  // namespace shardtune::exec
