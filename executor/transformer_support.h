// Which model specs the executor's transformer can build (plain C++, for input validation).
#pragma once

#include <string>

#include "model/model_spec.h"

namespace shardtune::exec {

// Empty when the executor can build `spec`, else why not (e.g. mixture of experts).
std::string TransformerSupportProblem(const model::ModelSpec& spec);

}  // namespace shardtune::exec
