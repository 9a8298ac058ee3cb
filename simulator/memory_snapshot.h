// `estimate --memory-snapshot FILE.pickle`: the predicted caching-allocator history in the format
// torch.cuda.memory._snapshot() returns after torch.cuda.memory._record_memory_history() (issue
// #19), so a prediction opens in the same viewers as a real run (pytorch.org/memory_viz,
// torch/cuda/_memory_viz.py trace_plot / segment_plot / stats / trace). The history is the
// allocator replay of the report (allocator_sim.h) over start-up and steps 0 and 1, tensor by
// tensor; each event's frame names the program op that caused it.
#pragma once

#include <string>

#include "simulator/memory_model.h"
#include "simulator/step_program.h"

namespace shardtune::sim {

// The pickle's bytes: {"segments": [...], "device_traces": [[...]], "shardtune": {...}}.
// Segments are the allocator's state after the last event (as _snapshot() reports its state at
// the call); device_traces every segment_alloc, alloc, free_requested, free_completed,
// segment_free and oom from an empty allocator on, so a viewer can rebuild every earlier state.
// The replay runs under the capacity the report judged on (usable minus outside the allocator):
// a plan that runs out ends with an "oom" event, as the real run would.
// REQUIRES: program.tensors recorded (an estimate with its allocator replayed).
std::string MemorySnapshotPickle(const StepProgram& program, const MemoryReport& report,
                                 const std::string& title);

// Throws InputError "FLAG: expected a file name ending in .pickle, got ..." otherwise (callers
// check before the work).
void CheckSnapshotName(const std::string& path, const std::string& flag);

// Writes MemorySnapshotPickle atomically to `path` (temporary file, rename). Throws InputError
// as CheckSnapshotName or naming the path when it cannot write.
void WriteMemorySnapshot(const std::string& path, const std::string& flag,
                         const StepProgram& program, const MemoryReport& report,
                         const std::string& title);

}  // namespace shardtune::sim
