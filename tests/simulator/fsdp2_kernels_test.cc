// The memory-bound kernels FSDP2 and torch.optim run around the collectives, op by op: the
// all-gather copy-in, the one-rank reduce copy, the post-reduce cast and accumulation, fp16's
// divisions, autograd's accumulation of a tied weight, and the optimizer's multi_tensor_apply
// launches. Expected figures are written from the PyTorch sources cited in the walker.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "model/module_tree.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/simulate.h"
#include "simulator/step_walk.h"

namespace shardtune::sim {
namespace {

// A literal port of multi_tensor_apply's host loop (MultiTensorApply.cuh), one chunk at a time:
// the reference MultiTensorApplyLaunches (which skips whole runs of chunks) must agree with.
int64_t ReferenceLaunches(const std::vector<int64_t>& numels, int depth,
                          const MultiTensorApplyLimits& lim) {
  const int64_t chunk_size = 65536;
  int64_t launches = 0, loc_tensor_info = 0, loc_block_info = 0;
  int64_t last = -1;
  for (size_t t = 0; t < numels.size(); ++t)
    if (numels[t] > 0) last = static_cast<int64_t>(t);
  for (size_t t = 0; t < numels.size(); ++t) {
    if (numels[t] == 0) continue;
    ++loc_tensor_info;
    int64_t chunks = (numels[t] + chunk_size - 1) / chunk_size;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      ++loc_block_info;
      bool tensors_full =
          loc_tensor_info == lim.max_tensors[static_cast<size_t>(depth - 1)] && chunk == chunks - 1;
      bool blocks_full = loc_block_info == lim.max_blocks;
      bool last_chunk = static_cast<int64_t>(t) == last && chunk == chunks - 1;
      if (tensors_full || blocks_full || last_chunk) {
        ++launches;
        loc_block_info = 0;
        loc_tensor_info = chunk == chunks - 1 ? 0 : 1;
      }
    }
  }
  return launches;
}

TEST(Fsdp2KernelsTest, MultiTensorApplyLaunchesFollowTheChunkAndTensorLimits) {
  const auto& k4 = kMultiTensorApply4KB;
  const int64_t chunk = 65536;
  EXPECT_EQ(MultiTensorApplyLaunches({}, 1, k4), 0);
  EXPECT_EQ(MultiTensorApplyLaunches({0, 0}, 1, k4), 0);
  EXPECT_EQ(MultiTensorApplyLaunches({0, 5, 0}, 1, k4), 1);
  // 320 blocks fill a launch; one more element needs a second.
  EXPECT_EQ(MultiTensorApplyLaunches({320 * chunk}, 1, k4), 1);
  EXPECT_EQ(MultiTensorApplyLaunches({320 * chunk + 1}, 1, k4), 2);
  // 110 tensors fill a depth-1 launch, 36 a depth-4 one.
  EXPECT_EQ(MultiTensorApplyLaunches(std::vector<int64_t>(111, 1), 1, k4), 2);
  EXPECT_EQ(MultiTensorApplyLaunches(std::vector<int64_t>(111, 1), 4, k4), (111 + 35) / 36);
  // A tensor cut at the block limit carries over: 600 chunks in two tensors -> ceil(600 / 320).
  EXPECT_EQ(MultiTensorApplyLaunches({300 * chunk, 300 * chunk}, 2, k4), 2);
  EXPECT_EQ(MultiTensorApplyLaunches({300 * chunk, 300 * chunk}, 2, kMultiTensorApply32KB), 1);
}

TEST(Fsdp2KernelsTest, MultiTensorApplyLaunchesEqualTheChunkByChunkLoop) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> numels(std::uniform_int_distribution<int>(0, 400)(rng));
    for (auto& n : numels) {
      int kind = std::uniform_int_distribution<int>(0, 3)(rng);
      n = kind == 0 ? 0 : kind == 1 ? std::uniform_int_distribution<int64_t>(1, 5000)(rng)
                                    : std::uniform_int_distribution<int64_t>(1, 700LL * 65536)(rng);
    }
    int depth = std::uniform_int_distribution<int>(1, 5)(rng);
    for (const auto* lim : {&kMultiTensorApply4KB, &kMultiTensorApply32KB}) {
      ASSERT_EQ(MultiTensorApplyLaunches(numels, depth, *lim), ReferenceLaunches(numels, depth, *lim))
          << "trial " << trial << " depth " << depth;
    }
  }
}

