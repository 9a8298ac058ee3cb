// `shardtune models` and `shardtune gpus`: the presets and the hardware catalog.
#pragma once

#include <ostream>

namespace shardtune::cli {

void RunModels(bool json, std::ostream& out);
void RunGpus(bool json, std::ostream& out);

}  // namespace shardtune::cli
