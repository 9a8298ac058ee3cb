// The subcommands `shardtune` hands to `shardtune-exec`, the same command line built with the
// executor (LibTorch): `shardtune` itself never loads LibTorch (cli/CMakeLists.txt).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace shardtune::cli {

// The executor's subcommands, as both programs list them in --help.
inline constexpr const char* kRunCommandHelp = "Train a plan for real (LibTorch, own FSDP runtime)";
inline constexpr const char* kProbeCommandHelp =
    "Measure this machine's device and write a profile for --profile";
inline constexpr const char* kEnvCommandHelp =
    "Report LibTorch, the BLAS it resolved (with measured GFLOP/s), threads, Gloo, NCCL, CUDA "
    "and GPUs";

// This process's environment, as name -> value and as "NAME=VALUE" strings.
std::map<std::string, std::string> EnvironmentMap();
std::vector<std::string> EnvironmentList();
// This process's own command line (/proc/self/cmdline; the launcher starts ranks with it).
std::vector<std::string> OwnArgv();
// OwnArgv() joined by spaces (for provenance records).
std::string OwnCommandLine();

// The program that runs the executor's subcommands: `shardtune-exec` in this program's folder.
// Throws exec::BackendError when /proc/self/exe cannot be read.
std::string ExecutorProgram();

// Replaces this process with ExecutorProgram() and the same arguments (argv[0] becomes its
// path). Returns only by throwing exec::BackendError (the program is missing or not
// executable), with the path and the hint to build it.
[[noreturn]] void ExecExecutor(int argc, char** argv);

}  // namespace shardtune::cli
