// One number per quantity in `tune`, and plans that paste back (issue #49 items 5 and 6): over
// random searches, each top plan's text row shows the JSON's figures (tokens/s, MFU, step time,
// required), the cp verdict of the winner's cp names the same plan with the same step time and
// required bytes, and the winner's printed flags, pasted into `estimate` and `simulate` on the
// same model, cluster and length, give back exactly the required bytes and step time tune
// printed. In-process (RunTune / RunEstimate / RunSimulate on parsed command lines).
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/estimate_cmd.h"
#include "cli/format.h"
#include "cli/simulate_cmd.h"
#include "cli/tune_cmd.h"
#include "model/errors.h"
#include "tests/cli/views_util.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::cli {
namespace {

using Json = nlohmann::json;
using sim::testing::PickOf;
using views::Fixed;
using views::RunIn;

struct Search {
  std::string model, cluster;
  int seq_len = 0;
  std::string tune;  // the whole tune command line
};

Search RandomSearch(std::mt19937_64& rng) {
  Search s;
  s.model = PickOf<std::string>(rng, {"llama3.2-1b", "qwen2.5-7b", "llama3-8b"});
  s.cluster = PickOf<std::string>(rng, {"8xH100", "4xRTX4090", "2x4xA100-40G"});
  s.seq_len = PickOf<int>(rng, {1024, 2048, 4096});
  std::ostringstream c;
  c << "tune --model " << s.model << " --cluster " << s.cluster << " --seq-len " << s.seq_len
    << " --global-batch " << PickOf<int>(rng, {16, 32, 64}) << " --cp-sizes 1";
  if (rng() % 3 == 0) c << " --objective memory";
  s.tune = c.str();
  return s;
}

TEST(TuneViewsTest, TopRowsShowTheJsonAndTheWinnerPastesBack) {
  const uint64_t seed = sim::testing::TestSeed(20261129);
  SCOPED_TRACE("SHARDTUNE_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int searched = 0, found = 0;
  while (searched < 24) {
    Search s = RandomSearch(rng);
    SCOPED_TRACE(s.tune);
    std::string text, json_text;
    if (!RunIn<TuneArgs>(s.tune, AddTuneCommand, RunTune, &text)) continue;
    ASSERT_TRUE(RunIn<TuneArgs>(s.tune + " --json", AddTuneCommand, RunTune, &json_text));
    ++searched;
    Json j = Json::parse(json_text);
    if (!j.at("fits").get<bool>()) continue;
    ++found;
    // Each top row: "N. X tokens/s, MFU Y%, step Z s, needs W of C".
    const Json& top = j.at("top");
    for (size_t i = 0; i < top.size(); ++i) {
      const Json& t = top[i];
      std::string head = std::to_string(i + 1) + ". ";
      size_t at = text.find("\n  " + head);
      ASSERT_NE(at, std::string::npos) << head << " not in:\n" << text;
      std::string row = text.substr(at + 3, text.find('\n', at + 3) - at - 3);
      const std::string want = head + Fixed(t.at("tokens_per_s").get<double>(), 0) + " tokens/s";
      EXPECT_EQ(row.rfind(want, 0), 0u) << "want " << want << " in: " << row;
      EXPECT_NE(row.find("step " + Fixed(t.at("step_time_s").get<double>(), 3) + " s"), std::string::npos) << row;
      EXPECT_NE(row.find("needs " + FormatBytes(Bytes::Of(t.at("required_bytes").get<int64_t>()))),
                std::string::npos)
          << row;
      EXPECT_NE(text.find("flags: " + t.at("flags").get<std::string>() + "\n"), std::string::npos)
          << t.at("flags");
    }
    // The fastest listed plan's cp verdict names the same plan, step and required bytes (#1 may
    // be a safer plan within planner::kRankTolerance of it).
    const Json* fastest = &top[0];
    if (j.at("objective") != "memory") {
      for (const Json& t : top) {
        if (t.at("step_time_s").get<double>() < fastest->at("step_time_s").get<double>()) fastest = &t;
      }
      EXPECT_LE(top[0].at("step_time_s").get<double>(), fastest->at("step_time_s").get<double>() * 1.02);
    }
    const Json& best = *fastest;
    bool verdict_seen = false;
    for (const Json& v : j.at("cp_verdicts")) {
      if (v.at("best_key") != best.at("key")) continue;
      verdict_seen = true;
      EXPECT_EQ(v.at("best_required_bytes"), best.at("required_bytes"));
      EXPECT_DOUBLE_EQ(v.at("best_step_time_s").get<double>(), best.at("step_time_s").get<double>());
    }
    if (j.at("objective") == "throughput") EXPECT_TRUE(verdict_seen) << best.at("key");
    // Paste the winner's flags into estimate and simulate.
    const std::string job = " --model " + s.model + " --cluster " + s.cluster + " --seq-len " +
                            std::to_string(s.seq_len) + " " + best.at("flags").get<std::string>();
    std::string est, sim;
    ASSERT_TRUE(RunIn<EstimateArgs>("estimate" + job + " --json", AddEstimateCommand, RunEstimate, &est));
    ASSERT_TRUE(RunIn<SimulateArgs>("simulate" + job + " --json", AddSimulateCommand, RunSimulate, &sim));
    EXPECT_EQ(Json::parse(est).at("per_rank").at("required_bytes"), best.at("required_bytes")) << job;
    EXPECT_NEAR(Json::parse(sim).at("step_time_s").get<double>(), best.at("step_time_s").get<double>(),
                1e-9 * best.at("step_time_s").get<double>())
        << job;
    if (HasFailure()) break;
  }
  EXPECT_GT(found, 0);
  std::printf("checked %d searches (%d found a plan)\n", searched, found);
}

}  // namespace
}  // namespace shardtune::cli
