// measurements.json and trace.json writers.
#include "executor/train/measurements.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

#include "executor/train/checkpoint.h"
#include "executor/errors.h"
#include "model/units.h"
#include "profiles/collective.h"

namespace shardtune::exec {
namespace {

using Json = nlohmann::ordered_json;

double Ns(double s) { return std::round(s * 1e9) / 1e9; }  // times at ns resolution

// The innermost unit covering each segment (the one that owns the segment's own parameters).
std::string UnitOfSegment(const std::vector<UnitInfo>& units, int s) {
  const UnitInfo* best = nullptr;
  for (const UnitInfo& u : units) {
    if (u.first_segment <= s && s <= u.last_segment &&
        (!best || u.last_segment - u.first_segment < best->last_segment - best->first_segment)) {
      best = &u;
    }
  }
  return best ? best->name : "";
}

// The end of this process's first step on the run clock, when the trace kept the spans and
// there was more than one step: spans and collectives issued before it pay one-time costs
// (lazy allocations, thread pools) and are left out of the "steady_*" figures calibration uses.
// NaN when unknown (no trace, or one step).
double FirstStepEnd(const MeasurementsDoc& d) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  if (!d.recorder || d.steps.size() < 2) return nan;
  double first_start = std::numeric_limits<double>::infinity(), end = nan;
  for (const Span& s : d.recorder->spans()) {
    if (s.phase == "step" && s.start_s < first_start) {
      first_start = s.start_s;
      end = s.start_s + s.dur_s;
    }
  }
  return end;
}

// Totals per (name, phase) of the spans that start after `cutoff`.
std::map<std::pair<std::string, std::string>, SpanTotal> SteadyTotals(const MeasurementsDoc& d,
                                                                      double cutoff) {
  std::map<std::pair<std::string, std::string>, SpanTotal> out;
  if (!d.recorder || std::isnan(cutoff)) return out;
  for (const Span& s : d.recorder->spans()) {
    if (s.start_s < cutoff) continue;
    SpanTotal& t = out[{s.name, s.phase}];
    ++t.count;
    t.total_s += s.dur_s;
  }
  return out;
}

void AddCompute(const MeasurementsDoc& d, model::Measurements* m) {
  if (!d.recorder) return;
  auto steady = SteadyTotals(d, FirstStepEnd(d));
  for (size_t s = 0; s < d.segment_names.size(); ++s) {
    for (const char* phase : {"forward", "backward"}) {
      auto it = d.recorder->totals().find({d.segment_names[s], phase});
      if (it == d.recorder->totals().end()) continue;
      const SpanTotal& t = it->second;
      model::MeasuredCompute c;
      c.segment = d.segment_names[s];
      c.unit = UnitOfSegment(d.units, static_cast<int>(s));
      c.phase = phase;
      c.count = t.count;
      c.total_s = Ns(t.total_s);
      c.mean_s = Ns(t.total_s / static_cast<double>(std::max<int64_t>(1, t.count)));
      auto st = steady.find({d.segment_names[s], phase});
      if (st != steady.end()) {
        c.steady_count = st->second.count;
        c.steady_mean_s = Ns(st->second.total_s / static_cast<double>(st->second.count));
      }
      m->compute.push_back(c);
    }
  }
}

void AddWaits(const MeasurementsDoc& d, model::Measurements* m) {
  if (!d.recorder) return;
  auto steady = SteadyTotals(d, FirstStepEnd(d));
  for (const auto& [key, t] : d.recorder->totals()) {
    if (key.second == "forward" || key.second == "backward") continue;
    model::MeasuredWait w;
    w.name = key.first;
    w.phase = key.second;
    w.count = t.count;
    w.total_s = Ns(t.total_s);
    auto st = steady.find(key);
    if (st != steady.end()) {
      w.steady_count = st->second.count;
      w.steady_total_s = Ns(st->second.total_s);
    }
    m->waits.push_back(w);
  }
}

// Rank 0's collectives per (kind, group, group size, size), with their mean time and bus
// bandwidth.
void AddCollectives(const std::vector<CollectiveRecord>& records, double cutoff, model::Measurements* m) {
  using Key = std::tuple<int, std::string, int, int64_t>;
  struct Agg {
    int64_t count = 0, sent = 0, steady_count = 0;
    double time = 0, steady_time = 0;
    bool emulated = false;
  };
  std::map<Key, Agg> agg;
  for (const CollectiveRecord& r : records) {
    Agg& a = agg[Key{static_cast<int>(r.kind), r.group, r.group_size, r.full_size_bytes}];
    ++a.count;
    a.time += r.time_s;
    a.sent += r.sent_bytes;
    a.emulated = a.emulated || r.emulated;
    if (!std::isnan(cutoff) && r.start_s >= cutoff) {
      ++a.steady_count;
      a.steady_time += r.time_s;
    }
  }
  for (const auto& [k, a] : agg) {
    model::MeasuredCollective c;
    c.kind = static_cast<profiles::Collective>(std::get<0>(k));
    c.group = std::get<1>(k);
    c.group_size = std::get<2>(k);
    c.bytes = std::get<3>(k);
    c.count = a.count;
    double mean = a.time / static_cast<double>(a.count);
    // busbw = S / t * factor (nccl-tests PERFORMANCE.md), factor from profiles/collective.h.
    double busbw = mean > 0 ? static_cast<double>(c.bytes) / mean * profiles::BusBwFactor(c.kind, c.group_size) : 0.0;
    c.time_s = Ns(mean);
    c.total_time_s = Ns(a.time);
    c.busbw_bytes_per_s = std::round(busbw);
    c.sent_bytes_per_call = a.sent / a.count;
    c.emulated = a.emulated;
    if (a.steady_count > 0) {
      c.steady_count = a.steady_count;
      c.steady_time_s = Ns(a.steady_time / static_cast<double>(a.steady_count));
    }
    m->collectives.push_back(c);
  }
}

void AddMemory(const std::vector<RankMemory>& mem, model::Measurements* m) {
  bool cuda = false;
  for (const RankMemory& r : mem) {
    m->memory_per_rank.push_back(r);
    m->peak_tracked_bytes = std::max(m->peak_tracked_bytes, r.tracked_peak_bytes);
    m->peak_rss_bytes = std::max(m->peak_rss_bytes, r.rss_peak_bytes);
    m->peak_device_reserved_bytes = std::max(m->peak_device_reserved_bytes, r.device_reserved_peak_bytes);
    m->device_used_bytes = std::max(m->device_used_bytes, r.device_used_bytes);
    cuda = cuda || r.device_allocated_peak_bytes > 0;
  }
  m->memory_judged_on =
      cuda ? "peak_tracked_bytes: the CUDA caching allocator's peak allocated bytes "
             "(torch.cuda.max_memory_allocated); reserved adds its cache, device_used the "
             "CUDA context and NCCL buffers (cudaMemGetInfo)"
           : "peak_tracked_bytes: tensor storage allocated through LibTorch's CPU "
             "allocator (the CPU analogue of torch.cuda.max_memory_allocated); RSS "
             "adds the process, libraries and allocator caches";
}

// Per phase (phase_meter.h): the worst rank's peaks, rank 0's duration, and every rank's figures.
void AddPhases(const std::vector<RankPhases>& ranks, model::Measurements* m) {
  if (ranks.empty()) return;
  for (int i = 0; i < kNumRunPhases; ++i) {
    auto idx = static_cast<size_t>(i);
    if (ranks[0][idx].count == 0) continue;
    model::MeasuredPhase ph;
    ph.name = PhaseName(static_cast<RunPhase>(i));
    for (size_t r = 0; r < ranks.size(); ++r) {
      const PhasePeak& p = ranks[r][idx];
      model::MeasuredPhaseRank e = p;  // the record itself (phase_meter.h), its time rounded
      e.rank = static_cast<int>(r);
      e.duration_s = Ns(p.duration_s);
      ph.per_rank.push_back(e);
      ph.peak_tracked_bytes = std::max(ph.peak_tracked_bytes, p.tracked_peak_bytes);
      ph.peak_rss_bytes = std::max(ph.peak_rss_bytes, p.rss_peak_bytes);
      ph.peak_device_allocated_bytes = std::max(ph.peak_device_allocated_bytes, p.device_allocated_peak_bytes);
      ph.peak_device_reserved_bytes = std::max(ph.peak_device_reserved_bytes, p.device_reserved_peak_bytes);
      ph.device_used_bytes = std::max(ph.device_used_bytes, p.device_used_bytes);
    }
    ph.count = ranks[0][idx].count;
    ph.duration_s = Ns(ranks[0][idx].duration_s);
    m->phases.push_back(ph);
  }
}

}  // namespace

