// Frozen parameters, LoRA, inference roles, per-expert units and tiled MLP in the memory walk and
// the compute ops; each expected value is derived here from FSDP2's rules and the FLOP counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/activations.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/colocation.h"
#include "simulator/feature_savings.h"
#include "simulator/memory_model.h"
#include "tests/model/decoder_shape.h"
#include "tests/simulator/memory_test_util.h"

namespace shardtune::sim {
namespace {

using memtest::CategoryPeak;
using memtest::R512;

using model::FindModelPreset;
using model::Plan;
using model::testing_util::TinyMoe;

Plan Seq(int64_t s) {
  Plan p;
  p.seq_len = s;
  return p;
}

// Seq(s) with LoRA adapters of rank `rank` on q_proj and v_proj (PEFT's default targets).
Plan LoraQv(int64_t s, int rank) {
  Plan p = Seq(s);
  p.lora.rank = rank;
  p.lora.targets = {"q_proj", "v_proj"};
  return p;
}

// Padded shard elements (n ranks) of the parameters whose name starts with `prefix`.
int64_t ShardOf(const model::ModelSpec& s, const std::string& prefix, int n) {
  int64_t t = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) {
    for (const auto& p : u.params) {
      if (p.name.rfind(prefix, 0) == 0) t += p.PaddedShardNumel(n);
    }
  }
  return t;
}

double BackwardMatmul(const MemoryEstimate& e, int segment) {
  for (const auto& op : e.program.ops) {
    if (op.kind == OpKind::kBackward && op.segment == segment && op.step == 1)
      return op.matmul_flops;
  }
  return -1;
}

// Frozen parameters keep their fp32 shard but get no gradient (4 bytes) and no AdamW moments
// (8 bytes): the model states fall by exactly 12 bytes per frozen shard element.
TEST(TrainableMemoryTest, FrozenDropsGradsAndAdamStateByTheFrozenShards) {
  auto s = FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan full = Seq(1);
  Plan frozen = full;
  frozen.frozen_prefixes = {"model.embed_tokens", "model.layers.0."};
  auto a = EstimateMemory(s, c, full), b = EstimateMemory(s, c, frozen);
  int64_t f = ShardOf(s, "model.embed_tokens", 8) + ShardOf(s, "model.layers.0.", 8);
  int64_t total = ShardOf(s, "", 8);
  EXPECT_EQ(a.sharded_params, b.sharded_params);
  EXPECT_EQ((a.sharded_grads - b.sharded_grads).count(), 4 * f);
  EXPECT_EQ((a.optimizer_state - b.optimizer_state).count(),
            R512(8 * total) - R512(8 * (total - f)));
  EXPECT_EQ(a.trainable_parameters - b.trainable_parameters,
            model::CountParameters(s).embedding + model::CountParameters(s).block);
}

// A frozen block in the middle still all-gathers in forward and backward (gradients flow through
// it to block 0) but does not reduce-scatter; its backward skips the weight-gradient GEMMs:
// Narayanan et al. 2021, backward = input grad + weight grad = 2 x forward matmul FLOPs, so the
// frozen block's backward matmul FLOPs fall by 1 x its forward matmul FLOPs.
TEST(TrainableMemoryTest, FrozenMiddleBlockKeepsAllGathersDropsReduceScatterAndWeightGrads) {
  auto s = FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("4xH100");
  Plan full = Seq(64);
  Plan frozen = full;
  frozen.frozen_prefixes = {"model.layers.1."};
  auto a = EstimateMemoryWithProgram(s, c, full, {}, false),
       b = EstimateMemoryWithProgram(s, c, frozen, {}, false);
  auto count = [](const MemoryEstimate& e, OpKind k, double* bytes) {
    int n = 0;
    for (const auto& op : e.program.ops) {
      if (op.kind != k) continue;
      ++n;
      *bytes += static_cast<double>(op.comm_bytes);
    }
    return n;
  };
  double ag_a = 0, ag_b = 0, rs_a = 0, rs_b = 0;
  EXPECT_EQ(count(a, OpKind::kAllGather, &ag_a), count(b, OpKind::kAllGather, &ag_b));
  EXPECT_EQ(ag_a, ag_b);
  EXPECT_EQ(count(a, OpKind::kReduceScatter, &rs_a) - count(b, OpKind::kReduceScatter, &rs_b),
            2);  // 2 steps
  double tokens = 64, attn = 4.0 * 64 * static_cast<double>(s.q_dim());
  double mm = model::BlockForwardFlopsPerToken(s, 64, 0).count() - attn;
  EXPECT_DOUBLE_EQ(
      BackwardMatmul(a, model::BlockSegment(1)) - BackwardMatmul(b, model::BlockSegment(1)),
      mm * tokens);
  EXPECT_DOUBLE_EQ(BackwardMatmul(a, model::BlockSegment(0)),
                   BackwardMatmul(b, model::BlockSegment(0)));
}

// Autograd records no graph before the first trainable parameter: frozen embeddings and blocks
// 0-1 save no activations and run no backward. Block 2's input does not require grad either, so
// its input_layernorm records only the weight multiply (x_hat for the weight's gradient): it
// saves the full block less the norm's fp32 input copy and rsqrt (4H + 4 bytes per token).
TEST(TrainableMemoryTest, NothingBelowTheFirstTrainableBlockRunsBackward) {
  auto s = FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("4xH100");
  Plan full = Seq(64);
  Plan frozen = full;
  frozen.frozen_prefixes = {"model.embed_tokens", "model.layers.0.", "model.layers.1."};
  auto a = EstimateMemoryWithProgram(s, c, full, {}, false),
       b = EstimateMemoryWithProgram(s, c, frozen, {}, false);
  for (const auto& op : b.program.ops) {
    if (op.kind == OpKind::kBackward) {
      EXPECT_GT(op.segment, model::BlockSegment(1)) << op.segment;
    }
  }
  auto act = model::ComputeBlockActivations(s, model::ActivationOptionsFor(full, 64));
  double per_token = act.full.saved_per_token, h = static_cast<double>(s.hidden);
  int64_t per_block = R512(static_cast<int64_t>(per_token * 64));
  int64_t first_trained = R512(static_cast<int64_t>((per_token - (4 * h + 4)) * 64));
  EXPECT_EQ((CategoryPeak(a.report, "activations saved for backward") -
             CategoryPeak(b.report, "activations saved for backward"))
                .count(),
            2 * per_block + per_block - first_trained);
}

// LoRA r on q_proj and v_proj (tiny-llama: H 256, 8 heads, 4 KV heads of 32, F 688, bf16,
// SDPA) at 64 tokens: per token, every block saves its frozen norms' fp32 copy and rsqrt
// (4H + 4 each, whose input requires grad), the normed input once for both lora_A (2H), each
// lora_B's input (2r), SDPA's q, k, v, output and logsumexp and SwiGLU's gate, silu and up (6F);
// the frozen Linears save no input. Block 0 follows the frozen embedding: its input needs no
// grad, so its input_layernorm records nothing.
TEST(TrainableMemoryTest, LoraBlocksSaveOnlyWhatTheAdaptersAndGradInputNeed) {
  auto s = FindModelPreset("tiny-llama");
  auto c = profiles::ParseClusterShorthand("4xH100");
  Plan p = LoraQv(64, 8);
  auto r = EstimateMemory(s, c, p);
  double h = 256, qd = 256, kv = 128, heads = 8, f = 688, rk = 8, e = 2;
  double norm = 4 * h + 4, sdpa = e * (2 * qd + 2 * kv) + 4 * heads;
  double rest = e * h + 2 * e * rk + sdpa + norm + 3 * e * f;
  int64_t first = R512(static_cast<int64_t>(rest * 64));
  int64_t later = R512(static_cast<int64_t>((norm + rest) * 64));
  EXPECT_EQ(CategoryPeak(r, "activations saved for backward").count(),
            first + (s.num_layers - 1) * later);
  // Full checkpointing keeps each block's input (eH), the first block's included.
  p.checkpointing = model::Checkpointing::kFull;
  EXPECT_EQ(CategoryPeak(EstimateMemory(s, c, p), "activations saved for backward").count(),
            s.num_layers * R512(static_cast<int64_t>(e * h * 64)));
}

// LoRA r on q and v: trainable = sum over blocks of r (in + out) per target; the sharded grads
// and the AdamW moments cover the adapters' padded shards only.
TEST(TrainableMemoryTest, LoraModelStatesCoverOnlyTheAdapters) {
  auto s = FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan p = LoraQv(1, 16);
  auto r = EstimateMemory(s, c, p);
  int64_t rk = 16, h = s.hidden, n = 8;
  EXPECT_EQ(r.trainable_parameters, s.num_layers * (rk * (h + s.q_dim()) + rk * (h + s.kv_dim())));
  // A [r, H] pads dim 0 to ceil(r / n) rows; B [out, r] to ceil(out / n).
  auto padded = [&](int64_t d0, int64_t inner) { return (d0 + n - 1) / n * inner; };
  int64_t shard =
      s.num_layers * (2 * padded(rk, h) + padded(s.q_dim(), rk) + padded(s.kv_dim(), rk));
  EXPECT_EQ(r.sharded_grads.count(), 4 * shard);
  EXPECT_EQ(r.optimizer_state.count(), R512(8 * shard));
  // The base weights stay (fp32 master shards), adapters are added in lora.dtype (fp32).
  EXPECT_EQ(r.sharded_params.count(), 4 * (ShardOf(s, "", 8) + shard));
}

// Frozen parameters in the dtype they were loaded in (--frozen-dtype bf16, as PEFT users load
// the base): LoRA on llama3-8b over 8 ranks keeps (frozen padded shard x 2 + adapter padded shard
// x 4) bytes of sharded parameters; the all-gathers still move param-dtype (bf16) bytes.
TEST(TrainableMemoryTest, FrozenDtypeSetsTheFrozenShardsBytes) {
  auto s = FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan p = LoraQv(1, 16);
  Plan bf16 = p;
  bf16.frozen_dtype = model::DType::kBf16;
  auto a = EstimateMemoryWithProgram(s, c, p, {}, false),
       b = EstimateMemoryWithProgram(s, c, bf16, {}, false);
  int64_t rk = 16, h = s.hidden, n = 8;
  auto padded = [&](int64_t d0, int64_t inner) { return (d0 + n - 1) / n * inner; };
  int64_t adapters =
      s.num_layers * (2 * padded(rk, h) + padded(s.q_dim(), rk) + padded(s.kv_dim(), rk));
  int64_t frozen = ShardOf(s, "", 8);
  EXPECT_EQ(b.report.sharded_params.count(), 2 * frozen + 4 * adapters);
  EXPECT_EQ(b.report.frozen_sharded_params.count(), 2 * frozen);
  EXPECT_EQ(b.report.frozen_dtype, "bf16");
  EXPECT_EQ(a.report.sharded_params.count(), 4 * frozen + 4 * adapters);  // default: master fp32
  EXPECT_EQ(a.report.frozen_dtype, "fp32");
  EXPECT_EQ(a.report.sharded_params - b.report.sharded_params,
            a.report.peak_allocated - b.report.peak_allocated);
  double ag_a = 0, ag_b = 0;
  for (const auto& op : a.program.ops) {
    if (op.kind == OpKind::kAllGather) ag_a += static_cast<double>(op.comm_bytes);
  }
  for (const auto& op : b.program.ops) {
    if (op.kind == OpKind::kAllGather) ag_b += static_cast<double>(op.comm_bytes);
  }
  EXPECT_EQ(ag_a, ag_b);
  // Offloaded (CPUOffloadPolicy): the host holds the frozen shards in their dtype (meta-device
  // load, so training is the host's peak).
  MemoryOptions meta;
  meta.model_load = ModelLoad::kMeta;
  Plan off = bf16;
  off.offload = model::Offload::kAll;
  Plan off32 = p;
  off32.offload = model::Offload::kAll;
  auto host = [](const MemoryReport& r) {
    for (const auto& [what, bytes] : r.host.breakdown) {
      if (what.rfind("offloaded", 0) == 0) return bytes;
    }
    return Bytes();
  };
  int64_t frozen_numel = 0;
  for (const auto& u : EstimateMemory(s, c, off, meta).units) {
    frozen_numel += (u.parameters - u.trainable) / n;
  }
  Bytes host32 = host(EstimateMemory(s, c, off32, meta));
  Bytes host16 = host(EstimateMemory(s, c, off, meta));
  EXPECT_EQ((host32 - host16).count(), (4 - 2) * frozen_numel * c.gpus_per_node);
}

// An inference role: forward under no_grad only. Nothing of training exists; the peak is the
// sharded params, gathered units, the working set and the logits.
TEST(TrainableMemoryTest, InferRoleHoldsNoGradsOptimizerOrSavedActivations) {
  auto s = FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan p = Seq(2048);
  p.role = model::Role::kInfer;
  auto r = EstimateMemory(s, c, p);
  EXPECT_EQ(r.sharded_grads.count(), 0);
  EXPECT_EQ(r.optimizer_state.count(), 0);
  EXPECT_EQ(r.trainable_parameters, 0);
  for (const char* cat : {"activations saved for backward", "sharded gradients", "optimizer state",
                          "unsharded gradients", "reduce-scatter buffers"}) {
    EXPECT_EQ(CategoryPeak(r, cat).count(), 0) << cat;
  }
  int64_t logits = 2 * 2048 * s.vocab_size;  // [B, S, V] bf16
  int64_t gathered_unit = 2 * model::CountParameters(s).block;
  int64_t root =
      2 * (model::CountParameters(s).embedding + model::CountParameters(s).lm_head + s.hidden);
  auto act = model::ComputeBlockActivations(s, model::ActivationOptionsFor(p, 2048));
  auto head = model::ComputeHeadActivations(s, model::ActivationOptionsFor(p, 2048));
  int64_t working = static_cast<int64_t>(
      std::max(act.full.forward_peak_per_token, head.forward_peak_per_token) * 2048);
  EXPECT_GE(r.peak_allocated.count(), r.sharded_params.count() + logits);
  // Upper bound: params + root + current and next unit (gathered and all-gather buffer) + working
  // set + logits + the 32 MiB cuBLAS workspace + 512-byte rounding.
  EXPECT_LE(r.peak_allocated.count(), r.sharded_params.count() + root + 4 * gathered_unit +
                                          working + logits +
                                          MemoryConstants{}.cublas_workspace.count() + (1 << 20));
  Plan train = Seq(2048);
  EXPECT_LT(r.peak_allocated, EstimateMemory(s, c, train).peak_allocated);
}

// A value head's forward under no_grad (verl's reward model, fsdp_workers.py RewardModelWorker
// compute_rm_score; the critic's compute_values) returns scores [B, S, 1], not [B, S, V] logits:
// the same pass with the LM head loses the LM head's logits and nothing else grows.
TEST(TrainableMemoryTest, InferValueHeadKeepsScoresNotLogits) {
  auto s = FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan p = Seq(2048);
  p.micro_batch = 8;
  p.role = model::Role::kInfer;
  p.keep_logits = false;
  const int64_t tokens = 8 * 2048;
  MemoryReport lm = EstimateMemory(s, c, p);
  EXPECT_GE(CategoryPeak(lm, "logits and loss").count(), 2 * tokens * s.vocab_size);  // bf16 [T, V]
  model::ModelSpec v = s;
  v.value_head = true;
  MemoryReport scores = EstimateMemory(v, c, p);
  EXPECT_LE(CategoryPeak(scores, "logits and loss").count(), 2 * tokens + 512);  // bf16 [T, 1]
  EXPECT_LT(scores.peak_allocated.count() + 2 * tokens * (s.vocab_size - 1) / 2, lm.peak_allocated.count());
}

// Per-expert units: one expert is gathered at a time, so the gathered peak is the root, one
// block without its experts and one expert, instead of the root and a whole block.
TEST(TrainableMemoryTest, ExpertUnitsGatherOneExpertAtATime) {
  auto s = TinyMoe();
  auto c = profiles::ParseClusterShorthand("4xH100");
  Plan plain = Seq(64);
  Plan experts = plain;
  experts.wrap.expert_units = true;
  auto a = EstimateMemory(s, c, plain), b = EstimateMemory(s, c, experts);
  int n = 4;
  auto gathered = [&](int64_t padded_shard) { return R512(2 * padded_shard * n); };
  int64_t root = 0, block = 0, expert = 0;
  for (const auto& u : model::BuildFsdpUnits(s, experts.wrap)) {
    if (u.is_root)
      root = u.PaddedShardNumel(n);
    else if (u.is_expert)
      expert = u.PaddedShardNumel(n);
    else
      block = u.PaddedShardNumel(n);
  }
  int64_t whole_block = 0;
  for (const auto& u : model::BuildFsdpUnits(s, plain.wrap)) {
    if (!u.is_root) whole_block = u.PaddedShardNumel(n);
  }
  EXPECT_EQ(CategoryPeak(a, "gathered (unsharded) parameters").count(),
            gathered(root) + gathered(whole_block));
  EXPECT_EQ(CategoryPeak(b, "gathered (unsharded) parameters").count(),
            gathered(root) + gathered(block) + gathered(expert));
  EXPECT_EQ(b.sharded_params, a.sharded_params);
}

// Tiled MLP: the MLP's intermediates (4 x F x e per token for SwiGLU: gate, silu, up, product)
// are not saved; backward re-runs the MLP forward: + 2 x 3 x H x F FLOPs per token.
TEST(TrainableMemoryTest, TiledMlpSavesNoMlpIntermediatesAndRecomputesTheMlp) {
  auto s = FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan plain = Seq(4096);
  Plan tiled = plain;
  tiled.tiled_mlp_shards = 4;
  auto a = EstimateMemoryWithProgram(s, c, plain, {}, false),
       b = EstimateMemoryWithProgram(s, c, tiled, {}, false);
  auto act = model::ComputeBlockActivations(s, model::ActivationOptionsFor(plain, 4096));
  double tokens = 4096, f = static_cast<double>(s.ffn_hidden), h = static_cast<double>(s.hidden);
  int64_t full_block = static_cast<int64_t>(act.full.saved_per_token * tokens);
  int64_t tiled_block = static_cast<int64_t>((act.full.saved_per_token - 4 * f * 2) * tokens);
  EXPECT_EQ((CategoryPeak(a.report, "activations saved for backward") -
             CategoryPeak(b.report, "activations saved for backward"))
                .count(),
            s.num_layers * (R512(full_block) - R512(tiled_block)));
  EXPECT_DOUBLE_EQ(
      BackwardMatmul(b, model::BlockSegment(3)) - BackwardMatmul(a, model::BlockSegment(3)),
      2 * 3 * h * f * tokens);
}

// The savings report: each feature's steps add up to the total, and freezing reports the
// optimizer state it removes.
TEST(TrainableMemoryTest, FeatureSavingsAddUpToTheTotal) {
  auto s = FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan p = Seq(2048);
  p.frozen_prefixes = {"model.embed_tokens"};
  p.tiled_mlp_shards = 4;
  MemoryReport r = EstimateMemory(s, c, p);
  FeatureSavings f = CompareWithFullFinetune(s, c, p, {}, r);
  ASSERT_EQ(f.features.size(), 2u);
  EXPECT_EQ(f.features[0].feature, "frozen");
  EXPECT_EQ(f.features[1].feature, "tiled MLP");
  EXPECT_EQ((f.features[0].peak_saved + f.features[1].peak_saved).count(),
            f.total_peak_saved.count());
  int64_t total = ShardOf(s, "", 8), e = ShardOf(s, "model.embed_tokens", 8);
  bool found = false;
  for (const auto& [what, b] : f.features[0].saved) {
    if (what != "optimizer state") continue;
    found = true;
    EXPECT_EQ(b.count(), R512(8 * total) - R512(8 * (total - e)));
  }
  EXPECT_TRUE(found);
  EXPECT_FALSE(UsesFeatures(Seq(2048)));
}

// DeepSeek's first_k_dense_replace: the dense blocks record their own ledger (a dense MLP, no
// router or experts) and their own FLOPs. At the forward's end the saved activations are every
// block's saved bytes per token times the tokens, the dense blocks' from the dense spec's ledger;
// each block's forward compute op carries that block's matmul FLOPs.
TEST(TrainableMemoryTest, DensePrefixBlocksRecordTheirOwnLedgerAndFlops) {
  auto s = FindModelPreset("deepseek-v2-lite");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan p = Seq(1024);
  auto o = model::ActivationOptionsFor(p, 1024);
  double moe = model::ComputeBlockActivations(s, o).full.saved_per_token;
  double dense = model::ComputeBlockActivations(s.DenseLayerSpec(), o).full.saved_per_token;
  ASSERT_LT(dense, moe);
  const double tokens = 1024;
  // Each of the 26 MoE blocks also keeps its router's fp32 weight copy [E, H] (HF DeepSeek's
  // F.linear(x.float(), W.float()); tests/simulator/moe_memory_test.cc): 64 x 2048 x 4 bytes.
  int64_t expected = static_cast<int64_t>(dense * tokens) + 26 * static_cast<int64_t>(moe * tokens) +
                     26 * int64_t{64} * 2048 * 4;
  auto e = EstimateMemoryWithProgram(s, c, p, {}, false);
  EXPECT_EQ(CategoryPeak(e.report, "activations saved for backward").count(), expected);
  double attn = model::AttentionForwardFlopsPerToken(s, 1024).count();
  for (const auto& op : e.program.ops) {
    if (op.kind != OpKind::kForward || op.step != 1 || op.segment < 1 || op.segment > 27) continue;
    int b = op.segment - 1;
    EXPECT_DOUBLE_EQ(op.matmul_flops,
                     (model::BlockForwardFlopsPerToken(s, 1024, b).count() - attn) * tokens)
        << b;
  }
}

// llama3-8b on 8xH100 at 2048 tokens: the training role's report and that of the same plan as an
// inference role (a reference model, or a pass over the actor's own model) to co-locate with it.
struct TrainAndInferReports {
  MemoryReport train;
  MemoryReport infer;
};
TrainAndInferReports Llama8bTrainAndInfer() {
  auto s = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  Plan train = Seq(2048);
  Plan infer = train;
  infer.role = model::Role::kInfer;
  return {EstimateMemory(s, c, train), EstimateMemory(s, c, infer)};
}

// All roles in one process (verl's hybrid engine): an idle role keeps no context of its own.
ColocationOptions OneProcess() {
  ColocationOptions o;
  o.separate_processes = false;
  return o;
}

// Co-location: while one role runs, every other role's idle residue is on the GPU too. Without
// offload that residue is its sharded params + optimizer state (+ its own process's context,
// NCCL buffers and cuBLAS workspace); with offload and one process, nothing.
TEST(ColocationTest, RunningRolePlusTheOthersResidentStates) {
  const auto [a, r] = Llama8bTrainAndInfer();
  std::vector<ColocatedRole> roles{{"actor", a}, {"reference", r}};
  MemoryConstants k;
  ColocationReport x = CoLocate(roles, OneProcess(), k);
  ASSERT_EQ(x.roles.size(), 2u);
  EXPECT_EQ(x.roles[0].colocated_required, a.required + r.sharded_params);
  EXPECT_EQ(x.roles[1].colocated_required, r.required + a.sharded_params + a.optimizer_state);
  EXPECT_EQ(x.peak, std::max(x.roles[0].colocated_required, x.roles[1].colocated_required));
  ColocationOptions separate;  // a process per role: each idle one keeps context, NCCL, cuBLAS
  ColocationReport y = CoLocate(roles, separate, k);
  EXPECT_EQ(y.roles[0].colocated_required,
            a.required + r.sharded_params + r.outside_total + k.cublas_workspace);
  ColocationOptions offload = OneProcess();
  offload.offload_between_roles = true;
  ColocationReport z = CoLocate(roles, offload, k);
  EXPECT_EQ(z.roles[0].colocated_required, a.required);
  EXPECT_EQ(z.roles[1].colocated_required, r.required);
}

// verl's old-log-prob pass runs on the actor's FSDP module: it leaves no residue, and while it
// runs the actor's optimizer state (not its parameters, which the pass's own figure holds) is
// beside it.
TEST(ColocationTest, APassOnTheActorsModelCountsItsParametersOnce) {
  const auto [a, p] = Llama8bTrainAndInfer();
  std::vector<ColocatedRole> roles{{"actor", a}, {"old log-prob", p}};
  roles[1].states_of = 0;
  MemoryConstants k;
  ColocationReport x = CoLocate(roles, OneProcess(), k);
  EXPECT_EQ(x.roles[1].idle_total, Bytes());
  EXPECT_EQ(x.roles[0].colocated_required, a.required);
  EXPECT_EQ(x.roles[1].colocated_required, p.required + a.optimizer_state);
}

// verl's rollout engine (vLLM at gpu_memory_utilization 0.6): 0.6 x the device's memory + its
// CUDA context while it generates, beside the trainer roles' resident states and the trainer
// process's context and NCCL buffers; while it sleeps, its context and CUDA graph pool join the
// running role; without free_cache_engine, all of it.
TEST(ColocationTest, RolloutEngineTakesItsShareBesideTheTrainerProcess) {
  auto s = model::FindModelPreset("llama3-8b");
  auto c = profiles::ParseClusterShorthand("8xH100");
  MemoryReport a = EstimateMemory(s, c, Seq(2048));
  MemoryConstants k;
  const Bytes share = Bytes::Of(static_cast<int64_t>(0.6 * static_cast<double>(c.gpu.usable_memory.count())));
  ColocatedRole vllm = RolloutEngineRole("rollout", "vllm", 0.6, true, false, c.gpu.usable_memory, k);
  std::vector<ColocatedRole> roles{{"actor", a}, vllm};
  const ColocationOptions one = OneProcess();
  ColocationReport x = CoLocate(roles, one, k);
  ASSERT_EQ(x.roles.size(), 2u);
  EXPECT_EQ(x.roles[1].own_required, share + k.cuda_context);
  Bytes trainer_process = k.cublas_workspace;  // the trainer process: its workspace, context, NCCL
  for (const auto& kv : a.outside_allocator) trainer_process += kv.second;
  EXPECT_GT(trainer_process.count(), 0);
  EXPECT_EQ(x.roles[1].colocated_required,
            share + k.cuda_context + a.sharded_params + a.optimizer_state + trainer_process);
  const Bytes sleeping = k.cuda_context + Bytes::Of(kEngineCudaGraphPoolGuessBytes);
  EXPECT_EQ(x.roles[1].idle_total, sleeping);
  EXPECT_EQ(x.roles[0].colocated_required, a.required + sleeping);
  // enforce_eager: no CUDA graphs; free_cache_engine false: the share stays.
  EXPECT_EQ(CoLocate({{"actor", a}, RolloutEngineRole("rollout", "vllm", 0.6, true, true, c.gpu.usable_memory, k)}, one, k)
                .roles[0].colocated_required,
            a.required + k.cuda_context);
  EXPECT_EQ(CoLocate({{"actor", a}, RolloutEngineRole("rollout", "vllm", 0.6, false, false, c.gpu.usable_memory, k)}, one, k)
                .roles[0].colocated_required,
            a.required + share + k.cuda_context);
}

}  // namespace
}  // namespace shardtune::sim
