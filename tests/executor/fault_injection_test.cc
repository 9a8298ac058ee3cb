// Fault injection into real runs (issue #7): a rank SIGKILLed inside forward, backward, a
// collective or a checkpoint write (stopped there by a gdb breakpoint on the real function); a checkpoint write
// that fails (file-size limit: EFBIG, as a full disk gives ENOSPC); a checkpoint of another world
// size or plan; a non-finite loss with --on-nonfinite stop|skip. In each: the run ends within a
// bound with one clear error line, and the last complete checkpoint verifies and resumes.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "executor/train/checkpoint.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {
namespace fs = std::filesystem;

constexpr double kBoundS = 30;  // a failed run must end this soon after its fault
constexpr int kReferenceSteps = 16;

// A constant learning rate, so that step k's loss does not depend on --steps: runs of any length
// share one reference.
std::vector<std::string> Args(const std::string& out, int steps, int nproc,
                              std::vector<std::string> extra = {}, int checkpoint_every = 2) {
  std::vector<std::string> a = {"run", "--model", DataPath("micro-llama.model.json"), "--steps",
                                std::to_string(steps), "--out", out, "--seq-len", "32",
                                "--global-batch", "4", "--threads", "1", "--checkpoint-every",
                                std::to_string(checkpoint_every), "--precision", "fp32",
                                "--nproc", std::to_string(nproc), "--timeout", "20",
                                "--no-trace", "--lr-schedule", "constant", "--warmup-steps", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Starts `shardtune args...` like StartShardtune, with a file-size limit (bytes) and SIGXFSZ
// ignored, so that a write past the limit fails with EFBIG instead of killing the process.
pid_t StartWithFileSizeLimit(const std::vector<std::string>& args, const std::string& log,
                             rlim_t limit_bytes) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setpgid(0, 0);
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  ::signal(SIGXFSZ, SIG_IGN);  // inherited by the ranks the launcher execs
  rlimit lim{limit_bytes, limit_bytes};
  ::setrlimit(RLIMIT_FSIZE, &lim);
  std::vector<char*> argv{const_cast<char*>(SHARDTUNE_BIN)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(SHARDTUNE_BIN, argv.data());
  ::_exit(127);
}

// The pid of the launcher's child whose environment has RANK=rank, or -1.
pid_t RankPid(pid_t launcher, int rank) {
  std::istringstream in(ReadText("/proc/" + std::to_string(launcher) + "/task/" +
                                 std::to_string(launcher) + "/children"));
  for (pid_t c; in >> c;) {
    std::istringstream env(ReadText("/proc/" + std::to_string(c) + "/environ"));
    for (std::string kv; std::getline(env, kv, '\0');) {
      if (kv == "RANK=" + std::to_string(rank)) return c;
    }
  }
  return -1;
}

// The first line of `text` holding `needle`, for messages.
std::string LineWith(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  size_t begin = text.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

std::vector<std::string> WithGlobalBatch(std::vector<std::string> args, const std::string& n) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--global-batch") args[i + 1] = n;
  }
  return args;
}

// Every committed checkpoint under OUT/checkpoints verifies; returns the newest step (0: none).
int64_t NewestCheckpointAllIntact(const std::string& out) {
  int64_t newest = 0;
  for (const auto& [step, dir] : ListCheckpoints(out + "/checkpoints")) {
    CheckpointManifest m;
    EXPECT_EQ(VerifyCheckpoint(dir, &m), "") << dir;
    newest = std::max(newest, step);
  }
  return newest;
}

// Relaunches the run to `steps` and checks it resumes from `from` with the reference losses.
void ExpectResumesWithReferenceLosses(const std::string& out, int steps, int64_t from,
                                      const std::map<int64_t, double>& ref) {
  ProcessResult again = RunShardtune(Args(out, steps, 2));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  if (from > 0) {
    EXPECT_NE(again.output.find("(step " + std::to_string(from) + ")"), std::string::npos)
        << again.output;
  }
  std::map<int64_t, double> resumed = Losses(out);
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed.begin()->first, from + 1);
  for (const auto& [step, loss] : resumed) {
    ASSERT_TRUE(ref.count(step)) << step;
    EXPECT_EQ(loss, ref.at(step)) << "step " << step << " differs from the uninterrupted run";
  }
}

