// Ulysses context parallelism in `shardtune run` (issue #10): cp ranks (real processes, Gloo on
// 127.0.0.1) that each hold S / cp tokens of the same sequences give the loss curve of 1 rank at
// the same global batch, for cp 2 and 4, both kv-head paths (split: cp <= num_kv_heads; repeat:
// cp > num_kv_heads), FSDP over dp x cp and over dp only (cp_fsdp_mesh dp), with activation
// checkpointing (the recompute repeats the all-to-alls) and learned positions (GPT-2).
// Tolerances as run_equivalence_test.cc: step 1 to fp32 summation order (the attention and the
// loss sum in a different order), later steps 2e-4 (rounding amplified through AdamW); bf16
// params: 1e-3 (bf16 rounding of differently ordered sums, as its 1-vs-N test).
// Every all-to-all is in measurements.json: per call S = this rank's send buffer
// B x S/cp x heads x head_dim x dtype bytes (4 fp32, 2 bf16), heads = num_heads for q and the
// attention output, max(num_kv_heads, cp) for k and v; sent (n-1)/n S; 4 calls per layer and
// micro-batch forward, 4 backward, 4 more when the block is recomputed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

using nlohmann::json;

constexpr int kSteps = 3, kSeqLen = 32, kGlobalBatch = 4;

struct Case {
  std::string name;
  std::string model;     // file in tests/executor/data
  int num_kv_heads = 0;  // > 0: the model with this many kv heads instead
  int nproc = 2;
  int cp = 2;
  std::vector<std::string> flags;  // plan flags of the cp run
  bool recompute = false;          // --checkpointing full among the flags
  std::string precision = "fp32";
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// The test's model file: the data file, or a copy with other kv heads.
std::string ModelFile(const Case& c, const TempDir& tmp) {
  if (c.num_kv_heads == 0) return DataPath(c.model);
  json m = ReadJson(DataPath(c.model));
  m["num_kv_heads"] = c.num_kv_heads;
  m["name"] = m["name"].get<std::string>() + "-kv" + std::to_string(c.num_kv_heads);
  std::string path = tmp.Sub("model.json");
  std::ofstream(path) << m.dump(2);
  return path;
}

std::vector<std::string> Args(const std::string& model, const std::string& out,
                              const std::string& precision) {
  return {"run",
          "--model",
          model,
          "--steps",
          std::to_string(kSteps),
          "--out",
          out,
          "--seq-len",
          std::to_string(kSeqLen),
          "--global-batch",
          std::to_string(kGlobalBatch),
          "--threads",
          "1",
          "--max-grad-norm",
          "1.0",
          "--precision",
          precision};
}

class ExecutorRunCpTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorRunCpTest, LossCurveOfCpRanksEqualsOneRank) {
  const Case& c = GetParam();
  TempDir tmp;
  std::string model = ModelFile(c, tmp);
  std::vector<std::string> one = Args(model, tmp.Sub("one"), c.precision);
  for (size_t i = 0; i < c.flags.size(); ++i) {  // the plan flags that one rank can run
    if (c.flags[i] == "--cp-fsdp-mesh" || c.flags[i] == "--strategy" ||
        c.flags[i] == "--shard-group") {
      ++i;
      continue;
    }
    one.push_back(c.flags[i]);
  }
  ProcessResult r1 = RunShardtune(one);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  std::vector<std::string> many = Args(model, tmp.Sub("many"), c.precision);
  many.insert(many.end(), c.flags.begin(), c.flags.end());
  many.insert(many.end(), {"--nproc", std::to_string(c.nproc), "--cp", std::to_string(c.cp)});
  ProcessResult rn = RunShardtune(many);
  ASSERT_EQ(rn.exit_code, 0) << rn.output;

