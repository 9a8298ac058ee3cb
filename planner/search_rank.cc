// Ranker: memory lower bound, memory check, time lower bound, simulation, ranking.
#include "planner/search_rank.h"

#include <algorithm>
#include <cstdio>

#include "model/module_tree.h"
#include "model/trainable.h"
#include "planner/text.h"

namespace shardtune::plan {
namespace {


std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

// The phase kind of a peak op name ("step 1 · micro-batch 1/4 · backward · block 3" -> backward).
std::string PhaseKind(const std::string& phase) {
  for (const char* k : {"optimizer step", "LM head and loss", "backward", "forward", "all-gather",
                        "reduce-scatter", "start-up"}) {
    if (phase.find(k) != std::string::npos) return k;
  }
  return "step";
}

const char* StrategyFamily(const model::Plan& p) {
  switch (p.strategy) {
    case model::ShardingStrategy::kNoShard: return "no_shard";
    case model::ShardingStrategy::kShardGradOp: case model::ShardingStrategy::kHybridShardZero2: return "zero2-like";
    default: return "full-shard-like";
  }
}

// ", cp 2" for plans with Ulysses cp, so grouped reasons say which cp they are about.
std::string CpSuffix(const model::Plan& p) {
  return p.cp > 1 ? ", cp " + std::to_string(p.cp) : "";
}

}  // namespace

Ranker::Ranker(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req)
    : spec_(spec), cluster_(cluster), req_(req), ctx_(cluster), opt_(req.options) {
  opt_.with_timeline = false;
  outside_floor_ = opt_.memory.constants.cuda_context;
  replay_top_ = opt_.memory.allocator_replay && !req.replay_every_plan;
  if (replay_top_) opt_.memory.allocator_replay = false;
}

// The caching-allocator replay of a plan the screening (fragmentation allowance) let through:
// false when the replay runs out of memory; `c.required` becomes the replay's figure.
bool Ranker::ReplayFits(Candidate* c) {
  sim::MemoryOptions mo = opt_.memory;
  mo.allocator_replay = true;
  sim::MemoryReport m =
      sim::EstimateMemoryWithProgram(spec_, cluster_, c->plan, mo, false, &sim::CacheOf(ctx_)).report;
  c->required = m.required;
  if (m.fits) return true;
  Reject("OOM in the caching allocator replay: split cached blocks leave no segment for a request",
         c->key + " needs " + GiBText(m.required) + " of " + GiBText(m.capacity), m.required);
  return false;
}

// Persistent model states the plan keeps on the GPU at the optimizer step (params, grads and
// optimizer state, sharded and padded) plus the CUDA context: no plan of this kind can need
// less, since the step's peak includes them (simulator/step_walk_backward.cc OptimizerStep).
Bytes Ranker::ModelStateLowerBound(const model::Plan& p) {
  int n = p.Sharded() ? p.ResolvedShardGroup(cluster_.world_size(), cluster_.gpus_per_node) : 1;
  int64_t per_elem = 0;
  switch (p.offload) {
    case model::Offload::kNone: per_elem = 16; break;
    case model::Offload::kOptimizer: per_elem = model::BytesPerElement(p.param_dtype); break;
    case model::Offload::kAll: per_elem = 0; break;
  }
  if (model::ChangesTrainability(p)) {
    // Frozen parameters (all of them for an inference role) keep only their shard: the frozen
    // dtype's bytes (param dtype under optimizer offload, none under full offload); LoRA adapters
    // their lora.dtype shard plus, when they train, gradient and moments (at least as above).
    int64_t bytes = 0;
    int64_t frozen_elem =
        p.offload == model::Offload::kNone ? model::BytesPerElement(p.FrozenDtype()) : per_elem;
    for (const auto& u : sim::CacheOf(ctx_).UnitsFor(spec_, p)) {
      for (const auto& prm : u.params) {
        int64_t ps = prm.PaddedShardNumel(n);
        bool trains = prm.requires_grad && p.Trains();
        int64_t e = trains ? per_elem : frozen_elem;
        if (prm.lora_adapter) e = std::min(e, model::BytesPerElement(p.lora.dtype));
        bytes += ps * e;
      }
    }
    return Bytes::Of(bytes) + outside_floor_;
  }
  std::string key = model::WrapSpecToString(p.wrap) + "/" + std::to_string(p.wrap.expert_units) +
                    "/" + std::to_string(n);
  auto it = shard_numel_.find(key);
  if (it == shard_numel_.end()) {
    int64_t t = 0;
    for (const auto& u : sim::CacheOf(ctx_).Units(spec_, p.wrap)) t += u.PaddedShardNumel(n);
    it = shard_numel_.emplace(key, t).first;
  }
  return Bytes::Of(it->second * per_elem) + outside_floor_;
}

void Ranker::Reject(const std::string& reason, const std::string& example, Bytes required) {
  Rejection& r = rejections_[reason];
  if (r.count == 0 || (required.count() > 0 && required < r.smallest_required)) {
    r.example = example;
    if (required.count() > 0) r.smallest_required = required;
  }
  r.reason = reason;
  ++r.count;
}

double Ranker::Objective(const Candidate& c) const {
  if (req_.objective == Objective::kMemory) return static_cast<double>(c.required.count());
  return c.step_time_s;  // a fixed global batch: least step time = most tokens/s = least cost
}

bool Ranker::CanEnterTop(double lower_bound) const {
  if (!req_.prune || static_cast<int>(top_objectives_.size()) < req_.top_k) return true;
  return lower_bound < top_objectives_.top();
}

void Ranker::Admit(Candidate c) {
  c.objective = Objective(c);
  top_objectives_.push(c.objective);
  if (static_cast<int>(top_objectives_.size()) > req_.top_k) top_objectives_.pop();
  candidates_.push_back(std::move(c));
}

void Ranker::Consider(const model::Plan& p) {
  std::string key = PlanKey(p);
  ++VerdictOf(p.cp).plans;
  Bytes capacity = cluster_.gpu.usable_memory;
  Bytes lb = ModelStateLowerBound(p);
  if (req_.prune && lb > capacity) {
    ++result_.pruned_by_memory_bound;
    Reject(std::string("OOM: model states alone exceed the GPU (") + StrategyFamily(p) +
               ", offload " + model::ToString(p.offload) + CpSuffix(p) + ")",
           key + " needs at least " + GiBText(lb), lb);
    return;
  }
  ++result_.memory_checked;
  sim::MemoryEstimate est = sim::EstimateMemoryWithProgram(spec_, cluster_, p, opt_.memory, false,
                                                           &sim::CacheOf(ctx_));
  const sim::MemoryReport& m = est.report;
  if (result_.smallest_required.count() == 0 || m.required < result_.smallest_required) {
    result_.smallest_required = m.required;
  }
  NoteMemory(p, key, m);
  if (!m.fits) {
    Reject("OOM during " + PhaseKind(m.peak_phase) + " (" + StrategyFamily(p) + ", offload " +
               model::ToString(p.offload) + CpSuffix(p) + ")",
           key + " needs " + GiBText(m.required) + " of " + GiBText(capacity), m.required);
    return;
  }
  ++VerdictOf(p.cp).fitting;
  double time_lb = sim::ComputeLowerBoundS(est.program, cluster_, p, opt_.costs);
  double tokens = static_cast<double>(req_.global_batch) * static_cast<double>(req_.seq_len);
  if (req_.objective == Objective::kMemory) {
    if (req_.prune && tokens / time_lb < req_.min_tokens_per_s) {
      ++result_.pruned_by_time_bound;
      Reject("below the throughput floor (compute alone is too slow)", key, Bytes());
      return;
    }
  } else if (!CanEnterTop(time_lb)) {
    ++result_.pruned_by_time_bound;
    Reject("slower than the top plans: its compute alone takes longer than their whole step", key + ": compute " + Secs(time_lb), Bytes());
    return;
  }
  ++result_.simulated;
  sim::SimReport r = sim::SimulateProgram(std::move(est), spec_, cluster_, p, opt_, &ctx_);
  if (req_.objective == Objective::kMemory && r.tokens_per_s < req_.min_tokens_per_s) {
    Reject("below the throughput floor", key, Bytes());
    return;
  }
  CpVerdict& v = VerdictOf(p.cp);
  if (v.best_step_time_s == 0 || r.step_time_s < v.best_step_time_s) {
    v.best_step_time_s = r.step_time_s;
    v.best_key = key;
    v.best_required = r.memory.required;
  }
  Candidate c;
  c.plan = p;
  c.key = key;
  c.step_time_s = r.step_time_s;
  c.tokens_per_s = r.tokens_per_s;
  c.mfu = r.mfu;
  c.exposed_comm_s = r.exposed_comm_s;
  c.compute_s = r.compute_s;
  c.required = r.memory.required;
  c.capacity = r.memory.capacity;
  c.peak_phase = r.memory.peak_phase;
  c.dollars_per_million_tokens = req_.price_per_gpu_hour > 0
      ? req_.price_per_gpu_hour * cluster_.world_size() / 3600.0 / r.tokens_per_s * 1e6 : 0;
  Admit(std::move(c));
}

SearchResult Ranker::Finish() {
  SearchResult out = result_;
  std::vector<Candidate> all = candidates_;
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.objective < b.objective;  // ties keep search order (deterministic)
  });
  // Plans that differ only in knobs with no effect here (same time and memory) are listed once:
  // the first in search order, which favours the defaults.
  for (size_t i = 0; i < all.size() && static_cast<int>(out.top.size()) < req_.top_k; ++i) {
    if (replay_top_ && !ReplayFits(&all[i])) continue;
    if (!out.top.empty() && all[i].step_time_s == out.top.back().step_time_s &&
        all[i].required == out.top.back().required) {
      ++out.equivalent_hidden;
      continue;
    }
    out.top.push_back(all[i]);
  }
  for (size_t i = 1; i < out.top.size(); ++i) out.top[i].why_not_best = WhyNotBest(out.top[i], out.top[0]);
  // Pareto front over everything simulated: less memory or more throughput than every other.
  std::vector<Candidate> by_mem = candidates_;
  std::sort(by_mem.begin(), by_mem.end(), [](const Candidate& a, const Candidate& b) {
    return a.required != b.required ? a.required < b.required
                                    : (a.tokens_per_s != b.tokens_per_s ? a.tokens_per_s > b.tokens_per_s : a.key < b.key);
  });
  double best_tps = -1;
  for (const auto& c : by_mem) {
    if (c.tokens_per_s > best_tps) {
      out.pareto.push_back(c);
      best_tps = c.tokens_per_s;
    }
  }
  for (auto& [k, v] : rejections_) out.rejected.push_back(v);
  FinishVerdicts(&out);
  std::stable_sort(out.rejected.begin(), out.rejected.end(),
                   [](const Rejection& a, const Rejection& b) { return a.count > b.count; });
  if (out.top.empty()) {
    out.advice_if_none = "No plan fits: the smallest per-GPU need found is " + GiBText(out.smallest_required) +
        " against " + GiBText(cluster_.gpu.usable_memory) + " usable. Model states shrink with the shard "
        "group (16 bytes per parameter over N GPUs): more GPUs, a GPU with more memory, or offload "
        "all with full checkpointing (which moves the states to host RAM) would make it fit.";
  }
  return out;
}

