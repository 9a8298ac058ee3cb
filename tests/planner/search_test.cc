// Plan search: pruning never changes the answer (compared with exhaustive simulation of every
// plan that fits), the pick is never infeasible nor slower than any enumerated plan, results are
// deterministic, and a model that fits nowhere gets an answer, not an error.
#include "planner/search.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "model/presets.h"
#include "planner/search_rank.h"
#include "profiles/cluster.h"
#include "tests/planner/search_fixture.h"

namespace shardtune::planner {
namespace {

using testing::RequestFor;

SearchRequest SmallSpace(int64_t global_batch, int64_t seq) {
  SearchRequest r = RequestFor(global_batch, seq);
  r.top_k = 3;
  r.space.wraps = {model::WrapPolicy{}};
  r.space.checkpointing = {model::Checkpointing::kNone, model::Checkpointing::kFull};
  r.space.forward_prefetch = {false};
  r.space.cp_sizes = {1};  // cp has its own tests below
  return r;
}

TEST(SearchTest, PruningGivesTheExhaustiveAnswer) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(32, 4096);
  SearchResult pruned = SearchPlans(spec, c, req);
  req.prune = false;
  SearchResult full = SearchPlans(spec, c, req);
  ASSERT_FALSE(full.top.empty());
  ASSERT_FALSE(pruned.top.empty());
  EXPECT_EQ(pruned.top.front().key, full.top.front().key);
  EXPECT_EQ(pruned.top.front().step_time_s, full.top.front().step_time_s);
  EXPECT_GE(full.simulated, pruned.simulated);
  EXPECT_GT(pruned.pruned_by_memory_bound + pruned.pruned_by_time_bound, 0);
}

TEST(SearchTest, PickFitsAndIsNoSlowerThanAnyEnumeratedPlan) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("2x8xH100");
  SearchRequest req = SmallSpace(64, 2048);
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  // The fastest listed plan is no slower than any plan that fits; #1 is within the tie tolerance
  // of it (a safer near-tie may rank first), and past the ties the list is in objective order.
  const Candidate& best = *std::min_element(
      r.top.begin(), r.top.end(), [](const Candidate& a, const Candidate& b) { return a.objective < b.objective; });
  EXPECT_LE(r.top.front().required, r.top.front().capacity);
  EXPECT_LE(r.top.front().objective, best.objective * (1 + kRankTolerance));
  sim::SimOptions o;
  for (const auto& p : EnumeratePlans(spec, c, req)) {
    auto s = sim::SimulateStep(spec, c, p, o);
    if (s.memory.fits) {
      EXPECT_LE(best.step_time_s, s.step_time.count()) << PlanKey(p);
    }
  }
  for (size_t i = 1; i < r.top.size(); ++i) {
    if (r.top[i].objective > best.objective * (1 + kRankTolerance)) {
      EXPECT_LE(r.top[i - 1].objective, r.top[i].objective);
    }
  }
}

// Nothing fits: Llama-3.2-1B on one RTX 4090 at 131,072 tokens with verl's fused head, where
// even full checkpointing keeps 16 blocks' inputs (16 x 131072 x 2048 x 2 bytes = 8 GiB). The
// answer says what verl's activation offload makes fit, and that plan, estimated on its own,
// fits on the GPU; the plans stay out of the list.
TEST(SearchTest, NothingFitsNamesWhatActivationOffloadMakesFit) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("1xRTX4090");
  SearchRequest req = RequestFor(1, 131072);
  req.base.loss_kernel = model::LossKernel::kVerlFusedTriton;
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_TRUE(r.top.empty());
  ASSERT_EQ(r.no_plan_reason, "memory");
  const std::string marker = "plans fit on the GPU: the fastest is ";
  const size_t at = r.advice_if_none.find(marker);
  ASSERT_NE(at, std::string::npos) << r.advice_if_none;
  const std::string rest = r.advice_if_none.substr(at + marker.size());
  const std::string key = rest.substr(0, rest.find(" at "));
  EXPECT_NE(key.find("activation_offload=verl_async"), std::string::npos) << key;
  // Searched again with the offload pinned, the same plan comes first, and it fits.
  SearchRequest pinned = req;
  pinned.base.activation_offload = model::ActivationOffload::kVerlAsync;
  SearchResult with = SearchPlans(spec, c, pinned);
  ASSERT_FALSE(with.top.empty());
  EXPECT_EQ(with.top.front().key, key);
  EXPECT_TRUE(sim::EstimateMemory(spec, c, with.top.front().plan).fits);
  // Asked not to, the search says nothing of it.
  req.try_activation_offload = false;
  EXPECT_EQ(SearchPlans(spec, c, req).advice_if_none.find("activation offload"), std::string::npos);
}