  std::map<int64_t, double> l1 = Losses(tmp.Sub("one")), ln = Losses(tmp.Sub("many"));
  std::map<int64_t, double> g1 = GradNorms(tmp.Sub("one")), gn = GradNorms(tmp.Sub("many"));
  ASSERT_EQ(l1.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(ln.size(), static_cast<size_t>(kSteps));
  double max_diff = 0;
  for (const auto& [step, loss] : l1) max_diff = std::max(max_diff, std::fabs(loss - ln.at(step)));
  double grad_rel = std::fabs(g1.at(1) - gn.at(1)) / g1.at(1);
  std::cout << "[ " << c.name << " ] 1 rank vs " << c.nproc << " ranks with cp " << c.cp
            << ": loss max diff " << max_diff << ", step-1 loss diff "
            << std::fabs(l1.at(1) - ln.at(1)) << ", step-1 grad-norm relative diff " << grad_rel
            << "\n";
  EXPECT_GT(g1.at(1), 1.0) << "clipping must be active for this test to cover it";
  bool fp32 = c.precision == "fp32";
  EXPECT_LT(std::fabs(l1.at(1) - ln.at(1)), fp32 ? 1e-6 : 1e-3);
  EXPECT_LT(grad_rel, fp32 ? 1e-6 : 1e-3);
  EXPECT_LT(max_diff, fp32 ? 2e-4 : 1e-3);

  // The all-to-alls of the cp group, as measurements.json aggregates them.
  json m = ReadJson(tmp.Sub("many") + "/measurements.json");
  json spec = ReadJson(model);
  int64_t L = spec["num_layers"], a = spec["num_heads"], H = spec["hidden"];
  int64_t kv = spec.contains("num_kv_heads") ? spec["num_kv_heads"].get<int64_t>() : a;
  if (c.num_kv_heads > 0) kv = c.num_kv_heads;
  int64_t D = H / a, dp = c.nproc / c.cp, micro_batch = m["plan"]["micro_batch"];
  int64_t micro_batches = kSteps * (kGlobalBatch / (micro_batch * dp));
  int64_t per_layer = c.recompute ? 12 : 8;
  int64_t s = kSeqLen / c.cp;
  int64_t dtype_bytes = fp32 ? 4 : 2;
  std::set<int64_t> want_bytes{micro_batch * s * a * D * dtype_bytes,
                               micro_batch * s * std::max(kv, int64_t{c.cp}) * D * dtype_bytes};
  int64_t calls = 0;
  for (const json& e : m["collectives"]) {
    if (e["kind"] != "all_to_all") continue;
    int64_t bytes = e["bytes"];
    EXPECT_EQ(e["group"], "cp");
    EXPECT_EQ(e["group_size"], c.cp);
    EXPECT_EQ(want_bytes.count(bytes), 1u) << "all-to-all of " << bytes << " bytes";
    EXPECT_EQ(e["sent_bytes_per_call"].get<int64_t>(), bytes * (c.cp - 1) / c.cp);
    EXPECT_GT(e["time_s"].get<double>(), 0.0);
    EXPECT_FALSE(e["emulated"].get<bool>());
    calls += e["count"].get<int64_t>();
  }
  EXPECT_EQ(calls, micro_batches * L * per_layer);
  EXPECT_EQ(m["run"]["data_parallel_ranks"], dp);
}

INSTANTIATE_TEST_SUITE_P(
    Ulysses, ExecutorRunCpTest,
    ::testing::Values(
        // micro-llama: 4 heads, 2 kv heads.
        Case{"cp2_kv_split_full_shard", "micro-llama.model.json", 0, 2, 2, {}},
        Case{"cp4_kv_repeat_full_shard", "micro-llama.model.json", 0, 4, 4, {}}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// The rest of the matrix carries the ctest label `extended` (tests/executor/CMakeLists.txt): it runs
// in .ci/run after the README's test command, which keeps the cases above (issue #48).
INSTANTIATE_TEST_SUITE_P(
    UlyssesMatrix, ExecutorRunCpTest,
    ::testing::Values(
        Case{"cp4_mha_kv_split", "micro-llama.model.json", 4, 4, 4, {}},
        Case{"cp2_mqa_kv_repeat", "micro-llama.model.json", 1, 2, 2, {}},
        Case{"dp2_cp2_full_shard_dp_cp_recompute",
             "micro-llama.model.json",
             0,
             4,
             2,
             {"--strategy", "full_shard", "--checkpointing", "full"},
             true},
        Case{"dp2_cp2_fsdp_mesh_dp",
             "micro-llama.model.json",
             0,
             4,
             2,
             {"--strategy", "full_shard", "--cp-fsdp-mesh", "dp"}},
        Case{"cp2_fsdp_mesh_dp_replicated",
             "micro-llama.model.json",
             0,
             2,
             2,
             {"--cp-fsdp-mesh", "dp"}},
        Case{"dp2_cp2_hybrid_shard_over_cp_groups",
             "micro-llama.model.json",
             0,
             4,
             2,
             {"--strategy", "hybrid_shard", "--shard-group", "2", "--no-sync"}},
        Case{"gpt2_cp2_learned_positions", "micro-gpt2.model.json", 0, 2, 2, {}},
        Case{"cp2_bf16_params", "micro-llama.model.json", 0, 2, 2, {}, false, "bf16"}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// A cp run resumed from its sharded checkpoint continues with the uninterrupted run's losses
// (constant LR, so that the 2-step and 4-step commands share their schedule).
TEST(ExecutorRunCpResumeTest, ResumedCpRunReproducesTheUninterruptedLosses) {
  TempDir tmp;
  auto args = [&](const std::string& out, int steps) {
    std::vector<std::string> a = Args(DataPath("micro-llama.model.json"), out, "fp32");
    a[4] = std::to_string(steps);  // --steps
    a.insert(a.end(), {"--nproc", "4", "--cp", "2", "--cp-fsdp-mesh", "dp", "--checkpoint-every",
                       "2", "--lr-schedule", "constant", "--warmup-steps", "0"});
    return a;
  };
  ExpectResumeReproducesLosses(args, tmp.Sub("cp"));
}

TEST(ExecutorRunCpInputTest, CpNotDividingHeadsSequenceOrWorldIsAnInputError) {
  TempDir tmp;
  json m = ReadJson(DataPath("micro-llama.model.json"));
  m["num_heads"] = 6;
  m["num_kv_heads"] = 2;
  m["hidden"] = 96;
  std::string six = tmp.Sub("six-heads.json");
  std::ofstream(six) << m.dump(2);
  auto args = [&](const std::string& model, int seq_len, int nproc, int cp) {
    std::vector<std::string> a = {"run",
                                  "--model",
                                  model,
                                  "--steps",
                                  "1",
                                  "--out",
                                  tmp.Sub("out"),
                                  "--seq-len",
                                  std::to_string(seq_len),
                                  "--threads",
                                  "1",
                                  "--nproc",
                                  std::to_string(nproc),
                                  "--cp",
                                  std::to_string(cp)};
    return a;
  };
  ExpectInputError(args(six, 32, 4, 4), "6 heads are not divisible by 4");
  m["num_kv_heads"] = 3;
  std::string kv3 = tmp.Sub("kv3.json");
  std::ofstream(kv3) << m.dump(2);
  ExpectInputError(args(kv3, 32, 2, 2), "3 kv heads and cp must divide one another");
  ExpectInputError(args(DataPath("micro-llama.model.json"), 30, 4, 4), "divisor of seq_len 30");
  ExpectInputError(args(DataPath("micro-llama.model.json"), 32, 3, 2), "dividing the world size 3");
  // cp x shard x replicate must tile the world: with cp_fsdp_mesh dp, FSDP's world is 4 / 2.
  std::vector<std::string> mesh = args(DataPath("micro-llama.model.json"), 32, 4, 2);
  mesh.insert(mesh.end(),
              {"--cp-fsdp-mesh", "dp", "--strategy", "hybrid_shard", "--shard-group", "4"});
  ExpectInputError(mesh, "expected a divisor of the world size 2");
}

}  // namespace
}  // namespace shardtune::exec::testing
