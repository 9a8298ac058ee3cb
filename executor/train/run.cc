// One rank of `shardtune run`: threads, memory tracking, process groups (Gloo, or Emulated for
// --emulate-world and single-process runs), the train loop, checkpoints, measurements, trace.
#include "executor/train/run.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "executor/probe/blas_info.h"
#include "executor/cuda_support.h"
#include "executor/train/full_state_dict.h"
#include "executor/comm/gloo_communicator.h"
#include "executor/host_info.h"
#include "executor/train/measurements.h"
#include "executor/memory_tracker.h"
#include "executor/comm/nccl_communicator.h"
#include "executor/fsdp/optimizer.h"
#include "executor/train/phase_meter.h"
#include "executor/probe/torch_profile.h"
#include "executor/train/trainer.h"
#include "executor/train/watchdog.h"
#include "model/module_tree.h"

namespace shardtune::exec {
namespace {

struct Groups {
  std::unique_ptr<Rendezvous> rendezvous;  // outlives the process groups built on it
  ProcessGroups groups;
};

// World, shard, replicate and cp groups. Ranks are laid out cp innermost, rank = dp_index x cp +
// cp_index (the cp ranks of a micro-batch adjacent, so inside one node first, as torchtitan's
// mesh ["dp_replicate", "dp_shard", "cp"] and verl's (dp, sp) device mesh). FSDP's mesh is the
// world (cp_fsdp_mesh dp_cp) or the dp_index ranks of one cp_index (cp_fsdp_mesh dp): over it,
// ranks [k*G, (k+1)*G) share shards and ranks i, i+G, ... hold the same shard (HSDP's 2-D mesh,
// dp_replicate x dp_shard). With cp_fsdp_mesh dp the cp ranks also hold the same shards and are
// folded into the replicate group, whose all-reduce then sums their gradients too. On CUDA the
// groups are NCCL communicators (a single rank gets one-rank NCCL communicators, so the NCCL
// path runs).
Groups MakeGroups(const RunOptions& o, const RankEnv& env, std::shared_ptr<CollectiveLog> log,
                  int cuda_device) {
  Groups g;
  int W = env.launched ? env.world_size : 1, rank = env.launched ? env.rank : 0;
  int cp = std::max(1, o.plan.cp);
  bool cuda = cuda_device >= 0;
  if (cuda && o.emulate_world == 0 && W == 1) {
    g.groups.world = MakeNcclCommunicator(nullptr, "world", 0, {0}, cuda_device, log);
    g.groups.shard = MakeNcclCommunicator(nullptr, "shard", 0, {0}, cuda_device, log);
    g.groups.replicate = MakeEmulatedCommunicator("replicate", 0, 1, log);
    return g;
  }
  const int ep = std::max(1, o.plan.ep);
  if (o.emulate_world > 0 || W == 1) {
    int n = o.emulate_world > 0 ? o.emulate_world : 1;
    int G = o.plan.ResolvedShardGroup(n, n);
    g.groups.world = MakeEmulatedCommunicator("world", 0, 1, log);
    g.groups.shard = MakeEmulatedCommunicator("shard", 0, G, log);
    g.groups.replicate = MakeEmulatedCommunicator("replicate", 0, n / G, log);
    if (cp > 1) g.groups.cp = MakeEmulatedCommunicator("cp", 0, cp, log);
    if (ep > 1) {
      g.groups.ep = MakeEmulatedCommunicator("ep", 0, ep, log);
      g.groups.expert_shard = MakeEmulatedCommunicator("expert_shard", 0, G / ep, log);
    }
    return g;
  }
  g.rendezvous = Rendezvous::Connect(RendezvousOptionsOf(env, o.timeout_s));  // launched: W > 1
  std::vector<int> all(static_cast<size_t>(W));
  for (int r = 0; r < W; ++r) all[static_cast<size_t>(r)] = r;
  auto make = [&](const std::string& name, int index,
                  const std::vector<int>& ranks) -> std::unique_ptr<Communicator> {
    if (cuda) return MakeNcclCommunicator(g.rendezvous.get(), name, index, ranks, cuda_device, log);
    return MakeGlooCommunicator(*g.rendezvous, name, index, ranks, log);
  };
  g.groups.world = make("world", 0, all);
  // The FSDP mesh's ranks as global ranks: mesh index m is global rank m (dp_cp), or
  // m x cp + cp_index (dp; the cp ranks then join the replicate group).
  bool cp_in_mesh = cp == 1 || o.plan.cp_fsdp_mesh == model::CpFsdpMesh::kDpCp;
  int stride = cp_in_mesh ? 1 : cp, offset = cp_in_mesh ? 0 : rank % cp;
  int m = cp_in_mesh ? rank : rank / cp;  // this rank's index in the FSDP mesh
  int G = o.plan.ResolvedShardGroup(W, W), R = (cp_in_mesh ? W : W / cp) / G;
  std::vector<int> shard, replicate;
  for (int i = 0; i < G; ++i) shard.push_back((m / G * G + i) * stride + offset);
  for (int j = 0; j < R; ++j) {
    for (int c = 0; c < (cp_in_mesh ? 1 : cp); ++c) {
      replicate.push_back((m % G + j * G) * stride + (cp_in_mesh ? offset : c));
    }
  }
  int shard_index = cp_in_mesh ? m / G : (m / G) * cp + offset;
  g.groups.shard =
      G > 1 ? make("shard", shard_index, shard) : MakeEmulatedCommunicator("shard", 0, 1, log);
  g.groups.replicate = replicate.size() > 1 ? make("replicate", m % G, replicate)
                                            : MakeEmulatedCommunicator("replicate", 0, 1, log);
  if (cp > 1) {
    std::vector<int> cp_ranks;
    for (int c = 0; c < cp; ++c) cp_ranks.push_back(rank / cp * cp + c);
    g.groups.cp = make("cp", rank / cp, cp_ranks);
  }
  if (ep > 1) {
    // Within the shard group (position s = m % G): ep = positions s/ep*ep .. +ep-1, efsdp =
    // positions s % ep + j x ep (torchtitan's [efsdp, ep] split of dp_shard, ep innermost).
    int s = m % G, E = G / ep;
    auto global = [&](int pos) { return (m / G * G + pos) * stride + offset; };
    std::vector<int> ep_ranks, efsdp;
    for (int i = 0; i < ep; ++i) ep_ranks.push_back(global(s / ep * ep + i));
    for (int j = 0; j < E; ++j) efsdp.push_back(global(s % ep + j * ep));
    g.groups.ep = make("ep", shard_index * E + s / ep, ep_ranks);
    g.groups.expert_shard = E > 1 ? make("expert_shard", shard_index * ep + s % ep, efsdp)
                                  : MakeEmulatedCommunicator("expert_shard", 0, 1, log);
  }
  return g;
}


Environment MakeEnvironment(const RunOptions& o, int world, int threads, int cuda_device) {
  Environment e;
  e.shardtune_version = SHARDTUNE_VERSION;
  e.torch_version = TORCH_VERSION;
  bool cuda = cuda_device >= 0;
  e.backend = o.emulate_world > 0 ? "emulated" : cuda ? "nccl" : (world > 1 ? "gloo" : "single");
  e.device = cuda ? "cuda:" + CudaDeviceName(cuda_device) : "cpu";
  e.cpu_model = CpuModel();
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  e.hostname = host;
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  e.date_utc = date;
  e.world_size = world;
  e.emulated_world = o.emulate_world;
  e.threads_per_rank = threads;
  if (!cuda) {
    BlasInfo b = DetectBlas();
    e.blas = BlasVendorName(b.vendor) + (b.threading.empty() ? "" : " (" + b.threading + ")") +
             " " + b.library;
  }
  return e;
}

// Per-rank peaks to every rank (rank 0 writes them). On CUDA, tracked = the caching
// allocator's peak allocated bytes (torch.cuda.max_memory_allocated).
// The peaks are the whole process's: PhaseMeter keeps them across its per-phase resets.
std::vector<RankMemory> GatherMemory(Communicator& world, int cuda_device, const PhaseMeter& meter) {
  constexpr int kFields = 6;
  CudaMemory c;
  if (cuda_device >= 0) c = ReadCudaMemory(cuda_device);
  PhaseMeter::Peaks p = meter.SoFar();
  int64_t allocated = cuda_device >= 0 ? p.tracked : 0;
  at::Tensor mine = at::tensor({p.tracked, p.rss, allocated, p.device_reserved,
                                c.device_used_bytes, c.alloc_retries},
                               at::kLong);
  at::Tensor all = at::zeros({kFields * world.size()}, at::kLong);
  if (world.size() > 1) {
    world.AllGather(mine, all)->Wait();
  } else {
    all.copy_(mine);
  }
  std::vector<RankMemory> out;
  for (int r = 0; r < world.size(); ++r) {
    RankMemory m;
    m.rank = r;
    m.tracked_peak_bytes = all[kFields * r].item<int64_t>();
    m.rss_peak_bytes = all[kFields * r + 1].item<int64_t>();
    m.device_allocated_peak_bytes = all[kFields * r + 2].item<int64_t>();
    m.device_reserved_peak_bytes = all[kFields * r + 3].item<int64_t>();
    m.device_used_bytes = all[kFields * r + 4].item<int64_t>();
    m.device_alloc_retries = all[kFields * r + 5].item<int64_t>();
    out.push_back(m);
  }
  return out;
}

MeasurementsDoc MakeDoc(const RunOptions& o, Trainer& t, const TrainerContext& ctx) {
  MeasurementsDoc d;
  d.model = o.spec.name;
  d.plan = o.plan;  // as executed (AsExecuted, set by the caller)
  d.run.micro_batch = o.plan.micro_batch;
  d.run.grad_accum = o.plan.grad_accum;
  d.run.dp_world = ctx.dp_world;
  d.run.seq_len = t.seq_len();
  d.run.global_batch = t.global_batch();
  d.run.tokens_vary = o.plan.packed_seq_len > 0 || o.lengths.uniform();
  d.run.data = t.data_description();
  if (o.lengths.uniform()) d.run.data += ", lengths " + o.lengths.Describe(0);
  d.run.parameters = model::ParameterCount(o.spec);
  // 6N per token for the matmuls' forward + backward plus 12·L·H·S for attention scores
  // (the README's MFU convention, Narayanan et al. 2021).
  d.run.model_flops_per_token = 6.0 * static_cast<double>(d.run.parameters) +
                                12.0 * o.spec.num_layers * static_cast<double>(o.spec.hidden) *
                                    static_cast<double>(o.plan.AttentionSeqLen(t.seq_len()));
  for (size_t u = 0; u < t.runtime().unit_specs().size(); ++u) {
    const model::FsdpUnit& us = t.runtime().unit_specs()[u];
    FlatParam* fp = t.runtime().units()[u];
    d.units.push_back({us.name, fp->numel(), fp->padded_numel(), fp->shard_numel(),
                       us.first_segment, us.last_segment});
  }
  for (int s = 0; s < model::NumSegments(o.spec.NumBlocks()); ++s) {
    d.segment_names.push_back(model::SegmentName(o.spec, s));
  }
  d.recorder = ctx.recorder;
  return d;
}

void WriteOutputs(const RunOptions& o, Trainer& t, const TrainerContext& ctx,
                  std::vector<StepLog> steps, const CollectiveLog& log, const PhaseMeter& meter,
                  RunSummary* summary) {
  Communicator& world = *ctx.groups.world;
  std::vector<RankMemory> memory = GatherMemory(world, ctx.cuda_device, meter);
  std::vector<RankPhases> phases = GatherPhases(world, meter.phases());
  namespace fs = std::filesystem;
  std::string part =
      (fs::path(o.out_dir) / (".trace.rank" + std::to_string(ctx.rank) + ".json")).string();
  std::vector<CollectiveRecord> records = log.Snapshot();
  if (o.trace) WriteFileAtomically(part, TraceEventsJson(ctx.recorder->spans(), records, ctx.rank));
  world.Barrier();
  summary->measurements_path = (fs::path(o.out_dir) / "measurements.json").string();
  summary->trace_path = o.trace ? (fs::path(o.out_dir) / "trace.json").string() : "";
  if (ctx.rank != 0) return;
  if (o.trace) {
    std::vector<std::string> parts;
    for (int r = 0; r < ctx.world_size; ++r) {
      parts.push_back(
          (fs::path(o.out_dir) / (".trace.rank" + std::to_string(r) + ".json")).string());
    }
    MergeTraces(parts, summary->trace_path);
  }
  MeasurementsDoc d = MakeDoc(o, t, ctx);
  d.environment = MakeEnvironment(o, ctx.world_size, at::get_num_threads(), ctx.cuda_device);
  d.run.resumed_from_step = summary->resumed_from_step;
  d.steps = std::move(steps);
  d.collectives = std::move(records);
  d.memory = std::move(memory);
  d.phases = std::move(phases);
  WriteMeasurements(summary->measurements_path, d);
}

}  // namespace

bool CudaRunsAvailable() { return CudaAvailable(); }
bool NcclRunsAvailable() { return NcclAvailable(); }
bool SdpaRunsAvailable() { return TORCH_VERSION_MAJOR >= 2; }

// Off until the fused path's GPU test (tests/executor/fused_adamw_gpu_test.cc) passes: on its
// first H100 run (2026-11-27) it failed, the failure's detail was not captured, and the fused
// runs' losses sat ~0.02 above the op-by-op runs' at step 8 (11% faster steps). run_cmd records
// foreach and says so until then.
constexpr bool kFusedAdamWVerifiedOnGpu = false;

bool FusedAdamWRunsAvailable(const std::string& device) {
  return kFusedAdamWVerifiedOnGpu && FusedAdamWAvailable(device);
}

namespace {

// Intra-op threads (LibTorch's pool and a pthread OpenBLAS's own) and the CUDA device of this
// rank (-1 on CPU); on CPU rank 0 warns once when LibTorch got the reference BLAS.
int SetUpThreadsAndDevice(const RunOptions& o, const RankEnv& env, const RunCallbacks& callbacks) {
  int local = std::max(1, env.launched ? env.local_world_size : 1);
  int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = o.threads > 0 ? o.threads : std::max(1, cores / local);
  KeepFreedHostMemory();  // host_info.h: no page faults of every step's fresh host tensors
  at::set_num_threads(threads);
  // A pthread OpenBLAS keeps its own pool (one thread per core in every rank) that
  // at::set_num_threads does not size: N ranks would oversubscribe the cores N times.
  SetBlasThreads(threads);
  int cuda_device = -1;
  if (o.device == "cuda") {
    cuda_device = env.launched ? env.local_rank : 0;
    SetCudaDevice(cuda_device);
  }
  const int rank = env.launched ? env.rank : 0;
  if (cuda_device < 0 && rank == 0 && callbacks.on_message) {
    std::string slow = SlowBlasWarning(DetectBlas());
    if (!slow.empty()) callbacks.on_message("warning: " + slow);
  }
  return cuda_device;
}

// This rank's view of the job: its process groups, ranks in the world, data-parallel and cp
// groups (an emulated world's rank 0 stands for data-parallel rank 0 of emulate_world).
TrainerContext MakeTrainerContext(const RunOptions& o, const RankEnv& env, const Groups& g,
                                  Recorder* recorder, const RunCallbacks& callbacks, int cuda_device,
                                  Watchdog* watchdog) {
  TrainerContext ctx;
  ctx.options = o;
  ctx.groups = g.groups;
  ctx.rank = env.launched ? env.rank : 0;
  ctx.world_size = env.launched ? env.world_size : 1;
  int cp = std::max(1, o.plan.cp);  // cp ranks share a micro-batch: data-parallel rank = rank / cp
  ctx.dp_rank = o.emulate_world > 0 ? 0 : ctx.rank / cp;
  ctx.dp_world = (o.emulate_world > 0 ? o.emulate_world : ctx.world_size) / cp;
  ctx.cp_rank = o.emulate_world > 0 ? 0 : ctx.rank % cp;
  ctx.recorder = recorder;
  ctx.callbacks = callbacks;
  ctx.cuda_device = cuda_device;
  ctx.watchdog = watchdog;
  return ctx;
}

// The steps from the one after `from` to o.steps, each metered (step 0, then steady), with the
// checkpoints due on the way and at the end.
std::vector<StepLog> TrainSteps(const RunOptions& o, const TrainerContext& ctx, Trainer& trainer, PhaseMeter& meter,
                                int64_t from, RunSummary* summary) {
  std::vector<StepLog> steps;
  std::unique_ptr<TorchProfile> profile;  // --torch-profile: rank 0's steps after the first
  if (o.torch_profile && ctx.rank == 0) TorchProfile::CheckAvailable(o.out_dir, o.device == "cuda");
  for (int64_t step = from + 1; step <= o.steps; ++step) {
    if (o.torch_profile && ctx.rank == 0 && !steps.empty() && !profile) {
      profile = std::make_unique<TorchProfile>(o.device == "cuda");
    }
    meter.Begin(steps.empty() ? RunPhase::kStep0 : RunPhase::kSteady);
    StepLog s;
    if (profile) {
      profile->Step(step, [&] { s = trainer.Step(step); });
    } else {
      s = trainer.Step(step);
    }
    meter.End();
    s.tracked_peak_bytes = meter.SoFar().tracked;
    steps.push_back(s);
    if (ctx.rank == 0 && ctx.callbacks.on_step) ctx.callbacks.on_step(s);
    bool due = o.checkpoint_every > 0 && step % o.checkpoint_every == 0;
    if (o.checkpoints && (due || step == o.steps)) {
      if (ctx.cuda_device < 0) ReleaseFreedHostMemory();  // the phase's RSS is then what it holds
      meter.Begin(RunPhase::kSave);
      trainer.SaveCheckpoint(step);
      meter.End();
    }
    summary->last_step = step;
  }
  if (profile) {
    summary->torch_trace_path = (std::filesystem::path(o.out_dir) / "torch_trace.json").string();
    profile->Save(summary->torch_trace_path);
  } else if (o.torch_profile && ctx.rank == 0 && ctx.callbacks.on_message) {
    ctx.callbacks.on_message("--torch-profile: no step after the first ran here: no torch_trace.json written");
  }
  return steps;
}

}  // namespace

RunSummary RunRank(const RunOptions& o, const RankEnv& env, const RunCallbacks& callbacks) {
  // A peer that died closes its sockets: writing to them must be an error (EPIPE, reported with
  // the rank) rather than SIGPIPE killing this rank silently.
  std::signal(SIGPIPE, SIG_IGN);
  InstallCpuMemoryTracker();
  const int cuda_device = SetUpThreadsAndDevice(o, env, callbacks);
  const int rank = env.launched ? env.rank : 0;
  Watchdog watchdog(o.watchdog_timeout_s, rank, callbacks.on_stall);
  PhaseMeter meter(cuda_device, &watchdog);
  for (int p = 0; p < kNumRunPhases; ++p) {
    auto phase = static_cast<RunPhase>(p);
    if (o.test_stall_rank == rank && o.test_stall_phase == PhaseName(phase)) {
      meter.StallAt(phase, o.test_stall_s);
    }
  }
  // Model load: process groups, the model built and sharded, the optimizer created.
  meter.Begin(RunPhase::kLoad);
  auto log = std::make_shared<CollectiveLog>();
  Groups g = MakeGroups(o, env, log, cuda_device);
  Recorder recorder;
  recorder.set_tracing(o.trace);
  if (cuda_device < 0) {  // CPU ranks: the tracked allocator's bytes beside every span (the trace)
    recorder.set_memory_sampler([] {
      int64_t peak = TakeTrackedWindowPeakBytes();
      return std::make_pair(TrackedBytes(), peak);
    });
  }
  TrainerContext ctx = MakeTrainerContext(o, env, g, &recorder, callbacks, cuda_device, &watchdog);
  Trainer trainer(ctx);
  meter.End();
  RunSummary summary;
  if (cuda_device < 0) ReleaseFreedHostMemory();
  meter.Begin(RunPhase::kResume);
  summary.resumed_from_step = trainer.Resume();
  meter.End(/*keep=*/summary.resumed_from_step > 0);
  summary.last_step = summary.resumed_from_step;
  auto export_state = [&] {
    if (!o.export_full_state_dict) return;
    watchdog.SetPhase("full state dict export");
    summary.state_dict_path = (std::filesystem::path(o.out_dir) / "model.safetensors").string();
    ExportFullStateDict(trainer.runtime(), ctx.rank, o.spec.name, summary.state_dict_path);
  };
  if (summary.resumed_from_step >= o.steps) {
    if (ctx.rank == 0 && callbacks.on_message) {
      callbacks.on_message("nothing to do: the checkpoint is at step " +
                           std::to_string(summary.resumed_from_step) + " >= --steps " +
                           std::to_string(o.steps));
    }
    export_state();
    g.groups.world->Barrier();
    return summary;
  }
  std::vector<StepLog> steps = TrainSteps(o, ctx, trainer, meter, summary.resumed_from_step, &summary);
  export_state();
  watchdog.SetPhase("writing measurements");
  WriteOutputs(o, trainer, ctx, std::move(steps), *log, meter, &summary);
  g.groups.world->Barrier();
  return summary;
}

}  // namespace shardtune::exec
