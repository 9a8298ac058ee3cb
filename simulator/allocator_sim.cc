// The caching allocator model: DeviceCachingAllocator::malloc / free and their helpers
// (round_size, get_pool, get_allocation_size, get_free_block, alloc_block, should_split,
// alloc_found_block, free_block / try_merge_blocks, release_cached_blocks) in
// c10/cuda/CUDACachingAllocator.cpp, with default settings: max_split_size unlimited (so
// release_available_cached_blocks does nothing and no block counts as oversize), no
// expandable segments, no garbage-collection threshold, no memory fraction.
#include "simulator/allocator_sim.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "model/errors.h"
#include "simulator/step_walk.h"

namespace shardtune::sim {

int64_t AllocatorRoundSize(int64_t bytes) {
  if (bytes < kMinBlockBytes) return kMinBlockBytes;
  return (bytes + kMinBlockBytes - 1) / kMinBlockBytes * kMinBlockBytes;
}

int64_t AllocatorSegmentSize(int64_t rounded_bytes) {
  if (rounded_bytes <= kSmallSizeBytes) return kSmallBufferBytes;
  if (rounded_bytes < kMinLargeAllocBytes) return kLargeBufferBytes;
  return (rounded_bytes + kRoundLargeBytes - 1) / kRoundLargeBytes * kRoundLargeBytes;
}

const char* ToString(AllocatorTraceEvent::Action a) {
  using A = AllocatorTraceEvent::Action;
  switch (a) {  // TraceEntry::Action's names as _snapshot() writes them
    case A::kSegmentAlloc: return "segment_alloc";
    case A::kAlloc: return "alloc";
    case A::kFreeRequested: return "free_requested";
    case A::kFreeCompleted: return "free_completed";
    case A::kSegmentFree: return "segment_free";
    case A::kOom: return "oom";
  }
  return "?";
}

CachingAllocatorModel::CachingAllocatorModel(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

CachingAllocatorModel::FreeEntry CachingAllocatorModel::EntryOf(int32_t b) const {
  const Block& k = blocks_[static_cast<size_t>(b)];
  SHARDTUNE_CHECK(b >= 0 && b < (int32_t{1} << kSlotBits) && k.addr % kMinBlockBytes == 0 &&
                  k.addr / kMinBlockBytes < (int64_t{1} << (64 - kSlotBits)))
      << "block " << b << " at " << k.addr << " does not fit a free-list entry";
  return {k.size, static_cast<uint64_t>(k.addr / kMinBlockBytes) << kSlotBits | static_cast<uint64_t>(b)};
}

namespace {
// std::lower_bound without its unpredictable branch: each step halves the range with a
// conditional move (the free lists are searched on every request; #18).
template <class T>
size_t FirstNotBelow(const T* first, size_t n, const T& e) {
  const T* base = first;
  while (n > 1) {
    size_t half = n / 2;
    first = first[half - 1] < e ? first + half : first;
    n -= half;
  }
  if (n == 1 && *first < e) ++first;
  return static_cast<size_t>(first - base);
}
}  // namespace

size_t CachingAllocatorModel::FreeList::ChunkOf(const FreeEntry& e) const {
  auto it = std::partition_point(chunks_.begin(), chunks_.end(),
                                 [&](const std::vector<FreeEntry>& c) { return c.back() < e; });
  return static_cast<size_t>(it - chunks_.begin());
}

void CachingAllocatorModel::FreeList::Insert(const FreeEntry& e) {
  if (chunks_.empty()) {
    chunks_.emplace_back().reserve(2 * kChunk);
    chunks_.back().push_back(e);
    return;
  }
  size_t k = std::min(ChunkOf(e), chunks_.size() - 1);  // above every entry: the last chunk
  std::vector<FreeEntry>& c = chunks_[k];
  c.insert(c.begin() + static_cast<std::ptrdiff_t>(FirstNotBelow(c.data(), c.size(), e)), e);
  if (c.size() > 2 * kChunk) {  // split in halves
    std::vector<FreeEntry> upper(c.begin() + static_cast<std::ptrdiff_t>(kChunk), c.end());
    upper.reserve(2 * kChunk);
    c.resize(kChunk);
    chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(k) + 1, std::move(upper));
  }
}

// The first entry not below `e` is `e` itself when it is listed.
void CachingAllocatorModel::FreeList::Erase(const FreeEntry& e) {
  FreeEntry got{};
  SHARDTUNE_CHECK(TakeFirstNotBelow(e, &got) && got.addr_slot == e.addr_slot && got.size == e.size)
      << "free block of " << e.size << " bytes not listed";
}

bool CachingAllocatorModel::FreeList::TakeFirstNotBelow(const FreeEntry& e, FreeEntry* out) {
  size_t k = ChunkOf(e);
  if (k == chunks_.size()) return false;
  std::vector<FreeEntry>& c = chunks_[k];
  size_t i = FirstNotBelow(c.data(), c.size(), e);  // < c.size(): c.back() is not below e
  *out = c[i];
  c.erase(c.begin() + static_cast<std::ptrdiff_t>(i));
  if (c.empty()) chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(k));
  return true;
}

