// Memory model: model states equal the ZeRO paper's formulas up to FSDP2's padding; the walk
// follows FSDP2's allocation rules (each expected value is derived here from those rules).
#include "simulator/memory_model.h"
#include "tests/simulator/memory_test_util.h"
#include "tests/simulator/random_plan.h"

#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

#include "model/activations.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_report_json.h"

namespace shardtune::sim {
namespace {

using memtest::CategoryPeak;
using memtest::R512;

using model::FindModelPreset;
using model::Plan;

// CUDACachingAllocator rounds every block to 512 bytes.
int64_t PaddedShard(const model::ModelSpec& s, const model::WrapPolicy& w, int n) {
  int64_t t = 0;
  for (const auto& u : model::BuildFsdpUnits(s, w)) {
    for (const auto& p : u.params) t += (p.dim0 + n - 1) / n * p.inner;
  }
  return t;
}

int64_t PhasePeak(const MemoryReport& r, const std::string& prefix) {
  int64_t p = 0;
  for (const auto& t : r.timeline) {
    if (t.phase.rfind(prefix, 0) == 0) p = std::max(p, t.allocated_peak.count());
  }
  return p;
}

Plan Short(int64_t seq = 1) {
  Plan p;
  p.seq_len = seq;
  return p;
}

// Rajbhandari et al. 2020 (ZeRO), section 3.1 and Figure 1: mixed-precision Adam keeps
// 2Ψ + 2Ψ + 12Ψ = 16Ψ bytes per data-parallel rank; ZeRO-3 (P_os+g+p) divides all of it by N.
// FSDP2 keeps fp32 shards (4) + fp32 grads (4) + two fp32 moments (8): the same 16 per param.
TEST(MemoryModelTest, FullShardModelStatesAreSixteenPsiOverN) {
  auto s = FindModelPreset("llama2-7b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  auto r = EstimateMemory(s, c, Short());
  double psi = 6'738'415'616.0;
  EXPECT_EQ(r.model_state.count(), 16 * PaddedShard(s, model::WrapPolicy{}, 8));
  EXPECT_NEAR(static_cast<double>(r.model_state.count()), 16 * psi / 8, 16 * psi / 8 * 1e-4);
}

TEST(MemoryModelTest, NoShardModelStatesAreSixteenPsi) {
  auto s = FindModelPreset("llama2-7b");
  Plan p = Short();
  p.strategy = model::ShardingStrategy::kNoShard;
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("8xH100"), p);
  EXPECT_EQ(r.model_state.count(), 16 * 6'738'415'616LL);
  EXPECT_EQ(r.shard_group, 1);
}

TEST(MemoryModelTest, HybridShardDividesByShardGroupOnly) {
  auto s = FindModelPreset("llama3-8b");
  Plan p = Short();
  p.strategy = model::ShardingStrategy::kHybridShard;
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("2x8xH100"), p);
  EXPECT_EQ(r.shard_group, 8);
  EXPECT_EQ(r.replicas, 2);
  EXPECT_EQ(r.model_state.count(), 16 * PaddedShard(s, p.wrap, 8));
}

// Step 0's optimizer step: AdamW state is created lazily (8 bytes per shard element), then
// foreach AdamW's exp_avg_sq.sqrt() adds 4 more; grads (4) and params (4) are live: 20 bytes.
TEST(MemoryModelTest, FirstOptimizerStepHoldsTwentyBytesPerShardElement) {
  auto s = FindModelPreset("llama2-7b");
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("8xH100"), Short());
  int64_t expected = 0, total = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) {
    int64_t shard = u.PaddedShardNumel(8);
    expected += R512(4 * shard) * 2;  // params and grads, one buffer per unit each
    total += shard;
  }
  expected += R512(8 * total) + R512(4 * total);
  expected += MemoryConstants{}.cublas_workspace.count();  // 32 MiB, allocated at start-up
  EXPECT_EQ(PhasePeak(r, "step 0 · optimizer step"), expected);
}

