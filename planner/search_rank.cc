// Ranker: memory screening (model-state bound, then the memory walk), memory verdicts, time
// lower bounds, simulation in lower-bound order with top-k pruning, and the allocator replay of
// the plans about to enter the list.
#include "planner/search_rank.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>
#include <numeric>
#include <limits>
#include <thread>

#include "model/errors.h"
#include "model/module_tree.h"
#include "model/trainable.h"
#include "planner/parallel.h"
#include "simulator/kernel_time.h"
#include "model/text.h"

namespace shardtune::planner {
namespace {

// Plans simulated per window: the top-k bound is refreshed between windows, and the windows are
// the same for any thread count (so are the plans they prune). Small, so that the bound tightens
// after the first few of the likeliest winners (with the tight step-time bounds most plans
// waiting are within a few percent of each other; 16 simulated up to 30% more plans in the
// README's examples); two to four threads still share each window.
constexpr size_t kSimulationWindow = 4;

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

const char* StrategyFamily(const model::Plan& p) {
  switch (p.strategy) {
    case model::ShardingStrategy::kNoShard: return "no_shard";
    case model::ShardingStrategy::kShardGradOp: case model::ShardingStrategy::kHybridShardZero2: return "zero2-like";
    default: return "full-shard-like";
  }
}

// The grouped reason of a plan its step-time bound left out (sim::StepTimeBound::resource).
std::string SlowerReason(const std::string& resource) {
  if (resource == "schedule without link contention") {
    return "slower than the top plans: even with no link shared, its schedule takes longer than "
           "their whole step";
  }
  return "slower than the top plans: its " + resource + " alone is busy longer than their whole step";
}

// ", cp 2" for plans with Ulysses cp, so grouped reasons say which cp they are about.
std::string CpSuffix(const model::Plan& p) {
  return (p.cp > 1 ? ", cp " + std::to_string(p.cp) : "") +
         (p.ep > 1 ? ", ep " + std::to_string(p.ep) : "");
}

// The allocation-time fragmentation allowance of the no-replay judgement (memory_model.cc).
Bytes FragmentationAllowance(Bytes allocated, const sim::MemoryConstants& k) {
  return Bytes::Of(static_cast<int64_t>(static_cast<double>(allocated.count()) *
                                        k.fragmentation_fraction));
}

// The screening figure of a report: allocated peak + the fragmentation allowance + memory
// outside the allocator (memory_model.cc, the judgement without the allocator replay). A report
// that replayed the allocator carries its own `required`; the search judges every plan on this
// one so that its verdicts do not depend on which plans were replayed.
Bytes ScreeningRequired(const sim::MemoryReport& m, const sim::MemoryConstants& k) {
  if (!m.allocator_replayed) return m.required;
  return m.peak_allocated + FragmentationAllowance(m.peak_allocated, k) + m.outside_total;
}

// The FSDP units a plan's wrap makes (the policy and the embedding, head and expert units; the
// expert-parallel degree decides the local experts' units and their group).
// These keys are built for every plan, several times, and never printed: a ranges wrap (up to a
// range per block) is written as its count and its bounds' bytes, exact and self-delimiting, rather
// than as WrapSpecToString's decimal text (which cost the 405B case of tests/bench/tune_speed.py
// about 4% of its time).
std::string UnitsKey(const model::Plan& p) {
  std::string k;
  if (p.wrap.kind == model::WrapPolicy::Kind::kRanges) {
    const auto& r = p.wrap.ranges;
    k = "R" + std::to_string(r.size()) + ":";
    k.append(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(r[0]));
  } else {
    k = model::WrapSpecToString(p.wrap);
  }
  k += static_cast<char>('0' + p.wrap.embedding_unit);
  k += static_cast<char>('0' + p.wrap.head_unit);
  k += static_cast<char>('0' + p.wrap.expert_units);
  k += static_cast<char>('0' + p.wrap.sub_block_units);
  if (p.ep > 1) k += "/ep" + std::to_string(p.ep);  // dense plans keep their short keys
  return k;
}

// The units and the group they are sharded over.
std::string WrapKey(const model::Plan& p) {
  return model::ToString(p.strategy) + std::string("/") + std::to_string(p.shard_group_size) +
         "/" + UnitsKey(p);
}

}  // namespace

Ranker::Ranker(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster, const SearchRequest& req)
    : spec_(spec), cluster_(cluster), req_(req), opt_(req.options), full_opt_(req.options) {
  opt_.with_timeline = full_opt_.with_timeline = false;
  exhaustive_ = !req.prune;
  bool replay = opt_.memory.allocator_replay;
  replay_top_ = replay && !req.replay_every_plan && !exhaustive_;
  opt_.memory.allocator_replay = replay && (req.replay_every_plan || exhaustive_);
  opt_.memory.skip_repeated_micro_batches = !exhaustive_;
  full_opt_.memory.allocator_replay = false;
  full_opt_.steady_step_only = true;  // Admit reads step-1 figures only
  full_opt_.memory.skip_repeated_micro_batches_in_step0 = true;  // so step 0 need not be whole
  opt_.memory.host_estimate = full_opt_.memory.host_estimate = false;  // not reported by tune
  threads_ = req.jobs > 0 ? req.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

Ranker::~Ranker() = default;

Ranker::Worker& Ranker::WorkerOf(size_t thread) { return *workers_[thread]; }

template <typename Fn>
void Ranker::ForEachPlan(const std::vector<model::Plan>& plans, const std::vector<size_t>& indices,
                         Fn&& each) {
  ParallelFor(
      indices.size(), result_.threads,
      [&](size_t j, int t) { each(j, plans[indices[j]], WorkerOf(static_cast<size_t>(t))); },
      [](size_t) {});
}

// Persistent model states the plan keeps on the GPU at the optimizer step (params, grads and
// optimizer state, sharded and padded) plus the CUDA context: no plan of this kind can need
// less, since the step's peak includes them (simulator/step_walk_backward.cc OptimizerStep).
Bytes Ranker::ModelStateLowerBound(const model::Plan& p, Worker& w) const {
  int n = p.Sharded() ? p.ResolvedShardGroup(cluster_.world_size(), cluster_.gpus_per_node) : 1;
  int64_t per_elem = 0;
  switch (p.offload) {
    case model::Offload::kNone: per_elem = 16; break;
    case model::Offload::kOptimizer: per_elem = model::BytesPerElement(p.param_dtype); break;
    case model::Offload::kAll: per_elem = 0; break;
  }
  Bytes outside_floor = opt_.memory.constants.cuda_context;  // present in every GPU plan
  if (model::ChangesTrainability(spec_, p)) {
    // Frozen parameters (all of them for an inference role) keep only their shard: the frozen
    // dtype's bytes (param dtype under optimizer offload, none under full offload); LoRA adapters
    // their lora.dtype shard plus, when they train, gradient and moments (at least as above).
    int64_t bytes = 0;
    int64_t frozen_elem =
        p.offload == model::Offload::kNone ? model::BytesPerElement(p.FrozenDtype()) : per_elem;
    for (const auto& u : sim::CacheOf(w.ctx).UnitsFor(spec_, p)) {
      for (const auto& prm : u.params) {
        int64_t ps = prm.PaddedShardNumel(n);
        bool trains = prm.requires_grad && p.Trains();
        int64_t e = trains ? per_elem : frozen_elem;
        if (prm.lora_adapter) e = std::min(e, model::BytesPerElement(p.lora.dtype));
        bytes += ps * e;
      }
    }
    return Bytes::Of(bytes) + outside_floor;
  }
  std::string key = UnitsKey(p) + "/" + std::to_string(n);
  auto it = w.shard_numel.find(key);
  if (it == w.shard_numel.end()) {
    int64_t t = 0;
    for (const auto& u : sim::CacheOf(w.ctx).Units(spec_, p.wrap, p.ep)) t += u.PaddedShardNumel(n);
    it = w.shard_numel.emplace(key, t).first;
  }
  return Bytes::Of(it->second * per_elem) + outside_floor;
}

namespace {

// The knobs each part of the forward-end bound depends on among those the search varies
// (sim::ForwardEndBound; the exhaustive search recomputes the bound of every plan and checks):
// the states part on the units, the shard group, the strategy (which units stay gathered), the
// offload and cp (the FSDP mesh); the activations part on the micro-batch, checkpointing and cp,
// and, when parameters are frozen or adapted, the units (the first segment backward reaches).
std::string ForwardEndStatesKey(const model::Plan& p) {
  return WrapKey(p) + "/" + (p.reshard_after_forward ? "r" : "k") + "/" +
         model::ToString(p.offload) + "/" + std::to_string(p.cp);
}

std::string ForwardEndActivationsKey(const model::ModelSpec& spec, const model::Plan& p) {
  std::string k = std::to_string(p.micro_batch) + "/" + std::to_string(p.seq_len) + "/" +
                  model::CheckpointingSpecToString(p) + "/" + std::to_string(p.cp);
  if (p.ep > 1) k += "/ep" + std::to_string(p.ep);  // expert parallelism's dispatch buffers
  if (p.loss_kernel != model::LossKernel::kCrossEntropy) {
    k += "/" + std::string(model::ToString(p.loss_kernel));  // the head's ledger
  }
  if (model::ChangesTrainability(spec, p)) k += "/" + UnitsKey(p);
  return k;
}

}  // namespace

// Saved activations and model states alive together at the end of step 1's first forward, or
// at a block's backward op after it (sim::AllocatedLowerBound), with the fragmentation allowance
// ScreeningRequired adds (monotone in the allocated peak) and the CUDA context: the walk's
// screening figure is never smaller. Each part is computed once per key (one walker set-up
// serves both when both are new). `backward`: a backward moment is the larger.
Bytes Ranker::ForwardEndLowerBound(const model::Plan& p, Worker& w, bool* backward) const {
  std::string sk = ForwardEndStatesKey(p), ak = ForwardEndActivationsKey(spec_, p);
  auto si = w.forward_end_states.find(sk);
  auto ai = w.forward_end_activations.find(ak);
  if (si == w.forward_end_states.end() || ai == w.forward_end_activations.end()) {
    sim::ForwardEndBound parts;
    sim::AllocatedLowerBound(spec_, cluster_, p, opt_.memory, &sim::CacheOf(w.ctx), &parts);
    sim::ForwardEndBound states, activations;
    states.states_bytes = parts.states_bytes;
    states.backward_states_bytes = std::move(parts.backward_states_bytes);
    states.backward_prefetch_bytes = std::move(parts.backward_prefetch_bytes);
    activations.activations_bytes = parts.activations_bytes;
    activations.backward_activations_bytes = std::move(parts.backward_activations_bytes);
    si = w.forward_end_states.insert_or_assign(sk, std::move(states)).first;
    ai = w.forward_end_activations.insert_or_assign(ak, std::move(activations)).first;
  }
  const sim::ForwardEndBound& st = si->second;
  const sim::ForwardEndBound& ac = ai->second;
  const bool pre = p.backward_prefetch == model::BackwardPrefetch::kPre;
  const int64_t forward_end = sim::ForwardEndBound::ForwardEnd(st, ac);
  const int64_t later = sim::ForwardEndBound::Backward(st, ac, pre);
  *backward = later > forward_end;
  Bytes allocated = Bytes::Of(std::max(forward_end, later));
  SHARDTUNE_CHECK(!exhaustive_ ||
                  allocated == sim::AllocatedLowerBound(spec_, cluster_, p, opt_.memory,
                                                        &sim::CacheOf(w.ctx)))
      << "the forward-end bound's parts depend on knobs outside their keys for " << PlanKey(p);
  return allocated + FragmentationAllowance(allocated, opt_.memory.constants) +
         opt_.memory.constants.cuda_context;
}

// The memory lower bounds of one plan, no walk: the model-state bound, then the forward-end
// bound when the first fits.
void Ranker::Bound(const model::Plan& p, Worker& w, Screened* s) const {
  const Bytes capacity = cluster_.gpu.usable_memory;
  s->bound = ModelStateLowerBound(p, w);
  s->bound_oom = s->bound > capacity;
  if (!s->bound_oom) {
    bool backward = false;
    Bytes forward_end = ForwardEndLowerBound(p, w, &backward);
    if (forward_end > capacity) {
      s->bound = forward_end;
      s->bound_oom = s->forward_end_bound = true;
      s->backward_moment_bound = backward;
    }
  }
}

// One plan's memory walk and, when it fits, its step-time bound. The exhaustive search walks
// plans a bound rules out too and checks that the walk agrees with every bound.
void Ranker::Walk(const model::Plan& p, Worker& w, Screened* s) const {
  sim::MemoryEstimate est = sim::EstimateMemoryWithProgram(spec_, cluster_, p, opt_.memory, false,
                                                           &sim::CacheOf(w.ctx));
  Judge(p, est, s);
  if (s->fits || exhaustive_) {
    sim::StepTimeBound b = sim::StepLowerBound(est, spec_, cluster_, p, opt_, &w.ctx);
    s->time_lb_s = b.seconds;
    s->time_lb_resource = b.resource;
    // The prewalk bounds were taken from other plans with the same knobs: none may exceed this
    // plan's own figure.
    SHARDTUNE_CHECK(!exhaustive_ || (s->compute_lb_s <= b.segment_compute_s &&
                                     s->all_gather_lb_s <= b.all_gather_transfer_s &&
                                     s->reduce_scatter_lb_s <= b.reduce_scatter_transfer_s &&
                                     s->unit_kernels_lb_s <= b.unit_kernels_s &&
                                     s->gpu_optimizer_lb_s <= b.gpu_optimizer_s &&
                                     s->host_optimizer_lb_s <= b.host_optimizer_s))
        << "a prewalk bound exceeds the plan's own figure for " << PlanKey(p) << ": compute "
        << s->compute_lb_s << " vs " << b.segment_compute_s << " s, all-gather "
        << s->all_gather_lb_s << " vs " << b.all_gather_transfer_s << " s, reduce-scatter "
        << s->reduce_scatter_lb_s << " vs " << b.reduce_scatter_transfer_s << " s, per-unit kernels "
        << s->unit_kernels_lb_s << " vs " << b.unit_kernels_s << " s, GPU optimizer "
        << s->gpu_optimizer_lb_s << " vs " << b.gpu_optimizer_s << " s, host optimizer "
        << s->host_optimizer_lb_s << " vs " << b.host_optimizer_s << " s";
  }
  sim::CacheOf(w.ctx).Recycle(std::move(est.program));
}

// The memory verdict of a walked plan (its screening figure, peak and categories).
void Ranker::Judge(const model::Plan& p, const sim::MemoryEstimate& est, Screened* s) const {
  const sim::MemoryReport& m = est.report;
  s->evaluated = true;
  s->required = ScreeningRequired(m, opt_.memory.constants);
  s->fits = s->required <= cluster_.gpu.usable_memory;
  SHARDTUNE_CHECK(!(s->bound_oom && s->fits)) << "the lower bound " << s->bound.count()
      << " exceeds the walk's need " << s->required.count() << " for " << PlanKey(p);
  s->peak_phase = m.peak_phase;
  s->peak_at = m.peak_at;
  s->peak_top.assign(m.peak_breakdown.begin(),
                     m.peak_breakdown.begin() + std::min<size_t>(2, m.peak_breakdown.size()));
  if (m.allocator_replayed) {
    s->replayed = true;
    s->replay_fits = m.fits;
    s->replay_required = m.required;
  }
}

namespace {

// The searched knobs each prewalk bound depends on (the exhaustive search checks, for every
// plan, that the bound taken from another plan with the same key does not exceed its own).
// Segment compute: micro-batch, checkpointing, cp, ep (the local experts' GEMM shapes and the
// blocks split around their all-to-alls), the loss kernel; strategy, wrap, offload and prefetch change only
// collectives, copies, the optimizer and host work).
std::string ComputeKey(const model::Plan& p) {
  std::string k = std::to_string(p.micro_batch) + "x" + std::to_string(p.grad_accum) + "/" +
                  model::CheckpointingSpecToString(p) + "/" + std::to_string(p.cp) + "/" +
                  std::to_string(p.seq_len);
  if (p.ep > 1) k += "/ep" + std::to_string(p.ep);
  // The fused loss runs the head's three GEMMs in forward at the chunks' shapes.
  if (p.loss_kernel == model::LossKernel::kFusedLinear) k += "/fused_loss";
  return k;
}

// Collective transfers and the compute stream's per-unit kernels (copy-outs, post-backward) per
// micro-batch: which units are gathered and reduced over which group (strategy, shard group,
// wrap, cp); not the micro-batch size
// (collectives move parameters and gradients, not activations), checkpointing, offload or
// prefetch (which change when, not what).
// A plan's bound is its micro-batches times the least a micro-batch of the walked plan moves
// (reduce-scatters: once per step under no_sync, which reduces on the last micro-batch only).
std::string CommKey(const model::Plan& p) {
  return WrapKey(p) + "/" + std::to_string(p.cp) + "/" + std::to_string(p.seq_len);
}

// The optimizer step, on the host or on the GPU: the gradient shards it updates (strategy,
// shard group, wrap) and offload (which picks the device). Not cp, although cp divides the FSDP
// world (Plan::FsdpWorld) and so a default shard group: a smaller group only makes every shard
// larger (ceil(dim0 / n) rows) with the same tensors and kernels, so the key's figure is taken
// from its plan with the least cp (PrewalkBounds), the least the optimizer does for any of them.
std::string OptimizerKey(const model::Plan& p) {
  return WrapKey(p) + "/" + model::ToString(p.offload);
}

// Plans walked per window: the top-k bound is refreshed between windows, which are the same for
// any thread count.
constexpr size_t kWalkWindow = 64;

}  // namespace

// The prewalk bounds of every plan: for each key, the figures of its first plan that no memory
// bound rules out (walked once, in parallel; one walk serves every key whose first plan it is).
void Ranker::PrewalkBounds(const std::vector<model::Plan>& plans) {
  using KeyFn = std::string (*)(const model::Plan&);
  const std::array<KeyFn, 3> key_fns = {&ComputeKey, &CommKey, &OptimizerKey};
  std::array<std::map<std::string, size_t>, 3> first_of;  // key -> its first plan
  std::vector<size_t> reps;                               // plans to walk, ascending
  std::vector<std::array<std::string, 3>> keys(plans.size());
  // Each key's first plan no memory bound rules out; the optimizer key's first among those with
  // its least cp (OptimizerKey).
  std::map<std::string, int> least_cp;
  for (size_t i = 0; i < plans.size(); ++i) {
    for (size_t k = 0; k < key_fns.size(); ++k) keys[i][k] = key_fns[k](plans[i]);
    if (screened_[i].bound_oom) continue;
    auto [it, added] = least_cp.emplace(keys[i][2], plans[i].cp);
    if (!added) it->second = std::min(it->second, plans[i].cp);
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    if (screened_[i].bound_oom) continue;
    bool rep = false;
    for (size_t k = 0; k < 2; ++k) rep |= first_of[k].emplace(keys[i][k], i).second;
    if (plans[i].cp == least_cp[keys[i][2]]) rep |= first_of[2].emplace(keys[i][2], i).second;
    if (rep) reps.push_back(i);
  }
  std::vector<sim::StepTimeBound> figures(reps.size());
  ForEachPlan(plans, reps, [&](size_t j, const model::Plan& p, Worker& w) {
    sim::MemoryEstimate est = sim::EstimateMemoryWithProgram(spec_, cluster_, p, opt_.memory, false,
                                                             &sim::CacheOf(w.ctx));
    figures[j] = sim::StepLowerBound(est, spec_, cluster_, p, opt_, &w.ctx);
    // This walk is the plan's own memory walk too (EvaluateInOrder then skips it); the
    // exhaustive search walks it again there, after its prewalk bounds are set, to check them.
    if (!exhaustive_) {
      Screened* s = &screened_[reps[j]];
      Judge(p, est, s);
      if (s->fits) {
        s->time_lb_s = figures[j].seconds;
        s->time_lb_resource = figures[j].resource;
      }
    }
    sim::CacheOf(w.ctx).Recycle(std::move(est.program));
  });
  result_.prewalk_bound_walks = static_cast<int64_t>(reps.size());
  auto figure_of = [&](size_t k, const std::string& key) -> const sim::StepTimeBound* {
    auto it = first_of[k].find(key);
    if (it == first_of[k].end()) return nullptr;  // every plan with this key is ruled out by memory
    size_t j = static_cast<size_t>(std::lower_bound(reps.begin(), reps.end(), it->second) - reps.begin());
    return &figures[j];
  };
  for (size_t i = 0; i < plans.size(); ++i) {
    Screened& s = screened_[i];
    if (const sim::StepTimeBound* f = figure_of(0, keys[i][0])) s.compute_lb_s = f->segment_compute_s;
    if (const sim::StepTimeBound* f = figure_of(1, keys[i][1])) {
      const model::Plan& p = plans[i];
      // As StepLowerBound converts its sums: integer ns, then seconds.
      s.all_gather_lb_s =
          static_cast<double>(p.grad_accum * f->all_gather_per_micro_batch_ns) * 1e-9;
      s.reduce_scatter_lb_s =
          static_cast<double>((p.no_sync ? 1 : p.grad_accum) * f->reduce_scatter_per_micro_batch_ns) *
          1e-9;
      s.unit_kernels_lb_s = static_cast<double>(p.grad_accum * f->unit_kernels_per_micro_batch_ns) * 1e-9;
    }
    if (const sim::StepTimeBound* f = figure_of(2, keys[i][2])) {
      s.host_optimizer_lb_s = f->host_optimizer_s;
      s.gpu_optimizer_lb_s = f->gpu_optimizer_s;
    }
    // The compute stream runs the segments, the per-unit kernels (copy-outs, post-backward) and
    // the GPU optimizer one at a time.
    s.prewalk_lb_s = s.compute_lb_s + s.unit_kernels_lb_s + s.gpu_optimizer_lb_s;
    s.prewalk_what = "its compute-stream kernels (forward, backward, all-gather copy-outs, gradient copy-ins, optimizer) alone are busy";
    auto consider = [&](double v, const char* what) {
      if (v > s.prewalk_lb_s) {
        s.prewalk_lb_s = v;
        s.prewalk_what = what;
      }
    };
    consider(s.all_gather_lb_s, "its all-gather transfers alone take");
    consider(s.reduce_scatter_lb_s, "its reduce-scatter transfers alone take");
    consider(s.compute_lb_s + s.unit_kernels_lb_s + s.host_optimizer_lb_s,
             "its forward and backward kernels followed by the host optimizer step take");
  }
}

SearchResult Ranker::Run(const std::vector<model::Plan>& plans,
                         const std::function<void(int64_t, int64_t)>& progress) {
  int threads = std::max(1, std::min<int>(threads_, static_cast<int>(std::max<size_t>(1, plans.size()))));
  for (int t = 0; t < threads; ++t) workers_.push_back(std::make_unique<Worker>(cluster_));
  result_.threads = threads;
  screened_.assign(plans.size(), Screened{});
  ParallelFor(
      plans.size(), threads,
      [&](size_t i, int t) { Bound(plans[i], WorkerOf(static_cast<size_t>(t)), &screened_[i]); },
      [](size_t) {});
  PrewalkBounds(plans);
  EvaluateInOrder(plans, progress);
  BuildTop();
  BookVerdicts(plans);
  WalkBoundOnlyVerdicts(plans);
  return Finish();
}

// Walks the plans no bound has ruled out, cheapest prewalk bound first, in windows. A plan is
// skipped unwalked once its prewalk bound exceeds the top-k bound and its cp's fastest step
// (both only fall as the search goes on, so the plan stays ruled out against the final list:
// BookVerdicts). The plans that fit wait in step-time-bound order and are simulated once their
// bound is below every unwalked plan's prewalk bound (which is normally below that plan's
// step-time bound): so plans are simulated in about step-time-bound order over the whole search,
// the likeliest winners first, and the top-k bound tightens with few simulations and allocator
// replays. The order changes only how much work is done, never a verdict.
void Ranker::EvaluateInOrder(const std::vector<model::Plan>& plans,
                             const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<size_t> order;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (exhaustive_ || !screened_[i].bound_oom) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return screened_[a].prewalk_lb_s < screened_[b].prewalk_lb_s;
  });
  const auto total = static_cast<int64_t>(order.size());
  const double tokens = static_cast<double>(req_.global_batch) * static_cast<double>(req_.seq_len);
  std::set<std::pair<double, size_t>> pending;  // (step-time bound, plan index)
  for (size_t start = 0; start < order.size(); start += kWalkWindow) {
    size_t end = std::min(order.size(), start + kWalkWindow);
    // The plans of this window still in the running, and those of them not yet walked (the
    // prewalk bounds' walks judged some already).
    std::vector<size_t> judged, walk;
    for (size_t j = start; j < end; ++j) {
      size_t i = order[j];
      if (Prunable(screened_[i].prewalk_lb_s, plans[i])) continue;
      judged.push_back(i);
      if (!screened_[i].evaluated) walk.push_back(i);
    }
    ForEachPlan(plans, walk, [&](size_t j, const model::Plan& p, Worker& w) {
      Walk(p, w, &screened_[walk[j]]);
    });
    for (size_t i : judged) {
      Screened& s = screened_[i];
      if (s.bound_oom || !s.fits) continue;
      if (req_.objective == Objective::kMemory && tokens / s.time_lb_s < req_.min_tokens_per_s) {
        s.below_floor = true;
        continue;
      }
      pending.insert({s.time_lb_s, i});
    }
    double next_lb = end < order.size() ? screened_[order[end]].prewalk_lb_s
                                        : std::numeric_limits<double>::infinity();
    while (!pending.empty() && pending.begin()->first <= next_lb) SimulateSome(plans, &pending, next_lb);
    if (progress) progress(static_cast<int64_t>(end), total);
  }
}

