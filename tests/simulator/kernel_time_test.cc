// Measured kernel tables: the interpolation rules of simulator/kernel_time.h, checked against
// values computed here from the same formulas, and the plan's effective constants.
#include "simulator/kernel_time.h"

#include <cmath>
#include <memory>

#include <gtest/gtest.h>

#include "model/gemm_shapes.h"
#include "model/presets.h"
#include "profiles/cluster.h"

namespace shardtune::sim {
namespace {

using model::DType;
using model::GemmShape;

profiles::GemmSample Gemm(int64_t m, int64_t n, int64_t k, double flops_per_s) {
  profiles::GemmSample g;
  g.dtype = DType::kBf16;
  g.m = m;
  g.n = n;
  g.k = k;
  g.time = Seconds::Of(2.0 * m * n * k / flops_per_s);
  return g;
}

TEST(KernelTimeTest, AnExactShapeTakesItsMeasuredTime) {
  profiles::KernelTables t;
  t.gemm = {Gemm(1024, 1024, 1024, 4e14), Gemm(4096, 4096, 4096, 7e14)};
  auto s = GemmTime(t, DType::kBf16, true, {4096, 4096, 4096});
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->count(), 2.0 * 4096 * 4096 * 4096 / 7e14);
  EXPECT_FALSE(GemmTime(t, DType::kFp16, true, {4096, 4096, 4096}));  // no fp16 samples
}

TEST(KernelTimeTest, BetweenTwoSamplesTheThroughputIsInverseSquareDistanceWeighted) {
  profiles::KernelTables t;
  t.gemm = {Gemm(1024, 1024, 1024, 4e14), Gemm(4096, 4096, 4096, 7e14)};
  // (2048, 2048, 2048) is log2-distance sqrt(3) from both: equal weights, the mean rate.
  auto s = GemmTime(t, DType::kBf16, true, {2048, 2048, 2048});
  ASSERT_TRUE(s);
  EXPECT_NEAR(s->count(), 2.0 * 2048 * 2048 * 2048 / 5.5e14, 1e-15);
  // (2048, 1024, 1024) = log2 (11, 10, 10): squared distance 1 from the first sample and
  // 1 + 4 + 4 = 9 from the second.
  double w1 = 1.0, w2 = 1.0 / 9;
  double rate = (w1 * 4e14 + w2 * 7e14) / (w1 + w2);
  EXPECT_NEAR(GemmTime(t, DType::kBf16, true, {2048, 1024, 1024})->count(),
              2.0 * 2048 * 1024 * 1024 / rate, 1e-15);
}

TEST(KernelTimeTest, ExtrapolationIsConservativeAtBothEnds) {
  profiles::KernelTables t;
  t.gemm = {Gemm(1024, 1024, 1024, 4e14), Gemm(4096, 4096, 4096, 7e14)};
  // Beyond every sample: no more than the fastest near sample's throughput.
  double big = 2.0 * 16384.0 * 16384 * 16384;
  EXPECT_GE(GemmTime(t, DType::kBf16, true, {16384, 16384, 16384})->count(), big / 7e14);
  // Below every sample: no less than the smallest sample's time.
  EXPECT_DOUBLE_EQ(GemmTime(t, DType::kBf16, true, {64, 64, 64})->count(),
                   2.0 * 1024 * 1024 * 1024 / 4e14);
}

TEST(KernelTimeTest, MemoryKernelsInterpolateBandwidthOverLogSize) {
  profiles::KernelTables t;
  t.memory = {{profiles::MemoryKernel::kElementwise, 1 << 20, Seconds::Of((1 << 20) / 1e11)},
              {profiles::MemoryKernel::kElementwise, 1 << 24, Seconds::Of((1 << 24) / 3e12)}};
  // 2^22 is halfway in log2 between 2^20 and 2^24: the mean bandwidth.
  EXPECT_NEAR(MemoryKernelTime(t, profiles::MemoryKernel::kElementwise, 1 << 22)->count(),
              (1 << 22) / ((1e11 + 3e12) / 2), 1e-15);
  EXPECT_DOUBLE_EQ(MemoryKernelTime(t, profiles::MemoryKernel::kElementwise, 1 << 26)->count(),
                   (1 << 26) / 3e12);  // above: the largest sample's bandwidth
  EXPECT_DOUBLE_EQ(MemoryKernelTime(t, profiles::MemoryKernel::kElementwise, 1000)->count(),
                   (1 << 20) / 1e11);  // below: the smallest sample's time
  EXPECT_FALSE(MemoryKernelTime(t, profiles::MemoryKernel::kCast, 1 << 22));
}

TEST(KernelTimeTest, BackwardGemmsMirrorEachForwardOne) {
  std::vector<GemmShape> f = {{8, 16, 32}};
  std::vector<GemmShape> all = model::WithBackward(f);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].m, 8);  // dX [m, k] = dY [m, n] x W [n, k]
  EXPECT_EQ(all[1].n, 32);
  EXPECT_EQ(all[1].k, 16);
  EXPECT_EQ(all[2].m, 16);  // dW [n, k] = dY^T [n, m] x X [m, k]
  EXPECT_EQ(all[2].n, 32);
  EXPECT_EQ(all[2].k, 8);
  for (const GemmShape& g : all) EXPECT_DOUBLE_EQ(g.flops(), 2.0 * 8 * 16 * 32);
}

