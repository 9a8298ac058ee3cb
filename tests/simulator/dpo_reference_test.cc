// TRL DPO's step (model/plan.h InStepReference, LossKernel::kTrlLogps): the per-token log-probs
// head and the reference model's no_grad forward inside each micro-batch, after the policy's
// forward and before its backward. Expected figures from the ledgers' rules and FSDP's:
// - the head: TRL's bf16 selective_log_softmax saves each row's log-softmax in bf16 where HF's
//   cross-entropy saves the fp32 one (2V bytes per token fewer), and under no_grad holds one
//   row's at a time;
// - the reference copy: its shards are each parameter's padded shard in the frozen dtype; under
//   FSDP2 (prepare_fsdp shards the root only) its forward holds the whole model gathered and its
//   logits at once, beside the policy's persistent states and logits; under FSDP1 a block at a
//   time.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "model/activations.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "model/trainable.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"
#include "tests/simulator/memory_test_util.h"

namespace shardtune::sim {
namespace {

using memtest::CategoryPeak;
using memtest::R512;

model::Plan DpoPlan(model::InStepReference ref) {
  model::Plan p;
  p.micro_batch = 4;  // two preference pairs: chosen and rejected rows
  p.seq_len = 1024;
  p.checkpointing = model::Checkpointing::kFull;
  p.loss_kernel = model::LossKernel::kTrlLogps;
  p.frozen_dtype = model::DType::kBf16;
  p.reference = ref;
  return p;
}

TEST(DpoReferenceTest, LogpsHeadSavesBf16RowsAndHoldsOneRowUnderNoGrad) {
  const model::ModelSpec s = model::FindModelPreset("llama3-8b");
  const double v = static_cast<double>(s.vocab_size);
  model::Plan ce = DpoPlan(model::InStepReference::kNone);
  ce.loss_kernel = model::LossKernel::kCrossEntropy;
  const model::Plan dpo = DpoPlan(model::InStepReference::kNone);
  const auto h_ce = model::ComputeHeadActivations(s, model::ActivationOptionsFor(ce, 1024));
  const auto h_dpo = model::ComputeHeadActivations(s, model::ActivationOptionsFor(dpo, 1024));
  EXPECT_DOUBLE_EQ(h_dpo.saved_per_token - h_ce.saved_per_token, 2 * v - 4 * v);
  // Under no_grad (the reference's plan) one row's log-softmax [S, V] at a time: 2V / rows.
  model::Plan ref2 = DpoPlan(model::InStepReference::kFsdp2Root).ReferencePlan();
  ref2.micro_batch = 2;
  model::Plan ref4 = ref2;
  ref4.micro_batch = 4;
  const auto n2 = model::ComputeHeadActivations(s, model::ActivationOptionsFor(ref2, 1024));
  const auto n4 = model::ComputeHeadActivations(s, model::ActivationOptionsFor(ref4, 1024));
  EXPECT_DOUBLE_EQ(n2.forward_peak_per_token - n4.forward_peak_per_token, 2 * v / 2 - 2 * v / 4);
}

TEST(DpoReferenceTest, Fsdp2ReferenceGathersTheWholeCopyBesideThePolicy) {
  const model::ModelSpec s = model::FindModelPreset("llama3-8b");
  const auto c = profiles::ParseClusterShorthand("8xH100");
  const model::Plan plan = DpoPlan(model::InStepReference::kFsdp2Root);
  const MemoryReport a = EstimateMemory(s, c, plan, {});
  const MemoryReport none = EstimateMemory(s, c, DpoPlan(model::InStepReference::kNone), {});
  // The copy's shards: every parameter's padded shard over 8 ranks in bf16, one allocation each.
  const model::Plan ref = plan.ReferencePlan();
  int64_t shards = 0, params = 0;
  for (const auto& u : model::BuildFsdpUnits(s, ref.wrap, 1)) {
    for (const auto& prm : u.params) {
      shards += R512(prm.PaddedShardNumel(8) * 2);
      params += prm.numel();
    }
  }
  EXPECT_EQ(CategoryPeak(a, Category::kReferenceParams).count(), shards);
  EXPECT_EQ(CategoryPeak(none, Category::kReferenceParams).count(), 0);
  // Its forward: the whole model gathered in bf16 and, at the head, its logits [4, 1024, V] bf16.
  const int64_t logits = int64_t{4} * 1024 * s.vocab_size * 2;
  EXPECT_GE(CategoryPeak(a, Category::kReference).count(), 2 * params + logits);
  // ... at a moment when the policy's persistent states, the copy's shards and the policy's own
  // logits (bf16, held by DPOTrainer's `outputs` through the reference's forward) are alive too.
  EXPECT_GE(a.peak_allocated.count(),
            CategoryPeak(a, Category::kReference).count() + shards + none.model_state.count() + logits);
  EXPECT_GT(a.peak_allocated.count(), none.peak_allocated.count());
}

TEST(DpoReferenceTest, Fsdp1ReferenceGathersABlockAtATimeAndAdaptersOffHasNoCopy) {
  const model::ModelSpec s = model::FindModelPreset("llama3-8b");
  const auto c = profiles::ParseClusterShorthand("8xH100");
  const MemoryReport root = EstimateMemory(s, c, DpoPlan(model::InStepReference::kFsdp2Root), {});
  const MemoryReport blocks = EstimateMemory(s, c, DpoPlan(model::InStepReference::kFsdp1Blocks), {});
  // The same shards, a smaller forward: a block (and the root, kept) gathered instead of all.
  EXPECT_EQ(CategoryPeak(blocks, Category::kReferenceParams).count(),
            CategoryPeak(root, Category::kReferenceParams).count());
  EXPECT_LT(CategoryPeak(blocks, Category::kReference).count(), CategoryPeak(root, Category::kReference).count());
  // FSDP1 keeps the copy's root (embeddings, final norm, head) gathered after its forward.
  const model::Plan ref = DpoPlan(model::InStepReference::kFsdp1Blocks).ReferencePlan();
  int64_t root_params = 0;
  for (const auto& u : model::BuildFsdpUnits(s, ref.wrap, 1)) {
    if (!u.is_root) continue;
    for (const auto& prm : u.params) root_params += prm.numel();
  }
  EXPECT_GE(CategoryPeak(blocks, Category::kReference).count(), 2 * root_params);
  // LoRA with the adapters off: the policy's own units, no copy.
  model::Plan lora = DpoPlan(model::InStepReference::kAdaptersOff);
  lora.lora.rank = 16;
  lora.lora.targets = {"q_proj", "v_proj"};
  const MemoryReport off = EstimateMemory(s, c, lora, {});
  EXPECT_EQ(CategoryPeak(off, Category::kReferenceParams).count(), 0);
  EXPECT_GT(CategoryPeak(off, Category::kReference).count(), int64_t{4} * 1024 * s.vocab_size * 2);
}

}  // namespace
}  // namespace shardtune::sim
