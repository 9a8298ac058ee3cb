// The fused AdamW (at::_fused_adamw_, AdamWOptions::fused) against the executor's op-by-op
// AdamW on the same CUDA shards: the same update within fp32 rounding over several steps, with
// a shard whose gradient is undefined skipped by both. Label gpu: skipped without a CUDA device
// or with a LibTorch older than 2.1.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "executor/fsdp/optimizer.h"
#include "executor/train/run.h"

namespace shardtune::exec {
namespace {

TEST(FusedAdamWGpuTest, MatchesTheOpByOpUpdate) {
  if (!CudaRunsAvailable() || !FusedAdamWAvailable("cuda")) {
    GTEST_SKIP() << "no CUDA device, or LibTorch < 2.1";
  }
  at::manual_seed(3);
  auto opts = at::TensorOptions().dtype(at::kFloat).device(at::Device(at::kCUDA, 0));
  std::vector<at::Tensor> p_ref = {at::randn({1000}, opts), at::randn({4097}, opts), at::randn({64}, opts)};
  std::vector<at::Tensor> p_fused, g_ref(3), g_fused(3);
  for (const auto& p : p_ref) p_fused.push_back(p.clone());
  AdamWOptions plain, fused;
  fused.fused = true;
  auto ptrs = [](std::vector<at::Tensor>& v) {
    std::vector<at::Tensor*> out;
    for (auto& t : v) out.push_back(&t);
    return out;
  };
  ShardedOptimizer ref(model::Optimizer::kAdamW, plain, ptrs(p_ref), ptrs(g_ref));
  ShardedOptimizer mine(model::Optimizer::kAdamW, fused, ptrs(p_fused), ptrs(g_fused));
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < 2; ++i) {  // shard 2 never has a gradient
      g_ref[i] = at::randn_like(p_ref[i]);
      g_fused[i] = g_ref[i].clone();
    }
    ref.Step(1e-2);
    mine.Step(1e-2);
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::allclose(p_fused[i], p_ref[i], /*rtol=*/1e-5, /*atol=*/1e-6))
        << "shard " << i << ": max |fused - op by op| " << (p_fused[i] - p_ref[i]).abs().max().item<float>()
        << ", max |op by op| " << p_ref[i].abs().max().item<float>();
  }
  EXPECT_TRUE(at::allclose(mine.exp_avg()[1], ref.exp_avg()[1], 1e-5, 1e-7))
      << "max |exp_avg diff| " << (mine.exp_avg()[1] - ref.exp_avg()[1]).abs().max().item<float>();
  EXPECT_TRUE(at::allclose(mine.exp_avg_sq()[1], ref.exp_avg_sq()[1], 1e-5, 1e-9))
      << "max |exp_avg_sq diff| " << (mine.exp_avg_sq()[1] - ref.exp_avg_sq()[1]).abs().max().item<float>();
  EXPECT_FALSE(mine.exp_avg()[2].defined());  // never updated: no state, as torch
}

}  // namespace
}  // namespace shardtune::exec
