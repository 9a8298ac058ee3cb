// Memory replay of a StepProgram.
#include "simulator/memory_ledger.h"

#include <algorithm>

#include "model/errors.h"

namespace shardtune::sim {
namespace {
constexpr int64_t kMinBlockSize = 512;                // CUDACachingAllocator kMinBlockSize
constexpr int64_t kSegmentGranule = 2 * 1024 * 1024;  // kSmallBuffer / kRoundLarge
int64_t RoundToSegment(int64_t b) {
  return (b + kSegmentGranule - 1) / kSegmentGranule * kSegmentGranule;
}
}  // namespace

int64_t RoundToBlock(int64_t bytes) {
  if (bytes <= 0) return 0;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

MemoryLedger::MemoryLedger(const StepProgram& p) : program_(p) {
  op_peak_.assign(p.ops.size(), 0);
  op_after_.assign(p.ops.size(), 0);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    int64_t op_peak = total_;
    for (uint32_t a = p.ops[i].mem_begin; a < p.ops[i].mem_end; ++a) {
      const MemAction& m = p.actions[a];
      auto c = static_cast<size_t>(m.category);
      auto s = static_cast<size_t>(m.pool);
      int64_t b = RoundToBlock(m.bytes < 0 ? -m.bytes : m.bytes);
      if (m.bytes > 0) {
        cur_[c] += b;
        total_ += b;
        cat_peak_[c] = std::max(cat_peak_[c], cur_[c]);
        pool_cur_[s] += RoundToSegment(b);
        pool_peak_[s] = std::max(pool_peak_[s], pool_cur_[s]);
        op_peak = std::max(op_peak, total_);
        if (total_ > peak_) {
          peak_ = total_;
          peak_op_ = i;
          at_peak_ = cur_;
        }
      } else {
        SHARDTUNE_CHECK(cur_[c] >= b) << ToString(m.category) << ": freeing " << b << " of " << cur_[c]
                                      << " in " << p.OpName(i);
        cur_[c] -= b;
        total_ -= b;
        pool_cur_[s] -= RoundToSegment(b);
      }
    }
    op_peak_[i] = op_peak;
    op_after_[i] = total_;
    const ProgramOp& op = p.ops[i];
    if (op.kind != OpKind::kStartup && op.step >= 0 && op.step < kSteps) {
      auto st = static_cast<size_t>(op.step);
      step_peak_[st] = std::max(step_peak_[st], op_peak);
    }
  }
}

int64_t MemoryLedger::PeakOfStep(int step) const {
  return step >= 0 && step < kSteps ? step_peak_[static_cast<size_t>(step)] : 0;
}

}  // namespace shardtune::sim