// The top list, before the verdicts are booked (their exclusions read its last entry).
void Ranker::BuildTop() {
  std::vector<size_t> order(candidates_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Ties keep enumeration order (deterministic, whatever the order plans were simulated in).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (candidates_[a].objective != candidates_[b].objective) {
      return candidates_[a].objective < candidates_[b].objective;
    }
    return candidate_index_[a] < candidate_index_[b];
  });
  // Plans that differ only in knobs with no effect here (same time and memory) are listed once:
  // the first in enumeration order, which favours the defaults.
  for (size_t k = 0; k < order.size() && static_cast<int>(top_.size()) < req_.top_k; ++k) {
    Candidate& c = candidates_[order[k]];
    if (!ConfirmForTop(&c)) continue;
    if (!top_.empty() && c.step_time_s == top_.back().step_time_s && c.required == top_.back().required) {
      ++top_hidden_;
      continue;
    }
    top_.push_back(c);
  }
  final_threshold_ = req_.objective != Objective::kMemory && static_cast<int>(top_.size()) == req_.top_k
                         ? top_.back().objective
                         : std::numeric_limits<double>::infinity();
}

// Every plan's verdict, in plan order: a memory bound, the compute bound against the final list
// (before the walk's verdict: the exhaustive search walks every plan, the fast one only those
// the bound had not ruled out yet), the walk's memory verdict, then the step-time bound.
void Ranker::BookVerdicts(const std::vector<model::Plan>& plans) {
  for (size_t index = 0; index < plans.size(); ++index) {
    const model::Plan& p = plans[index];
    const Screened& s = screened_[index];
    ++VerdictOf(LayoutOf(p)).plans;
    if (s.evaluated) ++result_.memory_checked;
    if (s.replayed) ++result_.replayed;
    std::string key = PlanKey(p);
    if (s.bound_oom) {
      ++result_.pruned_by_memory_bound;
      const char* what = s.backward_moment_bound
                             ? "model states, what forward keeps for backward and a block's "
                               "backward"
                             : s.forward_end_bound
                             ? "model states and what forward keeps for backward"
                             : "model states";
      CpVerdict& v = VerdictOf(LayoutOf(p));
      if (v.smallest_bound.count() == 0 || s.bound < v.smallest_bound) {
        v.smallest_bound = s.bound;
        v.smallest_bound_key = key;
        v.smallest_bound_what = what;
        verdict_bound_index_[LayoutOf(p)] = index;
      }
      Reject(std::string(s.backward_moment_bound
                             ? "OOM: model states, the saved activations and a block's "
                               "backward (its working set and recomputation, the units gathered "
                               "then, the next unit's prefetch, unreduced gradients) exceed the "
                               "GPU during backward ("
                             : s.forward_end_bound
                             ? "OOM: model states and what forward keeps for backward (saved "
                               "activations, loss, gathered parameters) exceed the GPU by the end "
                               "of forward ("
                             : "OOM: model states alone exceed the GPU (") +
                 StrategyFamily(p) + ", offload " + model::ToString(p.offload) + CpSuffix(p) + ")",
             key + " needs at least " + model::GiBText(s.bound), s.bound);
      continue;
    }
    auto best = verdicts_.find(LayoutOf(p));
    double layout_best = best == verdicts_.end() ? 0 : best->second.best_step_time_s;
    if (s.prewalk_lb_s > final_threshold_ && layout_best > 0 && s.prewalk_lb_s > layout_best) {
      ++VerdictOf(LayoutOf(p)).slower_by_compute;
      if (s.simulated) continue;  // a simulated plan is a candidate that lost on its figures
      ++result_.pruned_by_time_bound;
      if (!s.evaluated) ++result_.pruned_before_walk;
      Reject(std::string("slower than the top plans: ") + s.prewalk_what +
                 " longer than their whole step",
             key + ": " + Secs(s.prewalk_lb_s), Bytes());
      continue;
    }
    SHARDTUNE_CHECK(s.evaluated) << "no verdict for " << key;
    if (result_.smallest_required.count() == 0 || s.required < result_.smallest_required) {
      result_.smallest_required = s.required;
    }
    NoteMemory(LayoutOf(p), key, s);
    if (!s.fits) {
      Reject("OOM during " + std::string(sim::PeakKindName(s.peak_at)) + " (" + StrategyFamily(p) + ", offload " +
                 model::ToString(p.offload) + CpSuffix(p) + ")",
             key + " needs " + model::GiBText(s.required) + " of " + model::GiBText(cluster_.gpu.usable_memory),
             s.required);
      continue;
    }
    ++VerdictOf(LayoutOf(p)).fitting;
    if (s.below_floor) {
      ++result_.pruned_by_time_bound;
      Reject("below the throughput floor (compute alone is too slow)", key, Bytes());
    } else if (s.time_pruned) {
      ++result_.pruned_by_time_bound;
      Reject(SlowerReason(s.time_lb_resource),
             key + ": " + s.time_lb_resource + " " + Secs(s.time_lb_s), Bytes());
    }
  }
}

