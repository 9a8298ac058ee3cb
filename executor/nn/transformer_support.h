// Which model specs the executor's transformer can build (plain C++, for input validation).
#pragma once

#include <cstdint>
#include <string>

#include "model/model_spec.h"

namespace shardtune::exec {

// Empty when the executor can build `spec`, else why not (e.g. mixture of experts).
std::string TransformerSupportProblem(const model::ModelSpec& spec);
// Empty when Ulysses context parallelism of degree `cp` can split `spec`'s attention, else why
// not: cp must divide num_heads, and num_kv_heads and cp must divide one another (each rank
// gets kv / cp kv heads, or one kv head repeated cp / kv times, as verl requires).
std::string UlyssesProblem(const model::ModelSpec& spec, int cp);
// The features of a head_dim-wide head that rotary rotates: int(head_dim x rotary_fraction), as
// transformers computes them (modeling_gpt_neox.py rotary_ndims = int(head_size * rotary_pct);
// modeling_rope_utils.py _compute_default_rope_parameters: dim = int(head_dim *
// partial_rotary_factor)); the rest pass through.
inline int64_t RotaryDims(int64_t head_dim, double rotary_fraction) {
  return static_cast<int64_t>(static_cast<double>(head_dim) * rotary_fraction);  // truncates
}

}  // namespace shardtune::exec