void CachingAllocatorModel::InsertFree(int32_t b) {
  const Block& k = blocks_[static_cast<size_t>(b)];
  ListOf(k.small, k.stream).Insert(EntryOf(b));
}

void CachingAllocatorModel::EraseFree(int32_t b) {
  const Block& k = blocks_[static_cast<size_t>(b)];
  ListOf(k.small, k.stream).Erase(EntryOf(b));
}

int32_t CachingAllocatorModel::NewBlock(const Block& b) {
  if (!unused_.empty()) {
    int32_t i = unused_.back();
    unused_.pop_back();
    blocks_[static_cast<size_t>(i)] = b;
    blocks_[static_cast<size_t>(i)].live = true;
    return i;
  }
  blocks_.push_back(b);
  return static_cast<int32_t>(blocks_.size()) - 1;
}

// alloc_block: cudaMalloc of a whole segment, which fails when the capacity would be exceeded.
bool CachingAllocatorModel::CudaMalloc(int stream, bool small, int64_t size, int32_t* block) {
  if (capacity_ > 0 && reserved_ + size > capacity_) return false;
  Block b;
  b.addr = next_addr_;
  b.size = size;
  b.stream = stream;
  b.small = small;
  next_addr_ += size;
  reserved_ += size;
  stream_reserved_[static_cast<size_t>(stream)] += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++segments_;
  *block = NewBlock(b);
  Trace(AllocatorTraceEvent::Action::kSegmentAlloc, b.addr, size, stream);
  return true;
}

// release_cached_blocks -> release_blocks: cudaFree every free block that is a whole segment
// (!block->prev && !block->next), in both pools.
void CachingAllocatorModel::ReleaseCachedBlocks() {
  // Torch walks each pool's set in BlockComparatorSize order (stream, size, address): the large
  // pool's lists, then the small pool's, streams in order.
  for (FreeList& list : free_) {
    list.RemoveIf([&](const FreeEntry& e) {
      auto b = static_cast<size_t>(SlotOf(e));
      if (blocks_[b].prev >= 0 || blocks_[b].next >= 0) return false;
      reserved_ -= blocks_[b].size;
      stream_reserved_[static_cast<size_t>(blocks_[b].stream)] -= blocks_[b].size;
      --segments_;
      Trace(AllocatorTraceEvent::Action::kSegmentFree, blocks_[b].addr, blocks_[b].size,
            blocks_[b].stream);
      blocks_[b].live = false;
      unused_.push_back(static_cast<int32_t>(b));
      return true;
    });
  }
}

