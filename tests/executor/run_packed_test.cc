// Packed micro-batches in `shardtune run` (issue #45): sequences of uniform random lengths
// packed whole into token-budget rows (verl's rule, model/packing.h; positions restarting per
// sequence, attention inside each) train exactly as the same sequences right-padded with their
// padding's labels ignored: the loss is the mean over the global batch's tokens either way, so
// the losses agree to fp32 summation order on 1 and 2 ranks, with any grouping into micro-batches.
// Tolerances as run_equivalence_test.cc: step 1 to summation order, later steps 2e-4.
// A row of n sequences of the longest length computes, saves and frees what an unpacked
// micro-batch of n such sequences does: its measured step-0 peak equals that run's, and
// validate's predicted peak for the packed plan (attention's scores per sequence,
// Plan::AttentionSeqLen) is within 3% of it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/packing.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

using nlohmann::json;

constexpr int kSteps = 3;

std::vector<std::string> Base(const std::string& model, const std::string& out, int nproc) {
  return {"run", "--model", DataPath(model), "--steps", std::to_string(kSteps), "--out", out,
          "--seq-len", "32", "--global-batch", "8", "--nproc", std::to_string(nproc),
          "--threads", "1", "--precision", "fp32", "--lengths", "uniform:8-32"};
}

class ExecutorPackedTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExecutorPackedTest, PackedRowsTrainAsPaddedSequencesWithThePaddingIgnored) {
  const std::string model = GetParam();
  TempDir tmp;
  // Padded: 4 sequences per micro-batch on 1 rank (2 micro-batches); packed: rows of 64 tokens.
  std::vector<RunCase> runs = {{"padded1", 1, {"--micro-batch", "4"}},
                           {"packed1", 1, {"--max-tokens-per-micro-batch", "64"}},
                           {"packed2", 2, {"--max-tokens-per-micro-batch", "64"}},
                           {"padded2_accum4", 2, {"--micro-batch", "1"}}};
  for (const RunCase& r : runs) {
    ProcessResult p = RunShardtune(With(Base(model, tmp.Sub(r.name), r.nproc), r.flags));
    ASSERT_EQ(p.exit_code, 0) << r.name << ": " << p.output;
  }
  std::map<int64_t, double> want = Losses(tmp.Sub("padded1"));
  for (size_t i = 1; i < runs.size(); ++i) ExpectSameLossCurves(want, Losses(tmp.Sub(runs[i].name)), kSteps, runs[i].name);
  // Each step's tokens are its 8 sequences' lengths (model/packing.h, seed 0).
  model::SequenceLengths lengths = model::SequenceLengths::Parse("uniform:8-32", "--lengths", 32);
  std::ifstream in(tmp.Sub("packed2") + "/measurements.json");
  json m = json::parse(in);
  for (const json& s : m.at("steps")) {
    int64_t step = s.at("step").get<int64_t>(), want_tokens = 0;
    for (int64_t i = 0; i < 8; ++i) want_tokens += lengths.Length(0, (step - 1) * 8 + i, 32);
    EXPECT_EQ(s.at("tokens").get<int64_t>(), want_tokens) << "step " << step;
  }
}