TEST(SearchTest, ParetoFrontIsMonotone) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(16, 2048);
  req.prune = false;
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_GE(r.pareto.size(), 1u);
  for (size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_LE(r.pareto[i - 1].required, r.pareto[i].required);
    EXPECT_LT(r.pareto[i - 1].tokens_per_s, r.pareto[i].tokens_per_s);
  }
}

TEST(SearchTest, SameInputsSameResult) {
  auto spec = model::FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(16, 1024);
  SearchResult a = SearchPlans(spec, c, req), b = SearchPlans(spec, c, req);
  ASSERT_EQ(a.top.size(), b.top.size());
  for (size_t i = 0; i < a.top.size(); ++i) {
    EXPECT_EQ(a.top[i].key, b.top[i].key);
    EXPECT_EQ(a.top[i].step_time_s, b.top[i].step_time_s);
  }
  EXPECT_EQ(a.rejected.size(), b.rejected.size());
}

// 405B parameters on 8 GPUs of 24 GB: 16 bytes x 405e9 / 8 is ~760 GB of model states per GPU
// without offload; no plan fits, and the answer says so with the smallest need found.
TEST(SearchTest, NothingFitsIsAnAnswer) {
  auto spec = model::FindModelPreset("llama3-405b");
  auto c = profiles::ParseClusterShorthand("8xRTX4090");
  SearchRequest req = SmallSpace(8, 2048);
  SearchResult r = SearchPlans(spec, c, req);
  EXPECT_TRUE(r.top.empty());
  EXPECT_GT(r.smallest_required, c.gpu.usable_memory);
  EXPECT_NE(r.advice_if_none.find("No plan fits"), std::string::npos);
  EXPECT_FALSE(r.rejected.empty());
}

TEST(SearchTest, HybridGroupsStayInsideNodesOrSpanWholeNodes) {
  auto spec = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("4x8xH100");
  SearchRequest req = SmallSpace(32, 128);
  req.space.strategies = {model::ShardingStrategy::kHybridShard};
  for (const auto& p : EnumeratePlans(spec, c, req)) {
    int g = p.shard_group_size;
    EXPECT_TRUE(8 % g == 0 || g % 8 == 0) << g;
    EXPECT_EQ(32 % g, 0);
    EXPECT_LT(g, 32);
  }
}

TEST(SearchTest, CpuRanksAreNotOfferedOffload) {
  auto spec = model::FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("cpu:4");
  SearchRequest req = SmallSpace(8, 64);
  for (const auto& p : EnumeratePlans(spec, c, req)) EXPECT_EQ(p.offload, model::Offload::kNone);
}

// Ulysses cp as a search dimension: only values verl accepts for the model (heads 32, KV heads 8:
// 1, 2, 4, 8 on one 8-GPU node; 16 and 32 would leave the node), each with a whole per-rank batch.
// Llama-3.1-8B: llama3-8b's shapes with 131,072 positions (its config.json
// max_position_embeddings); the llama3-8b preset (Meta-Llama-3-8B) stops at 8,192.
model::ModelSpec Llama31_8b() {
  auto spec = model::FindModelPreset("llama3-8b");
  spec.max_seq_len = 131072;
  return spec;
}

