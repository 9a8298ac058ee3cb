// Ranker, second half: admitting simulated plans, the allocator replay of the plans about to
// enter the list, the top list, the Pareto front, grouped rejections and the per-cp verdicts.
#include <algorithm>
#include <cstdio>
#include <limits>

#include "planner/search_rank.h"
#include "model/text.h"

namespace shardtune::planner {

void Ranker::Reject(const std::string& reason, const std::string& example, Bytes required) {
  Rejection& r = rejections_[reason];
  if (r.count == 0 || (required.count() > 0 && required < r.smallest_required)) {
    r.example = example;
    if (required.count() > 0) r.smallest_required = required;
  }
  r.reason = reason;
  ++r.count;
}

double Ranker::Objective(const Candidate& c) const { return ObjectiveOf(c, req_); }

double ObjectiveOf(const Candidate& c, const SearchRequest& req) {
  if (req.objective == Objective::kMemory) return static_cast<double>(c.required.count());
  return c.step_time_s;  // a fixed global batch: least step time = most tokens/s = least cost
}

Candidate CandidateOf(const model::Plan& p, const sim::SimReport& r, const SearchRequest& req,
                      const profiles::ClusterSpec& cluster) {
  Candidate c;
  c.plan = p;
  c.key = PlanKey(p);
  c.step_time_s = r.step_time.count();
  c.tokens_per_s = r.tokens_per_s;
  c.mfu = r.mfu;
  c.exposed_comm_s = r.exposed_comm.count();
  c.compute_s = r.compute.count();
  c.required = r.memory.required;
  c.capacity = r.memory.capacity;
  c.peak_phase = r.memory.peak_phase;
  c.dollars_per_million_tokens = req.price_per_gpu_hour > 0
      ? req.price_per_gpu_hour * cluster.world_size() / 3600.0 / r.tokens_per_s * 1e6 : 0;
  c.objective = ObjectiveOf(c, req);
  return c;
}

// The caching-allocator replay of candidate `ci` (once): false when it runs out of memory;
// the candidate's `required` becomes the replay's figure.
bool Ranker::ConfirmForTop(Candidate* c) {
  size_t ci = static_cast<size_t>(c - candidates_.data());
  if (replay_state_[ci] != 0) return replay_state_[ci] > 0;
  const Screened& s = screened_[candidate_index_[ci]];
  bool fits = true;
  if (s.replayed) {  // replayed while screening (exhaustive search, replay_every_plan)
    fits = s.replay_fits;
    c->required = s.replay_required;
  } else if (replay_top_) {
    sim::MemoryOptions mo = opt_.memory;
    mo.allocator_replay = true;
    // The short program (EstimateMemoryReport): the replay lays out the micro-batches it left out
    // (allocator_sim.h).
    const sim::MemoryReport m =
        sim::EstimateMemoryReport(spec_, cluster_, c->plan, mo, &sim::CacheOf(workers_[0]->ctx));
    ++result_.replayed;
    fits = m.fits;
    c->required = m.required;
  }
  replay_state_[ci] = fits ? 1 : -1;
  if (!fits) {
    Reject("OOM in the caching allocator replay: split cached blocks leave no segment for a request",
           c->key + " needs " + model::GiBText(c->required) + " of " + model::GiBText(c->capacity), c->required);
  }
  return fits;
}

void Ranker::Admit(size_t index, const model::Plan& p, const sim::SimReport& r) {
  CpVerdict& v = VerdictOf(LayoutOf(p));
  std::string key = PlanKey(p);
  // Each layout's fastest plan; ties go to the plan enumerated first, whatever the order simulated.
  auto best = verdict_best_index_.find(LayoutOf(p));
  const double step_s = r.step_time.count();
  if (v.best_step_time_s == 0 || step_s < v.best_step_time_s ||
      (step_s == v.best_step_time_s && index < best->second)) {
    v.best_step_time_s = step_s;
    v.best_key = key;
    v.best_plan = p;
    v.best_required = r.memory.required;
    verdict_best_index_[LayoutOf(p)] = index;
  }
  if (req_.objective == Objective::kMemory && r.tokens_per_s < req_.min_tokens_per_s) {
    Reject("below the throughput floor", key, Bytes());
    return;
  }
  candidates_.push_back(CandidateOf(p, r, req_, cluster_));
  candidate_index_.push_back(index);
  replay_state_.push_back(0);
  // A plan that may enter the top-k bound is replayed now, so the bound counts only plans the
  // list can show (a plan the replay finds out of memory never tightens it).
  if (exhaustive_ || req_.objective == Objective::kMemory) return;
  size_t ci = candidates_.size() - 1;
  double threshold = TopThreshold();
  if (!(candidates_[ci].objective <= threshold) || !ConfirmForTop(&candidates_[ci])) return;
  std::pair<double, size_t> e{candidates_[ci].objective, ci};
  confirmed_.insert(std::upper_bound(confirmed_.begin(), confirmed_.end(), e,
                                     [&](const auto& a, const auto& b) {
                                       if (a.first != b.first) return a.first < b.first;
                                       return candidate_index_[a.second] < candidate_index_[b.second];
                                     }),
                    e);
  double t = TopThreshold();
  while (!confirmed_.empty() && confirmed_.back().first > t) confirmed_.pop_back();
}

SearchResult Ranker::Finish() {
  SearchResult out = result_;
  out.top = top_;
  out.equivalent_hidden = top_hidden_;
  std::vector<size_t> order(candidates_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (req_.objective != Objective::kMemory) OrderNearTiesBySafety(&out.top);
  for (size_t i = 1; i < out.top.size(); ++i) out.top[i].why_not_best = WhyNotBest(out.top[i], out.top[0]);
  // Pareto front over the simulated plans: less memory or more throughput than every other.
  // Its needs are the allocator replay's, as the top list's (the simulation judged memory with
  // the fragmentation allowance): members are replayed, one the replay finds out of memory
  // leaves, and the front is drawn again until every member is a replayed figure. After
  // kParetoReplays replays the front is drawn over the replayed plans alone (each replay of a
  // large model costs as much as hundreds of memory walks), so a need shown is never the
  // screening figure.
  constexpr int kParetoReplays = 16;
  int pareto_replays = 0;
  for (;;) {
    bool replayed_only = pareto_replays >= kParetoReplays;
    std::vector<size_t> by_mem;
    for (size_t i : order) {
      if (replay_state_[i] > 0 || (replay_state_[i] == 0 && !replayed_only)) by_mem.push_back(i);
    }
    std::sort(by_mem.begin(), by_mem.end(), [&](size_t ia, size_t ib) {
      const Candidate& a = candidates_[ia];
      const Candidate& b = candidates_[ib];
      return a.required != b.required ? a.required < b.required
                                      : (a.tokens_per_s != b.tokens_per_s ? a.tokens_per_s > b.tokens_per_s : a.key < b.key);
    });
    std::vector<size_t> front;
    double best_tps = -1;
    for (size_t i : by_mem) {
      if (candidates_[i].tokens_per_s > best_tps) {
        front.push_back(i);
        best_tps = candidates_[i].tokens_per_s;
      }
    }
    bool replayed_any = false;
    for (size_t i : front) {
      if (replay_state_[i] != 0 || pareto_replays >= kParetoReplays) continue;
      ConfirmForTop(&candidates_[i]);
      ++pareto_replays;
      replayed_any = true;
    }
    if (!replayed_any && pareto_replays >= kParetoReplays && !replayed_only) continue;
    if (replayed_any) continue;
    for (size_t i : front) out.pareto.push_back(candidates_[i]);
    break;
  }
  // Each cp's fastest simulated plan is replayed too (once; the exhaustive search replayed it
  // already), so its verdict says whether the allocator replay, which judges the listed plans,
  // agrees that it fits: the same answer from the fast and the exhaustive search.
  for (auto& [layout, v] : verdicts_) {
    auto best = verdict_best_index_.find(layout);
    if (v.best_step_time_s == 0 || best == verdict_best_index_.end()) continue;
    auto it = std::find(candidate_index_.begin(), candidate_index_.end(), best->second);
    if (it == candidate_index_.end()) continue;
    Candidate& c = candidates_[static_cast<size_t>(it - candidate_index_.begin())];
    const bool fits = ConfirmForTop(&c);
    // One figure per plan (issue #49 item 5): the verdict quotes what the top list prints for the
    // same plan, the allocator replay's, not the screening walk's.
    v.best_required = c.required;
    if (!fits) {
      v.best_replay_out_of_memory = true;
      v.best_replay_required = c.required;
    }
  }
  out.replayed = result_.replayed;
  for (auto& [k, v] : rejections_) out.rejected.push_back(v);
  FinishVerdicts(&out);
  std::stable_sort(out.rejected.begin(), out.rejected.end(),
                   [](const Rejection& a, const Rejection& b) { return a.count > b.count; });
  if (out.top.empty()) {
    Bytes least = out.smallest_required;
    std::string found = "the smallest per-GPU need found is ";
    if (least.count() == 0) {  // every plan ruled out by a lower bound
      for (const auto& [layout, v] : verdicts_) {
        if (least.count() == 0 || v.smallest_bound < least) least = v.smallest_bound;
      }
      found = "every plan needs at least ";
    }
    const Bytes usable = cluster_.gpu.usable_memory;
    // The binding constraint comes first (issue #49 item 4): when plans fit in memory, what
    // ruled them out is the largest group of rejections that is not an OOM.
    const Rejection* other = nullptr;
    for (const Rejection& r : out.rejected) {
      if (r.reason.rfind("OOM", 0) != 0) {
        other = &r;
        break;
      }
    }
    if (other != nullptr && least.count() > 0 && least <= usable) {
      out.no_plan_reason = "constraint";
      out.advice_if_none = "No plan meets the constraints: plans fit in memory (the least needs " +
                           model::GiBText(least) + " of " + model::GiBText(usable) + " usable), but " +
                           std::to_string(other->count) + " are ruled out as " + other->reason +
                           " (e.g. " + other->example + "). Relax that constraint" +
                           (other->reason.find("throughput floor") != std::string::npos
                                ? " (--min-tokens-per-s)."
                                : ".");
    } else {
      out.no_plan_reason = "memory";
      // Only advice the search checked: offload all with full checkpointing is named as a way
      // out when it was not searched, else its own least need is quoted.
      Bytes offload_all;
      for (const Rejection& r : out.rejected) {
        if (r.reason.find("offload all") == std::string::npos || r.smallest_required.count() == 0) continue;
        if (offload_all.count() == 0 || r.smallest_required < offload_all) offload_all = r.smallest_required;
      }
      out.advice_if_none =
          "No plan fits in memory: " + found + model::GiBText(least) + " against " + model::GiBText(usable) +
          " usable. Model states shrink with the shard group (16 bytes per parameter over N GPUs): "
          "more GPUs, or GPUs with more than " + model::GiBText(least) + " usable" +
          (offload_all.count() > 0
               ? "; offloading all states to host RAM was searched and still needs at least " +
                     model::GiBText(offload_all) + " per GPU."
               : "; offloading all states to host RAM (--offload all) was not searched.");
    }
  }
  return out;
}

CpVerdict& Ranker::VerdictOf(Layout layout) {
  CpVerdict& v = verdicts_[layout];
  v.cp = layout.first;
  v.ep = layout.second;
  return v;
}

void Ranker::NoteMemory(Layout layout, const std::string& key, const Screened& s) {
  CpVerdict& v = VerdictOf(layout);
  if (v.smallest_required.count() > 0 && !(s.required < v.smallest_required)) return;
  v.smallest_required = s.required;
  v.smallest_key = key;
  v.smallest_peak_phase = s.peak_phase;
  v.smallest_peak_top = s.peak_top;
}

// One sentence per layout (cp, ep): why it fits (its fastest plan) or why not (its least need,
// what dominates). A layout is named by the degrees the search varied: "cp=2", "ep=4" or
// "cp=2 ep=4" (cp alone when neither was searched above 1).
void Ranker::FinishVerdicts(SearchResult* out) const {
  double best = 0;
  Layout best_layout{0, 0};
  bool any_ep = false, any_cp = false;
  for (const auto& [layout, v] : verdicts_) {
    any_cp |= layout.first > 1;
    any_ep |= layout.second > 1;
    if (v.best_step_time_s > 0 && (best == 0 || v.best_step_time_s < best)) {
      best = v.best_step_time_s;
      best_layout = layout;
    }
  }
  auto name = [&](Layout l) {
    std::string n;
    if (any_cp || !any_ep) n = "cp=" + std::to_string(l.first);
    if (any_ep) n += (n.empty() ? "" : " ") + std::string("ep=") + std::to_string(l.second);
    return n;
  };
  const char* what = any_ep && any_cp ? "layout" : any_ep ? "ep" : "cp";
  const Bytes capacity = cluster_.gpu.usable_memory;
  for (const auto& [layout, verdict] : verdicts_) {
    CpVerdict v = verdict;
    std::string w = name(layout) + ": ";
    char buf[160];
    if (v.fitting == 0 && (v.smallest_required.count() == 0 || bound_only_layouts_.count(layout) > 0)) {
      w += "does not fit: a lower bound exceeds " + model::GiBText(capacity) + " in all " +
           std::to_string(v.plans) + " plans; the least is " + model::GiBText(v.smallest_bound) + " of " +
           v.smallest_bound_what + " (" + v.smallest_bound_key + ")";
      if (v.smallest_required.count() > 0) {
        w += ", which needs " + model::GiBText(v.smallest_required) + " at its peak (" +
             v.smallest_peak_phase + ")";
        for (size_t i = 0; i < v.smallest_peak_top.size(); ++i) {
          w += (i ? " and " : ": the largest parts are ") + v.smallest_peak_top[i].first + " " +
               model::GiBText(v.smallest_peak_top[i].second);
        }
      }
    } else if (v.fitting == 0) {
      w += "does not fit: the least any of its " + std::to_string(v.plans) + " plans needs is " +
           model::GiBText(v.smallest_required) + " > " + model::GiBText(capacity) + " usable (" + v.smallest_key +
           "); at its peak (" + v.smallest_peak_phase + ")";
      for (size_t i = 0; i < v.smallest_peak_top.size(); ++i) {
        w += (i ? " and " : " the largest parts are ") + v.smallest_peak_top[i].first + " " +
             model::GiBText(v.smallest_peak_top[i].second);
      }
    } else if (v.best_step_time_s == 0) {
      w += "fits (" + std::to_string(v.fitting) + " of " + std::to_string(v.plans) +
           " plans, least need " + model::GiBText(v.smallest_required) +
           ") but its busiest resource alone (compute, host or a link) is busy longer than the top plans' whole step";
    } else {
      std::snprintf(buf, sizeof buf, "fastest simulated step %.3f s", v.best_step_time_s);
      w += "fits (" + std::to_string(v.fitting) + " of " + std::to_string(v.plans) + " plans";
      if (v.slower_by_compute > 0) {
        w += "; " + std::to_string(v.slower_by_compute) +
             " others were ruled out by a time bound before their memory was judged";
      }
      w += "; least need " + model::GiBText(v.smallest_required) + " of " + model::GiBText(capacity) + "); " + buf;
      if (v.best_replay_out_of_memory) {
        w += ", but the caching-allocator replay runs it out of memory (it needs " +
             model::GiBText(v.best_replay_required) + " with the allocator's cached blocks; " + v.best_key + ")";
      } else {
        w += ", needing " + model::GiBText(v.best_required) + " (" + v.best_key + ")";
      }
      if (layout != best_layout) {
        std::snprintf(buf, sizeof buf, ", %+.1f%% vs ", 100.0 * (v.best_step_time_s / best - 1.0));
        w += buf + name(best_layout);
      } else {
        w += std::string(", the fastest ") + what;
      }
    }
    v.why = w;
    out->cp_verdicts.push_back(v);
  }
}

namespace {

int OffloadRank(model::Offload o) {
  switch (o) {
    case model::Offload::kNone: return 0;
    case model::Offload::kOptimizer: return 1;
    case model::Offload::kAll: return 2;
  }
  return 2;
}

int NonDefaultKnobs(const model::Plan& p) {
  return (p.forward_prefetch ? 1 : 0) + (p.backward_prefetch != model::BackwardPrefetch::kPre ? 1 : 0);
}

// Why `best` ranks above the faster `c`: the first rule of SaferThan that decides.
std::string SaferBecause(const Candidate& best, const Candidate& c) {
  if (OffloadRank(best.plan.offload) != OffloadRank(c.plan.offload)) {
    return best.plan.offload == model::Offload::kNone
               ? std::string("#1 does not offload")
               : std::string("#1 offloads less (") + model::ToString(best.plan.offload) + ")";
  }
  if (best.required != c.required) return "#1 needs " + model::GiBText(c.required - best.required) + " less memory";
  return "#1 sets fewer knobs away from FSDP2's defaults";
}

}  // namespace

bool SaferThan(const Candidate& a, const Candidate& b) {
  const int oa = OffloadRank(a.plan.offload), ob = OffloadRank(b.plan.offload);
  if (oa != ob) return oa < ob;
  if (a.required != b.required) return a.required < b.required;
  return NonDefaultKnobs(a.plan) < NonDefaultKnobs(b.plan);
}

void OrderNearTiesBySafety(std::vector<Candidate>* top) {
  if (top->size() < 2) return;
  const double limit = (*top)[0].objective * (1.0 + kRankTolerance);
  auto end = top->begin();
  while (end != top->end() && end->objective <= limit) ++end;
  std::stable_sort(top->begin(), end, SaferThan);
}

std::string WhyNotBest(const Candidate& c, const Candidate& best) {
  double slower = 100.0 * (c.step_time_s / best.step_time_s - 1.0);
  if (c.step_time_s < best.step_time_s) {
    char tie[256];
    std::snprintf(tie, sizeof tie,
                  "step %.3f s vs %.3f s (%+.1f%%), within the %.0f%% the time model cannot tell apart: ",
                  c.step_time_s, best.step_time_s, slower, 100 * kRankTolerance);
    return tie + SaferBecause(best, c);
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %.3f s vs %.3f s (%+.1f%%): compute %+.3f s, exposed communication %+.3f s",
                c.step_time_s, best.step_time_s, slower, c.compute_s - best.compute_s,
                c.exposed_comm_s - best.exposed_comm_s);
  std::string s = buf;
  if (model::CheckpointingSpecToString(c.plan) != model::CheckpointingSpecToString(best.plan) &&
      c.compute_s > best.compute_s) {
    s += "; checkpointing " + model::CheckpointingSpecToString(c.plan) + " recomputes the forward";
  }
  if (c.plan.offload != best.plan.offload && c.plan.offload != model::Offload::kNone) {
    s += std::string("; offload ") + model::ToString(c.plan.offload) + " copies over PCIe and steps on the host";
  }
  if (c.required < best.required) s += "; needs " + model::GiBText(best.required - c.required) + " less memory";
  return s;
}

}  // namespace shardtune::planner
