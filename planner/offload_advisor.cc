// Offload x checkpointing what-if table for `estimate`, the fused-loss alternative and the token
// capacity of packed micro-batches.
#include "planner/offload_advisor.h"

#include <numeric>

#include "model/context_parallel.h"

namespace shardtune::planner {

model::Plan PackedRowPlan(const model::Plan& plan, int64_t tokens, int64_t longest) {
  model::Plan p = plan;
  p.micro_batch = 1;
  p.seq_len = tokens;
  p.packed_seq_len = longest < tokens ? longest : 0;
  return p;
}

TokenCapacity LargestFittingMicroBatchTokens(const model::ModelSpec& spec,
                                             const profiles::ClusterSpec& cluster,
                                             const model::Plan& plan,
                                             const sim::MemoryOptions& options,
                                             int64_t mean_seq_len, int64_t known_fit_tokens,
                                             int64_t granularity) {
  TokenCapacity c;
  if (plan.packed_seq_len <= 0 && !plan.VerlPacksTokens()) return c;
  const int64_t seq = plan.ResolvedSeqLen(spec.max_seq_len);
  c.evaluated = true;
  c.plan_tokens = static_cast<int64_t>(plan.micro_batch) * seq;
  c.longest_sequence = plan.AttentionSeqLen(seq);
  // Rows must split evenly over the cp ranks and the MLP's tiles (Plan::Problems, trainable.h).
  const int64_t step = std::lcm<int64_t>(
      std::lcm<int64_t>(std::max(1, plan.cp), std::max(1, plan.tiled_mlp_shards)),
      std::max<int64_t>(1, granularity));
  // Tune's report (known_fit_tokens > 0) brackets the answer with the fragmentation allowance
  // (no allocator replay, a fraction of the cost) and settles it with the replay, as the search
  // screens plans and replays only the ones it lists (search.h replay_every_plan).
  const bool screen = known_fit_tokens > 0 && options.allocator_replay;
  sim::MemoryOptions screen_options = options;
  screen_options.allocator_replay = false;
  sim::ModelCache cache;  // the walks of this call share the model's tables and one program's buffers
  auto judged = [&](int64_t tokens, Bytes* required, const sim::MemoryOptions& o) {
    sim::MemoryReport r =
        sim::EstimateMemoryReport(spec, cluster, PackedRowPlan(plan, tokens, c.longest_sequence), o, &cache);
    if (required) *required = r.required;
    return r.fits;
  };
  auto exact = [&](int64_t tokens, Bytes* required) { return judged(tokens, required, options); };
  auto at = [&](int64_t tokens, Bytes* required) {
    return judged(tokens, required, screen ? screen_options : options);
  };
  if (mean_seq_len > 0) {
    int64_t t = plan.packed_seq_len > 0
                    ? c.plan_tokens
                    : std::min(c.plan_tokens, static_cast<int64_t>(plan.micro_batch) * mean_seq_len);
    t = std::max(step, (t + step - 1) / step * step);
    c.typical_tokens = t;
    c.typical_fits = exact(t, &c.typical_required);
  }
  // In units of `step`: lo fits (or is 0), hi does not.
  int64_t lo = 0, hi = 0;
  const int64_t first = (c.longest_sequence + step - 1) / step;
  if (known_fit_tokens >= first * step) {
    lo = known_fit_tokens / step;  // fits: the caller judged it
    hi = lo + first;               // the next whole longest sequence, grown below if it fits
  } else {
    if (!exact(first * step, nullptr)) return c;  // not even the longest sequence alone
    lo = first;
    hi = std::max(first + 1, 2 * ((c.plan_tokens + step - 1) / step));
  }
  while (at(hi * step, nullptr)) {  // grow until something does not fit
    lo = hi;
    hi *= 2;
    if (hi * step > (int64_t{1} << 40)) break;  // no model holds a trillion tokens' activations
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (at(mid * step, nullptr) ? lo : hi) = mid;
  }
  if (screen) {
    // Settle the screened bracket with the replay: down while the replay runs out (never below
    // the known fit), then up while one more step still fits.
    const int64_t floor = known_fit_tokens / step;
    bool settled = false;
    while (lo > floor && !(settled = exact(lo * step, &c.required_at_max))) --lo;
    while (lo + 1 < hi + first && exact((lo + 1) * step, nullptr)) {
      ++lo;
      settled = false;
    }
    if (!settled) exact(lo * step, &c.required_at_max);
  } else {
    exact(lo * step, &c.required_at_max);
  }
  c.max_tokens = lo * step;
  return c;
}

std::vector<Alternative> CompareOffloadAndCheckpointing(const model::ModelSpec& spec,
                                                        const profiles::ClusterSpec& cluster,
                                                        const model::Plan& plan,
                                                        const sim::MemoryOptions& options) {
  std::vector<Alternative> out;
  sim::ModelCache cache;
  for (auto off : {model::Offload::kNone, model::Offload::kOptimizer, model::Offload::kAll}) {
    for (auto ckpt : {model::Checkpointing::kNone, model::Checkpointing::kFull}) {
      model::Plan p = plan;
      p.offload = off;
      p.checkpointing = ckpt;
      sim::MemoryReport r = sim::EstimateMemoryReport(spec, cluster, p, options, &cache);
      Alternative a;
      a.offload = off;
      a.checkpointing = ckpt;
      a.gpu_required = r.required;
      a.gpu_capacity = r.capacity;
      a.gpu_fits = r.fits;
      a.host_peak_per_node = r.host.peak_per_node;
      a.host_capacity_per_node = r.host.capacity_per_node;
      a.host_fits = r.host.fits;
      a.peak_phase = r.peak_phase;
      out.push_back(a);
    }
  }
  return out;
}

FusedLossAlternative CompareFusedLoss(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                      const model::Plan& plan, const sim::MemoryOptions& options) {
  FusedLossAlternative a;
  if (plan.loss_kernel != model::LossKernel::kCrossEntropy || !plan.Trains()) return a;
  model::Plan p = plan;
  p.loss_kernel = model::LossKernel::kFusedLinear;
  if (!p.Problems("plan", cluster.world_size(), cluster.gpus_per_node, spec.num_layers,
                  spec.max_seq_len)
           .empty()) {
    return a;
  }
  sim::ModelCache cache;
  sim::MemoryReport r = sim::EstimateMemoryReport(spec, cluster, p, options, &cache);
  a.evaluated = true;
  a.peak_allocated = r.peak_allocated;
  a.required = r.required;
  a.fits = r.fits;
  a.peak_phase = r.peak_phase;
  return a;
}

CheckedChange CheckAdvisedChange(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                 const model::Plan& plan, const sim::MemoryOptions& options,
                                 AdvisedChange change) {
  CheckedChange c;
  const int world = cluster.world_size(), gpn = cluster.gpus_per_node;
  auto valid = [&](const model::Plan& p) {
    return p.Problems("plan", world, gpn, spec.num_layers, spec.SeqLenLimit()).empty() &&
           model::CpProblems(spec, p, world, gpn, "plan").empty();
  };
  model::Plan p = plan;
  switch (change) {
    case AdvisedChange::kCheckpointing:
      if (plan.checkpointing != model::Checkpointing::kNone) return c;
      p.checkpointing = model::Checkpointing::kFull;
      c.flags = "--checkpointing full";
      break;
    case AdvisedChange::kCp:
      // The smallest cp above the plan's that divides the heads, the sequence and the world.
      for (int cp = plan.cp * 2; cp <= world && cp <= spec.num_heads; cp *= 2) {
        p.cp = cp;
        if (valid(p)) {
          c.flags = "--cp " + std::to_string(cp);
          break;
        }
      }
      if (c.flags.empty()) return c;
      break;
    case AdvisedChange::kWrap:
      if (plan.wrap.kind == model::WrapPolicy::Kind::kBlock) return c;
      p.wrap.kind = model::WrapPolicy::Kind::kBlock;
      c.flags = "--wrap block";
      break;
    case AdvisedChange::kFrozenDtype:
      if (plan.FrozenDtype() != model::DType::kFp32) return c;
      p.frozen_dtype = model::DType::kBf16;
      c.flags = "--frozen-dtype bf16";
      break;
    case AdvisedChange::kActivationOffload:
      if (plan.activation_offload != model::ActivationOffload::kNone || !plan.Trains()) return c;
      p.activation_offload = model::ActivationOffload::kVerlAsync;
      c.flags = "--activation-offload verl_async";
      break;
  }
  if (!valid(p)) return c;
  sim::ModelCache cache;
  sim::MemoryReport r = sim::EstimateMemoryReport(spec, cluster, p, options, &cache);
  c.evaluated = true;
  c.required = r.required;
  c.fits = r.fits;
  c.host_peak_per_node = r.host.peak_per_node;
  c.host_fits = r.host.fits;
  return c;
}

}  // namespace shardtune::planner