struct SimRun {
  model::ModelSpec spec;
  std::vector<model::FsdpUnit> units;
  SimReport report;
};

SimRun Simulate(const std::string& cluster, const model::Plan& p) {
  SimRun r;
  r.spec = model::FindModelPreset("llama3.2-1b");
  r.units = model::BuildFsdpUnits(r.spec, p.wrap);
  r.report = SimulateStep(r.spec, profiles::ParseClusterShorthand(cluster), p);
  return r;
}

model::Plan BasePlan() {
  model::Plan p;
  p.seq_len = 512;
  return p;
}

// Copy-in of a bf16 all-gather from fp32 shards: the foreach cast (read 4, write 2) and
// all_gather_copy_in's foreach copy (read 2, write 2) = 10 bytes per shard element.
TEST(Fsdp2KernelsTest, AllGatherCopyInCastsThenCopiesTheShards) {
  for (const char* cluster : {"1xH100", "8xH100"}) {
    model::Plan p = BasePlan();
    SimRun r = Simulate(cluster, p);
    int n = profiles::ParseClusterShorthand(cluster).world_size();
    int gathers = 0;
    for (const auto& op : r.report.program.ops) {
      if (op.step != 1 || op.kind != OpKind::kAllGather) continue;
      int64_t shard = r.units[static_cast<size_t>(op.unit)].PaddedShardNumel(n);
      EXPECT_DOUBLE_EQ(op.memory_bytes, 10.0 * static_cast<double>(shard)) << cluster;
      ++gathers;
    }
    EXPECT_GT(gathers, 0);
  }
  EXPECT_EQ(AllGatherCopyInBytesPerElement(4, 4), 8);  // no mixed precision: the copy alone
}

// One rank: foreach_reduce copies the fp32 reduce-scatter input into the output on the
// reduce-scatter stream, 8 bytes per element; the output is already the fp32 sharded grad.
TEST(Fsdp2KernelsTest, OneRankReductionIsACopyOnTheReduceScatterStream) {
  SimRun r = Simulate("1xH100", BasePlan());
  int reductions = 0;
  for (const auto& op : r.report.program.ops) {
    if (op.step != 1 || op.kind != OpKind::kReduceScatter) continue;
    EXPECT_EQ(op.stream, Stream::kReduceScatter);
    EXPECT_EQ(op.comm_bytes, 0);
    int64_t shard = r.units[static_cast<size_t>(op.unit)].PaddedShardNumel(1);
    EXPECT_DOUBLE_EQ(op.memory_bytes, 8.0 * static_cast<double>(shard));
    ++reductions;
  }
  EXPECT_EQ(reductions, static_cast<int>(r.units.size()));
}

// Accumulation without no_sync: the second micro-batch adds its reduced shard into the first's
// (read 4 + 4, write 4 per element); the first only reduces.
TEST(Fsdp2KernelsTest, AccumulatingIntoTheShardedGradReadsTwoAndWritesOne) {
  model::Plan p = BasePlan();
  p.grad_accum = 2;
  SimRun r = Simulate("8xH100", p);
  for (const auto& op : r.report.program.ops) {
    if (op.step != 1 || op.kind != OpKind::kReduceScatter) continue;
    int64_t shard = r.units[static_cast<size_t>(op.unit)].PaddedShardNumel(8);
    EXPECT_DOUBLE_EQ(op.memory_bytes, op.micro == 0 ? 0.0 : 12.0 * static_cast<double>(shard));
  }
}

