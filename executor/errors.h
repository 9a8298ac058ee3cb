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

}  // namespace shardtune::exec