// A cp whose plans a lower bound ruled out, every one, would say only that bound: its plan with
// the least bound is walked, so the verdict names the phase of its peak and what fills it. When
// the bounds ruled out every plan of every cp, the least of these walks' needs is the smallest
// need found (SearchResult::smallest_required).
void Ranker::WalkBoundOnlyVerdicts(const std::vector<model::Plan>& plans) {
  Bytes least;
  for (auto& [layout, v] : verdicts_) {
    auto it = verdict_bound_index_.find(layout);
    if (v.fitting > 0 || v.smallest_required.count() > 0 || it == verdict_bound_index_.end()) continue;
    Screened s = screened_[it->second];
    if (!s.evaluated) {
      Walk(plans[it->second], WorkerOf(0), &s);
      ++result_.memory_checked;
    }
    NoteMemory(layout, v.smallest_bound_key, s);
    bound_only_layouts_.insert(layout);
    if (least.count() == 0 || s.required < least) least = s.required;
  }
  if (result_.smallest_required.count() == 0) result_.smallest_required = least;
}

// The objective of the k-th best distinct confirmed candidate (infinity while fewer than k):
// a plan whose lower bound exceeds it cannot make the list. Distinct as Finish lists them
// (same step time and need: one entry); counting distinct pairs never exceeds the entries
// Finish shows, so the bound is never tighter than the list's.
double Ranker::TopThreshold() const {
  if (req_.objective == Objective::kMemory) return std::numeric_limits<double>::infinity();
  std::vector<std::pair<double, int64_t>> seen;
  for (const auto& [obj, ci] : confirmed_) {
    std::pair<double, int64_t> id{candidates_[ci].step_time_s, candidates_[ci].required.count()};
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    if (static_cast<int>(seen.size()) == req_.top_k) return obj;
  }
  return std::numeric_limits<double>::infinity();
}

