// The fast search (bounds, skipped micro-batches, lower-bound order, lazy allocator replay,
// threads) against the exhaustive one (every plan walked in full, replayed and simulated): the
// same top plans, per-cp verdicts and grouped reasons; the same answer for any --jobs; and the
// work it does stays bounded on a fixed case, so that a change that quietly evaluates everything
// again fails here.
#include <map>
#include <set>
#include <tuple>
#include <string>

#include <algorithm>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "planner/search.h"
#include "profiles/cluster.h"
#include "simulator/profile_json.h"
#include "tests/planner/search_fixture.h"

namespace shardtune::planner {
namespace {

using testing::RequestFor;

// The reasons whose counts depend on how much was simulated or replayed (the exhaustive search
// simulates every plan that fits and replays every plan): left out of the comparison, and
// checked through the counters instead.
bool WorkDependentReason(const std::string& reason) {
  return reason.rfind("slower than the top plans", 0) == 0 ||
         reason.rfind("OOM in the caching allocator replay", 0) == 0;
}

std::map<std::string, int> Reasons(const SearchResult& r) {
  std::map<std::string, int> m;
  for (const auto& x : r.rejected) {
    if (!WorkDependentReason(x.reason)) m[x.reason] = x.count;
  }
  return m;
}

void ExpectSameAnswer(const SearchResult& fast, const SearchResult& full) {
  ASSERT_EQ(fast.top.size(), full.top.size());
  for (size_t i = 0; i < fast.top.size(); ++i) {
    EXPECT_EQ(fast.top[i].key, full.top[i].key) << i;
    EXPECT_EQ(fast.top[i].step_time_s, full.top[i].step_time_s) << i;
    EXPECT_EQ(fast.top[i].required, full.top[i].required) << i;
    EXPECT_EQ(fast.top[i].why_not_best, full.top[i].why_not_best) << i;
  }
  ASSERT_EQ(fast.cp_verdicts.size(), full.cp_verdicts.size());
  for (size_t i = 0; i < fast.cp_verdicts.size(); ++i) {
    const CpVerdict &a = fast.cp_verdicts[i], &b = full.cp_verdicts[i];
    EXPECT_EQ(a.cp, b.cp);
    EXPECT_EQ(a.ep, b.ep);
    EXPECT_EQ(a.plans, b.plans);
    EXPECT_EQ(a.fitting, b.fitting);
    EXPECT_EQ(a.slower_by_compute, b.slower_by_compute);
    EXPECT_EQ(a.smallest_required, b.smallest_required);
    EXPECT_EQ(a.smallest_key, b.smallest_key);
    EXPECT_EQ(a.smallest_bound, b.smallest_bound);
    EXPECT_EQ(a.smallest_bound_key, b.smallest_bound_key);
    EXPECT_EQ(a.smallest_bound_what, b.smallest_bound_what);
    EXPECT_EQ(a.best_step_time_s, b.best_step_time_s);
    EXPECT_EQ(a.best_key, b.best_key);
    EXPECT_EQ(a.why, b.why);
  }
  EXPECT_EQ(Reasons(fast), Reasons(full));
  EXPECT_EQ(fast.smallest_required, full.smallest_required);
  EXPECT_EQ(fast.advice_if_none, full.advice_if_none);
  EXPECT_EQ(fast.enumerated, full.enumerated);
  EXPECT_EQ(fast.pruned_by_memory_bound, full.pruned_by_memory_bound);
}

struct Case {
  const char* model;
  const char* cluster;
  int64_t global_batch, seq_len;
  Objective objective;
};

SearchRequest RequestOf(const Case& k) {
  SearchRequest r = RequestFor(k.global_batch, k.seq_len);
  r.objective = k.objective;
  r.min_tokens_per_s = k.objective == Objective::kMemory ? 1e5 : 0;
  r.top_k = 3;
  r.space.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kFull};
  r.space.forward_prefetch = {false};
  return r;
}

TEST(SearchWorkTest, FastSearchGivesTheExhaustiveAnswer) {
  int64_t before_walk = 0;  // plans the fast searches left unwalked by the compute bound
  for (const Case& k : {Case{"llama3.2-1b", "8xH100", 32, 1024, Objective::kThroughput},
                        Case{"llama3-8b", "8xH100", 16, 2048, Objective::kThroughput},
                        Case{"llama2-70b", "8xH100", 8, 2048, Objective::kThroughput},
                        Case{"llama3.2-1b", "8xH100", 16, 2048, Objective::kMemory},
                        // Long sequences: the forward-end bound rules out plans here.
                        Case{"llama3.2-1b", "8xH100", 8, 32768, Objective::kThroughput}}) {
    SCOPED_TRACE(std::string(k.model) + " on " + k.cluster);
    auto spec = model::FindModelPreset(k.model);
    auto c = profiles::ParseClusterShorthand(k.cluster);
    SearchRequest req = RequestOf(k);
    SearchResult fast = SearchPlans(spec, c, req);
    req.prune = false;
    SearchResult full = SearchPlans(spec, c, req);
    ExpectSameAnswer(fast, full);
    // What the fast search skipped is accounted for: every plan that fits was simulated or
    // ruled out by its step-time bound, and it walked no more plans than the exhaustive search.
    EXPECT_EQ(fast.simulated + fast.pruned_by_time_bound, full.simulated + full.pruned_by_time_bound);
    EXPECT_LE(fast.memory_checked, full.memory_checked);
    EXPECT_EQ(full.memory_checked, full.enumerated);
    EXPECT_EQ(full.replayed, full.memory_checked);
    EXPECT_EQ(full.pruned_before_walk, 0);
    before_walk += fast.pruned_before_walk;
  }
  // The cases exercise the compute bound's exclusions (plans the exhaustive search walked and
  // the fast one did not must get the same verdict).
  EXPECT_GT(before_walk, 0);
}

// Expert parallelism searched (an MoE model under torchtitan's code): every bound's key must
// tell the ep degrees apart (units, GEMM shapes, all-to-alls, dispatch buffers), or the fast
// search would take one ep's figure for another's. Qwen3-30B-A3B cut to 4 layers, timed on the
// catalog's measured H100 tables (taller expert GEMMs under ep run at another efficiency).
TEST(SearchWorkTest, FastSearchGivesTheExhaustiveAnswerWithExpertParallelism) {
  auto spec = model::FindModelPreset("qwen3-30b-a3b");
  spec.num_layers = 4;
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = RequestOf({"qwen3-30b-a3b", "8xH100", 16, 2048, Objective::kThroughput});
  req.base.modeling = model::Modeling::kTorchtitan;
  sim::Profile h100 = sim::JobProfile("", c.gpu);
  req.options.costs = h100.costs;
  req.options.memory.constants = h100.memory;
  req.space.cp_sizes = {1};
  req.space.offloads = {model::Offload::kNone};
  SearchResult fast = SearchPlans(spec, c, req);
  std::set<int> eps;
  for (const auto& plan : EnumeratePlans(spec, c, req)) eps.insert(plan.ep);
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4, 8}));  // divisors of 128 experts inside the node
  req.prune = false;
  SearchResult full = SearchPlans(spec, c, req);
  ExpectSameAnswer(fast, full);
  EXPECT_EQ(fast.simulated + fast.pruned_by_time_bound, full.simulated + full.pruned_by_time_bound);
  // One verdict per ep, named by ep alone (cp was not searched), each counting its own plans; the
  // fastest one is the top plan's ep, the others say how much slower their best plan is.
  ASSERT_EQ(fast.cp_verdicts.size(), 4u);
  int64_t plans = 0;
  ASSERT_FALSE(fast.top.empty());
  // The fastest listed plan (#1 may be a safer plan within planner::kRankTolerance of it).
  const Candidate& fastest = *std::min_element(
      fast.top.begin(), fast.top.end(),
      [](const Candidate& a, const Candidate& b) { return a.step_time_s < b.step_time_s; });
  const int top_ep = fastest.plan.ep;
  for (size_t i = 0; i < fast.cp_verdicts.size(); ++i) {
    const CpVerdict& v = fast.cp_verdicts[i];
    SCOPED_TRACE(v.why);
    EXPECT_EQ(v.cp, 1);
    EXPECT_EQ(v.ep, 1 << i);
    EXPECT_EQ(v.why.rfind("ep=" + std::to_string(v.ep) + ": ", 0), 0u);
    plans += v.plans;
    if (v.best_step_time_s == 0) continue;
    EXPECT_NE(v.best_key.find(v.ep > 1 ? " ep=" + std::to_string(v.ep) : std::string("")),
              std::string::npos);
    if (v.ep == top_ep) {
      EXPECT_EQ(v.best_step_time_s, fastest.step_time_s);
      EXPECT_NE(v.why.find("the fastest ep"), std::string::npos);
    } else {
      EXPECT_GE(v.best_step_time_s, fastest.step_time_s);
      EXPECT_NE(v.why.find("vs ep=" + std::to_string(top_ep)), std::string::npos);
    }
  }
  EXPECT_EQ(plans, fast.enumerated);
  // HF's modules have no expert-parallel dispatch: only ep 1 is searched for them.
  req.base.modeling = model::Modeling::kHf;
  for (const auto& plan : EnumeratePlans(spec, c, req)) EXPECT_EQ(plan.ep, 1);
}

