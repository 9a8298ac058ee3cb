// Expert parallelism (Plan::ep) in the model layer: the checks that need the model, the local
// experts' FSDP units in torchtitan's GroupedExperts layout with torchtitan's Shard(0) / Shard(1)
// rule, and the all-to-all sizes of one MoE layer, each against a formula written here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/activations.h"
#include "model/expert_parallel.h"
#include "model/module_tree.h"
#include "model/plan.h"
#include "model/plan_json.h"
#include "model/presets.h"

namespace shardtune::model {
namespace {

using ::testing::HasSubstr;

Plan EpPlan(int ep) {
  Plan p;
  p.ep = ep;
  p.modeling = Modeling::kTorchtitan;
  return p;
}

TEST(ExpertParallelTest, ProblemsNameTheModelAndTheRule) {
  const ModelSpec moe = FindModelPreset("qwen3-30b-a3b");  // 128 experts
  EXPECT_TRUE(EpProblems(moe, EpPlan(1), "p").empty());
  EXPECT_TRUE(EpProblems(moe, EpPlan(8), "p").empty());
  EXPECT_THAT(EpProblems(FindModelPreset("llama3-8b"), EpPlan(2), "p"),
              ::testing::ElementsAre(HasSubstr("p:/expert_parallel_degree: expected 1 for llama3-8b")));
  EXPECT_THAT(EpProblems(moe, EpPlan(3), "p"),
              ::testing::ElementsAre(HasSubstr("a divisor of num_experts 128")));
  // Hugging Face modeling with ep is ROLL's ExpertParallel: fine for Qwen3-MoE, not for GPT-OSS,
  // whose expert biases ROLL's ep_experts_forward does not apply.
  Plan hf = EpPlan(2);
  hf.modeling = Modeling::kHf;
  EXPECT_TRUE(EpProblems(moe, hf, "p").empty());
  EXPECT_THAT(EpProblems(FindModelPreset("gpt-oss-20b"), hf, "p"),
              ::testing::ElementsAre(HasSubstr("no expert biases")));
  Plan per_expert = EpPlan(2);
  per_expert.wrap.expert_units = true;
  EXPECT_THAT(EpProblems(moe, per_expert, "p"), ::testing::ElementsAre(HasSubstr("--wrap-experts")));
}

TEST(ExpertParallelTest, ThePlanRejectsAnEpTheShardGroupCannotHold) {
  Plan p = EpPlan(4);
  p.strategy = ShardingStrategy::kHybridShard;
  p.shard_group_size = 2;  // two ranks per shard group cannot hold an ep group of 4
  auto problems = p.Problems("plan.json", 8, 8, 48, 4096);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("plan.json:/expert_parallel_degree: expected a divisor of the FSDP shard group 2"));
  p.ep = 0;
  EXPECT_THAT(p.Problems("plan.json", 8, 8, 48, 4096),
              ::testing::Contains(HasSubstr("expert_parallel_degree: expected integer >= 1")));
  EXPECT_EQ(EpPlan(2).ExpertShardGroup(8, 8), 4);
  EXPECT_EQ(EpPlan(8).ExpertShardGroup(8, 8), 1);
}

TEST(ExpertParallelTest, PlanJsonRoundTripsTheDegree) {
  Plan p = EpPlan(4);
  Plan back = PlanFromJson(nlohmann::json::parse(PlanToJson(p).dump()), "p.json");
  EXPECT_EQ(back.ep, 4);
  EXPECT_EQ(PlanToJson(p).at("expert_parallel_degree").get<int>(), 4);
}

// Qwen3-30B-A3B: H 2048, 128 experts of F 768, 48 MoE layers. With ep each layer's E / ep local
// experts form one unit of three 3-D tensors (w1 [E/ep, F, H], w2 [E/ep, H, F], w3), and the
// block's unit holds no expert; the units hold the model less the other ranks' experts.
TEST(ExpertParallelTest, LocalExpertsAreOneUnitPerLayer) {
  const ModelSpec s = FindModelPreset("qwen3-30b-a3b");
  const int64_t E = 128, F = 768, H = 2048, L = 48;
  const int64_t experts_per_layer = E * 3 * F * H;
  int64_t base_total = 0;
  for (const auto& u : BuildFsdpUnits(s, WrapPolicy{})) base_total += u.NumParams();
  for (int ep : {2, 8}) {
    auto units = BuildFsdpUnits(s, WrapPolicy{}, ep);
    int64_t total = 0;
    int ep_units = 0;
    for (size_t i = 0; i < units.size(); ++i) {
      const FsdpUnit& u = units[i];
      total += u.NumParams();
      for (const auto& prm : u.params) {
        if (!u.expert_parallel) {
          EXPECT_EQ(prm.name.find(".experts."), std::string::npos) << prm.name;
        }
      }
      if (!u.expert_parallel) continue;
      ++ep_units;
      EXPECT_EQ(u.NumParams(), E / ep * 3 * F * H) << u.name;
      ASSERT_EQ(u.params.size(), 3u);
      EXPECT_EQ(u.params[0].name, u.name + ".w1");
      EXPECT_EQ(u.params[1].dim1, H);  // w2 [E/ep, H, F]
      // Nested in its block: it follows the block's unit (outer first).
      ASSERT_GT(i, 0u);
      EXPECT_EQ(units[i - 1].first_segment, u.first_segment);
      EXPECT_FALSE(units[i - 1].expert_parallel);
    }
    EXPECT_EQ(ep_units, L);
    EXPECT_EQ(total, base_total - L * experts_per_layer * (ep - 1) / ep) << ep;
  }
}

// torchtitan apply_fsdp: Shard(0) over the efsdp ranks while efsdp x ep <= num_experts, else
// Shard(1) (dim 1 padded). Mixtral-8x7B (8 experts, F 14336, H 4096) on a shard group of 32 with
// ep 2: efsdp 16, 16 x 2 > 8, so w1 [4, 14336, 4096] keeps 4 x ceil(14336 / 16) x 4096 per rank
// and w2 [4, 4096, 14336] 4 x ceil(4096 / 16) x 14336. Qwen3 (128 experts) at shard group 8,
// ep 2: efsdp 4, dim 0: ceil(64 / 4) x 768 x 2048.
TEST(ExpertParallelTest, ShardPlacementFollowsTorchtitan) {
  const ModelSpec mix = FindModelPreset("mixtral-8x7b");
  for (const auto& u : BuildFsdpUnits(mix, WrapPolicy{}, 2)) {
    if (!u.expert_parallel) continue;
    EXPECT_TRUE(u.params[0].ShardsDim1(32));
    EXPECT_EQ(u.ShardRanks(32), 16);
    EXPECT_EQ(u.params[0].PaddedShardNumel(32), 4 * ((14336 + 15) / 16) * 4096);
    EXPECT_EQ(u.params[1].PaddedShardNumel(32), 4 * ((4096 + 15) / 16) * 14336);
    EXPECT_EQ(u.params[0].GatheredNumel(32), 16 * u.params[0].PaddedShardNumel(32));
    break;
  }
  const ModelSpec qwen = FindModelPreset("qwen3-30b-a3b");
  for (const auto& u : BuildFsdpUnits(qwen, WrapPolicy{}, 2)) {
    if (!u.expert_parallel) continue;
    EXPECT_FALSE(u.params[0].ShardsDim1(8));
    EXPECT_EQ(u.params[0].PaddedShardNumel(8), (64 + 3) / 4 * 768 * 2048);
    EXPECT_EQ(u.GatheredNumel(8), 64LL * 3 * 768 * 2048);  // no padding: whole local experts
    break;
  }
}

// Per MoE layer and direction: routed_input [T·k, H] in the compute dtype, scaled by the busiest
// rank's load; the count exchange is E int64 values.
TEST(ExpertParallelTest, AllToAllSizesFollowTheShapes) {
  const ModelSpec s = FindModelPreset("qwen3-30b-a3b");  // k 8, H 2048, E 128
  Plan p = EpPlan(4);
  ExpertAllToAll a = ExpertAllToAllPerLayer(s, p, 4096, 1.0);
  EXPECT_EQ(a.dispatch_bytes, 4096LL * 8 * 2048 * 2);
  EXPECT_EQ(a.combine_bytes, a.dispatch_bytes);
  EXPECT_EQ(a.count_bytes, 128 * 8);
  EXPECT_EQ(a.forward_calls, 3);
  EXPECT_EQ(a.backward_calls, 2);
  ExpertAllToAll busy = ExpertAllToAllPerLayer(s, p, 4096, 1.25);
  EXPECT_EQ(busy.received_rows, 4096 * 8 * 5 / 4);
  EXPECT_EQ(busy.dispatch_bytes, busy.received_rows * 2048 * 2);
  EXPECT_EQ(ExpertAllToAllPerLayer(s, EpPlan(1), 4096, 1.0).dispatch_bytes, 0);
}

// torchtitan's dispatch under ep: the tokens the experts save are the permuted copy of the
// all-to-all's output instead of the local reorder's (the same [T·k, H]); the int64
// permutation [T·k] is saved on top (by the permute and the unpermute, one tensor). The
// all-to-all outputs and the unpermuted output live only inside the layer.
TEST(ExpertParallelTest, DispatchSavesThePermutationOnTop) {
  const ModelSpec s = FindModelPreset("qwen3-30b-a3b");
  ActivationOptions o;
  o.modeling = Modeling::kTorchtitan;
  o.seq_len = 4096;
  BlockActivations base = ComputeBlockActivations(s, o);
  o.ep = 4;
  BlockActivations ep = ComputeBlockActivations(s, o);
  EXPECT_DOUBLE_EQ(ep.full.saved_per_token - base.full.saved_per_token, 8.0 * s.moe.top_k);
  // The forward peak holds at least the dispatch output beside the local reorder's tokens.
  EXPECT_GE(ep.full.forward_peak_per_token, base.full.forward_peak_per_token);
  // Under Hugging Face modeling ep is ROLL's ExpertParallel around transformers 5's experts
  // (model/activations.cc RollExpertParallel) instead of transformers' grouped_mm path
  // (HfGroupedExperts). Beside the experts' own saves, per token (k rows, e = 2):
  //   grouped_mm path: token_idx, perm, inv_perm (int64, 24k), the sorted weights (fp32, 4k),
  //                    the sorted rows and the experts' output the weights multiply (2 e H k);
  //   ROLL:            the argsort and its quotient by top_k (int64, 16k), the int32
  //                    permutation (4k), the routing weights bmm saves (fp32, 4k), the permuted
  //                    rows (e H k) and bmm's fp32 copy of the outputs (4 H k).
  // ROLL - grouped_mm = (4 - e) H k - 4k.
  o.modeling = Modeling::kHf;
  BlockActivations roll = ComputeBlockActivations(s, o);
  o.ep = 1;
  const double k = s.moe.top_k, h = s.hidden;
  EXPECT_DOUBLE_EQ(roll.full.saved_per_token - ComputeBlockActivations(s, o).full.saved_per_token,
                   (4 - 2) * h * k - 4 * k);
}

}  // namespace
}  // namespace shardtune::model

