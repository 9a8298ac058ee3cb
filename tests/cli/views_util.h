// Helpers of the CLI views' property tests (estimate_views_test.cc, simulate_views_test.cc,
// tune_views_test.cc): run a subcommand in-process on a parsed command line and read its text.
#pragma once

#include <iomanip>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/format.h"
#include "model/errors.h"

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