// The loss kernel searched (cross_entropy and the fused linear cross-entropy): every bound whose
// figure the head changes (the forward-end activations, the segment compute) must tell them
// apart. Llama-3-8B at 8192 tokens, where the fused loss lets plans without checkpointing fit.
TEST(SearchWorkTest, FastSearchGivesTheExhaustiveAnswerWithTheLossKernelSearched) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = RequestOf({"llama3-8b", "8xH100", 16, 8192, Objective::kThroughput});
  req.space.offloads = {model::Offload::kNone};
  req.space.loss_kernels = {model::LossKernel::kCrossEntropy, model::LossKernel::kFusedLinear};
  SearchResult fast = SearchPlans(spec, c, req);
  req.prune = false;
  SearchResult full = SearchPlans(spec, c, req);
  ExpectSameAnswer(fast, full);
  EXPECT_EQ(fast.simulated + fast.pruned_by_time_bound, full.simulated + full.pruned_by_time_bound);
  ASSERT_FALSE(fast.top.empty());
  EXPECT_EQ(fast.top.front().plan.loss_kernel, model::LossKernel::kFusedLinear);
  EXPECT_NE(fast.top.front().key.find(" loss=fused_linear"), std::string::npos);
  // Plans that cannot use it are not enumerated with it.
  req.base.keep_logits = true;
  for (const auto& plan : EnumeratePlans(spec, c, req)) {
    EXPECT_EQ(plan.loss_kernel, model::LossKernel::kCrossEntropy);
  }
}

