// torchrun / Slurm variables -> RankEnv.
#include "executor/rank_env.h"

#include "model/errors.h"
#include "model/text.h"

namespace shardtune::exec {
namespace {

const std::string* Find(const std::map<std::string, std::string>& env, const std::string& k) {
  auto it = env.find(k);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// Leading integer of the value ("4(x2)" in SLURM_NTASKS_PER_NODE reads 4).
int Int(const std::map<std::string, std::string>& env, const std::string& key, int lo, int hi,
        const std::string& range) {
  const std::string* v = Find(env, key);
  SHARDTUNE_CHECK(v != nullptr) << key;
  size_t used = 0;
  const int64_t n = model::ParseLeadingInt64(*v, &used).value_or(0);
  bool slurm_suffix = key.rfind("SLURM_", 0) == 0 && used > 0;
  if (used == 0 || (used != v->size() && !slurm_suffix) || n < lo || n > hi) {
    throw InputError(key + ": expected an integer in " + range + ", got \"" + *v + "\"");
  }
  return static_cast<int>(n);
}

void ReadMaster(const std::map<std::string, std::string>& env, RankEnv* r, bool required) {
  if (const std::string* a = Find(env, "MASTER_ADDR")) {
    r->master_addr = *a;
  } else if (required) {
    throw InputError(
        "MASTER_ADDR: not set (hint: under Slurm, export MASTER_ADDR=$(scontrol show "
        "hostnames \"$SLURM_JOB_NODELIST\" | head -n1))");
  }
  if (Find(env, "MASTER_PORT")) r->master_port = Int(env, "MASTER_PORT", 1, 65535, "[1, 65535]");
}

}  // namespace

RankEnv RankEnvFromVariables(const std::map<std::string, std::string>& env) {
  RankEnv r;
  if (Find(env, "RANK") || Find(env, "WORLD_SIZE")) {
    if (!Find(env, "RANK") || !Find(env, "WORLD_SIZE")) {
      throw InputError(std::string(Find(env, "RANK") ? "WORLD_SIZE" : "RANK") + ": not set, but " +
                       (Find(env, "RANK") ? "RANK" : "WORLD_SIZE") +
                       " is (set both, as torchrun does)");
    }
    r.launched = true;
    r.source = "torchrun variables";
    r.world_size = Int(env, "WORLD_SIZE", 1, 1 << 20, "[1, 2^20]");
    r.rank = Int(env, "RANK", 0, r.world_size - 1,
                 "[0, WORLD_SIZE = " + std::to_string(r.world_size) + ")");
    r.local_rank = Find(env, "LOCAL_RANK")
                       ? Int(env, "LOCAL_RANK", 0, r.world_size - 1, "[0, WORLD_SIZE)")
                       : r.rank;
    r.local_world_size = Find(env, "LOCAL_WORLD_SIZE")
                             ? Int(env, "LOCAL_WORLD_SIZE", 1, r.world_size, "[1, WORLD_SIZE]")
                             : r.world_size;
    ReadMaster(env, &r, /*required=*/false);
    return r;
  }
  if (Find(env, "SLURM_PROCID") && Find(env, "SLURM_NTASKS") && Find(env, "SLURM_STEP_ID")) {
    r.launched = true;
    r.source = "slurm";
    r.world_size = Int(env, "SLURM_NTASKS", 1, 1 << 20, "[1, 2^20]");
    r.rank = Int(env, "SLURM_PROCID", 0, r.world_size - 1, "[0, SLURM_NTASKS)");
    r.local_rank = Find(env, "SLURM_LOCALID")
                       ? Int(env, "SLURM_LOCALID", 0, r.world_size - 1, "[0, SLURM_NTASKS)")
                       : 0;
    r.local_world_size = Find(env, "SLURM_NTASKS_PER_NODE") ? Int(env, "SLURM_NTASKS_PER_NODE", 1,
                                                                  r.world_size, "[1, SLURM_NTASKS]")
                                                            : 1;
    ReadMaster(env, &r, /*required=*/r.world_size > 1);
  }
  return r;
}

}  // namespace shardtune::exec
