// Per-rank GPU memory (and per-node host memory) of one training job: a walk through two
// optimizer steps (step 0 creates AdamW state lazily; step 1 is the steady state) following what
// PyTorch FSDP2 allocates and frees (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py,
// _fsdp_collectives.py), with activations from model/activations.h. Reports the peak, the phase
// it happens in, the breakdown at that moment, and the memory no PyTorch counter shows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/activations.h"
#include "model/model_spec.h"
#include "model/module_tree.h"
#include "model/plan.h"
#include "model/trainable.h"
#include "model/units.h"
#include "profiles/cluster.h"
#include "simulator/step_program.h"
#include "simulator/step_walk.h"

namespace shardtune::sim {

// Figures that are not derived from a mechanism. Each names its source; a calibrated profile
// replaces them.
struct MemoryConstants {
  // CUDA context + lazily loaded kernels per process, measured: 621 MiB on an H100 with torch
  // 2.11 + CUDA 13.0 (cudaMemGetInfo used after the first tiny tensor, one process): shardtune H100
  // measurement 2026-11-22, tests/data/validation. Earlier public figures: pytorch/pytorch#109888
  // ("around 400MB" with lazy loading), #86509 (287 MB lazy, 667 MB eager).
  Bytes cuda_context = Bytes::MiB(621);
  // A CPU rank of shardtune's executor (cpu:N clusters) has no CUDA context or NCCL buffers; its
  // resident set beyond tensor storage is LibTorch's libraries, the allocator and Gloo's
  // buffers: RSS minus the tracked peak was 215-274 MiB (median 220) in the 2-rank tiny-llama runs of
  // tests/bench/calibration_experiment.sh (Debian 12, LibTorch 1.13, 2026-11-22). calibrate's
  // memory fit replaces it.
  Bytes cpu_process = Bytes::MiB(220);
  // The process that launches CPU ranks (`shardtune run --nproc N`: it parses the plan, then
  // waits for the ranks; LibTorch is loaded but holds no tensors). Measured: VmRSS 159932 kB of
  // the launcher while its two ranks trained qwen2.5-0.5b (2-core Debian 12 VM, LibTorch 1.13,
  // 2026-11-28). A guess elsewhere; calibrate does not fit it.
  Bytes cpu_launcher = Bytes::MiB(156);
  // NCCL device buffers per communicator (all protocols, ring + tree connections): measured
  // 544 MB (2 GPUs) to 688 MB (> 2 GPUs) per communicator on A100 NVLink, NVIDIA/nccl#964.
  Bytes nccl_per_communicator = Bytes::MiB(656);
  // NVLS (NVSwitch multicast, H100/H200 HGX) buffers per communicator, NCCL >= 2.21:
  // ncclNvlsBufferSetup: 16 channels x 2 x 128 KiB chunk x 8 steps x 8 heads = 256 MiB.
  Bytes nvls_per_communicator = Bytes::MiB(256);
  // cuBLAS workspace, allocated through the caching allocator (so counted by
  // max_memory_allocated) per (handle, stream) at the first GEMM and kept:
  // aten/src/ATen/cuda/CublasHandlePool.cpp getNewWorkspace / getChosenWorkspaceSize, whose test
  // pins the default at 32 MiB. One for the compute stream; none on CPU ranks.
  Bytes cublas_workspace = Bytes::MiB(32);
  // Allowance for blocks split and cached but not reusable at the peak, as a fraction of the
  // peak allocated. A guess; calibration fits it from CPU ranks' RSS. On GPU clusters with the
  // default allocator the training estimate replays the caching allocator instead
  // (simulator/allocator_sim.h) and this no longer scales it; it still serves CPU ranks (LibTorch's
  // CPU allocator), the job phases other than the training steps (job_phases.cc) and
  // MemoryOptions::allocator_replay = false.
  double fragmentation_fraction = 0.05;
  // Host RSS of one training process before any model is loaded (Python, torch, CUDA and NCCL
  // libraries). A guess; calibration replaces it.
  Bytes host_process_baseline = Bytes::GiB(3);
};

// How each rank gets its weights at start-up (decides the host peak at load time).
enum class ModelLoad {
  kEveryRank,  // every process loads the full checkpoint into host RAM (HF from_pretrained default)
  kRank0,      // rank 0 loads, others init on meta and receive shards (cpu_ram_efficient_loading)
  kMeta,       // meta-device init + sharded (DCP) load: no full copy anywhere
  // shardtune's executor (executor/fsdp/flat_param.cc FlatParam::FlatParam), every rank, one unit at a
  // time in unit order: the unit initialised in full fp32 on the host, its shard cloned (and
  // moved to the device), its gathered buffer allocated in the param dtype and freed. Not a
  // user choice: `run`'s pre-flight, validate and calibrate use it for executor runs.
  kExecutor,
};

// How training checkpoints are written and read back (decides the save and resume phases).
enum class CheckpointFormat {
  kNone,            // no checkpoints: no save or resume phase
  kSharded,         // torch.distributed.checkpoint (DCP) of the sharded state dict (FSDP2 default)
  kFull,            // get_state_dict(full_state_dict=True): gathered on the GPU of every rank
  kFullCpuOffload,  // full_state_dict=True, cpu_offload=True: gathered to rank 0's host RAM
};

// PYTORCH_CUDA_ALLOC_CONF: the default caching allocator, or expandable_segments:True (one
// segment per stream that grows by mapping pages, so split-block fragmentation cannot strand
// memory the next allocation needs).
enum class AllocatorMode { kDefault, kExpandableSegments };

struct MemoryOptions {
  MemoryConstants constants;
  ModelLoad model_load = ModelLoad::kEveryRank;
  int checkpoint_dtype_bytes = 2;  // bytes per parameter of the pretrained weights loaded (bf16)
  CheckpointFormat checkpoint_format = CheckpointFormat::kSharded;  // what FSDP2 users get (DCP)
  AllocatorMode allocator = AllocatorMode::kDefault;
  // Default allocator on a GPU: replay the caching allocator over every tensor of the steps
  // (allocator_sim.h) for reserved memory and the judgement. false: the fragmentation_fraction
  // allowance instead (about 10x faster; the planner's search uses it and replays its best plans).
  bool allocator_replay = true;
  // Walk only the micro-batches whose memory differs (step_walk.h
  // WalkSetup::skip_repeated_micro_batches): the same report, in a fraction of the time, but a
  // program that cannot be scheduled (simulate). Ignored when a timeline is asked for. With the
  // allocator replay, the shortened program is replayed when the allocator reaches a fixed point
  // over the last leading micro-batch (allocator_sim.h ReplayAllocator: then exactly the full
  // program's figures), else the full program is walked and replayed. The planner sets it. Without
  // the replay the report leaves reserved_no_pressure at 0 (the ledger's pool figure depends on
  // every micro-batch).
  bool skip_repeated_micro_batches = false;
  // The same in step 0 only (step_walk.h WalkSetup::skip_repeated_micro_batches_in_step0): for a
  // program whose steady step alone is scheduled (SimOptions::steady_step_only). Ignored with
  // the allocator replay or a timeline.
  bool skip_repeated_micro_batches_in_step0 = false;
  // false: MemoryReport::host is left empty (the planner's walks: tune reports no host figures,
  // and the host model reads every parameter of the model).
  bool host_estimate = true;
  Bytes host_memory_limit;   // cgroup limit on host RAM per node; 0: none (the node's memory)
  bool clip_grad_norm = true;  // clip_grad_norm_ before each step (HF Trainer, torchtitan default)
  // Resume as shardtune's executor does it (executor/train/trainer_checkpoint.cc LoadState): the AdamW
  // state is created empty and its blobs are read into it, with no zero gradients and no
  // optimizer step (torch.distributed.checkpoint's _init_optim_state runs one). false: DCP's.
  bool resume_creates_state_only = false;
  // MoE: tokens per routed expert as a multiple of the balanced load top_k x T / E (1.0: HF's
  // dropless routers under a working load-balancing loss; > 1: capacity-padded experts or an
  // imbalance allowance). Scales the experts' intermediate activations (model/tiled_mlp.h).
  double moe_capacity_factor = 1.0;
};

// Page size of an expandable segment in the large pool (c10/cuda/CUDACachingAllocator.cpp
// SegmentRange: "2 MiB pages for small segments, 20 MiB pages for large segments", kLargeBuffer).
inline constexpr int64_t kExpandablePageBytes = 20 * 1024 * 1024;

// One moment of the steps (one program op) in the memory timeline.
struct TimelinePoint {
  std::string phase;      // e.g. "step 1 · micro-batch 2/4 · backward · block 7"
  Bytes allocated_peak;   // most bytes allocated while the op was issued
  Bytes allocated_after;  // bytes allocated after it
};

struct UnitMemory {
  std::string name;
  int64_t parameters = 0;
  Bytes shard_bytes;     // persistent sharded params of this unit on one rank
  Bytes gathered_bytes;  // unsharded params while gathered (param dtype, padded)
  int first_segment = 0, last_segment = 0;
  int64_t trainable = 0;  // parameters with gradients (frozen and inference: fewer or none)
};

// Host RAM per host: the node's when a node is one host, one compute tray's where an NVLink
// domain spans several (ClusterSpec::gpus_per_host); the names keep "node" for the JSON keys.
struct HostMemory {
  Bytes peak_per_node;
  std::string peak_phase;  // "model load", "training", "checkpoint save" or "resume"
  bool peak_at_model_load = false;  // the peak is the model load's (JobPhase::kLoad)
  std::vector<std::pair<std::string, Bytes>> breakdown;  // at the peak, per node
  Bytes capacity_per_node;
  bool fits = true;
};

// How MemoryReport::fits was judged: the caching allocator replayed (kAllocatorReplay); the
// peak allocated plus an allowance, expandable segments' page rounding (kExpandablePages) or a
// fragmentation fraction (kFragmentationAllowance), plus the memory outside the allocator; CPU
// ranks: the peak plus the allowance and the rank's process against its share of RAM.
enum class MemoryJudgedBy { kAllocatorReplay, kExpandablePages, kFragmentationAllowance, kCpuAllocator };

struct MemoryReport {
  int world = 1, shard_group = 1, replicas = 1;
  // Ulysses degree and which ranks FSDP shards over with it ("dp_cp": shard_group includes the
  // cp ranks; "dp": the cp ranks are replicas, counted in `replicas`).
  int cp = 1;
  std::string cp_fsdp_mesh = "dp_cp";
  // Total size S of one attention layer's forward all-to-alls on one rank (q, k, v in, output
  // back; backward moves the same again): model::UlyssesAllToAllPerLayer. 0 when cp is 1.
  Bytes all_to_all_bytes_per_layer;
  // Expert parallelism (Plan::ep): its degree, the efsdp group the local experts are sharded over
  // (shard_group / ep), and the total size S of one MoE layer's forward all-to-alls on one rank
  // (dispatch + combine, model::ExpertAllToAllPerLayer; backward moves the same again).
  int ep = 1, expert_shard_group = 1;
  Bytes expert_all_to_all_bytes_per_layer;
  int64_t parameters = 0;            // every parameter, LoRA adapters included
  int64_t trainable_parameters = 0;  // requires_grad ones (= parameters for a full fine-tune)
  int64_t adapter_parameters = 0;    // LoRA A and B elements
  // Persistent per-rank model states in steady state: sharded params + grads + optimizer state.
  Bytes sharded_params, sharded_grads, optimizer_state, model_state;
  // The frozen parameters' part of sharded_params (LoRA's base, frozen prefixes, an inference
  // role's parameters) and the dtype their shards are in (Plan::FrozenDtype).
  Bytes frozen_sharded_params;
  std::string frozen_dtype;
  Bytes peak_allocated;        // torch.cuda.max_memory_allocated() over steps 0 and 1
  std::string peak_phase;      // where, as reports print it (StepProgram::OpName)
  StepPoint peak_at;           // the same place as structure, for code that asks
  std::vector<std::pair<std::string, Bytes>> peak_breakdown;
  // The most each category ever held during the two steps (moments may differ).
  std::vector<std::pair<std::string, Bytes>> category_peaks;
  Bytes step0_peak, steady_peak;  // peak of step 0 and of step 1
  Bytes reserved_no_pressure;  // what the caching allocator would hold with memory to spare
  // Replayed caching allocator (allocator_replayed): max_memory_reserved through step 0 and during
  // step 1 with memory to spare; at the allocated peak, the largest cached free block; the
  // num_alloc_retries of the replay under the capacity (cache released and cudaMalloc retried).
  bool allocator_replayed = false;
  Bytes reserved_step0, reserved_steady, largest_free_block;
  int64_t allocator_retries = 0;
  // reserved_no_pressure - peak_allocated when replayed (cached free blocks), else the allowance
  // fragmentation_fraction x peak (expandable segments: page rounding).
  Bytes fragmentation;
  std::vector<std::pair<std::string, Bytes>> outside_allocator;  // CUDA context, NCCL
  Bytes outside_total;
  // The judged figure: peak_allocated + fragmentation + outside_total; replayed: the replay's
  // reserved peak under the capacity (after any retries) + outside_total.
  Bytes required;
  // Replayed only: the same judgement through the end of step 0 (under the capacity when the
  // replay had to press, unless step 0 is where it failed), for the job phases' step-0 row.
  Bytes required_step0;
  Bytes capacity;              // usable device memory
  bool fits = true;
  // Activation offload (Plan::activation_offload): pinned host bytes per rank for one micro-batch's
  // offloaded saved tensors (StepProgram::activation_offload_pinned_bytes), counted in host RAM.
  Bytes activation_offload_pinned;
  // What `fits` compares (cli/report_words.h writes it as the "judged on" sentence).
  MemoryJudgedBy judged_by = MemoryJudgedBy::kFragmentationAllowance;
  int fragmentation_percent = 0;  // the allowance's percent (CPU ranks, no replay)
  std::vector<TimelinePoint> timeline;
  std::vector<UnitMemory> units;
  HostMemory host;
};

// Results many plans of one model share: FSDP units per wrap policy, activation ledgers per
// setting. The planner and the benchmark keep one per model and thread; not thread-safe.
// REQUIRES: a spec is not modified while a cache holds results for it (the cache recognises the
// spec it saw last by address).
class ModelCache {
 public:
  ModelCache();
  ~ModelCache();
  const std::vector<model::FsdpUnit>& Units(const model::ModelSpec& spec, const model::WrapPolicy& w,
                                            int ep = 1);
  // The plan's units with requires_grad and LoRA adapters applied (model/trainable.h).
  const std::vector<model::FsdpUnit>& UnitsFor(const model::ModelSpec& spec,
                                               const model::Plan& plan);
  const model::BlockActivations& Block(const model::ModelSpec& spec, const model::ActivationOptions& o);
  const model::ActivationLedger& Head(const model::ModelSpec& spec, const model::ActivationOptions& o);
  // What each block and the head record under the plan (model::SubgraphTrainabilities of
  // UnitsFor). REQUIRES: plan.Trains().
  const model::SubgraphTrainability& TrainabilityFor(const model::ModelSpec& spec,
                                                     const model::Plan& plan);
  // A block with trainability `t` and a tiled MLP of `tiled_shards` tiles and MoE capacity
  // factor `capacity` (model::TiledMlpBlockActivations); the head with trainability `t`.
  const model::BlockActivations& Block(const model::ModelSpec& spec,
                                       const model::ActivationOptions& o,
                                       const model::Trainability& t, int tiled_shards,
                                       double capacity);
  const model::ActivationLedger& Head(const model::ModelSpec& spec,
                                      const model::ActivationOptions& o,
                                      const model::Trainability& t);
  // Block `layer`'s ledger: Block(spec, o, t, tiled_shards, capacity) for an MoE block (or any
  // block of a homogeneous model), else that of the dense prefix (model::ModelSpec::
  // DenseLayerSpec: its MLP, no experts, so no capacity factor).
  const model::BlockActivations& LayerBlock(const model::ModelSpec& spec,
                                            const model::ActivationOptions& o,
                                            const model::Trainability& t, int tiled_shards,
                                            double capacity, int layer);
  // Vision block `b`'s ledger per text token under the plan's images (model::
  // VisionBlockActivations).
  const model::BlockActivations& VisionBlock(const model::ModelSpec& spec,
                                             const model::ActivationOptions& o,
                                             const model::Trainability& t, int b,
                                             const model::VisionLoad& load);
  // OptimizerKernelLaunches (step_walk.h) for these units (one of this cache's), shard group and
  // the plan's optimizer: the same for every plan that shares them.
  int64_t OptimizerLaunches(const model::ModelSpec& spec, const std::vector<model::FsdpUnit>& units,
                            const model::Plan& plan, int shard_n);
  // Storage for the next program (its vectors emptied, their capacity kept) and its return
  // (Recycle): a search that estimates thousands of plans reuses one set of buffers instead of
  // allocating and faulting in fresh pages for each.
  StepProgram TakeProgramStorage();
  void Recycle(StepProgram&& program);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The program and the report built from it (`simulate` schedules the same program in time).
struct MemoryEstimate {
  StepProgram program;
  MemoryReport report;
  size_t peak_op = 0;  // index into program.ops
  std::vector<int64_t> allocated_after;  // bytes allocated after each op
};
MemoryEstimate EstimateMemoryWithProgram(const model::ModelSpec& spec,
                                         const profiles::ClusterSpec& cluster,
                                         const model::Plan& plan, const MemoryOptions& options,
                                         bool with_timeline = true, ModelCache* cache = nullptr);

// A lower bound on EstimateMemoryWithProgram's peak_allocated without walking the steps
// (step_walk.h ForwardEndLowerBound): what is alive together at the end of step 1's first
// forward or at a block's backward op after it, whichever is more. `parts`, when given,
// receives their parts.
Bytes AllocatedLowerBound(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                          const model::Plan& plan, const MemoryOptions& options, ModelCache* cache,
                          ForwardEndBound* parts = nullptr);

// What an expandable segment holding `pool_bytes` reserves: whole 20 MiB pages.
int64_t ExpandableReserved(int64_t pool_bytes);

// REQUIRES: spec and plan valid for the cluster (Plan::Problems empty).
MemoryReport EstimateMemory(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                            const model::Plan& plan, const MemoryOptions& options = {});

// The report alone, for what-ifs beside a plan's own estimate: no timeline, so the walk leaves out
// the repeated micro-batches (MemoryOptions::skip_repeated_micro_batches: the same peak, required
// and fit), and the program's buffers go back to `cache` (ModelCache::Recycle) for the next walk
// (an MoE walk with a unit per expert fills them with millions of ops). Walks that share `cache`
// must share the spec object.
MemoryReport EstimateMemoryReport(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                  const model::Plan& plan, const MemoryOptions& options, ModelCache* cache);

}  // namespace shardtune::sim
