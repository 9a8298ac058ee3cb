// Chrome trace event format (Perfetto, chrome://tracing) for a scheduled StepProgram: one track
// per stream and a counter track of allocated memory. The executor writes measured traces in
// the same format, so predicted and measured steps open side by side.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "simulator/job_phases.h"
#include "simulator/simulate.h"

namespace shardtune::sim {

// The trace document ({"traceEvents": [...], "displayTimeUnit": "ms"}); times in microseconds.
// With `phases`, a "job phases" track marks each phase: step 0 and the steady step as spans over
// their scheduled ops, model load at time 0 and checkpoint save / resume after the last op (they
// are not scheduled in time), each with its GPU peak, moment and verdict in args.
nlohmann::ordered_json ChromeTrace(const SimReport& report, const std::string& process_name,
                                   const JobPhases* phases = nullptr);

// Writes `text` to `path` atomically: a temporary file beside it, flushed, then renamed, so an
// existing file is never left half-written. Throws InputError naming the path on failure.
void WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace shardtune::sim
