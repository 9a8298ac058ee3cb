// One rank's training steps as a program: ops in the order the CPU issues them (what
// torch.cuda.max_memory_allocated follows), each on a CUDA stream, with the work it does, the
// ops it waits for, and the memory it allocates and frees. The memory ledger replays the memory
// actions in program order; the event simulator schedules the same ops in time. So `estimate`
// and `simulate` see one sequence of events and never disagree on the peak.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "profiles/collective.h"

namespace shardtune::sim {

// Where an op runs. Compute, all-gather and reduce-scatter streams as in FSDP2
// (FSDPCommContext: all_gather_copy_in_stream, all_gather_stream, reduce_scatter_stream), a copy
// stream for host<->device transfers of CPU offload, the host CPU (offloaded optimizer), and
// the Ulysses all-to-alls (NCCL's stream for the cp process group; its own track in traces).
enum class Stream : uint8_t {
  kDefault = 0,
  kAllGather = 1,
  kReduceScatter = 2,
  kCopy = 3,
  kHost = 4,
  kAllToAll = 5
};
inline constexpr int kNumStreams = 6;
const char* ToString(Stream s);

// Memory categories of the breakdown.
enum class Category : uint8_t {
  kShardedParams, kShardedGrads, kOptimizerState, kOptimizerTemp, kGathered, kAllGatherBuffers,
  kUnshardedGrads, kReduceScatterBuffers, kNoSyncGrads, kActivations, kWorkingSet, kResidual,
  kLoss, kWorkspaces,
  kVisionActivations,  // what a VL model's vision blocks keep for backward (kActivations: the text's)
  // TRL DPO's reference model (Plan::reference): its sharded parameters, and everything its
  // no_grad forward inside the step allocates (gathered parameters, activations, logits).
  kReferenceParams, kReference,
  kCount
};
inline constexpr int kNumCategories = static_cast<int>(Category::kCount);
const char* ToString(Category c);

enum class OpKind : uint8_t {
  kStartup,        // persistent sharded parameters
  kAllGather,      // all-gather of a unit (copy-in + collective)
  kCopyOut,        // all-gather output -> unsharded parameters
  kForward,        // a segment's forward compute
  kBackward,       // a segment's backward compute (recomputation included)
  kReduceScatter,  // copy-in + reduce-scatter of a unit's gradients
  kAllReduce,      // HSDP all-reduce of a unit's gradient shard across replicas
  kPostBackward,   // no_sync bookkeeping, end-of-backward releases
  kHostToDevice,   // CPU offload: sharded parameters to the GPU before an all-gather
  kDeviceToHost,   // CPU offload: gradient shard to the host after a reduce-scatter
  kOptimizer,      // optimizer step
  kZeroGrad,
  kAllToAll,  // Ulysses all-to-alls of one attention layer (q, k, v in or the output back)
};
const char* ToString(OpKind k);

struct MemAction {
  Category category;
  Stream pool;      // the allocator pool (stream) the block belongs to
  int64_t bytes;    // > 0 allocates, < 0 frees; a transient is an allocation and its free
};

// One tensor as the caching allocator sees it, for the allocator replay
// (simulator/allocator_sim.h). MemActions lump tensors (a block's saved activations, a unit's
// gradients) and free by byte count, which is all the ledger needs; these events name each tensor
// PyTorch allocates separately, and each free names the allocation it ends. A tensor is freed in
// the pool (stream) it was allocated in, as FSDP2's record_stream / event handling keeps it.
struct TensorEvent {
  uint32_t op = 0;    // the program op it belongs to (index into StepProgram::ops)
  int32_t id = -1;    // allocation: its id (0, 1, ... in order); free: the id it frees
  int64_t bytes = 0;  // > 0: allocates `bytes` in `pool`; 0: frees tensor `id`
  Stream pool = Stream::kDefault;
};

inline constexpr int8_t kExpertShardGroup = 4;
inline constexpr int8_t kExpertParallelGroup = 5;

// Where in a step an op runs, as structure: MemoryReport::peak_at carries it so that code asks
// "is the peak in the LM head" without reading OpName's text back.
enum class StepRegion : uint8_t { kNone, kEmbeddings, kVisionBlock, kBlock, kFinalNorm, kHead };
struct StepPoint {
  OpKind kind = OpKind::kStartup;
  int step = 0, micro = 0;
  StepRegion region = StepRegion::kNone;  // for forward, backward and all-to-all ops
  int block = -1;                         // kBlock / kVisionBlock: which one
  int unit = -1;                          // the FSDP unit of a collective or copy, or -1
};
// The kind of moment a peak is at, as tune's rejection reasons name it: "optimizer step",
// "LM head and loss", "backward" (post-backward too), "forward", "all-gather" (its copy-out
// too), "reduce-scatter", "start-up", else "step".
const char* PeakKindName(const StepPoint& p);

struct ProgramOp {
  OpKind kind = OpKind::kStartup;
  Stream stream = Stream::kDefault;
  int16_t step = 0, micro = 0;  // optimizer step (0, 1) and micro-batch
  int32_t unit = -1;            // FSDP unit index, or -1
  int32_t segment = -1;         // forward segment (0 embeddings, 1..L blocks, L+2 head), or -1
  // Work. Compute: FLOPs by class and bytes moved by memory-bound kernels. Collectives: the
  // total size S (nccl-tests convention) and the group it runs over.
  double matmul_flops = 0, attention_flops = 0, memory_bytes = 0;
  // GEMM FLOPs run in fp32 without tensor cores (TRL's chunked NLL head: h.float() @ w.float().t()
  // under torch's default allow_tf32 False).
  double fp32_matmul_flops = 0;
  profiles::Collective collective = profiles::Collective::kAllGather;
  int64_t comm_bytes = 0;
  // 0: shard group, 1: replicate group, 2: host link, 3: cp group, 4: expert shard group (efsdp:
  // shard / ep ranks strided by ep), 5: ep group (ep consecutive ranks: the MoE all-to-alls).
  int8_t group = 0;
  int8_t calls = 1;  // collective calls the op stands for (each pays the latency)
  // Host work that issues this op (simulate's host model): eager kernel launches, FSDP2 Python
  // hooks (pre-forward / pre-backward unshard, post-backward reduce), and whether the host first
  // waits for every earlier op (the training loop's per-step sync, e.g. loss.item()).
  // host_kernels are charged at the rate of the thread that issues them: the autograd engine's
  // for a backward op, except its host_python_kernels (a checkpointed block's recomputed
  // forward, run by the checkpoint's Python unpack hook); Python's for every other op.
  // The optimizer step's launches are counted but not charged: its host cost is host_params,
  // the parameter tensors its Python loop visits.
  int16_t host_kernels = 0;
  int16_t host_python_kernels = 0;
  int16_t host_params = 0;
  int8_t host_hooks = 0;
  bool host_sync = false;
  std::array<int32_t, 3> deps{{-1, -1, -1}};  // ops (by index) that must finish first
  uint32_t mem_begin = 0, mem_end = 0;        // [begin, end) into StepProgram::actions
};

struct StepProgram {
  std::vector<ProgramOp> ops;
  std::vector<MemAction> actions;
  // Tensor-level allocations and frees in program order; empty unless the walk recorded them
  // (WalkSetup::record_tensors). num_tensor_ids: allocations recorded.
  std::vector<TensorEvent> tensors;
  int32_t num_tensor_ids = 0;
  std::vector<std::string> unit_names;
  int num_layers = 0;     // every block (ModelSpec::NumBlocks), the vision tower's first
  int vision_blocks = 0;  // of which the vision tower's
  int grad_accum = 1;
  // Micro-batches of each step the walk left out because they repeat the last leading one
  // (micro-batch index kWalkedLeadingMicroBatches - 1; step_walk.h skip_repeated_micro_batches):
  // 0 for a full program.
  int repeats_of_last_leading_micro_batch = 0;
  // The same, when only step 0's were left out (WalkSetup::skip_repeated_micro_batches_in_step0):
  // step 1 is whole.
  int repeats_in_step0 = 0;
  // Activation offload (Plan::activation_offload): the pinned host bytes one micro-batch's
  // offloaded saved tensors take per rank, each rounded up to a power of two as PyTorch's
  // CachingHostAllocator does (aten/src/ATen/core/CachingHostAllocator.h allocate: "Round up the
  // allocation to the nearest power of two"); its cached blocks serve every later micro-batch.
  int64_t activation_offload_pinned_bytes = 0;
  // "step 1 · micro-batch 2/4 · backward · block 7" for reports; built on demand.
  std::string OpName(size_t i) const;
  // The same place as structure.
  StepPoint OpPoint(size_t i) const;
};

}  // namespace shardtune::sim
