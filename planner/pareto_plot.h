// `tune --plot`: the plans the search simulated as points of per-GPU memory (required) against
// tokens/s, the Pareto front joined, the winner marked, the usable capacity as a line.
#pragma once

#include <string>

#include "planner/search.h"

namespace shardtune::planner {

// Self-contained SVG of `r.pareto` and `r.top` (the winner is r.top.front()).
std::string ParetoPlotSvg(const SearchResult& r, const std::string& title);

}  // namespace shardtune::planner
