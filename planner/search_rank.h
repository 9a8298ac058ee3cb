// The ranking half of the plan search (internal to the planner). Passes over the enumerated
// plans: the memory lower bounds of every plan (in parallel, no walk); time bounds known before
// any walk (segment compute, collective transfers, host optimizer step), each read from one walk
// per combination of the knobs it depends on; then, in order of that prewalk bound and in fixed
// windows, the memory walk of the plans the top-k bound has not yet ruled out and the
// simulation of those that fit, in order of their step-time bound;
// last, every plan's verdict is booked in plan order against the final top list. Every verdict
// is a function of the plan and the final list alone, never of the order or the threads, so any
// --jobs gives the same answer, and so does the exhaustive search (tests).
#pragma once

#include <cstdint>
#include <functional>
#include <array>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <string>
#include <vector>

#include "planner/search.h"

namespace shardtune::planner {

// What the memory screening found for one plan.
struct Screened {
  // The lower bound the plan was judged on: the model-state bound (params, grads, optimizer
  // state + CUDA context) or, when that fits, the forward-end bound (sim::AllocatedLowerBound:
  // those states + every block's saved activations at the end of step 1's first forward, with
  // the fragmentation allowance and the context), whichever rules it out.
  Bytes bound;
  bool bound_oom = false;  // bound > capacity: ruled out by the bound (walked only exhaustively)
  bool forward_end_bound = false;  // `bound` is the forward-end bound
  bool backward_moment_bound = false;  // ... at one of its backward moments
  bool evaluated = false;  // the memory walk ran
  Bytes required;          // screening figure: allocated peak + fragmentation allowance + outside
  bool fits = false;       // required <= capacity
  std::string peak_phase;
  sim::StepPoint peak_at;
  std::vector<std::pair<std::string, Bytes>> peak_top;  // the two largest categories at the peak
  // Lower bound of the steady step (plans that fit): the busiest serial resource's busy time
  // (sim::StepLowerBound), and which resource that is.
  double time_lb_s = 0;
  const char* time_lb_resource = "compute stream";
  // Known before the walk, each from one walked plan that shares the knobs it depends on
  // (Ranker::PrewalkBounds): the forward and backward segment kernels' busy time on the compute
  // stream; the all-gather and the reduce-scatter streams' transfers; the per-unit kernels
  // (all-gather copy-outs, post-backward copy-ins) and the optimizer kernels the compute stream
  // runs besides the segments; the host optimizer step. `prewalk_lb_s` is the largest of the
  // compute stream's work (segments, per-unit kernels, GPU optimizer), either transfer sum, and
  // the segments and per-unit kernels followed by the host optimizer step (which waits for the
  // last gradient: step_walk_backward.cc OptimizerStep);
  // `prewalk_what` names it. A plan whose prewalk bound exceeds the final list's last step and
  // its cp's fastest step is "slower than the top plans" whatever its memory.
  double compute_lb_s = 0, all_gather_lb_s = 0, reduce_scatter_lb_s = 0, host_optimizer_lb_s = 0;
  double unit_kernels_lb_s = 0, gpu_optimizer_lb_s = 0;
  double prewalk_lb_s = 0;
  const char* prewalk_what = "its forward and backward kernels alone are busy";
  // What the search did with a plan that fits: simulated it, or left it out by its step-time
  // bound; below_floor: the kMemory objective's throughput floor ruled it out.
  bool simulated = false, time_pruned = false, below_floor = false;
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
    // The forward-end bound's two parts (sim::ForwardEndBound) by the knobs each depends on
    // (search_rank.cc ForwardEndStatesKey, ForwardEndActivationsKey; checked in the exhaustive
    // search).
    // Each holds its parts of a sim::ForwardEndBound (the other part's fields left empty).
    std::unordered_map<std::string, sim::ForwardEndBound> forward_end_states, forward_end_activations;
  };

  Ranker(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req);
  ~Ranker();
  SearchResult Run(const std::vector<model::Plan>& plans,
                   const std::function<void(int64_t, int64_t)>& progress);

 private:
  Worker& WorkerOf(size_t thread);
  // Runs each(j, plans[indices[j]], worker) for every j on the search's threads (ParallelFor:
  // what is written by j is the same for any thread count). Defined in search_rank.cc.
  template <typename Fn>
  void ForEachPlan(const std::vector<model::Plan>& plans, const std::vector<size_t>& indices,
                   Fn&& each);
  void Bound(const model::Plan& plan, Worker& w, Screened* s) const;
  void Walk(const model::Plan& plan, Worker& w, Screened* s) const;
  void Judge(const model::Plan& plan, const sim::MemoryEstimate& est, Screened* s) const;
  void PrewalkBounds(const std::vector<model::Plan>& plans);
  void EvaluateInOrder(const std::vector<model::Plan>& plans,
                       const std::function<void(int64_t, int64_t)>& progress);
  void SimulateSome(const std::vector<model::Plan>& plans,
                    std::set<std::pair<double, size_t>>* pending, double up_to);
  void BookVerdicts(const std::vector<model::Plan>& plans);
  void WalkBoundOnlyVerdicts(const std::vector<model::Plan>& plans);
  void BuildTop();
  Bytes ModelStateLowerBound(const model::Plan& plan, Worker& w) const;
  Bytes ForwardEndLowerBound(const model::Plan& plan, Worker& w, bool* backward) const;
  void Admit(size_t index, const model::Plan& p, const sim::SimReport& r);
  bool Prunable(double time_lb_s, const model::Plan& p) const;
  double TopThreshold() const;
  bool ConfirmForTop(Candidate* c);
  void Reject(const std::string& reason, const std::string& example, Bytes required);
  // Verdicts are kept per parallel layout: (cp, ep), the degrees a plan's sequence and experts
  // are split over (LayoutOf).
  using Layout = std::pair<int, int>;
  static Layout LayoutOf(const model::Plan& p) { return {p.cp, p.ep}; }
  CpVerdict& VerdictOf(Layout layout);
  void NoteMemory(Layout layout, const std::string& key, const Screened& s);
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
  // The top list (BuildTop, before the verdicts are booked) and the objective of its last entry
  // when it is full (infinity otherwise): a plan whose compute bound exceeds it cannot enter.
  std::vector<Candidate> top_;
  int64_t top_hidden_ = 0;
  double final_threshold_ = 0;
  // Confirmed (replayed) candidates that may still define the top-k bound: (objective, index).
  std::vector<std::pair<double, size_t>> confirmed_;
  std::map<std::string, Rejection> rejections_;
  std::map<Layout, CpVerdict> verdicts_;        // by (cp, ep)
  std::map<Layout, size_t> verdict_best_index_;  // plan index of each layout's fastest plan
  std::map<Layout, size_t> verdict_bound_index_;  // plan index of each layout's least memory bound
  // Layouts whose every plan a bound ruled out (one walked to explain).
  std::set<Layout> bound_only_layouts_;
  SearchResult result_;
};

// Why `c` ranks below `best`, in one sentence with the figures that differ.
std::string WhyNotBest(const Candidate& c, const Candidate& best);


}  // namespace shardtune::planner
