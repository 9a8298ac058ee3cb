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
#include <string>
#include <vector>

#include "executor/run.h"
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
    auto a = Base(tmp.Sub("out"));
    a.insert(a.end(), {"--optimizer-impl", impl});
    ProcessResult r = RunShardtune(a);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("note: --optimizer-impl"), std::string::npos) << r.output;
    nlohmann::json m = nlohmann::json::parse(ReadText(tmp.Sub("out") + "/measurements.json"));
    EXPECT_EQ(m.at("plan").at("optimizer_impl"), "fused") << impl;
  }
}

TEST(ExecutorRunCliTest, NprocZeroIsAnInputError) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a.insert(a.end(), {"--nproc", "0"});
  ExpectInputError(a, "--nproc: expected an integer >= 1, got 0");
}

TEST(ExecutorRunCliTest, StepsZeroIsAnInputError) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a[4] = "0";
  ExpectInputError(a, "--steps: expected an integer >= 1, got 0");
}

TEST(ExecutorRunCliTest, UnreadableDataIsAnInputError) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a.insert(a.end(), {"--data", tmp.Sub("missing.txt")});
  ExpectInputError(a, "--data: cannot read \"" + tmp.Sub("missing.txt") + "\": No such file");
}

TEST(ExecutorRunCliTest, DataShorterThanASequenceIsAnInputError) {
  TempDir tmp;
  std::ofstream(tmp.Sub("short.txt")) << "hello";
  auto a = Base(tmp.Sub("out"));
  a.insert(a.end(), {"--data", tmp.Sub("short.txt")});
  ExpectInputError(a, "holds 5 bytes, expected at least seq_len + 1 = 17");
}

TEST(ExecutorRunCliTest, OutThatCannotBeAFolderIsAnInputError) {
  TempDir tmp;
  std::ofstream(tmp.Sub("file")) << "x";
  ExpectInputError(Base(tmp.Sub("file") + "/out"), "--out: cannot create the folder");
}

TEST(ExecutorRunCliTest, GlobalBatchMustDivideIntoMicroBatchesAndRanks) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a.insert(a.end(), {"--nproc", "2", "--global-batch", "3"});
  ExpectInputError(a,
                   "--global-batch: expected a multiple of micro-batch x data-parallel ranks = 1 x "
                   "2 = 2, got 3");
}

TEST(ExecutorRunCliTest, UnsupportedPlanChoicesAreInputErrors) {
  TempDir tmp;
  auto a = Base(tmp.Sub("out"));
  a.insert(a.end(), {"--optimizer", "adafactor"});
  ExpectInputError(a, "--optimizer: the executor runs adamw or sgd, got adafactor");
  auto b = Base(tmp.Sub("out"));
  b.insert(b.end(), {"--emulate-world", "4", "--nproc", "2"});
  ExpectInputError(b, "--emulate-world: runs in one process");
  auto c = Base(tmp.Sub("out"));
  c.insert(c.end(), {"--device", "gpu"});
  ExpectInputError(c, "--device: expected cpu or cuda, got 'gpu'");
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

}  // namespace
}  // namespace shardtune::exec::testing
