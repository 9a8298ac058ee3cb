// EstimateMemory: sets up the step walk, then adds what no PyTorch counter shows (CUDA context,
// NCCL buffers), the caching allocator's view, and the host memory per node.
#include "simulator/memory_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/errors.h"
#include "model/module_tree.h"
#include "model/tiled_mlp.h"
#include "model/trainable.h"
#include "simulator/allocator_sim.h"
#include "simulator/job_phases.h"
#include "simulator/job_phases_internal.h"
#include "simulator/memory_ledger.h"
#include "simulator/step_walk.h"

namespace shardtune::sim {
namespace {

using model::Plan;

// Communicators one rank uses: FSDP's shard group, plus the replicate group under HSDP.
// PyTorch creates an NCCL communicator per process group on its first collective.
void OutsideAllocator(const profiles::ClusterSpec& c, const MemoryReport& r,
                      const MemoryConstants& k, MemoryReport* out) {
  if (c.cpu_only) {  // Gloo on CPU ranks: no CUDA context, no NCCL
    out->outside_allocator.push_back({"LibTorch CPU process (libraries, allocator, Gloo)", k.cpu_process});
    out->outside_total = k.cpu_process;
    return;
  }
  out->outside_allocator.push_back({"CUDA context and kernels", k.cuda_context});
  std::vector<std::pair<std::string, int>> groups;
  if (r.shard_group > 1) groups.push_back({"shard group", r.shard_group});
  if (r.replicas > 1) groups.push_back({"replicate group", r.replicas});
  if (r.cp > 1) groups.push_back({"cp group", r.cp});  // Ulysses all-to-alls: its own process group
  // Expert parallelism: the ep group's all-to-alls and the efsdp group's all-gathers and
  // reduce-scatters each get a process group (torchtitan ParallelDims builds both meshes).
  if (r.ep > 1) groups.push_back({"ep group", r.ep});
  if (r.ep > 1 && r.expert_shard_group > 1) groups.push_back({"expert shard group", r.expert_shard_group});
  bool nvswitch = c.intra_node.nvlink_domain && c.gpu.intra_node_link == "nvlink4";
  for (const auto& [name, size] : groups) {
    out->outside_allocator.push_back({"NCCL buffers (" + name + " of " + std::to_string(size) + ")",
                                      k.nccl_per_communicator});
    // NVLS needs an NVSwitch with multicast: H100/H200 HGX groups of more than 2 GPUs in a node.
    bool in_node = name == "shard group" || name == "cp group" || name == "ep group"
                       ? size <= c.gpus_per_node
                   : name == "expert shard group" ? r.shard_group <= c.gpus_per_node
                                                               : r.shard_group >= c.gpus_per_node;
    if (nvswitch && size > 2 && in_node) {
      out->outside_allocator.push_back({"NCCL NVLS buffers (" + name + ")", k.nvls_per_communicator});
    }
  }
  Bytes total;
  for (const auto& kv : out->outside_allocator) total += kv.second;
  out->outside_total = total;
}

// Host RAM per node: the job phases' host model (job_phases_host.cc: what each phase holds,
// pinned and pageable), read at the phase whose host peak is largest, so that the summary and the
// phase table show one figure.
void HostEstimate(const model::ModelSpec& spec, const profiles::ClusterSpec& c, const Plan& plan,
                  const MemoryOptions& o, MemoryReport* r) {
  internal::JobSizes z = internal::ComputeSizes(spec, plan, r->shard_group, o);
  JobPhases phases;
  for (JobPhase ph : {JobPhase::kLoad, JobPhase::kStep0, JobPhase::kSteady}) {
    phases.phases.push_back(PhaseMemory{});
    phases.phases.back().phase = ph;
  }
  if (o.checkpoint_format != CheckpointFormat::kNone) {
    for (JobPhase ph : {JobPhase::kSave, JobPhase::kResume}) {
      phases.phases.push_back(PhaseMemory{});
      phases.phases.back().phase = ph;
    }
  }
  // CPU ranks hold their tensors in host RAM: the summary counts each at its training peak (the
  // job phases' table has every phase's own figure).
  if (c.cpu_only) {
    for (PhaseMemory& ph : phases.phases) ph.required = r->required;
  }
  internal::AddHostMemory(spec, c, plan, *r, z, o, &phases);
  // On CPU ranks every phase holds the training peak here: name the training.
  const PhaseMemory* peak = &phases.phases.front();
  for (const PhaseMemory& ph : phases.phases) {
    if (c.cpu_only && ph.phase == JobPhase::kSteady) peak = &ph;
  }
  for (const PhaseMemory& ph : phases.phases) {
    if (ph.host_total > peak->host_total) peak = &ph;
  }
  HostMemory h;
  h.capacity_per_node = c.HostMemoryPerHost();
  h.peak_per_node = peak->host_total;
  h.peak_phase = peak->phase == JobPhase::kStep0 || peak->phase == JobPhase::kSteady
                     ? "training" : ToString(peak->phase);
  h.peak_at_model_load = peak->phase == JobPhase::kLoad;
  h.breakdown = peak->host_breakdown;
  // A cgroup limit (a container's memory.max) below the node's memory is what the job gets.
  h.fits = h.peak_per_node <= phases.host_limit;
  r->host = h;
}

// The entry of `key` in `cache`, made by `make()` the first time. std::map's nodes stay put, so
// the reference stays valid while the entry is kept (until Impl::Check clears the cache).
template <typename Map, typename Make>
const typename Map::mapped_type& Cached(Map& cache, const typename Map::key_type& key, Make make) {
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make()).first;
  return it->second;
}

}  // namespace

