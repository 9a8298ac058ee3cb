// RefineBlockCheckpointing (checkpoint_refine.h): first:K for the list's checkpointing plans.
#include "planner/checkpoint_refine.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/plan.h"
#include "model/plan_json.h"
#include "planner/block_levels.h"
#include "planner/search_rank.h"
#include "profiles/hardware.h"
#include "simulator/cost_model.h"
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
  Bytes pinned;  // pinned host bytes per rank of verl's activation offload (one micro-batch's)
};

// The judgements of one refinement: each plan judged once, however many of the searches below
// (first:K, first:K+selective, the per-block policy, the offloaded blocks) ask for it, since
// they share their ends (none, full) and a replay costs about as much as a walk.
class Judge {
 public:
  Judge(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req)
      : spec_(spec), cluster_(cluster), req_(req) {}

  // Screening: the walk with the fragmentation allowance (the search's own screening figure),
  // without the replay, which costs about as much again.
  Need operator()(const model::Plan& p, bool screening = false) {
    std::string key = model::PlanToJson(p).dump();
    if (screening) key += " screening";
    if (auto it = judged_.find(key); it != judged_.end()) return it->second;
    sim::MemoryOptions mo = req_.options.memory;
    if (screening) mo.allocator_replay = false;
    mo.host_estimate = false;
    const sim::MemoryReport r = sim::EstimateMemoryReport(spec_, cluster_, p, mo, &cache_);
    const Need need{r.fits, r.required, r.activation_offload_pinned};
    judged_.emplace(std::move(key), need);
    return need;
  }