int32_t CachingAllocatorModel::Malloc(int stream, int64_t bytes) {
  SHARDTUNE_CHECK(stream >= 0 && stream < kNumStreams && bytes > 0) << stream << " " << bytes;
  int64_t size = AllocatorRoundSize(bytes);
  bool small = size <= kSmallSizeBytes;  // get_pool
  FreeList& pool = ListOf(small, stream);
  int32_t b = -1;
  // get_free_block: the smallest free block of this pool and stream that holds the request
  // (max_split_size is unlimited, so the oversize rules never refuse one).
  FreeEntry found{};
  if (pool.TakeFirstNotBelow(FreeEntry{size, 0}, &found)) {
    b = SlotOf(found);
  } else {
    int64_t seg = AllocatorSegmentSize(size);
    // alloc_block, then release_cached_blocks and alloc_block(isRetry) (num_alloc_retries).
    if (!CudaMalloc(stream, small, seg, &b)) {
      ReleaseCachedBlocks();
      ++retries_;
      if (!CudaMalloc(stream, small, seg, &b)) {
        Trace(AllocatorTraceEvent::Action::kOom, 0, size, stream);
        return -1;
      }
    }
  }
  // alloc_found_block: should_split keeps the rest as a free block after this one when it is at
  // least kMinBlockSize (small pool) or more than kSmallSize (large pool).
  Block& blk = blocks_[static_cast<size_t>(b)];
  int64_t remaining = blk.size - size;
  bool split = small ? remaining >= kMinBlockBytes : remaining > kSmallSizeBytes;
  if (split) {
    Block rest;
    rest.addr = blk.addr + size;
    rest.size = remaining;
    rest.stream = blk.stream;
    rest.small = blk.small;
    rest.prev = b;
    rest.next = blk.next;
    int32_t r = NewBlock(rest);  // may reallocate blocks_
    Block& cur = blocks_[static_cast<size_t>(b)];
    if (cur.next >= 0) blocks_[static_cast<size_t>(cur.next)].prev = r;
    cur.next = r;
    cur.size = size;
    InsertFree(r);
  }
  Block& got = blocks_[static_cast<size_t>(b)];
  got.allocated = true;
  allocated_ += got.size;
  stream_allocated_[static_cast<size_t>(stream)] += got.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  Trace(AllocatorTraceEvent::Action::kAlloc, got.addr, got.size, stream);
  return b;
}

// try_merge_blocks: `src` (a free neighbour) is absorbed into `dst`.
void CachingAllocatorModel::Merge(int32_t dst, int32_t src) {
  Block& d = blocks_[static_cast<size_t>(dst)];
  Block& s = blocks_[static_cast<size_t>(src)];
  EraseFree(src);
  if (d.prev == src) {
    d.addr = s.addr;
    d.prev = s.prev;
    if (d.prev >= 0) blocks_[static_cast<size_t>(d.prev)].next = dst;
  } else {
    d.next = s.next;
    if (d.next >= 0) blocks_[static_cast<size_t>(d.next)].prev = dst;
  }
  d.size += s.size;
  s.live = false;
  unused_.push_back(src);
}

void CachingAllocatorModel::Free(int32_t handle) {
  SHARDTUNE_CHECK(handle >= 0 && static_cast<size_t>(handle) < blocks_.size() &&
                  blocks_[static_cast<size_t>(handle)].allocated)
      << "free of a block not allocated: " << handle;
  Block& b = blocks_[static_cast<size_t>(handle)];
  Trace(AllocatorTraceEvent::Action::kFreeRequested, b.addr, b.size, b.stream);
  Trace(AllocatorTraceEvent::Action::kFreeCompleted, b.addr, b.size, b.stream);
  b.allocated = false;
  allocated_ -= b.size;
  stream_allocated_[static_cast<size_t>(b.stream)] -= b.size;
  for (int32_t n : {b.prev, b.next}) {
    if (n >= 0 && !blocks_[static_cast<size_t>(n)].allocated) Merge(handle, n);
  }
  InsertFree(handle);
}

// Each list is ordered by size: its largest free block is its last.
int64_t CachingAllocatorModel::LargestFreeBlock() const {
  int64_t m = 0;
  for (const FreeList& list : free_) {
    if (!list.empty()) m = std::max(m, list.Last().size);
  }
  return m;
}

