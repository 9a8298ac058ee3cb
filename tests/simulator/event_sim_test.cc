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

TEST(EventSimTest, ToNanosRoundsToNearest) {
  EXPECT_EQ(ToNanos(1.4e-9), 1);
  EXPECT_EQ(ToNanos(1.6e-9), 2);
}

}  // namespace
}  // namespace shardtune::sim
