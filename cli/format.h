// Human formatting of numbers for the CLI (only cli/ formats for people, README.md "Conventions").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "model/units.h"
#include "simulator/feature_savings.h"
#include "simulator/memory_model.h"

namespace shardtune::cli {

// "83.1 GiB", "512.0 MiB", "4.0 KiB", "12 B" (binary units: capacities).
std::string FormatBytes(Bytes b);
// "6.74 B", "124.4 M", "512 K" (decimal: parameter counts).
std::string FormatCount(int64_t n);
// For a plan with frozen parameters, LoRA, a tiled MLP, expert units or an inference role: the
// trainable count and one line per feature, e.g. "frozen: -12.4 GiB optimizer state, -3.1 GiB
// sharded gradients (peak -15.5 GiB)", against the full fine-tune of the same plan. Prints
// nothing when f.features is empty.
void PrintFeatureSavings(const sim::FeatureSavings& f, const sim::MemoryReport& r,
                         std::ostream& out);

// `prefix` + `text` + a newline as one write to `os`, then flushed. The ranks `run` launches
// share the launcher's stderr, and std::cerr writes each `<<` at once: a line written piece by
// piece interleaved with another rank's (rank 0's "error: " and its message were once split by
// rank 1's newline, FaultInjectionTest.UnwritableCheckpointFolderIsAClearError). One write of
// at most PIPE_BUF bytes to a pipe is atomic (POSIX write(2)).
void WriteLine(std::ostream& os, std::string_view prefix, std::string_view text);

// A fit whose headroom is under this fraction of the usable memory is reported as marginal: the
// memory estimate is within about 1% of PyTorch on measured runs (simulator/README.md "How the memory model
// works"), so a margin of twice that is the least the verdict can stand behind.
inline constexpr double kMarginalHeadroomFraction = 0.02;
// headroom >= 0 and headroom < kMarginalHeadroomFraction x capacity.
bool IsMarginal(Bytes headroom, Bytes capacity);

}  // namespace shardtune::cli
