// `shardtune run` input errors: one line on stderr, exit code 1, before any rank starts; and a
// smoke run of the tiny-llama preset with the default plan (bf16, FULL_SHARD) on 2 ranks.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "executor/train/run.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

std::vector<std::string> Base(const std::string& out) {
  return {"run",       "--model",   DataPath("micro-llama.model.json"),
          "--steps",   "1",         "--out",
          out,         "--seq-len", "16",
          "--threads", "1"};
}

// measurements.json records the attention that ran: a LibTorch without scaled_dot_product_attention
// (1.13) runs the eager path, says so once, and records plan attention eager, so validate and
// calibrate compare the eager path's memory and time with their predictions.
TEST(ExecutorRunCliTest, TheRecordedAttentionIsTheOneThatRan) {
  TempDir tmp;
  ProcessResult r = RunShardtune(Base(tmp.Sub("out")));  // the default plan: --attention sdpa
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json m = nlohmann::json::parse(ReadText(tmp.Sub("out") + "/measurements.json"));
  const bool sdpa = SdpaRunsAvailable();
  EXPECT_EQ(m.at("plan").at("attention"), sdpa ? "sdpa" : "eager");
  EXPECT_EQ(r.output.find("the run uses eager attention") != std::string::npos, !sdpa) << r.output;
}

// --torch-profile: with a LibTorch that has Kineto, rank 0's steps after the first are in
// OUT/torch_trace.json, each inside a "ProfilerStep#N" user annotation (what calibrate --trace
// reads); without (Debian's 1.13), the run stops before its first step with the reason and the
// fix, and leaves no trace file behind.
TEST(ExecutorRunCliTest, TorchProfileWritesProfilerStepsOrRefusesBeforeTheFirstStep) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a[4] = "3";
  a.push_back("--torch-profile");
  ProcessResult r = RunShardtune(a);
  const std::string trace = tmp.Sub("out") + "/torch_trace.json";
  if (r.exit_code != 0) {
    EXPECT_NE(r.output.find("--torch-profile: this LibTorch was built without Kineto"), std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("step 1/3"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(trace));
    EXPECT_FALSE(std::filesystem::exists(tmp.Sub("out") + "/.torch_profile_check.json.tmp"));
    return;
  }
  nlohmann::json t = nlohmann::json::parse(ReadText(trace));
  std::vector<std::string> steps;
  for (const auto& e : t.at("traceEvents")) {
    if (e.value("cat", "") == "user_annotation" && e.value("name", "").rfind("ProfilerStep#", 0) == 0) {
      steps.push_back(e.at("name"));
    }
  }
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<std::string>{"ProfilerStep#2", "ProfilerStep#3"}));
  EXPECT_NE(r.output.find("wrote " + trace), std::string::npos) << r.output;
}

// AdamW on CPU ranks (and under CPU offload) is the one-pass host kernel, the fused update's
// traffic: the measurements record fused whatever --optimizer-impl asked, with no note.
TEST(ExecutorRunCliTest, HostAdamWIsRecordedAsFused) {
  for (const char* impl : {"foreach", "fused"}) {
    TempDir tmp;
    auto a = With(Base(tmp.Sub("out")), {"--optimizer-impl", impl});
    ProcessResult r = RunShardtune(a);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("note: --optimizer-impl"), std::string::npos) << r.output;
    nlohmann::json m = nlohmann::json::parse(ReadText(tmp.Sub("out") + "/measurements.json"));
    EXPECT_EQ(m.at("plan").at("optimizer_impl"), "fused") << impl;
  }
}

TEST(ExecutorRunCliTest, NprocZeroIsAnInputError) {
  TempDir tmp;
  ExpectInputError(With(Base(tmp.Sub("out")), {"--nproc", "0"}),
                   "--nproc: expected an integer >= 1, got 0");
}

TEST(ExecutorRunCliTest, StepsZeroIsAnInputError) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a[4] = "0";
  ExpectInputError(a, "--steps: expected an integer >= 1, got 0");
}

