// Errors from the backends the executor drives (c10d, Gloo, NCCL, CUDA, the OS), README.md
// "Conventions": foreign errors are wrapped where they enter, with the call, file:line and the
// rank.
#pragma once

#include <stdexcept>
#include <string>

namespace shardtune::exec {

// A backend failed: a collective, a peer rank, a checkpoint file system call, a child process.
// cli/main.cc maps it to exit code 3.
class BackendError : public std::runtime_error {
 public:
  explicit BackendError(const std::string& what) : std::runtime_error(what) {}
};

// Rank 0 could not listen on MASTER_PORT: something else holds it (EADDRINUSE). A port the
// launcher found free can be taken before rank 0 binds it (by another launch on the machine);
// cli/main.cc maps this to kExitPortInUse, on which the launcher starts the ranks again on
// another port (executor/train/launcher.h).
class PortInUseError : public BackendError {
 public:
  explicit PortInUseError(const std::string& what) : BackendError(what) {}
};

// The exit code of a rank that failed with PortInUseError: sysexits.h EX_TEMPFAIL ("a temporary
// failure ... the user is invited to retry").
inline constexpr int kExitPortInUse = 75;

}  // namespace shardtune::exec
