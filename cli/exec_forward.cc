#include "cli/exec_forward.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <system_error>
#include <vector>

#include "executor/errors.h"

extern char** environ;

namespace shardtune::cli {

std::map<std::string, std::string> EnvironmentMap() {
  std::map<std::string, std::string> m;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

std::vector<std::string> EnvironmentList() {
  std::vector<std::string> v;
  for (char** e = environ; *e != nullptr; ++e) v.emplace_back(*e);
  return v;
}

// This process's own command line (the launcher starts ranks with it).
std::vector<std::string> OwnArgv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  std::string cur;
  for (char c : all) {
    if (c == '\0') {
      argv.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) argv.push_back(cur);
  if (argv.empty())
    throw exec::BackendError("cannot read /proc/self/cmdline to start the ranks");
  return argv;
}

std::string OwnCommandLine() {
  std::string line;
  for (const std::string& a : OwnArgv()) line += (line.empty() ? "" : " ") + a;
  return line;
}

std::string ExecutorProgram() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    throw exec::BackendError("cannot find this program (/proc/self/exe): " + ec.message());
  }
  return (self.parent_path() / "shardtune-exec").string();
}

void ExecExecutor(int argc, char** argv) {
  const std::string program = ExecutorProgram();
  std::vector<char*> args;
  args.push_back(const_cast<char*>(program.c_str()));
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(program.c_str(), args.data());
  int err = errno;
  throw exec::BackendError(std::string(argc > 1 ? argv[1] : "run") + ": cannot start " + program +
                           " (" + std::strerror(err) +
                           "); it is built beside shardtune: cmake --build build --target shardtune");
}

}  // namespace shardtune::cli
