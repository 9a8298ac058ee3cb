// A model of PyTorch's CUDA caching allocator with its default settings
// (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator; PYTORCH_CUDA_ALLOC_CONF unset),
// replayed over a StepProgram's tensors: which segments it cudaMallocs, how cached blocks are
// split, reused best-fit per stream and merged, and whether it runs out of memory (after freeing
// its cache and retrying) under a capacity. What torch.cuda.max_memory_reserved follows.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "simulator/step_program.h"

namespace shardtune::sim {

// Constants of c10/cuda/CUDACachingAllocator.cpp (c10/core/CachingDeviceAllocator.h since 2.6).
inline constexpr int64_t kMinBlockBytes = 512;             // kMinBlockSize: round_size granule
inline constexpr int64_t kSmallSizeBytes = 1 << 20;        // kSmallSize: largest small-pool request
inline constexpr int64_t kSmallBufferBytes = 2 << 20;      // kSmallBuffer: small-pool segment
inline constexpr int64_t kLargeBufferBytes = 20 << 20;     // kLargeBuffer: segment for < 10 MiB
inline constexpr int64_t kMinLargeAllocBytes = 10 << 20;   // kMinLargeAlloc
inline constexpr int64_t kRoundLargeBytes = 2 << 20;       // kRoundLarge: larger segments' granule

// round_size with roundup_power2_divisions unset: at least 512 bytes, a multiple of 512.
int64_t AllocatorRoundSize(int64_t bytes);
// get_allocation_size: the segment cudaMalloc'd for a (rounded) request no cached block serves.
int64_t AllocatorSegmentSize(int64_t rounded_bytes);

// What the allocator did, in the words of torch.cuda.memory._record_memory_history's device
// traces (TraceEntry in CUDACachingAllocator.h): a cudaMalloc'd segment, a block handed out, a
// block returned (free_requested and free_completed: no cross-stream uses are pending in a
// replay), segments cudaFree'd by release_cached_blocks, a failed request.
struct AllocatorTraceEvent {
  enum class Action : uint8_t {
    kSegmentAlloc,
    kAlloc,
    kFreeRequested,
    kFreeCompleted,
    kSegmentFree,
    kOom
  };
  Action action = Action::kAlloc;
  int64_t addr = 0;
  int64_t size = 0;  // the block's (rounded) or segment's bytes; kOom: the request
  int stream = 0;
};
const char* ToString(AllocatorTraceEvent::Action a);

// A segment of the allocator's state with its blocks in address order (torch's _snapshot()
// "segments": blocks "active_allocated" or "inactive").
struct AllocatorSegment {
  int64_t addr = 0, size = 0;
  int stream = 0;
  bool small = false;  // small pool (2 MiB segments)
  struct Block {
    int64_t addr = 0, size = 0;
    bool allocated = false;
    int32_t handle = -1;  // Malloc's handle while allocated
  };
  std::vector<Block> blocks;
};

// One device's DeviceCachingAllocator. Streams are small integers (sim::Stream values). Not
// thread-safe; one per replay.
class CachingAllocatorModel {
 public:
  // capacity_bytes: the most cudaMalloc can hand out in total (usable device memory minus what
  // lives outside the allocator); 0: unlimited.
  explicit CachingAllocatorModel(int64_t capacity_bytes = 0);

  // malloc: a block of round_size(bytes) on `stream`. Returns its handle, or -1 when cudaMalloc
  // fails even after release_cached_blocks (the OOM PyTorch raises).
  int32_t Malloc(int stream, int64_t bytes);
  // free: the block returns to its pool, merged with free neighbours in its segment.
  void Free(int32_t handle);

