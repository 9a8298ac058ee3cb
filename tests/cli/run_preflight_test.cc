// run's pre-flight pieces in-process (issue #50): how many checkpoints a run writes and keeps,
// a rank's checkpoint file size from the plan, and the memory judgement against a fake
// /proc/meminfo (SHARDTUNE_TEST_MEMINFO), never this machine's state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cli/run_preflight.h"
#include "model/model_spec.h"
#include "model/module_tree.h"
#include "model/presets.h"

namespace shardtune::cli {
namespace {

using ::testing::HasSubstr;

TEST(RunPreflightTest, CheckpointsWrittenAndOnDiskAtOnce) {
  // Steps 1..10 every 3: 3, 6, 9 and the last, 10.
  CheckpointCount c = CountCheckpoints(0, 10, 3, 0);
  EXPECT_EQ(c.written, 4);
  EXPECT_EQ(c.alive, 4);
  c = CountCheckpoints(0, 10, 3, 1);  // the newest kept, plus the one being written
  EXPECT_EQ(c.alive, 2);
  c = CountCheckpoints(6, 10, 3, 0);  // resumed at 6: 9 and 10
  EXPECT_EQ(c.written, 2);
  c = CountCheckpoints(0, 5, 0, 3);  // only after the last step
  EXPECT_EQ(c.written, 1);
  EXPECT_EQ(c.alive, 1);
  EXPECT_EQ(CountCheckpoints(10, 10, 1, 0).written, 0);  // nothing left to do
}

// Independent of the code under test: fp32 master shards plus AdamW's two fp32 moments, each
// unit's flat parameter padded to a multiple of the shard group (so at most one element per unit
// and rank above 12 bytes x parameters / ranks), plus the metadata allowance.
TEST(RunPreflightTest, CheckpointFileIsTwelveBytesPerShardedParameter) {
  const model::ModelSpec spec = model::FindModelPreset("tiny-llama");
  model::Plan plan;
  plan.seq_len = 64;
  const int world = 2;
  const int64_t bytes = CheckpointFileBytes(spec, plan, world);
  const int64_t params = model::ParameterCount(spec);
  const int64_t units = static_cast<int64_t>(model::BuildFsdpUnits(spec, plan.wrap).size());
  const int64_t allowance = (int64_t{64} << 10) + 256 * units;
  EXPECT_GE(bytes, 12 * params / world + allowance);
  EXPECT_LE(bytes, 12 * (params / world + units) + allowance);
  plan.optimizer = model::Optimizer::kSgd;  // the executor's SGD keeps no state
  EXPECT_LE(CheckpointFileBytes(spec, plan, world), 4 * (params / world + units) + allowance);
}

class FakeMachine {
 public:
  FakeMachine(int64_t total_kib, int64_t available_kib) {
    path_ = (std::filesystem::temp_directory_path() / ("shardtune_meminfo_" + std::to_string(::getpid()))).string();
    std::ofstream(path_) << "MemTotal: " << total_kib << " kB\nMemAvailable: " << available_kib << " kB\n";
    ::setenv("SHARDTUNE_TEST_MEMINFO", path_.c_str(), 1);
  }
  ~FakeMachine() {
    ::unsetenv("SHARDTUNE_TEST_MEMINFO");
    std::filesystem::remove(path_);
  }

 private:
  std::string path_;
};

PreflightRequest TinyOnTwoCpuRanks() {
  PreflightRequest q;
  q.spec = model::FindModelPreset("tiny-llama");
  q.plan.seq_len = 64;
  q.world = 2;
  q.local_processes = 2;
  q.checkpoints = false;
  return q;
}

// Two ranks of tiny-llama need two processes (220 MiB each) and the launcher: 100 MiB available
// cannot hold them; 8 GiB can.
TEST(RunPreflightTest, TheMachinesAvailableMemoryDecides) {
  {
    FakeMachine m(int64_t{8} << 20, 100 << 10);
    PreflightResult r = CheckRunFitsThisMachine(TinyOnTwoCpuRanks());
    EXPECT_THAT(r.error, HasSubstr("run pre-flight: the "));
    EXPECT_THAT(r.error, HasSubstr("of RAM on this machine (2 CPU ranks x "));
    EXPECT_THAT(r.error, HasSubstr("this machine has 100.0 MiB available (MemAvailable of "));
    EXPECT_THAT(r.error, HasSubstr("--no-preflight starts it anyway"));
    EXPECT_EQ(r.error.find('\n'), std::string::npos);
  }
  {
    FakeMachine m(int64_t{8} << 20, int64_t{8} << 20);
    PreflightResult r = CheckRunFitsThisMachine(TinyOnTwoCpuRanks());
    EXPECT_EQ(r.error, "");
    ASSERT_FALSE(r.notes.empty());
    EXPECT_THAT(r.notes.front(), HasSubstr("pre-flight: fits this machine"));
  }
}

TEST(RunPreflightTest, CheckpointsThatDoNotFitTheDiskAreRefused) {
  FakeMachine m(int64_t{8} << 20, int64_t{8} << 20);
  PreflightRequest q = TinyOnTwoCpuRanks();
  q.checkpoints = true;
  q.steps = 10;
  q.checkpoint_every = 2;
  q.out_dir = "/tmp/shardtune-preflight-out";
  const int64_t one = CheckpointFileBytes(q.spec, q.plan, 2) * 2;
  ::setenv("SHARDTUNE_TEST_DISK_FREE_BYTES", std::to_string(5 * one - 1).c_str(), 1);
  PreflightResult r = CheckRunFitsThisMachine(q);
  EXPECT_THAT(r.error, HasSubstr("run pre-flight: --out \"/tmp/shardtune-preflight-out\": 5 checkpoints of "));
  EXPECT_THAT(r.error, HasSubstr("--keep-checkpoints 1"));
  q.keep_checkpoints = 1;  // two on disk at once
  r = CheckRunFitsThisMachine(q);
  EXPECT_EQ(r.error, "");
  ::unsetenv("SHARDTUNE_TEST_DISK_FREE_BYTES");
}

}  // namespace
}  // namespace shardtune::cli
