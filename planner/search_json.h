// The search's result as JSON (`tune --json`), beside the other report writers
// (simulator/memory_report_json.h): one function per result type, keys in schema order.
#pragma once

#include <nlohmann/json.hpp>

#include "planner/search.h"

namespace shardtune::planner {

// One ranked plan: its key, throughput, MFU, step time, memory, cost, why it is not #1, the plan.
nlohmann::ordered_json CandidateToJson(const Candidate& c);

// The search's own keys of "shardtune.tune": enumerated, pruned_by_memory_bound,
// pruned_by_time_bound, simulated, work (every count, threads, wall seconds), top, pareto,
// rejected (why the others lost), cp_verdicts, fits; appended to `j` in that order (the caller adds
// advice_if_none after its own keys about the winner).
void AppendSearchResultJson(const SearchResult& r, nlohmann::ordered_json* j);

}  // namespace shardtune::planner