// The run a test then damages and resumes: `steps` steps on 2 ranks into tmp/out, a checkpoint
// every 2 steps; `out` is set to that folder.
void FirstRun(const TempDir& tmp, int steps, std::string* out) {
  *out = tmp.Sub("out");
  ProcessResult first = RunShardtune(Args(*out, steps, 2));
  ASSERT_EQ(first.exit_code, 0) << first.output;
}

class FaultInjectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reference_dir_ = new TempDir();
    ProcessResult ref = RunShardtune(Args(reference_dir_->Sub("ref"), kReferenceSteps, 2));
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
    reference_ = new std::map<int64_t, double>(Losses(reference_dir_->Sub("ref")));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete reference_dir_;
  }
  static std::map<int64_t, double>* reference_;
  static TempDir* reference_dir_;
};
std::map<int64_t, double>* FaultInjectionTest::reference_ = nullptr;
TempDir* FaultInjectionTest::reference_dir_ = nullptr;

// gdb attaches to rank 1 after step 4, stops it at the next call of `function`, and SIGKILL
// ends it there: the rank dies inside that function, as on a crashed host.
TEST_F(FaultInjectionTest, RankKilledInsideForwardBackwardCollectiveOrCheckpointWrite) {
  if (std::system("gdb --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "gdb not installed";
  const std::vector<std::pair<std::string, std::string>> points = {
      {"forward", "FsdpRuntime::Forward"},
      {"backward", "FsdpRuntime::Backward"},
      {"collective", "GlooCommunicator::AllReduce"},
      {"checkpoint write", "shardtune::exec::WriteBlobsAtomically"},
  };
  for (const auto& [point, function] : points) {
    SCOPED_TRACE(point);
    TempDir tmp;
    std::string out = tmp.Sub("out"), log = tmp.Sub("run.log");
    // An open-ended run: kept to its 3 newest checkpoints, else run's pre-flight refuses the
    // 33,334 checkpoints a 100,000-step run would leave on the disk.
    pid_t launcher = StartShardtune(Args(out, 100000, 2, {"--keep-checkpoints", "3"}, 3), log);
    ASSERT_TRUE(WaitForText(log, "step 4/", 120)) << ReadText(log);
    pid_t rank1 = RankPid(launcher, 1);
    ASSERT_GT(rank1, 0);
    // At the breakpoint: a pending SIGSTOP keeps the rank there after gdb detaches (a rank
    // killed while traced is reaped by gdb, not by its launcher); then SIGKILL.
    const std::string pid = std::to_string(rank1);
    std::string gdb = "gdb -nx -batch -iex 'set auto-solib-add off' -p " + pid + " -ex 'break " +
                      function + "' -ex continue -ex 'shell kill -STOP " + pid +
                      "' -ex detach -ex quit > " + tmp.Sub("gdb.log") + " 2>&1";
    ASSERT_EQ(std::system(gdb.c_str()), 0) << ReadText(tmp.Sub("gdb.log"));
    ::kill(rank1, SIGKILL);
    double seconds = 0;
    int code = WaitFor(launcher, 60, &seconds);
    std::string text = ReadText(log), gdb_log = ReadText(tmp.Sub("gdb.log"));
    ASSERT_NE(gdb_log.find("hit Breakpoint 1"), std::string::npos) << gdb_log;
    std::string error = LineWith(text, "was killed by signal 9");
    std::cout << point << ": launcher exited " << code << " after " << seconds << " s: " << error
              << std::endl;
    EXPECT_NE(code, 0) << text;
    EXPECT_NE(code, -1) << "hang: " << text;
    EXPECT_LT(seconds, kBoundS);
    EXPECT_NE(error.find("rank 1 (pid " + std::to_string(rank1) + ")"), std::string::npos) << text;
    int64_t newest = NewestCheckpointAllIntact(out);
    EXPECT_GE(newest, 3) << "the step-3 checkpoint was complete before the kill after step 4";
    if (newest + 2 <= kReferenceSteps) {
      ExpectResumesWithReferenceLosses(out, static_cast<int>(newest) + 2, newest, *reference_);
      // A rank killed inside its checkpoint write left step_N.tmp: the resumed run removed it.
      EXPECT_TRUE(ListPartialCheckpoints(out + "/checkpoints").empty()) << point;
    } else {
      ADD_FAILURE() << "the run got to step " << newest << " before gdb stopped it";
    }
  }
}

// A full disk while checkpointing: rank files larger than the file-size limit fail with EFBIG.
TEST_F(FaultInjectionTest, FailedCheckpointWriteIsAClearErrorAndKeepsThePreviousOne) {
  TempDir tmp;
  std::string out;
  ASSERT_NO_FATAL_FAILURE(FirstRun(tmp, 4, &out));
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(out + "/checkpoints/step_00000004")) {
    before[e.path().filename().string()] = ReadText(e.path().string());
  }
  const auto rank_bytes = fs::file_size(out + "/checkpoints/step_00000004/rank00001.bin");
  std::string log = tmp.Sub("full.log");
  pid_t pid = StartWithFileSizeLimit(Args(out, 8, 2), log, rank_bytes / 2);
  double seconds = 0;
  int code = WaitFor(pid, 120, &seconds);
  std::string text = ReadText(log);
  std::string error = LineWith(text, "error:");
  std::cout << "checkpoint on a full disk: exit " << code << ": " << error << std::endl;
  EXPECT_EQ(code, 3) << text;
  EXPECT_NE(error.find("checkpoint: write failed for"), std::string::npos) << text;
  EXPECT_NE(error.find("File too large"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(out + "/checkpoints/step_00000006")) << text;
  EXPECT_EQ(NewestCheckpointAllIntact(out), 4);
  for (const auto& [name, bytes] : before) {
    EXPECT_EQ(ReadText(out + "/checkpoints/step_00000004/" + name), bytes) << name;
  }
  ExpectResumesWithReferenceLosses(out, 8, 4, *reference_);
}

// A checkpoints folder that cannot be created: a regular file stands where it must go.
TEST_F(FaultInjectionTest, UnwritableCheckpointFolderIsAClearError) {
  TempDir tmp;
  std::string out;
  ASSERT_NO_FATAL_FAILURE(FirstRun(tmp, 2, &out));
  // step_00000004.tmp's parent is a file now: create_directories must fail (ENOTDIR), also as root.
  fs::rename(out + "/checkpoints", out + "/kept");
  { std::ofstream(out + "/checkpoints") << "not a folder"; }
  ProcessResult blocked = RunShardtune(Args(out, 4, 2));
  // Rank 0 names the cause; the other rank's lost barrier and the launcher's summary follow.
  std::string error = LineWith(blocked.output, "error: checkpoint: cannot create");
  std::cout << "unwritable checkpoint folder: exit " << blocked.exit_code << ": " << error
            << std::endl;
  EXPECT_NE(blocked.exit_code, 0) << blocked.output;
  EXPECT_NE(blocked.exit_code, -1) << "hang: " << blocked.output;
  EXPECT_LT(blocked.seconds, kBoundS + 20) << blocked.output;
  EXPECT_NE(error.find("checkpoints/step_00000002.tmp\": Not a directory"), std::string::npos)
      << blocked.output;
  fs::remove(out + "/checkpoints");
  fs::rename(out + "/kept", out + "/checkpoints");
  EXPECT_EQ(NewestCheckpointAllIntact(out), 2);
  ExpectResumesWithReferenceLosses(out, 4, 2, *reference_);
}

TEST_F(FaultInjectionTest, CheckpointOfAnotherWorldSizeOrPlanIsAnInputError) {
  TempDir tmp;
  std::string out;
  ASSERT_NO_FATAL_FAILURE(FirstRun(tmp, 2, &out));
  struct Case {
    std::string what;
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"world size", Args(out, 4, 1), "was written by 2 ranks with shard group 2, this run has 1"},
      {"wrap", Args(out, 4, 2, {"--wrap", "every:2"}), "FSDP units, this run has"},
      {"global batch", WithGlobalBatch(Args(out, 4, 2), "8"),
       "a global batch of 4 sequences, this run has 8"},
      {"optimizer", Args(out, 4, 2, {"--optimizer", "sgd"}), "AdamW state"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ProcessResult r = RunShardtune(c.args);
    // Rank 0 says why; the other ranks say that rank 0 rejected the checkpoint.
    std::string error = LineWith(r.output, c.says);
    std::cout << "resume with another " << c.what << ": exit " << r.exit_code << ": " << error
              << std::endl;
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(error.find(c.says), std::string::npos) << r.output;
    EXPECT_NE(error.find("hint: use another --out"), std::string::npos) << r.output;
  }
  EXPECT_EQ(NewestCheckpointAllIntact(out), 2);
  ExpectResumesWithReferenceLosses(out, 4, 2, *reference_);
}

// --lr 1e30 sends the parameters to ~1e30 in step 1, so every later loss is NaN or inf.
TEST_F(FaultInjectionTest, NonFiniteLossStopsOrSkipsAsConfigured) {
  TempDir tmp;
  ProcessResult stop = RunShardtune(Args(tmp.Sub("stop"), 6, 2, {"--lr", "1e30"}, 1));
  std::string error = LineWith(stop.output, "error:");
  std::cout << "non-finite, stop: exit " << stop.exit_code << ": " << error << std::endl;
  EXPECT_EQ(stop.exit_code, 3) << stop.output;
  EXPECT_NE(error.find("stopping (--on-nonfinite stop)"), std::string::npos) << stop.output;
  const int64_t kept = NewestCheckpointAllIntact(tmp.Sub("stop"));
  EXPECT_GE(kept, 1);
  EXPECT_LT(kept, 6);
  EXPECT_NE(error.find("step " + std::to_string(kept + 1) + ":"), std::string::npos)
      << "the first non-finite step is the one after the last checkpoint: " << stop.output;

  ProcessResult skip = RunShardtune(
      Args(tmp.Sub("skip"), 6, 2, {"--lr", "1e30", "--on-nonfinite", "skip"}, 1));
  ASSERT_EQ(skip.exit_code, 0) << skip.output;
  std::string skipped = LineWith(skip.output, "its update is skipped (--on-nonfinite skip)");
  std::cout << "non-finite, skip: " << skipped << std::endl;
  EXPECT_NE(skipped, "") << skip.output;
  // A skipped step changes no parameter and no optimizer state: the last two checkpoints hold
  // the same parameter and moment bytes (only the step counters in "meta" differ).
  std::string ckpt = tmp.Sub("skip") + "/checkpoints/";
  auto blobs5 = DecodeBlobs(ReadWholeFile(ckpt + "step_00000005/rank00000.bin"), "step 5");
  auto blobs6 = DecodeBlobs(ReadWholeFile(ckpt + "step_00000006/rank00000.bin"), "step 6");
  ASSERT_EQ(blobs5.size(), blobs6.size());
  int compared = 0;
  for (size_t i = 0; i < blobs5.size(); ++i) {
    if (blobs5[i].name == "meta" || blobs5[i].name.rfind("rng/", 0) == 0) continue;
    EXPECT_EQ(blobs5[i].bytes, blobs6[i].bytes) << blobs5[i].name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace shardtune::exec::testing
