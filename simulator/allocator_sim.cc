// The caching allocator model: DeviceCachingAllocator::malloc / free and their helpers
// (round_size, get_pool, get_allocation_size, get_free_block, alloc_block, should_split,
// alloc_found_block, free_block / try_merge_blocks, release_cached_blocks) in
// c10/cuda/CUDACachingAllocator.cpp, with default settings: max_split_size unlimited (so
// release_available_cached_blocks does nothing and no block counts as oversize), no
// expandable segments, no garbage-collection threshold, no memory fraction.
#include "simulator/allocator_sim.h"

#include <algorithm>
#include <limits>

#include "model/errors.h"

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

CachingAllocatorModel::Key CachingAllocatorModel::KeyOf(int32_t b) const {
  const Block& k = blocks_[static_cast<size_t>(b)];
  return {k.stream, k.size, k.addr, b};
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
  for (std::set<Key>* pool : {&large_, &small_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      auto b = static_cast<size_t>(std::get<3>(*it));
      if (blocks_[b].prev < 0 && blocks_[b].next < 0) {
        reserved_ -= blocks_[b].size;
        stream_reserved_[static_cast<size_t>(blocks_[b].stream)] -= blocks_[b].size;
        --segments_;
        Trace(AllocatorTraceEvent::Action::kSegmentFree, blocks_[b].addr, blocks_[b].size,
              blocks_[b].stream);
        blocks_[b].live = false;
        unused_.push_back(static_cast<int32_t>(b));
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
  }
}

int32_t CachingAllocatorModel::Malloc(int stream, int64_t bytes) {
  SHARDTUNE_CHECK(stream >= 0 && stream < kNumStreams && bytes > 0) << stream << " " << bytes;
  int64_t size = AllocatorRoundSize(bytes);
  bool small = size <= kSmallSizeBytes;  // get_pool
  std::set<Key>& pool = small ? small_ : large_;
  int32_t b = -1;
  // get_free_block: the smallest free block of this pool and stream that holds the request
  // (max_split_size is unlimited, so the oversize rules never refuse one).
  auto it = pool.lower_bound(Key{stream, size, std::numeric_limits<int64_t>::min(), -1});
  if (it != pool.end() && std::get<0>(*it) == stream) {
    b = std::get<3>(*it);
    pool.erase(it);
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
    PoolOf(cur).insert(KeyOf(r));
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
  PoolOf(s).erase(KeyOf(src));
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
  PoolOf(blocks_[static_cast<size_t>(handle)]).insert(KeyOf(handle));
}

// The pools are ordered by stream, then size: each stream's largest free block is the last one
// before the next stream's first.
int64_t CachingAllocatorModel::LargestFreeBlock() const {
  int64_t m = 0;
  for (const std::set<Key>* pool : {&large_, &small_}) {
    for (int s = 0; s < kNumStreams; ++s) {
      auto it = pool->lower_bound(Key{s + 1, 0, std::numeric_limits<int64_t>::min(), -1});
      if (it == pool->begin()) continue;
      --it;
      if (std::get<0>(*it) == s) m = std::max(m, std::get<1>(*it));
    }
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

AllocatorReplay ReplayAllocator(const StepProgram& program, int64_t capacity_bytes,
                                AllocatorHistory* history) {
  AllocatorReplay r;
  CachingAllocatorModel a(capacity_bytes);
  if (history != nullptr) a.set_trace(&history->events);
  std::vector<int32_t> handle(static_cast<size_t>(program.num_tensor_ids), -1);
  for (const TensorEvent& e : program.tensors) {
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
        break;
      }
      handle[static_cast<size_t>(e.id)] = h;
      if (a.peak_allocated_bytes() > before) {
        r.reserved_at_allocated_peak_bytes = a.reserved_bytes();
        r.free_at_allocated_peak_bytes = a.FreeBytesPerStream();
        r.largest_free_block_bytes = a.LargestFreeBlock();
      }
    } else {
      int32_t& h = handle[static_cast<size_t>(e.id)];
      SHARDTUNE_CHECK(h >= 0) << "tensor " << e.id << " freed twice or never allocated in "
                              << program.OpName(e.op);
      a.Free(h);
      if (history != nullptr) {
        history->event_op.resize(history->events.size(), e.op);
        history->live.erase(h);
      }
      h = -1;
    }
    if (op.step == 0) r.reserved_step0_bytes = a.peak_reserved_bytes();
    if (op.step == 1 && op.kind != OpKind::kStartup) {
      r.reserved_steady_bytes = std::max(r.reserved_steady_bytes, a.reserved_bytes());
    }
  }
  r.reserved_peak_bytes = a.peak_reserved_bytes();
  r.allocated_peak_bytes = a.peak_allocated_bytes();
  r.segments = a.segments();
  r.retries = a.retries();
  if (history != nullptr) history->segments = a.Segments();
  return r;
}

}  // namespace shardtune::sim