TEST(KernelTimeTest, BlockGemmsCarryTheParameterFlops) {
  // A dense SwiGLU block's forward GEMMs do 2 FLOPs per weight per token: q, k, v, o and gate,
  // up, down (HF modeling_llama.py).
  model::ModelSpec s = model::FindModelPreset("llama3-8b");
  double weights = static_cast<double>(s.hidden) * (2 * s.q_dim() + 2 * s.kv_dim()) +
                   3.0 * static_cast<double>(s.hidden) * static_cast<double>(s.ffn_hidden);
  double flops = 0;
  for (const GemmShape& g : model::BlockForwardGemms(s, 1000, 0)) flops += g.flops() * g.count;
  EXPECT_DOUBLE_EQ(flops, 2.0 * 1000 * weights);
}

// The fused linear cross-entropy runs the head's product over chunks (model::FusedLinearChunkRows):
// the same FLOPs as one [T, V, H] GEMM, in T / chunk whole chunks and a remainder; with the
// tables, a plan with the fused loss times its head at the chunks' shapes.
TEST(KernelTimeTest, FusedLossHeadRunsTheSameFlopsInChunks) {
  model::ModelSpec spec = model::FindModelPreset("llama3.2-1b");  // V 128256, H 2048: 63 -> 64
  std::vector<GemmShape> chunks = model::FusedLinearHeadForwardGemms(spec, 5000);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].m, 128);  // next_pow2(ceil(5000 / 63)) = next_pow2(80)
  EXPECT_EQ(chunks[0].count, 5000 / 128);
  EXPECT_EQ(chunks[1].m, 5000 % 128);
  EXPECT_EQ(chunks[1].count, 1);
  double flops = 0;
  for (const GemmShape& g : chunks) flops += g.flops() * static_cast<double>(g.count);
  EXPECT_DOUBLE_EQ(flops, model::HeadForwardGemm(spec, 5000).flops());
  // Chunk GEMMs measured 4x slower than the whole head's: the plan's efficiency drops.
  profiles::ClusterSpec c = profiles::ParseClusterShorthand("8xH100");
  model::Plan plan;
  plan.micro_batch = 2;
  plan.seq_len = 2048;
  profiles::KernelTables t;
  std::vector<GemmShape> all = model::BlockForwardGemms(spec, 4096, 0);
  all.push_back(model::HeadForwardGemm(spec, 4096));
  for (const GemmShape& g : model::WithBackward(all)) t.gemm.push_back(Gemm(g.m, g.n, g.k, 6e14));
  for (const GemmShape& g : model::WithBackward(model::FusedLinearHeadForwardGemms(spec, 4096))) {
    t.gemm.push_back(Gemm(g.m, g.n, g.k, 1.5e14));
  }
  CostConstants k;
  k.tables = std::make_shared<profiles::KernelTables>(t);
  const double plain = EffectiveConstants(k, spec, plan, 2048, c.gpu).matmul_efficiency;
  plan.loss_kernel = model::LossKernel::kFusedLinear;
  const double fused = EffectiveConstants(k, spec, plan, 2048, c.gpu).matmul_efficiency;
  EXPECT_NEAR(plain, 6e14 / c.gpu.bf16_dense.count(), 1e-12);
  EXPECT_LT(fused, plain);
}

// verl's fused heads run four head products' FLOPs per micro-batch: the logits GEMM in forward,
// then in backward the logits again, dX and dW. The torch backend in 512-row chunks (5000 tokens:
// 9 whole chunks and 392 rows), the Triton one's backward per 9504-entry vocabulary split
// (Llama 3's 128256: 13 whole splits and 4704 entries).
TEST(KernelTimeTest, VerlFusedHeadsRunFourHeadProducts) {
  model::ModelSpec spec = model::FindModelPreset("llama3.2-1b");
  const double head = model::HeadForwardGemm(spec, 5000).flops();
  for (bool triton : {false, true}) {
    SCOPED_TRACE(triton ? "triton" : "torch");
    double flops = 0;
    for (const GemmShape& g : model::VerlFusedHeadGemms(spec, 5000, triton)) {
      flops += g.flops() * static_cast<double>(g.count);
    }
    EXPECT_DOUBLE_EQ(flops, 4 * head);
  }
  std::vector<GemmShape> torch = model::VerlFusedHeadGemms(spec, 5000, false);
  ASSERT_EQ(torch.size(), 6u);
  EXPECT_EQ(torch[0].m, 512);
  EXPECT_EQ(torch[0].count, 2 * (5000 / 512));
  EXPECT_EQ(torch[3].m, 5000 % 512);
  std::vector<GemmShape> tri = model::VerlFusedHeadGemms(spec, 5000, true);
  ASSERT_EQ(tri.size(), 7u);
  EXPECT_EQ(tri[1].n, 9504);
  EXPECT_EQ(tri[1].count, 13);
  EXPECT_EQ(tri[4].n, 128256 - 13 * 9504);
}

