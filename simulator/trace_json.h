// Chrome trace event format (Perfetto, chrome://tracing) for a scheduled StepProgram: one track
// per stream and a counter track of allocated memory. The executor writes measured traces in
// the same format, so predicted and measured steps open side by side.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "simulator/simulate.h"

namespace shardtune::sim {

// The trace document ({"traceEvents": [...], "displayTimeUnit": "ms"}); times in microseconds.
nlohmann::ordered_json ChromeTrace(const SimReport& report, const std::string& process_name);

// Writes `text` to `path` atomically: a temporary file beside it, flushed, then renamed, so an
// existing file is never left half-written. Throws InputError naming the path on failure.
void WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace shardtune::sim
