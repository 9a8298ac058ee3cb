// Event simulator on hand-built programs: serial and parallel streams, dependencies, and fluid
// sharing of a link, each against a closed form.
#include "simulator/event_sim.h"

#include <gtest/gtest.h>

namespace shardtune::sim {
namespace {

ProgramOp Op(Stream s, std::array<int32_t, 3> deps = {-1, -1, -1}) {
  ProgramOp op;
  op.kind = OpKind::kForward;
  op.stream = s;
  op.deps = deps;
  return op;
}

TEST(EventSimTest, OneStreamRunsSerially) {
  StepProgram p;
  std::vector<OpCost> c;
  for (int i = 0; i < 5; ++i) {
    p.ops.push_back(Op(Stream::kDefault));
    c.push_back({100 * (i + 1), 0, 0, 0});
  }
  auto s = RunEventSimulation(p, c);
  EXPECT_EQ(s.makespan_ns, 100 + 200 + 300 + 400 + 500);
  EXPECT_EQ(s.start_ns[3], 100 + 200 + 300);
}

TEST(EventSimTest, IndependentStreamsOverlapAndDependenciesWait) {
  StepProgram p;
  p.ops = {Op(Stream::kDefault), Op(Stream::kAllGather), Op(Stream::kDefault, {1, -1, -1})};
  std::vector<OpCost> c = {{300, 0, 0, 0}, {500, 0, 0, 0}, {100, 0, 0, 0}};
  auto s = RunEventSimulation(p, c);
  EXPECT_EQ(s.start_ns[1], 0);   // overlaps op 0
  EXPECT_EQ(s.start_ns[2], 500); // waits for op 1, not only for op 0 (300)
  EXPECT_EQ(s.makespan_ns, 600);
}

// Two transfers of T ns each on one link, started together: each gets half the bandwidth, so
// both end at latency + 2T. On different links they end at latency + T.
TEST(EventSimTest, ConcurrentTransfersShareTheirLink) {
  StepProgram p;
  p.ops = {Op(Stream::kAllGather), Op(Stream::kReduceScatter)};
  std::vector<OpCost> shared = {{0, 10, 1000, 0}, {0, 10, 1000, 0}};
  auto s = RunEventSimulation(p, shared);
  EXPECT_EQ(s.end_ns[0], 10 + 2000);
  EXPECT_EQ(s.end_ns[1], 10 + 2000);
  std::vector<OpCost> apart = {{0, 10, 1000, 0}, {0, 10, 1000, 1}};
  auto t = RunEventSimulation(p, apart);
  EXPECT_EQ(t.end_ns[0], 1010);
  EXPECT_EQ(t.end_ns[1], 1010);
}

// A second transfer joining halfway: the first has T/2 left at half rate -> ends at T/2 + T;
// the second then runs alone for its remaining T/2: ends at 2T.
TEST(EventSimTest, LateJoinerSlowsTheFirstTransfer) {
  StepProgram p;
  p.ops = {Op(Stream::kAllGather), Op(Stream::kDefault), Op(Stream::kReduceScatter, {1, -1, -1})};
  std::vector<OpCost> c = {{0, 0, 1000, 0}, {500, 0, 0, 0}, {0, 0, 1000, 0}};
  auto s = RunEventSimulation(p, c);
  EXPECT_EQ(s.start_ns[2], 500);
  EXPECT_EQ(s.end_ns[0], 500 + 1000);
  EXPECT_EQ(s.end_ns[2], 2000);
}

// Host-bound: each op needs 300 ns of host time to issue and 100 ns on the GPU. The host issues
// in program order, so op i can start at 300 (i + 1) and the GPU idles between ops:
// makespan = 3 x 300 + 100.
TEST(EventSimTest, TheGpuCannotRunAheadOfTheHost) {
  StepProgram p;
  std::vector<OpCost> c;
  for (int i = 0; i < 3; ++i) {
    p.ops.push_back(Op(Stream::kDefault));
    OpCost oc{100, 0, 0, 0};
    oc.host_ns = 300;
    c.push_back(oc);
  }
  auto s = RunEventSimulation(p, c);
  EXPECT_EQ(s.start_ns[1], 600);
  EXPECT_EQ(s.makespan_ns, 3 * 300 + 100);
  // GPU-bound: 100 ns to issue, 300 on the GPU: the host runs ahead and the GPU never idles
  // after the first issue: makespan = 100 + 3 x 300.
  for (auto& oc : c) {
    oc.fixed_ns = 300;
    oc.host_ns = 100;
  }
  auto g = RunEventSimulation(p, c);
  EXPECT_EQ(g.makespan_ns, 100 + 3 * 300);
}

// A host_sync op is issued only once every earlier op finished: op 1 (a collective stream,
// 1000 ns) holds back op 2's issue, so op 2 starts at 1000 + its 50 ns of host time.
TEST(EventSimTest, AHostSyncWaitsForEveryEarlierOp) {
  StepProgram p;
  p.ops = {Op(Stream::kDefault), Op(Stream::kAllGather), Op(Stream::kDefault)};
  p.ops[2].host_sync = true;
  std::vector<OpCost> c = {{10, 0, 0, 0}, {1000, 0, 0, 0}, {10, 0, 0, 0}};
  c[2].host_ns = 50;
  auto s = RunEventSimulation(p, c);
  EXPECT_EQ(s.start_ns[2], 1000 + 50);
  EXPECT_EQ(s.makespan_ns, 1000 + 50 + 10);
}

TEST(EventSimTest, ToNanosRoundsToNearest) {
  EXPECT_EQ(ToNanos(1.4e-9), 1);
  EXPECT_EQ(ToNanos(1.6e-9), 2);
}

}  // namespace
}  // namespace shardtune::sim