struct ModelCache::Impl {
  StepProgram spare;  // buffers of a finished program (Recycle)
  const model::ModelSpec* last_spec = nullptr;  // fast path: the same spec object as last call
  std::string model_key;
  std::map<std::string, std::vector<model::FsdpUnit>> units;
  std::map<std::string, model::BlockActivations> blocks;
  std::map<std::string, model::ActivationLedger> heads;
  std::map<std::string, model::SubgraphTrainability> trainability;
  std::optional<model::ModelSpec> dense_spec;  // ModelSpec::DenseLayerSpec of the cached model
  // By (units, shard group, optimizer, implementation, trains): the units are this cache's own,
  // so their address names them while the cache holds them.
  std::map<std::tuple<const void*, int, int, int, bool>, int64_t> optimizer_launches;
  // Entries are for one model; a different spec clears them.
  void Check(const model::ModelSpec& s) {
    if (&s == last_spec && !model_key.empty()) return;
    last_spec = &s;
    std::string k = s.name + "/" + std::to_string(s.num_layers) + "/" + std::to_string(s.hidden) + "/" +
                    std::to_string(s.vocab_size) + "/" + std::to_string(s.ffn_hidden) +
                    (s.value_head ? "/value_head" : "") +
                    (s.vision.enabled() ? "/vision" + std::to_string(s.vision.depth) : "");
    if (k != model_key) {
      model_key = k;
      units.clear();
      blocks.clear();
      heads.clear();
      trainability.clear();
      optimizer_launches.clear();
      dense_spec.reset();
    }
  }
};

namespace {
std::string ActKey(const model::ActivationOptions& o) {
  return std::to_string(static_cast<int>(o.dtype)) + "/" +
         std::to_string(static_cast<int>(o.attention)) + "/" +
         std::to_string(static_cast<int>(o.modeling)) + "/" + std::to_string(o.loss_fp32_upcast) +
         "/" + std::to_string(o.keep_logits) + "/" + std::to_string(o.seq_len) + "/" +
         std::to_string(o.cp) + (o.ep > 1 ? "/ep" + std::to_string(o.ep) : std::string()) +
         (o.loss_kernel == model::LossKernel::kCrossEntropy
              ? std::string()
              : "/" + std::string(model::ToString(o.loss_kernel))) +
         (o.loss_kernel == model::LossKernel::kVerlPaddedCe
              ? "/" + std::to_string(std::llround(o.response_fraction * 1e12)) + "/" + std::to_string(o.entropy_from_logits)
              : std::string()) +
         (o.loss_kernel == model::LossKernel::kVerlFusedTorch ? "/" + std::to_string(o.entropy_from_logits)
                                                                : std::string()) +
         (o.loss_kernel == model::LossKernel::kTrlLogps
              ? "/" + std::to_string(o.logps_rows) + (o.no_grad ? "/nograd" : "")
              : std::string()) +
         (o.padding_mask ? "/pad" : "") +
         (o.liger.any() ? "/liger" + std::to_string(o.liger.rms_norm) + std::to_string(o.liger.swiglu) +
                              std::to_string(o.liger.rope)
                        : std::string());
}
}  // namespace

