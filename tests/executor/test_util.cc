// Process and file helpers for the executor tests.
#include "tests/executor/test_util.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

namespace shardtune::exec::testing {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::map<int64_t, double> StepField(const std::string& dir, const char* field) {
  std::map<int64_t, double> out;
  std::ifstream in(dir + "/measurements.json");
  if (!in) return out;
  nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& s : j.at("steps")) out[s.at("step").get<int64_t>()] = s.at(field).get<double>();
  return out;
}

}  // namespace

TempDir::TempDir() {
  char tmpl[] = "/tmp/shardtune_exec_test_XXXXXX";
  char* p = ::mkdtemp(tmpl);
  path_ = p ? p : "/tmp/shardtune_exec_test_fallback";
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

pid_t StartShardtune(const std::vector<std::string>& args, const std::string& log_path,
                     const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv{SHARDTUNE_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (std::string& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    FILE* f = std::freopen(log_path.c_str(), "w", stdout);
    if (f == nullptr) ::_exit(126);
    ::dup2(STDOUT_FILENO, STDERR_FILENO);
    ::execv(cargs[0], cargs.data());
    ::_exit(127);
  }
  return pid;
}

int WaitFor(pid_t pid, double timeout_s, double* seconds) {
  double t0 = Now();
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (seconds) *seconds = Now() - t0;
      return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }
    if (Now() - t0 > timeout_s) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      if (seconds) *seconds = Now() - t0;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ProcessResult RunShardtune(const std::vector<std::string>& args, double timeout_s,
                           const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/shardtune_exec_log_XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd >= 0) ::close(fd);
  ProcessResult r;
  pid_t pid = StartShardtune(args, tmpl, env);
  r.exit_code = WaitFor(pid, timeout_s, &r.seconds);
  r.output = ReadText(tmpl);
  std::filesystem::remove(tmpl);
  return r;
}

bool WaitForText(const std::string& path, const std::string& needle, double timeout_s) {
  double t0 = Now();
  while (Now() - t0 < timeout_s) {
    if (ReadText(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::map<int64_t, double> Losses(const std::string& dir) { return StepField(dir, "loss"); }
std::map<int64_t, double> GradNorms(const std::string& dir) { return StepField(dir, "grad_norm"); }

void ExpectResumeReproducesLosses(
    const std::function<std::vector<std::string>(const std::string& out, int steps)>& args_for,
    const std::string& tmp_root) {
  std::string full_dir = tmp_root + "/full", resumed_dir = tmp_root + "/resumed";
  ProcessResult full = RunShardtune(args_for(full_dir, 4));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ProcessResult first = RunShardtune(args_for(resumed_dir, 2));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ProcessResult second = RunShardtune(args_for(resumed_dir, 4));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from checkpoint"), std::string::npos) << second.output;
  std::map<int64_t, double> a = Losses(full_dir), b = Losses(resumed_dir);
  ASSERT_EQ(b.size(), 2u);
  for (const auto& [step, loss] : b) EXPECT_EQ(loss, a.at(step)) << "step " << step;
}

std::string DataPath(const std::string& name) {
  return std::string(SHARDTUNE_EXECUTOR_TEST_DATA_DIR) + "/" + name;
}

std::pair<double, double> ValidateStep0Peak(const std::string& model_path, const std::string& dir) {
  ProcessResult r = RunShardtune({"validate", "--model", model_path, "--measurements",
                                  dir + "/measurements.json", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  for (const auto& row : j.at("runs").at(0).at("rows")) {
    if (row.at("name") == "memory: step 0 peak") {
      return {row.at("predicted").get<double>(), row.at("measured").get<double>()};
    }
  }
  ADD_FAILURE() << "no step 0 peak row in validate's answer for " << dir;
  return {0, 0};
}

void ExpectSameTraining(const std::string& want, const std::string& got, const std::string& what) {
  const std::map<int64_t, double> lw = Losses(want), lg = Losses(got), gw = GradNorms(want), gg = GradNorms(got);
  ASSERT_FALSE(lw.empty()) << what;
  ASSERT_EQ(lg.size(), lw.size()) << what;
  for (const auto& [step, loss] : lw) {
    EXPECT_NEAR(lg.at(step), loss, 1e-6 * std::fabs(loss)) << what << ", step " << step;
  }
  ASSERT_TRUE(gw.count(1) == 1 && gg.count(1) == 1) << what;
  EXPECT_NEAR(gg.at(1), gw.at(1), 1e-6 * gw.at(1)) << what;
}

std::pair<double, double> Step0PeakAgainstValidate(const std::string& model, const std::string& out,
                                                   const std::string& mode, const std::vector<std::string>& extra) {
  ProcessResult p = RunShardtune(With({"run", "--model", model, "--steps", "1", "--out", out, "--seq-len", "128",
                                       "--global-batch", "8", "--micro-batch", "8", "--threads", "1", "--precision",
                                       "fp32", "--max-grad-norm", "0", "--checkpointing", mode, "--attention", "eager"},
                                      extra));
  EXPECT_EQ(p.exit_code, 0) << mode << ": " << p.output;
  if (p.exit_code != 0) return {0, 0};
  auto [pred, meas] = ValidateStep0Peak(model, out);
  std::string label = mode;
  for (const std::string& f : extra) label += " " + f;
  std::cout << label << ": step-0 peak " << meas << " B measured, " << pred << " B predicted ("
            << (pred / meas - 1) * 100 << "%)" << std::endl;
  return {pred, meas};
}

void ExpectInputError(const std::vector<std::string>& args, const std::string& want) {
  ProcessResult r = RunShardtune(args, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
}

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

void ExpectSameLossCurves(const std::map<int64_t, double>& want, const std::map<int64_t, double>& got, int steps,
                          const std::string& what) {
  ASSERT_EQ(want.size(), static_cast<size_t>(steps)) << what;
  ASSERT_EQ(got.size(), static_cast<size_t>(steps)) << what;
  EXPECT_LT(std::fabs(want.at(1) - got.at(1)), 1e-5) << what;
  for (const auto& [step, loss] : want) EXPECT_LT(std::fabs(loss - got.at(step)), 2e-4) << what << " step " << step;
}

std::string FourBlockLlama(const TempDir& tmp) {
  const std::string path = tmp.Sub("micro-llama-4.model.json");
  std::ofstream out(path);
  out << R"({"schema": "shardtune.model", "schema_version": 1, "name": "micro-llama-4", "num_layers": 4,
             "hidden": 64, "num_heads": 4, "num_kv_heads": 2, "ffn_hidden": 172, "vocab_size": 512,
             "max_seq_len": 128, "source": "shardtune tests: micro-llama with 4 blocks"})";
  return path;
}

}  // namespace shardtune::exec::testing
