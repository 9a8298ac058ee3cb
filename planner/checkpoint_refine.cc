// RefineBlockCheckpointing (checkpoint_refine.h): first:K for the list's checkpointing plans.
#include "planner/checkpoint_refine.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/plan.h"
#include "planner/search_rank.h"
#include "simulator/memory_model.h"

namespace shardtune::planner {
namespace {

// The text blocks a first:K plan counts (each stack counts from 0: the text model's are the
// ones whose recompute the step pays; a VL tower's blocks are checkpointed up to K as well).
int TextBlocks(const model::ModelSpec& spec) { return spec.num_layers; }

// The memory verdict the list's plans were confirmed on (Ranker::ConfirmForTop): the caching
// allocator replayed over the short program, or, when the request turned the replay off, the
// walk with the fragmentation allowance.
struct Need {
  bool fits = false;
  Bytes required;
};

Need Judge(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req,
           const model::Plan& p, bool screening = false) {
  sim::MemoryOptions mo = req.options.memory;
  // Screening: the walk with the fragmentation allowance (the search's own screening figure),
  // without the replay, which costs about as much again.
  if (screening) mo.allocator_replay = false;
  mo.skip_repeated_micro_batches = true;
  mo.host_estimate = false;
  sim::MemoryEstimate est = sim::EstimateMemoryWithProgram(spec, cluster, p, mo, false);
  return {est.report.fits, est.report.required};
}

// The real k at which the line through (lo, lo_need) and (hi, hi_need) reaches `capacity` (a
// block moved from kept to rerun frees about the same bytes as the next); lo when the ends do not
// slope down.
double InterpolatedK(int lo, Bytes lo_need, int hi, Bytes hi_need, Bytes capacity) {
  const double span = static_cast<double>(lo_need.count() - hi_need.count());
  if (!(span > 0)) return lo;
  return lo + static_cast<double>(lo_need.count() - capacity.count()) / span * (hi - lo);
}

// first:K with the other blocks keeping everything (rest_selective false) or running selective
// recompute (first:K+selective); k = 0 is none, or selective everywhere.
model::Plan WithFirstK(model::Plan p, int k, bool rest_selective = false) {
  p.checkpoint_rest_selective = false;
  if (k <= 0) {
    p.checkpointing = rest_selective ? model::Checkpointing::kSelective : model::Checkpointing::kNone;
  } else {
    p.checkpointing = model::Checkpointing::kFirstK;
    p.checkpoint_first_k = k;
    p.checkpoint_rest_selective = rest_selective;
  }
  return p;
}

// The least k in (lo, hi] whose plan fits, given that k = lo does not and k = hi does, with its
// need (`*need`, the judgement of k = hi when no probe fits below it): a bracketing search whose
// probe is InterpolatedK rounded up, halved when the interpolation stalls, so it ends in
// O(log(hi - lo)) probes and usually in two or three.
int LeastFittingK(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req,
                  const model::Plan& base, bool rest_selective, int lo, Bytes lo_need, int hi, Bytes hi_need,
                  Bytes capacity, Bytes* need) {
  bool halve = false;
  while (hi - lo > 1) {
    int probe = (lo + hi) / 2;
    if (!halve && lo_need > hi_need) {
      probe = std::clamp(static_cast<int>(std::ceil(InterpolatedK(lo, lo_need, hi, hi_need, capacity))), lo + 1,
                         hi - 1);
    }
    const Need n = Judge(spec, cluster, req, WithFirstK(base, probe, rest_selective));
    const int before = hi - lo;
    if (n.fits) {
      hi = probe;
      hi_need = n.required;
    } else {
      lo = probe;
      lo_need = n.required;
    }
    // An interpolated probe that cut less than half the bracket is followed by a halving one.
    halve = !halve && 2 * (hi - lo) > before;
  }
  *need = hi_need;
  return hi;
}

}  // namespace

void RefineBlockCheckpointing(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                              const SearchRequest& req, SearchResult* result) {
  if (!req.refine_block_checkpointing || req.objective == Objective::kMemory || result->top.empty()) return;
  const auto& allowed = req.space.checkpointing;
  if (!allowed.empty() &&
      std::find(allowed.begin(), allowed.end(), model::Checkpointing::kFirstK) == allowed.end()) {
    return;
  }
  const int blocks = TextBlocks(spec);
  if (blocks < 2) return;
  std::set<std::string> listed;
  for (const Candidate& c : result->top) listed.insert(c.key);
  sim::SimOptions so = req.options;
  so.with_timeline = false;
  so.memory.allocator_replay = false;  // judged above; the simulation times the step
  so.memory.host_estimate = false;
  so.steady_step_only = true;
  so.memory.skip_repeated_micro_batches_in_step0 = true;
  std::vector<Candidate> added;
  int refined = 0;
  for (const Candidate& c : result->top) {
    if (refined >= kRefinedPlans) break;
    // A plan that reruns anything (whole blocks, every k-th, or torchtitan's / the per-piece
    // selective recompute of every block) may fit with whole reruns of its first K blocks only.
    if (c.plan.checkpointing == model::Checkpointing::kNone || c.plan.checkpointing == model::Checkpointing::kFirstK) {
      continue;
    }
    ++refined;
    model::Plan full_plan = c.plan;
    full_plan.checkpointing = model::Checkpointing::kFull;
    full_plan.checkpoint_rest_selective = false;
    std::optional<Need> full;  // judged once, for whichever variant gets that far
    const Need full_w = Judge(spec, cluster, req, full_plan, true);
    // Two per-block mixes: the first K blocks rerun whole and the rest keep everything
    // (first:K), or the rest run selective recompute (first:K+selective), which fits with a
    // smaller K where the model's selective recompute frees much for little time.
    for (bool rest_selective : {false, true}) {
      // A cheap screen first: the walk's figures of the k = 0 end (none, or selective
      // everywhere) and full put K near its interpolation; the plan with a K below that
      // (optimistic) must beat its source by the tolerance, or no replay is spent on it (either
      // mix only slows as K grows).
      const Need low_w = Judge(spec, cluster, req, WithFirstK(c.plan, 0, rest_selective), true);
      if (!low_w.fits && low_w.required > full_w.required) {
        const double k_w = InterpolatedK(0, low_w.required, blocks, full_w.required, c.capacity);
        const int optimistic = std::clamp(static_cast<int>(std::floor(k_w)) - 1, 1, blocks - 1);
        const double best_s =
            sim::SimulateStep(spec, cluster, WithFirstK(full_plan, optimistic, rest_selective), so).step_time.count();
        if (!(best_s < c.step_time_s * (1.0 - kRankTolerance))) continue;
      }
      const Need low = Judge(spec, cluster, req, WithFirstK(c.plan, 0, rest_selective));
      // Without whole-block reruns it fits: the search ranked that plan itself (it is faster).
      if (low.fits) continue;
      // The full plan's need on the same judgement (the list's figure may come from a longer
      // replay in the exhaustive search), so the bracket is the same whichever search listed it.
      if (!full) full = Judge(spec, cluster, req, full_plan);
      if (!full->fits) break;
      Bytes need;
      const int k = LeastFittingK(spec, cluster, req, full_plan, rest_selective, 0, low.required, blocks,
                                  full->required, c.capacity, &need);
      if (k >= blocks) continue;  // every block must rerun: full it is
      const model::Plan p = WithFirstK(full_plan, k, rest_selective);
      if (listed.count(PlanKey(p)) > 0) continue;
      const sim::SimReport r = sim::SimulateStep(spec, cluster, p, so);
      Candidate refined_c = CandidateOf(p, r, req, cluster);
      refined_c.required = need;  // the replayed figure, as the list's
      // Faster by more than the time model can tell apart (kRankTolerance), or the plan it came
      // from, which keeps more headroom, stays the answer: a first:K plan just fits by design.
      if (!(refined_c.objective < c.objective * (1.0 - kRankTolerance))) continue;
      listed.insert(refined_c.key);
      added.push_back(std::move(refined_c));
    }
  }
  if (added.empty()) return;
  result->refined_checkpointing = static_cast<int>(added.size());
  std::vector<Candidate>& top = result->top;
  for (Candidate& a : added) top.push_back(std::move(a));
  std::stable_sort(top.begin(), top.end(),
                   [](const Candidate& a, const Candidate& b) { return a.objective < b.objective; });
  if (top.size() > static_cast<size_t>(std::max(1, req.top_k))) top.resize(static_cast<size_t>(std::max(1, req.top_k)));
  OrderNearTiesBySafety(&top);
  for (Candidate& c : top) c.why_not_best.clear();
  for (size_t i = 1; i < top.size(); ++i) top[i].why_not_best = WhyNotBest(top[i], top[0]);
}

}  // namespace shardtune::planner
