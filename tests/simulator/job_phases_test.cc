// Job phases: each phase's GPU and host peak derived here from the rules the phase follows
// (lazy AdamW state, _init_optim_state, full-state-dict gathers, load modes, expandable segments).
#include "simulator/job_phases.h"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/job_phases_internal.h"
#include "simulator/memory_report_json.h"

namespace shardtune::sim {
namespace {

int64_t R512(int64_t b) { return (b + 511) / 512 * 512; }

struct Job {
  MemoryEstimate est;
  JobPhases phases;
};

Job Estimate(const std::string& model, const std::string& cluster, int64_t seq, MemoryOptions o,
             model::Plan p = {}) {
  auto s = model::FindModelPreset(model);
  auto c = profiles::ParseClusterShorthand(cluster);
  p.seq_len = seq;
  Job r;
  r.est = EstimateMemoryWithProgram(s, c, p, o, true);
  r.phases = EstimateJobPhases(r.est.program, r.est.report, s, c, p, o);
  return r;
}

const PhaseMemory& Phase(const JobPhases& j, JobPhase ph) {
  for (const auto& p : j.phases) {
    if (p.phase == ph) return p;
  }
  throw std::runtime_error(std::string("no phase ") + ToString(ph));
}

// Bytes after start-up: the cuBLAS workspace and one fp32 shard buffer per unit.
int64_t StartupBytes(const model::ModelSpec& s, int n) {
  int64_t b = MemoryConstants{}.cublas_workspace.count();
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) b += R512(4 * u.PaddedShardNumel(n));
  return b;
}

int64_t ShardTotal(const model::ModelSpec& s, int n) {
  int64_t t = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) t += u.PaddedShardNumel(n);
  return t;
}

MemoryOptions NoClip() {
  MemoryOptions o;
  o.clip_grad_norm = false;
  return o;
}

// The phases replay the one program: without clipping, step 0 and the steady step have exactly
// the ledger's peaks.
TEST(JobPhasesTest, StepPhasesReplayTheLedger) {
  Job r = Estimate("llama3-8b", "8xH100", 2048, NoClip());
  EXPECT_EQ(Phase(r.phases, JobPhase::kStep0).allocated_peak, r.est.report.step0_peak);
  EXPECT_EQ(Phase(r.phases, JobPhase::kSteady).allocated_peak, r.est.report.steady_peak);
  EXPECT_EQ(Phase(r.phases, JobPhase::kSteady).outside, r.est.report.outside_total);
}

// Lazy AdamW: with the peak in backward, step 1's peak minus step 0's is exactly the two fp32
// moments created at the first step() (torch/optim/adam.py _init_group).
TEST(JobPhasesTest, LazyAdamStepOneMinusStepZeroIsTheState) {
  auto s = model::FindModelPreset("llama3-8b");
  Job r = Estimate("llama3-8b", "8xH100", 8192, MemoryOptions{});
  int64_t d = Phase(r.phases, JobPhase::kSteady).allocated_peak.count() -
              Phase(r.phases, JobPhase::kStep0).allocated_peak.count();
  EXPECT_EQ(d, R512(8 * ShardTotal(s, 8)));
}

// Full state dict without cpu_offload: every rank keeps every gathered parameter and both AdamW
// moments (fp32, padded to the all-gather size) on the GPU at once, on top of what lives after
// zero_grad.
TEST(JobPhasesTest, FullStateDictSaveHoldsTheWholeStateOnTheGpu) {
  auto s = model::FindModelPreset("llama3-8b");
  MemoryOptions o;
  o.checkpoint_format = CheckpointFormat::kFull;
  Job r = Estimate("llama3-8b", "8xH100", 2048, o);
  int64_t gathered = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) {
    for (const auto& p : u.params) gathered += 3 * R512(p.PaddedShardNumel(8) * 8 * 4);
  }
  const auto& save = Phase(r.phases, JobPhase::kSave);
  EXPECT_EQ(save.allocated_peak.count(), r.est.allocated_after.back() + gathered);
  // 8B parameters x 12 bytes do not fit in 80 GB: training fits, saving decides the verdict.
  EXPECT_FALSE(save.fits);
  EXPECT_TRUE(r.phases.training_fits);
  EXPECT_FALSE(r.phases.fits);
  EXPECT_EQ(r.phases.phases[static_cast<size_t>(r.phases.deciding)].phase, JobPhase::kSave);
  EXPECT_THAT(save.hint, ::testing::HasSubstr("sharded"));
  ASSERT_FALSE(save.top.empty());
  EXPECT_THAT(save.top[0].first, ::testing::HasSubstr("full state dict"));
}

