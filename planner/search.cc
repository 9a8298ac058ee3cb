// Plan enumeration, pruning, simulation and ranking for `shardtune tune`.
#include "planner/search.h"
#include "planner/checkpoint_refine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/errors.h"
#include "model/module_tree.h"
#include "model/text.h"
#include "planner/search_rank.h"
#include "planner/wrap_partition.h"

namespace shardtune::planner {
namespace {

using model::Plan;

std::vector<int> Divisors(int64_t n) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(static_cast<int>(i));
  }
  return d;
}

// HSDP shard groups: inside one node (divisors of GPUs per node, >= 2) or whole nodes (multiples
// of GPUs per node), dividing the world and smaller than it (the topology-aware choice: shard
// groups stay inside NVLink domains first).
std::vector<int> HybridGroups(const profiles::ClusterSpec& c) {
  std::vector<int> g;
  int world = c.world_size(), gpn = c.gpus_per_node;
  for (int d : Divisors(world)) {
    if (d < 2 || d >= world) continue;
    if (gpn % d == 0 || d % gpn == 0) g.push_back(d);
  }
  return g;
}

SearchSpace Defaults(const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                     const SearchRequest& req) {
  SearchSpace s = req.space;
  if (s.strategies.empty()) {
    s.strategies = {model::ShardingStrategy::kFullShard, model::ShardingStrategy::kShardGradOp,
                    model::ShardingStrategy::kNoShard};
    if (!HybridGroups(c).empty()) {
      s.strategies.push_back(model::ShardingStrategy::kHybridShard);
      s.strategies.push_back(model::ShardingStrategy::kHybridShardZero2);
    }
  }
  if (s.hybrid_shard_groups.empty()) s.hybrid_shard_groups = HybridGroups(c);
  if (s.wraps.empty()) {
    s.wraps.push_back(model::WrapPolicy{});
    if (!spec.tied_embeddings) {  // torchtitan's grouping: embedding, blocks, [norm, output]
      model::WrapPolicy titan;
      titan.embedding_unit = titan.head_unit = true;
      s.wraps.push_back(titan);
    }
    for (int k : {2, 4}) {
      if (spec.num_layers < 2 * k) continue;
      model::WrapPolicy w;
      w.kind = model::WrapPolicy::Kind::kEveryK;
      w.every_k = k;
      s.wraps.push_back(w);
    }
    // The non-uniform partition that minimises exposed all-gathers for a full-shard plan at
    // micro-batch 1, when it differs from uniform per-block units.
    model::Plan probe = req.base;
    probe.strategy = model::ShardingStrategy::kFullShard;
    probe.micro_batch = 1;
    auto ranges = OptimalPartition(spec.num_layers, PartitionCostsFor(spec, c, probe, req.seq_len, req.options.costs));
    bool uniform = true;
    for (const auto& [a, b] : ranges) uniform = uniform && a == b;
    if (!uniform) {
      model::WrapPolicy w;
      w.kind = model::WrapPolicy::Kind::kRanges;
      w.ranges = ranges;
      s.wraps.push_back(w);
    }
  }
  // verl's activation offload works per FSDP layer, a block (Plan::Problems): other wraps go.
  if (req.base.activation_offload != model::ActivationOffload::kNone) {
    s.wraps.erase(std::remove_if(s.wraps.begin(), s.wraps.end(),
                                 [](const model::WrapPolicy& w) { return w.kind != model::WrapPolicy::Kind::kBlock; }),
                  s.wraps.end());
  }
  if (s.cp_sizes.empty()) s.cp_sizes = DefaultCpSizes(spec, c, req);
  if (s.loss_kernels.empty()) s.loss_kernels = {req.base.loss_kernel};
  // TRL's DPO (its log-probs head, model/plan.h kTrlLogps): the loss is the preference loss over
  // those log-probs, which no other head computes.
  if (req.base.loss_kernel == model::LossKernel::kTrlLogps) s.loss_kernels = {model::LossKernel::kTrlLogps};
  if (s.ep_sizes.empty()) {
    s.ep_sizes = {std::max(1, req.base.ep)};
    if (spec.moe.enabled() && req.base.modeling == model::Modeling::kTorchtitan && !req.base.wrap.expert_units) {
      for (int ep : Divisors(c.world_size())) {
        if (ep <= 1 || ep > std::max(1, c.gpus_per_node)) continue;
        if (spec.moe.num_experts % ep != 0) continue;
        if (std::find(s.ep_sizes.begin(), s.ep_sizes.end(), ep) == s.ep_sizes.end()) s.ep_sizes.push_back(ep);
      }
      std::sort(s.ep_sizes.begin(), s.ep_sizes.end());
    }
  }
  if (s.micro_batches.empty()) {
    // Divisors of the per-rank batch of every cp searched (cp ranks share sequences, so a rank
    // gets global_batch x cp / world of them).
    for (int cp : s.cp_sizes) {
      for (int d : Divisors(req.global_batch * std::max(1, cp) / c.world_size())) {
        if (std::find(s.micro_batches.begin(), s.micro_batches.end(), d) == s.micro_batches.end()) {
          s.micro_batches.push_back(d);
        }
      }
    }
    std::sort(s.micro_batches.begin(), s.micro_batches.end());
    // TRL's DPOTrainer concatenates each pair's chosen and rejected rows: a micro-batch is an
    // even number of rows (per_device_train_batch_size pairs).
    if (req.base.loss_kernel == model::LossKernel::kTrlLogps) {
      s.micro_batches.erase(std::remove_if(s.micro_batches.begin(), s.micro_batches.end(), [](int mb) { return mb % 2 != 0; }),
                            s.micro_batches.end());
    }
  }
  if (s.checkpointing.empty()) {
    s.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kSelective,
                       model::Checkpointing::kEveryK, model::Checkpointing::kFull};
  }
  if (s.offloads.empty()) {
    // CPU ranks already keep everything in host memory: offload changes nothing there.
    s.offloads = {model::Offload::kNone};
    if (!c.cpu_only) {
      s.offloads.push_back(model::Offload::kOptimizer);
      s.offloads.push_back(model::Offload::kAll);
    }
  }
  if (s.forward_prefetch.empty()) s.forward_prefetch = {false, true};
  if (s.backward_prefetch.empty()) s.backward_prefetch = {model::BackwardPrefetch::kPre, model::BackwardPrefetch::kNone};
  return s;
}

}  // namespace

