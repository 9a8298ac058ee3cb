// Communicators: the Emulated one's documented semantics, and the Gloo one in real processes
// (fork, TCPStore on 127.0.0.1): the reduce-scatter built from all-to-all + a local sum equals a
// reference sum computed independently on each rank, and records the traffic a ring sends.
#include "executor/comm/communicator.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "executor/errors.h"
#include "executor/comm/gloo_communicator.h"
#include "executor/train/launcher.h"
#include "executor/comm/rendezvous.h"

namespace shardtune::exec {
namespace {

// Rank 0 whose MASTER_PORT another process holds fails with PortInUseError (the launcher's cue to
// start the ranks again on another port), not a plain BackendError.
TEST(RendezvousTest, Rank0OnAPortSomeoneHoldsSaysThePortIsTaken) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  EXPECT_THROW(Rendezvous::Connect({"127.0.0.1", port, 0, 1, 5}), PortInUseError);
  ::close(fd);
}

TEST(ExecutorCommunicatorTest, EmulatedAllGatherReplicatesTheLocalShard) {
  auto log = std::make_shared<CollectiveLog>();
  auto c = MakeEmulatedCommunicator("shard", 1, 3, log);
  at::Tensor full = at::zeros({6});
  at::Tensor shard = full.narrow(0, 2, 2);  // in place, as FlatParam gathers
  shard.copy_(at::tensor({1.0f, 2.0f}));
  c->AllGather(shard, full)->Wait();
  EXPECT_TRUE(at::equal(full, at::tensor({1.0f, 2.0f, 1.0f, 2.0f, 1.0f, 2.0f})));
  auto records = log->Snapshot();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].full_size_bytes, 6 * 4);
  EXPECT_EQ(records[0].group_size, 3);
  EXPECT_TRUE(records[0].emulated);
}

TEST(ExecutorCommunicatorTest, EmulatedReduceScatterAndAllReduceActAsIfAllRanksHeldThisData) {
  auto log = std::make_shared<CollectiveLog>();
  auto c = MakeEmulatedCommunicator("shard", 1, 2, log);
  at::Tensor full = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}), shard = at::zeros({2});
  c->ReduceScatter(full, shard)->Wait();
  EXPECT_TRUE(at::equal(shard, at::tensor({6.0f, 8.0f})));  // 2 x rank 1's slice
  at::Tensor t = at::tensor({1.5f});
  c->AllReduce(t)->Wait();
  EXPECT_EQ(t.item<float>(), 3.0f);
}

TEST(ExecutorCommunicatorTest, EmulatedAllToAllFillsEveryChunkWithTheLocalChunkOfThisRank) {
  auto log = std::make_shared<CollectiveLog>();
  auto c = MakeEmulatedCommunicator("cp", 1, 3, log);
  at::Tensor in = at::arange(6, at::kFloat), out = at::zeros({6});
  c->AllToAll(in, out)->Wait();  // every rank would send rank 1 its chunk 1: {2, 3}
  EXPECT_TRUE(at::equal(out, at::tensor({2.0f, 3.0f, 2.0f, 3.0f, 2.0f, 3.0f})));
  auto records = log->Snapshot();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].kind, profiles::Collective::kAllToAll);
  EXPECT_EQ(records[0].full_size_bytes, 6 * 4);
}

TEST(ExecutorCommunicatorTest, EmulatedAllToAllVSizesEveryChunkByTheOutputSplits) {
  auto log = std::make_shared<CollectiveLog>();
  auto c = MakeEmulatedCommunicator("ep", 1, 3, log);
  // Dispatch: rank 1 sends rows {0}, {1, 2}, {3} to ranks 0, 1, 2; every peer "sends" ours back.
  at::Tensor in = at::arange(4, at::kFloat).view({4, 1}), out = at::zeros({6, 1});
  c->AllToAllV(in, out, {1, 2, 1}, {2, 2, 2})->Wait();
  EXPECT_TRUE(at::equal(out.view({-1}), at::tensor({1.0f, 2.0f, 1.0f, 2.0f, 1.0f, 2.0f})));
  // Combine (the MoE's return trip): our 2 rows go to each peer, and each peer returns as many
  // rows as we sent it (1, 2, 1): the chunks take those sizes, filled from our rows for rank 1.
  at::Tensor back = at::full({4, 1}, -1.0f);
  c->AllToAllV(at::tensor({5.0f, 6.0f, 5.0f, 6.0f, 5.0f, 6.0f}).view({6, 1}), back, {2, 2, 2},
               {1, 2, 1})->Wait();
  EXPECT_TRUE(at::equal(back.view({-1}), at::tensor({5.0f, 5.0f, 6.0f, 5.0f})));
  // A peer that would return more rows than we hold for ourselves: our rows repeated; none: zeros.
  at::Tensor wide = at::full({5, 1}, -1.0f);
  c->AllToAllV(at::tensor({7.0f, 8.0f}).view({2, 1}), wide, {1, 1, 0}, {0, 1, 4})->Wait();
  EXPECT_TRUE(at::equal(wide.view({-1}), at::tensor({8.0f, 8.0f, 8.0f, 8.0f, 8.0f})));
  at::Tensor none = at::full({2, 1}, -1.0f);
  c->AllToAllV(at::tensor({7.0f}).view({1, 1}), none, {1, 0, 0}, {1, 0, 1})->Wait();
  EXPECT_TRUE(at::equal(none.view({-1}), at::tensor({0.0f, 0.0f})));
}