// Rotary (Llama), learned positions (GPT-2: wpe at positions restarting per sequence), and
// Gemma 3's sliding layers (a band of 8 inside each sequence) with its query_pre_attn_scalar.
INSTANTIATE_TEST_SUITE_P(Models, ExecutorPackedTest,
                         ::testing::Values("micro-llama.model.json", "micro-gpt2.model.json",
                                           "micro-gemma3.model.json"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param.substr(6, p.param.find('.') - 6);
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(ExecutorPackedMemoryTest, AFullRowPeaksAsTheUnpackedMicroBatchAndAsTheEstimateSays) {
  // micro-llama with an 8,192-token vocabulary: 32 sequences of 64 tokens per rank, rows of
  // 1,024 tokens (16 sequences each, 2 rows) against micro-batches of 16 x 64.
  const std::string model = "micro-llama-v8k.model.json";
  TempDir tmp;
  auto args = [&](const std::string& out, const std::vector<std::string>& plan) {
    return With({"run", "--model", DataPath(model), "--steps", "2", "--out", out, "--seq-len", "64",
                 "--global-batch", "64", "--nproc", "2", "--threads", "1", "--precision", "fp32"},
                plan);
  };
  ProcessResult p = RunShardtune(args(tmp.Sub("packed"), {"--max-tokens-per-micro-batch", "1024"}));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  p = RunShardtune(args(tmp.Sub("padded"), {"--micro-batch", "16"}));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  auto [packed_pred, packed_meas] = ValidateStep0Peak(DataPath(model), tmp.Sub("packed"));
  auto [padded_pred, padded_meas] = ValidateStep0Peak(DataPath(model), tmp.Sub("padded"));
  std::cout << "step-0 peak: packed " << packed_meas << " B measured, " << packed_pred
            << " predicted; unpacked " << padded_meas << " measured, " << padded_pred << " predicted\n";
  EXPECT_NEAR(packed_meas / padded_meas, 1.0, 0.01);
  EXPECT_NEAR(packed_pred / packed_meas, 1.0, 0.03);
}

TEST(ExecutorPackedMemoryTest, RowsAboveTheBudgetAreWhatValidateJudges) {
  // 32 sequences of 64 per rank under a budget of 100 tokens: min(32, ceil(2048 / 100)) = 21
  // rows, 11 of them holding 2 sequences (128 tokens, 28% above the budget). validate predicts the
  // step at that row (RaisePackedRowToLargest), as estimate does.
  const std::string model = "micro-llama-v8k.model.json";
  TempDir tmp;
  ProcessResult p = RunShardtune({"run", "--model", DataPath(model), "--steps", "2", "--out", tmp.Sub("o"),
                                  "--seq-len", "64", "--global-batch", "64", "--nproc", "2", "--threads",
                                  "1", "--precision", "fp32", "--max-tokens-per-micro-batch", "100"});
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("make 21 micro-batches of up to 2 sequences, 128 tokens"), std::string::npos)
      << p.output;
  auto [pred, meas] = ValidateStep0Peak(DataPath(model), tmp.Sub("o"));
  std::cout << "step-0 peak, rows of up to 128 tokens under 100: " << meas << " B measured, " << pred
            << " predicted\n";
  EXPECT_NEAR(pred / meas, 1.0, 0.03);
}

// A packed run resumed from its sharded checkpoint continues with the uninterrupted run's losses.
TEST(ExecutorPackedResumeTest, ResumedPackedRunReproducesTheUninterruptedLosses) {
  TempDir tmp;
  auto args = [&](const std::string& out, int steps) {
    std::vector<std::string> a = With(Base("micro-llama.model.json", out, 2),
                                      {"--max-tokens-per-micro-batch", "64", "--checkpoint-every", "2",
                                       "--lr-schedule", "constant", "--warmup-steps", "0"});
    a[4] = std::to_string(steps);  // --steps
    return a;
  };
  ExpectResumeReproducesLosses(args, tmp.Sub("packed"));
}

// A verl config with a token budget runs as it says: ppo_mini_batch_size 4 x rollout.n 2 = 8
// sequences per step over 2 ranks, rows of ppo_max_token_len_per_gpu 150 tokens holding whole
// sequences of up to 16 + 48 tokens (the verl log-prob head is swapped for the executor's loss).
TEST(ExecutorPackedFromVerlTest, ATokenBudgetConfigTrainsPackedRows) {
  TempDir tmp;
  const std::string config = tmp.Sub("verl.yaml");
  std::ofstream(config) << "algorithm:\n  adv_estimator: grpo\n"
                           "data:\n  max_prompt_length: 16\n  max_response_length: 48\n"
                           "trainer:\n  n_gpus_per_node: 2\n  nnodes: 1\n"
                           "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 4\n"
                           "    use_dynamic_bsz: true\n    ppo_max_token_len_per_gpu: 150\n"
                           "  rollout:\n    name: vllm\n    n: 2\n";
  ProcessResult p = RunShardtune({"run", "--model", DataPath("micro-llama.model.json"), "--from", config,
                                  "--loss-kernel", "cross_entropy", "--nproc", "2", "--steps", "2",
                                  "--out", tmp.Sub("o"), "--threads", "1", "--precision", "fp32",
                                  "--lengths", "uniform:16-64"});
  ASSERT_EQ(p.exit_code, 0) << p.output;
  std::ifstream in(tmp.Sub("o") + "/measurements.json");
  json m = json::parse(in);
  EXPECT_EQ(m.at("run").at("global_batch"), 8);
  EXPECT_EQ(m.at("plan").at("seq_len"), 150);
  EXPECT_EQ(m.at("plan").at("packed_seq_len"), 64);
  model::SequenceLengths lengths = model::SequenceLengths::Parse("uniform:16-64", "--lengths", 64);
  for (const json& s : m.at("steps")) {
    int64_t step = s.at("step").get<int64_t>(), want = 0;
    for (int64_t i = 0; i < 8; ++i) want += lengths.Length(0, (step - 1) * 8 + i, 64);
    EXPECT_EQ(s.at("tokens").get<int64_t>(), want) << "step " << step;
  }
}

TEST(ExecutorPackedInputTest, WhatPackedRunsDoNotTakeIsAnInputError) {
  TempDir tmp;
  const std::string out = tmp.Sub("o");
  // Ulysses over packed rows is estimated, not run.
  ExpectInputError(With(Base("micro-llama.model.json", out, 2),
                        {"--max-tokens-per-micro-batch", "64", "--cp", "2"}),
                   "packed rows with --cp 2");
  // Lengths beyond the longest sequence.
  std::vector<std::string> a = Base("micro-llama.model.json", out, 1);
  a.back() = "uniform:8-40";
  ExpectInputError(a, "--lengths: expected MAX at most the longest sequence 32");
  a.back() = "mean:20";
  ExpectInputError(a, "--lengths: expected uniform:MIN-MAX");
  // A packed row's global batch is a whole number of sequences per data-parallel rank.
  a = With(Base("micro-llama.model.json", out, 2), {"--max-tokens-per-micro-batch", "64"});
  a[10] = "7";  // --global-batch
  ExpectInputError(a, "--global-batch: expected a multiple of the 2 data-parallel ranks");
}

}  // namespace
}  // namespace shardtune::exec::testing
