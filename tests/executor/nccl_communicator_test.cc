// The NCCL communicator on a CUDA device (ctest label `gpu`): one rank's collectives give the
// single-rank results and are recorded. Skips without a CUDA device or a CUDA-enabled LibTorch.
#include "executor/nccl_communicator.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include "executor/launcher.h"
#include "executor/rendezvous.h"

namespace shardtune::exec {
namespace {

TEST(ExecutorNcclTest, OneRankCollectivesOnTheGpu) {
  if (!NcclAvailable() || !CudaDeviceAvailable() || !at::hasCUDA()) {
    GTEST_SKIP() << "no CUDA device, or this LibTorch has no CUDA";
  }
  auto rdv = Rendezvous::Connect({"127.0.0.1", FindFreePort(), 0, 1, 30});
  auto log = std::make_shared<CollectiveLog>();
  auto comm = MakeNcclCommunicator(*rdv, "world", 0, {0}, 0, log);
  auto cuda = at::TensorOptions().device(at::kCUDA, 0);
  at::Tensor shard = at::arange(8, cuda.dtype(at::kFloat)),
             full = at::empty({8}, cuda.dtype(at::kFloat));
  comm->AllGather(shard, full)->Wait();
  EXPECT_TRUE(at::equal(full.cpu(), shard.cpu()));
  at::Tensor out = at::empty({8}, cuda.dtype(at::kFloat));
  comm->ReduceScatter(full, out)->Wait();
  EXPECT_TRUE(at::equal(out.cpu(), shard.cpu()));
  at::Tensor b = at::ones({4}, cuda.dtype(at::kBFloat16));
  comm->AllReduce(b)->Wait();
  EXPECT_EQ(b.sum().item<float>(), 4.0f);
  comm->Barrier();
  EXPECT_EQ(log->Snapshot().size(), 3u);
}

TEST(ExecutorNcclTest, BuiltWhenCudaAndNcclWereFound) { EXPECT_TRUE(NcclAvailable()); }

}  // namespace
}  // namespace shardtune::exec