 private:
  const model::ModelSpec& spec_;
  const profiles::ClusterSpec& cluster_;
  const SearchRequest& req_;
  std::map<std::string, Need> judged_;
  sim::ModelCache cache_;  // the judged plans' walks share the model's tables and one program's buffers
};

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
int LeastFittingK(Judge& judge, const std::function<model::Plan(int)>& plan_of, int lo, Bytes lo_need, int hi,
                  Bytes hi_need, Bytes capacity, Bytes* need) {
  bool halve = false;
  while (hi - lo > 1) {
    int probe = (lo + hi) / 2;
    if (!halve && lo_need > hi_need) {
      probe = std::clamp(static_cast<int>(std::ceil(InterpolatedK(lo, lo_need, hi, hi_need, capacity))), lo + 1,
                         hi - 1);
    }
    const Need n = judge(plan_of(probe));
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

// The plan with verl's activation offload over its first k blocks and no checkpointing (k = 0:
// none at all; k = blocks - 1: verl's own, every block but the last).
model::Plan WithOffloadedFirstK(model::Plan p, int k, int blocks) {
  p.checkpointing = model::Checkpointing::kNone;
  p.checkpoint_rest_selective = false;
  p.checkpoint_blocks.clear();
  p.sac_save = model::kTorchtitanSacSave;
  p.activation_offload = k > 0 ? model::ActivationOffload::kVerlAsync : model::ActivationOffload::kNone;
  p.activation_offload_blocks = k > 0 && k < blocks - 1 ? k : 0;
  return p;
}

// What offloading one block's activations costs at the walk's rates, one micro-batch: its saved
// bytes, and the wait its copies cannot hide. An offloaded block's copy out holds the next
// block's forward until it is done (verl's forward commit waits for the d2h stream), its copy back
// its own backward: at least max(0, copy - forward) + max(0, copy - backward) (backward about
// twice the forward's FLOPs), at the GPU's host link (hardware catalog) and its family's
// efficiency.
struct OffloadCost {
  double block_bytes = 0;
  double wait_s = 0;
};
OffloadCost OffloadCostOf(const PlanBlock& pb, const profiles::ClusterSpec& cluster, const SearchRequest& req) {
  OffloadCost out;
  out.block_bytes = pb.tokens * pb.block.full.saved_per_token;
  const profiles::LinkSpec& copy = profiles::FindLink(cluster.gpu.CopyLink(), "gpu " + cluster.gpu.name);
  const double copy_bw = copy.bandwidth_per_direction.count() * sim::FamilyEfficiency(copy.family, req.options.costs);
  const double copy_s = out.block_bytes / copy_bw;
  const double fwd_s = pb.tokens * (pb.matmul_flops_per_token * pb.rates.matmul_s_per_flop +
                                    pb.attention_flops_per_token * pb.rates.attention_s_per_flop);
  out.wait_s = std::max(0.0, copy_s - fwd_s) + std::max(0.0, copy_s - 2 * fwd_s);
  return out;
}

// The pinned host bytes one GPU's share of its host leaves for offloaded activations: the host's
// RAM over its GPUs, less each process's own baseline.
double HostRoomPerGpu(const profiles::ClusterSpec& cluster, const SearchRequest& req) {
  return static_cast<double>(cluster.HostMemoryPerHost().count()) / std::max(1, cluster.GpusPerHost()) -
         static_cast<double>(req.options.memory.constants.host_process_baseline.count());
}

// Whether a plan's pinned host copies per rank (Need::pinned), every rank of a host together,
// beside each process's own baseline, fit the host's RAM (the search judges the GPU only).
bool HostHolds(const profiles::ClusterSpec& cluster, const SearchRequest& req, Bytes pinned) {
  return static_cast<double>(pinned.count()) <= HostRoomPerGpu(cluster, req);
}

// The smallest step in kept bytes between two adjacent levels (ascending in bytes), at most
// `most`: where bracketing a budget of kept bytes can stop.
double SmallestLevelStep(const std::vector<BlockLevel>& levels, double most) {
  for (size_t l = 1; l < levels.size(); ++l) most = std::min(most, levels[l].bytes - levels[l - 1].bytes);
  return most;
}

// Whether offloading leading blocks can beat `c` at all, at the walk's rates and before any walk.
// The offload plan keeps no rerun, so its step is at least c's less c's rerun (each block's, at
// the levels' rates: PlanBlock::Under) plus OffloadCostOf's wait for each offloaded block, and it
// must offload at least the blocks whose activations do not fit where c's plan keeps its own (c's
// kept bytes and headroom, two blocks on the GPU at a time). Returns that least K, or 0 when the
// bound cannot beat c by kRankTolerance or the host cannot hold that many blocks' copies.
int OffloadCanWin(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req,
                  const Candidate& c) {
  const PlanBlock pb = PlanBlockOf(spec, cluster, c.plan, req.options.costs);
  const int n = spec.num_layers;
  const OffloadCost oc = OffloadCostOf(pb, cluster, req);
  if (!(oc.block_bytes > 0)) return 0;
  double kept = 0, rerun_s = 0;  // what c's plan keeps of every block's activations, and reruns
  for (int blk = 0; blk < n; ++blk) {
    const BlockLevel l = pb.Under(c.plan, blk);
    kept += l.bytes;
    rerun_s += l.rerun_s;
  }
  const double room = kept + static_cast<double>(c.capacity.count() - c.required.count());
  const int k_least = std::max(1, n - static_cast<int>(std::floor(room / oc.block_bytes)) - 2);
  const double accum = std::max(1, c.plan.grad_accum);
  const double rerun_most = accum * rerun_s;
  // The host must hold at least those blocks' copies (pinned in power-of-two blocks: no less).
  if (k_least * oc.block_bytes > HostRoomPerGpu(cluster, req)) return 0;
  return accum * k_least * oc.wait_s < rerun_most - kRankTolerance * c.step_time_s ? std::min(k_least, n - 1) : 0;
}

// How much more rerun time (a share of the step) the per-block search accepts for a mix of at most
// two levels (CheapestTwoLevelMix) than for the exact optimum over all of them: a tenth of
// kRankTolerance, far below the time model's error, so the answer stays one a person can read.
constexpr double kSimplerPolicyTolerance = 0.002;

// Replays the per-block search spends bracketing its budget of kept bytes (each a caching-allocator
// replay of the plan, about as costly as the list's own confirmation).
constexpr int kBudgetProbes = 3;

// The per-block policy search applies to a full fine-tune of a text model whose blocks are alike
// (one kind of attention and of MLP), unsplit by Ulysses: each block then has the same levels.
// AlikeBlocks: dense blocks. Without op-level SAC (model::TorchtitanOpSacApplies: AlikeOpSacBlocks)
// the levels are keep, full and selective, whose mixes first:K and first:K+selective search
// already: checked before any replay. The offloaded blocks' mix (OffloadMixCandidate) uses them
// too. AlikeOpSacBlocks: dense blocks, or MoE blocks without a dense prefix, under op-level SAC.
bool AlikeBlocksOfAnyMlp(const model::ModelSpec& spec, const model::Plan& p) {
  return spec.VisionBlocks() == 0 && !spec.Heterogeneous() && !spec.mla.enabled() && p.cp <= 1 &&
         p.Trains() && !p.lora.enabled() && p.frozen_prefixes.empty() && p.tiled_mlp_shards <= 1 &&
         spec.sliding_window == 0 && spec.num_layers >= 2;
}
bool AlikeBlocks(const model::ModelSpec& spec, const model::Plan& p) {
  return AlikeBlocksOfAnyMlp(spec, p) && !spec.moe.enabled();
}
bool AlikeOpSacBlocks(const model::ModelSpec& spec, const model::Plan& p) {
  return AlikeBlocksOfAnyMlp(spec, p) &&
         model::TorchtitanOpSacApplies(spec, model::ActivationOptionsFor(p, p.ResolvedSeqLen(spec.max_seq_len)),
                                       model::Trainability{});
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

// The levels' counts for `blocks` alike blocks within a budget of kept bytes: the exact mix
// (CheapestMix), or the best mix of two levels (CheapestTwoLevelMix) when it reruns at most
// kSimplerPolicyTolerance of the step (`step_s`) more, since the exact one may mix many save sets
// for a gain far below the time model's error. nullopt when nothing fits the budget.
std::optional<std::vector<int>> ReadableMix(const std::vector<BlockLevel>& levels, int blocks, double budget,
                                            double step_s) {
  const auto rerun_s = [&levels](const std::vector<int>& counts) {
    double t = 0;
    for (size_t l = 0; l < levels.size(); ++l) t += counts[l] * levels[l].rerun_s;
    return t;
  };
  std::optional<std::vector<int>> counts = CheapestMix(levels, blocks, budget);
  if (!counts) return std::nullopt;
  if (std::optional<std::vector<int>> simple = CheapestTwoLevelMix(levels, blocks, budget);
      simple && rerun_s(*simple) <= rerun_s(*counts) + kSimplerPolicyTolerance * step_s) {
    return simple;
  }
  return counts;
}

// A plan judged to fit, with its need.
struct Fitting {
  model::Plan plan;
  Bytes need;
};

// The plan of the largest budget of kept bytes in (lo, hi) whose policy (`policy_at`, nullopt
// when none exists) fits on the replay, given that lo's fits with need lo_need and hi's does not
// with need hi_need: each probe interpolated on the two ends' needs (the need grows with the
// kept bytes), halved when the interpolation stalls, at most kBudgetProbes replays, ending when
// the bracket is narrower than `min_step` (the smallest step between two levels). nullopt when no
// probe fits.
std::optional<Fitting> LargestFittingBudget(Judge& judge,
                                            const std::function<std::optional<model::Plan>(double)>& policy_at,
                                            double lo, double lo_need, double hi, double hi_need, Bytes capacity,
                                            double min_step) {
  std::optional<Fitting> best;
  bool halve = false;
  for (int probe = 0; probe < kBudgetProbes && hi - lo > min_step; ++probe) {
    double budget = (lo + hi) / 2;
    if (!halve && hi_need > lo_need) {
      budget = lo + (static_cast<double>(capacity.count()) - lo_need) / (hi_need - lo_need) * (hi - lo);
      budget = std::clamp(budget, lo + min_step / 2, hi - min_step / 2);
    }
    const double before = hi - lo;
    const std::optional<model::Plan> p = policy_at(budget);
    if (!p) break;
    const Need need = judge(*p);
    if (need.fits) {
      lo = budget;
      lo_need = static_cast<double>(need.required.count());
      best = Fitting{*p, need.required};
    } else {
      hi = budget;
      hi_need = static_cast<double>(need.required.count());
    }
    halve = !halve && 2 * (hi - lo) > before;
  }
  return best;
}

// The per-block policy (block_levels.h) for `c`'s plan: the levels' bytes and rerun times, and
// the cheapest mix within the largest budget of kept bytes whose policy fits on the replay,
// bracketed between full and none (the need grows with the bytes every block keeps, all alive
// when backward starts). nullopt when none fits already, full does not, or the answer is one of
// the uniform policies the search has.
std::optional<Candidate> BlockPolicyCandidate(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                              const SearchRequest& req, Judge& judge, const Candidate& c,
                                              const sim::SimOptions& so, const Need& none, const Need& full) {
  if (none.fits || !full.fits) return std::nullopt;
  const model::Plan& base = c.plan;
  const PlanBlock pb = PlanBlockOf(spec, cluster, base, req.options.costs);
  const std::vector<BlockLevel> levels = pb.Levels();
  if (!pb.block.HasOpSac() || levels.size() < 3) return std::nullopt;  // as AlikeBlocks checked
  const int n = spec.num_layers;
  // The levels ascend in bytes from full (the input only) to keep.
  const double bytes_keep = n * levels.back().bytes, bytes_full = n * levels.front().bytes;
  const double span = static_cast<double>(none.required.count() - full.required.count());
  if (!(span > 0) || !(bytes_keep > bytes_full)) return std::nullopt;
  const auto policy_at = [&](double budget) -> std::optional<model::Plan> {
    const std::optional<std::vector<int>> counts = ReadableMix(levels, n, budget, c.step_time_s);
    if (!counts) return std::nullopt;
    return WithRuns(base, RunsOf(levels, *counts));
  };
  // The largest budget whose policy fits on the replay, bracketed between full everywhere (fits)
  // and none (does not).
  const std::optional<Fitting> fit =
      LargestFittingBudget(judge, policy_at, bytes_full, static_cast<double>(full.required.count()), bytes_keep,
                           static_cast<double>(none.required.count()), c.capacity,
                           SmallestLevelStep(levels, bytes_keep));
  if (!fit || (fit->plan.checkpointing != model::Checkpointing::kBlocks && !model::ExplicitSacSave(fit->plan))) {
    return std::nullopt;  // nothing fits between the ends, or a uniform policy the search ranks itself
  }
  Candidate out = CandidateOf(fit->plan, sim::SimulateStep(spec, cluster, fit->plan, so), req, cluster);
  out.required = fit->need;
  return out;
}

// Issue #46's mix of offloaded and recomputed blocks for `c`'s plan: verl's handler over the first
// K blocks, which keep everything (their copies go to pinned host memory, so they keep nothing on
// the GPU once the next block committed), and the per-block policy (block_levels.h: keep, full,
// selective, op-level SAC save sets) over the other n - K, within the budget of kept bytes the
// plan's GPU has. Where the host holds only some blocks' copies, or their copies show in part,
// this beats both offloading alone (which needs every other block kept) and recompute alone.
//  - The budget: the largest kept bytes that fit, interpolated between the no-offload ends' needs
//    (`full`, `none`: the need grows with the kept bytes).
//  - K: the least step at the levels' rates, K x an offloaded block's cost + the exact least rerun
//    of n - K blocks within the budget (LeastRerunByCount, every K from one programme), for K up
//    to what the host's RAM holds (HostRoomPerGpu) and n - 1. Only a K that beats both c's own
//    reruns and the best mix without offload by kRankTolerance goes on. The block's cost is
//    OffloadCostOf's wait (a bound, which screens first), or what two simulations say it adds.
//  - The plan of that K is then judged on the replay, its budget bracketed down when it does not
//    fit (LargestFittingBudget, from the other n - K blocks all rerun whole), simulated, and its
//    pinned host copies checked against the host's RAM.
// nullopt when none fits already, full does not, no K can win, or the other blocks would keep
// everything (offloading alone: the first:K offload search finds its least K).
std::optional<Candidate> OffloadMixCandidate(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                             const SearchRequest& req, Judge& judge, const Candidate& c,
                                             const sim::SimOptions& so, const Need& none, const Need& full) {
  if (none.fits || !full.fits) return std::nullopt;
  const PlanBlock pb = PlanBlockOf(spec, cluster, c.plan, req.options.costs);
  const std::vector<BlockLevel> levels = pb.Levels();
  const int n = spec.num_layers;
  const OffloadCost oc = OffloadCostOf(pb, cluster, req);
  if (levels.size() < 2 || !(oc.block_bytes > 0)) return std::nullopt;
  const double bytes_keep = n * levels.back().bytes, bytes_full = n * levels.front().bytes;
  const double span = static_cast<double>(none.required.count() - full.required.count());
  if (!(span > 0) || !(bytes_keep > bytes_full)) return std::nullopt;
  const double budget =
      bytes_full + static_cast<double>(c.capacity.count() - full.required.count()) / span * (bytes_keep - bytes_full);
  const int k_host = static_cast<int>(std::floor(HostRoomPerGpu(cluster, req) / oc.block_bytes));
  const int k_most = std::min(n - 1, k_host);
  if (k_most < 1) return std::nullopt;
  const std::vector<double> rerun_of = LeastRerunByCount(levels, n, budget);
  double c_rerun_s = 0;
  for (int blk = 0; blk < n; ++blk) c_rerun_s += pb.Under(c.plan, blk).rerun_s;
  const double accum = std::max(1, c.plan.grad_accum);
  const double margin_s = kRankTolerance * c.step_time_s / accum;
  // The K of the least step for an offloaded block's cost `wait_s`, one micro-batch; 0 when no K
  // beats both c's own reruns and the best mix without offload by kRankTolerance.
  const auto best_k = [&](double wait_s) {
    int k_best = 0;
    double best_s = rerun_of[static_cast<size_t>(n)];
    for (int k = 1; k <= k_most; ++k) {
      const double s = k * wait_s + rerun_of[static_cast<size_t>(n - k)];
      if (s < best_s) {
        best_s = s;
        k_best = k;
      }
    }
    return k_best > 0 && best_s < c_rerun_s - margin_s && best_s < rerun_of[static_cast<size_t>(n)] - margin_s ? k_best
                                                                                                             : 0;
  };
  // OffloadCostOf's wait is a bound. The simulation also sees the handler's stream waits hold the
  // collectives queued behind them (exposed communication the copies alone would not show), so,
  // once the bound lets a K win, each offloaded block's cost is read off two simulations: k_most
  // blocks offloaded, every block keeping, against the same plan without offload; the larger of
  // the two figures decides K.
  if (best_k(oc.wait_s) == 0) return std::nullopt;
  const double kept_s = sim::SimulateStep(spec, cluster, WithOffloadedFirstK(c.plan, 0, n), so).step_time.count();
  const double offloaded_s =
      sim::SimulateStep(spec, cluster, WithOffloadedFirstK(c.plan, k_most, n), so).step_time.count();
  const int k = best_k(std::max(oc.wait_s, (offloaded_s - kept_s) / (accum * k_most)));
  if (k == 0) return std::nullopt;
  const int rest = n - k;
  // The plan of K offloaded blocks and the other blocks' policy within `kept` bytes.
  const auto policy_at = [&](double kept) -> std::optional<model::Plan> {
    const std::optional<std::vector<int>> counts = ReadableMix(levels, rest, kept, c.step_time_s);
    if (!counts) return std::nullopt;
    std::vector<model::BlockRun> runs{model::BlockRun{0, k - 1, model::BlockRun::Kind::kKeep}};
    for (model::BlockRun r : RunsOf(levels, *counts)) {
      r.first += k;
      r.last += k;
      if (r.kind == model::BlockRun::Kind::kKeep && runs.back().kind == model::BlockRun::Kind::kKeep) {
        runs.back().last = r.last;
      } else {
        runs.push_back(r);
      }
    }
    return WithRuns(WithOffloadedFirstK(c.plan, k, n), runs);
  };
  std::optional<model::Plan> p = policy_at(budget);
  if (!p || p->checkpointing == model::Checkpointing::kNone) return std::nullopt;  // offloading alone
  Need need = judge(*p);
  if (!need.fits) {
    const std::optional<model::Plan> lo_plan = policy_at(rest * levels.front().bytes);
    if (!lo_plan) return std::nullopt;
    const Need lo = judge(*lo_plan);
    if (!lo.fits) return std::nullopt;
    const std::optional<Fitting> fit =
        LargestFittingBudget(judge, policy_at, rest * levels.front().bytes, static_cast<double>(lo.required.count()),
                             budget, static_cast<double>(need.required.count()), c.capacity,
                             SmallestLevelStep(levels, bytes_keep));
    p = fit ? fit->plan : *lo_plan;
    need = fit ? Need{true, fit->need, {}} : lo;
  }
  if (!HostHolds(cluster, req, judge(*p, true).pinned)) return std::nullopt;
  Candidate out = CandidateOf(*p, sim::SimulateStep(spec, cluster, *p, so), req, cluster);
  out.required = need.required;
  return out;
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
  // Offloading leading blocks trades checkpointing for none: only where the space lets it choose
  // none and activation offload (CPU ranks keep their activations in host memory already).
  const bool block_offload =
      block_policies && !cluster.cpu_only && req.base.activation_offload == model::ActivationOffload::kNone &&
      (allowed.empty() || std::find(allowed.begin(), allowed.end(), model::Checkpointing::kNone) != allowed.end());
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
  Judge judge(spec, cluster, req);
  for (const Candidate& c : result->top) {
    if (refined >= kRefinedPlans) break;
    // A plan that reruns anything (whole blocks, every k-th, or torchtitan's / the per-piece
    // selective recompute of every block) may fit with whole reruns of its first K blocks only.
    if (c.plan.checkpointing == model::Checkpointing::kNone || c.plan.checkpointing == model::Checkpointing::kFirstK ||
        c.plan.checkpointing == model::Checkpointing::kBlocks) {
      continue;
    }
    ++refined;
    // A per-block policy or offload plan joins the list when it is new and faster than its source
    // by more than the time model can tell apart (kRankTolerance).
    const auto add_block_policy = [&](Candidate&& o) {
      if (listed.count(o.key) > 0 || !(o.objective < c.objective * (1.0 - kRankTolerance))) return;
      listed.insert(o.key);
      added.push_back(std::move(o));
      ++result->refined_block_policies;
    };
    model::Plan full_plan = c.plan;
    full_plan.checkpointing = model::Checkpointing::kFull;
    full_plan.checkpoint_rest_selective = false;
    const Need full_w = judge(full_plan, true);
    // Two per-block mixes: the first K blocks rerun whole and the rest keep everything
    // (first:K), or the rest run selective recompute (first:K+selective), which fits with a
    // smaller K where the model's selective recompute frees much for little time.
    for (bool rest_selective : {false, true}) {
      // A cheap screen first: the walk's figures of the k = 0 end (none, or selective
      // everywhere) and full put K near its interpolation; the plan with a K below that
      // (optimistic) must beat its source by the tolerance, or no replay is spent on it (either
      // mix only slows as K grows).
      const Need low_w = judge(WithFirstK(c.plan, 0, rest_selective), true);
      if (!low_w.fits && low_w.required > full_w.required) {
        const double k_w = InterpolatedK(0, low_w.required, blocks, full_w.required, c.capacity);
        const int optimistic = std::clamp(static_cast<int>(std::floor(k_w)) - 1, 1, blocks - 1);
        const double best_s =
            sim::SimulateStep(spec, cluster, WithFirstK(full_plan, optimistic, rest_selective), so).step_time.count();
        if (!(best_s < c.step_time_s * (1.0 - kRankTolerance))) continue;
      }
      const Need low = judge(WithFirstK(c.plan, 0, rest_selective));
      // Without whole-block reruns it fits: the search ranked that plan itself (it is faster).
      if (low.fits) continue;
      // The full plan's need on the same judgement (the list's figure may come from a longer
      // replay in the exhaustive search), so the bracket is the same whichever search listed it.
      const Need full = judge(full_plan);
      if (!full.fits) break;
      Bytes need;
      const int k = LeastFittingK(
          judge, [&](int probe) { return WithFirstK(full_plan, probe, rest_selective); }, 0, low.required, blocks,
          full.required, c.capacity, &need);
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
    if (block_policies && AlikeOpSacBlocks(spec, c.plan)) {
      std::optional<Candidate> mixed =
          BlockPolicyCandidate(spec, cluster, req, judge, c, so, judge(WithFirstK(c.plan, 0, false)), judge(full_plan));
      if (mixed) add_block_policy(std::move(*mixed));
    }
    // The first K blocks' activations to pinned host memory instead of any rerun (verl's
    // handler over them; its copies overlap the next block's compute, the simulation says how
    // much shows), for the least K that fits: between none and verl's every block but the last.
    // Only for the fastest checkpointing plan of the list, and where OffloadCanWin's bound allows.
    // Not beside offloaded parameters or optimizer states: their pinned shards already take the
    // host's RAM (and its PCIe link), which HostRoomPerGpu does not count.
    const bool offload_applies = block_offload && refined == 1 &&
                                 c.plan.wrap.kind == model::WrapPolicy::Kind::kBlock &&
                                 c.plan.activation_offload == model::ActivationOffload::kNone && c.plan.Trains() &&
                                 c.plan.offload == model::Offload::kNone && blocks >= 3 && spec.VisionBlocks() == 0;
    const int k_least = offload_applies ? OffloadCanWin(spec, cluster, req, c) : 0;
    if (k_least > 0) {
      // A cheap screen first: the plan with the least K the bound allows (optimistic: more blocks
      // offloaded only add copies) simulated must beat its source by the tolerance, or no replay
      // is spent.
      const double best_s =
          sim::SimulateStep(spec, cluster, WithOffloadedFirstK(c.plan, k_least, blocks), so).step_time.count();
      const bool promising = best_s < c.step_time_s * (1.0 - kRankTolerance);
      const Need none = promising ? judge(WithOffloadedFirstK(c.plan, 0, blocks)) : Need{};
      const Need most = promising ? judge(WithOffloadedFirstK(c.plan, blocks - 1, blocks)) : Need{};
      if (promising && !none.fits && most.fits) {
        Bytes need;
        const int k = LeastFittingK(
            judge, [&](int probe) { return WithOffloadedFirstK(c.plan, probe, blocks); }, 0, none.required,
            blocks - 1, most.required, c.capacity, &need);
        const model::Plan p = WithOffloadedFirstK(c.plan, k, blocks);
        if (listed.count(PlanKey(p)) == 0 && HostHolds(cluster, req, judge(p, true).pinned)) {
          Candidate o = CandidateOf(p, sim::SimulateStep(spec, cluster, p, so), req, cluster);
          o.required = need;
          add_block_policy(std::move(o));
        }
      }
    }
    // The first K blocks offloaded and the others' per-block policy (OffloadMixCandidate), where
    // the blocks are alike. Its budget starts from the screening figures of none and full (the
    // walks above), so no replay is spent unless the levels' rates say a K wins.
    if (offload_applies && AlikeBlocks(spec, c.plan)) {
      std::optional<Candidate> mix = OffloadMixCandidate(spec, cluster, req, judge, c, so,
                                                         judge(WithFirstK(c.plan, 0, false), true), full_w);
      if (mix) add_block_policy(std::move(*mix));
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
