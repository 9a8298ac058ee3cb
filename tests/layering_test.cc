// Checks every #include of ours against the allowed dependency edges (README.md "Architecture",
// README.md "Architecture", "Conventions"): model and profiles depend on nothing of ours (profiles
// may use the vocabulary headers model/units.h, model/errors.h, model/strict_json.h and
// model/dtype.h), simulator on model and profiles, planner on simulator, executor on model and
// profiles only, cli on everything. Public headers outside the executor never include Torch, Boost
// or Eigen.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace fs = std::filesystem;

namespace {

const std::map<std::string, std::set<std::string>>& AllowedFolders() {
  static const std::map<std::string, std::set<std::string>> m{
      {"model", {"model"}},
      {"profiles", {"profiles"}},
      {"simulator", {"simulator", "model", "profiles"}},
      {"planner", {"planner", "simulator", "model", "profiles"}},
      {"executor", {"executor", "model", "profiles"}},
      {"cli", {"cli", "planner", "simulator", "model", "profiles", "executor"}},
  };
  return m;
}

const std::set<std::string>& VocabularyHeaders() {
  static const std::set<std::string> s{"model/units.h", "model/errors.h", "model/strict_json.h",
                                      "model/dtype.h"};
  return s;
}

TEST(LayeringTest, IncludesFollowTheAllowedEdges) {
  fs::path root(SHARDTUNE_SOURCE_DIR);
  std::regex inc(R"re(^\s*#\s*include\s*"([a-z_]+)/([^"]+)")re");
  int files = 0;
  for (const auto& [folder, allowed] : AllowedFolders()) {
    if (!fs::exists(root / folder)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".in") continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      int lineno = 0;
      while (std::getline(in, line)) {
        ++lineno;
        std::smatch m;
        if (!std::regex_search(line, m, inc)) continue;
        std::string dep = m[1];
        std::string header = dep + "/" + std::string(m[2]);
        bool ok = allowed.count(dep) > 0 ||
                  (folder == "profiles" && VocabularyHeaders().count(header) > 0);
        EXPECT_TRUE(ok) << entry.path() << ":" << lineno << " includes " << header
                        << " but " << folder << "/ may not depend on " << dep << "/";
      }
    }
  }
  EXPECT_GT(files, 10);
}

TEST(LayeringTest, PublicHeadersStayLight) {
  fs::path root(SHARDTUNE_SOURCE_DIR);
  std::regex heavy(R"re(^\s*#\s*include\s*<(torch/|boost/|Eigen/|c10/|ATen/))re");
  for (const char* folder : {"model", "profiles", "simulator", "planner", "cli"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (entry.path().extension() != ".h") continue;
      std::ifstream in(entry.path());
      std::string line;
      while (std::getline(in, line)) {
        EXPECT_FALSE(std::regex_search(line, heavy)) << entry.path() << ": " << line;
      }
    }
  }
}

TEST(LayeringTest, NoGlobInCMake) {
  fs::path root(SHARDTUNE_SOURCE_DIR);
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().filename() != "CMakeLists.txt") continue;
    if (entry.path().string().find("/build") != std::string::npos) continue;
    std::ifstream in(entry.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("file(GLOB"), std::string::npos) << entry.path();
  }
}

}  // namespace