std::vector<AllocatorSegment> CachingAllocatorModel::Segments() const {
  std::vector<AllocatorSegment> out;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& head = blocks_[i];
    if (!head.live || head.prev >= 0) continue;  // a segment starts at a block with no prev
    AllocatorSegment seg;
    seg.addr = head.addr;
    seg.stream = head.stream;
    seg.small = head.small;
    for (int32_t b = static_cast<int32_t>(i); b >= 0; b = blocks_[static_cast<size_t>(b)].next) {
      const Block& k = blocks_[static_cast<size_t>(b)];
      seg.blocks.push_back({k.addr, k.size, k.allocated, k.allocated ? b : -1});
      seg.size += k.size;
    }
    out.push_back(std::move(seg));
  }
  std::sort(out.begin(), out.end(),
            [](const AllocatorSegment& a, const AllocatorSegment& b) { return a.addr < b.addr; });
  return out;
}

std::array<int64_t, kNumStreams> CachingAllocatorModel::FreeBytesPerStream() const {
  std::array<int64_t, kNumStreams> out{};
  for (size_t s = 0; s < out.size(); ++s) out[s] = stream_reserved_[s] - stream_allocated_[s];
  return out;
}

namespace {

// The allocator's layout: every block of every segment as (segment rank in address order, offset
// in the segment, size, stream, small pool, allocated). The model only compares addresses (best
// fit among free blocks of equal size, neighbours within a segment), an order that any
// renumbering of the segments keeping their order preserves, and a new segment lies above every
// other: so two equal layouts with the same tensors in their allocated blocks serve the same
// requests the same way, even when a segment was released and cudaMalloc'd again at a new
// address in between (a replay under pressure).
using Layout = std::vector<std::array<int64_t, 6>>;

Layout LayoutOf(const CachingAllocatorModel& a) {
  Layout out;
  int64_t rank = 0;
  for (const AllocatorSegment& seg : a.Segments()) {
    ++rank;
    for (const AllocatorSegment::Block& b : seg.blocks) {
      out.push_back({rank, b.addr - seg.addr, b.size, seg.stream, seg.small ? 1 : 0,
                     b.allocated ? 1 : 0});
    }
  }
  return out;
}

// A step's last leading micro-batch, tensor events [begin, end), the template of the copies the
// walk left out: self-contained when it frees only tensors it allocated and frees all of them.
// Then every copy allocates and frees its own tensors only, and the tensors alive between copies
// are the same ones in the same blocks.
bool SelfContained(const StepProgram& program, size_t begin, size_t end, int32_t* first_id,
                   int32_t* count) {
  *first_id = -1;
  *count = 0;
  int32_t live = 0;
  for (size_t k = begin; k < end; ++k) {
    const TensorEvent& e = program.tensors[k];
    if (e.bytes > 0) {
      if (*first_id < 0) *first_id = e.id;
      ++*count;
      ++live;
    } else {
      if (*first_id < 0 || e.id < *first_id) return false;  // allocated before the template
      --live;
    }
  }
  return live == 0;
}

}  // namespace

