// tune --measure's child runs (cli/tune_measure.h MeasureRunArgv): Gloo ranks on cpu:N, this
// machine's GPU on a GPU cluster, emulating rank 0 of the cluster's world when it has several.
#include "cli/tune_measure.h"

#include <gtest/gtest.h>

#include "profiles/cluster.h"

namespace shardtune::cli {
namespace {

std::vector<std::string> Argv(const std::string& cluster) {
  MeasureOptions o;
  o.steps = 5;
  o.model_arg = "tiny-llama";
  return MeasureRunArgv("/bin/shardtune-exec", o, profiles::ParseClusterShorthand(cluster), "p.json", "out");
}

TEST(TuneMeasureTest, CpuClustersTrainOnGlooRanks) {
  std::vector<std::string> want = {"/bin/shardtune-exec", "run", "--model", "tiny-llama", "--plan", "p.json",
                                   "--steps", "5", "--out", "out", "--nproc", "2"};
  EXPECT_EQ(Argv("cpu:2"), want);
}

TEST(TuneMeasureTest, GpuClustersTrainOnThisGpuAsRankZeroOfTheirWorld) {
  std::vector<std::string> one = {"/bin/shardtune-exec", "run", "--model", "tiny-llama", "--plan", "p.json",
                                  "--steps", "5", "--out", "out", "--device", "cuda"};
  EXPECT_EQ(Argv("1xH100"), one);
  std::vector<std::string> eight = one;
  eight.insert(eight.end(), {"--emulate-world", "16"});
  EXPECT_EQ(Argv("2x8xH100"), eight);
}

}  // namespace
}  // namespace shardtune::cli
