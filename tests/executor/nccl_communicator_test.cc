// The NCCL communicator on a CUDA device (ctest label `gpu`): one rank's collectives give the
// single-rank results and are recorded. Skips without a CUDA device or a CUDA-enabled LibTorch.
#include "executor/comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "executor/train/checkpoint.h"
#include "executor/train/launcher.h"
#include "executor/comm/rendezvous.h"
#include "executor/train/run.h"

namespace shardtune::exec {
namespace {

// Whether this build has NCCL, this machine a CUDA device, and this LibTorch CUDA: what every
// one-rank NCCL test needs, else it skips.
bool NcclRunsHere() { return NcclAvailable() && CudaDeviceAvailable() && at::hasCUDA(); }

TEST(ExecutorNcclTest, OneRankCollectivesOnTheGpu) {
  if (!NcclRunsHere()) GTEST_SKIP() << "no CUDA device, or this LibTorch has no CUDA";
  auto rdv = Rendezvous::Connect({"127.0.0.1", FindFreePort(), 0, 1, 30});
  auto log = std::make_shared<CollectiveLog>();
  auto comm = MakeNcclCommunicator(rdv.get(), "world", 0, {0}, 0, log);
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

// All-to-all as grouped send/recv (the Ulysses path): on one rank every chunk comes back to its
// own slot. Its time is filled when the log is resolved (Wait does not block the host).
TEST(ExecutorNcclTest, OneRankAllToAllIsTheIdentityAndIsTimed) {
  if (!NcclRunsHere()) GTEST_SKIP() << "no CUDA device, or this LibTorch has no CUDA";
  auto log = std::make_shared<CollectiveLog>();
  auto comm = MakeNcclCommunicator(nullptr, "cp", 0, {0}, 0, log);
  auto cuda = at::TensorOptions().device(at::kCUDA, 0).dtype(at::kBFloat16);
  at::Tensor in = at::arange(1 << 20, cuda), out = at::full({1 << 20}, -1, cuda);
  comm->AllToAll(in, out)->Wait();
  EXPECT_TRUE(at::equal(out.cpu(), in.cpu()));
  std::vector<CollectiveRecord> r = log->Snapshot();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, profiles::Collective::kAllToAll);
  EXPECT_EQ(r[0].full_size_bytes, 2 << 20);
  EXPECT_GT(r[0].time_s, 0.0);
}

// Wait() orders the compute stream after the collective without a host wait: a kernel launched
// right after it reads the collective's output, never the buffer's earlier contents. Each round
// reduces into a fresh buffer filled with NaN first, so a read that overtook the collective
// would show.
TEST(ExecutorNcclTest, WaitOrdersTheComputeStreamAfterTheCollective) {
  if (!NcclRunsHere()) GTEST_SKIP() << "no CUDA device, or this LibTorch has no CUDA";
  auto log = std::make_shared<CollectiveLog>();
  auto comm = MakeNcclCommunicator(nullptr, "shard", 0, {0}, 0, log);
  auto cuda = at::TensorOptions().device(at::kCUDA, 0).dtype(at::kFloat);
  const int64_t n = 64 << 20;  // 256 MiB: long enough for a race to be seen
  at::Tensor full = at::ones({n}, cuda);
  for (int round = 0; round < 4; ++round) {
    at::Tensor out = at::full({n}, std::nan(""), cuda);
    comm->ReduceScatter(full, out)->Wait();
    EXPECT_EQ(out.sum().item<double>(), static_cast<double>(n)) << "round " << round;
  }
}

// CPU tensors (loss and norm scalars) go through the device and come back.
TEST(ExecutorNcclTest, CpuTensorsAreStagedThroughTheGpu) {
  if (!NcclRunsHere()) GTEST_SKIP() << "no CUDA device, or this LibTorch has no CUDA";
  auto log = std::make_shared<CollectiveLog>();
  auto comm = MakeNcclCommunicator(nullptr, "world", 0, {0}, 0, log);
  at::Tensor t = at::full({3}, 2.5, at::kDouble);
  comm->AllReduce(t)->Wait();
  EXPECT_FALSE(t.is_cuda());
  EXPECT_DOUBLE_EQ(t[2].item<double>(), 2.5);
  at::Tensor all = at::zeros({3}, at::kDouble);
  comm->AllGather(t, all)->Wait();
  EXPECT_DOUBLE_EQ(all[0].item<double>(), 2.5);
}

// Runs `shardtune run` (the real CLI, in a child process) on `device` and returns the losses
// from its measurements.json; fails the test with the child's exit status otherwise.
nlohmann::json RunCli(const std::string& device, const std::string& dir,
                      const std::string& extra = "") {
  std::system(("rm -rf '" + dir + "'").c_str());
  std::string cmd = std::string(SHARDTUNE_BIN) +
                    " run --model tiny-llama --micro-batch 2 --seq-len 64 --steps 3 --precision fp32"
                    " --reduce-dtype fp32 --no-trace --no-checkpoints --device " + device +
                    " --out " + dir + " " + extra + " > " + dir + ".log 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
  std::ifstream in(dir + "/measurements.json");
  if (!in.good()) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

// The same fp32 run on the GPU (one-rank NCCL communicators) and on the CPU: equal losses up to
// floating-point reassociation, and the measurements carry the CUDA allocator's peaks.
TEST(ExecutorGpuRunTest, CudaRunMatchesCpuRun) {
  if (!CudaRunsAvailable()) GTEST_SKIP() << "no CUDA device, or this LibTorch has no CUDA";
  const char* tmp = std::getenv("TMPDIR");
  std::string base = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardtune_gpu_" + std::to_string(::getpid());
  nlohmann::json cpu = RunCli("cpu", base + "_cpu"), gpu = RunCli("cuda", base + "_gpu");
  ASSERT_TRUE(cpu.contains("steps") && gpu.contains("steps"));
  ASSERT_EQ(cpu.at("steps").size(), 3u);
  ASSERT_EQ(gpu.at("steps").size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    double c = cpu.at("steps").at(i).at("loss").get<double>();
    double g = gpu.at("steps").at(i).at("loss").get<double>();
    EXPECT_NEAR(g, c, 1e-4 * std::abs(c)) << "step " << i + 1;
  }
  EXPECT_EQ(gpu.at("environment").at("backend"), "nccl");
  const auto& mem = gpu.at("memory");
  EXPECT_GT(mem.at("per_rank").at(0).at("device_allocated_peak_bytes").get<int64_t>(), 0);
  EXPECT_GE(mem.at("peak_device_reserved_bytes").get<int64_t>(), mem.at("peak_tracked_bytes").get<int64_t>());
  // rm -rf, not std::filesystem::remove_all: see RemoveTree in executor/train/checkpoint.h.
  std::system(("rm -rf " + base + "_cpu " + base + "_gpu " + base + "_cpu.log " + base + "_gpu.log").c_str());
}

// CPU offload on the GPU (plan offload all: FSDP2 CPUOffloadPolicy; optimizer: ZeRO-Offload with
// a bf16/fp32 device copy of the shard) trains the same numbers as no offload, with gradient
// accumulation, and takes the master shard, gradients and AdamW state (16 bytes per parameter
// in fp32) off the device: the device peak drops by at least the optimizer state, 8 B/param.
TEST(ExecutorGpuRunTest, CpuOffloadTrainsTheSameLossesWithLessDeviceMemory) {
  if (!CudaRunsAvailable()) GTEST_SKIP() << "no CUDA device, or this LibTorch has no CUDA";
  const char* tmp = std::getenv("TMPDIR");
  std::string base = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardtune_off_" + std::to_string(::getpid());
  const std::string accum = "--grad-accum 2";
  nlohmann::json none = RunCli("cuda", base + "_none", accum),
                 all = RunCli("cuda", base + "_all", accum + " --offload all"),
                 opt = RunCli("cuda", base + "_opt", accum + " --offload optimizer");
  for (const nlohmann::json* j : {&none, &all, &opt}) {
    ASSERT_TRUE(j->contains("steps"));
    ASSERT_EQ(j->at("steps").size(), 3u);
  }
  for (size_t i = 0; i < 3; ++i) {
    double a = none.at("steps").at(i).at("loss").get<double>();
    EXPECT_NEAR(all.at("steps").at(i).at("loss").get<double>(), a, 1e-5 * std::abs(a)) << i;
    EXPECT_NEAR(opt.at("steps").at(i).at("loss").get<double>(), a, 1e-5 * std::abs(a)) << i;
  }
  auto peak = [](const nlohmann::json& j) {
    return j.at("memory").at("per_rank").at(0).at("device_allocated_peak_bytes").get<int64_t>();
  };
  int64_t params = none.at("model").at("parameters").get<int64_t>();
  EXPECT_GT(peak(none) - peak(all), 8 * params);
  EXPECT_GT(peak(none) - peak(opt), 8 * params);
  std::system(("rm -rf " + base + "_none* " + base + "_all* " + base + "_opt*").c_str());
}

TEST(ExecutorNcclTest, BuiltWhenCudaAndNcclWereFound) { EXPECT_TRUE(NcclAvailable()); }

}  // namespace
}  // namespace shardtune::exec
