// The corpus of real public configs (tests/data/configs/real/, its README names each file's
// source and commit): each case runs `shardtune estimate --from` as its user would, from the
// folder the trainer is launched in (so that shardtune composes verl's and ROLL's Hydra defaults
// itself), with the launch script's overrides, and checks what the file says: the model it
// loads, micro-batches and accumulation, sequence length and token budget, LoRA, Ulysses size,
// sharding, offload and the roles on the GPUs. Each expectation is worked out by hand from the
// file and the framework's own rules; the case's "why" says how.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

const std::string kCorpus = std::string(SHARDTUNE_TEST_DATA_DIR) + "/configs/real";

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

json Cases() {
  std::ifstream in(kCorpus + "/cases.json");
  return json::parse(in).at("cases");
}

class RealConfigTest : public ::testing::TestWithParam<size_t> {};

TEST_P(RealConfigTest, EstimateReadsWhatTheFileSays) {
  const json c = Cases().at(GetParam());
  SCOPED_TRACE(c.at("id").get<std::string>() + " (" + c.at("source").get<std::string>() + "): " +
               c.at("why").get<std::string>());
  std::string cmd = "cd " + ShellQuote(kCorpus + "/" + c.at("root").get<std::string>()) + " && " +
                    SHARDTUNE_BIN + " estimate --json --cluster " + ShellQuote(c.at("cluster"));
  // One primary config, or several layered in order (an Accelerate config, then TRL's arguments).
  if (c.at("from").is_array()) {
    for (const auto& f : c.at("from")) cmd += " --from " + ShellQuote(f.get<std::string>());
  } else {
    cmd += " --from " + ShellQuote(c.at("from"));
  }
  if (c.contains("from_format")) cmd += " --from-format " + ShellQuote(c.at("from_format"));
  for (const auto& o : c.at("set")) cmd += " --set " + ShellQuote(o.get<std::string>());
  if (c.contains("args")) {  // what the user adds beside the file (--reward-model)
    for (const auto& a : c.at("args")) cmd += " " + ShellQuote(a.get<std::string>());
  }
  const std::string err_path = ::testing::TempDir() + "real_configs_" + std::to_string(::getpid()) + ".err";
  cmd += " 2>" + ShellQuote(err_path);
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  std::ifstream e(err_path);
  const std::string err((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());
  if (c.contains("expect_error")) {  // a file shardtune refuses, with the key named
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
    // The error is one line (warnings may come before it).
    const size_t at = err.find("error: ");
    ASSERT_NE(at, std::string::npos) << err;
    const std::string line = err.substr(at, err.find('\n', at) - at);
    EXPECT_NE(line.find(c.at("expect_error").get<std::string>()), std::string::npos) << err;
    return;
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
  const json j = json::parse(out);
  const json& plan = j.at("plan");
  std::vector<std::string> roles;
  if (j.contains("colocation") && j.at("colocation").is_object()) {
    for (const auto& r : j.at("colocation").at("roles")) roles.push_back(r.at("role"));
  }
  for (const auto& [key, want] : c.at("expect").items()) {
    if (key == "model") {
      EXPECT_EQ(j.at("model").at("name"), want) << key;
    } else if (key == "lora_rank" || key == "lora_alpha") {
      ASSERT_TRUE(plan.contains("lora")) << key;
      EXPECT_EQ(plan.at("lora").at(key == "lora_rank" ? "rank" : "alpha"), want) << key;
    } else if (key == "roles") {
      for (const auto& r : want) {
        EXPECT_NE(std::find(roles.begin(), roles.end(), r.get<std::string>()), roles.end()) << "role " << r;
      }
    } else if (key == "no_roles") {
      for (const auto& r : want) {
        EXPECT_EQ(std::find(roles.begin(), roles.end(), r.get<std::string>()), roles.end()) << "role " << r;
      }
    } else if (key == "fits") {  // the one verdict, co-located roles included
      EXPECT_EQ(j.at("fits"), want) << key;
    } else if (key == "packed_seq_len" && want == 0) {
      EXPECT_FALSE(plan.contains("packed_seq_len")) << key;
    } else {
      ASSERT_TRUE(plan.contains(key)) << key;
      EXPECT_EQ(plan.at(key), want) << key;
    }
  }
}

std::vector<size_t> CaseIndexes() {
  std::vector<size_t> v(Cases().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Corpus, RealConfigTest, ::testing::ValuesIn(CaseIndexes()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return Cases().at(info.param).at("id").get<std::string>();
                         });

}  // namespace