CpVerdict& Ranker::VerdictOf(int cp) {
  CpVerdict& v = verdicts_[cp];
  v.cp = cp;
  return v;
}

void Ranker::NoteMemory(const model::Plan& p, const std::string& key, const sim::MemoryReport& m) {
  CpVerdict& v = VerdictOf(p.cp);
  if (v.smallest_required.count() > 0 && !(m.required < v.smallest_required)) return;
  v.smallest_required = m.required;
  v.smallest_key = key;
  v.smallest_peak_phase = m.peak_phase;
  v.smallest_peak_top.assign(
      m.peak_breakdown.begin(),
      m.peak_breakdown.begin() + std::min<size_t>(2, m.peak_breakdown.size()));
}

// One sentence per cp: why it fits (its fastest plan) or why not (its least need, what dominates).
void Ranker::FinishVerdicts(SearchResult* out) const {
  double best = 0;
  int best_cp = 0;
  for (const auto& [cp, v] : verdicts_) {
    if (v.best_step_time_s > 0 && (best == 0 || v.best_step_time_s < best)) {
      best = v.best_step_time_s;
      best_cp = cp;
    }
  }
  const Bytes capacity = cluster_.gpu.usable_memory;
  for (const auto& [cp, verdict] : verdicts_) {
    CpVerdict v = verdict;
    std::string w = "cp=" + std::to_string(cp) + ": ";
    char buf[160];
    if (v.fitting == 0 && v.smallest_required.count() == 0) {
      w += "does not fit: model states alone exceed " + GiBText(capacity) + " in all " +
           std::to_string(v.plans) + " plans";
    } else if (v.fitting == 0) {
      w += "does not fit: the least any of its " + std::to_string(v.plans) + " plans needs is " +
           GiBText(v.smallest_required) + " > " + GiBText(capacity) + " usable (" + v.smallest_key +
           "); at its peak (" + v.smallest_peak_phase + ")";
      for (size_t i = 0; i < v.smallest_peak_top.size(); ++i) {
        w += (i ? " and " : " the largest parts are ") + v.smallest_peak_top[i].first + " " +
             GiBText(v.smallest_peak_top[i].second);
      }
    } else if (v.best_step_time_s == 0) {
      w += "fits (" + std::to_string(v.fitting) + " of " + std::to_string(v.plans) +
           " plans, least need " + GiBText(v.smallest_required) +
           ") but its compute alone is slower than the top plans' whole step";
    } else {
      std::snprintf(buf, sizeof buf, "fastest simulated step %.3f s", v.best_step_time_s);
      w += "fits (" + std::to_string(v.fitting) + " of " + std::to_string(v.plans) +
           " plans, least need " + GiBText(v.smallest_required) + " of " + GiBText(capacity) +
           "); " + buf + ", needing " + GiBText(v.best_required) + " (" + v.best_key + ")";
      if (cp != best_cp) {
        std::snprintf(buf, sizeof buf, ", %+.1f%% vs cp=%d",
                      100.0 * (v.best_step_time_s / best - 1.0), best_cp);
        w += buf;
      } else {
        w += ", the fastest cp";
      }
    }
    v.why = w;
    out->cp_verdicts.push_back(v);
  }
}

std::string WhyNotBest(const Candidate& c, const Candidate& best) {
  double slower = 100.0 * (c.step_time_s / best.step_time_s - 1.0);
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %.3f s vs %.3f s (%+.1f%%): compute %+.3f s, exposed communication %+.3f s",
                c.step_time_s, best.step_time_s, slower, c.compute_s - best.compute_s,
                c.exposed_comm_s - best.exposed_comm_s);
  std::string s = buf;
  if (c.plan.checkpointing != best.plan.checkpointing && c.compute_s > best.compute_s) {
    s += std::string("; checkpointing ") + model::ToString(c.plan.checkpointing) + " recomputes the forward";
  }
  if (c.plan.offload != best.plan.offload && c.plan.offload != model::Offload::kNone) {
    s += std::string("; offload ") + model::ToString(c.plan.offload) + " copies over PCIe and steps on the host";
  }
  if (c.required < best.required) s += "; needs " + GiBText(best.required - c.required) + " less memory";
  return s;
}

}  // namespace shardtune::plan
