// Checks every #include of ours against the allowed dependency edges (README.md "Architecture",
// "Conventions"): model and profiles depend on nothing of ours (profiles may use the vocabulary
// headers model/units.h, model/errors.h, model/strict_json.h, model/dtype.h,
// model/collective.h and model/text.h), simulator on model and profiles, planner (the search) on simulator,
// planner/configs (config import and export) on model and profiles alone, executor on model and
// profiles only, cli on everything but the executor's inner rooms.
// The executor's rooms (executor/README.md) depend one way: its shared basics (executor/*.h) and
// kernels/ on nothing of the executor; comm/ on the basics; nn/ (the model) on comm/; fsdp/ on
// nn/; probe/ on fsdp/ (the optimizer it times) and comm/; train/ on all of them. cli/ reaches the
// executor through its entry points: the basics, probe/ and train/, never comm/, nn/ or fsdp/.
// Public headers outside the executor never include Torch, Boost or Eigen.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace fs = std::filesystem;

namespace {

// Layers by folder; a layer inside another folder (planner/configs) is its own layer.
const std::map<std::string, std::set<std::string>>& AllowedLayers() {
  static const std::map<std::string, std::set<std::string>> m{
      {"model", {"model"}},
      {"profiles", {"profiles"}},
      {"simulator", {"simulator", "model", "profiles"}},
      {"planner", {"planner", "simulator", "model", "profiles"}},
      {"planner/configs", {"planner/configs", "model", "profiles"}},
      {"executor", {"executor", "model", "profiles"}},
      {"executor/kernels", {"executor/kernels"}},
      {"executor/comm", {"executor/comm", "executor", "model", "profiles"}},
      {"executor/nn", {"executor/nn", "executor/comm", "executor/kernels", "executor", "model", "profiles"}},
      {"executor/fsdp",
       {"executor/fsdp", "executor/nn", "executor/comm", "executor/kernels", "executor", "model", "profiles"}},
      {"executor/probe",
       {"executor/probe", "executor/fsdp", "executor/comm", "executor/kernels", "executor", "model", "profiles"}},
      {"executor/train",
       {"executor/train", "executor/probe", "executor/fsdp", "executor/nn", "executor/comm", "executor/kernels",
        "executor", "model", "profiles"}},
      {"cli",
       {"cli", "planner", "planner/configs", "simulator", "model", "profiles", "executor", "executor/probe",
        "executor/train"}},
  };
  return m;
}

// The layer of a repository-relative path ("planner/configs/import.h" -> "planner/configs",
// "executor/nn/transformer.h" -> "executor/nn", "executor/errors.h" -> "executor").
std::string LayerOf(const std::string& path) {
  if (path.rfind("planner/configs/", 0) == 0) return "planner/configs";
  const std::string top = path.substr(0, path.find('/'));
  if (top == "executor") {
    const size_t room_end = path.find('/', top.size() + 1);
    if (room_end != std::string::npos) return path.substr(0, room_end);
  }
  return top;
}

const std::set<std::string>& VocabularyHeaders() {
  static const std::set<std::string> s{"model/units.h", "model/errors.h", "model/strict_json.h",
                                      "model/dtype.h", "model/collective.h", "model/text.h"};
  return s;
}

TEST(LayeringTest, IncludesFollowTheAllowedEdges) {
  fs::path root(SHARDTUNE_SOURCE_DIR);
  std::regex inc(R"re(^\s*#\s*include\s*"([a-z_]+/[^"]+)")re");
  std::map<std::string, int> files;
  for (const char* top : {"model", "profiles", "simulator", "planner", "executor", "cli"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".in") continue;
      std::string layer = LayerOf(fs::relative(entry.path(), root).generic_string());
      const std::set<std::string>& allowed = AllowedLayers().at(layer);
      ++files[layer];
      std::ifstream in(entry.path());
      std::string line;
      int lineno = 0;
      while (std::getline(in, line)) {
        ++lineno;
        std::smatch m;
        if (!std::regex_search(line, m, inc)) continue;
        std::string header = m[1];
        std::string dep = LayerOf(header);
        bool ok = allowed.count(dep) > 0 ||
                  (layer == "profiles" && VocabularyHeaders().count(header) > 0);
        EXPECT_TRUE(ok) << entry.path() << ":" << lineno << " includes " << header
                        << " but " << layer << "/ may not depend on " << dep << "/";
      }
    }
  }
  for (const auto& [layer, allowed] : AllowedLayers()) {
    EXPECT_GT(files[layer], 0) << "no file in layer " << layer;
  }
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