// A sequence beyond the trained context (micro-llama's max_seq_len 64, rotary positions) runs
// with the warning estimate gives, up to the same limit (ModelSpec::SeqLenLimit); before, run
// refused what estimate and tune accepted.
TEST(ExecutorRunCliTest, SequenceBeyondTheTrainedContextRunsWithEstimatesWarning) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a[8] = "96";
  ProcessResult r = RunShardtune(a);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: --seq-len 96 is beyond"), std::string::npos) << r.output;
  nlohmann::json m = nlohmann::json::parse(ReadText(tmp.Sub("out") + "/measurements.json"));
  EXPECT_EQ(m.at("plan").at("seq_len"), 96);
}

TEST(ExecutorRunCliTest, UnreadableDataIsAnInputError) {
  TempDir tmp;
  ExpectInputError(With(Base(tmp.Sub("out")), {"--data", tmp.Sub("missing.txt")}),
                   "--data: cannot read \"" + tmp.Sub("missing.txt") + "\": No such file");
}

TEST(ExecutorRunCliTest, DataShorterThanASequenceIsAnInputError) {
  TempDir tmp;
  std::ofstream(tmp.Sub("short.txt")) << "hello";
  ExpectInputError(With(Base(tmp.Sub("out")), {"--data", tmp.Sub("short.txt")}),
                   "holds 5 bytes, expected at least seq_len + 1 = 17");
}

TEST(ExecutorRunCliTest, NegativeKeepCheckpointsIsAnInputError) {
  TempDir tmp;
  ExpectInputError(With(Base(tmp.Sub("out")), {"--keep-checkpoints", "-1"}),
                   "--keep-checkpoints: expected an integer >= 0 (0: keep all), got -1");
}

TEST(ExecutorRunCliTest, OutThatCannotBeAFolderIsAnInputError) {
  TempDir tmp;
  std::ofstream(tmp.Sub("file")) << "x";
  ExpectInputError(Base(tmp.Sub("file") + "/out"), "--out: cannot create the folder");
}

TEST(ExecutorRunCliTest, GlobalBatchMustDivideIntoMicroBatchesAndRanks) {
  TempDir tmp;
  ExpectInputError(With(Base(tmp.Sub("out")), {"--nproc", "2", "--global-batch", "3"}),
                   "--global-batch: expected a multiple of micro-batch x data-parallel ranks = 1 x "
                   "2 = 2, got 3");
}

TEST(ExecutorRunCliTest, UnsupportedPlanChoicesAreInputErrors) {
  TempDir tmp;
  ExpectInputError(With(Base(tmp.Sub("out")), {"--optimizer", "adafactor"}),
                   "--optimizer: the executor runs adamw or sgd, got adafactor");
  ExpectInputError(With(Base(tmp.Sub("out")), {"--emulate-world", "4", "--nproc", "2"}),
                   "--emulate-world: runs in one process");
  ExpectInputError(With(Base(tmp.Sub("out")), {"--device", "gpu"}),
                   "--device: expected cpu or cuda, got 'gpu'");
}