TEST(KernelTimeTest, EffectiveConstantsComeFromTheTablesOrStayAsGiven) {
  model::ModelSpec spec = model::FindModelPreset("llama3.2-1b");
  profiles::ClusterSpec c = profiles::ParseClusterShorthand("8xH100");
  model::Plan plan;
  plan.micro_batch = 2;
  plan.seq_len = 2048;
  CostConstants k;
  CostConstants same = EffectiveConstants(k, spec, plan, 2048, c.gpu);
  EXPECT_EQ(same.matmul_efficiency, k.matmul_efficiency);
  // Every GEMM of the plan measured at 6e14 FLOP/s: the efficiency is 6e14 over the bf16 peak.
  profiles::KernelTables t;
  std::vector<GemmShape> all = model::BlockForwardGemms(spec, 4096, 0);
  all.push_back(model::HeadForwardGemm(spec, 4096));
  for (const GemmShape& g : model::WithBackward(all)) t.gemm.push_back(Gemm(g.m, g.n, g.k, 6e14));
  t.host.kernel_launch = Seconds::Micros(4);
  k.tables = std::make_shared<profiles::KernelTables>(t);
  CostConstants e = EffectiveConstants(k, spec, plan, 2048, c.gpu);
  EXPECT_NEAR(e.matmul_efficiency, 6e14 / c.gpu.bf16_dense.count(), 1e-12);
  // A GPU job's host cost is its Python loop's (cost_model.h), not the probe's C++ op: kept.
  EXPECT_EQ(e.host_per_kernel, k.host_per_kernel);
  // On CPU ranks the probe's op is the whole host cost.
  profiles::ClusterSpec cpu = profiles::ParseClusterShorthand("cpu:2");
  EXPECT_EQ(EffectiveConstants(k, spec, plan, 2048, cpu.gpu).host_per_kernel, Seconds::Micros(4));
  EXPECT_EQ(e.attention_efficiency, k.attention_efficiency);  // no attention samples
  // Idempotent: applying it twice changes nothing.
  EXPECT_EQ(EffectiveConstants(e, spec, plan, 2048, c.gpu).matmul_efficiency, e.matmul_efficiency);
}

TEST(KernelTimeTest, MemoryBoundWorkStreamsAtTheLargestFootprintsBandwidth) {
  // The probe repeats one op on the same buffers: a footprint inside the L2 reads back from cache
  // faster than HBM (4.3 TB/s at 25 MB on the lent H100), the smallest measure the host's issue
  // rate. The plan's memory-bound work is taken at the largest sample's bandwidth, whatever the
  // plan's [tokens, hidden] size.
  model::ModelSpec spec = model::FindModelPreset("llama3.2-1b");
  profiles::ClusterSpec c = profiles::ParseClusterShorthand("1xH100");
  const int64_t small = int64_t{1} << 20, l2 = int64_t{25} << 20, big = int64_t{1} << 31;
  profiles::KernelTables t;
  t.memory = {{profiles::MemoryKernel::kElementwise, small, Seconds::Micros(5.5)},
              {profiles::MemoryKernel::kElementwise, l2, Seconds::Of(static_cast<double>(l2) / 4.3e12)},
              {profiles::MemoryKernel::kElementwise, big, Seconds::Of(static_cast<double>(big) / 3.0e12)},
              // another kind's faster sample is not the elementwise rate
              {profiles::MemoryKernel::kCopy, big, Seconds::Of(static_cast<double>(big) / 3.3e12)}};
  CostConstants k;
  k.tables = std::make_shared<profiles::KernelTables>(t);
  for (int mb : {1, 2, 8}) {
    model::Plan plan;
    plan.micro_batch = mb;
    plan.seq_len = 2048;
    EXPECT_NEAR(EffectiveConstants(k, spec, plan, 2048, c.gpu).memory_efficiency,
                3.0e12 / c.gpu.memory_bandwidth.count(), 1e-12)
        << "micro-batch " << mb;
  }
}