// cpu_offload=True: one full tensor on the GPU at a time; rank 0's node holds the unpadded model
// and both moments in pageable RAM next to the processes' baselines.
TEST(JobPhasesTest, FullStateDictWithCpuOffloadMovesItToRankZerosHost) {
  auto s = model::FindModelPreset("llama3-8b");
  MemoryOptions o;
  o.checkpoint_format = CheckpointFormat::kFullCpuOffload;
  Job r = Estimate("llama3-8b", "8xH100", 2048, o);
  int64_t largest = 0, params = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) {
    for (const auto& p : u.params) {
      largest = std::max(largest, p.PaddedShardNumel(8) * 8 * 4);
      params += p.numel();
    }
  }
  const auto& save = Phase(r.phases, JobPhase::kSave);
  EXPECT_EQ(save.allocated_peak.count(), r.est.allocated_after.back() + R512(largest));
  EXPECT_EQ(save.host_pageable, MemoryConstants{}.host_process_baseline * 8 + Bytes::Of(params * 4 * 3));
  EXPECT_EQ(save.host_pinned, Bytes());
}

// On a GB200 NVL72 rack the node is the 72-GPU NVLink domain, but host RAM is a compute tray's
// (4 GPUs, 960 GiB): rank 0's full state dict lands in one tray's RAM beside 4 ranks' processes,
// not 72, and is judged against 960 GiB, not the rack's 17,280.
TEST(JobPhasesTest, HostRamIsJudgedPerComputeTrayOnAnNvl72Rack) {
  auto s = model::FindModelPreset("llama3-8b");
  MemoryOptions o;
  o.checkpoint_format = CheckpointFormat::kFullCpuOffload;
  Job r = Estimate("llama3-8b", "gb200-nvl72", 2048, o);
  const int64_t params = model::ParameterCount(s);
  const auto& save = Phase(r.phases, JobPhase::kSave);
  EXPECT_EQ(save.host_pageable, MemoryConstants{}.host_process_baseline * 4 + Bytes::Of(params * 4 * 3));
  EXPECT_EQ(r.phases.host_limit, Bytes::GiB(960));
  EXPECT_EQ(r.phases.host_scope, "host");
  EXPECT_EQ(r.est.report.host.capacity_per_node, Bytes::GiB(960));
  // A DGX node is one host: the words and the limit stay the node's.
  Job dgx = Estimate("llama3-8b", "8xH100", 2048, o);
  EXPECT_EQ(dgx.phases.host_scope, "node");
  EXPECT_EQ(dgx.phases.host_limit, Bytes::GiB(2048));
}

// DCP reads the shards in place: the save adds nothing on the GPU.
TEST(JobPhasesTest, ShardedSaveAddsNothingOnTheGpu) {
  Job r = Estimate("tiny-llama", "4xH100", 64, MemoryOptions{});
  EXPECT_EQ(Phase(r.phases, JobPhase::kSave).allocated_peak.count(), r.est.allocated_after.back());
}

// Resume: _init_optim_state sets zero fp32 gradients, then optim.step() creates both moments and
// foreach AdamW's sqrt temporary: start-up + 4 + 8 + 4 bytes per shard element.
TEST(JobPhasesTest, ResumeSpikeIsInitOptimState) {
  auto s = model::FindModelPreset("tiny-llama");
  Job r = Estimate("tiny-llama", "4xH100", 64, MemoryOptions{});
  int64_t t = ShardTotal(s, 4);
  EXPECT_EQ(Phase(r.phases, JobPhase::kResume).allocated_peak.count(),
            StartupBytes(s, 4) + R512(4 * t) + R512(8 * t) + R512(4 * t));
}

