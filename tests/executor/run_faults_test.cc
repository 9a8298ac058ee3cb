// Failures of real runs: a SIGKILLed run resumes from its last complete checkpoint with the
// losses of an uninterrupted run; truncated or corrupted checkpoints are skipped with a clear
// message; a rank that dies makes the others fail with a clear error within a bound.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "executor/train/launcher.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

std::vector<std::string> Args(const std::string& out, int steps, int nproc) {
  return {"run",
          "--model",
          DataPath("micro-llama.model.json"),
          "--steps",
          std::to_string(steps),
          "--out",
          out,
          "--seq-len",
          "32",
          "--global-batch",
          "4",
          "--threads",
          "1",
          "--checkpoint-every",
          "2",
          "--precision",
          "fp32",
          "--nproc",
          std::to_string(nproc),
          "--timeout",
          "20"};
}

// The losses of the relaunched run (tmp/run) against the uninterrupted one's (tmp/ref): the steps
// both logged and the largest loss difference on them.
struct ResumedLosses {
  std::map<int64_t, double> resumed;  // step -> loss of the relaunched run
  int common_steps = 0;
  double max_diff = 0;
};

ResumedLosses CompareWithUninterrupted(const TempDir& tmp) {
  ResumedLosses r;
  r.resumed = Losses(tmp.Sub("run"));
  for (const auto& [step, loss] : Losses(tmp.Sub("ref"))) {
    auto it = r.resumed.find(step);
    if (it == r.resumed.end()) continue;
    ++r.common_steps;
    r.max_diff = std::max(r.max_diff, std::fabs(loss - it->second));
  }
  return r;
}

// The relaunched run resumed after step `first_step - 1` and then logged the uninterrupted run's
// losses bit for bit over `common_steps` steps.
void ExpectResumedWithTheUninterruptedLosses(const TempDir& tmp, int64_t first_step,
                                             int common_steps) {
  SCOPED_TRACE("resumed at step " + std::to_string(first_step));
  ResumedLosses r = CompareWithUninterrupted(tmp);
  EXPECT_EQ(r.resumed.begin()->first, first_step);
  EXPECT_EQ(r.common_steps, common_steps);
  EXPECT_EQ(r.max_diff, 0.0);
}

TEST(ExecutorRunFaultsTest, SigkillThenRelaunchResumesWithTheUninterruptedLosses) {
  TempDir tmp;
  ProcessResult ref = RunShardtune(Args(tmp.Sub("ref"), 8, 2));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  std::string log = tmp.Sub("killed.log");
  pid_t pid = StartShardtune(Args(tmp.Sub("run"), 8, 2), log);
  ASSERT_TRUE(WaitForText(log, "step 5/8", 120)) << ReadText(log);
  ::kill(-pid, SIGKILL);  // the launcher and both ranks (one process group)
  EXPECT_EQ(WaitFor(pid, 30), 128 + SIGKILL);

  ProcessResult again = RunShardtune(Args(tmp.Sub("run"), 8, 2));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from checkpoint"), std::string::npos) << again.output;
  ResumedLosses r = CompareWithUninterrupted(tmp);
  ASSERT_FALSE(r.resumed.empty());
  EXPECT_GE(r.resumed.begin()->first, 5) << "resumes after a checkpoint of step >= 4";
  EXPECT_EQ(r.resumed.rbegin()->first, 8);
  std::cout << "resumed at step " << r.resumed.begin()->first << ": loss max diff vs uninterrupted "
            << r.max_diff << " over " << r.common_steps << " steps\n";
  EXPECT_EQ(r.common_steps, static_cast<int>(r.resumed.size()));
  EXPECT_EQ(r.max_diff, 0.0) << "the same computation, restored bit for bit";
}

TEST(ExecutorRunFaultsTest, CorruptedAndTruncatedCheckpointsAreSkipped) {
  TempDir tmp;
  ProcessResult ref = RunShardtune(Args(tmp.Sub("ref"), 6, 2));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ProcessResult first = RunShardtune(Args(tmp.Sub("run"), 6, 2));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::string ckpt = tmp.Sub("run") + "/checkpoints";
  // Step 6: one flipped byte (same size: only the checksum sees it). Step 4: rank 1's file
  // truncated. Step 2 stays intact.
  {
    std::fstream io(ckpt + "/step_00000006/rank00000.bin",
                    std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(40);
    char c = static_cast<char>(io.get());
    io.seekp(40);
    io.put(static_cast<char>(c ^ 0x5a));
  }
  std::filesystem::resize_file(ckpt + "/step_00000004/rank00001.bin", 100);
  ProcessResult again = RunShardtune(Args(tmp.Sub("run"), 6, 2));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("checkpoint " + ckpt +
                              "/step_00000006 is incomplete or corrupted (rank00000.bin: checksum "
                              "mismatch); skipping it"),
            std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("step_00000004 is incomplete or corrupted (rank00001.bin: 100 bytes, "
                              "manifest says "),
            std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("resumed from checkpoint " + ckpt + "/step_00000002 (step 2)"),
            std::string::npos)
      << again.output;
  // Steps 3..6 of the resumed run equal the uninterrupted run's.
  ExpectResumedWithTheUninterruptedLosses(tmp, 3, 4);
}

