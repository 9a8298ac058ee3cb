// Helpers of the CLI views' property tests (estimate_views_test.cc, simulate_views_test.cc,
// tune_views_test.cc): run a subcommand in-process on a parsed command line and read its text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "model/errors.h"
#include "tests/simulator/random_plan.h"

namespace shardtune::cli::views {

// Parses `command` into a fresh app with `add`'s flags and runs `run` on it; false when the
// command is refused as input (InputError), else its stdout in `out`.
template <typename Args, typename Add, typename Run>
bool RunIn(const std::string& command, Add add, Run run, std::string* out) {
  CLI::App app;
  Args args;
  add(&app, &args);
  app.parse(command, false);
  std::ostringstream o, e;
  try {
    run(args, o, e);
  } catch (const InputError&) {
    return false;
  }
  *out = o.str();
  return true;
}

// What the random plan command lines of estimate's and simulate's views tests draw from beyond
// the flags both draw.
struct RandomPlanChoices {
  std::vector<std::string> clusters;
  std::vector<std::string> checkpointing;
  bool no_sync_and_wrap = false;  // also draw --no-sync and --wrap every:2
};

// `subcommand` on a random model, cluster and plan (strategy, shard group, micro-batch, grad
// accumulation, length, checkpointing, offload, cp, LoRA, prefetch). The draws keep one order, so
// a seed names one command line.
inline std::string RandomPlanCommand(const std::string& subcommand,
                                     const RandomPlanChoices& choices, std::mt19937_64& rng) {
  using sim::testing::PickOf;
  std::ostringstream c;
  c << subcommand << " --model "
    << PickOf<std::string>(rng, {"llama3.2-1b", "qwen2.5-7b", "llama3-8b"}) << " --cluster "
    << PickOf(rng, choices.clusters);
  std::string strategy = PickOf<std::string>(
      rng, {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"});
  c << " --strategy " << strategy;
  if (strategy.rfind("hybrid", 0) == 0) c << " --shard-group " << PickOf<int>(rng, {2, 4});
  c << " --micro-batch " << PickOf<int>(rng, {1, 2, 4}) << " --grad-accum "
    << PickOf<int>(rng, {1, 2, 3}) << " --seq-len " << PickOf<int>(rng, {1024, 2048, 4096})
    << " --checkpointing " << PickOf(rng, choices.checkpointing)
    << " --offload " << PickOf<std::string>(rng, {"none", "optimizer", "all"});
  if (choices.no_sync_and_wrap && rng() % 3 == 0) c << " --no-sync";
  if (rng() % 3 == 0) c << " --cp 2";
  if (rng() % 4 == 0) c << " --lora-rank 8 --lora-targets q_proj,v_proj";
  if (choices.no_sync_and_wrap && rng() % 3 == 0) c << " --wrap every:2";
  if (rng() % 2 == 0) c << " --forward-prefetch";
  return c.str();
}

// Draws command lines with `draw` until `count` plans are checked: `run` (RunIn with `Args` and
// `add`) refuses some as input, which are counted and skipped; each accepted one runs again with
// --json and `check(text, json)` compares its two views. Stops at the first plan with a
// failure (one plan's report is enough to read), expects some but not all checked plans out of
// memory, and prints the counts of checked `what`. The seed is SHARDTUNE_TEST_SEED or
// `fallback_seed`, traced so a failure can be replayed.
template <typename Args, typename Draw, typename Add, typename Run, typename Check>
void CheckRandomPlans(uint64_t fallback_seed, int count, const char* what, Draw draw, Add add,
                      Run run, Check check) {
  const uint64_t seed = sim::testing::TestSeed(fallback_seed);
  SCOPED_TRACE("SHARDTUNE_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int checked = 0, oom = 0, refused = 0;
  while (checked < count) {
    std::string cmd = draw(rng);
    SCOPED_TRACE(cmd);
    std::string text, json_text;
    if (!RunIn<Args>(cmd, add, run, &text)) {
      ++refused;
      ASSERT_LT(refused, 2000) << "almost every random plan is refused";
      continue;
    }
    ASSERT_TRUE(RunIn<Args>(cmd + " --json", add, run, &json_text));
    nlohmann::json j = nlohmann::json::parse(json_text);
    ++checked;
    oom += j.at("fits").get<bool>() ? 0 : 1;
    check(text, j);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(oom, 0);
  EXPECT_LT(oom, checked);
  std::printf("checked %d %s (%d out of memory), %d refused as input\n", checked, what, oom,
              refused);
}

// The line of `text` that starts with `prefix` (after leading spaces), or "".
inline std::string Line(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find_first_not_of(' ');
    if (a != std::string::npos && line.compare(a, prefix.size(), prefix) == 0) return line;
  }
  return "";
}

inline std::string Fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

inline std::string Gib(const nlohmann::json& bytes) { return FormatBytes(Bytes::Of(bytes.get<int64_t>())); }

// Expects `line` to show `value` right after the first (`last`: the last) `after`, spaces skipped.
inline void ExpectShows(const std::string& line, const std::string& after, const std::string& value,
                        bool last = false) {
  size_t at = last ? line.rfind(after) : line.find(after);
  ASSERT_NE(at, std::string::npos) << "\"" << after << "\" not in: " << line;
  std::string rest = line.substr(at + after.size());
  size_t a = rest.find_first_not_of(' ');
  ASSERT_NE(a, std::string::npos) << line;
  EXPECT_EQ(rest.compare(a, value.size(), value), 0) << "want " << value << " after \"" << after
                                                     << "\" in: " << line;
}

}  // namespace shardtune::cli::views