TEST(SearchWorkTest, SameAnswerForAnyThreadCount) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = RequestOf({"llama3-8b", "8xH100", 32, 4096, Objective::kThroughput});
  req.jobs = 1;
  SearchResult one = SearchPlans(spec, c, req);
  req.jobs = 3;
  SearchResult three = SearchPlans(spec, c, req);
  EXPECT_EQ(one.threads, 1);
  EXPECT_EQ(three.threads, 3);
  ExpectSameAnswer(one, three);
  // Not only the answer: the same work, since the windows that prune do not depend on threads.
  EXPECT_EQ(one.memory_checked, three.memory_checked);
  EXPECT_EQ(one.simulated, three.simulated);
  EXPECT_EQ(one.pruned_by_time_bound, three.pruned_by_time_bound);
  EXPECT_EQ(one.replayed, three.replayed);
  ASSERT_EQ(one.rejected.size(), three.rejected.size());
  for (size_t i = 0; i < one.rejected.size(); ++i) {
    EXPECT_EQ(one.rejected[i].reason, three.rejected[i].reason);
    EXPECT_EQ(one.rejected[i].count, three.rejected[i].count);
    EXPECT_EQ(one.rejected[i].example, three.rejected[i].example);
  }
  ASSERT_EQ(one.pareto.size(), three.pareto.size());
  for (size_t i = 0; i < one.pareto.size(); ++i) EXPECT_EQ(one.pareto[i].key, three.pareto[i].key);
}