std::vector<int> DefaultCpSizes(const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                                const SearchRequest& req) {
  std::vector<int> out;
  int world = c.world_size();
  for (int cp : Divisors(world)) {
    if (cp > std::max(1, c.gpus_per_node)) break;  // cp groups stay inside a node (NVLink)
    if (req.seq_len > 0 && req.seq_len % cp != 0) continue;
    if ((req.global_batch * cp) % world != 0) continue;
    model::Plan probe = req.base;
    probe.cp = cp;
    probe.strategy = model::ShardingStrategy::kFullShard;
    probe.shard_group_size = 0;
    if (!model::CpProblems(spec, probe, world, c.gpus_per_node, "plan").empty()) continue;
    out.push_back(cp);
  }
  if (out.empty()) out.push_back(1);
  return out;
}

const char* ToString(Objective o) {
  switch (o) {
    case Objective::kThroughput: return "throughput";
    case Objective::kMemory: return "memory";
    case Objective::kCost: return "cost";
  }
  return "?";
}

std::string PlanKey(const Plan& p) {
  std::string k = model::ToString(p.strategy);
  if (p.Hybrid()) k += "/" + std::to_string(p.shard_group_size);
  const std::string batch =
      p.packed_seq_len > 0
          ? " tokens=" + std::to_string(p.micro_batch * p.seq_len) + " accum=" + std::to_string(p.grad_accum)
          : " mb=" + std::to_string(p.micro_batch) + " accum=" + std::to_string(p.grad_accum);
  k += " wrap=" + model::WrapSpecToString(p.wrap) + (p.wrap.embedding_unit ? "+embedding" : "") +
       (p.wrap.head_unit ? "+head" : "") + batch + " ckpt=" + model::CheckpointingSpecToString(p) +
       " offload=" + model::ToString(p.offload) + " fwd_prefetch=" + (p.forward_prefetch ? "on" : "off") +
       " bwd_prefetch=" + model::ToString(p.backward_prefetch);
  if (p.cp > 1) k += " cp=" + std::to_string(p.cp);
  if (p.ep > 1) k += " ep=" + std::to_string(p.ep);
  if (p.loss_kernel != model::LossKernel::kCrossEntropy) k += " loss=" + std::string(model::ToString(p.loss_kernel));
  if (p.activation_offload != model::ActivationOffload::kNone) {
    k += " activation_offload=" + model::ActivationOffloadSpecToString(p);
  }
  if (p.reference != model::InStepReference::kNone) k += " reference=" + std::string(model::ToString(p.reference));
  return k;
}

