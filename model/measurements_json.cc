// measurements.json: written field by field, read strictly (every problem collected, then one
// error).
#include "model/measurements_json.h"

#include <functional>
#include <limits>

#include "model/errors.h"
#include "model/plan_json.h"
#include "model/strict_json.h"

namespace shardtune::model {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxCount = int64_t{1} << 50;
constexpr double kMaxSeconds = 1e7;  // 115 days: anything longer is a corrupted file

// Runs `read`, turning an InputError into one more problem (so all problems are reported).
void Try(std::vector<std::string>* problems, const std::function<void()>& read) {
  try {
    read();
  } catch (const InputError& e) {
    problems->push_back(e.what());
  }
}

Collective KindFromName(const std::string& s) {
  for (size_t i = 0; i < kCollectiveNames.size(); ++i) {
    if (s == kCollectiveNames[i]) return static_cast<Collective>(i);
  }
  return Collective::kAllGather;  // unreachable: RequiredEnum checked the name
}

// Reads the array at `key` of `r`, calling `each` with a reader of every element.
void ForEach(StrictReader& r, const std::string& key, std::vector<std::string>* problems,
             const std::function<void(StrictReader&)>& each) {
  const Json* arr = nullptr;
  Try(problems, [&] {
    const Json& v = r.RequiredValue(key);
    if (!v.is_array()) {
      throw InputError(r.Where(key) + ": expected an array, got " + Describe(v));
    }
    arr = &v;
  });
  if (!arr) return;
  for (size_t i = 0; i < arr->size(); ++i) {
    Try(problems, [&] {
      StrictReader e((*arr)[i], r.file(), r.pointer() + "/" + key + "/" + std::to_string(i));
      std::vector<std::string> inner;
      Try(&inner, [&] { each(e); });
      // After a bad key the rest are unread: Finish() would call them unknown.
      if (inner.empty()) Try(&inner, [&] { e.Finish(); });
      ThrowIfProblems(inner);
    });
  }
}

// A span's steady-state figures (written only when the run kept a trace of more than one step):
// "steady_count" and the seconds at `key`, both or neither (AddSteady).
void ReadSteady(StrictReader& e, const std::string& key, int64_t* count,
                std::optional<double>* seconds) {
  if (!e.Has(key)) return;
  *count = e.RequiredInt("steady_count", 1, kMaxCount);
  *seconds = e.RequiredNumber(key, 0, kMaxSeconds);
}

// The CUDA figures of one rank (absent on CPU runs: 0), as AddDeviceBytes writes them.
void ReadDeviceBytes(StrictReader& e, int64_t* allocated_peak, int64_t* reserved_peak,
                     int64_t* used) {
  *allocated_peak = e.OptionalInt("device_allocated_peak_bytes", 0, 0, kMaxCount);
  *reserved_peak = e.OptionalInt("device_reserved_peak_bytes", 0, 0, kMaxCount);
  *used = e.OptionalInt("device_used_bytes", 0, 0, kMaxCount);
}

void ReadEnvironment(StrictReader& top, Measurements* m, std::vector<std::string>* p) {
  Try(p, [&] {
    StrictReader e = top.RequiredObject("environment");
    MeasuredEnvironment& v = m->environment;
    Try(p, [&] { v.shardtune_version = e.RequiredString("shardtune_version"); });
    Try(p, [&] { v.torch_version = e.RequiredString("torch_version"); });
    Try(p, [&] { v.backend = e.RequiredString("backend"); });
    Try(p, [&] { v.device = e.RequiredString("device"); });
    Try(p, [&] { v.cpu_model = e.RequiredString("cpu_model"); });
    Try(p, [&] { v.hostname = e.RequiredString("hostname"); });
    Try(p, [&] { v.date_utc = e.RequiredString("date_utc"); });
    Try(p, [&] { v.world_size = static_cast<int>(e.RequiredInt("world_size", 1, 1 << 24)); });
    Try(p, [&] { v.emulated_world = static_cast<int>(e.RequiredInt("emulated_world", 0, 1 << 24)); });
    Try(p, [&] { v.threads_per_rank = static_cast<int>(e.RequiredInt("threads_per_rank", 1, 1 << 16)); });
    Try(p, [&] { v.blas = e.OptionalString("blas", ""); });
    Try(p, [&] { e.Finish(); });
  });
}

void ReadRun(StrictReader& top, Measurements* m, std::vector<std::string>* p) {
  Try(p, [&] {
    StrictReader r = top.RequiredObject("run");
    Try(p, [&] { m->micro_batch = static_cast<int>(r.RequiredInt("micro_batch", 1, 1 << 24)); });
    Try(p, [&] { m->grad_accum = static_cast<int>(r.RequiredInt("grad_accum", 1, 1 << 24)); });
    Try(p, [&] { m->data_parallel_ranks = static_cast<int>(r.RequiredInt("data_parallel_ranks", 1, 1 << 24)); });
    Try(p, [&] { m->seq_len = r.RequiredInt("seq_len", 1, kMaxCount); });
    Try(p, [&] { m->global_batch = r.RequiredInt("global_batch", 1, kMaxCount); });
    Try(p, [&] { m->tokens_per_step = r.RequiredInt("tokens_per_step", 1, kMaxCount); });
    Try(p, [&] { m->resumed_from_step = r.RequiredInt("resumed_from_step", 0, kMaxCount); });
    Try(p, [&] { m->data = r.RequiredString("data"); });
    Try(p, [&] { r.Finish(); });
  });
}

void ReadSummary(StrictReader& top, Measurements* m, std::vector<std::string>* p) {
  Try(p, [&] {
    StrictReader s = top.RequiredObject("summary");
    Try(p, [&] { m->steps_measured = s.RequiredInt("steps_measured", 1, kMaxCount); });
    Try(p, [&] { m->mean_step_time_s = s.RequiredNumber("mean_step_time_s", 1e-9, kMaxSeconds); });
    Try(p, [&] { m->tokens_per_s = s.RequiredNumber("tokens_per_s", 0, 1e15); });
    Try(p, [&] { m->model_flops_per_token = s.RequiredNumber("model_flops_per_token", 0, 1e30); });
    Try(p, [&] { m->achieved_flops_per_s = s.RequiredNumber("achieved_flops_per_s", 0, 1e30); });
    Try(p, [&] { s.Finish(); });
  });
}

void ReadLists(StrictReader& top, Measurements* m, std::vector<std::string>* p) {
  ForEach(top, "steps", p, [&](StrictReader& e) {
    MeasuredStep s;
    s.step = e.RequiredInt("step", 1, kMaxCount);
    s.loss = e.RequiredNumber("loss", -1e30, 1e30);
    s.lr = e.RequiredNumber("lr", 0, 1e6);
    s.grad_norm = e.RequiredNumber("grad_norm", 0, 1e300);
    s.time_s = e.RequiredNumber("time_s", 0, kMaxSeconds);
    s.tokens = e.RequiredInt("tokens", 1, kMaxCount);
    s.tokens_per_s = e.RequiredNumber("tokens_per_s", 0, 1e15);
    m->steps.push_back(s);
  });
  ForEach(top, "units", p, [&](StrictReader& e) {
    MeasuredUnit u;
    u.name = e.RequiredString("name");
    u.numel = e.RequiredInt("numel", 0, kMaxCount);
    u.padded_numel = e.RequiredInt("padded_numel", 0, kMaxCount);
    u.shard_numel = e.RequiredInt("shard_numel", 0, kMaxCount);
    m->units.push_back(u);
  });
  ForEach(top, "compute", p, [&](StrictReader& e) {
    MeasuredCompute c;
    c.segment = e.RequiredString("segment");
    c.unit = e.RequiredString("unit");
    c.phase = e.RequiredEnum("phase", {"forward", "backward"});
    c.count = e.RequiredInt("count", 1, kMaxCount);
    c.total_s = e.RequiredNumber("total_s", 0, kMaxSeconds);
    c.mean_s = e.RequiredNumber("mean_s", 0, kMaxSeconds);
    ReadSteady(e, "steady_mean_s", &c.steady_count, &c.steady_mean_s);
    m->compute.push_back(c);
  });
}

void ReadCommunication(StrictReader& top, Measurements* m, std::vector<std::string>* p) {
  ForEach(top, "waits", p, [&](StrictReader& e) {
    MeasuredWait w;
    w.name = e.RequiredString("name");
    w.phase = e.RequiredString("phase");
    w.count = e.RequiredInt("count", 1, kMaxCount);
    w.total_s = e.RequiredNumber("total_s", 0, kMaxSeconds);
    ReadSteady(e, "steady_total_s", &w.steady_count, &w.steady_total_s);
    m->waits.push_back(w);
  });
  ForEach(top, "collectives", p, [&](StrictReader& e) {
    MeasuredCollective c;
    c.kind = KindFromName(e.RequiredEnum("kind", {kCollectiveNames.begin(), kCollectiveNames.end()}));
    c.group = e.RequiredEnum("group", {"world", "shard", "replicate", "cp", "ep", "expert_shard"});
    c.group_size = static_cast<int>(e.RequiredInt("group_size", 1, 1 << 24));
    c.bytes = e.RequiredInt("bytes", 0, kMaxCount);
    c.count = e.RequiredInt("count", 1, kMaxCount);
    c.time_s = e.RequiredNumber("time_s", 0, kMaxSeconds);
    c.total_time_s = e.RequiredNumber("total_time_s", 0, kMaxSeconds);
    c.busbw_bytes_per_s = e.RequiredNumber("busbw_bytes_per_s", 0, 1e18);
    c.sent_bytes_per_call = e.RequiredInt("sent_bytes_per_call", 0, kMaxCount);
    c.emulated = e.OptionalBool("emulated", false);
    ReadSteady(e, "steady_time_s", &c.steady_count, &c.steady_time_s);
    m->collectives.push_back(c);
  });
}

void ReadMemory(StrictReader& top, Measurements* m, std::vector<std::string>* p) {
  Try(p, [&] {
    StrictReader r = top.RequiredObject("memory");
    Try(p, [&] { m->peak_tracked_bytes = r.RequiredInt("peak_tracked_bytes", 1, kMaxCount); });
    Try(p, [&] { m->peak_rss_bytes = r.RequiredInt("peak_rss_bytes", 0, kMaxCount); });
    Try(p, [&] { m->memory_judged_on = r.OptionalString("judged_on", ""); });
    Try(p, [&] { m->peak_device_reserved_bytes = r.OptionalInt("peak_device_reserved_bytes", 0, 0, kMaxCount); });
    Try(p, [&] { m->device_used_bytes = r.OptionalInt("device_used_bytes", 0, 0, kMaxCount); });
    ForEach(r, "per_rank", p, [&](StrictReader& e) {
      MeasuredRankMemory k;
      k.rank = static_cast<int>(e.RequiredInt("rank", 0, 1 << 24));
      k.tracked_peak_bytes = e.RequiredInt("tracked_peak_bytes", 0, kMaxCount);
      k.rss_peak_bytes = e.RequiredInt("rss_peak_bytes", 0, kMaxCount);
      ReadDeviceBytes(e, &k.device_allocated_peak_bytes, &k.device_reserved_peak_bytes,
                      &k.device_used_bytes);
      k.device_alloc_retries = e.OptionalInt("device_alloc_retries", 0, 0, kMaxCount);
      m->memory_per_rank.push_back(k);
    });
    Try(p, [&] { r.Finish(); });
  });
}

void ReadPhases(StrictReader& top, Measurements* m, std::vector<std::string>* p) {
  if (!top.Has("phases")) return;
  ForEach(top, "phases", p, [&](StrictReader& e) {
    MeasuredPhase ph;
    ph.name = e.RequiredEnum("name", {"model load", "step 0", "steady step", "checkpoint save", "resume"});
    ph.count = e.RequiredInt("count", 1, kMaxCount);
    ph.duration_s = e.RequiredNumber("duration_s", 0, kMaxSeconds);
    ph.peak_tracked_bytes = e.RequiredInt("peak_tracked_bytes", 0, kMaxCount);
    ph.peak_rss_bytes = e.RequiredInt("peak_rss_bytes", 0, kMaxCount);
    // Written for CUDA runs only.
    ph.peak_device_allocated_bytes = e.OptionalInt("peak_device_allocated_bytes", 0, 0, kMaxCount);
    ph.peak_device_reserved_bytes = e.OptionalInt("peak_device_reserved_bytes", 0, 0, kMaxCount);
    ph.device_used_bytes = e.OptionalInt("device_used_bytes", 0, 0, kMaxCount);
    std::vector<std::string> inner;
    ForEach(e, "per_rank", &inner, [&](StrictReader& r) {
      MeasuredPhaseRank k;
      k.rank = static_cast<int>(r.RequiredInt("rank", 0, 1 << 24));
      k.count = r.RequiredInt("count", 0, kMaxCount);
      k.duration_s = r.RequiredNumber("duration_s", 0, kMaxSeconds);
      k.tracked_start_bytes = r.RequiredInt("tracked_start_bytes", 0, kMaxCount);
      k.tracked_peak_bytes = r.RequiredInt("tracked_peak_bytes", 0, kMaxCount);
      k.rss_peak_bytes = r.RequiredInt("rss_peak_bytes", 0, kMaxCount);
      ReadDeviceBytes(r, &k.device_allocated_peak_bytes, &k.device_reserved_peak_bytes,
                      &k.device_used_bytes);
      ph.per_rank.push_back(k);
    });
    ThrowIfProblems(inner);
    if (ph.per_rank.empty()) {
      throw InputError(e.Where("per_rank") + ": expected one entry per rank, got an empty list");
    }
    m->phases.push_back(ph);
  });
}

// Cross-field rules: a file that parses but cannot be used.
void CheckComplete(const Measurements& m, const std::string& name, std::vector<std::string>* p) {
  if (m.steps.empty()) p->push_back(name + ":/steps: expected at least one step, got an empty list");
  if (m.compute.empty()) {
    p->push_back(name + ":/compute: expected the per-segment forward and backward spans, got an empty list");
  }
  if (m.memory_per_rank.empty()) {
    p->push_back(name + ":/memory/per_rank: expected one entry per rank, got an empty list");
  }
  if (m.environment.world_size > 1 && m.environment.emulated_world == 0 && m.collectives.empty()) {
    p->push_back(name + ":/collectives: expected the collectives of a " +
                 std::to_string(m.environment.world_size) + "-rank run, got an empty list");
  }
}

}  // namespace