// A consolidated checkpoint is broadcast and distributed into new optimizer shards that live
// beside the state _init_optim_state made, until Optimizer.load_state_dict replaces it.
TEST(JobPhasesTest, FullResumeHoldsTwoCopiesOfTheOptimizerState) {
  auto s = model::FindModelPreset("tiny-llama");
  MemoryOptions o;
  o.checkpoint_format = CheckpointFormat::kFull;
  Job r = Estimate("tiny-llama", "4xH100", 64, o);
  int64_t t = ShardTotal(s, 4), largest = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) {
    for (const auto& p : u.params) largest = std::max(largest, p.PaddedShardNumel(4) * 4 * 4);
  }
  int64_t spike = R512(4 * t) + R512(4 * t);          // zero grads + foreach temporary
  int64_t loaded = R512(8 * t) + R512(largest);       // loaded shards + one full tensor
  EXPECT_EQ(Phase(r.phases, JobPhase::kResume).allocated_peak.count(),
            StartupBytes(s, 4) + R512(8 * t) + std::max(spike, loaded));
}

// Model load: every rank moves the largest unit's full fp32 params to the GPU inside
// fully_shard; rank 0 broadcasts the largest bf16 tensor and distributes its shard; meta adds
// nothing. Host: every rank's full bf16 copy cast to fp32 (the larger copy plus the largest
// tensor in bf16) versus rank 0's alone.
TEST(JobPhasesTest, ModelLoadModes) {
  auto s = model::FindModelPreset("tiny-llama");
  int64_t unit_full = 0, largest = 0, largest_shard = 0, params = 0;
  for (const auto& u : model::BuildFsdpUnits(s, model::WrapPolicy{})) {
    int64_t n = 0;
    for (const auto& p : u.params) {
      n += p.numel();
      params += p.numel();
      if (p.numel() > largest) {
        largest = p.numel();
        largest_shard = p.PaddedShardNumel(4);
      }
    }
    unit_full = std::max(unit_full, 4 * n);
  }
  int64_t base = StartupBytes(s, 4);
  MemoryOptions o;
  o.model_load = ModelLoad::kEveryRank;
  Job every = Estimate("tiny-llama", "4xH100", 64, o);
  EXPECT_EQ(Phase(every.phases, JobPhase::kLoad).allocated_peak.count(), base + R512(unit_full));
  Bytes baseline = MemoryConstants{}.host_process_baseline * 4;
  int64_t per_rank = 4 * params + 2 * largest;
  EXPECT_EQ(Phase(every.phases, JobPhase::kLoad).host_total, baseline + Bytes::Of(4 * per_rank));
  o.model_load = ModelLoad::kRank0;
  Job rank0 = Estimate("tiny-llama", "4xH100", 64, o);
  EXPECT_EQ(Phase(rank0.phases, JobPhase::kLoad).allocated_peak.count(),
            base + R512(2 * largest) + R512(2 * largest_shard));
  EXPECT_EQ(Phase(rank0.phases, JobPhase::kLoad).host_total, baseline + Bytes::Of(per_rank));
  o.model_load = ModelLoad::kMeta;
  Job meta = Estimate("tiny-llama", "4xH100", 64, o);
  EXPECT_EQ(Phase(meta.phases, JobPhase::kLoad).allocated_peak.count(), base);
}

// A cgroup limit below the load's host peak: the job runs out while loading, on the host.
TEST(JobPhasesTest, HostLimitDecidesAtLoad) {
  MemoryOptions o;
  o.host_memory_limit = Bytes::GiB(64);
  Job r = Estimate("llama3-8b", "8xH100", 2048, o);
  const auto& load = Phase(r.phases, JobPhase::kLoad);
  EXPECT_FALSE(load.host_fits);
  EXPECT_TRUE(load.fits);
  EXPECT_EQ(r.phases.host_limit, Bytes::GiB(64));
  EXPECT_EQ(r.phases.deciding, 0);
  EXPECT_TRUE(r.phases.training_fits);
  EXPECT_FALSE(r.est.report.host.fits);  // the report's host verdict uses the same limit
}

// CPU offload pins the fp32 shards of params, grads and both moments: 16 bytes per shard element
// per rank, apart from pageable memory.
TEST(JobPhasesTest, OffloadIsPinnedHostMemory) {
  auto s = model::FindModelPreset("tiny-llama");
  model::Plan p;
  p.offload = model::Offload::kAll;
  Job r = Estimate("tiny-llama", "4xH100", 64, MemoryOptions{}, p);
  EXPECT_EQ(Phase(r.phases, JobPhase::kSteady).host_pinned, Bytes::Of(16 * ShardTotal(s, 4) * 4));
  EXPECT_EQ(Phase(r.phases, JobPhase::kSteady).host_pageable, MemoryConstants{}.host_process_baseline * 4);
}