std::string PlanAsFlags(const Plan& p) {
  std::string f = "--strategy " + std::string(model::ToString(p.strategy));
  if (p.Hybrid()) f += " --shard-group " + std::to_string(p.shard_group_size);
  f += " --wrap " + model::WrapSpecToString(p.wrap);
  if (p.wrap.embedding_unit) f += " --wrap-embedding";
  if (p.wrap.head_unit) f += " --wrap-head";
  if (p.packed_seq_len > 0) {
    f += " --max-tokens-per-micro-batch " + std::to_string(p.micro_batch * p.seq_len);
  } else {
    f += " --micro-batch " + std::to_string(p.micro_batch);
  }
  f += " --grad-accum " + std::to_string(p.grad_accum);
  if (p.no_sync) f += " --no-sync";
  f += " --checkpointing " + model::CheckpointingSpecToString(p);
  f += " --offload " + std::string(model::ToString(p.offload));
  if (p.activation_offload != model::ActivationOffload::kNone) {
    f += " --activation-offload " + model::ActivationOffloadSpecToString(p);
  }
  if (p.reshard_after_forward != model::StrategyReshardsAfterForward(p.strategy)) {
    f += std::string(" --reshard-after-forward ") + (p.reshard_after_forward ? "true" : "false");
  }
  if (p.forward_prefetch) f += " --forward-prefetch";
  f += " --backward-prefetch " + std::string(model::ToString(p.backward_prefetch));
  if (p.cp > 1) f += " --cp " + std::to_string(p.cp);
  if (p.ep > 1) f += " --ep " + std::to_string(p.ep);
  if (p.loss_kernel != model::LossKernel::kCrossEntropy) {
    f += " --loss-kernel " + std::string(model::ToString(p.loss_kernel));
  }
  if (p.reference != model::InStepReference::kNone) f += " --reference " + std::string(model::ToString(p.reference));
  return f;
}