namespace {

using OJson = nlohmann::ordered_json;

// The CUDA figures of one rank or phase (absent on CPU runs, where they are 0).
void AddDeviceBytes(OJson* j, int64_t allocated_peak, int64_t reserved_peak, int64_t used) {
  if (allocated_peak <= 0) return;
  (*j)["device_allocated_peak_bytes"] = allocated_peak;
  (*j)["device_reserved_peak_bytes"] = reserved_peak;
  (*j)["device_used_bytes"] = used;
}

// A span's steady-state figures, when the run has them (ReadSteady).
void AddSteady(OJson* j, const std::string& key, int64_t count,
               const std::optional<double>& seconds) {
  if (!seconds) return;
  (*j)["steady_count"] = count;
  (*j)[key] = *seconds;
}

OJson EnvironmentJson(const MeasuredEnvironment& e) {
  OJson j{{"shardtune_version", e.shardtune_version},
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

OJson MemoryJson(const Measurements& m) {
  OJson per = OJson::array();
  bool cuda = false;
  for (const MeasuredRankMemory& r : m.memory_per_rank) {
    OJson e = {{"rank", r.rank}, {"tracked_peak_bytes", r.tracked_peak_bytes}, {"rss_peak_bytes", r.rss_peak_bytes}};
    AddDeviceBytes(&e, r.device_allocated_peak_bytes, r.device_reserved_peak_bytes, r.device_used_bytes);
    if (r.device_allocated_peak_bytes > 0) {
      cuda = true;
      e["device_alloc_retries"] = r.device_alloc_retries;
    }
    per.push_back(e);
  }
  OJson out{{"peak_tracked_bytes", m.peak_tracked_bytes},
            {"peak_rss_bytes", m.peak_rss_bytes},
            {"judged_on", m.memory_judged_on},
            {"per_rank", per}};
  if (cuda) {
    out["peak_device_reserved_bytes"] = m.peak_device_reserved_bytes;
    out["device_used_bytes"] = m.device_used_bytes;
  }
  return out;
}

OJson PhasesJson(const std::vector<MeasuredPhase>& phases) {
  OJson out = OJson::array();
  for (const MeasuredPhase& ph : phases) {
    OJson per = OJson::array();
    for (const MeasuredPhaseRank& r : ph.per_rank) {
      OJson e = {{"rank", r.rank},
                 {"count", r.count},
                 {"duration_s", r.duration_s},
                 {"tracked_start_bytes", r.tracked_start_bytes},
                 {"tracked_peak_bytes", r.tracked_peak_bytes},
                 {"rss_peak_bytes", r.rss_peak_bytes}};
      AddDeviceBytes(&e, r.device_allocated_peak_bytes, r.device_reserved_peak_bytes, r.device_used_bytes);
      per.push_back(e);
    }
    OJson j = {{"name", ph.name},
               {"count", ph.count},
               {"duration_s", ph.duration_s},
               {"peak_tracked_bytes", ph.peak_tracked_bytes},
               {"peak_rss_bytes", ph.peak_rss_bytes}};
    if (ph.peak_device_allocated_bytes > 0) {
      j["peak_device_allocated_bytes"] = ph.peak_device_allocated_bytes;
      j["peak_device_reserved_bytes"] = ph.peak_device_reserved_bytes;
      j["device_used_bytes"] = ph.device_used_bytes;
    }
    j["per_rank"] = per;
    out.push_back(j);
  }
  return out;
}

}  // namespace

OJson MeasurementsToJson(const Measurements& m) {
  OJson j;
  j["schema"] = kMeasurementsSchema;
  j["schema_version"] = kMeasurementsSchemaVersion;
  j["environment"] = EnvironmentJson(m.environment);
  j["model"] = {{"name", m.model_name}, {"parameters", m.parameters}};
  j["plan"] = PlanToJson(m.plan);
  j["run"] = {{"micro_batch", m.micro_batch},
              {"grad_accum", m.grad_accum},
              {"data_parallel_ranks", m.data_parallel_ranks},
              {"seq_len", m.seq_len},
              {"global_batch", m.global_batch},
              {"tokens_per_step", m.tokens_per_step},
              {"resumed_from_step", m.resumed_from_step},
              {"data", m.data}};
  OJson steps = OJson::array();
  for (const MeasuredStep& s : m.steps) {
    steps.push_back({{"step", s.step},
                     {"loss", s.loss},
                     {"lr", s.lr},
                     {"grad_norm", s.grad_norm},
                     {"time_s", s.time_s},
                     {"tokens", s.tokens},
                     {"tokens_per_s", s.tokens_per_s}});
  }
  j["steps"] = steps;
  j["summary"] = {{"steps_measured", m.steps_measured},
                  {"mean_step_time_s", m.mean_step_time_s},
                  {"tokens_per_s", m.tokens_per_s},
                  {"model_flops_per_token", m.model_flops_per_token},
                  {"achieved_flops_per_s", m.achieved_flops_per_s}};
  OJson units = OJson::array();
  for (const MeasuredUnit& u : m.units) {
    units.push_back({{"name", u.name}, {"numel", u.numel}, {"padded_numel", u.padded_numel}, {"shard_numel", u.shard_numel}});
  }
  j["units"] = units;
  OJson compute = OJson::array();
  for (const MeasuredCompute& c : m.compute) {
    OJson e = {{"segment", c.segment}, {"unit", c.unit},       {"phase", c.phase},
               {"count", c.count},     {"total_s", c.total_s}, {"mean_s", c.mean_s}};
    AddSteady(&e, "steady_mean_s", c.steady_count, c.steady_mean_s);
    compute.push_back(e);
  }
  j["compute"] = compute;
  OJson waits = OJson::array();
  for (const MeasuredWait& w : m.waits) {
    OJson e = {{"name", w.name}, {"phase", w.phase}, {"count", w.count}, {"total_s", w.total_s}};
    AddSteady(&e, "steady_total_s", w.steady_count, w.steady_total_s);
    waits.push_back(e);
  }
  j["waits"] = waits;
  OJson collectives = OJson::array();
  for (const MeasuredCollective& c : m.collectives) {
    OJson e = {{"kind", ToString(c.kind)},
               {"group", c.group},
               {"group_size", c.group_size},
               {"bytes", c.bytes},
               {"count", c.count},
               {"time_s", c.time_s},
               {"total_time_s", c.total_time_s},
               {"busbw_bytes_per_s", c.busbw_bytes_per_s},
               {"sent_bytes_per_call", c.sent_bytes_per_call},
               {"emulated", c.emulated}};
    AddSteady(&e, "steady_time_s", c.steady_count, c.steady_time_s);
    collectives.push_back(e);
  }
  j["collectives"] = collectives;
  j["memory"] = MemoryJson(m);
  j["phases"] = PhasesJson(m.phases);
  return j;
}

bool Measurements::HasSteadyCompute() const {
  for (const auto& c : compute) {
    if (!c.steady_mean_s) return false;
  }
  return !compute.empty();
}

std::optional<double> Measurements::OptimizerPerStepS() const {
  for (const auto& w : waits) {
    if (w.phase != "optimizer") continue;
    if (w.steady_total_s && w.steady_count > 0) return *w.steady_total_s / static_cast<double>(w.steady_count);
    return w.total_s / static_cast<double>(w.count);
  }
  return std::nullopt;
}

Measurements MeasurementsFromJson(const Json& j, const std::string& name) {
  Measurements m;
  m.path = name;
  StrictReader top(j, name);
  top.CheckSchema(kMeasurementsSchema, kMeasurementsSchemaVersion);
  m.schema_version = static_cast<int>(j.at("schema_version").get<int64_t>());
  std::vector<std::string> p;
  ReadEnvironment(top, &m, &p);
  Try(&p, [&] {
    StrictReader r = top.RequiredObject("model");
    std::vector<std::string> inner;
    Try(&inner, [&] { m.model_name = r.RequiredString("name"); });
    Try(&inner, [&] { m.parameters = r.RequiredInt("parameters", 1, kMaxCount); });
    Try(&inner, [&] { r.Finish(); });
    ThrowIfProblems(inner);
  });
  Try(&p, [&] {
    const Json& plan = top.RequiredValue("plan");
    m.plan = PlanFromJson(plan, name + ":/plan");
  });
  ReadRun(top, &m, &p);
  ReadSummary(top, &m, &p);
  ReadLists(top, &m, &p);
  ReadCommunication(top, &m, &p);
  ReadMemory(top, &m, &p);
  ReadPhases(top, &m, &p);
  Try(&p, [&] { top.Finish(); });
  if (p.empty()) CheckComplete(m, name, &p);
  ThrowIfProblems(p);
  return m;
}

Measurements ReadMeasurementsFile(const std::string& path) {
  return MeasurementsFromJson(ReadJsonFile(path), path);
}

}  // namespace shardtune::model
