// measurements.json and trace.json writers.
#include "executor/measurements.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

#include "executor/checkpoint.h"
#include "executor/errors.h"
#include "model/plan_json.h"
#include "profiles/collective.h"

namespace shardtune::exec {
namespace {

using Json = nlohmann::ordered_json;

double Ns(double s) { return std::round(s * 1e9) / 1e9; }  // times at ns resolution

Json EnvironmentJson(const Environment& e) {
  Json j{{"shardtune_version", e.shardtune_version},
              {"torch_version", e.torch_version},
              {"backend", e.backend},
              {"device", e.device},
              {"cpu_model", e.cpu_model},
              {"hostname", e.hostname},
              {"date_utc", e.date_utc},
              {"world_size", e.world_size},
              {"emulated_world", e.emulated_world},
              {"threads_per_rank", e.threads_per_rank}};
  if (!e.blas.empty()) j["blas"] = e.blas;
  return j;
}

Json StepsJson(const std::vector<StepLog>& steps) {
  Json a = Json::array();
  for (const StepLog& s : steps) {
    a.push_back({{"step", s.step},
                 {"loss", s.loss},
                 {"lr", s.lr},
                 {"grad_norm", s.grad_norm},
                 {"time_s", Ns(s.time_s)},
                 {"tokens", s.tokens},
                 {"tokens_per_s", s.tokens_per_s}});
  }
  return a;
}

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

Json ComputeJson(const MeasurementsDoc& d) {
  Json a = Json::array();
  if (!d.recorder) return a;
  double cutoff = FirstStepEnd(d);
  auto steady = SteadyTotals(d, cutoff);
  for (size_t s = 0; s < d.segment_names.size(); ++s) {
    for (const char* phase : {"forward", "backward"}) {
      auto it = d.recorder->totals().find({d.segment_names[s], phase});
      if (it == d.recorder->totals().end()) continue;
      const SpanTotal& t = it->second;
      Json e = {{"segment", d.segment_names[s]},
                {"unit", UnitOfSegment(d.units, static_cast<int>(s))},
                {"phase", phase},
                {"count", t.count},
                {"total_s", Ns(t.total_s)},
                {"mean_s", Ns(t.total_s / static_cast<double>(std::max<int64_t>(1, t.count)))}};
      auto st = steady.find({d.segment_names[s], phase});
      if (st != steady.end()) {
        e["steady_count"] = st->second.count;
        e["steady_mean_s"] = Ns(st->second.total_s / static_cast<double>(st->second.count));
      }
      a.push_back(e);
    }
  }
  return a;
}

Json WaitsJson(const MeasurementsDoc& d) {
  Json a = Json::array();
  if (!d.recorder) return a;
  auto steady = SteadyTotals(d, FirstStepEnd(d));
  for (const auto& [key, t] : d.recorder->totals()) {
    if (key.second == "forward" || key.second == "backward") continue;
    Json e = {{"name", key.first}, {"phase", key.second}, {"count", t.count},
              {"total_s", Ns(t.total_s)}};
    auto st = steady.find(key);
    if (st != steady.end()) {
      e["steady_count"] = st->second.count;
      e["steady_total_s"] = Ns(st->second.total_s);
    }
    a.push_back(e);
  }
  return a;
}

Json CollectivesJson(const std::vector<CollectiveRecord>& records, double cutoff) {
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
  Json out = Json::array();
  for (const auto& [k, a] : agg) {
    auto kind = static_cast<profiles::Collective>(std::get<0>(k));
    double mean = a.time / static_cast<double>(a.count);
    double bytes = static_cast<double>(std::get<3>(k));
    // busbw = S / t * factor (nccl-tests PERFORMANCE.md), factor from profiles/collective.h.
    double busbw = mean > 0 ? bytes / mean * profiles::BusBwFactor(kind, std::get<2>(k)) : 0.0;
    out.push_back({{"kind", profiles::ToString(kind)},
                   {"group", std::get<1>(k)},
                   {"group_size", std::get<2>(k)},
                   {"bytes", std::get<3>(k)},
                   {"count", a.count},
                   {"time_s", Ns(mean)},
                   {"total_time_s", Ns(a.time)},
                   {"busbw_bytes_per_s", std::round(busbw)},
                   {"sent_bytes_per_call", a.sent / a.count},
                   {"emulated", a.emulated}});
    if (a.steady_count > 0) {
      out.back()["steady_count"] = a.steady_count;
      out.back()["steady_time_s"] = Ns(a.steady_time / static_cast<double>(a.steady_count));
    }
  }
  return out;
}

// The CUDA figures of one rank (absent on CPU runs, where they are 0).
void AddDeviceBytes(Json* j, int64_t allocated_peak, int64_t reserved_peak, int64_t used) {
  if (allocated_peak <= 0) return;
  (*j)["device_allocated_peak_bytes"] = allocated_peak;
  (*j)["device_reserved_peak_bytes"] = reserved_peak;
  (*j)["device_used_bytes"] = used;
}

Json MemoryJson(const std::vector<RankMemory>& mem) {
  Json per = Json::array();
  int64_t tracked = 0, rss = 0;
  int64_t reserved = 0, used = 0;
  bool cuda = false;
  for (const RankMemory& m : mem) {
    Json r = {{"rank", m.rank},
              {"tracked_peak_bytes", m.tracked_peak_bytes},
              {"rss_peak_bytes", m.rss_peak_bytes}};
    AddDeviceBytes(&r, m.device_allocated_peak_bytes, m.device_reserved_peak_bytes, m.device_used_bytes);
    if (m.device_allocated_peak_bytes > 0) {
      cuda = true;
      r["device_alloc_retries"] = m.device_alloc_retries;
    }
    per.push_back(r);
    tracked = std::max(tracked, m.tracked_peak_bytes);
    rss = std::max(rss, m.rss_peak_bytes);
    reserved = std::max(reserved, m.device_reserved_peak_bytes);
    used = std::max(used, m.device_used_bytes);
  }
  Json out{{"peak_tracked_bytes", tracked},
           {"peak_rss_bytes", rss},
           {"judged_on",
            cuda ? "peak_tracked_bytes: the CUDA caching allocator's peak allocated bytes "
                   "(torch.cuda.max_memory_allocated); reserved adds its cache, device_used the "
                   "CUDA context and NCCL buffers (cudaMemGetInfo)"
                 : "peak_tracked_bytes: tensor storage allocated through LibTorch's CPU "
                   "allocator (the CPU analogue of torch.cuda.max_memory_allocated); RSS "
                   "adds the process, libraries and allocator caches"},
           {"per_rank", per}};
  if (cuda) {
    out["peak_device_reserved_bytes"] = reserved;
    out["device_used_bytes"] = used;
  }
  return out;
}

// Per phase (phase_meter.h): the worst rank's peaks, rank 0's duration, and every rank's figures.
Json PhasesJson(const std::vector<RankPhases>& ranks) {
  Json out = Json::array();
  if (ranks.empty()) return out;
  for (int i = 0; i < kNumRunPhases; ++i) {
    auto idx = static_cast<size_t>(i);
    if (ranks[0][idx].count == 0) continue;
    int64_t tracked = 0, rss = 0, allocated = 0, reserved = 0, used = 0;
    Json per = Json::array();
    for (size_t r = 0; r < ranks.size(); ++r) {
      const PhasePeak& p = ranks[r][idx];
      Json e = {{"rank", r},
                {"count", p.count},
                {"duration_s", Ns(p.duration_s)},
                {"tracked_start_bytes", p.tracked_start_bytes},
                {"tracked_peak_bytes", p.tracked_peak_bytes},
                {"rss_peak_bytes", p.rss_peak_bytes}};
      AddDeviceBytes(&e, p.device_allocated_peak_bytes, p.device_reserved_peak_bytes, p.device_used_bytes);
      per.push_back(e);
      tracked = std::max(tracked, p.tracked_peak_bytes);
      rss = std::max(rss, p.rss_peak_bytes);
      allocated = std::max(allocated, p.device_allocated_peak_bytes);
      reserved = std::max(reserved, p.device_reserved_peak_bytes);
      used = std::max(used, p.device_used_bytes);
    }
    const PhasePeak& p0 = ranks[0][idx];
    Json ph = {{"name", PhaseName(static_cast<RunPhase>(i))},
               {"count", p0.count},
               {"duration_s", Ns(p0.duration_s)},
               {"peak_tracked_bytes", tracked},
               {"peak_rss_bytes", rss}};
    if (allocated > 0) {
      ph["peak_device_allocated_bytes"] = allocated;
      ph["peak_device_reserved_bytes"] = reserved;
      ph["device_used_bytes"] = used;
    }
    ph["per_rank"] = per;
    out.push_back(ph);
  }
  return out;
}

Json SummaryJson(const MeasurementsDoc& d) {
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
  return Json{{"steps_measured", n},
              {"mean_step_time_s", n ? Ns(time / static_cast<double>(n)) : 0.0},
              {"tokens_per_s", tps},
              {"model_flops_per_token", d.run.model_flops_per_token},
              {"achieved_flops_per_s", tps * d.run.model_flops_per_token}};
}

}  // namespace

void WriteMeasurements(const std::string& path, const MeasurementsDoc& d) {
  Json j;
  j["schema"] = kMeasurementsSchema;
  j["schema_version"] = kMeasurementsSchemaVersion;
  j["environment"] = EnvironmentJson(d.environment);
  j["model"] = {{"name", d.model}, {"parameters", d.run.parameters}};
  j["plan"] = model::PlanToJson(d.plan);
  j["run"] = {{"micro_batch", d.run.micro_batch},
              {"grad_accum", d.run.grad_accum},
              {"data_parallel_ranks", d.run.dp_world},
              {"seq_len", d.run.seq_len},
              {"global_batch", d.run.global_batch},
              {"tokens_per_step", d.run.global_batch * d.run.seq_len},
              {"resumed_from_step", d.run.resumed_from_step},
              {"data", d.run.data}};
  j["steps"] = StepsJson(d.steps);
  j["summary"] = SummaryJson(d);
  Json units = Json::array();
  for (const UnitInfo& u : d.units) {
    units.push_back({{"name", u.name},
                     {"numel", u.numel},
                     {"padded_numel", u.padded_numel},
                     {"shard_numel", u.shard_numel}});
  }
  j["units"] = units;
  j["compute"] = ComputeJson(d);
  j["waits"] = WaitsJson(d);
  j["collectives"] = CollectivesJson(d.collectives, FirstStepEnd(d));
  j["memory"] = MemoryJson(d.memory);
  j["phases"] = PhasesJson(d.phases);
  WriteFileAtomically(path, j.dump(2) + "\n");
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
