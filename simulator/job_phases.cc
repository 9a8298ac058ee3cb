// Job phases on the one memory timeline: the step program's actions replayed in program order
// with the load, clip_grad_norm_, save and resume events inserted where the job performs them.
// Host memory per phase is in job_phases_host.cc.
#include "simulator/job_phases.h"

#include <algorithm>
#include <array>
#include <map>

#include "model/errors.h"
#include "model/module_tree.h"
#include "simulator/job_phases_internal.h"
#include "simulator/memory_ledger.h"

namespace shardtune::sim {

const char* ToString(JobPhase p) {
  switch (p) {
    case JobPhase::kLoad: return "model load";
    case JobPhase::kStep0: return "step 0";
    case JobPhase::kSteady: return "steady step";
    case JobPhase::kSave: return "checkpoint save";
    case JobPhase::kResume: return "resume";
  }
  return "?";
}

namespace internal {

void Replay::Begin(const std::string& moment) {
  phase_peak_ = total_;
  moment_ = Label{moment, nullptr, 0};
  at_peak_ = cur_;
}

int Replay::Id(const std::string& category) {
  auto [it, added] = ids_.emplace(category, static_cast<int>(names_.size()));
  if (added) {
    names_.push_back(category);
    cur_.push_back(0);
  }
  return it->second;
}

void Replay::ApplyTo(int id, Stream pool, int64_t signed_bytes) {
  if (signed_bytes == 0) return;
  int64_t b = RoundToBlock(signed_bytes < 0 ? -signed_bytes : signed_bytes);
  auto s = static_cast<size_t>(pool);
  int64_t& cur = cur_[static_cast<size_t>(id)];
  if (signed_bytes > 0) {
    cur += b;
    total_ += b;
    pool_raw_[s] += b;
    pool_seg_[s] += RoundToSegment(b);
    pool_raw_peak_[s] = std::max(pool_raw_peak_[s], pool_raw_[s]);
    pool_seg_peak_[s] = std::max(pool_seg_peak_[s], pool_seg_[s]);
    if (total_ > phase_peak_) {
      phase_peak_ = total_;
      moment_ = label_;
      at_peak_ = cur_;
    }
  } else {
    SHARDTUNE_CHECK(cur >= b) << names_[static_cast<size_t>(id)] << ": freeing " << b << " of " << cur;
    cur -= b;
    total_ -= b;
    pool_raw_[s] -= b;
    pool_seg_[s] -= RoundToSegment(b);
  }
}

void Replay::ApplyOp(const StepProgram& p, size_t i) {
  label_ = Label{std::string(), &p, i};
  ApplyActions(p, i);
}

void Replay::ApplyActions(const StepProgram& p, size_t i) {
  for (uint32_t a = p.ops[i].mem_begin; a < p.ops[i].mem_end; ++a) {
    const MemAction& m = p.actions[a];
    int& id = program_ids_[static_cast<size_t>(m.category)];
    if (id < 0) id = Id(ToString(m.category));
    ApplyTo(id, m.pool, m.bytes);
  }
}

std::string Replay::moment() const {
  return moment_.program == nullptr ? moment_.text : moment_.program->OpName(moment_.op);
}

std::map<std::string, int64_t> Replay::at_peak() const {
  std::map<std::string, int64_t> m;
  for (size_t k = 0; k < at_peak_.size(); ++k) m.emplace(names_[k], at_peak_[k]);
  return m;
}

int64_t Replay::Reserved(bool expandable) const {
  int64_t r = 0;
  for (size_t s = 0; s < pool_raw_peak_.size(); ++s) {
    r += expandable ? ExpandableReserved(pool_raw_peak_[s]) : pool_seg_peak_[s];
  }
  return r;
}

int64_t Replay::RawPoolPeaks() const {
  int64_t r = 0;
  for (int64_t p : pool_raw_peak_) r += p;
  return r;
}

int64_t RoundToSegment(int64_t b) {
  constexpr int64_t kGranule = 2 * 1024 * 1024;  // kRoundLarge, as in memory_ledger.cc
  return (b + kGranule - 1) / kGranule * kGranule;
}

}  // namespace internal

namespace {

using internal::JobSizes;
using internal::Replay;

constexpr const char* kFullModel = "full state dict: model (gathered)";
constexpr const char* kFullOptim = "full state dict: optimizer state (gathered)";
constexpr const char* kLoadTransient = "weights in flight at load";
constexpr const char* kResumeGrads = "zero gradients of _init_optim_state";
constexpr const char* kLoadedOptim = "loaded optimizer state dict (before load_state_dict)";
constexpr const char* kClipNorms = "clip_grad_norm_ per-tensor norms";

// torch/nn/utils/clip_grad.py _get_total_norm: torch._foreach_norm returns one 0-dim fp32 tensor
// per gradient (each a 512-byte block), torch.stack makes one vector of them, vector_norm one
// more scalar; _clip_grads_with_norm_ scales in place (torch._foreach_mul_). Under FSDP2 the
// norm of a DTensor gradient is its local shard's, all-reduced by full_tensor() (a scalar).
int64_t ClipNormBytes(int64_t tensors) {
  return tensors * RoundToBlock(4) + RoundToBlock(4 * tensors) + 2 * RoundToBlock(4);
}

void Finish(PhaseMemory* ph, const Replay& r, const MemoryReport& rep, const MemoryOptions& o) {
  bool expandable = o.allocator == AllocatorMode::kExpandableSegments;
  ph->allocated_peak = Bytes::Of(r.phase_peak());
  ph->moment = r.moment();
  std::vector<std::pair<std::string, Bytes>> all;
  for (const auto& [k, v] : r.at_peak()) {
    if (v > 0) all.push_back({k, Bytes::Of(v)});
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return b.second < a.second; });
  if (all.size() > 3) all.resize(3);
  ph->top = all;
  ph->reserved = Bytes::Of(r.Reserved(expandable));
  ph->fragmentation = expandable ? Bytes::Of(r.Reserved(true) - r.RawPoolPeaks())
                                 : Bytes::Of(static_cast<int64_t>(static_cast<double>(r.phase_peak()) *
                                                                  o.constants.fragmentation_fraction));
  ph->outside = rep.outside_total;
  ph->nvidia_smi = ph->reserved + ph->outside;
  ph->required = ph->allocated_peak + ph->fragmentation + ph->outside;
  ph->headroom = rep.capacity - ph->required;
  ph->fits = ph->required <= rep.capacity;
}

// One figure per quantity: when the estimate replayed the caching allocator tensor by tensor,
// the training steps' reserved and required are the replay's (the summary's), not this table's
// per-pool segment model and fragmentation allowance; the cache it reserved stays reserved
// through a checkpoint save (the allocator never shrinks on its own). Model load and resume run
// outside the replayed steps and keep the allowance.
void UseReplayedSteps(const MemoryReport& rep, const MemoryOptions& o, JobPhases* out) {
  if (!rep.allocator_replayed || o.allocator == AllocatorMode::kExpandableSegments) return;
  for (PhaseMemory& ph : out->phases) {
    if (ph.phase == JobPhase::kStep0) {
      ph.reserved = rep.reserved_step0;
      ph.required = rep.required_step0;
    } else if (ph.phase == JobPhase::kSteady) {
      ph.reserved = rep.reserved_steady;
      ph.required = rep.required;
    } else if (ph.phase == JobPhase::kSave) {
      ph.reserved = std::max(ph.reserved, rep.reserved_steady);
      ph.nvidia_smi = ph.reserved + ph.outside;
      continue;
    } else {
      continue;
    }
    ph.fragmentation = std::max(Bytes(), ph.required - ph.outside - ph.allocated_peak);
    ph.nvidia_smi = ph.reserved + ph.outside;
    ph.headroom = rep.capacity - ph.required;
    ph.fits = ph.required <= rep.capacity;
  }
}

// Start-up: the startup op (sharded parameters, cuBLAS workspace), then what the load mode puts
// on the GPU on top of them (an upper bound: every shard is counted as already placed).
PhaseMemory LoadPhase(const StepProgram& p, const JobSizes& z, const MemoryOptions& o, bool cpu_ranks,
                      Replay* r) {
  PhaseMemory ph;
  ph.phase = JobPhase::kLoad;
  r->Begin("start-up");
  r->ApplyOp(p, 0);
  switch (o.model_load) {
    case ModelLoad::kEveryRank:
      // fully_shard on a module built on the CPU first moves its states to the GPU, then shards
      // them: torch/distributed/fsdp/_fully_shard/_fsdp_init.py _move_states_to_device, then
      // _fsdp_param.py FSDPParam._init_sharded_param (new padded shard; the full tensor dies when
      // the sharded nn.Parameter replaces it). One unit at a time: the largest unit's full params.
      r->set_label("fully_shard(" + z.largest_unit_name + ") moves its full parameters to the GPU");
      r->Apply(kLoadTransient, Stream::kDefault, z.largest_unit_full_bytes);
      r->Apply(kLoadTransient, Stream::kDefault, -z.largest_unit_full_bytes);
      ph.hint = "init on meta and load sharded (--model-load meta), or rank 0 only (--model-load rank0)";
      break;
    case ModelLoad::kRank0:
      // set_model_state_dict(full_state_dict=True, broadcast_from_rank0=True): one tensor at a time
      // ("Broadcast every tensor to avoid OOM"), full size on every rank, then distribute_tensor
      // makes its local shard: torch/distributed/_state_dict_utils.py _broadcast_state_dict,
      // _broadcast_tensors, _distribute_tensors.
      r->set_label("broadcast of " + z.largest_param_name + " from rank 0 (one full tensor at a time)");
      r->Apply(kLoadTransient, Stream::kDefault, z.largest_param_full_ckpt_bytes);
      r->Apply(kLoadTransient, Stream::kDefault, z.largest_param_shard_ckpt_bytes);
      r->Apply(kLoadTransient, Stream::kDefault, -z.largest_param_shard_ckpt_bytes);
      r->Apply(kLoadTransient, Stream::kDefault, -z.largest_param_full_ckpt_bytes);
      break;
    case ModelLoad::kMeta:
      // Meta-device init, to_empty(device="cuda"), DCP load into the shards in place (the file
      // reader copies each item from a host buffer): nothing beyond the shards.
      break;
    case ModelLoad::kExecutor: {
      // The start-up op counted every shard; the worst unit holds, beside the shards built before
      // it, its full fp32 buffer (CPU ranks: the same memory), its shard and its gathered buffer.
      const int64_t excess = cpu_ranks ? z.executor_load_excess_cpu_bytes : z.executor_load_excess_device_bytes;
      r->set_label("building " + z.executor_load_unit + " (full, then its shard; executor/fsdp/flat_param.cc)");
      r->Apply(kLoadTransient, Stream::kDefault, excess);
      r->Apply(kLoadTransient, Stream::kDefault, -excess);
      break;
    }
  }
  return ph;
}

void StepPhase(const StepProgram& p, int step, int64_t clip_tensors, Replay* r) {
  r->Begin("start of step " + std::to_string(step));
  for (size_t i = 1; i < p.ops.size(); ++i) {
    if (p.ops[i].step != step || p.ops[i].kind == OpKind::kStartup) continue;
    if (p.ops[i].kind == OpKind::kOptimizer && clip_tensors > 0) {
      r->set_label("step " + std::to_string(step) + " · clip_grad_norm_");
      r->Apply(kClipNorms, Stream::kDefault, ClipNormBytes(clip_tensors));
      r->Apply(kClipNorms, Stream::kDefault, -ClipNormBytes(clip_tensors));
    }
    r->ApplyOp(p, i);
  }
}

// After the steady step's zero_grad. Sharded (DCP): the writer reads each shard in place and
// copies it to the host (torch/distributed/checkpoint/filesystem.py), nothing new on the GPU.
// Full: _gather_state_dict redistributes every DTensor to Replicate (a full, padded all-gather
// output); without cpu_offload ranks_only=() so every rank keeps every gathered tensor on the GPU,
// model first, then the optimizer's (state_dict.py _maybe_full_or_cpu_state_dict,
// _state_dict_utils.py _iterate_state_dict); with cpu_offload only one tensor is on the GPU at a
// time and rank 0 moves it to host RAM.
void SavePhase(const JobSizes& z, CheckpointFormat f, Replay* r) {
  r->Begin(f == CheckpointFormat::kSharded ? "DCP save reads the shards in place (no GPU copy)"
                                           : "checkpoint save");
  if (f == CheckpointFormat::kFull) {
    r->set_label("full-state-dict gather of the model (every rank keeps it on the GPU)");
    for (int64_t b : z.param_full_master_bytes) r->Apply(kFullModel, Stream::kDefault, b);
    r->set_label("full-state-dict gather of the model and optimizer state (every rank, on the GPU)");
    for (int64_t b : z.state_full_bytes) r->Apply(kFullOptim, Stream::kDefault, b);
    for (int64_t b : z.state_full_bytes) r->Apply(kFullOptim, Stream::kDefault, -b);
    for (int64_t b : z.param_full_master_bytes) r->Apply(kFullModel, Stream::kDefault, -b);
  } else if (f == CheckpointFormat::kFullCpuOffload) {
    r->set_label("gathering " + z.largest_tensor_name + " in full before rank 0 moves it to host RAM");
    r->Apply(kFullModel, Stream::kDefault, z.largest_tensor_full_bytes);
    r->Apply(kFullModel, Stream::kDefault, -z.largest_tensor_full_bytes);
  }
}

// A fresh process: start-up, then torch/distributed/checkpoint/state_dict.py _init_optim_state
// (param.grad = zeros_like(param) for every parameter, optim.step() with lr 0: the lazy state and
// the step's temporaries, exactly the program's step-0 optimizer op; zero_grad(set_to_none=True)).
// Full checkpoints are then broadcast from rank 0 one tensor at a time; distribute_tensor makes
// new local optimizer shards that live beside the existing state until
// Optimizer.load_state_dict replaces it (_state_dict_utils.py _distribute_tensors).
void ResumePhase(const StepProgram& p, const JobSizes& z, const MemoryReport& rep, CheckpointFormat f,
                 bool optimizer_on_gpu, bool state_only, Replay* r) {
  r->Begin("start-up");
  r->ApplyOp(p, 0);
  if (!optimizer_on_gpu) return;
  if (state_only) {
    // shardtune's executor: ShardedOptimizer::EnsureState, then each blob read into its tensor.
    r->set_label("the optimizer state created empty, then read from the checkpoint in place");
    r->Apply("optimizer state", Stream::kDefault, rep.optimizer_state.count());
    return;
  }
  r->set_label("_init_optim_state: zero gradients");
  r->Apply(kResumeGrads, Stream::kDefault, rep.sharded_grads.count());
  for (size_t i = 1; i < p.ops.size(); ++i) {
    if (p.ops[i].step == 0 && p.ops[i].kind == OpKind::kOptimizer) {
      r->set_label("_init_optim_state: optim.step() with zero gradients creates the state");
      r->ApplyActions(p, i);
    }
  }
  r->Apply(kResumeGrads, Stream::kDefault, -rep.sharded_grads.count());
  if (f == CheckpointFormat::kFull || f == CheckpointFormat::kFullCpuOffload) {
    r->set_label("set_state_dict: loaded optimizer shards beside the existing state, " +
                 z.largest_tensor_name + " broadcast in full");
    r->Apply(kLoadedOptim, Stream::kDefault, rep.optimizer_state.count());
    r->Apply(kLoadTransient, Stream::kDefault, z.largest_tensor_full_bytes);
    r->Apply(kLoadTransient, Stream::kDefault, -z.largest_tensor_full_bytes);
    r->Apply(kLoadedOptim, Stream::kDefault, -rep.optimizer_state.count());
  }
}

}  // namespace