model::Measurements BuildMeasurements(const MeasurementsDoc& d) {
  model::Measurements m;
  m.environment = d.environment;
  m.model_name = d.model;
  m.parameters = d.run.parameters;
  m.plan = d.plan;
  m.micro_batch = d.run.micro_batch;
  m.grad_accum = d.run.grad_accum;
  m.data_parallel_ranks = d.run.dp_world;
  m.seq_len = d.run.seq_len;
  m.global_batch = d.run.global_batch;
  // Sequences of other lengths than the row (--lengths, packed rows): the steps' mean tokens.
  m.tokens_per_step = d.run.global_batch * d.run.seq_len;
  if (d.run.tokens_vary && !d.steps.empty()) {
    int64_t sum = 0;
    for (const StepLog& s : d.steps) sum += s.tokens;
    m.tokens_per_step = std::max<int64_t>(1, sum / static_cast<int64_t>(d.steps.size()));
  }
  m.resumed_from_step = d.run.resumed_from_step;
  m.data = d.run.data;
  for (const StepLog& s : d.steps) {
    m.steps.push_back({s.step, s.loss, s.lr, s.grad_norm, Ns(s.time_s), s.tokens, s.tokens_per_s});
  }
  // The first step of a process pays one-time costs (allocations, thread pools): excluded
  // from the means when there are others.
  size_t first = d.steps.size() > 1 ? 1 : 0;
  double time = 0;
  int64_t tokens = 0;
  for (size_t i = first; i < d.steps.size(); ++i) {
    time += d.steps[i].time_s;
    tokens += d.steps[i].tokens;
  }
  size_t n = d.steps.size() - first;
  double tps = time > 0 ? static_cast<double>(tokens) / time : 0.0;
  m.steps_measured = static_cast<int64_t>(n);
  m.mean_step_time_s = n ? Ns(time / static_cast<double>(n)) : 0.0;
  m.tokens_per_s = tps;
  m.model_flops_per_token = d.run.model_flops_per_token;
  m.achieved_flops_per_s = tps * d.run.model_flops_per_token;
  for (const UnitInfo& u : d.units) m.units.push_back({u.name, u.numel, u.padded_numel, u.shard_numel});
  AddCompute(d, &m);
  AddWaits(d, &m);
  AddCollectives(d.collectives, FirstStepEnd(d), &m);
  AddMemory(d.memory, &m);
  AddPhases(d.phases, &m);
  return m;
}