AllocatorReplay ReplayAllocator(const StepProgram& program, int64_t capacity_bytes,
                                AllocatorHistory* history) {
  AllocatorReplay r;
  const int repeats = program.repeats_of_last_leading_micro_batch;
  SHARDTUNE_CHECK(history == nullptr || repeats == 0)
      << "an allocator history needs the full program";
  CachingAllocatorModel a(capacity_bytes);
  if (history != nullptr) a.set_trace(&history->events);
  std::vector<int32_t> handle(static_cast<size_t>(program.num_tensor_ids), -1);
  // One tensor event through the allocator; `slot` holds the tensor's handle. false: the
  // allocation failed after the retry (the OOM).
  auto apply = [&](const TensorEvent& e, int32_t* slot) {
    const ProgramOp& op = program.ops[e.op];
    if (e.bytes > 0) {
      int64_t before = a.peak_allocated_bytes();
      int32_t h = a.Malloc(static_cast<int>(e.pool), e.bytes);
      if (history != nullptr) {
        history->event_op.resize(history->events.size(), e.op);
        if (h >= 0) history->live[h] = {e.op, e.bytes};
        else history->reserved_at_oom_bytes = a.reserved_bytes();
      }
      if (h < 0) {
        r.out_of_memory = true;
        r.oom_op = e.op;
        r.oom_request_bytes = e.bytes;
        return false;
      }
      *slot = h;
      if (a.peak_allocated_bytes() > before) {
        r.reserved_at_allocated_peak_bytes = a.reserved_bytes();
        r.free_at_allocated_peak_bytes = a.FreeBytesPerStream();
        r.largest_free_block_bytes = a.LargestFreeBlock();
      }
    } else {
      SHARDTUNE_CHECK(*slot >= 0) << "tensor " << e.id << " freed twice or never allocated in "
                                  << program.OpName(e.op);
      a.Free(*slot);
      if (history != nullptr) {
        history->event_op.resize(history->events.size(), e.op);
        history->live.erase(*slot);
      }
      *slot = -1;
    }
    if (op.step == 0) r.reserved_step0_bytes = a.peak_reserved_bytes();
    if (op.step == 1 && op.kind != OpKind::kStartup) {
      r.reserved_steady_bytes = std::max(r.reserved_steady_bytes, a.reserved_bytes());
    }
    return true;
  };
  constexpr int kLead = kWalkedLeadingMicroBatches - 1;
  int64_t repeated_retries = 0;
  const size_t n = program.tensors.size();
  for (size_t i = 0; i < n && !r.out_of_memory;) {
    const ProgramOp& op = program.ops[program.tensors[i].op];
    bool template_start = repeats > 0 && op.micro == kLead && op.kind != OpKind::kStartup &&
                          (i == 0 || program.ops[program.tensors[i - 1].op].micro != kLead);
    if (!template_start) {
      const TensorEvent& e = program.tensors[i++];
      apply(e, &handle[static_cast<size_t>(e.id)]);
      continue;
    }
    // The last leading micro-batch, then the copies the walk left out (step_walk.h: each starts
    // from the state the one before left and makes the same requests), replayed from its events
    // until the allocator comes back to the layout a copy started from: from there every
    // remaining copy repeats the last one, so only its retries are counted again.
    size_t end = i;
    while (end < n && program.ops[program.tensors[end].op].step == op.step &&
           program.ops[program.tensors[end].op].micro == kLead) {
      ++end;
    }
    int32_t first_id = 0, count = 0;
    if (!SelfContained(program, i, end, &first_id, &count)) {
      r.repeats_verified = false;
      return r;
    }
    std::vector<int32_t> local(static_cast<size_t>(count), -1);
    Layout start = LayoutOf(a);  // the layout the copy about to run starts from
    for (int copy = 0; copy <= repeats && !r.out_of_memory; ++copy) {
      int64_t retries = a.retries();
      for (size_t k = i; k < end; ++k) {
        const TensorEvent& e = program.tensors[k];
        int32_t* slot = copy == 0 ? &handle[static_cast<size_t>(e.id)]
                                  : &local[static_cast<size_t>(e.id - first_id)];
        if (!apply(e, slot)) break;
      }
      if (r.out_of_memory || copy == repeats) break;
      Layout now = LayoutOf(a);
      if (now == start) {
        repeated_retries += (a.retries() - retries) * (repeats - copy);
        break;
      }
      start = std::move(now);
    }
    i = end;
  }
  r.reserved_peak_bytes = a.peak_reserved_bytes();
  r.allocated_peak_bytes = a.peak_allocated_bytes();
  r.segments = a.segments();
  r.retries = a.retries() + repeated_retries;
  if (history != nullptr) history->segments = a.Segments();
  return r;
}

}  // namespace shardtune::sim
