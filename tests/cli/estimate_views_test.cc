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

using sim::testing::PickOf;
using views::ExpectShows;
using views::Gib;
using views::Line;

// A random estimate command line; about a third of them run out of memory.
std::string RandomCommand(std::mt19937_64& rng) {
  std::ostringstream c;
  c << "estimate --model " << PickOf<std::string>(rng, {"llama3.2-1b", "qwen2.5-7b", "llama3-8b"})
    << " --cluster " << PickOf<std::string>(rng, {"8xH100", "4xRTX4090", "2x4xA100-40G"});
  std::string strategy = PickOf<std::string>(
      rng, {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"});
  c << " --strategy " << strategy;
  if (strategy.rfind("hybrid", 0) == 0) c << " --shard-group " << PickOf<int>(rng, {2, 4});
  c << " --micro-batch " << PickOf<int>(rng, {1, 2, 4}) << " --grad-accum "
    << PickOf<int>(rng, {1, 2, 3}) << " --seq-len " << PickOf<int>(rng, {1024, 2048, 4096})
    << " --checkpointing " << PickOf<std::string>(rng, {"none", "full", "selective", "every:2"})
    << " --offload " << PickOf<std::string>(rng, {"none", "optimizer", "all"});
  if (rng() % 3 == 0) c << " --no-sync";
  if (rng() % 3 == 0) c << " --cp 2";
  if (rng() % 4 == 0) c << " --lora-rank 8 --lora-targets q_proj,v_proj";
  if (rng() % 3 == 0) c << " --wrap every:2";
  if (rng() % 2 == 0) c << " --forward-prefetch";
  return c.str();
}

// RunEstimate on `command` (text, or --json); returns false when the plan is refused as input.
bool Estimate(const std::string& command, std::string* out) {
  return views::RunIn<EstimateArgs>(command, AddEstimateCommand, RunEstimate, out);
}

TEST(EstimateViewsTest, TextShowsTheJsonFiguresAndTheSummaryIsTheDecidingPhase) {
  const uint64_t seed = sim::testing::TestSeed(20261125);
  SCOPED_TRACE("SHARDTUNE_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int checked = 0, oom = 0, refused = 0;
  while (checked < 500) {
    std::string cmd = RandomCommand(rng);
    SCOPED_TRACE(cmd);
    std::string text, json_text;
    if (!Estimate(cmd, &text)) {
      ++refused;
      ASSERT_LT(refused, 2000) << "almost every random plan is refused";
      continue;
    }
    ASSERT_TRUE(Estimate(cmd + " --json", &json_text));
    Json j = Json::parse(json_text);
    const Json& r = j.at("per_rank");
    ++checked;
    oom += j.at("fits").get<bool>() ? 0 : 1;
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
    if (HasFailure()) break;  // one plan's report is enough to read
  }
  EXPECT_GT(oom, 0);
  EXPECT_LT(oom, checked);
  std::printf("checked %d plans (%d out of memory), %d refused as input\n", checked, oom, refused);
}

}  // namespace
}  // namespace shardtune::cli