ModelCache::ModelCache() : impl_(std::make_unique<Impl>()) {}
ModelCache::~ModelCache() = default;

StepProgram ModelCache::TakeProgramStorage() { return std::move(impl_->spare); }

void ModelCache::Recycle(StepProgram&& program) {
  // Keep the larger set of buffers.
  if (program.ops.capacity() > impl_->spare.ops.capacity()) impl_->spare = std::move(program);
}

int64_t ModelCache::OptimizerLaunches(const model::ModelSpec& spec, const std::vector<model::FsdpUnit>& units,
                                      const Plan& plan, int shard_n) {
  impl_->Check(spec);
  auto key = std::make_tuple(static_cast<const void*>(&units), shard_n, static_cast<int>(plan.optimizer),
                             static_cast<int>(plan.optimizer_impl), plan.Trains());
  return Cached(impl_->optimizer_launches, key,
                [&] { return OptimizerKernelLaunches(spec, units, plan, shard_n); });
}

const std::vector<model::FsdpUnit>& ModelCache::Units(const model::ModelSpec& spec,
                                                      const model::WrapPolicy& w, int ep) {
  impl_->Check(spec);
  std::string key = model::WrapSpecToString(w) + "/" + std::to_string(w.embedding_unit) +
                    std::to_string(w.head_unit) + std::to_string(w.expert_units) +
                    std::to_string(w.sub_block_units) +
                    (ep > 1 ? "/ep" + std::to_string(ep) : std::string());
  return Cached(impl_->units, key, [&] { return model::BuildFsdpUnits(spec, w, ep); });
}

namespace {
// What decides the units' requires_grad and adapters under a plan (cache keys).
std::string TrainabilityKey(const Plan& plan) {
  std::string key = model::WrapSpecToString(plan.wrap) + "/" +
                    std::to_string(plan.wrap.embedding_unit) + std::to_string(plan.wrap.head_unit) +
                    std::to_string(plan.wrap.expert_units) + std::to_string(plan.wrap.sub_block_units) +
                    (plan.ep > 1 ? "/ep" + std::to_string(plan.ep) : std::string()) + "/" +
                    model::ToString(plan.role) +
                    "/" + std::to_string(plan.lora.rank);
  for (const auto& t : plan.lora.targets) key += "," + t;
  key += "/";
  for (const auto& f : plan.frozen_prefixes) key += f + "|";
  key += plan.images > 0 ? "/images" : "/text";  // a VL tower idles on text-only batches
  return key;
}
}  // namespace

const std::vector<model::FsdpUnit>& ModelCache::UnitsFor(const model::ModelSpec& spec,
                                                         const Plan& plan) {
  const auto& base = Units(spec, plan.wrap, plan.ep);
  if (!model::ChangesTrainability(spec, plan)) return base;
  std::string key = "trainability/" + TrainabilityKey(plan);
  return Cached(impl_->units, key, [&] { return model::ApplyTrainability(spec, plan, base); });
}

const model::BlockActivations& ModelCache::Block(const model::ModelSpec& spec,
                                                 const model::ActivationOptions& o) {
  impl_->Check(spec);
  return Cached(impl_->blocks, ActKey(o), [&] { return model::ComputeBlockActivations(spec, o); });
}

const model::ActivationLedger& ModelCache::Head(const model::ModelSpec& spec,
                                                const model::ActivationOptions& o) {
  impl_->Check(spec);
  return Cached(impl_->heads, ActKey(o), [&] { return model::ComputeHeadActivations(spec, o); });
}

const model::SubgraphTrainability& ModelCache::TrainabilityFor(const model::ModelSpec& spec,
                                                               const Plan& plan) {
  const auto& units = UnitsFor(spec, plan);
  std::string key = TrainabilityKey(plan);
  return Cached(impl_->trainability, key,
                [&] { return model::SubgraphTrainabilities(spec, plan, units); });
}

