// Discrete-event schedule of a StepProgram on one rank's streams (simulator/README.md). An op
// starts when every op it depends on has finished, its stream is free (streams run their ops in
// program order) and the host has issued it: one host thread issues the ops in program order,
// spending OpCost::host_ns on each, and before an op marked host_sync it first waits for every
// earlier op to finish (so a launch-bound step is as slow as its host work). Collectives spend
// their latency term alone, then transfer; transfers that use the same link at the same time share
// its bandwidth equally (fluid model). Equal times fire in insertion order (a priority queue on
// (time, seq)), so schedules are deterministic.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "simulator/step_program.h"

namespace shardtune::sim {

// Cost of each op, precomputed by the caller: a fixed duration (compute, host work), or a
// latency plus the seconds the transfer would take alone on its link.
struct OpCost {
  int64_t fixed_ns = 0;
  int64_t latency_ns = 0;
  int64_t transfer_ns = 0;  // > 0 marks a transfer
  int8_t link = 0;          // transfers on the same link share its bandwidth
  int64_t host_ns = 0;      // host (CPU) time to issue the op; the host issues ops in program order
};

struct Schedule {
  std::vector<int64_t> start_ns, end_ns;  // per op
  int64_t makespan_ns = 0;
};

// REQUIRES: costs.size() == program.ops.size(); dependencies point to earlier ops.
// first_op > 0: the ops before it count as finished at time 0 and are not scheduled (start and
// end 0), for a caller that knows the ops from first_op on start from an idle machine (the
// steady step begins with the host waiting for every earlier op: ProgramOp::host_sync).
Schedule RunEventSimulation(const StepProgram& program, const std::vector<OpCost>& costs,
                            size_t first_op = 0);

// std::llround for x >= 0 without the libm call (the simulator's durations are never negative):
// the same integer, since x - trunc(x) is exact below 2^52.
inline int64_t RoundNonNegative(double x) {
  auto r = static_cast<int64_t>(x);
  return x - static_cast<double>(r) >= 0.5 ? r + 1 : r;
}

// Simulator time is int64 ns; seconds convert by rounding to nearest (README.md "Conventions").
inline int64_t ToNanos(double seconds) {
  double ns = seconds * 1e9;
  return ns >= 0 ? RoundNonNegative(ns) : static_cast<int64_t>(std::llround(ns));
}

}  // namespace shardtune::sim
