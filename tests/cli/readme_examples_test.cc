// The README's Examples block runs as written (issue #49 item 1: the tune -> run chain broke and
// nothing noticed). Each line of the ```sh block under "## Examples", its comment stripped, runs
// in order with `sh -c` in one scratch folder whose PATH starts with the built programs, so later
// lines read what earlier ones wrote (plan.json). The inputs a user brings are the repository's
// test fixtures: path/to/config.json (Llama-3-8B's HF config), accelerate.yaml, trainer_args.json
// and rlvr.yaml (tests/data/configs). Every line must exit 0.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The commands of the first ```sh block after "## Examples", comments and blank lines dropped.
std::vector<std::string> ExampleCommands(const std::string& readme) {
  std::vector<std::string> out;
  const size_t heading = readme.find("\n## Examples\n");
  if (heading == std::string::npos) return out;
  const size_t open = readme.find("```sh\n", heading);
  const size_t close = readme.find("\n```", open + 6);
  if (open == std::string::npos || close == std::string::npos) return out;
  std::istringstream lines(readme.substr(open + 6, close - open - 6));
  for (std::string line; std::getline(lines, line);) {
    const size_t hash = line.find(" #");
    if (hash != std::string::npos) line = line.substr(0, hash);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

TEST(ReadmeExamplesTest, EveryExampleRunsAsWritten) {
  const std::string source = SHARDTUNE_SOURCE_DIR;
  const std::vector<std::string> commands = ExampleCommands(ReadFile(source + "/README.md"));
  ASSERT_GE(commands.size(), 10u) << "the README's Examples block was not found";
  std::string dir_template = (fs::temp_directory_path() / "shardtune_readme_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir_template.data()), nullptr);
  const fs::path dir = dir_template;
  fs::create_directories(dir / "path/to");
  fs::copy_file(source + "/tests/data/model/llama3-8b.config.json", dir / "path/to/config.json");
  fs::copy_file(source + "/tests/data/configs/accelerate_fsdp2.yaml", dir / "accelerate.yaml");
  fs::copy_file(source + "/tests/data/configs/hf_trainer_args.json", dir / "trainer_args.json");
  fs::copy_file(source + "/tests/data/configs/roll_rlvr_fsdp2_cp2.yaml", dir / "rlvr.yaml");
  const std::string bin_dir = fs::path(SHARDTUNE_BIN).parent_path().string();
  const char* path = std::getenv("PATH");
  const std::string env_path = bin_dir + ":" + (path != nullptr ? path : "/usr/bin:/bin");
  for (const std::string& c : commands) {
    ASSERT_EQ(c.rfind("shardtune ", 0), 0u) << "an example that is not a shardtune command: " << c;
    const std::string log = (dir / "out.txt").string();
    const std::string sh = "cd '" + dir.string() + "' && PATH='" + env_path + "' " + c + " > '" + log + "' 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system(sh.c_str());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::cout << "exit " << code << " in " << s << " s: " << c << std::endl;
    EXPECT_EQ(code, 0) << c << "\n" << ReadFile(log);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// The ```text block after the Examples quotes commands ("$ shardtune ...") and the first lines
// they print: each command runs and its first lines must be exactly those.
TEST(ReadmeExamplesTest, QuotedFirstLinesAreWhatTheCommandsPrint) {
  const std::string readme = ReadFile(std::string(SHARDTUNE_SOURCE_DIR) + "/README.md");
  const size_t heading = readme.find("\n## Examples\n");
  ASSERT_NE(heading, std::string::npos);
  const size_t open = readme.find("```text\n$ shardtune ", heading);
  ASSERT_NE(open, std::string::npos) << "no quoted output under Examples";
  const size_t close = readme.find("\n```", open + 8);
  std::istringstream lines(readme.substr(open + 8, close - open - 8));
  std::vector<std::pair<std::string, std::vector<std::string>>> quoted;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("$ ", 0) == 0) {
      quoted.push_back({line.substr(2), {}});
    } else if (!quoted.empty()) {
      quoted.back().second.push_back(line);
    }
  }
  ASSERT_GE(quoted.size(), 2u);
  const std::string bin_dir = fs::path(SHARDTUNE_BIN).parent_path().string();
  const std::string log = (fs::temp_directory_path() / ("shardtune_readme_quote_" + std::to_string(::getpid()))).string();
  for (const auto& [command, expected] : quoted) {
    const std::string sh = "PATH='" + bin_dir + ":/usr/bin:/bin' " + command + " > '" + log + "' 2>/dev/null";
    ASSERT_EQ(std::system(sh.c_str()), 0) << command;
    std::istringstream got(ReadFile(log));
    for (const std::string& want : expected) {
      std::string line;
      std::getline(got, line);
      EXPECT_EQ(line, want) << command << "\n(update the README's quoted lines if the change is meant)";
    }
  }
  fs::remove(log);
}

}  // namespace