const model::BlockActivations& ModelCache::Block(const model::ModelSpec& spec,
                                                 const model::ActivationOptions& o,
                                                 const model::Trainability& t, int tiled_shards,
                                                 double capacity) {
  bool tiled = tiled_shards > 1 || (spec.moe.enabled() && capacity != 1.0);
  if (!tiled && t.FullFinetune()) return Block(spec, o);
  impl_->Check(spec);
  std::string key = ActKey(o) + "/" + t.Key() + "/" + std::to_string(tiled_shards) + "/" +
                    std::to_string(capacity);
  return Cached(impl_->blocks, key, [&] {
    return tiled ? model::TiledMlpBlockActivations(spec, o, tiled_shards, capacity, t)
                 : model::ComputeBlockActivations(spec, o, t);
  });
}

const model::BlockActivations& ModelCache::LayerBlock(const model::ModelSpec& spec,
                                                      const model::ActivationOptions& o,
                                                      const model::Trainability& t,
                                                      int tiled_shards, double capacity,
                                                      int layer) {
  if (!spec.Heterogeneous() || spec.MoeLayer(layer)) {
    return Block(spec, o, t, tiled_shards, capacity);
  }
  impl_->Check(spec);
  if (!impl_->dense_spec) impl_->dense_spec = spec.DenseLayerSpec();
  const model::ModelSpec& d = *impl_->dense_spec;
  std::string key = "dense/" + ActKey(o) + "/" + t.Key() + "/" + std::to_string(tiled_shards);
  return Cached(impl_->blocks, key, [&] {
    return tiled_shards > 1 ? model::TiledMlpBlockActivations(d, o, tiled_shards, 1.0, t)
                            : model::ComputeBlockActivations(d, o, t);
  });
}

const model::BlockActivations& ModelCache::VisionBlock(const model::ModelSpec& spec,
                                                      const model::ActivationOptions& o,
                                                      const model::Trainability& t, int b,
                                                      const model::VisionLoad& load) {
  impl_->Check(spec);
  std::string key = "vision/" + std::to_string(b) + "/" + ActKey(o) + "/" + t.Key() + "/" +
                    std::to_string(std::llround(load.patches_per_token * 1e9)) + "/" +
                    std::to_string(std::llround(load.patches_per_image));
  return Cached(impl_->blocks, key,
                [&] { return model::VisionBlockActivations(spec, o, t, b, load); });
}

const model::ActivationLedger& ModelCache::Head(const model::ModelSpec& spec,
                                                const model::ActivationOptions& o,
                                                const model::Trainability& t) {
  if (t.FullFinetune()) return Head(spec, o);
  impl_->Check(spec);
  std::string key = ActKey(o) + "/" + t.Key();
  return Cached(impl_->heads, key, [&] { return model::ComputeHeadActivations(spec, o, t); });
}

namespace {
// Reserved memory and the judgement from the allocator replay: with memory to spare first (what
// max_memory_reserved shows when nothing presses), then, only if that exceeds the capacity left
// to the allocator, again under it (release_cached_blocks and retry; OOM if that fails too).
// false: `program` left out micro-batches its replay cannot lay out (AllocatorReplay::
// repeats_verified); `r` is then incomplete and the full program must be judged.
bool JudgeOnAllocatorReplay(const StepProgram& program, MemoryReport* r) {
  AllocatorReplay free_run = ReplayAllocator(program, 0);
  if (!free_run.repeats_verified) return false;
  r->allocator_replayed = true;
  r->reserved_no_pressure = Bytes::Of(free_run.reserved_peak_bytes);
  r->reserved_step0 = Bytes::Of(free_run.reserved_step0_bytes);
  r->reserved_steady = Bytes::Of(free_run.reserved_steady_bytes);
  r->largest_free_block = Bytes::Of(free_run.largest_free_block_bytes);
  r->fragmentation =
      Bytes::Of(std::max<int64_t>(0, free_run.reserved_peak_bytes - r->peak_allocated.count()));
  int64_t capacity = (r->capacity - r->outside_total).count();
  r->required = r->reserved_no_pressure + r->outside_total;
  r->required_step0 = r->reserved_step0 + r->outside_total;
  r->fits = free_run.reserved_peak_bytes <= capacity;
  r->allocator_retries = 0;
  if (r->fits || capacity <= 0) return true;
  AllocatorReplay pressed = ReplayAllocator(program, capacity);
  if (!pressed.repeats_verified) return false;
  r->allocator_retries = pressed.retries;
  r->fits = !pressed.out_of_memory;
  if (r->fits) r->required = Bytes::Of(pressed.reserved_peak_bytes) + r->outside_total;
  // Step 0 ran under the capacity unless the failed request was in it (or in start-up).
  bool step0_failed = pressed.out_of_memory && program.ops[pressed.oom_op].step == 0;
  if (!step0_failed) r->required_step0 = Bytes::Of(pressed.reserved_step0_bytes) + r->outside_total;
  return true;
}
}  // namespace

