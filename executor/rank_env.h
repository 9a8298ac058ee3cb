// Who this process is in a multi-process run: from the variables torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm's srun (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, inside a job step) or shardtune's own
// launcher (which sets torchrun's) provide. Plain C++; the caller passes the environment in.
#pragma once

#include <map>
#include <string>

namespace shardtune::exec {

struct RankEnv {
  bool launched = false;  // false: no variables, this process is the whole run
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single process";  // "torchrun variables", "slurm", ...
};

// Reads the variables from `env` (name -> value). torchrun's take precedence over Slurm's.
// Throws InputError naming the variable when one is malformed or inconsistent, e.g.
// "RANK: expected an integer in [0, WORLD_SIZE = 2), got 5", or MASTER_ADDR is missing under
// Slurm (hint: export MASTER_ADDR=$(scontrol show hostnames | head -n1)).
RankEnv RankEnvFromVariables(const std::map<std::string, std::string>& env);

}  // namespace shardtune::exec
