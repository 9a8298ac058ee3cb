// RefineBlockCheckpointing (checkpoint_refine.h): first:K for the list's checkpointing plans.
#include "planner/checkpoint_refine.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/plan.h"
#include "planner/block_levels.h"
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

// How much more rerun time (a share of the step) the per-block search accepts for a policy over
// the levels' convex hull (fewer distinct levels) than the exact optimum over all of them: a tenth
// of kRankTolerance, far below the time model's error, so the answer stays one a person can read
// and a framework can express.
constexpr double kSimplerPolicyTolerance = 0.002;

// The per-block policy search applies to a full fine-tune of a text model whose blocks are alike
// (dense, one kind of attention), unsplit by Ulysses: each block then has the same levels.
bool AlikeBlocks(const model::ModelSpec& spec, const model::Plan& p) {
  return spec.VisionBlocks() == 0 && !spec.moe.enabled() && !spec.mla.enabled() && p.cp <= 1 &&
         p.Trains() && !p.lora.enabled() && p.frozen_prefixes.empty() && p.tiled_mlp_shards <= 1 &&
         spec.sliding_window == 0 && spec.num_layers >= 2;
}

// A kBlocks plan of `runs`; one run is written as its uniform policy (none, full, selective,
// sac:OPS).
model::Plan WithRuns(model::Plan p, const std::vector<model::BlockRun>& runs) {
  p.checkpoint_rest_selective = false;
  p.checkpoint_blocks.clear();
  p.sac_save = model::kTorchtitanSacSave;
  if (runs.size() == 1) {
    switch (runs[0].kind) {
      case model::BlockRun::Kind::kKeep: p.checkpointing = model::Checkpointing::kNone; break;
      case model::BlockRun::Kind::kFull: p.checkpointing = model::Checkpointing::kFull; break;
      case model::BlockRun::Kind::kSac:
        p.checkpointing = model::Checkpointing::kSelective;
        p.sac_save = runs[0].save;
        break;
    }
    return p;
  }
  p.checkpointing = model::Checkpointing::kBlocks;
  p.checkpoint_blocks = runs;
  return p;
}

// The per-block policy (block_levels.h) for `c`'s plan: the levels' bytes and rerun times, a
// budget of kept bytes from the replayed need of none and of full (the need grows with the bytes
// every block keeps, all alive when backward starts; the line through the two ends carries the
// allocator's rounding), the exact cheapest mix within it, confirmed on the replay and, when the
// line was optimistic, re-solved with the budget lowered by the overshoot (three tries).
// nullopt when none fits already, full does not, or the mix is one of the uniform policies the
// search has.
std::optional<Candidate> BlockPolicyCandidate(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                              const SearchRequest& req, const Candidate& c, const sim::SimOptions& so,
                                              const Need& none, const Need& full) {
  if (none.fits || !full.fits) return std::nullopt;
  const model::Plan& base = c.plan;
  const PlanBlock pb = PlanBlockOf(spec, cluster, base, req.options.costs);
  const std::vector<BlockLevel> levels = pb.Levels();
  const double tokens = pb.tokens;
  const model::BlockActivations& b = pb.block;
  if (levels.size() < 3) return std::nullopt;  // keep and full only: first:K is that search
  const int n = spec.num_layers;
  const double bytes_keep = n * levels.back().bytes, bytes_full = n * tokens * b.checkpoint_input_per_token;
  const double span = static_cast<double>(none.required.count() - full.required.count());
  if (!(span > 0) || !(bytes_keep > bytes_full)) return std::nullopt;
  const double slope = span / (bytes_keep - bytes_full);  // replayed bytes per kept byte
  double budget = bytes_full + static_cast<double>(c.capacity.count() - full.required.count()) / slope;
  const auto rerun_s = [&levels](const std::vector<int>& counts) {
    double t = 0;
    for (size_t l = 0; l < levels.size(); ++l) t += counts[l] * levels[l].rerun_s;
    return t;
  };
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::optional<std::vector<int>> counts = CheapestMix(levels, n, budget);
    if (!counts) return std::nullopt;
    // The exact answer may mix many save sets for a gain far below the time model's error: the
    // best mix of two levels stands in for it within kSimplerPolicyTolerance of the step.
    model::Plan p = WithRuns(base, RunsOf(levels, *counts));
    if (const std::optional<std::vector<int>> simple = CheapestTwoLevelMix(levels, n, budget);
        simple && rerun_s(*simple) <= rerun_s(*counts) + kSimplerPolicyTolerance * c.step_time_s) {
      p = WithRuns(base, RunsOf(levels, *simple));
    }
    if (p.checkpointing != model::Checkpointing::kBlocks && !model::ExplicitSacSave(p)) {
      return std::nullopt;  // a uniform policy the search ranks itself
    }
    const Need need = Judge(spec, cluster, req, p);
    if (need.fits) {
      Candidate out = CandidateOf(p, sim::SimulateStep(spec, cluster, p, so), req, cluster);
      out.required = need.required;
      return out;
    }
    // Over by the overshoot: lower the budget by it (in kept bytes) and a block's smallest step.
    budget -= static_cast<double>(need.required.count() - c.capacity.count()) / slope + levels[1].bytes - levels[0].bytes;
  }
  return std::nullopt;
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
  const bool block_policies =
      allowed.empty() ||
      std::find(allowed.begin(), allowed.end(), model::Checkpointing::kBlocks) != allowed.end();
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
    if (c.plan.checkpointing == model::Checkpointing::kNone || c.plan.checkpointing == model::Checkpointing::kFirstK ||
        c.plan.checkpointing == model::Checkpointing::kBlocks) {
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
    // Every block its own level (block_levels.h): keep, full, selective, or an op-level SAC save set.
    if (block_policies && AlikeBlocks(spec, c.plan)) {
      if (!full) full = Judge(spec, cluster, req, full_plan);
      const Need none = Judge(spec, cluster, req, WithFirstK(c.plan, 0, false));
      std::optional<Candidate> mixed = BlockPolicyCandidate(spec, cluster, req, c, so, none, *full);
      if (mixed && listed.count(mixed->key) == 0 && mixed->objective < c.objective * (1.0 - kRankTolerance)) {
        listed.insert(mixed->key);
        added.push_back(std::move(*mixed));
        ++result->refined_block_policies;
      }
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