void WriteMeasurements(const std::string& path, const MeasurementsDoc& d) {
  WriteFileAtomically(path, model::MeasurementsToJson(BuildMeasurements(d)).dump(2) + "\n");
}

std::string TraceEventsJson(const std::vector<Span>& spans, const std::vector<CollectiveRecord>& c,
                            int rank) {
  static const char* kLaneNames[] = {"compute", "all_gather", "reduce", "step", "collectives"};
  Json a = Json::array();
  for (int lane = 0; lane < 5; ++lane) {
    a.push_back({{"name", "thread_name"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"tid", lane},
                 {"args", {{"name", kLaneNames[lane]}}}});
  }
  for (const Span& s : spans) {
    a.push_back({{"name", s.name + " " + s.phase},
                 {"cat", s.phase},
                 {"ph", "X"},
                 {"pid", rank},
                 {"tid", static_cast<int>(s.lane)},
                 {"ts", s.start_s * 1e6},
                 {"dur", s.dur_s * 1e6}});
    if (s.live_bytes < 0) continue;
    // Two counter tracks (separate names: one event's args would be drawn stacked), sampled as
    // the span ends: the live tracked bytes, and the peak since the previous span of any lane.
    const double ts = (s.start_s + s.dur_s) * 1e6;
    a.push_back({{"name", "memory: tracked live (MiB)"}, {"ph", "C"}, {"pid", rank}, {"ts", ts},
                 {"args", {{"MiB", static_cast<double>(s.live_bytes) / kMiB}}}});
    a.push_back({{"name", "memory: tracked peak since the previous span (MiB)"}, {"ph", "C"},
                 {"pid", rank}, {"ts", ts},
                 {"args", {{"MiB", static_cast<double>(s.peak_since_previous_bytes) / kMiB}}}});
  }
  for (const CollectiveRecord& r : c) {
    a.push_back({{"name", std::string(profiles::ToString(r.kind)) + " " + r.group},
                 {"cat", "collective"},
                 {"ph", "X"},
                 {"pid", rank},
                 {"tid", 4},
                 {"ts", r.start_s * 1e6},
                 {"dur", r.time_s * 1e6},
                 {"args", {{"bytes", r.full_size_bytes}, {"group_size", r.group_size}}}});
  }
  return a.dump();
}

void MergeTraces(const std::vector<std::string>& parts, const std::string& out_path) {
  Json events = Json::array();
  double t0 = std::numeric_limits<double>::infinity();
  for (const std::string& p : parts) {
    Json part;
    try {
      part = Json::parse(ReadWholeFile(p));
    } catch (const std::exception& e) {
      throw BackendError("trace: cannot read \"" + p + "\": " + e.what());
    }
    for (auto& e : part) {
      if (e.contains("ts")) t0 = std::min(t0, e["ts"].get<double>());
      events.push_back(std::move(e));
    }
  }
  for (auto& e : events) {
    if (e.contains("ts")) e["ts"] = std::round((e["ts"].get<double>() - t0) * 1000.0) / 1000.0;
    if (e.contains("dur")) e["dur"] = std::round(e["dur"].get<double>() * 1000.0) / 1000.0;
  }
  Json doc{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  WriteFileAtomically(out_path, doc.dump() + "\n");
  std::error_code ec;
  for (const std::string& p : parts) std::filesystem::remove(p, ec);
}

}  // namespace shardtune::exec