TEST(SearchTest, DefaultCpSizesAreTheValidOnesInsideANode) {
  auto spec = Llama31_8b();
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(8, 65536);
  EXPECT_EQ(DefaultCpSizes(spec, c, req), (std::vector<int>{1, 2, 4, 8}));
  req.seq_len = 4098;  // 4098 = 2 x 2049: only cp 1 and 2 divide it
  EXPECT_EQ(DefaultCpSizes(spec, c, req), (std::vector<int>{1, 2}));
  req.space.cp_sizes = {};
  req.seq_len = 65536;
  int64_t per_cp[9] = {};
  for (const auto& p : EnumeratePlans(spec, c, req)) {
    ASSERT_TRUE(p.cp == 1 || p.cp == 2 || p.cp == 4 || p.cp == 8) << p.cp;
    // cp ranks share sequences: micro-batch x grad-accum = global batch x cp / world.
    EXPECT_EQ(p.micro_batch * p.grad_accum, 8 * p.cp / 8) << PlanKey(p);
    ++per_cp[p.cp];
  }
  for (int cp : {1, 2, 4, 8}) EXPECT_GT(per_cp[cp], 0) << cp;
}

// The scenario: llama3-8b (as Llama-3.1-8B) at 65,536 tokens per sequence, global batch
// 8, on 8xH100.
// Which cp sizes fit follows from the loss path: HF's fp32 upcast keeps 12 bytes per vocabulary
// entry per token live at the loss backward (activations_test: 12V), on the rank's S/cp tokens.
//  - cp=1: 12·V·S alone = 12 x 128256 x 65536 = 100.9e9 B > 84.9e9 B usable: no plan can fit,
//    whatever it shards, checkpoints or offloads.
//  - cp=4, cp=8 with full checkpointing and no offload fit under an upper bound: model states
//    16·N/8, checkpointed block inputs L·2H·t, the loss path 16·V·t (12V plus the bf16 logits
//    and their fp32 copy's share), one block's backward (< 400 kB per token) and four gathered
//    units of at most the LM head (2·V·H bytes each), + 5% fragmentation + 2 GiB outside the
//    allocator, with t = S/cp tokens per rank.
TEST(SearchTest, UlyssesCpSizesThatFitLlama3At64kOn8xH100) {
  auto spec = Llama31_8b();
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = RequestFor(8, 65536);
  req.top_k = 3;
  req.space.strategies = {model::ShardingStrategy::kFullShard};
  req.space.wraps = {model::WrapPolicy{}};
  req.space.micro_batches = {1};
  req.space.checkpointing = {model::Checkpointing::kFull};
  req.space.offloads = {model::Offload::kNone, model::Offload::kAll};
  req.space.forward_prefetch = {false};
  req.space.backward_prefetch = {model::BackwardPrefetch::kPre};
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_EQ(r.cp_verdicts.size(), 4u);
  const double V = 128256, H = 4096, L = 32, S = 65536,
               N = static_cast<double>(model::ParameterCount(spec));
  const double capacity = static_cast<double>(c.gpu.usable_memory.count());
  for (const CpVerdict& v : r.cp_verdicts) {
    SCOPED_TRACE(v.why);
    const double t = S / v.cp;
    EXPECT_EQ(v.why.rfind("cp=" + std::to_string(v.cp) + ": ", 0), 0u);
    // The verdict agrees with its own figures.
    EXPECT_EQ(v.fitting > 0, v.smallest_required <= c.gpu.usable_memory);
    if (12 * V * t > capacity) {
      EXPECT_EQ(v.fitting, 0);
      EXPECT_NE(v.why.find("does not fit"), std::string::npos);
      EXPECT_NE(v.why.find("LM head and loss"), std::string::npos);  // where the peak is, named
      EXPECT_GT(static_cast<double>(v.smallest_required.count()), 12 * V * t);
    }
    double upper = (16 * N / 8 + L * 2 * H * t + 16 * V * t + 400e3 * t + 4 * 2 * V * H) * 1.05 +
                   2.0 * (1 << 30);
    if (upper < capacity) {
      EXPECT_GT(v.fitting, 0);
      EXPECT_NE(v.why.find("fits"), std::string::npos);
      EXPECT_GT(v.best_step_time_s, 0);
    }
  }
  EXPECT_EQ(r.cp_verdicts[0].cp, 1);
  EXPECT_EQ(r.cp_verdicts[0].fitting, 0);  // 12·V·S > capacity (above)
  EXPECT_GT(r.cp_verdicts[2].fitting, 0);  // cp=4 under the upper bound
  EXPECT_GT(r.cp_verdicts[3].fitting, 0);  // cp=8 likewise
  ASSERT_FALSE(r.top.empty());
  EXPECT_GT(r.top.front().plan.cp, 1);
  for (const auto& x : r.rejected) {
    if (x.reason.find("OOM") != std::string::npos && x.example.find("cp=") == std::string::npos) {
      EXPECT_EQ(x.reason.find(", cp "), std::string::npos) << x.reason;  // cp 1 reasons carry no cp
    }
  }
}