// fp16 reduction over 8 ranks: pre-divide by 4 (largest power of two p with p^2 < 8) over the
// 8 x shard fp16 input (read + write), post-divide by 2 over the fp16 output, then the cast to
// the fp32 sharded grad (read 2, write 4): 2*16 + 2*2 + 6 = 42 bytes per shard element.
TEST(Fsdp2KernelsTest, Fp16ReductionDividesAroundTheSumAndCasts) {
  model::Plan p = BasePlan();
  p.param_dtype = model::DType::kFp16;
  p.reduce_dtype = model::DType::kFp16;
  SimRun r = Simulate("8xH100", p);
  int seen = 0;
  for (const auto& op : r.report.program.ops) {
    if (op.step != 1 || op.kind != OpKind::kReduceScatter) continue;
    int64_t shard = r.units[static_cast<size_t>(op.unit)].PaddedShardNumel(8);
    EXPECT_DOUBLE_EQ(op.memory_bytes, 42.0 * static_cast<double>(shard));
    ++seen;
  }
  EXPECT_GT(seen, 0);
}

// The tied embedding's backward: zero-fill its bf16 gradient (V x H x 2 bytes), scatter-add the
// rows (read and write the residual per token), and add the LM head's gradient of the same
// weight (read both, write one).
TEST(Fsdp2KernelsTest, TiedEmbeddingBackwardZeroFillsAndAccumulates) {
  SimRun r = Simulate("1xH100", BasePlan());
  ASSERT_TRUE(r.spec.tied_embeddings);
  double grad = static_cast<double>(r.spec.vocab_size) * static_cast<double>(r.spec.hidden) * 2;
  double tokens = 512;  // micro-batch 1 x seq 512
  double residual = static_cast<double>(r.spec.hidden) * 2;
  int seen = 0;
  for (const auto& op : r.report.program.ops) {
    if (op.step != 1 || op.kind != OpKind::kBackward || op.segment != 0) continue;
    EXPECT_DOUBLE_EQ(op.memory_bytes, 2 * residual * tokens + 4 * grad);
    ++seen;
  }
  EXPECT_EQ(seen, 1);
}

// The optimizer's host launches: foreach AdamW's eight multi_tensor_apply ops over the
// trainable shards in model.parameters() order, with the limits torch 2.11.0+cu130 used on the
// lent H100 (320 blocks per launch).
TEST(Fsdp2KernelsTest, ForeachAdamWLaunchesEightOpsOfChunkedKernels) {
  for (const char* cluster : {"1xH100", "8xH100"}) {
    model::Plan p = BasePlan();
    SimRun r = Simulate(cluster, p);
    int n = profiles::ParseClusterShorthand(cluster).world_size();
    std::vector<std::pair<int, int64_t>> params;
    for (const auto& u : r.units)
      for (const auto& prm : u.params) params.push_back({prm.segment, prm.PaddedShardNumel(n)});
    std::stable_sort(params.begin(), params.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int64_t> numels;
    for (const auto& kv : params) numels.push_back(kv.second);
    int64_t expected = 0;
    for (int depth : {1, 2, 1, 3, 2, 1, 1, 3})  // mul_ lerp_ mul_ addcmul_ sqrt div_ add_ addcdiv_
      expected += ReferenceLaunches(numels, depth, kMultiTensorApply4KB);
    // The profiler trace of FSDP2 + HF Llama-3.2-1B on one H100 (2026-11-26) counted 480
    // multi_tensor_apply kernels in each AdamW step: the model's count for world 1 is that one.
    if (std::string(cluster) == "1xH100") EXPECT_EQ(expected, 480);
    int seen = 0;
    for (const auto& op : r.report.program.ops) {
      if (op.step != 1 || op.kind != OpKind::kOptimizer) continue;
      EXPECT_EQ(op.host_kernels, expected) << cluster;
      EXPECT_EQ(op.host_params, static_cast<int>(numels.size())) << cluster;  // its host cost
      ++seen;
    }
    EXPECT_EQ(seen, 1);
  }
}

}  // namespace
}  // namespace shardtune::sim