int64_t ExpandableReserved(int64_t pool_bytes) {
  if (pool_bytes <= 0) return 0;
  return (pool_bytes + kExpandablePageBytes - 1) / kExpandablePageBytes * kExpandablePageBytes;
}

namespace {
// The walk's inputs for a plan: units, shard group, sequence length and the activation ledgers
// (per block under frozen parameters or LoRA). Replay and skipping are left to the caller.
WalkSetup SetupWalk(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                    const Plan& plan, const MemoryOptions& options, ModelCache* cache,
                    int shard_group) {
  WalkSetup w;
  w.spec = &spec;
  w.plan = &plan;
  w.units = &cache->UnitsFor(spec, plan);
  w.shard_n = shard_group;
  w.replicas = cluster.world_size() / shard_group;
  w.seq_len = plan.ResolvedSeqLen(spec.max_seq_len);
  w.workspace_bytes = cluster.cpu_only ? 0 : options.constants.cublas_workspace.count();
  w.reduce_scatter_receive_buffer = cluster.cpu_only;
  w.moe_capacity_factor = options.moe_capacity_factor;
  w.optimizer_launches = cache->OptimizerLaunches(spec, *w.units, plan, shard_group);
  auto act = model::ActivationOptionsFor(plan, w.seq_len);
  model::Trainability full;
  w.block = &cache->Block(spec, act, full, plan.tiled_mlp_shards, options.moe_capacity_factor);
  w.head = &cache->Head(spec, act);
  w.vision = model::VisionLoadOf(spec, plan, plan.AttentionSeqLen(w.seq_len));
  if (spec.vision.enabled()) {
    // Every block's ledger, the tower's first (per text token: model::VisionBlockActivations),
    // under the plan's trainability when it changes any.
    const model::SubgraphTrainability* st = plan.Trains() && model::ChangesTrainability(spec, plan)
                                                ? &cache->TrainabilityFor(spec, plan)
                                                : nullptr;
    const int V = spec.VisionBlocks();
    for (int b = 0; b < spec.NumBlocks(); ++b) {
      const model::Trainability& t = st ? st->blocks[static_cast<size_t>(b)] : full;
      w.blocks.push_back(b < V ? &cache->VisionBlock(spec, act, t, b, w.vision)
                               : &cache->LayerBlock(spec, act, t, plan.tiled_mlp_shards,
                                                    options.moe_capacity_factor, b - V));
    }
    if (st) w.head = &cache->Head(spec, act, st->head);
  } else if (plan.Trains() && model::ChangesTrainability(spec, plan)) {
    // Frozen parameters and LoRA: each block records only what its trainable parameters and
    // its input's requires_grad make autograd save (model/activations.h Trainability).
    const model::SubgraphTrainability& st = cache->TrainabilityFor(spec, plan);
    for (size_t b = 0; b < st.blocks.size(); ++b) {
      w.blocks.push_back(&cache->LayerBlock(spec, act, st.blocks[b], plan.tiled_mlp_shards,
                                            options.moe_capacity_factor, static_cast<int>(b)));
    }
    w.head = &cache->Head(spec, act, st.head);
  } else if (spec.Heterogeneous()) {
    // A dense prefix (DeepSeek's first_k_dense_replace): those blocks record their own ledger.
    for (int b = 0; b < spec.num_layers; ++b) {
      w.blocks.push_back(&cache->LayerBlock(spec, act, full, plan.tiled_mlp_shards,
                                            options.moe_capacity_factor, b));
    }
  }
  return w;
}

int ShardGroupOf(const profiles::ClusterSpec& cluster, const Plan& plan) {
  return plan.Sharded() ? plan.ResolvedShardGroup(cluster.world_size(), cluster.gpus_per_node) : 1;
}
}  // namespace