  int64_t reserved_bytes() const { return reserved_; }
  int64_t peak_reserved_bytes() const { return peak_reserved_; }
  int64_t allocated_bytes() const { return allocated_; }  // block bytes (rounded), as PyTorch
  int64_t peak_allocated_bytes() const { return peak_allocated_; }
  int segments() const { return segments_; }
  int64_t retries() const { return retries_; }  // memory_stats()["num_alloc_retries"]
  int64_t LargestFreeBlock() const;
  // Bytes of cached free blocks per stream.
  std::array<int64_t, kNumStreams> FreeBytesPerStream() const;
  // From now on, append every segment and block event to `*sink` (nullptr: stop). Addresses are
  // the model's own: segments laid out one after another from 0, as no real device does.
  void set_trace(std::vector<AllocatorTraceEvent>* sink) { trace_ = sink; }
  // The segments held now, in address order.
  std::vector<AllocatorSegment> Segments() const;

  // The free blocks of one pool and stream, ordered as BlockComparatorSize orders them (size,
  // then address): the first entry not below a size is the best fit. The address and the
  // block's slot share a word: addresses are multiples of kMinBlockBytes, so (size, addr_slot)
  // orders as (size, address).
  struct FreeEntry {
    int64_t size;
    uint64_t addr_slot;  // (address / kMinBlockBytes) << kSlotBits | slot
    bool operator<(const FreeEntry& o) const {  // branch-free: (size, addr_slot) lexicographic
      return (size < o.size) | ((size == o.size) & (addr_slot < o.addr_slot));
    }
  };
  static constexpr int kSlotBits = 24;
  // A sorted sequence kept as sorted chunks of at most 2 x kChunk entries, not the tree torch
  // uses: a dense model's replay makes tens of thousands of requests against a few hundred free
  // blocks, where inserting into a few kilobytes of contiguous entries is several times cheaper
  // than a tree's node allocation and rebalancing (#18: the tree was a fifth of `tune`'s time);
  // an MoE model's per-expert tensors leave tens of thousands of free blocks, where one flat
  // array's inserts would move megabytes: chunks bound every insert's move.
  class FreeList {
   public:
    bool empty() const { return chunks_.empty(); }
    void Insert(const FreeEntry& e);
    // Removes the entry equal to `e`; REQUIRES: present.
    void Erase(const FreeEntry& e);
    // Removes and returns the first entry not below `e`; false when every entry is below it.
    bool TakeFirstNotBelow(const FreeEntry& e, FreeEntry* out);
    const FreeEntry& Last() const { return chunks_.back().back(); }  // REQUIRES: !empty()
    // Visits the entries in order; those `drop` returns true for are removed.
    template <class Drop>
    void RemoveIf(Drop drop) {
      for (auto& c : chunks_) c.erase(std::remove_if(c.begin(), c.end(), drop), c.end());
      chunks_.erase(std::remove_if(chunks_.begin(), chunks_.end(),
                                   [](const std::vector<FreeEntry>& c) { return c.empty(); }),
                    chunks_.end());
    }

   private:
    static constexpr size_t kChunk = 256;
    // The first chunk whose last entry is not below `e` (chunks_.size() when none).
    size_t ChunkOf(const FreeEntry& e) const;
    std::vector<std::vector<FreeEntry>> chunks_;  // each sorted and non-empty, in order
  };

 private:
  struct Block {
    int64_t addr = 0, size = 0;
    int32_t prev = -1, next = -1;  // neighbours in the same segment
    int stream = 0;
    bool small = false, allocated = false;
    bool live = true;  // false: a recycled slot in unused_
  };
  void Trace(AllocatorTraceEvent::Action a, int64_t addr, int64_t size, int stream) {
    if (trace_ != nullptr) trace_->push_back({a, addr, size, stream});
  }
  FreeEntry EntryOf(int32_t b) const;
  static int32_t SlotOf(const FreeEntry& e) {
    return static_cast<int32_t>(e.addr_slot & ((uint64_t{1} << kSlotBits) - 1));
  }
  FreeList& ListOf(bool small, int stream) {
    return free_[static_cast<size_t>(small ? kNumStreams + stream : stream)];
  }
  void InsertFree(int32_t b);
  void EraseFree(int32_t b);
  int32_t NewBlock(const Block& b);
  bool CudaMalloc(int stream, bool small, int64_t size, int32_t* block);
  void ReleaseCachedBlocks();
  void Merge(int32_t dst, int32_t src);

