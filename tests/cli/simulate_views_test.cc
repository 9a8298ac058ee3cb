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
using views::ExpectShows;
using views::Fixed;
using views::Gib;
using views::Line;

std::string RandomSimulateCommand(std::mt19937_64& rng) {
  return views::RandomPlanCommand(
      "simulate",
      {{"8xH100", "4xRTX4090", "2x4xA100-40G", "2x8xH100-ib400"}, {"none", "full", "selective"}},
      rng);
}

TEST(SimulateViewsTest, TextShowsTheJsonFiguresAndTheCategoriesSumToTheStep) {
  auto check = [](const std::string& text, const Json& j) {
    const Json& r = j.at("per_rank");
    const bool fits = j.at("fits").get<bool>();
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
  };
  views::CheckRandomPlans<SimulateArgs>(20261129, 300, "simulated plans", RandomSimulateCommand,
                                        AddSimulateCommand, RunSimulate, check);
}

}  // namespace
}  // namespace shardtune::cli
