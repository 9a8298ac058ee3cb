// `shardtune env`: what this machine gives a run (LibTorch and its build, the BLAS resolved at
// run time with its measured single-core GFLOP/s, thread pools, Gloo, NCCL, CUDA runtime and
// driver, GPUs and their catalog entries), as text or --json. Runs in shardtune-exec (LibTorch).
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>

namespace shardtune::cli {

struct EnvArgs {
  bool json = false;
  bool no_bench = false;  // skip the timed matmul
};

void AddEnvCommand(CLI::App* app, EnvArgs* a);
// Prints the report on `out`; a slow BLAS is also said on `err` as "warning: ...". Returns 0.
int RunEnvCommand(const EnvArgs& a, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