// The default search space for llama3-8b on 8xH100 (global batch 64 x 8192, the README's
// example): the memory walk runs once per plan the model-state bound lets through, the
// allocator replay only for plans about to enter the list, and the simulation for a minority.
TEST(SearchWorkTest, WorkStaysBoundedOnTheReadmeExample) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = RequestFor(64, 8192);
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  // Every plan is ruled out by a memory bound, by the compute bound before any walk, or walked.
  EXPECT_EQ(r.memory_checked + r.pruned_by_memory_bound + r.pruned_before_walk, r.enumerated);
  // The prewalk bounds walk at most one plan per (micro-batch, checkpointing, cp), per
  // (strategy, shard group, wrap, cp) and per (strategy, shard group, wrap, offload).
  std::set<std::tuple<int, int, int>> compute;
  std::set<std::tuple<std::string, int, int>> comm, host;
  for (const model::Plan& p : EnumeratePlans(spec, c, req)) {
    std::string wrap = std::string(model::ToString(p.strategy)) + "/" +
                       std::to_string(p.shard_group_size) + "/" + model::WrapSpecToString(p.wrap) +
                       std::to_string(p.wrap.embedding_unit) + std::to_string(p.wrap.head_unit);
    compute.insert({p.micro_batch, static_cast<int>(p.checkpointing), p.cp});
    comm.insert({wrap, 0, p.cp});
    host.insert({wrap, static_cast<int>(p.offload), 0});
  }
  EXPECT_GT(r.prewalk_bound_walks, 0);
  EXPECT_LE(r.prewalk_bound_walks, static_cast<int64_t>(compute.size() + comm.size() + host.size()));
  // Each of those walks is its plan's memory walk too (not walked twice).
  EXPECT_LE(r.prewalk_bound_walks, r.memory_checked);
  // They leave few plans to walk: 670 walks in all (session 12: the prewalk compute bound counts
  // the post-backward kernels; 852 before, 1,292 when first written, 2,018 before the forward-end
  // bound counted what forward keeps for backward and the time-bound walks were reused; 11,950
  // with the model-state bound alone).
  EXPECT_LE(r.memory_checked, 900);
  // The forward-end bound rules out more than half the plans (10,004 of 19,200 when written).
  EXPECT_GT(2 * r.pruned_by_memory_bound, r.enumerated);
  EXPECT_GT(r.pruned_before_walk, 0);
  // Replays: the plans that entered the top-5 bound while it tightened, plus any the list skipped
  // as out of memory, the Pareto front's and each cp's fastest (16 in session 12, 50 when first
  // written); replaying every plan would be memory_checked (18,320).
  EXPECT_LE(r.replayed, 8 * req.top_k);
  // Simulations: the step-time bound (the schedule without link contention over every copy of the
  // micro-batches the walk left out, every serial resource's busy time) leaves few plans to
  // simulate: 16 in session 12 (130 when the copies were bounded per stream, 244 when first
  // written, 2,068 with the compute stream alone as the bound).
  EXPECT_LE(r.simulated, 60);
  // The forward-end bound (the model states and what forward keeps for backward, alive at the
  // end of step 1's first forward) rules out the plans whose activations alone overflow before
  // any walk.
  int64_t forward_end = 0;
  for (const Rejection& x : r.rejected) {
    if (x.reason.find("by the end of forward") != std::string::npos) forward_end += x.count;
  }
  EXPECT_LE(forward_end, r.pruned_by_memory_bound);
  EXPECT_GT(forward_end, 0);
}

}  // namespace
}  // namespace shardtune::planner
