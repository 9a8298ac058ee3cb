// The ranking half of the plan search (internal to the planner): checks, prunes and simulates
// one plan at a time, keeping candidates, the top-k bound and grouped rejections.
#pragma once

#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "planner/search.h"

namespace shardtune::plan {

class Ranker {
 public:
  Ranker(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req);
  void Consider(const model::Plan& plan);
  SearchResult Finish();

 private:
  Bytes ModelStateLowerBound(const model::Plan& plan);
  void Reject(const std::string& reason, const std::string& example, Bytes required);
  CpVerdict& VerdictOf(int cp);
  void NoteMemory(const model::Plan& p, const std::string& key, const sim::MemoryReport& m);
  void FinishVerdicts(SearchResult* out) const;
  double Objective(const Candidate& c) const;
  bool CanEnterTop(double objective_lower_bound) const;
  void Admit(Candidate c);
  bool ReplayFits(Candidate* c);

  const model::ModelSpec& spec_;
  const profiles::ClusterSpec& cluster_;
  const SearchRequest& req_;
  sim::SimContext ctx_;
  sim::SimOptions opt_;
  bool replay_top_ = false;  // screen with the allowance, replay the allocator for `top` only
  Bytes outside_floor_;                    // CUDA context: present in every plan
  std::map<std::string, int64_t> shard_numel_;  // (wrap, n) -> padded shard elements
  std::vector<Candidate> candidates_;
  std::priority_queue<double> top_objectives_;  // the k best objectives (max on top)
  std::map<std::string, Rejection> rejections_;
  std::map<int, CpVerdict> verdicts_;  // by cp
  SearchResult result_;
};

// Why `c` ranks below `best`, in one sentence with the figures that differ.
std::string WhyNotBest(const Candidate& c, const Candidate& best);

}  // namespace shardtune::plan
