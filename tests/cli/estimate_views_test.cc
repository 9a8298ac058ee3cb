// One number per quantity, view by view (issue #19): over 500 random valid plans (models,
// strategies, HSDP, offload, checkpointing, cp, LoRA, no_sync, wraps, micro-batches) `estimate`'s
// text shows exactly the JSON's figures (to the text's precision, cli/format.h FormatBytes):
// peak allocated, step 0 / steady peaks, reserved, required and the verdict, the host peak,
// every job phase's row and every what-if row; and the summary equals the deciding phase.
// In-process (RunEstimate on a parsed command line), so 1,000 estimates take seconds.
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/estimate_cmd.h"
#include "cli/format.h"
#include "model/errors.h"
#include "tests/cli/views_util.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::cli {
namespace {

using Json = nlohmann::json;

using views::ExpectShows;
using views::Gib;
using views::Line;

// A random estimate command line; about a third of them run out of memory.
std::string RandomCommand(std::mt19937_64& rng) {
  return views::RandomPlanCommand("estimate",
                                  {{"8xH100", "4xRTX4090", "2x4xA100-40G"},
                                   {"none", "full", "selective", "every:2"},
                                   /*no_sync_and_wrap=*/true},
                                  rng);
}

TEST(EstimateViewsTest, TextShowsTheJsonFiguresAndTheSummaryIsTheDecidingPhase) {
  auto check = [](const std::string& text, const Json& j) {
    const Json& r = j.at("per_rank");
    ExpectShows(Line(text, "peak allocated (torch max_memory_allocated)"), ")",
                Gib(r.at("peak_allocated_bytes")));
    std::string peaks = Line(text, "step 0 peak / steady-state (step 1) peak");
    ExpectShows(peaks, "(step 1) peak", Gib(r.at("step0_peak_bytes")));
    ExpectShows(peaks, "/ ", Gib(r.at("steady_peak_bytes")), /*last=*/true);
    std::string reserved = Line(text, "caching allocator reserved (no pressure)");
    ExpectShows(reserved, "(no pressure)", Gib(r.at("reserved_bytes")));
    ExpectShows(reserved, "step 0", Gib(r.at("reserved_step0_bytes")));
    ExpectShows(reserved, "steady", Gib(r.at("reserved_steady_bytes")));
    std::string required = Line(text, "required ");
    ExpectShows(required, "required", Gib(r.at("required_bytes")));
    EXPECT_NE(required.find(j.at("fits").get<bool>() ? " FITS in " : " DOES NOT FIT in "),
              std::string::npos) << required;
    ExpectShows(Line(text, "peak (" + j.at("host").at("peak_phase").get<std::string>() + ")"), ")",
                Gib(j.at("host").at("peak_bytes_per_node")));
    // The job phase table: each row's allocated, required, verdict and host total.
    const Json* steady = nullptr;
    for (const Json& ph : j.at("phases").at("list")) {
      std::string name = ph.at("phase");
      if (name == "steady step") steady = &ph;
      std::istringstream row(
          Line(text, name + "  ").substr(Line(text, name + "  ").find(name) + name.size()));
      std::string alloc, alloc_unit, req, req_unit, verdict, host, host_unit;
      row >> alloc >> alloc_unit >> req >> req_unit >> verdict >> host >> host_unit;
      EXPECT_EQ(alloc + " " + alloc_unit, Gib(ph.at("allocated_peak_bytes"))) << name;
      EXPECT_EQ(req + " " + req_unit, Gib(ph.at("required_bytes"))) << name;
      EXPECT_EQ(verdict, ph.at("fits").get<bool>() ? "fits" : "OOM") << name;
      EXPECT_EQ(host + " " + host_unit, Gib(ph.at("host").at("total_bytes_per_node"))) << name;
    }
    // The summary is the steady step's row (the training phase that decides it).
    ASSERT_NE(steady, nullptr);
    EXPECT_EQ(steady->at("required_bytes"), r.at("required_bytes"));
    EXPECT_EQ(steady->at("reserved_bytes"), r.at("reserved_steady_bytes"));
    // The what-if table: one row per alternative, in order.
    std::istringstream in(text.substr(text.find("offload    checkpointing")));
    std::string header;
    std::getline(in, header);
    for (const Json& alt : j.at("alternatives")) {
      std::string row, off, ck, gpu, gpu_unit, host, host_unit;
      std::getline(in, row);
      std::istringstream cols(row);
      cols >> off >> ck >> gpu >> gpu_unit >> host >> host_unit;
      EXPECT_EQ(off, alt.at("offload").get<std::string>()) << row;
      EXPECT_EQ(ck, alt.at("checkpointing").get<std::string>()) << row;
      EXPECT_EQ(gpu + " " + gpu_unit, Gib(alt.at("gpu_required_bytes"))) << row;
      EXPECT_EQ(host + " " + host_unit, Gib(alt.at("host_peak_bytes_per_node"))) << row;
    }
  };
  views::CheckRandomPlans<EstimateArgs>(20261125, 500, "plans", RandomCommand, AddEstimateCommand,
                                        RunEstimate, check);
}

}  // namespace
}  // namespace shardtune::cli
