// The built-in launcher: runs N ranks of the same program on this machine, as torchrun
// --standalone would, and makes sure a failed rank never leaves the others hanging.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace shardtune::exec {

struct LaunchOptions {
  int nproc = 1;
  std::string exe = "/proc/self/exe";    // the program each rank runs
  std::vector<std::string> argv;         // its arguments (argv[0] included)
  std::vector<std::string> environment;  // "KEY=VALUE" the ranks inherit (the caller's own)
  double grace_s = 5;                    // SIGTERM, then SIGKILL after this long
  // Where each start's MASTER_PORT comes from (default FindFreePort).
  std::function<int()> pick_port;
};

struct LaunchResult {
  int exit_code = 0;    // 0, or the first failed rank's code (128 + signal when killed)
  std::string message;  // empty, or e.g. "rank 1 (pid 4242) was killed by signal 9 (Killed); ..."
  int failed_rank = -1;  // the rank `message` names first, or -1
  // Ports given up because rank 0 could not listen on them (it exited kExitPortInUse), in order.
  std::vector<int> taken_ports;
};

// How often the ranks are started on a fresh port after rank 0 found its port taken.
inline constexpr int kPortAttempts = 3;

// Returns a TCP port on 127.0.0.1 that was free a moment ago (bind to port 0).
// Throws BackendError.
int FindFreePort();

// Spawns nproc processes (fork + exec of exe) with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port) added to
// options.environment; each dies with the launcher (PR_SET_PDEATHSIG). Waits for all. When one
// exits non-zero or by a signal, the others get SIGTERM, then SIGKILL after grace_s. A port is
// free when picked, not reserved: when rank 0 exits kExitPortInUse (executor/errors.h: another
// process bound the port before it listened) the ranks are started again on a fresh port, up to
// kPortAttempts starts in all. Throws BackendError when a process cannot be started.
LaunchResult LaunchLocalRanks(const LaunchOptions& options);

}  // namespace shardtune::exec