// expandable_segments: reserved is whole 20 MiB pages per pool, and the judged allowance is the
// unused tail of those pages, far below 5% of a large peak.
TEST(JobPhasesTest, ExpandableSegmentsReserveWholePages) {
  MemoryOptions o;
  o.allocator = AllocatorMode::kExpandableSegments;
  Job r = Estimate("llama3-8b", "8xH100", 8192, o);
  const auto& steady = Phase(r.phases, JobPhase::kSteady);
  EXPECT_EQ(steady.reserved.count() % kExpandablePageBytes, 0);
  EXPECT_LE(steady.fragmentation.count(), kNumStreams * kExpandablePageBytes);
  EXPECT_EQ(steady.reserved, r.est.report.reserved_no_pressure);
  Job d = Estimate("llama3-8b", "8xH100", 8192, MemoryOptions{});
  EXPECT_LT(r.est.report.required, d.est.report.required);
  EXPECT_EQ(steady.nvidia_smi, steady.reserved + steady.outside);
}

// The measured CUDA context and one NCCL communicator per mesh dimension (plus NVLS on an
// H100 NVSwitch node) are outside the allocator in every phase.
TEST(JobPhasesTest, OutsideAllocatorFollowsTheMesh) {
  MemoryConstants k;
  EXPECT_EQ(k.cuda_context, Bytes::MiB(621));
  Job fsdp = Estimate("tiny-llama", "8xH100", 64, MemoryOptions{});
  EXPECT_EQ(Phase(fsdp.phases, JobPhase::kLoad).outside,
            k.cuda_context + k.nccl_per_communicator + k.nvls_per_communicator);
  model::Plan h;
  h.strategy = model::ShardingStrategy::kHybridShard;
  Job hsdp = Estimate("tiny-llama", "2x8xH100", 64, MemoryOptions{}, h);
  EXPECT_EQ(Phase(hsdp.phases, JobPhase::kSteady).outside,
            k.cuda_context + k.nccl_per_communicator * 2 + k.nvls_per_communicator);
}

// The replay behind every phase: the peak's moment is the label in force when it was reached,
// the categories are those at the peak, and pools reserve 2 MiB segments per block.
TEST(JobPhasesTest, ReplayRecordsMomentAndCategoriesAtThePeak) {
  internal::Replay r;
  r.Begin("start");
  r.set_label("a");
  r.Apply("x", Stream::kDefault, 1000);
  r.set_label("b");
  r.Apply("y", Stream::kAllGather, 3000);
  r.Apply("y", Stream::kAllGather, -3000);
  EXPECT_EQ(r.phase_peak(), R512(1000) + R512(3000));
  EXPECT_EQ(r.moment(), "b");
  EXPECT_EQ(r.at_peak().at("y"), R512(3000));
  EXPECT_EQ(r.Reserved(false), 2 * 2 * 1024 * 1024);  // one 2 MiB segment per pool
  r.Begin("later");
  EXPECT_EQ(r.phase_peak(), R512(1000));
}

TEST(JobPhasesTest, BadSettingsAreOneLineErrors) {
  EXPECT_THAT([] { ParseCheckpointFormat("zip", "--checkpoint-format"); },
              ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("--checkpoint-format")));
  EXPECT_THAT([] { ParseAllocatorMode("cudaMallocAsync", "--allocator"); },
              ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("expandable_segments")));
}

TEST(JobPhasesTest, JsonListsEveryPhase) {
  Job r = Estimate("tiny-llama", "4xH100", 64, MemoryOptions{});
  auto j = JobPhasesToJson(r.phases);
  ASSERT_EQ(j["list"].size(), 5u);
  EXPECT_EQ(j["list"][4]["phase"], "resume");
  EXPECT_EQ(j["list"][0]["top"].size(), 3u);
  MemoryOptions none;
  none.checkpoint_format = CheckpointFormat::kNone;
  EXPECT_EQ(JobPhasesToJson(Estimate("tiny-llama", "4xH100", 64, none).phases)["list"].size(), 3u);
}

}  // namespace
}  // namespace shardtune::sim