namespace {

// cp suits the model and tiles the FSDP mesh (verl's and torchtitan's rules, Plan::Problems).
bool CpFits(const model::ModelSpec& spec, const profiles::ClusterSpec& c, const Plan& p) {
  int world = c.world_size(), gpn = c.gpus_per_node;
  return model::CpProblems(spec, p, world, gpn, "plan").empty() &&
         p.Problems("plan", world, gpn, spec.num_layers, spec.SeqLenLimit()).empty();
}

// ep suits the model and the plan's shard group holds whole ep groups (torchtitan's rules).
bool EpFits(const model::ModelSpec& spec, const profiles::ClusterSpec& c, const Plan& p) {
  int world = c.world_size(), gpn = c.gpus_per_node;
  return model::EpProblems(spec, p, "plan").empty() &&
         p.Problems("plan", world, gpn, spec.num_layers, spec.SeqLenLimit()).empty();
}

// The plans of the space for one cp degree (cp ranks share sequences: a data-parallel rank gets
// global_batch x cp / world of them). Combinations that cp rules out are skipped.
std::vector<Plan> PlansForCp(const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                             const SearchRequest& req, const SearchSpace& s, int cp) {
  std::vector<Plan> out;
  if (cp < 1 || c.world_size() % cp != 0 || (req.global_batch * cp) % c.world_size() != 0)
    return out;
  int64_t per_rank = req.global_batch * cp / c.world_size();
  for (auto strategy : s.strategies) {
    std::vector<int> groups = {0};
    bool hybrid = strategy == model::ShardingStrategy::kHybridShard ||
                  strategy == model::ShardingStrategy::kHybridShardZero2;
    if (hybrid) groups = s.hybrid_shard_groups;
    for (int g : groups) {
      for (const auto& w : s.wraps) {
        for (int mb : s.micro_batches) {
          if (mb <= 0 || per_rank % mb != 0) continue;
          for (auto ck : s.checkpointing) {
            // first:K is not enumerated (its K would multiply the plans by the depth): listing it
            // asks RefineBlockCheckpointing to narrow the checkpointing plans after the search;
            // a base plan with first:K (tune --checkpointing first:K) is searched at its own K.
            if (ck == model::Checkpointing::kFirstK && req.base.checkpointing != model::Checkpointing::kFirstK) {
              continue;
            }
            for (auto off : s.offloads) {
              Plan base = req.base;
              base.strategy = strategy;
              base.shard_group_size = g;
              base.reshard_after_forward = model::StrategyReshardsAfterForward(strategy);
              base.wrap = w;
              // Per-expert units are a property of the model's MoE blocks, orthogonal to how
              // blocks are grouped: the base plan's choice applies to every wrap searched.
              base.wrap.expert_units = w.expert_units || req.base.wrap.expert_units;
              base.micro_batch = mb;
              base.grad_accum = static_cast<int>(per_rank / mb);
              base.seq_len = req.seq_len;
              if (req.base.packed_seq_len > 0) {
                // A token budget of mb longest sequences per row (verl use_dynamic_bsz with
                // ppo_max_token_len_per_gpu = mb x seq_len / cp): judged at full rows, as
                // many as the per-rank batch needs when every sequence is the longest
                // (seqlen_balancing.py: ceil(tokens / budget) micro-batches).
                base.micro_batch = 1;
                base.seq_len = static_cast<int64_t>(mb) * req.seq_len;
                base.packed_seq_len = req.seq_len;
              }
              base.checkpointing = ck;
              base.checkpoint_every_k = ck == model::Checkpointing::kEveryK ? 2 : 1;
              base.checkpoint_rest_selective = ck == model::Checkpointing::kFirstK && req.base.checkpoint_rest_selective;
              base.offload = off;
              base.cp = cp;
              // The cp and ep checks read no prefetch setting (Plan::Problems, CpProblems,
              // EpProblems): judged once for the prefetch variants below.
              if (cp > 1 && !CpFits(spec, c, base)) continue;
              std::vector<char> ep_fits;
              for (int ep : s.ep_sizes) {
                base.ep = ep;
                ep_fits.push_back(ep <= 1 || EpFits(spec, c, base));
              }
              for (bool fp : s.forward_prefetch) {
                for (auto bp : s.backward_prefetch) {
                  // Units that stay gathered through backward issue no backward all-gather:
                  // backward prefetch cannot matter, so only the default is searched.
                  if (!model::StrategyReshardsAfterForward(strategy) && bp != s.backward_prefetch.front()) continue;
                  Plan p = base;
                  p.forward_prefetch = fp;
                  p.backward_prefetch = bp;
                  for (size_t e = 0; e < s.ep_sizes.size(); ++e) {
                    if (!ep_fits[e]) continue;
                    p.ep = s.ep_sizes[e];
                    for (auto lk : s.loss_kernels) {
                      p.loss_kernel = lk;
                      if (lk == model::LossKernel::kFusedLinear && !p.FusedLossConflicts().empty()) continue;
                      out.push_back(p);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Plan> EnumeratePlans(const model::ModelSpec& spec, const profiles::ClusterSpec& c,
                                 const SearchRequest& req) {
  SearchSpace s = Defaults(spec, c, req);
  std::vector<Plan> out;
  for (int cp : s.cp_sizes) {
    std::vector<Plan> plans = PlansForCp(spec, c, req, s, cp);
    out.insert(out.end(), plans.begin(), plans.end());
  }
  return out;
}

namespace {

// Nothing fits in memory: verl's activation offload moves what no searched knob moves, the saved
// activations of every block but the last, to pinned host RAM (Plan::activation_offload). The
// space is searched again with it (Defaults keeps block wrapping only) and the answer names its
// fastest plan with the host RAM it takes; the plans stay out of `top`, since they need verl's
// runtime and host RAM the request did not ask for.
void SuggestActivationOffload(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                              const SearchRequest& req, SearchResult* r) {
  if (!r->top.empty() || r->no_plan_reason != "memory" || !req.try_activation_offload ||
      req.base.activation_offload != model::ActivationOffload::kNone || !req.base.Trains()) {
    return;
  }
  SearchRequest again = req;
  again.try_activation_offload = false;
  again.base.activation_offload = model::ActivationOffload::kVerlAsync;
  const SearchResult alt = SearchPlans(spec, cluster, again);
  if (alt.top.empty()) return;
  const Candidate& best = alt.top.front();
  const sim::MemoryReport m = sim::EstimateMemory(spec, cluster, best.plan, req.options.memory);
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(3);
  s << " With verl's activation offload (--activation-offload verl_async: the saved activations of every "
       "block but the last go to pinned host RAM, two blocks' on the GPU at a time), plans fit on the GPU: "
       "the fastest is "
    << best.key << " at " << best.step_time_s << " s per step, " << model::GiBText(best.required) << " of "
    << model::GiBText(best.capacity) << " per GPU, " << model::GiBText(m.host.peak_per_node) << " of host RAM per "
    << (cluster.HostsPerNode() > 1 ? "host" : "node") << (m.host.fits ? "" : " (more than it has)") << ".";
  r->advice_if_none += s.str();
}

}  // namespace

SearchResult SearchPlans(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                         const SearchRequest& req, const std::function<void(int64_t, int64_t)>& progress) {
  auto t0 = std::chrono::steady_clock::now();
  SHARDTUNE_CHECK(req.global_batch % cluster.world_size() == 0) << "global batch not divisible";
  std::vector<Plan> plans = EnumeratePlans(spec, cluster, req);
  Ranker ranker(spec, cluster, req);
  SearchResult r = ranker.Run(plans, progress);
  RefineBlockCheckpointing(spec, cluster, req, &r);
  r.enumerated = static_cast<int64_t>(plans.size());
  SuggestActivationOffload(spec, cluster, req, &r);
  r.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace shardtune::planner
