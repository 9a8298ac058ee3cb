// The whole job, not one steady step: per-rank GPU memory and per-node host memory of every phase
// (start-up and model load, step 0, the steady step, checkpoint save, resume). Phases are events
// on the one memory timeline: the StepProgram's actions are replayed in program order, with the
// load, gradient-clipping, save and resume actions inserted where the job performs them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "model/units.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"
#include "simulator/step_program.h"

namespace shardtune::sim {

enum class JobPhase : uint8_t { kLoad, kStep0, kSteady, kSave, kResume };
inline constexpr int kNumJobPhases = 5;
const char* ToString(JobPhase p);  // "model load", "step 0", "steady step", "checkpoint save", "resume"

// One phase's memory. GPU figures are per rank (the worst rank: rank 0 for rank-0-only work).
struct PhaseMemory {
  JobPhase phase = JobPhase::kLoad;
  std::string moment;                // what happens at the GPU peak, e.g. "full-state-dict gather"
  Bytes allocated_peak;              // what PyTorch allocates (torch.cuda.max_memory_allocated)
  std::vector<std::pair<std::string, Bytes>> top;  // the three largest contributors at the peak
  Bytes reserved;                    // caching allocator reserved then (no pressure; never shrinks)
  Bytes fragmentation;               // allowance added to the allocated peak for the judgement
  Bytes outside;                     // CUDA context + NCCL buffers (outside the allocator)
  Bytes nvidia_smi;                  // reserved + outside: what nvidia-smi would show
  Bytes required;                    // allocated + fragmentation + outside: the judged figure
  Bytes headroom;                    // usable device memory - required (negative: runs out)
  bool fits = true;
  // Host RAM per node at this phase's host peak (the busiest node), pinned and pageable apart.
  std::string host_moment;
  Bytes host_pinned, host_pageable, host_total;
  std::vector<std::pair<std::string, Bytes>> host_breakdown;
  bool host_fits = true;
  std::string hint;                  // what would lower this phase's peak (empty when none)
};

struct JobPhases {
  std::vector<PhaseMemory> phases;   // in job order; checkpoint phases absent for kNone
  Bytes capacity;                    // usable device memory per GPU
  // "node", or "host" where ClusterSpec::gpus_per_host splits a node into hosts: the word the
  // answers put after "host RAM per".
  std::string host_scope = "node";
  Bytes host_limit;                  // min(host memory, cgroup limit when given); a host is the
                                     // node unless ClusterSpec::gpus_per_host splits it
  bool fits = true;                  // every phase fits on the GPU and on the host
  int deciding = 0;                  // index of the phase that decides the verdict: the first
                                     // that does not fit, else the one with the least headroom
  bool training_fits = true;         // step 0 and the steady step fit (what `fits` said before)
};

// Builds the phases from a memory estimate's program and report. REQUIRES: `program` and
// `report` come from EstimateMemoryWithProgram for the same spec, cluster, plan and options.
JobPhases EstimateJobPhases(const StepProgram& program, const MemoryReport& report,
                            const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                            const model::Plan& plan, const MemoryOptions& options);

// Parses "--checkpoint-format": none|sharded|full|full_cpu_offload. Throws InputError.
CheckpointFormat ParseCheckpointFormat(const std::string& text, const std::string& where);
// Parses "--allocator": default|expandable_segments (PYTORCH_CUDA_ALLOC_CONF's
// expandable_segments:True). Throws InputError.
AllocatorMode ParseAllocatorMode(const std::string& text, const std::string& where);
const char* ToString(CheckpointFormat f);
const char* ToString(AllocatorMode a);

}  // namespace shardtune::sim