TEST(MemoryModelTest, LedgerEndsAtParamsPlusOptimizerState) {
  auto s = FindModelPreset("tiny-llama");
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("4xH100"), Short(64));
  ASSERT_FALSE(r.timeline.empty());
  int64_t units = 0, total = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) {
    units += R512(4 * u.PaddedShardNumel(4));
    total += u.PaddedShardNumel(4);
  }
  EXPECT_EQ(r.timeline.back().allocated_after.count(),
            units + R512(8 * total) + MemoryConstants{}.cublas_workspace.count());
}

// CPU ranks have no cuBLAS: the same job on cpu:4 ends 32 MiB lower than on 4 GPUs.
TEST(MemoryModelTest, CublasWorkspaceOnlyOnGpus) {
  auto s = FindModelPreset("tiny-llama");
  auto gpu = EstimateMemory(s, profiles::ParseClusterShorthand("4xH100"), Short(64));
  auto cpu = EstimateMemory(s, profiles::ParseClusterShorthand("cpu:4"), Short(64));
  EXPECT_EQ(gpu.timeline.back().allocated_after - cpu.timeline.back().allocated_after,
            MemoryConstants{}.cublas_workspace);
}

// Step 1's backward sees the optimizer state step 0's backward did not: "step 1 runs out where
// step 0 fit". With activations dominating, the difference is exactly the state.
TEST(MemoryModelTest, SteadyStepBackwardCarriesOptimizerState) {
  auto s = FindModelPreset("llama3-8b");
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("8xH100"), Short(8192));
  int64_t d = PhasePeak(r, "step 1 · micro-batch 1/1 · backward") -
              PhasePeak(r, "step 0 · micro-batch 1/1 · backward");
  EXPECT_EQ(d, R512(8 * PaddedShard(s, model::WrapPolicy{}, 8)));
  EXPECT_GT(r.steady_peak, r.step0_peak);
}

// FULL_SHARD per block: at most the root (never resharded after forward) and one block are
// unsharded at once; the prefetched block waits in the all-gather buffer, not as params.
TEST(MemoryModelTest, FullShardGathersRootPlusOneBlock) {
  auto s = FindModelPreset("llama3-8b");
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("8xH100"), Short(512));
  auto units = model::BuildFsdpUnits(s, model::WrapPolicy{});
  int64_t root = R512(units.front().PaddedShardNumel(8) * 8 * 2);
  int64_t block = R512(units[1].PaddedShardNumel(8) * 8 * 2);
  EXPECT_EQ(CategoryPeak(r, "gathered (unsharded) parameters").count(), root + block);
}

// One rank, fp32 parameters (no cast): FSDP2 still unshards into separate tensors
// (_fsdp_param_group.py wait_for_unshard on a one-rank group copies _sharded_param_data into
// all_gather_outputs[0]; before torch 2.9 the all-gather's copy-out did), so the root plus one
// block are gathered in fp32 beside their shards, as on eight ranks in bf16.
TEST(MemoryModelTest, OneRankFp32StillGathersIntoSeparateParameters) {
  auto s = FindModelPreset("llama3.2-1b");
  Plan p = Short(512);
  p.param_dtype = model::DType::kFp32;
  p.reduce_dtype = model::DType::kFp32;
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("1xH100"), p);
  auto units = model::BuildFsdpUnits(s, model::WrapPolicy{});
  int64_t root = R512(units.front().PaddedShardNumel(1) * 4);
  int64_t block = R512(units[1].PaddedShardNumel(1) * 4);
  EXPECT_EQ(CategoryPeak(r, "gathered (unsharded) parameters").count(), root + block);
}

// SHARD_GRAD_OP keeps every unit gathered from its forward to its backward.
TEST(MemoryModelTest, ShardGradOpGathersWholeModel) {
  auto s = FindModelPreset("llama3-8b");
  Plan p = Short(512);
  p.strategy = model::ShardingStrategy::kShardGradOp;
  p.reshard_after_forward = false;
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("8xH100"), p);
  int64_t all = 0;
  for (const auto& u : model::BuildFsdpUnits(s, p.wrap)) all += R512(u.PaddedShardNumel(8) * 8 * 2);
  EXPECT_EQ(CategoryPeak(r, "gathered (unsharded) parameters").count(), all);
}

