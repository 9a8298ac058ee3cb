// Span bookkeeping for the trace and the per-phase totals.
#include "executor/recorder.h"

#include <tuple>

namespace shardtune::exec {

void Recorder::Add(Span span, bool keep_trace) {
  SpanTotal& t = totals_[{span.name, span.phase}];
  ++t.count;
  t.total_s += span.dur_s;
  if (sampler_) std::tie(span.live_bytes, span.peak_since_previous_bytes) = sampler_();
  if (keep_trace && tracing_) spans_.push_back(std::move(span));
}

}  // namespace shardtune::exec
