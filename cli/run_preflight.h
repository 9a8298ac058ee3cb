// `run`'s pre-flight check (issue #50): before any rank starts, the plan is estimated on the
// machine it is about to use, phase by phase (model load, step 0, steady step, checkpoint save,
// resume), and its checkpoints against the free space of --out. CPU ranks share this host's
// available RAM (MemAvailable, cgroup included); CUDA ranks each need their GPU's free memory as
// the driver reports it. Torch-free: it runs in the launching process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "model/units.h"

namespace shardtune::cli {

struct PreflightRequest {
  model::ModelSpec spec;
  model::Plan plan;             // as the ranks will run it (micro-batch, grad-accum resolved)
  int world = 1;                // ranks of the job (the emulated world with --emulate-world)
  int local_processes = 1;      // rank processes on this host (1 with --emulate-world)
  bool cuda = false;
  bool checkpoints = true;
  int64_t steps = 1;
  int checkpoint_every = 0;
  int keep_checkpoints = 0;
  int64_t resume_step = 0;      // the newest checkpoint already in --out (0: none)
  std::string out_dir;
};

struct PreflightResult {
  std::string error;               // "" when the plan fits; else one line, "run pre-flight: ..."
  std::vector<std::string> notes;  // what was checked, e.g. "pre-flight: fits this machine ..."
  std::vector<std::string> warnings;  // checks that could not be made (no NVML, no meminfo)
};

// Bytes of one rank's checkpoint file for `plan` (executor/train/trainer_checkpoint.cc StateSources:
// each unit's flat shard, padded to a multiple of the shard group, in its dtype; AdamW's two
// moments for trainable units; a metadata allowance).
int64_t CheckpointFileBytes(const model::ModelSpec& spec, const model::Plan& plan, int world);

// How many checkpoints this run writes (one per --checkpoint-every steps after `resume_step`,
// and one after the last step) and how many of them are on disk at once at most
// (--keep-checkpoints K: K kept plus the new one being written; 0 keeps all).
struct CheckpointCount {
  int64_t written = 0, alive = 0;
};
CheckpointCount CountCheckpoints(int64_t resume_step, int64_t steps, int checkpoint_every,
                                 int keep_checkpoints);

// Free bytes of the filesystem holding `dir` (its nearest existing ancestor; statvfs f_bavail,
// what an unprivileged writer gets). SHARDTUNE_TEST_DISK_FREE_BYTES overrides it (tests).
// -1 when it cannot be read.
int64_t FreeDiskBytes(const std::string& dir);

PreflightResult CheckRunFitsThisMachine(const PreflightRequest& request);

}  // namespace shardtune::cli