TEST(ExecutorRunCliTest, TinyLlamaDefaultPlanOnTwoRanksWritesMeasurementsAndTrace) {
  TempDir tmp;
  std::string out = tmp.Sub("out");
  ProcessResult r = RunShardtune({"run", "--model", "tiny-llama", "--steps", "2", "--out", out,
                                  "--nproc", "2", "--seq-len", "32", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 2/2  loss "), std::string::npos) << r.output;
  std::ifstream in(out + "/measurements.json");
  nlohmann::json m = nlohmann::json::parse(in);
  EXPECT_EQ(m.at("schema"), "shardtune.measurements");
  EXPECT_EQ(m.at("schema_version"), 1);
  EXPECT_EQ(m.at("environment").at("world_size"), 2);
  EXPECT_EQ(m.at("environment").at("backend"), "gloo");
  EXPECT_EQ(m.at("plan").at("param_dtype"), "bf16");
  ASSERT_EQ(m.at("steps").size(), 2u);
  EXPECT_EQ(m.at("steps")[0].at("tokens"), 2 * 32);  // global batch 2 (1 x 1 x 2 ranks) x S
  // Units as BuildFsdpUnits forms them for per-block wrapping: 4 blocks + root.
  EXPECT_EQ(m.at("units").size(), 5u);
  bool saw_rs = false;
  for (const auto& c : m.at("collectives")) {
    if (c.at("kind") == "reduce_scatter") {
      saw_rs = true;
      EXPECT_EQ(c.at("group_size"), 2);
      // Built from all-to-all, it sends (n-1)/n of the flat gradient, like a ring.
      EXPECT_EQ(c.at("sent_bytes_per_call"), c.at("bytes").get<int64_t>() / 2);
      EXPECT_GT(c.at("busbw_bytes_per_s").get<double>(), 0);
    }
  }
  EXPECT_TRUE(saw_rs);
  EXPECT_GT(m.at("memory").at("peak_tracked_bytes").get<int64_t>(), 0);
  EXPECT_EQ(m.at("memory").at("per_rank").size(), 2u);
  std::ifstream tin(out + "/trace.json");
  nlohmann::json trace = nlohmann::json::parse(tin);
  EXPECT_GT(trace.at("traceEvents").size(), 10u);
  EXPECT_FALSE(std::filesystem::exists(out + "/.trace.rank1.json"));
  // Each rank's memory counters: sampled at every span's end, the peaks between samples cover
  // the run from the tracker's install to the last span, so their maximum is the rank's
  // tracked peak unless it came after the last span (nothing allocates tensors after the final
  // checkpoint span but the checkpoint's own writes, below the training peak).
  std::map<int, double> counter_peak_mib, live_samples;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "C") continue;
    const int pid = e.at("pid").get<int>();
    const double mib = e.at("args").at("MiB").get<double>();
    if (e.at("name") == "memory: tracked peak since the previous span (MiB)") {
      counter_peak_mib[pid] = std::max(counter_peak_mib[pid], mib);
    } else if (e.at("name") == "memory: tracked live (MiB)") {
      live_samples[pid] += 1;
    }
  }
  ASSERT_EQ(counter_peak_mib.size(), 2u);
  for (const auto& rank : m.at("memory").at("per_rank")) {
    const int pid = rank.at("rank").get<int>();
    const double peak_mib = static_cast<double>(rank.at("tracked_peak_bytes").get<int64_t>()) / (1 << 20);
    EXPECT_NEAR(counter_peak_mib.at(pid), peak_mib, 1e-6 * peak_mib) << "rank " << pid;
    EXPECT_GT(live_samples.at(pid), 10) << "rank " << pid;
  }
}