Bytes AllocatedLowerBound(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                          const Plan& plan, const MemoryOptions& options, ModelCache* cache,
                          ForwardEndBound* parts) {
  WalkSetup w = SetupWalk(spec, cluster, plan, options, cache, ShardGroupOf(cluster, plan));
  ForwardEndBound b = ForwardEndLowerBound(w);
  if (parts != nullptr) *parts = b;
  return Bytes::Of(b.total(plan.backward_prefetch == model::BackwardPrefetch::kPre));
}

namespace {

// Per-rank bytes of the sharded parameters, their gradient elements and the frozen part.
struct ParamBytes {
  int64_t shard = 0, grad_elements = 0, frozen = 0;
};

// Parameter accounting: every unit's parameters, trainable and adapter counts and its sharded and
// gathered sizes go into `r`; the per-rank totals are returned.
ParamBytes AccountParameters(const WalkSetup& w, const Plan& plan, MemoryReport* r) {
  ParamBytes b;
  for (const auto& u : *w.units) {
    // An expert-parallel unit holds E / ep of its layer's experts: the model has ep times more.
    const int64_t copies = u.expert_parallel ? plan.ep : 1;
    r->parameters += u.NumParams() * copies;
    int64_t unit_bytes = 0, unit_grad = 0, trainable = 0;
    for (const auto& prm : u.params) {
      int64_t ps = prm.PaddedShardNumel(r->shard_group);
      int64_t bytes = ps * ShardedBytesPerElement(plan, prm);
      unit_bytes += bytes;
      if (prm.requires_grad && plan.Trains()) {
        unit_grad += ps;
        trainable += prm.numel() * copies;
      } else if (!prm.lora_adapter) {
        b.frozen += bytes;
      }
      if (prm.lora_adapter) r->adapter_parameters += prm.numel();
    }
    b.shard += unit_bytes;
    b.grad_elements += unit_grad;
    r->trainable_parameters += trainable;
    r->units.push_back({u.name, u.NumParams(), Bytes::Of(unit_bytes),
                        Bytes::Of(u.GatheredNumel(r->shard_group) * model::BytesPerElement(plan.param_dtype)),
                        u.first_segment, u.last_segment, trainable});
  }
  return b;
}

// The report from the ledger: model states, the peak (where, what it holds), each category's
// most, the steps' peaks, the pools' reserve with memory to spare (`skipped`: the walk left
// micro-batches out, so it has none) and, `with_timeline`, every op's figures.
void ReportFromLedger(const MemoryLedger& ledger, const StepProgram& program,
                      const std::vector<int64_t>& allocated_after, const Plan& plan,
                      const ParamBytes& pb, bool skipped, bool with_timeline, MemoryReport* r) {
  bool on_gpu = plan.offload == model::Offload::kNone;
  r->sharded_params = plan.offload == model::Offload::kAll ? Bytes() : Bytes::Of(pb.shard);
  r->frozen_sharded_params =
      plan.offload == model::Offload::kAll ? Bytes() : Bytes::Of(pb.frozen);
  r->frozen_dtype = model::ToString(plan.offload == model::Offload::kOptimizer ? plan.param_dtype
                                                                              : plan.FrozenDtype());
  r->sharded_grads =
      on_gpu ? Bytes::Of(pb.grad_elements * model::BytesPerElement(plan.master_dtype)) : Bytes();
  r->optimizer_state = Bytes::Of(on_gpu ? ledger.category_peaks()[static_cast<size_t>(Category::kOptimizerState)] : 0);
  r->model_state = r->sharded_params + r->sharded_grads + r->optimizer_state;
  r->peak_allocated = Bytes::Of(ledger.peak_bytes());
  r->peak_phase = program.OpName(ledger.peak_op());
  r->peak_at = program.OpPoint(ledger.peak_op());
  for (int c = 0; c < kNumCategories; ++c) {
    auto cat = static_cast<Category>(c);
    int64_t at = ledger.at_peak()[static_cast<size_t>(c)];
    if (at > 0) r->peak_breakdown.push_back({ToString(cat), Bytes::Of(at)});
    int64_t pk = ledger.category_peaks()[static_cast<size_t>(c)];
    if (pk > 0) r->category_peaks.push_back({ToString(cat), Bytes::Of(pk)});
  }
  std::stable_sort(r->peak_breakdown.begin(), r->peak_breakdown.end(),
                   [](const auto& a, const auto& b) { return b.second < a.second; });
  r->step0_peak = Bytes::Of(ledger.PeakOfStep(0));
  r->steady_peak = Bytes::Of(ledger.PeakOfStep(1));
  int64_t pools = 0;
  for (int64_t p : ledger.pool_peaks()) pools += p;
  // The ledger's per-pool segment rounding frees lumps as they were not allocated, so its
  // figure drifts with the number of micro-batches: a walk that skipped some has none.
  if (!skipped) r->reserved_no_pressure = Bytes::Of(pools);
  if (with_timeline) {
    for (size_t i = 0; i < program.ops.size(); ++i) {
      r->timeline.push_back({program.OpName(i), Bytes::Of(ledger.op_peak()[i]), Bytes::Of(allocated_after[i])});
    }
  }
}

// The fit judgement without the allocator replay: expandable segments' page rounding, or the
// fragmentation allowance, then required = peak + that + the memory outside the allocator.
void JudgeWithoutReplay(const StepProgram& program, bool expandable, const MemoryOptions& options,
                        MemoryReport* r) {
  if (expandable) {
    // One expandable segment per stream pool, mapped in 20 MiB pages: reserved is each pool's
    // peak rounded up to a page, and the only slack is the unused tail of the last page.
    // Blocks inside an expandable segment are splits of it, rounded to 512 bytes only, so
    // the pools are replayed without the 2 MiB segment rounding of the default allocator.
    std::array<int64_t, kNumStreams> cur{}, peak{};
    for (const MemAction& m : program.actions) {
      auto s = static_cast<size_t>(m.pool);
      cur[s] += m.bytes > 0 ? RoundToBlock(m.bytes) : -RoundToBlock(-m.bytes);
      peak[s] = std::max(peak[s], cur[s]);
    }
    int64_t reserved = 0, raw = 0;
    for (int64_t p : peak) {
      reserved += ExpandableReserved(p);
      raw += p;
    }
    r->reserved_no_pressure = Bytes::Of(reserved);
    r->fragmentation = Bytes::Of(reserved - raw);
  } else {
    r->fragmentation = Bytes::Of(static_cast<int64_t>(
        static_cast<double>(r->peak_allocated.count()) * options.constants.fragmentation_fraction));
  }
  r->required = r->peak_allocated + r->fragmentation + r->outside_total;
  r->fits = r->required <= r->capacity;
}

}  // namespace