// A LoRA base plan passes through the search: every plan keeps its adapters, and the memory
// lower bound counts 16 bytes only for trainable elements (4 for frozen ones), so LoRA on a model
// whose full fine-tune cannot fit without offload (llama3-70b: 16 x 70.6 B / 8 = 141 GB per
// rank) still finds plans without offload.
TEST(SearchTest, LoraBasePlanPassesThroughAndFitsWhereFullFineTuneCannot) {
  auto spec = model::FindModelPreset("llama3-70b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  SearchRequest req = SmallSpace(8, 2048);
  req.space.strategies = {model::ShardingStrategy::kFullShard};
  req.space.checkpointing = {model::Checkpointing::kFull};
  req.space.offloads = {model::Offload::kNone};
  req.space.backward_prefetch = {model::BackwardPrefetch::kPre};
  req.space.micro_batches = {1};
  EXPECT_TRUE(SearchPlans(spec, c, req).top.empty());
  req.base.lora.rank = 16;
  req.base.lora.targets = {"q_proj", "v_proj"};
  req.base.frozen_prefixes = {"model.embed_tokens"};
  SearchResult r = SearchPlans(spec, c, req);
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(r.top.front().plan.lora.rank, 16);
  EXPECT_EQ(r.top.front().plan.frozen_prefixes, req.base.frozen_prefixes);
  EXPECT_EQ(r.top.front().plan.offload, model::Offload::kNone);
}

// Ties within the time model's error go to the safer plan (issue #46): within 2% of the fastest,
// no offload before offload, then less memory, then fewer knobs away from FSDP2's defaults; a
// plan more than 2% slower never moves up, and the order outside the tie is the objective's.
Candidate Cand(double step_s, model::Offload off, int64_t required_gib, bool forward_prefetch = false) {
  Candidate c;
  c.step_time_s = c.objective = step_s;
  c.plan.offload = off;
  c.plan.forward_prefetch = forward_prefetch;
  c.required = Bytes::GiB(required_gib);
  c.key = std::to_string(step_s);
  return c;
}

TEST(RankTiesTest, NearTiesGoToTheSaferPlan) {
  using O = model::Offload;
  std::vector<Candidate> top = {Cand(10.00, O::kAll, 60), Cand(10.01, O::kAll, 60, true),
                                Cand(10.03, O::kOptimizer, 70), Cand(10.10, O::kNone, 75),
                                Cand(10.30, O::kNone, 50)};
  OrderNearTiesBySafety(&top);
  // 10.30 is 3% slower than 10.00: outside the tie, it stays last although it is the safest.
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(top[0].step_time_s, 10.10);  // no offload
  EXPECT_EQ(top[1].step_time_s, 10.03);  // optimizer offload
  EXPECT_EQ(top[2].step_time_s, 10.00);  // offload all, default prefetch
  EXPECT_EQ(top[3].step_time_s, 10.01);  // offload all, forward prefetch on
  EXPECT_EQ(top[4].step_time_s, 10.30);
  // Less memory decides between equal offloads; nothing decides between equal plans.
  EXPECT_TRUE(SaferThan(Cand(1, O::kNone, 40), Cand(1, O::kNone, 41)));
  EXPECT_FALSE(SaferThan(Cand(1, O::kNone, 40), Cand(1, O::kNone, 40)));
  // The reason is written in #1's favour for the faster plan below it.
  const std::string why = WhyNotBest(top[2], top[0]);
  EXPECT_NE(why.find("within the 2% the time model cannot tell apart: #1 does not offload"), std::string::npos) << why;
}

}  // namespace
}  // namespace shardtune::planner