// no_sync with an fp32 reduce dtype: to_accumulated_grad_if_needed keeps fp32 unsharded grads
// of every parameter (4Ψ) until the syncing micro-batch.
TEST(MemoryModelTest, NoSyncKeepsFullFp32Gradients) {
  auto s = FindModelPreset("llama3-8b");
  Plan p = Short(256);
  p.grad_accum = 2;
  p.no_sync = true;
  auto r = EstimateMemory(s, profiles::ParseClusterShorthand("8xH100"), p);
  int64_t expected = 0;
  for (const auto& u : model::BuildFsdpUnits(s, p.wrap)) expected += R512(4 * u.NumParams());
  EXPECT_EQ(CategoryPeak(r, "no_sync accumulated gradients").count(), expected);
  Plan sync = p;
  sync.no_sync = false;
  EXPECT_EQ(CategoryPeak(EstimateMemory(s, profiles::ParseClusterShorthand("8xH100"), sync),
                         "no_sync accumulated gradients").count(), 0);
}

TEST(MemoryModelTest, OffloadAllMovesModelStatesToHost) {
  auto s = FindModelPreset("llama2-70b");
  auto c = profiles::ParseClusterShorthand("4xRTX4090");
  Plan p = Short(4096);
  p.offload = model::Offload::kAll;
  p.checkpointing = model::Checkpointing::kFull;
  MemoryOptions o;
  o.model_load = ModelLoad::kMeta;
  auto r = EstimateMemory(s, c, p, o);
  EXPECT_EQ(r.model_state.count(), 0);
  // 16 bytes per parameter on the host, over the node's 4 ranks: 16Ψ (within padding).
  double host_states = 16.0 * 68'976'648'192.0;
  EXPECT_GE(static_cast<double>(r.host.peak_per_node.count()), host_states * 0.999);
  EXPECT_FALSE(r.host.fits);  // a 4090 workstation does not have ~1 TiB of RAM
}

TEST(MemoryModelTest, OutsideAllocatorCountsCommunicators) {
  auto s = FindModelPreset("tiny-llama");
  auto one = EstimateMemory(s, profiles::ParseClusterShorthand("1xH100"), Short(16));
  EXPECT_EQ(one.outside_allocator.size(), 1u);  // the CUDA context only
  Plan h = Short(16);
  h.strategy = model::ShardingStrategy::kHybridShard;
  auto hsdp = EstimateMemory(s, profiles::ParseClusterShorthand("2x8xH100"), h);
  int nccl = 0;
  for (const auto& kv : hsdp.outside_allocator) nccl += kv.first.rfind("NCCL buffers", 0) == 0;
  EXPECT_EQ(nccl, 2);  // shard group and replicate group
  EXPECT_EQ(hsdp.required, hsdp.peak_allocated + hsdp.fragmentation + hsdp.outside_total);
}

