// A picture of predicted memory (issue #19), as people read real runs in PyTorch's memory_viz:
// allocated bytes over start-up and steps 0 and 1, stacked by category, with the memory outside
// the allocator on top, the caching allocator's reserved as an outline, the usable capacity as a
// line and the peak's moment labelled; below it, every job phase's allocated peak and required
// against the capacity. Self-contained SVG (or an HTML page holding it): no scripts, no network.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "model/units.h"
#include "simulator/job_phases.h"
#include "simulator/memory_model.h"
#include "simulator/step_program.h"

namespace shardtune::sim {

// Bytes per category at each op's own peak (the most bytes allocated while its actions run),
// replayed from the program's actions in 512-byte blocks as the ledger counts them: the sum over
// categories is the op's peak allocated (MemoryLedger), its maximum the report's peak.
using CategoryBytes = std::array<int64_t, kNumCategories>;
std::vector<CategoryBytes> CategoriesAtOpPeaks(const StepProgram& program);

// What a measured run showed, drawn over the prediction (`validate --plot`): the worst rank's
// tracked peak over the run and per job phase (by JobPhase name: "step 0", "steady step", ...).
struct MeasuredMemory {
  Bytes peak_tracked;
  std::vector<std::pair<std::string, Bytes>> phase_peaks;
};

// The SVG document. `phases` may be null (no phase panel), `measured` null (a prediction only).
std::string MemoryPlotSvg(const StepProgram& program, const MemoryReport& report,
                          const JobPhases* phases, const std::string& title,
                          const MeasuredMemory* measured = nullptr);

// REQUIRES nothing: throws InputError "FLAG: expected a file name ending in .svg or .html, got
// ..." unless `path` ends so (callers check before doing the work the plot shows).
void CheckPlotName(const std::string& path, const std::string& flag);

// Writes an SVG document to `path` atomically: ".svg" as is, ".html" inside a minimal page
// titled `title`. Throws InputError as CheckPlotName, or naming the path when it cannot write.
void WritePlotDocument(const std::string& path, const std::string& flag, const std::string& svg,
                       const std::string& title);

// Writes the plot to `path` atomically: ".svg" as is, ".html" inside a minimal page. Throws
// InputError naming the flag when the name ends otherwise, or the path when it cannot write.
void WriteMemoryPlot(const std::string& path, const std::string& flag, const StepProgram& program,
                     const MemoryReport& report, const JobPhases* phases, const std::string& title);

}  // namespace shardtune::sim
