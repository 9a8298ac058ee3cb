// The ranking half of the plan search (internal to the planner). Three passes over the
// enumerated plans: screen every plan's memory (in parallel), book the memory verdicts in plan
// order, then simulate the plans that fit in order of their time lower bound (in parallel, in
// fixed windows) while the top-k bound prunes the rest. Every verdict is a function of the plan
// alone, never of the order or the threads, so any --jobs gives the same answer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "planner/search.h"

namespace shardtune::plan {

// What the memory screening found for one plan.
struct Screened {
  // The lower bound the plan was judged on: the model-state bound (params, grads, optimizer
  // state + CUDA context) or, when that fits, the forward-end bound (sim::AllocatedLowerBound:
  // those states + every block's saved activations at the end of step 1's first forward, with
  // the fragmentation allowance and the context), whichever rules it out.
  Bytes bound;
  bool bound_oom = false;  // bound > capacity: ruled out by the bound (walked only exhaustively)
  bool forward_end_bound = false;  // `bound` is the forward-end bound
  bool evaluated = false;  // the memory walk ran
  Bytes required;          // screening figure: allocated peak + fragmentation allowance + outside
  bool fits = false;       // required <= capacity
  std::string peak_phase;
  std::vector<std::pair<std::string, Bytes>> peak_top;  // the two largest categories at the peak
  // Lower bound of the steady step (plans that fit): the busiest serial resource's busy time
  // (sim::StepLowerBound), and which resource that is.
  double time_lb_s = 0;
  const char* time_lb_resource = "compute stream";
  // Exhaustive search only: the caching-allocator replay's verdict and figure.
  bool replayed = false, replay_fits = false;
  Bytes replay_required;
};

class Ranker {
 public:
  // Per-thread state: a simulation context (topology, model cache, program buffers) and the
  // padded shard sizes per (wrap, shard group).
  struct Worker {
    explicit Worker(const profiles::ClusterSpec& c) : ctx(c) {}
    sim::SimContext ctx;
    std::map<std::string, int64_t> shard_numel;
  };

  Ranker(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req);
  ~Ranker();
  SearchResult Run(const std::vector<model::Plan>& plans,
                   const std::function<void(int64_t, int64_t)>& progress);

 private:
  Worker& WorkerOf(size_t thread);
  Screened Screen(const model::Plan& plan, Worker& w) const;
  Bytes ModelStateLowerBound(const model::Plan& plan, Worker& w) const;
  Bytes ForwardEndLowerBound(const model::Plan& plan, Worker& w) const;
  void BookMemory(size_t index, const model::Plan& p, const Screened& s, std::vector<size_t>* fitting);
  void SimulateFitting(const std::vector<model::Plan>& plans, std::vector<size_t> fitting);
  void Admit(size_t index, const model::Plan& p, const sim::SimReport& r);
  bool Prunable(double time_lb_s, int cp) const;
  double TopThreshold() const;
  bool ConfirmForTop(Candidate* c);
  void Reject(const std::string& reason, const std::string& example, Bytes required);
  CpVerdict& VerdictOf(int cp);
  void NoteMemory(int cp, const std::string& key, const Screened& s);
  SearchResult Finish();
  void FinishVerdicts(SearchResult* out) const;
  double Objective(const Candidate& c) const;

  const model::ModelSpec& spec_;
  const profiles::ClusterSpec& cluster_;
  const SearchRequest& req_;
  sim::SimOptions opt_;        // screening: no replay, no timeline, repeated micro-batches skipped
  sim::SimOptions full_opt_;   // simulation: the whole program, no replay
  bool replay_top_ = false;    // replay the allocator for plans about to enter the top list
  bool exhaustive_ = false;    // every plan walked, replayed and simulated (tests)
  int threads_ = 1;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Candidate> candidates_;
  std::vector<size_t> candidate_index_;  // plan index of each candidate (ties break on it)
  std::vector<int8_t> replay_state_;     // per candidate: 0 not replayed, 1 fits, -1 out of memory
  std::vector<Screened> screened_;       // by plan index
  // Confirmed (replayed) candidates that may still define the top-k bound: (objective, index).
  std::vector<std::pair<double, size_t>> confirmed_;
  std::map<std::string, Rejection> rejections_;
  std::map<int, CpVerdict> verdicts_;        // by cp
  std::map<int, size_t> verdict_best_index_;  // plan index of each cp's fastest plan
  SearchResult result_;
};

// Why `c` ranks below `best`, in one sentence with the figures that differ.
std::string WhyNotBest(const Candidate& c, const Candidate& best);

}  // namespace shardtune::plan