// Runs `body(rank, comm)` in `n` forked processes over Gloo; true when all exit 0.
bool RunGloo(int n, const std::function<bool(int, Communicator&, CollectiveLog&)>& body) {
  int port = FindFreePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      bool ok = false;
      try {
        auto rdv = Rendezvous::Connect({"127.0.0.1", port, r, n, 30});
        auto log = std::make_shared<CollectiveLog>();
        std::vector<int> ranks;
        for (int i = 0; i < n; ++i) ranks.push_back(i);
        auto comm = MakeGlooCommunicator(*rdv, "world", 0, ranks, log);
        ok = body(r, *comm, *log);
        comm->Barrier();
      } catch (const std::exception& e) {
        std::cerr << "rank " << r << ": " << e.what() << "\n";
      }
      ::_exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  bool all = true;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    all = all && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return all;
}

// Rank r's flat input: deterministic, so every rank can compute every other rank's.
at::Tensor Input(int rank, int64_t numel, at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(100 + rank);
  return at::randn({numel}, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
}

bool Check(bool cond, const std::string& what) {
  if (!cond) std::cerr << "check failed: " << what << "\n";
  return cond;
}

TEST(ExecutorCommunicatorTest, GlooReduceScatterFromAllToAllEqualsAReferenceSum) {
  if (!GlooAvailable()) GTEST_SKIP() << "built without Gloo";
  for (int n : {2, 3}) {
    bool ok = RunGloo(n, [n](int rank, Communicator& c, CollectiveLog& log) {
      const int64_t k = 1000;  // shard elements
      at::Tensor full = Input(rank, n * k, at::kFloat), shard = at::empty({k});
      c.ReduceScatter(full, shard)->Wait();
      at::Tensor want = at::zeros({k});
      for (int r = 0; r < n; ++r) want += Input(r, n * k, at::kFloat).narrow(0, rank * k, k);
      double diff = (shard - want).abs().max().item<double>();
      std::cerr << "reduce-scatter over " << n << " ranks, rank " << rank << ": max diff " << diff
                << "\n";
      auto rec = log.Snapshot().at(0);
      return Check(diff < 1e-5, "reduce-scatter sum") &&
             Check(rec.kind == profiles::Collective::kReduceScatter, "kind") &&
             Check(rec.full_size_bytes == n * k * 4, "full size") &&
             Check(rec.sent_bytes == n * k * 4 * (n - 1) / n, "ring traffic (n-1)/n S");
    });
    EXPECT_TRUE(ok) << n << " ranks";
  }
}

TEST(ExecutorCommunicatorTest, GlooAllToAllSendsChunkJToRankJInFp32AndBf16) {
  if (!GlooAvailable()) GTEST_SKIP() << "built without Gloo";
  for (int n : {2, 3}) {
    bool ok = RunGloo(n, [n](int rank, Communicator& c, CollectiveLog& log) {
      bool good = true;
      const int64_t k = 129;  // chunk elements
      for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
        at::Tensor in = Input(rank, n * k, dt), out = at::empty({n * k}, dt);
        c.AllToAll(in, out)->Wait();
        std::vector<at::Tensor> want;  // chunk j <- rank j's chunk `rank`
        for (int j = 0; j < n; ++j) want.push_back(Input(j, n * k, dt).narrow(0, rank * k, k));
        good = Check(at::equal(out, at::cat(want)), "all-to-all") && good;
      }
      auto rec = log.Snapshot().at(0);
      return good && Check(rec.kind == profiles::Collective::kAllToAll, "kind") &&
             Check(rec.full_size_bytes == n * k * 4, "S: the per-rank buffer") &&
             Check(rec.sent_bytes == n * k * 4 * (n - 1) / n, "sent (n-1)/n S");
    });
    EXPECT_TRUE(ok) << n << " ranks";
  }
}

TEST(ExecutorCommunicatorTest, GlooAllGatherAllReduceBroadcastInFp32AndBf16) {
  if (!GlooAvailable()) GTEST_SKIP() << "built without Gloo";
  bool ok = RunGloo(2, [](int rank, Communicator& c, CollectiveLog&) {
    bool good = true;
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      const int64_t k = 257;
      at::Tensor full = at::empty({2 * k}, dt);
      at::Tensor local = full.narrow(0, rank * k, k);
      local.copy_(Input(rank, k, dt));
      c.AllGather(local, full)->Wait();
      at::Tensor want = at::cat({Input(0, k, dt), Input(1, k, dt)});
      good = Check(at::equal(full, want), "all-gather") && good;
      at::Tensor t = Input(rank, k, dt);
      c.AllReduce(t)->Wait();
      at::Tensor sum = (Input(0, k, dt).to(at::kFloat) + Input(1, k, dt).to(at::kFloat)).to(dt);
      good = Check(at::equal(t, sum), "all-reduce") && good;
      at::Tensor b = Input(rank, k, dt);
      c.Broadcast(b, 1)->Wait();
      good = Check(at::equal(b, Input(1, k, dt)), "broadcast") && good;
    }
    return good;
  });
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace shardtune::exec