TEST(KernelTimeTest, OffloadedOptimizerStreamsAtTheProbesHostAdamWRate) {
  // The probe's host table: torch.optim.AdamW(foreach) on CPU tensors, bytes = 16 N. The node's
  // host rate is the largest sample's, in the walk's 80 bytes of traffic per element; a faster
  // small sample (cache-resident) and another kind's sample do not set it.
  model::ModelSpec spec = model::FindModelPreset("llama3.2-1b");
  profiles::ClusterSpec c = profiles::ParseClusterShorthand("1xH100");
  const int64_t n_small = int64_t{1} << 20, n_big = int64_t{1} << 27;
  const double big_s = 1.6;  // 2^27 elements in 1.6 s: 6.7 GB/s of 80-byte elements
  profiles::KernelTables t;
  t.memory = {{profiles::MemoryKernel::kHostAdamwForeach, 16 * n_small, Seconds::Micros(300)},
              {profiles::MemoryKernel::kHostAdamwForeach, 16 * n_big, Seconds::Of(big_s)},
              {profiles::MemoryKernel::kAdamwForeach, 16 * n_big, Seconds::Of(0.01)}};
  CostConstants k;
  k.tables = std::make_shared<profiles::KernelTables>(t);
  model::Plan plan;
  plan.seq_len = 2048;
  CostConstants e = EffectiveConstants(k, spec, plan, 2048, c.gpu);
  EXPECT_NEAR(e.host_memory_bandwidth_per_node.count(), 80.0 * static_cast<double>(n_big) / big_s, 1.0);
  // Without host samples the catalog's figure stays.
  t.memory.erase(t.memory.begin(), t.memory.begin() + 2);
  k.tables = std::make_shared<profiles::KernelTables>(t);
  EXPECT_EQ(EffectiveConstants(k, spec, plan, 2048, c.gpu).host_memory_bandwidth_per_node.count(),
            CostConstants{}.host_memory_bandwidth_per_node.count());
}

}  // namespace
}  // namespace shardtune::sim

namespace shardtune::sim {
namespace {

profiles::AttentionSample Attn(const std::string& backend, bool pytorch_default, double seconds) {
  profiles::AttentionSample a;
  a.backend = backend;
  a.pytorch_default = pytorch_default;
  a.dtype = model::DType::kBf16;
  a.seq_len = 2048;
  a.heads = 32;
  a.kv_heads = 32;
  a.head_dim = 128;
  a.forward = Seconds::Of(seconds / 3);
  a.backward = Seconds::Of(2 * seconds / 3);
  return a;
}

// --sdpa-backend: the rows of the backend asked for; auto: the rows PyTorch picked itself, or,
// in a profile that marks none (older probes timed only PyTorch's choice), every row.
TEST(KernelTimeTest, AttentionRowsFollowTheSdpaBackend) {
  profiles::KernelTables t;
  t.attention = {Attn("cudnn", true, 1e-3), Attn("flash", false, 2e-3)};
  auto at = [&](const std::string& backend) {
    return AttentionTime(t, model::DType::kBf16, 1, 2048, 32, 128, backend);
  };
  ASSERT_TRUE(at(""));
  EXPECT_DOUBLE_EQ(at("")->count(), 1e-3);
  EXPECT_DOUBLE_EQ(at("cudnn")->count(), 1e-3);
  EXPECT_DOUBLE_EQ(at("flash")->count(), 2e-3);
  EXPECT_FALSE(at("efficient"));  // not measured: the caller keeps the catalog's efficiency
  t.attention = {Attn("flash", false, 2e-3)};
  EXPECT_DOUBLE_EQ(at("")->count(), 2e-3);

  // Through the plan: flash's rows give half cuDNN's efficiency; an unmeasured backend keeps
  // the constant given.
  model::ModelSpec spec = model::FindModelPreset("llama3-8b");
  profiles::ClusterSpec c = profiles::ParseClusterShorthand("8xH100");
  CostConstants k;
  t.attention = {Attn("cudnn", true, 1e-3), Attn("flash", false, 2e-3)};
  k.tables = std::make_shared<profiles::KernelTables>(t);
  model::Plan plan;
  plan.micro_batch = 1;
  plan.seq_len = 2048;
  double automatic = EffectiveConstants(k, spec, plan, 2048, c.gpu).attention_efficiency;
  plan.sdpa_backend = model::SdpaBackend::kFlash;
  EXPECT_NEAR(EffectiveConstants(k, spec, plan, 2048, c.gpu).attention_efficiency, automatic / 2,
              1e-12 * automatic);
  plan.sdpa_backend = model::SdpaBackend::kEfficient;
  EXPECT_EQ(EffectiveConstants(k, spec, plan, 2048, c.gpu).attention_efficiency, k.attention_efficiency);
}

}  // namespace
}  // namespace shardtune::sim
