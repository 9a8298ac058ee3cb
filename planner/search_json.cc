// `tune --json`'s search keys (search_json.h).
#include "planner/search_json.h"

#include "model/plan_json.h"

namespace shardtune::planner {

nlohmann::ordered_json CandidateToJson(const Candidate& c) {
  return {{"key", c.key}, {"flags", PlanAsFlags(c.plan)}, {"tokens_per_s", c.tokens_per_s}, {"mfu", c.mfu}, {"step_time_s", c.step_time_s},
          {"exposed_comm_s", c.exposed_comm_s}, {"required_bytes", c.required.count()},
          {"headroom_bytes", (c.capacity - c.required).count()},
          {"dollars_per_million_tokens", c.dollars_per_million_tokens},
          {"why_not_best", c.why_not_best}, {"plan", model::PlanToJson(c.plan)}};
}

void AppendSearchResultJson(const SearchResult& r, nlohmann::ordered_json* out) {
  nlohmann::ordered_json& j = *out;
  j["enumerated"] = r.enumerated;
  j["pruned_by_memory_bound"] = r.pruned_by_memory_bound;
  j["pruned_by_time_bound"] = r.pruned_by_time_bound;
  j["simulated"] = r.simulated;
  j["work"] = {{"enumerated", r.enumerated},
               {"pruned_by_memory_bound", r.pruned_by_memory_bound},
               {"memory_checked", r.memory_checked},
               {"pruned_before_walk", r.pruned_before_walk},
               {"prewalk_bound_walks", r.prewalk_bound_walks},
               {"pruned_by_time_bound", r.pruned_by_time_bound},
               {"simulated", r.simulated},
               {"replayed", r.replayed},
               {"refined_checkpointing", r.refined_checkpointing},
               {"refined_block_policies", r.refined_block_policies},
               {"equivalent_hidden", r.equivalent_hidden},
               {"threads", r.threads},
               {"wall_s", r.search_s}};
  nlohmann::ordered_json top = nlohmann::ordered_json::array(), pareto = nlohmann::ordered_json::array();
  for (const auto& c : r.top) top.push_back(CandidateToJson(c));
  for (const auto& c : r.pareto) pareto.push_back(CandidateToJson(c));
  j["top"] = top;
  j["pareto"] = pareto;
  nlohmann::ordered_json rej = nlohmann::ordered_json::array();
  for (const auto& x : r.rejected) {
    rej.push_back({{"reason", x.reason}, {"count", x.count}, {"example", x.example},
                   {"smallest_required_bytes", x.smallest_required.count()}});
  }
  j["rejected"] = rej;
  nlohmann::ordered_json cps = nlohmann::ordered_json::array();
  for (const auto& v : r.cp_verdicts) {
    cps.push_back({{"cp", v.cp},
                   {"ep", v.ep},
                   {"plans", v.plans},
                   {"fitting", v.fitting},
                   {"slower_by_compute", v.slower_by_compute},
                   {"smallest_required_bytes", v.smallest_required.count()},
                   {"smallest_key", v.smallest_key},
                   {"smallest_bound_bytes", v.smallest_bound.count()},
                   {"smallest_bound_key", v.smallest_bound_key},
                   {"best_step_time_s", v.best_step_time_s},
                   {"best_key", v.best_key},
                   {"best_required_bytes", v.best_required.count()},
                   {"why", v.why}});
  }
  j["cp_verdicts"] = cps;
  j["fits"] = !r.top.empty();
}

}  // namespace shardtune::planner