namespace shardtune::model {
namespace {

double SavedNamed(const ActivationLedger& l, const std::string& name) {
  double bytes = 0;
  for (const SavedTensor& t : l.saved) {
    if (t.name == name) bytes += t.bytes_per_token;
  }
  return bytes;
}

// torchtitan's MoE (models/common/moe.py, token_dispatcher.py) in bf16 saves, per token of one
// MoE layer: the router's autocast fp32 copy of x (4·H, for the gate's weight gradient), the
// int64 token indices of the expert-sorted rows (8·k), the fp32 copy of the expert outputs the
// score product reads (4·H·k) and the sorted fp32 scores (4·k); transformers' blocks save none of
// these. In fp32 the casts do not exist (the product saves the expert output itself).
TEST(ExpertParallelTest, TorchtitanCombineSavesTheFp32ExpertOutputs) {
  const ModelSpec s = FindModelPreset("qwen3-30b-a3b");
  const double H = static_cast<double>(s.hidden), k = s.moe.top_k;
  ActivationOptions o;
  o.modeling = Modeling::kTorchtitan;
  o.seq_len = 4096;
  const ActivationLedger tt = ComputeBlockActivations(s, o).full;
  EXPECT_DOUBLE_EQ(SavedNamed(tt, "moe.router input to(float32) (autocast)"), 4 * H);
  EXPECT_DOUBLE_EQ(SavedNamed(tt, "moe.token_indices_experts_sorted (int64)"), 8 * k);
  EXPECT_DOUBLE_EQ(SavedNamed(tt, "moe.expert output to(float32)"), 4 * H * k);
  EXPECT_DOUBLE_EQ(SavedNamed(tt, "moe.topk_scores_experts_sorted (fp32)"), 4 * k);
  o.modeling = Modeling::kHf;
  const ActivationLedger hf = ComputeBlockActivations(s, o).full;
  EXPECT_EQ(SavedNamed(hf, "moe.expert output to(float32)"), 0);
  EXPECT_EQ(SavedNamed(hf, "moe.router input to(float32) (autocast)"), 0);
  o.modeling = Modeling::kTorchtitan;
  o.dtype = DType::kFp32;
  const ActivationLedger fp32 = ComputeBlockActivations(s, o).full;
  EXPECT_EQ(SavedNamed(fp32, "moe.expert output to(float32)"), 0);
  EXPECT_EQ(SavedNamed(fp32, "moe.router input to(float32) (autocast)"), 0);
}

}  // namespace
}  // namespace shardtune::model
