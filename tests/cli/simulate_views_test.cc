// One number per quantity in `simulate` (issue #49 item 5): over 300 random valid plans its text
// shows the JSON's figures to the text's precision: the verdict line (required, step time,
// tokens/s), step time, throughput, MFU, compute, exposed communication, every GPU category of
// "where the step goes" (which add up to the printed step time), the host's issue time apart,
// the peak allocated and the required bytes with the verdict. In-process (RunSimulate on a
// parsed command line).
#include <cstdio>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "cli/simulate_cmd.h"
#include "model/errors.h"
#include "tests/cli/views_util.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::cli {
namespace {

using Json = nlohmann::json;
using sim::testing::PickOf;
using views::ExpectShows;
using views::Fixed;
using views::Gib;
using views::Line;

std::string RandomSimulateCommand(std::mt19937_64& rng) {
  std::ostringstream c;
  c << "simulate --model " << PickOf<std::string>(rng, {"llama3.2-1b", "qwen2.5-7b", "llama3-8b"})
    << " --cluster " << PickOf<std::string>(rng, {"8xH100", "4xRTX4090", "2x4xA100-40G", "2x8xH100-ib400"});
  std::string strategy = PickOf<std::string>(
      rng, {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"});
  c << " --strategy " << strategy;
  if (strategy.rfind("hybrid", 0) == 0) c << " --shard-group " << PickOf<int>(rng, {2, 4});
  c << " --micro-batch " << PickOf<int>(rng, {1, 2, 4}) << " --grad-accum "
    << PickOf<int>(rng, {1, 2, 3}) << " --seq-len " << PickOf<int>(rng, {1024, 2048, 4096})
    << " --checkpointing " << PickOf<std::string>(rng, {"none", "full", "selective"})
    << " --offload " << PickOf<std::string>(rng, {"none", "optimizer", "all"});
  if (rng() % 3 == 0) c << " --cp 2";
  if (rng() % 4 == 0) c << " --lora-rank 8 --lora-targets q_proj,v_proj";
  if (rng() % 2 == 0) c << " --forward-prefetch";
  return c.str();
}

bool Simulate(const std::string& command, std::string* out) {
  return views::RunIn<SimulateArgs>(command, AddSimulateCommand, RunSimulate, out);
}

TEST(SimulateViewsTest, TextShowsTheJsonFiguresAndTheCategoriesSumToTheStep) {
  const uint64_t seed = sim::testing::TestSeed(20261129);
  SCOPED_TRACE("SHARDTUNE_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int checked = 0, oom = 0, refused = 0;
  while (checked < 300) {
    std::string cmd = RandomSimulateCommand(rng);
    SCOPED_TRACE(cmd);
    std::string text, json_text;
    if (!Simulate(cmd, &text)) {
      ++refused;
      ASSERT_LT(refused, 2000) << "almost every random plan is refused";
      continue;
    }
    ASSERT_TRUE(Simulate(cmd + " --json", &json_text));
    Json j = Json::parse(json_text);
    const Json& r = j.at("per_rank");
    ++checked;
    const bool fits = j.at("fits").get<bool>();
    oom += fits ? 0 : 1;
    const double step = j.at("step_time_s").get<double>();
    // The verdict line.
    std::string verdict = Line(text, "=> ");
    // "=> FITS:" or, within the stated margin, "=> FITS, MARGINALLY:".
    EXPECT_EQ(verdict.rfind(fits ? "=> FITS" : "=> DOES NOT FIT", 0), 0u) << verdict;
    if (fits) {
      ExpectShows(verdict, ": ", Gib(r.at("required_bytes")));
      ExpectShows(verdict, "; ", Fixed(step, 3) + " s per step, " +
                                     Fixed(j.at("tokens_per_s").get<double>(), 0) + " tokens/s");
    }
    // The step block.
    ExpectShows(Line(text, "step time "), "step time", Fixed(step, 4) + " s");
    std::string tput = Line(text, "throughput ");
    ExpectShows(tput, "throughput", Fixed(j.at("tokens_per_s").get<double>(), 0) + " tokens/s (" +
                                        Fixed(j.at("tokens_per_s_per_gpu").get<double>(), 0));
    ExpectShows(Line(text, "MFU "), "MFU", Fixed(100 * j.at("mfu").get<double>(), 1) + " %");
    ExpectShows(Line(text, "compute "), "compute", Fixed(j.at("compute_s").get<double>(), 4) + " s");
    ExpectShows(Line(text, "exposed communication "), "exposed communication",
                Fixed(j.at("exposed_comm_s").get<double>(), 4) + " s");
    // Where the step goes: every GPU category row, their sum, and host issue apart.
    const Json& cat = j.at("time_by_category_s");
    double printed_sum = 0;
    int rows = 0;
    for (const auto& [k, v] : cat.items()) {
      if (k == "host_issue") {
        ExpectShows(Line(text, "host issue "), "host issue", Fixed(v.get<double>(), 4) + " s");
        continue;
      }
      std::string row = Line(text, k + " ");
      ExpectShows(row, k, Fixed(v.get<double>(), 4) + " s");
      printed_sum += std::stod(Fixed(v.get<double>(), 4));
      ++rows;
    }
    EXPECT_EQ(rows, 5);
    EXPECT_NEAR(printed_sum, std::stod(Fixed(step, 4)), (rows + 1) * 0.5e-4 + 1e-9);
    // Memory: the same figures as estimate's JSON keys.
    ExpectShows(Line(text, "peak allocated "), "peak allocated", Gib(r.at("peak_allocated_bytes")));
    std::string required = Line(text, "required ");
    ExpectShows(required, "required", Gib(r.at("required_bytes")));
    EXPECT_NE(required.find(fits ? " fits in " : " DOES NOT FIT in "), std::string::npos) << required;
    if (HasFailure()) break;  // one plan's report is enough to read
  }
  EXPECT_GT(oom, 0);
  EXPECT_LT(oom, checked);
  std::printf("checked %d simulated plans (%d out of memory), %d refused as input\n", checked, oom,
              refused);
}

}  // namespace
}  // namespace shardtune::cli