// A plan may be left unsimulated (or unwalked) when its bound is slower than the top-k bound and
// than its layout's fastest plan so far (so each (cp, ep) verdict names its true fastest plan).
bool Ranker::Prunable(double time_lb_s, const model::Plan& p) const {
  if (exhaustive_ || req_.objective == Objective::kMemory) return false;
  if (!(time_lb_s > TopThreshold())) return false;
  auto it = verdicts_.find(LayoutOf(p));
  return it != verdicts_.end() && it->second.best_step_time_s > 0 &&
         time_lb_s > it->second.best_step_time_s;
}

// Simulates the next (at most kSimulationWindow) waiting plans whose step-time bound is at most
// `up_to`, cheapest first (the same plans for any thread count), or marks them pruned by it.
void Ranker::SimulateSome(const std::vector<model::Plan>& plans,
                          std::set<std::pair<double, size_t>>* pending, double up_to) {
  std::vector<size_t> run;
  while (!pending->empty() && pending->begin()->first <= up_to && run.size() < kSimulationWindow) {
    size_t i = pending->begin()->second;
    pending->erase(pending->begin());
    if (Prunable(screened_[i].time_lb_s, plans[i])) {
      screened_[i].time_pruned = true;
    } else {
      run.push_back(i);
    }
  }
  std::vector<sim::SimReport> reports(run.size());
  ForEachPlan(plans, run, [&](size_t j, const model::Plan& p, Worker& w) {
    sim::MemoryEstimate est = sim::EstimateMemoryWithProgram(spec_, cluster_, p, full_opt_.memory,
                                                             false, &sim::CacheOf(w.ctx));
    reports[j] = sim::SimulateProgram(std::move(est), spec_, cluster_, p, full_opt_, &w.ctx);
    // Admit reads the figures only: the program's buffers serve this worker's next plan, and the
    // schedule and per-op counters are dropped at once.
    sim::CacheOf(w.ctx).Recycle(std::move(reports[j].program));
    reports[j].schedule = {};
    reports[j].allocated_after = {};
    reports[j].memory.units = {};
  });
  for (size_t j = 0; j < run.size(); ++j) {
    Screened& s = screened_[run[j]];
    ++result_.simulated;
    s.simulated = true;
    // The bounds prune only if they never exceed a schedule: the exhaustive search (tests)
    // simulates every plan that fits and checks them.
    SHARDTUNE_CHECK(!exhaustive_ || (s.time_lb_s <= reports[j].step_time.count() &&
                                     s.prewalk_lb_s <= reports[j].step_time.count()))
        << "a step-time lower bound (" << s.time_lb_s << " s, " << s.time_lb_resource
        << "; before the walk " << s.prewalk_lb_s << " s) exceeds the simulated step "
        << reports[j].step_time.count() << " s for " << PlanKey(plans[run[j]]);
    Admit(run[j], plans[run[j]], reports[j]);
  }
}

}  // namespace shardtune::planner
