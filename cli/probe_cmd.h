// `shardtune probe`: measures this machine's device (GEMMs over a model's shapes, attention,
// memory-bound kernels, host costs, copies; with --nproc N the collectives between N local
// ranks) and writes a "shardtune.profile" (version 3, "kernels" section) that --profile reads.
// Runs in shardtune-exec (LibTorch).
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

namespace shardtune::cli {

struct ProbeArgs {
  std::string device = "cpu";  // cpu|cuda
  std::string model;           // default: tiny-llama on cpu, llama3.2-1b on cuda
  std::string out;
  std::string tokens;          // comma-separated GEMM row counts (empty: the probe's grid)
  std::string dtypes;          // comma-separated dtypes (empty: cpu fp32, cuda bf16,fp32)
  std::string name;
  int nproc = 1;
  int threads = 0;
  double budget_s = 100;
  double timeout_s = 60;
};

void AddProbeCommand(CLI::App* app, ProbeArgs* a);
// Returns the exit code (0, or a failed rank's).
int RunProbeCommand(const ProbeArgs& a, std::ostream& out, std::ostream& err);

}  // namespace shardtune::cli