// Properties over random plans (seed from SHARDTUNE_TEST_SEED): more tokens never need less
// memory; full checkpointing never needs more than none; the result is deterministic.
// verl's fused torch head (model/activations.cc VerlFusedTorchHead) in the walk: the head's
// backward adds, on top of what the ledger has live at its node, a chunk of 512 rows at its
// weight GEMM (14 bytes per vocabulary entry per row, the chunk's dhidden 2H per row and the
// [V, H] bf16 product) and, from the second chunk on, the chunk before's product and dhidden.
// The entropy's gradient keeps log_probs too: 4 more bytes per entry per row at that moment, so
// the head's backward peak grows by exactly 4 V x 512 bytes (rounded as the allocator rounds).
// Qwen3-8B, 4096 tokens per micro-batch (8 chunks), where 14V x 512 + 2H x 512 + 2VH exceeds
// 20V x 512 (the row moment) with and without the entropy (18V x 512 + ... > 28V x 512).
TEST(MemoryModelTest, VerlFusedTorchHeadEntropyGradientAddsFourBytesPerEntryPerChunkRow) {
  auto s = FindModelPreset("qwen3-8b");
  Plan p = Short(4096);
  p.loss_kernel = model::LossKernel::kVerlFusedTorch;
  p.loss_fp32_upcast = false;
  auto c = profiles::ParseClusterShorthand("8xH100");
  const double v = 151936, h = 4096;
  ASSERT_GT(14 * v * 512 + 2 * h * 512 + 2 * v * h, 20 * v * 512);
  ASSERT_GT(18 * v * 512 + 2 * h * 512 + 2 * v * h, 28 * v * 512);
  auto plain = EstimateMemory(s, c, p);
  p.entropy_from_logits = true;
  auto ent = EstimateMemory(s, c, p);
  const std::string head = "step 1 · micro-batch 1/1 · backward · LM head and loss";
  const int64_t d = PhasePeak(ent, head) - PhasePeak(plain, head);
  EXPECT_NEAR(static_cast<double>(d), 4 * v * 512, 1024.0);
  // Against verl's flash-attn head, whose backward peaks at CopySlices with four [T, V] bf16
  // tensors (8V T) before the head weight's gradient exists: at 16384 tokens the fused head's
  // peak is below it by those less the fused head's own: the weight's gradient, this chunk's and
  // the chunk before's [V, H] products (3 x 2VH), the chunk's 14V + 2H bytes per row and its
  // dhidden carried (2H per row), and the input's gradient (2H per token); within the
  // allocator's rounding and the few bytes per token of [T] vectors.
  p.entropy_from_logits = false;
  p.micro_batch = 4;
  auto fused16k = EstimateMemory(s, c, p);
  p.loss_kernel = model::LossKernel::kVerlFlashCe;
  auto flash16k = EstimateMemory(s, c, p);
  const double t = 4 * 4096;
  EXPECT_NEAR(static_cast<double>(PhasePeak(flash16k, head) - PhasePeak(fused16k, head)),
              8 * v * t - (3 * 2 * v * h + 14 * v * 512 + 2 * 2 * h * 512 + 2 * h * t), 8.0 * (1 << 20));
}

TEST(MemoryModelTest, PropertiesOverRandomPlans) {
  testing::SeededRng rng(20261122);
  auto s = FindModelPreset("llama3.2-1b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  for (int i = 0; i < 12; ++i) {
    Plan p;
    p.micro_batch = 1 + static_cast<int>(rng() % 4);
    p.seq_len = 256 << (rng() % 4);
    p.grad_accum = 1 + static_cast<int>(rng() % 2);
    p.strategy = rng() % 2 ? model::ShardingStrategy::kFullShard : model::ShardingStrategy::kShardGradOp;
    p.reshard_after_forward = p.strategy == model::ShardingStrategy::kFullShard;
    auto base = EstimateMemory(s, c, p);
    Plan more = p;
    more.micro_batch += 1;
    EXPECT_GE(EstimateMemory(s, c, more).peak_allocated, base.peak_allocated);
    Plan ckpt = p;
    ckpt.checkpointing = model::Checkpointing::kFull;
    EXPECT_LE(EstimateMemory(s, c, ckpt).peak_allocated, base.peak_allocated);
    EXPECT_GE(base.peak_allocated, base.model_state);
    EXPECT_EQ(MemoryReportToJson(base, true, "").dump(), MemoryReportToJson(EstimateMemory(s, c, p), true, "").dump());
  }
}