MemoryEstimate EstimateMemoryWithProgram(const model::ModelSpec& spec,
                                         const profiles::ClusterSpec& cluster, const Plan& plan,
                                         const MemoryOptions& options, bool with_timeline,
                                         ModelCache* cache) {
  std::unique_ptr<ModelCache> own;
  if (!cache) {
    own = std::make_unique<ModelCache>();
    cache = own.get();
  }
  MemoryEstimate est;
  MemoryReport& r = est.report;
  r.world = cluster.world_size();
  r.shard_group = ShardGroupOf(cluster, plan);
  SHARDTUNE_CHECK(r.shard_group >= 1 && r.world % r.shard_group == 0) << r.shard_group;
  r.replicas = r.world / r.shard_group;
  r.cp = plan.cp;
  r.cp_fsdp_mesh = model::ToString(plan.cp_fsdp_mesh);
  r.ep = plan.ep;
  r.expert_shard_group = plan.ExpertShardGroup(r.world, cluster.gpus_per_node);
  WalkSetup w = SetupWalk(spec, cluster, plan, options, cache, r.shard_group);
  r.all_to_all_bytes_per_layer =
      Bytes::Of(model::UlyssesAllToAllPerLayer(spec, plan, w.seq_len).forward_bytes());
  {
    const model::ExpertAllToAll ea = model::ExpertAllToAllPerLayer(
        spec, plan, static_cast<int64_t>(plan.micro_batch) * (w.seq_len / std::max(1, plan.cp)),
        options.moe_capacity_factor);
    r.expert_all_to_all_bytes_per_layer = Bytes::Of(ea.dispatch_bytes + ea.combine_bytes);
  }
  bool expandable = options.allocator == AllocatorMode::kExpandableSegments;
  // The CUDA caching allocator replay; CPU ranks use LibTorch's CPU allocator (no segments).
  bool replay = options.allocator_replay && !expandable && !cluster.cpu_only;
  w.record_tensors = replay;
  w.skip_repeated_micro_batches = options.skip_repeated_micro_batches && !with_timeline;
  w.skip_repeated_micro_batches_in_step0 =
      options.skip_repeated_micro_batches_in_step0 && !with_timeline && !replay;
  const ParamBytes pb = AccountParameters(w, plan, &r);
  // TRL DPO's reference forward in each micro-batch (model::InStepReference), walked into the
  // same program (WalkSetup::reference). It shares the policy's cuBLAS workspace.
  Plan ref_plan;
  WalkSetup ref;
  if (plan.reference != model::InStepReference::kNone) {
    ref_plan = plan.ReferencePlan();
    ref = SetupWalk(spec, cluster, ref_plan, options, cache, r.shard_group);
    ref.workspace_bytes = 0;
    ref.root_reshards_after_forward = plan.reference == model::InStepReference::kFsdp2Root;
    ref.shares_policy_units = plan.reference == model::InStepReference::kAdaptersOff;
    ref.record_tensors = w.record_tensors;
    ref.skip_repeated_micro_batches = w.skip_repeated_micro_batches;
    ref.skip_repeated_micro_batches_in_step0 = w.skip_repeated_micro_batches_in_step0;
    w.reference = &ref;
  }
  est.program = BuildStepProgram(w, cache->TakeProgramStorage());
  MemoryLedger ledger(est.program);
  est.peak_op = ledger.peak_op();
  est.allocated_after = ledger.TakeOpAfter();
  ReportFromLedger(ledger, est.program, est.allocated_after, plan, pb,
                   w.skip_repeated_micro_batches || w.skip_repeated_micro_batches_in_step0,
                   with_timeline, &r);
  OutsideAllocator(cluster, r, options.constants, &r);
  r.capacity = cluster.gpu.usable_memory;
  if (replay) {
    if (!JudgeOnAllocatorReplay(est.program, &r)) {
      // A step's last leading micro-batch cannot stand for the ones the walk left out: the
      // full program, walked and replayed from the start.
      MemoryOptions full = options;
      full.skip_repeated_micro_batches = false;
      cache->Recycle(std::move(est.program));
      return EstimateMemoryWithProgram(spec, cluster, plan, full, with_timeline, cache);
    }
  } else {
    JudgeWithoutReplay(est.program, expandable, options, &r);
  }
  r.judged_by = cluster.cpu_only ? MemoryJudgedBy::kCpuAllocator
                : replay         ? MemoryJudgedBy::kAllocatorReplay
                : expandable     ? MemoryJudgedBy::kExpandablePages
                                 : MemoryJudgedBy::kFragmentationAllowance;
  r.fragmentation_percent = static_cast<int>(options.constants.fragmentation_fraction * 100 + 0.5);
  r.activation_offload_pinned = Bytes::Of(est.program.activation_offload_pinned_bytes);
  if (options.host_estimate) HostEstimate(spec, cluster, plan, options, &r);
  return est;
}

MemoryReport EstimateMemory(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                            const Plan& plan, const MemoryOptions& options) {
  return EstimateMemoryWithProgram(spec, cluster, plan, options, true).report;
}

MemoryReport EstimateMemoryReport(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                  const Plan& plan, const MemoryOptions& options, ModelCache* cache) {
  MemoryOptions o = options;
  o.skip_repeated_micro_batches = true;
  MemoryEstimate est = EstimateMemoryWithProgram(spec, cluster, plan, o, /*with_timeline=*/false, cache);
  cache->Recycle(std::move(est.program));
  return std::move(est.report);
}

}  // namespace shardtune::sim