// torchtitan's MoE balances its experts with a bias updated before every optimizer step
// (Transformer::UpdateExpertBias): a resumed run must restore it, or its routing, and so its
// losses, leave the uninterrupted run's. micro-qwen-moe with --modeling torchtitan and ep 2 on 2
// ranks; the step-6 checkpoint removed, the relaunch resumes from step 4.
TEST(ExecutorRunFaultsTest, TorchtitanMoeResumesWithItsExpertBias) {
  TempDir tmp;
  auto args = [&](const std::string& out) {
    std::vector<std::string> a = Args(out, 6, 2);
    a[2] = DataPath("micro-qwen-moe.model.json");
    a.insert(a.end(), {"--modeling", "torchtitan", "--ep", "2", "--lr", "1e-2"});
    return a;
  };
  ProcessResult ref = RunShardtune(args(tmp.Sub("ref")));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ProcessResult first = RunShardtune(args(tmp.Sub("run")));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::filesystem::remove_all(tmp.Sub("run") + "/checkpoints/step_00000006");
  ProcessResult again = RunShardtune(args(tmp.Sub("run")));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("(step 4)"), std::string::npos) << again.output;
  ExpectResumedWithTheUninterruptedLosses(tmp, 5, 2);
}

// Ranks started the way torchrun starts them (RANK, WORLD_SIZE, MASTER_*): no launcher kills
// the survivor, so it must notice the dead peer by itself.
TEST(ExecutorRunFaultsTest, KilledRankMakesTheOtherFailWithAClearErrorWithinABound) {
  TempDir tmp;
  std::vector<std::string> args = Args(tmp.Sub("out"), 1000, 1);
  args.resize(args.size() - 4);  // drop --nproc 1 --timeout 20
  args.insert(args.end(), {"--timeout", "20"});
  std::string port = std::to_string(FindFreePort());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(r)},
                                           {"WORLD_SIZE", "2"},
                                           {"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", port}};
    pids.push_back(StartShardtune(args, tmp.Sub("rank" + std::to_string(r) + ".log"), env));
  }
  ASSERT_TRUE(WaitForText(tmp.Sub("rank0.log"), "step 2/", 120)) << ReadText(tmp.Sub("rank0.log"));
  ::kill(pids[1], SIGKILL);
  WaitFor(pids[1], 10);
  double seconds = 0;
  int code = WaitFor(pids[0], 60, &seconds);
  std::string out = ReadText(tmp.Sub("rank0.log"));
  std::cout << "rank 0 exited " << seconds << " s after rank 1 was killed: "
            << out.substr(out.rfind("error:") == std::string::npos ? 0 : out.rfind("error:"))
            << "\n";
  EXPECT_EQ(code, 3) << out;  // a backend error, not a hang (-1) or a crash
  EXPECT_LT(seconds, 25.0);
  EXPECT_NE(out.find("error: rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("failed"), std::string::npos) << out;
}

// Our launcher: when one rank dies, it stops the others and names the dead one.
TEST(ExecutorRunFaultsTest, LauncherStopsTheOtherRanksWhenOneDies) {
  TempDir tmp;
  std::string log = tmp.Sub("launch.log");
  pid_t launcher = StartShardtune(Args(tmp.Sub("out"), 1000, 2), log);
  ASSERT_TRUE(WaitForText(log, "step 2/", 120)) << ReadText(log);
  // The launcher's children; rank 1 is the one whose environment says RANK=1.
  std::string children = ReadText("/proc/" + std::to_string(launcher) + "/task/" +
                                  std::to_string(launcher) + "/children");
  pid_t rank1 = -1;
  std::istringstream in(children);
  for (pid_t c; in >> c;) {
    std::istringstream env(ReadText("/proc/" + std::to_string(c) + "/environ"));
    for (std::string kv; std::getline(env, kv, '\0');) {
      if (kv == "RANK=1") rank1 = c;
    }
  }
  ASSERT_GT(rank1, 0) << "children: " << children;
  ::kill(rank1, SIGKILL);
  double seconds = 0;
  int code = WaitFor(launcher, 60, &seconds);
  std::string out = ReadText(log);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(code, -1) << "the launcher must not hang: " << out;
  EXPECT_LT(seconds, 25.0);
  EXPECT_NE(out.find("rank 1 (pid " + std::to_string(rank1) + ") was killed by signal 9"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace shardtune::exec::testing