  int64_t capacity_ = 0, reserved_ = 0, peak_reserved_ = 0, allocated_ = 0, peak_allocated_ = 0;
  int64_t next_addr_ = 0, retries_ = 0;
  int segments_ = 0;
  std::array<int64_t, kNumStreams> stream_reserved_{}, stream_allocated_{};
  std::vector<Block> blocks_;
  std::vector<int32_t> unused_;  // recycled block slots
  // Free blocks: the large pool's lists per stream, then the small pool's.
  std::array<FreeList, 2 * kNumStreams> free_;
  std::vector<AllocatorTraceEvent>* trace_ = nullptr;
};

// The replay of one program: every tensor the program allocates (StepProgram::tensors), in
// program order, through one CachingAllocatorModel.
struct AllocatorReplay {
  int64_t reserved_peak_bytes = 0;    // max_memory_reserved over start-up and both steps
  int64_t reserved_step0_bytes = 0;   // max_memory_reserved through the end of step 0
  int64_t reserved_steady_bytes = 0;  // most reserved during step 1 (the steady state)
  int64_t allocated_peak_bytes = 0;   // max_memory_allocated of the replay (rounded blocks)
  int segments = 0;                   // segments held at the end
  int64_t retries = 0;                // num_alloc_retries
  bool out_of_memory = false;         // a cudaMalloc failed after the retry
  size_t oom_op = 0;                  // the op of that request (program.ops index)
  int64_t oom_request_bytes = 0;
  // At the moment of the most allocated bytes: reserved then, the cached free bytes per stream
  // and the largest free block (where the reserved-but-free memory is).
  int64_t reserved_at_allocated_peak_bytes = 0;
  std::array<int64_t, kNumStreams> free_at_allocated_peak_bytes{};
  int64_t largest_free_block_bytes = 0;
  // A program that left out repeated micro-batches (StepProgram::
  // repeats_of_last_leading_micro_batch > 0): false when a step's last leading micro-batch is
  // not self-contained (it frees a tensor it did not allocate, or keeps one), so its events
  // cannot stand for the copies left out; the figures are then incomplete and the caller must
  // replay the full program. Always true for a full program.
  bool repeats_verified = true;
};

// What a replay did, event by event (estimate --memory-snapshot, simulator/memory_snapshot.h).
struct AllocatorHistory {
  std::vector<AllocatorTraceEvent> events;
  std::vector<uint32_t> event_op;          // the program op of each event
  std::vector<AllocatorSegment> segments;  // the allocator's segments after the last event
  // Blocks allocated at the end: handle -> (program op, requested bytes).
  std::unordered_map<int32_t, std::pair<uint32_t, int64_t>> live;
  int64_t reserved_at_oom_bytes = 0;  // reserved when the failed request was made
};

// REQUIRES: program.tensors recorded (WalkSetup::record_tensors). capacity_bytes 0: unlimited.
// `history`, when given, receives every allocator event and the final state; it needs a full
// program.
//
// A program whose walk left out repeated micro-batches (step_walk.h skip_repeated_micro_batches)
// is replayed as the full program would be: the copies left out are the last leading
// micro-batch's events again (the walk's rule: each copy starts from the state the one before
// left and makes the same requests), replayed until the allocator's layout comes back to the one
// a copy started from; the allocator being deterministic, every later copy then repeats that
// one, and only its num_alloc_retries are counted again. Needs that micro-batch to be
// self-contained (else repeats_verified is false).
AllocatorReplay ReplayAllocator(const StepProgram& program, int64_t capacity_bytes = 0,
                                AllocatorHistory* history = nullptr);

}  // namespace shardtune::sim
