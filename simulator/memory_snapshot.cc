// The predicted memory snapshot (memory_snapshot.h). Keys as torch.cuda.memory._snapshot()
// writes them (torch/csrc/cuda/memory_snapshot.cpp: segment_info, block_info, the trace
// entries' action names) and as torch/cuda/_memory_viz.py and MemoryViz.js read them.
#include "simulator/memory_snapshot.h"

#include <unordered_map>
#include <vector>

#include "model/errors.h"
#include "model/text.h"
#include "simulator/allocator_sim.h"
#include "simulator/pickle_writer.h"
#include "simulator/trace_json.h"

namespace shardtune::sim {
namespace {

// The frame list of each op, written once and recalled by every event of that op.
class Frames {
 public:
  Frames(const StepProgram& program, PickleWriter* w) : program_(program), w_(w) {}
  void Write(uint32_t op) {
    auto it = memo_.find(op);
    if (it != memo_.end()) {
      w_->Recall(it->second);
      return;
    }
    w_->BeginList();
    w_->BeginDict();
    w_->Str("filename");
    w_->Str("shardtune estimate (predicted)");
    w_->Str("line");
    w_->Int(op);
    w_->Str("name");
    w_->Str(program_.OpName(op));
    w_->EndDict();
    w_->EndList();
    memo_[op] = w_->Memoize();
  }

 private:
  const StepProgram& program_;
  PickleWriter* w_;
  std::unordered_map<uint32_t, uint32_t> memo_;
};

void WriteSegments(const AllocatorHistory& r, Frames* frames, PickleWriter* w) {
  w->BeginList();
  for (const AllocatorSegment& s : r.segments) {
    int64_t active = 0, requested = 0;
    for (const auto& b : s.blocks) {
      if (!b.allocated) continue;
      active += b.size;
      requested += r.live.at(b.handle).second;
    }
    w->BeginDict();
    w->Str("device"); w->Int(0);
    w->Str("address"); w->Int(s.addr);
    w->Str("total_size"); w->Int(s.size);
    w->Str("allocated_size"); w->Int(active);
    w->Str("active_size"); w->Int(active);
    w->Str("requested_size"); w->Int(requested);
    w->Str("stream"); w->Int(s.stream);
    w->Str("segment_type"); w->Str(s.small ? "small" : "large");
    w->Str("segment_pool_id"); w->BeginTuple(); w->Int(0); w->Int(0); w->EndTuple();
    w->Str("is_expandable"); w->Bool(false);
    w->Str("frames"); w->BeginList(); w->EndList();
    w->Str("blocks");
    w->BeginList();
    for (const auto& b : s.blocks) {
      w->BeginDict();
      w->Str("address"); w->Int(b.addr);
      w->Str("size"); w->Int(b.size);
      if (b.allocated) {
        const auto& [op, req] = r.live.at(b.handle);
        w->Str("requested_size"); w->Int(req);
        w->Str("state"); w->Str("active_allocated");
        w->Str("frames"); frames->Write(op);
      } else {
        w->Str("requested_size"); w->Int(0);
        w->Str("state"); w->Str("inactive");
        w->Str("frames"); w->BeginList(); w->EndList();
      }
      w->EndDict();
    }
    w->EndList();
    w->EndDict();
  }
  w->EndList();
}

void WriteTrace(const AllocatorHistory& r, int64_t capacity, Frames* frames, PickleWriter* w) {
  w->BeginList();  // one device
  w->BeginList();
  for (size_t i = 0; i < r.events.size(); ++i) {
    const AllocatorTraceEvent& e = r.events[i];
    w->BeginDict();
    w->Str("action"); w->Str(ToString(e.action));
    w->Str("addr"); w->Int(e.addr);
    w->Str("size"); w->Int(e.size);
    w->Str("stream"); w->Int(e.stream);
    // No clock in a prediction: the op's index orders the events (MemoryViz.js shows time_us).
    w->Str("time_us"); w->Int(r.event_op[i]);
    if (e.action == AllocatorTraceEvent::Action::kOom) {
      w->Str("device_free"); w->Int(std::max<int64_t>(0, capacity - r.reserved_at_oom_bytes));
    }
    w->Str("frames"); frames->Write(r.event_op[i]);
    w->EndDict();
  }
  w->EndList();
  w->EndList();
}

}  // namespace

std::string MemorySnapshotPickle(const StepProgram& program, const MemoryReport& report,
                                 const std::string& title) {
  SHARDTUNE_CHECK(report.allocator_replayed && program.num_tensor_ids > 0)
      << "a memory snapshot needs the program's tensors (an allocator-replayed estimate)";
  const int64_t capacity = std::max<int64_t>(0, (report.capacity - report.outside_total).count());
  AllocatorHistory r;
  ReplayAllocator(program, capacity, &r);
  PickleWriter w;
  Frames frames(program, &w);
  w.BeginDict();
  w.Str("segments");
  WriteSegments(r, &frames, &w);
  w.Str("device_traces");
  WriteTrace(r, capacity, &frames, &w);
  w.Str("shardtune");
  w.BeginDict();
  w.Str("predicted"); w.Bool(true);
  w.Str("title"); w.Str(title);
  w.Str("allocator_capacity_bytes"); w.Int(capacity);
  w.Str("fits"); w.Bool(report.fits);
  w.EndDict();
  w.EndDict();
  return w.Finish();
}

void CheckSnapshotName(const std::string& path, const std::string& flag) {
  if (!model::HasExtension(path, ".pickle")) {
    throw InputError(flag + ": expected a file name ending in .pickle, got \"" + path + "\"");
  }
}

void WriteMemorySnapshot(const std::string& path, const std::string& flag,
                         const StepProgram& program, const MemoryReport& report,
                         const std::string& title) {
  CheckSnapshotName(path, flag);
  WriteFileAtomically(path, MemorySnapshotPickle(program, report, title));
}

}  // namespace shardtune::sim
