// `shardtune probe --device cpu`: the profile it writes is a valid version-3 profile whose
// tables hold what was asked for (GEMMs over the model's shapes, memory-bound kernels, host
// costs, Gloo collectives between real rank processes), and its bad inputs are one-line errors.
#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "model/gemm_shapes.h"
#include "model/presets.h"
#include "simulator/profile_json.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

TEST(ExecutorProbeCliTest, CpuProbeWritesTablesOverTheModelsShapes) {
  TempDir tmp;
  const std::string out = tmp.Sub("cpu.json");
  ProcessResult r = RunShardtune({"probe", "--device", "cpu", "--model", "tiny-llama", "--tokens",
                                  "64", "--budget-s", "30", "--threads", "1", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  sim::Profile p = sim::ReadProfileFile(out);
  ASSERT_TRUE(p.costs.tables);
  const profiles::KernelTables& t = *p.costs.tables;
  // Every distinct GEMM of tiny-llama at 64 rows (forward, dX, dW of each projection and the
  // head) was timed: tiny-llama's shapes are small enough for the budget.
  model::ModelSpec spec = model::FindModelPreset("tiny-llama");
  std::vector<model::GemmShape> fwd = model::BlockForwardGemms(spec, 64, 0);
  fwd.push_back(model::HeadForwardGemm(spec, 64));
  std::set<std::tuple<int64_t, int64_t, int64_t>> want, got;
  for (const auto& g : model::WithBackward(fwd)) want.insert({g.m, g.n, g.k});
  for (const auto& g : t.gemm) {
    got.insert({g.m, g.n, g.k});
    EXPECT_GT(g.time.count(), 0);
    EXPECT_EQ(g.dtype, model::DType::kFp32);
  }
  EXPECT_EQ(got, want);
  EXPECT_FALSE(t.memory.empty());
  EXPECT_FALSE(t.attention.empty());
  ASSERT_TRUE(t.host.op_dispatch);
  EXPECT_GT(t.host.op_dispatch->count(), 0);
  EXPECT_TRUE(t.copies.empty());       // no GPU, no host <-> device copies
  EXPECT_TRUE(t.collectives.empty());  // one rank
  EXPECT_EQ(p.provenance.backend, "cpu");
  EXPECT_FALSE(p.provenance.date.empty());
  EXPECT_NE(p.provenance.command.find("probe"), std::string::npos);
}

TEST(ExecutorProbeCliTest, TwoRanksTimeGlooCollectives) {
  TempDir tmp;
  const std::string out = tmp.Sub("gloo.json");
  ProcessResult r = RunShardtune({"probe", "--device", "cpu", "--nproc", "2", "--tokens", "64",
                                  "--budget-s", "2", "--threads", "1", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  sim::Profile p = sim::ReadProfileFile(out);
  ASSERT_TRUE(p.costs.tables);
  std::set<profiles::Collective> kinds;
  for (const auto& c : p.costs.tables->collectives) {
    EXPECT_EQ(c.backend, "gloo");
    EXPECT_EQ(c.ranks, 2);
    EXPECT_GT(c.time.count(), 0);
    kinds.insert(c.kind);
  }
  EXPECT_EQ(kinds, (std::set<profiles::Collective>{profiles::Collective::kAllGather,
                                                    profiles::Collective::kReduceScatter,
                                                    profiles::Collective::kAllReduce,
                                                    profiles::Collective::kAllToAll}));
  // The Gloo samples are fitted into the loopback family's collective model (cpu:N clusters).
  ASSERT_EQ(p.costs.collectives.size(), 1u);
  EXPECT_EQ(p.costs.collectives[0].link_family, "loopback");
  EXPECT_EQ(p.costs.collectives[0].group_size, 2);
  EXPECT_GT(p.costs.collectives[0].bus_bandwidth.count(), 0);
  ASSERT_FALSE(p.fits.empty());
  EXPECT_EQ(p.fits[0].term, "collectives loopback x2");
}

TEST(ExecutorProbeCliTest, BadInputsAreOneLineErrors) {
  TempDir tmp;
  const std::string out = tmp.Sub("x.json");
  ExpectInputError({"probe", "--device", "tpu", "--out", out}, "--device: expected cpu or cuda");
  ExpectInputError({"probe", "--nproc", "0", "--out", out}, "--nproc: expected an integer in [1, 64]");
  ExpectInputError({"probe", "--tokens", "64,x", "--out", out}, "--tokens");
  ExpectInputError({"probe", "--dtypes", "fp8", "--out", out}, "--dtypes");
  ExpectInputError({"probe", "--budget-s", "0", "--out", out}, "--budget-s");
  ExpectInputError({"probe", "--out", tmp.Sub("no/such/folder/x.json")}, "--out: expected a file in an existing folder");
  EXPECT_FALSE(std::filesystem::exists(out));  // nothing half-written by the refused calls
}

}  // namespace
}  // namespace shardtune::exec::testing
