// What-if comparisons and advice: the sentences follow from the report's figures.
#include "planner/advice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/presets.h"
#include "model/text.h"
#include "planner/offload_advisor.h"
#include "profiles/cluster.h"

namespace shardtune::planner {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using model::GiBText;

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Llama-2-70B on 4 RTX 4090s: 16 bytes x 69B params / 4 ranks = 276 GB of model states per GPU
// without offload, far above 24 GB; only offloading everything with checkpointing leaves the GPU
// with gathered units and activations, and the host must then hold 16 bytes per parameter.
TEST(AdviceTest, Llama70bOnFour4090sNeedsFullOffloadAndATerabyteOfHostRam) {
  auto spec = model::FindModelPreset("llama2-70b");
  auto cluster = profiles::ParseClusterShorthand("4xRTX4090");
  model::Plan p;
  p.seq_len = 4096;
  sim::MemoryOptions o;
  auto alts = CompareOffloadAndCheckpointing(spec, cluster, p, o);
  ASSERT_EQ(alts.size(), 6u);
  int gpu_fitting = 0;
  for (const auto& a : alts) gpu_fitting += a.gpu_fits;
  EXPECT_EQ(gpu_fitting, 1);
  EXPECT_TRUE(alts.back().gpu_fits);  // offload all, checkpointing full
  EXPECT_GE(static_cast<double>(alts.back().host_peak_per_node.count()), 16.0 * 68'976'648'192.0);
  auto r = sim::EstimateMemory(spec, cluster, p, o);
  EXPECT_FALSE(r.fits);
  EXPECT_THAT(Joined(AdviseOnMemory(p, r, alts)), HasSubstr("Only offload all with checkpointing full"));
}

TEST(AdviceTest, OffloadNeverRaisesGpuMemory) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 2048;
  auto alts = CompareOffloadAndCheckpointing(spec, cluster, p, sim::MemoryOptions{});
  // order: (none, none), (none, full), (optimizer, none), (optimizer, full), (all, none), (all, full)
  EXPECT_LE(alts[2].gpu_required, alts[0].gpu_required);
  EXPECT_LE(alts[4].gpu_required, alts[2].gpu_required);
  EXPECT_LE(alts[1].gpu_required, alts[0].gpu_required);
}

TEST(AdviceTest, SizeWrapPolicyHugeUnitIsNamed) {
  auto spec = model::FindModelPreset("llama2-7b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 1024;
  p.wrap = model::ParseWrapSpec("size:100M", "--wrap");
  auto r = sim::EstimateMemory(spec, cluster, p);
  EXPECT_THAT(Joined(AdviseOnMemory(p, r, {})), HasSubstr("Unit model holds"));
  model::Plan block = p;
  block.wrap = model::WrapPolicy{};
  EXPECT_THAT(Joined(AdviseOnMemory(block, sim::EstimateMemory(spec, cluster, block), {})),
              ::testing::Not(HasSubstr("wrap policy left")));
}

TEST(AdviceTest, LossPeakIsExplained) {
  auto spec = model::FindModelPreset("llama3-8b");  // V = 128256: the loss path dominates
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 8192;
  p.checkpointing = model::Checkpointing::kFull;
  auto r = sim::EstimateMemory(spec, cluster, p);
  ASSERT_THAT(r.peak_phase, HasSubstr("loss"));
  EXPECT_THAT(Joined(AdviseOnMemory(p, r, {})), HasSubstr("12 bytes per vocabulary entry"));
  // With the fused loss evaluated, the advice quotes its peak, which is the same plan's estimate
  // with loss_kernel fused_linear.
  FusedLossAlternative fused = CompareFusedLoss(spec, cluster, p, sim::MemoryOptions{});
  ASSERT_TRUE(fused.evaluated);
  model::Plan q = p;
  q.loss_kernel = model::LossKernel::kFusedLinear;
  auto rq = sim::EstimateMemory(spec, cluster, q);
  EXPECT_EQ(fused.peak_allocated, rq.peak_allocated);
  EXPECT_LT(fused.peak_allocated, r.peak_allocated);
  EXPECT_THAT(Joined(AdviseOnMemory(p, r, {}, fused)),
              AllOf(HasSubstr("--loss-kernel fused_linear"),
                    HasSubstr("lowers the peak to " + GiBText(rq.peak_allocated))));
  // Not offered where the plan cannot use it: logits held by the caller.
  q = p;
  q.keep_logits = true;
  EXPECT_FALSE(CompareFusedLoss(spec, cluster, q, sim::MemoryOptions{}).evaluated);
}

// llama3-8b (as Llama-3.1-8B) at 65,536 tokens with full checkpointing: the loss path alone is
// 12·V·S = 100.9e9 B per rank, above the H100's 84.9e9 B, so the plan cannot fit and most of the
// peak scales with the rank's tokens; the advice names Ulysses cp. With cp 4 it fits (the search
// test bounds it) and the sentence is gone.
TEST(AdviceTest, TokenBoundPeakSuggestsContextParallelism) {
  auto spec = model::FindModelPreset("llama3-8b");
  spec.max_seq_len = 131072;
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 65536;
  p.checkpointing = model::Checkpointing::kFull;
  auto r = sim::EstimateMemory(spec, cluster, p);
  ASSERT_FALSE(r.fits);
  EXPECT_THAT(Joined(AdviseOnMemory(p, r, {})), HasSubstr("Ulysses context parallelism (--cp N"));
  p.cp = 4;
  auto r4 = sim::EstimateMemory(spec, cluster, p);
  EXPECT_TRUE(r4.fits);
  EXPECT_THAT(Joined(AdviseOnMemory(p, r4, {})), ::testing::Not(HasSubstr("Ulysses")));
}

// LoRA freezes the base: its fp32 shards are 4 bytes x 8.03 B / 8 = 3.7 GiB per rank of the
// ~20 GiB peak at 2048 tokens, more than a tenth, so the advice names them; a full fine-tune has
// no frozen shards to name.
TEST(AdviceTest, FrozenFp32ShardsAreNamed) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 2048;
  p.checkpointing = model::Checkpointing::kFull;
  model::Plan lora = p;
  lora.lora.rank = 16;
  lora.lora.targets = {"q_proj", "v_proj"};
  auto r = sim::EstimateMemory(spec, cluster, lora);
  ASSERT_LT(r.peak_allocated.count(), 10 * r.sharded_params.count());
  EXPECT_THAT(Joined(AdviseOnMemory(lora, r, {})), HasSubstr("Frozen parameters keep"));
  EXPECT_THAT(Joined(AdviseOnMemory(lora, r, {})), HasSubstr("--frozen-dtype bf16"));
  EXPECT_THAT(Joined(AdviseOnMemory(p, sim::EstimateMemory(spec, cluster, p), {})),
              ::testing::Not(HasSubstr("Frozen parameters keep")));
  // Loaded in bf16 already: nothing to advise.
  model::Plan bf16 = lora;
  bf16.frozen_dtype = model::DType::kBf16;
  EXPECT_THAT(Joined(AdviseOnMemory(bf16, sim::EstimateMemory(spec, cluster, bf16), {})),
              ::testing::Not(HasSubstr("Frozen parameters keep")));
}

// A packed row of B x S tokens holding sequences of S costs what B padded sequences of S cost
// under SDPA: every saved tensor is per token and flash attention's working set is linear in
// them (Plan::packed_seq_len). verl's GRPO example for Qwen3-8B (examples/grpo_trainer/
// run_qwen3-8b.sh: micro-batch 32, 512 + 1024 tokens, checkpointing) on 8 H100s.
model::Plan VerlGrpoQwen3() {
  model::Plan p;
  p.micro_batch = 32;
  p.seq_len = 1536;
  p.grad_accum = 5;
  p.checkpointing = model::Checkpointing::kFull;
  p.loss_kernel = model::LossKernel::kVerlFlashCe;
  p.loss_fp32_upcast = false;
  return p;
}

// The advice on `p` for Qwen3-8B on 8 H100s, where the loss head's backward must be the peak (the
// verl head tests' premise).
void VerlHeadAdvice(const model::Plan& p, std::string* advice) {
  auto spec = model::FindModelPreset("qwen3-8b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  auto r = sim::EstimateMemory(spec, cluster, p, sim::MemoryOptions{});
  ASSERT_THAT(r.peak_phase, HasSubstr("loss"));
  *advice = Joined(AdviseOnMemory(p, r, {}));
}

// verl's padded log-prob head (use_remove_padding false): with 16 sequences of 512 + 1024 the
// head's backward (two [16 x 1536, 151,936] bf16 tensors, 14 GiB) is the peak, and the advice
// names what verl itself offers, not the HF path's fp32 log-softmax.
TEST(AdviceTest, VerlPaddedHeadAdviceNamesRemovePadding) {
  model::Plan p = VerlGrpoQwen3();
  p.micro_batch = 16;
  p.loss_kernel = model::LossKernel::kVerlPaddedCe;
  p.response_len = 1024;
  p.padding_mask = true;
  std::string advice;
  ASSERT_NO_FATAL_FAILURE(VerlHeadAdvice(p, &advice));
  EXPECT_THAT(advice, AllOf(HasSubstr("without use_remove_padding"),
                            HasSubstr("use_remove_padding: true")));
  EXPECT_THAT(advice, ::testing::Not(HasSubstr("fp32 log-softmax")));
}

// verl's fused torch head (use_fused_kernels): its backward holds the head weight's gradient and
// two [V, H] products at once, 3 x 1.16 GiB for Qwen3-8B, whatever the micro-batch; with a small
// micro-batch that is the peak, and the advice says so instead of the fp32 log-softmax or the
// four [tokens, V] tensors of verl's flash-attn head.
TEST(AdviceTest, VerlFusedHeadAdviceNamesItsFixedBuffers) {
  model::Plan p = VerlGrpoQwen3();
  p.micro_batch = 4;
  p.loss_kernel = model::LossKernel::kVerlFusedTorch;
  std::string advice;
  ASSERT_NO_FATAL_FAILURE(VerlHeadAdvice(p, &advice));
  EXPECT_THAT(advice, AllOf(HasSubstr("verl's fused log-prob head"), HasSubstr("chunk before's")));
  EXPECT_THAT(advice, ::testing::Not(HasSubstr("fp32 log-softmax")));
  EXPECT_THAT(advice, ::testing::Not(HasSubstr("CopySlices")));
}

// Advice that was checked (issue #49 item 7): a suggested change is re-estimated before it is
// printed. Llama-3-8B at 2 x 16384 tokens without checkpointing: the activations line quotes
// the same plan with --checkpointing full, as EstimateMemory gives it; a change whose
// re-estimate does not lower the required memory is not suggested at all.
TEST(AdviceTest, SuggestedChangesQuoteTheirReEstimate) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 16384;
  p.micro_batch = 2;
  const sim::MemoryOptions opt;
  auto r = sim::EstimateMemory(spec, cluster, p, opt);
  ASSERT_FALSE(r.fits);
  const ChangeChecker check = [&](AdvisedChange c) { return CheckAdvisedChange(spec, cluster, p, opt, c); };
  model::Plan full = p;
  full.checkpointing = model::Checkpointing::kFull;
  const Bytes want = sim::EstimateMemory(spec, cluster, full, opt).required;
  std::string advice = Joined(AdviseOnMemory(p, r, {}, {}, "", check));
  EXPECT_THAT(advice, HasSubstr("--checkpointing full keeps only each block's input. Re-estimated with "
                                "--checkpointing full: " + GiBText(want) + " required"));
  EXPECT_THAT(advice, HasSubstr("Re-estimated with --cp 2: "));
  // A checker whose answer is no better than the plan: the suggestions go.
  const ChangeChecker useless = [&](AdvisedChange c) {
    CheckedChange out = CheckAdvisedChange(spec, cluster, p, opt, c);
    if (out.evaluated) out.required = r.required;
    return out;
  };
  advice = Joined(AdviseOnMemory(p, r, {}, {}, "", useless));
  EXPECT_THAT(advice, ::testing::Not(HasSubstr("--checkpointing full keeps")));
  EXPECT_THAT(advice, ::testing::Not(HasSubstr("Ulysses context parallelism")));
  // Without a checker (run's pre-flight line) the suggestion stays, unchecked.
  EXPECT_THAT(Joined(AdviseOnMemory(p, r, {})), AllOf(HasSubstr("--checkpointing full keeps"),
                                                      ::testing::Not(HasSubstr("Re-estimated"))));
}

// With checkpointing already on, saved activations that still make most of the peak hear of verl's
// activation offload, quoted as re-estimated with its host RAM; without checkpointing the
// checkpointing line comes instead (it costs no host RAM).
TEST(AdviceTest, CheckpointedPlanHearsOfActivationOffloadWithItsHostRam) {
  auto spec = model::FindModelPreset("llama3-8b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p;
  p.seq_len = 4096;
  p.micro_batch = 64;
  p.checkpointing = model::Checkpointing::kFull;
  p.loss_kernel = model::LossKernel::kVerlFusedTriton;
  const sim::MemoryOptions opt;
  auto r = sim::EstimateMemory(spec, cluster, p, opt);
  ASSERT_FALSE(r.fits);
  model::Plan off = p;
  off.activation_offload = model::ActivationOffload::kVerlAsync;
  const sim::MemoryReport ro = sim::EstimateMemory(spec, cluster, off, opt);
  ASSERT_LT(ro.required, r.required);
  const ChangeChecker check = [&](AdvisedChange c) { return CheckAdvisedChange(spec, cluster, p, opt, c); };
  EXPECT_THAT(Joined(AdviseOnMemory(p, r, {}, {}, "", check)),
              AllOf(HasSubstr("--activation-offload verl_async (verl's enable_activation_offload)"),
                    HasSubstr("Re-estimated with it: " + GiBText(ro.required) + " required"),
                    HasSubstr("host RAM " + GiBText(ro.host.peak_per_node) + " per node")));
  model::Plan none = p;
  none.checkpointing = model::Checkpointing::kNone;
  const ChangeChecker check_none = [&](AdvisedChange c) { return CheckAdvisedChange(spec, cluster, none, opt, c); };
  EXPECT_THAT(Joined(AdviseOnMemory(none, sim::EstimateMemory(spec, cluster, none, opt), {}, {}, "", check_none)),
              ::testing::Not(HasSubstr("--activation-offload")));
}

TEST(TokenCapacityTest, APackedRowCostsWhatItsPaddedSequencesCost) {
  auto spec = model::FindModelPreset("qwen3-8b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan padded = VerlGrpoQwen3();
  model::Plan packed = padded;
  packed.micro_batch = 1;
  packed.seq_len = 32 * 1536;
  packed.packed_seq_len = 1536;
  sim::MemoryOptions o;
  auto a = sim::EstimateMemory(spec, cluster, padded, o);
  auto b = sim::EstimateMemory(spec, cluster, packed, o);
  EXPECT_EQ(a.peak_allocated.count(), b.peak_allocated.count());
}

// The capacity is the edge of the verdict: the most tokens fits, one step (cp x tiles) more does
// not; the plan's own 49,152-token micro-batch is past it (its worst case does not fit, as
// verl's four [T, V] bf16 tensors at the head's backward need 8 x 151,936 bytes per token).
TEST(TokenCapacityTest, MaxTokensFitsAndOneStepMoreDoesNot) {
  auto spec = model::FindModelPreset("qwen3-8b");
  auto cluster = profiles::ParseClusterShorthand("8xH100");
  model::Plan p = VerlGrpoQwen3();
  sim::MemoryOptions o;
  TokenCapacity c = LargestFittingMicroBatchTokens(spec, cluster, p, o);
  ASSERT_TRUE(c.evaluated);
  EXPECT_EQ(c.plan_tokens, 32 * 1536);
  EXPECT_EQ(c.longest_sequence, 1536);
  ASSERT_GT(c.max_tokens, 1536);
  EXPECT_LT(c.max_tokens, c.plan_tokens);
  EXPECT_FALSE(sim::EstimateMemory(spec, cluster, p, o).fits);
  auto row = [&](int64_t t) {
    model::Plan q = p;
    q.micro_batch = 1;
    q.seq_len = t;
    q.packed_seq_len = 1536;
    return sim::EstimateMemory(spec, cluster, q, o);
  };
  auto at = row(c.max_tokens);
  EXPECT_TRUE(at.fits);
  EXPECT_EQ(at.required.count(), c.required_at_max.count());
  EXPECT_FALSE(row(c.max_tokens + 1).fits);
  // The typical micro-batch at a mean length of 900 tokens: 32 x 900 packed tokens, judged as
  // such a row is; a token budget's rows stay full whatever the lengths.
  TokenCapacity typical = LargestFittingMicroBatchTokens(spec, cluster, p, o, 900);
  EXPECT_EQ(typical.typical_tokens, 32 * 900);
  auto at900 = row(32 * 900);
  EXPECT_EQ(typical.typical_fits, at900.fits);
  EXPECT_EQ(typical.typical_required.count(), at900.required.count());
  EXPECT_EQ(typical.max_tokens, c.max_tokens);
  model::Plan budget = p;
  budget.micro_batch = 1;
  budget.seq_len = 16384;
  budget.packed_seq_len = 1536;
  EXPECT_EQ(LargestFittingMicroBatchTokens(spec, cluster, budget, o, 900).typical_tokens, 16384);
  // A plan that is neither packed nor verl's is not evaluated.
  model::Plan hf;
  hf.seq_len = 1536;
  EXPECT_FALSE(LargestFittingMicroBatchTokens(spec, cluster, hf, o).evaluated);
}

}  // namespace
}  // namespace shardtune::planner
