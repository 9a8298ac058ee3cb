// fork + exec of N local ranks; first failure stops the rest.
#include "executor/train/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "executor/errors.h"

namespace shardtune::exec {
namespace {

std::string Describe(int rank, pid_t pid, int status) {
  std::string who = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return who + " was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return who + " exited with code " + std::to_string(WEXITSTATUS(status));
}

int ExitCodeOf(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// The environment of rank `rank`: the given one, with the rendezvous variables replaced.
std::vector<std::string> RankEnvironment(const LaunchOptions& o, int rank, int port, const std::string& run_id) {
  const std::vector<std::pair<std::string, std::string>> vars{
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.nproc)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(port)},
      // This launch's own key space in the store (executor/comm/rendezvous.cc): a
      // rank of another launch that was handed the same free port (FindFreePort's port is free
      // again until rank 0 listens on it) then never pairs with these ranks.
      {"SHARDTUNE_RUN_ID", run_id}};
  std::vector<std::string> env;
  for (const std::string& kv : o.environment) {
    std::string key = kv.substr(0, kv.find('='));
    bool ours = false;
    for (const auto& v : vars) ours = ours || v.first == key;
    if (!ours) env.push_back(kv);
  }
  for (const auto& v : vars) env.push_back(v.first + "=" + v.second);
  return env;
}

// In the child: only async-signal-safe calls (the parent may have threads).
[[noreturn]] void ExecRank(const char* exe, char* const* argv, char* const* envp, pid_t launcher) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(125);  // the launcher died before prctl
  ::execve(exe, argv, envp);
  ::_exit(127);
}

void SignalAll(const std::vector<pid_t>& pids, const std::vector<bool>& done, int sig) {
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!done[i]) ::kill(pids[i], sig);
  }
}

}  // namespace

int FindFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw BackendError(std::string("launcher: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    throw BackendError("launcher: no free port on 127.0.0.1: " + err);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

std::vector<pid_t> StartRanks(const LaunchOptions& o, int port) {
  pid_t self = ::getpid();
  // One id for every rank of this launch (RankEnvironment's SHARDTUNE_RUN_ID).
  const std::string run_id = std::to_string(self) + "." + std::to_string(port) + "." +
                             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<pid_t> pids;
  std::vector<char*> argv;
  for (const std::string& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (int r = 0; r < o.nproc; ++r) {
    std::vector<std::string> env = RankEnvironment(o, r, port, run_id);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
      std::string err = std::strerror(errno);
      SignalAll(pids, std::vector<bool>(pids.size(), false), SIGKILL);
      throw BackendError("launcher: cannot start rank " + std::to_string(r) + ": " + err);
    }
    if (pid == 0) ExecRank(o.exe.c_str(), argv.data(), envp.data(), self);
    pids.push_back(pid);
  }
  return pids;
}

// Child `pid` was reaped: marks its rank done, one fewer remaining. Returns the rank, or
// pids.size() when it is none of ours (then nothing changes).
size_t MarkReaped(const std::vector<pid_t>& pids, pid_t pid, std::vector<bool>* done,
                  size_t* remaining) {
  const auto r = static_cast<size_t>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
  if (r < pids.size()) {
    (*done)[r] = true;
    --*remaining;
  }
  return r;
}

// Reaps the ranks; the first failure sends SIGTERM to the rest, SIGKILL after grace_s.
LaunchResult WaitRanks(const std::vector<pid_t>& pids, double grace_s) {
  LaunchResult result;
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  bool terminated = false;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, terminated ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;  // no children left
    if (pid == 0) {      // stopping the others: wait, then SIGKILL
      if (std::chrono::steady_clock::now() > deadline) {
        SignalAll(pids, done, SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    size_t r = MarkReaped(pids, pid, &done, &remaining);
    if (r == pids.size()) continue;
    bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!failed || result.exit_code != 0) continue;
    // The first failure seen may be a rank that only lost its peer (a socket error, exit 3, or
    // SIGPIPE) while the rank that caused it died a moment earlier: collect what else exits
    // within kSettle and name the most likely cause, a rank killed by a signal other than
    // SIGPIPE/SIGTERM, else the first failure.
    constexpr auto kSettle = std::chrono::milliseconds(200);
    auto settle_end = std::chrono::steady_clock::now() + kSettle;
    auto cause = [](int st) {
      return WIFSIGNALED(st) && WTERMSIG(st) != SIGPIPE && WTERMSIG(st) != SIGTERM;
    };
    size_t best_r = r;
    pid_t best_pid = pid;
    int best_status = status;
    while (!cause(best_status) && remaining > 0 && std::chrono::steady_clock::now() < settle_end) {
      int st = 0;
      pid_t p2 = ::waitpid(-1, &st, WNOHANG);
      if (p2 <= 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      size_t r2 = MarkReaped(pids, p2, &done, &remaining);
      if (r2 == pids.size()) continue;
      if (cause(st)) {
        best_r = r2;
        best_pid = p2;
        best_status = st;
      }
    }
    result.exit_code = ExitCodeOf(best_status);
    result.failed_rank = static_cast<int>(best_r);
    result.message = Describe(result.failed_rank, best_pid, best_status);
    if (remaining == 0) continue;
    result.message += "; stopped the other " + std::to_string(remaining) + " rank(s)";
    SignalAll(pids, done, SIGTERM);
    terminated = true;
    deadline = std::chrono::steady_clock::now() +
               std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  }
  return result;
}

}  // namespace

LaunchResult LaunchLocalRanks(const LaunchOptions& o) {
  std::vector<int> taken;
  for (int attempt = 1;; ++attempt) {
    const int port = o.pick_port ? o.pick_port() : FindFreePort();
    LaunchResult r = WaitRanks(StartRanks(o, port), o.grace_s);
    // Rank 0's own failure to listen (WaitRanks names the cause: rank 0's exit code, the others
    // stopped after it) is the launcher's race, not the job's: a fresh port, while attempts last.
    const bool port_taken = r.exit_code == kExitPortInUse && r.failed_rank == 0;
    if (!port_taken || attempt >= kPortAttempts) {
      if (port_taken) {
        r.message += "; MASTER_PORT was taken before rank 0 listened on each of " + std::to_string(attempt) +
                     " ports tried";
      }
      if (port_taken) taken.push_back(port);
      r.taken_ports = std::move(taken);
      return r;
    }
    taken.push_back(port);
  }
}

}  // namespace shardtune::exec
