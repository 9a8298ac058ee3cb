// Replays the seed corpora and the saved crash inputs (tests/fuzz/corpus/<target>/ and
// tests/fuzz/regressions/<target>/) through every parser in the ordinary build: each input is
// accepted or rejected with a one-line InputError. The libFuzzer runs (clang) live in ctest as
// fuzz_<target>; this keeps the found bugs fixed where no clang is.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/fuzz/fuzz_inputs.h"

namespace shardtune::fuzz {
namespace {
namespace fs = std::filesystem;

int ReplayFolder(const std::string& target, const fs::path& dir) {
  int n = 0;
  if (!fs::is_directory(dir)) return 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(RunOne(target, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "")
        << e.path();
    ++n;
  }
  return n;
}

TEST(FuzzReplayTest, EverySeedAndRegressionInputIsAcceptedOrAOneLineInputError) {
  const fs::path root = SHARDTUNE_FUZZ_DIR;
  int total = 0;
  for (const std::string& target : TargetNames()) {
    SCOPED_TRACE(target);
    int seeds = ReplayFolder(target, root / "corpus" / target);
    EXPECT_GT(seeds, 0) << "no seed corpus for " << target;
    total += seeds + ReplayFolder(target, root / "regressions" / target);
  }
  std::cout << "replayed " << total << " inputs\n";
}

TEST(FuzzReplayTest, ABrokenContractIsReported) {
  // A valid document is accepted, a wrong one is an InputError: RunOne says "" for both, and the
  // harness itself rejects an unknown target (a bug of the caller, not an InputError).
  const std::string ok = R"({"schema": "shardtune.plan", "schema_version": 1})";
  EXPECT_EQ(RunOne("plan_json", reinterpret_cast<const uint8_t*>(ok.data()), ok.size()), "");
  const std::string bad = R"({"schema": "shardtune.plan", "schema_version": 1, "micro_batchh": 1})";
  EXPECT_EQ(RunOne("plan_json", reinterpret_cast<const uint8_t*>(bad.data()), bad.size()), "");
  EXPECT_NE(RunOne("no_such_parser", reinterpret_cast<const uint8_t*>(ok.data()), ok.size()), "");
}

}  // namespace
}  // namespace shardtune::fuzz
