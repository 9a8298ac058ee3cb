// What a rank measures while it trains: timed spans (for the Chrome trace) and their totals per
// name and phase (for measurements.json). Plain C++, no Torch. Times are MonotonicSeconds().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardtune::exec {

// Trace lanes (Chrome trace "tid").
enum class Lane { kCompute = 0, kAllGather = 1, kReduce = 2, kStep = 3 };

struct Span {
  std::string name;   // e.g. "model.layers.3"
  std::string phase;  // "forward", "backward", "all_gather_wait", "optimizer", "step", ...
  Lane lane = Lane::kCompute;
  double start_s = 0;
  double dur_s = 0;
  // Memory when the span was added (its end), when the recorder samples it (-1: not sampled):
  // live bytes then, and the peak since the previous span of any lane was added.
  int64_t live_bytes = -1;
  int64_t peak_since_previous_bytes = -1;
};

struct SpanTotal {
  int64_t count = 0;
  double total_s = 0;
};

class Recorder {
 public:
  // Adds a span. `keep_trace` false: counted in the totals only (keeps long runs small).
  void Add(Span span, bool keep_trace = true);
  const std::vector<Span>& spans() const { return spans_; }
  // Totals keyed by (name, phase).
  const std::map<std::pair<std::string, std::string>, SpanTotal>& totals() const { return totals_; }
  void set_tracing(bool on) { tracing_ = on; }
  // Samples memory as each span is added: returns {live bytes, peak bytes since the previous
  // call} (the trace's memory counter). Unset: spans carry no memory.
  using MemorySampler = std::function<std::pair<int64_t, int64_t>()>;
  void set_memory_sampler(MemorySampler sampler) { sampler_ = std::move(sampler); }
  bool tracing() const { return tracing_; }

 private:
  std::vector<Span> spans_;
  std::map<std::pair<std::string, std::string>, SpanTotal> totals_;
  bool tracing_ = true;
  MemorySampler sampler_;
};

}  // namespace shardtune::exec
