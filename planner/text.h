// The planner's explanations (advice, search reasons) format sizes with model/text.h.
#pragma once

#include "model/text.h"

namespace shardtune::plan {

using model::GiBText;

}  // namespace shardtune::plan