JobPhases EstimateJobPhases(const StepProgram& program, const MemoryReport& report,
                            const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                            const model::Plan& plan, const MemoryOptions& o) {
  SHARDTUNE_CHECK(!program.ops.empty() && program.ops[0].kind == OpKind::kStartup) << "no start-up op";
  JobSizes z = internal::ComputeSizes(spec, plan, report.shard_group, o);
  bool grads_on_gpu = plan.offload == model::Offload::kNone;
  int64_t clip_tensors = o.clip_grad_norm && grads_on_gpu ? z.param_tensors : 0;
  JobPhases out;
  out.capacity = report.capacity;
  Replay job;
  PhaseMemory load = LoadPhase(program, z, o, cluster.cpu_only, &job);
  Finish(&load, job, report, o);
  out.phases.push_back(load);
  for (int step = 0; step < 2; ++step) {
    PhaseMemory ph;
    ph.phase = step == 0 ? JobPhase::kStep0 : JobPhase::kSteady;
    StepPhase(program, step, clip_tensors, &job);
    Finish(&ph, job, report, o);
    out.phases.push_back(ph);
  }
  if (o.checkpoint_format != CheckpointFormat::kNone) {
    PhaseMemory save;
    save.phase = JobPhase::kSave;
    SavePhase(z, o.checkpoint_format, &job);
    Finish(&save, job, report, o);
    if (o.checkpoint_format == CheckpointFormat::kFull) {
      save.hint = "use sharded checkpoints (torch.distributed.checkpoint), or cpu_offload=True";
    }
    out.phases.push_back(save);
    PhaseMemory resume;
    resume.phase = JobPhase::kResume;
    Replay fresh;
    ResumePhase(program, z, report, o.checkpoint_format, grads_on_gpu, o.resume_creates_state_only, &fresh);
    Finish(&resume, fresh, report, o);
    out.phases.push_back(resume);
  }
  UseReplayedSteps(report, o, &out);
  internal::AddHostMemory(spec, cluster, plan, report, z, o, &out);
  out.fits = true;
  out.training_fits = true;
  for (const auto& ph : out.phases) {
    out.fits = out.fits && ph.fits && ph.host_fits;
    if (ph.phase == JobPhase::kStep0 || ph.phase == JobPhase::kSteady) {
      out.training_fits = out.training_fits && ph.fits && ph.host_fits;
    }
  }
  // The deciding phase: the first that does not fit; when all fit, the least GPU headroom.
  out.deciding = -1;
  for (size_t i = 0; i < out.phases.size() && out.deciding < 0; ++i) {
    if (!out.phases[i].fits || !out.phases[i].host_fits) out.deciding = static_cast<int>(i);
  }
  if (out.deciding < 0) {
    out.deciding = 0;
    for (size_t i = 1; i < out.phases.size(); ++i) {
      if (out.phases[i].headroom < out.phases[static_cast<size_t>(out.deciding)].headroom) {
        out.deciding = static_cast<int>(i);
      }
    }
  }
  return out;
}

CheckpointFormat ParseCheckpointFormat(const std::string& t, const std::string& where) {
  if (t == "none") return CheckpointFormat::kNone;
  if (t == "sharded") return CheckpointFormat::kSharded;
  if (t == "full") return CheckpointFormat::kFull;
  if (t == "full_cpu_offload") return CheckpointFormat::kFullCpuOffload;
  throw InputError(where + ": expected none, sharded, full or full_cpu_offload, got \"" + t + "\"");
}

AllocatorMode ParseAllocatorMode(const std::string& t, const std::string& where) {
  if (t == "default") return AllocatorMode::kDefault;
  if (t == "expandable_segments" || t == "expandable_segments:True") return AllocatorMode::kExpandableSegments;
  throw InputError(where + ": expected default or expandable_segments, got \"" + t + "\"");
}

const char* ToString(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::kNone: return "none";
    case CheckpointFormat::kSharded: return "sharded";
    case CheckpointFormat::kFull: return "full";
    case CheckpointFormat::kFullCpuOffload: return "full_cpu_offload";
  }
  return "?";
}

const char* ToString(AllocatorMode a) {
  return a == AllocatorMode::kExpandableSegments ? "expandable_segments" : "default";
}

}  // namespace shardtune::sim