// CPU ranks (cpu:N, shardtune's executor over Gloo) have no CUDA context and no NCCL buffers:
// what lives outside the tensor allocator is the LibTorch process itself.
TEST(MemoryModelCpuTest, CpuRanksHaveNoCudaContextOrNccl) {
  auto s = model::FindModelPreset("tiny-llama");
  model::Plan p;
  p.micro_batch = 2;
  p.seq_len = 128;
  MemoryOptions o;
  MemoryReport m = EstimateMemory(s, profiles::ParseClusterShorthand("cpu:2"), p, o);
  ASSERT_EQ(m.outside_allocator.size(), 1u);
  EXPECT_EQ(m.outside_total.count(), o.constants.cpu_process.count());
  MemoryReport g = EstimateMemory(s, profiles::ParseClusterShorthand("2xH100"), p, o);
  // Two H100 ranks: the CUDA context plus one NCCL communicator (the shard group of 2, no NVLS).
  EXPECT_EQ(g.outside_total.count(),
            o.constants.cuda_context.count() + o.constants.nccl_per_communicator.count());
}

// first:K (model::BlockCheckpointed): the first K blocks keep only their input, the others all
// they save, so the forward keeps K x the checkpoint input + (L - K) x the full saved bytes
// (model::ComputeBlockActivations, per token x tokens): every block moved from kept to rerun
// frees (full - input) x tokens, and first:L is full checkpointing.
// Llama-3-8B on 8xH100, 2048 tokens: the peak of the saved activations under --checkpointing
// `ckpt`, and the block's activations at that length.
constexpr int64_t kFirstKSeq = 2048;
double SavedUnder(const std::string& ckpt) {
  Plan p = Short(kFirstKSeq);
  model::ParseCheckpointingSpec(ckpt, "--checkpointing", &p);
  return static_cast<double>(CategoryPeak(EstimateMemory(FindModelPreset("llama3-8b"),
                                                         profiles::ParseClusterShorthand("8xH100"), p),
                                          "activations saved for backward")
                                 .count());
}
model::BlockActivations Llama8bBlock() {
  return model::ComputeBlockActivations(FindModelPreset("llama3-8b"),
                                        model::ActivationOptionsFor(Short(kFirstKSeq), kFirstKSeq));
}

TEST(MemoryModelTest, FirstKKeepsTheRestOfTheBlocksWhole) {
  const int64_t seq = kFirstKSeq;
  const auto saved = SavedUnder;
  const model::BlockActivations b = Llama8bBlock();
  const double per_block_freed = (b.full.saved_per_token - b.checkpoint_input_per_token) * static_cast<double>(seq);
  ASSERT_GT(per_block_freed, 0);
  const double s8 = saved("first:8"), s16 = saved("first:16"), s24 = saved("first:24");
  EXPECT_NEAR(s8 - s16, 8 * per_block_freed, 1e-3 * 8 * per_block_freed);
  EXPECT_NEAR(s16 - s24, 8 * per_block_freed, 1e-3 * 8 * per_block_freed);
  EXPECT_EQ(saved("first:32"), saved("full"));
  EXPECT_LT(saved("full"), s24);
  EXPECT_LT(s8, saved("none"));
}

// first:K+selective (model::BlockSelective): the first K blocks keep only their input, the others
// what selective checkpointing keeps, so moving a block from selective to rerun frees
// (selective - input) x tokens; first:L is full checkpointing.
TEST(MemoryModelTest, FirstKWithTheRestSelectiveKeepsTheSelectiveBytesOfTheOthers) {
  const int64_t seq = kFirstKSeq;
  const auto saved = SavedUnder;
  const model::BlockActivations b = Llama8bBlock();
  const double per_block_freed = (b.selective_per_token - b.checkpoint_input_per_token) * static_cast<double>(seq);
  ASSERT_GT(per_block_freed, 0);
  const double s8 = saved("first:8+selective"), s16 = saved("first:16+selective");
  EXPECT_NEAR(s8 - s16, 8 * per_block_freed, 1e-3 * 8 * per_block_freed);
  EXPECT_EQ(saved("first:32+selective"), saved("full"));
  // Between full checkpointing and selective everywhere, and below first:K keeping the rest whole.
  EXPECT_LT(saved("full"), s16);
  EXPECT_LT(s8, saved("selective"));
  EXPECT_LT(s8, saved("first:8"));
}

}  // namespace
}  // namespace shardtune::sim