TEST(ExecutorRunCliTest, TextFileTrainsAsByteTokensAndTheLossFalls) {
  TempDir tmp;
  {
    std::ofstream f(tmp.Sub("text.txt"));
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  std::string out = tmp.Sub("out");
  ProcessResult r = RunShardtune({"run", "--model", DataPath("micro-llama.model.json"), "--steps",
                                  "12", "--out", out, "--data", tmp.Sub("text.txt"), "--seq-len",
                                  "32", "--global-batch", "4", "--nproc", "2", "--threads", "1",
                                  "--lr", "3e-3", "--no-trace"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<int64_t, double> loss = Losses(out);
  ASSERT_EQ(loss.size(), 12u);
  std::cout << "byte-level text: loss " << loss.at(1) << " -> " << loss.at(12) << "\n";
  EXPECT_LT(loss.at(12), loss.at(1) - 0.5);  // 9000 bytes of one sentence are easy to learn
  EXPECT_FALSE(std::filesystem::exists(out + "/trace.json"));
}

// Pre-flight (issue #50): a plan this machine cannot hold is refused before any rank starts, with
// the phase and both figures on one line; the machine is a fake /proc/meminfo (100 MiB available),
// never this machine's state. --no-preflight starts it anyway, with a warning.
TEST(ExecutorRunCliTest, PreflightRefusesWhatThisMachineCannotHoldBeforeAnyRankStarts) {
  TempDir tmp;
  { std::ofstream(tmp.Sub("meminfo")) << "MemTotal: 8388608 kB\nMemAvailable: 102400 kB\n"; }
  const std::map<std::string, std::string> env{{"SHARDTUNE_TEST_MEMINFO", tmp.Sub("meminfo")}};
  auto a = With(Base(tmp.Sub("out")), {"--nproc", "2"});
  ProcessResult r = RunShardtune(a, 60, env);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::vector<std::string> errors;
  std::istringstream lines(r.output);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("error: ", 0) == 0) errors.push_back(l);
  }
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_NE(errors[0].find("error: run pre-flight: the "), std::string::npos) << r.output;
  EXPECT_NE(errors[0].find("(2 CPU ranks x "), std::string::npos) << r.output;
  EXPECT_NE(errors[0].find("this machine has 100.0 MiB available (MemAvailable of " + tmp.Sub("meminfo")),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << r.output;
  // --out is created while the flags are checked (it must be writable); nothing is written in it.
  EXPECT_TRUE(std::filesystem::is_empty(tmp.Sub("out"))) << "nothing started, nothing written";

  a.push_back("--no-preflight");
  ProcessResult forced = RunShardtune(a, 120, env);
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("warning: --no-preflight: "), std::string::npos) << forced.output;
}

TEST(ExecutorRunCliTest, PreflightRefusesCheckpointsTheDiskCannotHold) {
  TempDir tmp;
  auto a = With(Base(tmp.Sub("out")), {"--checkpoint-every", "1"});
  a[4] = "3";
  ProcessResult r = RunShardtune(a, 60, {{"SHARDTUNE_TEST_DISK_FREE_BYTES", "1000"}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: run pre-flight: --out \"" + tmp.Sub("out") + "\": 3 checkpoints of "),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("free; hint: --keep-checkpoints 1"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::is_empty(tmp.Sub("out")));
}

// --keep-checkpoints K keeps the newest K complete checkpoints, deleting an older one only after
// the new one is complete; a later run's checkpoints count too.
TEST(ExecutorRunCliTest, KeepCheckpointsKeepsTheNewestK) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a[4] = "4";
  a.insert(a.end(), {"--nproc", "2", "--checkpoint-every", "1", "--keep-checkpoints", "2"});
  ProcessResult r = RunShardtune(a);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto kept = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(tmp.Sub("out") + "/checkpoints")) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(kept(), (std::vector<std::string>{"step_00000003", "step_00000004"})) << r.output;
  EXPECT_NE(r.output.find("removed checkpoint " + tmp.Sub("out") + "/checkpoints/step_00000001 (--keep-checkpoints 2)"),
            std::string::npos) << r.output;
  a[4] = "5";
  a.back() = "1";
  ProcessResult more = RunShardtune(a);
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("resumed from checkpoint"), std::string::npos) << more.output;
  EXPECT_EQ(kept(), (std::vector<std::string>{"step_00000005"})) << more.output;
}

// A save that did not finish (a rank killed, a full disk) leaves step_N.tmp; the next run removes
// it and says so, and never touches a complete checkpoint.
TEST(ExecutorRunCliTest, PartialCheckpointsOfAnEarlierRunAreRemovedCompleteOnesKept) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  ProcessResult first = RunShardtune(a);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string root = tmp.Sub("out") + "/checkpoints";
  const std::string complete = ReadText(root + "/step_00000001/rank00000.bin");
  std::filesystem::create_directories(root + "/step_00000002.tmp");
  { std::ofstream(root + "/step_00000002.tmp/rank00000.bin.tmp") << std::string(4096, 'x'); }
  std::filesystem::create_directories(root + "/step_00000001.old");
  a[4] = "2";
  ProcessResult next = RunShardtune(a);
  ASSERT_EQ(next.exit_code, 0) << next.output;
  EXPECT_FALSE(std::filesystem::exists(root + "/step_00000002.tmp")) << next.output;
  EXPECT_FALSE(std::filesystem::exists(root + "/step_00000001.old")) << next.output;
  EXPECT_NE(next.output.find("removed " + root + "/step_00000002.tmp: a partial checkpoint"),
            std::string::npos) << next.output;
  EXPECT_NE(next.output.find("resumed from checkpoint " + root + "/step_00000001 (step 1)"),
            std::string::npos) << next.output;
  EXPECT_TRUE(std::filesystem::exists(root + "/step_00000002/manifest.json"));
  EXPECT_EQ(ReadText(root + "/step_00000001/rank00000.bin"), complete);
}

}  // namespace
}  // namespace shardtune::exec::testing
