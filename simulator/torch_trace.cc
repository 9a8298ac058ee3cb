// Reading a PyTorch profiler trace and fitting the cost model's constants to it (torch_trace.h).
#include "simulator/torch_trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <unordered_map>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"
#include "simulator/step_walk.h"

namespace shardtune::sim {
namespace {

std::string G(double v) { return model::FormatNumber(v, "%.4g"); }

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

using model::Lower;

// Host calls that block until the device (or a stream, or an event) is done; a blocking
// cudaMemcpy (tensor.item(), .cpu()) waits for the stream too.
bool IsBlockingCall(const std::string& name) {
  return name == "cudaDeviceSynchronize" || name == "cudaStreamSynchronize" ||
         name == "cudaEventSynchronize" || name == "cudaMemcpy" || name == "cuCtxSynchronize" ||
         name == "cuStreamSynchronize" || name == "cuEventSynchronize";
}

// FSDP2's per-unit hooks the simulator charges host_per_fsdp_hook for (step_walk_forward.cc:
// pre-forward and pre-backward unshard, post-backward reduce), named "FSDP::<hook> (<fqn>)".
bool IsFsdpHook(const std::string& name) {
  for (const char* hook : {"FSDP::pre_forward", "FSDP::pre_backward", "FSDP::post_backward"}) {
    size_t n = std::char_traits<char>::length(hook);
    if (name.compare(0, n, hook) == 0 && (name.size() == n || name.compare(n, 2, " (") == 0)) return true;
  }
  return false;
}

struct Span {
  double ts_us = 0, dur_us = 0;
};

// The checked fields of one event used by the reader.
class EventReader {
 public:
  EventReader(const nlohmann::json& ev, const std::string& name, size_t index)
      : ev_(ev), where_(name + ":/traceEvents/" + std::to_string(index)) {
    if (!ev.is_object()) {
      throw InputError(where_ + ": expected an event object, got " + model::Describe(ev));
    }
  }
  std::string Str(const char* key) const {
    auto it = ev_.find(key);
    if (it == ev_.end() || it->is_null()) return "";
    if (!it->is_string()) {
      throw InputError(where_ + "/" + key + ": expected a string, got " + model::Describe(*it));
    }
    return it->get<std::string>();
  }
  double Number(const char* key, double min) const {
    auto it = ev_.find(key);
    if (it == ev_.end()) throw InputError(where_ + ": expected \"" + key + "\" (a number), missing");
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < min) {
      throw InputError(where_ + "/" + key + ": expected a number" +
                       (min > -1e300 ? " >= " + G(min) : "") + ", got " + model::Describe(*it));
    }
    return it->get<double>();
  }
  Span Complete() const { return {Number("ts", -1e308), Number("dur", 0)}; }
  // args.correlation, or -1 when absent.
  int64_t Correlation() const {
    auto args = ev_.find("args");
    if (args == ev_.end() || !args->is_object()) return -1;
    auto c = args->find("correlation");
    if (c == args->end()) return -1;
    if (!c->is_number_integer()) {
      throw InputError(where_ + "/args/correlation: expected an integer, got " + model::Describe(*c));
    }
    return c->get<int64_t>();
  }
  int64_t Device() const {
    auto args = ev_.find("args");
    if (args == ev_.end() || !args->is_object()) return -1;
    auto d = args->find("device");
    return d != args->end() && d->is_number_integer() ? d->get<int64_t>() : -1;
  }

 private:
  const nlohmann::json& ev_;
  std::string where_;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

TraceStep MedianStep(const std::vector<TraceStep>& steps) {
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const auto& s : steps) v.push_back(static_cast<double>(s.*field));
    return Median(v);
  };
  TraceStep m;
  m.step = steps.back().step;
  m.wall_s = med(&TraceStep::wall_s);
  m.gemm_s = med(&TraceStep::gemm_s);
  m.attention_s = med(&TraceStep::attention_s);
  m.memory_bound_s = med(&TraceStep::memory_bound_s);
  m.communication_s = med(&TraceStep::communication_s);
  m.host_copy_s = med(&TraceStep::host_copy_s);
  m.device_activities = std::llround(med(&TraceStep::device_activities));
  m.launches = std::llround(med(&TraceStep::launches));
  m.sync_s = med(&TraceStep::sync_s);
  m.launch_call_s = med(&TraceStep::launch_call_s);
  m.fsdp_hook_s = med(&TraceStep::fsdp_hook_s);
  m.fsdp_hooks = std::llround(med(&TraceStep::fsdp_hooks));
  return m;
}

}  // namespace

KernelClass ClassifyKernel(const std::string& name) {
  std::string n = Lower(name);
  if (n.rfind("nccl", 0) == 0) return KernelClass::kCommunication;
  if (n.rfind("memcpy htod", 0) == 0 || n.rfind("memcpy dtoh", 0) == 0) return KernelClass::kHostCopy;
  if (Contains(n, "flash") || Contains(n, "fmha") || Contains(n, "sdpa") || Contains(n, "attention")) {
    return KernelClass::kAttention;
  }
  if (Contains(n, "gemm") || n.rfind("nvjet", 0) == 0 || Contains(n, "xmma") || n.rfind("cublas", 0) == 0 ||
      Contains(n, "splitkreduce")) {
    return KernelClass::kGemm;
  }
  return KernelClass::kMemoryBound;
}

TorchTrace TorchTraceFromJson(const nlohmann::json& doc, const std::string& name) {
  const nlohmann::json* events = nullptr;
  if (doc.is_array()) {
    events = &doc;  // the Trace Event Format's bare-array form
  } else if (doc.is_object() && doc.contains("traceEvents")) {
    events = &doc["traceEvents"];
    if (!events->is_array()) {
      throw InputError(name + ":/traceEvents: expected an array of events, got " + model::Describe(*events));
    }
  } else {
    throw InputError(name + ": expected a Chrome trace (an object with \"traceEvents\"), got " +
                     model::Describe(doc));
  }
  struct Device {
    Span span;
    int64_t correlation;
    KernelClass cls;
  };
  std::vector<std::pair<Span, int>> steps;  // ProfilerStep spans and N
  std::unordered_map<int64_t, Span> launch_of;
  std::vector<Span> blocking, hooks;
  std::vector<Device> device;
  std::set<int64_t> devices_seen;
  for (size_t i = 0; i < events->size(); ++i) {
    EventReader ev((*events)[i], name, i);
    if (ev.Str("ph") != "X") continue;
    std::string cat = ev.Str("cat"), ev_name = ev.Str("name");
    if ((cat == "user_annotation" || cat == "cpu_op") && ev_name.rfind("ProfilerStep#", 0) == 0) {
      int n = 0;
      try {
        n = std::stoi(ev_name.substr(13));
      } catch (const std::exception&) {
        throw InputError(name + ":/traceEvents/" + std::to_string(i) +
                         "/name: expected \"ProfilerStep#<step>\", got \"" + ev_name + "\"");
      }
      steps.push_back({ev.Complete(), n});
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      Span s = ev.Complete();
      if (IsBlockingCall(ev_name)) blocking.push_back(s);
      int64_t c = ev.Correlation();
      if (c >= 0) launch_of[c] = s;
    } else if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      KernelClass cls = cat == "gpu_memset" ? KernelClass::kMemoryBound : ClassifyKernel(ev_name);
      device.push_back({ev.Complete(), ev.Correlation(), cls});
      int64_t d = ev.Device();
      if (d >= 0) devices_seen.insert(d);
    } else if (IsFsdpHook(ev_name) && (cat == "user_annotation" || cat == "cpu_op")) {
      hooks.push_back(ev.Complete());
    }
  }
  if (steps.empty()) {
    throw InputError(name + ": no \"ProfilerStep#N\" span: record with torch.profiler.profile(schedule=...) "
                            "and call prof.step() after every training step");
  }
  if (device.empty()) {
    throw InputError(name + ": no GPU kernel in the trace: record with activities=[ProfilerActivity.CPU, "
                            "ProfilerActivity.CUDA]");
  }
  if (devices_seen.size() > 1) {
    throw InputError(name + ": kernels of " + std::to_string(devices_seen.size()) +
                     " devices: calibrate from one rank's trace");
  }
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return a.first.ts_us < b.first.ts_us; });
  TorchTrace t;
  t.path = name;
  if (doc.is_object()) {
    auto props = doc.find("deviceProperties");
    if (props != doc.end() && props->is_array() && !props->empty() && (*props)[0].is_object()) {
      auto n = (*props)[0].find("name");
      if (n != (*props)[0].end() && n->is_string()) t.device = n->get<std::string>();
    }
    auto base = doc.find("baseTimeNanoseconds");
    if (base != doc.end() && base->is_number_integer() && base->get<int64_t>() > 0) {
      std::time_t secs = static_cast<std::time_t>(base->get<int64_t>() / 1000000000);
      std::tm utc{};
      char day[16];
      if (gmtime_r(&secs, &utc) && std::strftime(day, sizeof day, "%Y-%m-%d", &utc) > 0) t.date = day;
    }
  }
  for (const auto& [span, n] : steps) {
    TraceStep s;
    s.step = n;
    s.wall_s = span.dur_us * 1e-6;
    t.steps.push_back(s);
  }
  // The step whose span holds host time `ts_us`, or -1.
  auto step_at = [&](double ts_us) -> int {
    auto it = std::upper_bound(steps.begin(), steps.end(), ts_us,
                               [](double x, const auto& st) { return x < st.first.ts_us; });
    if (it == steps.begin()) return -1;
    --it;
    if (ts_us > it->first.ts_us + it->first.dur_us) return -1;
    return static_cast<int>(it - steps.begin());
  };
  std::vector<std::set<int64_t>> launches(steps.size());
  int64_t unmatched = 0;
  for (const Device& d : device) {
    auto it = d.correlation >= 0 ? launch_of.find(d.correlation) : launch_of.end();
    int k = step_at(it != launch_of.end() ? it->second.ts_us : d.span.ts_us);
    if (it == launch_of.end()) ++unmatched;
    if (k < 0) continue;
    TraceStep& s = t.steps[static_cast<size_t>(k)];
    double dur = d.span.dur_us * 1e-6;
    switch (d.cls) {
      case KernelClass::kGemm: s.gemm_s += dur; break;
      case KernelClass::kAttention: s.attention_s += dur; break;
      case KernelClass::kCommunication: s.communication_s += dur; break;
      case KernelClass::kMemoryBound: s.memory_bound_s += dur; break;
      case KernelClass::kHostCopy: s.host_copy_s += dur; break;
    }
    ++s.device_activities;
    if (it != launch_of.end()) {
      if (launches[static_cast<size_t>(k)].insert(d.correlation).second) {
        s.launch_call_s += it->second.dur_us * 1e-6;
      }
    }
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    t.steps[k].launches = static_cast<int64_t>(launches[k].size());
  }
  for (const Span& b : blocking) {
    int k = step_at(b.ts_us);
    if (k >= 0) t.steps[static_cast<size_t>(k)].sync_s += b.dur_us * 1e-6;
  }
  for (const Span& h : hooks) {
    int k = step_at(h.ts_us);
    if (k < 0) continue;
    t.steps[static_cast<size_t>(k)].fsdp_hook_s += h.dur_us * 1e-6;
    ++t.steps[static_cast<size_t>(k)].fsdp_hooks;
  }
  if (unmatched > 0) {
    t.warnings.push_back(std::to_string(unmatched) + " of " + std::to_string(device.size()) +
                         " device activities have no launch call in the trace; they were placed "
                         "by their own start time");
  }
  std::vector<TraceStep> used(t.steps.begin() + (t.steps.size() >= 3 ? 1 : 0), t.steps.end());
  if (t.steps.size() < 3) {
    t.warnings.push_back("only " + std::to_string(t.steps.size()) +
                         " profiled step(s): the first, with its warm-up, is used too (profile 3 "
                         "or more: schedule(active=3))");
  }
  t.steps_used = static_cast<int>(used.size());
  t.typical = MedianStep(used);
  return t;
}

TorchTrace ReadTorchTrace(const std::string& path) {
  if (model::EndsWith(path, ".gz")) {
    throw InputError(path + ": a gzip-compressed trace: gunzip it first (or export with "
                            "tensorboard_trace_handler(use_gzip=False))");
  }
  return TorchTraceFromJson(model::ReadJsonFile(path), path);
}

StepWork SteadyStepWork(const StepProgram& program, bool fused_optimizer, bool one_rank) {
  StepWork w;
  w.fused_optimizer = fused_optimizer;
  w.one_rank = one_rank;
  for (const ProgramOp& op : program.ops) {
    if (op.step != 1) continue;
    double times = 1;
    if (program.repeats_of_last_leading_micro_batch > 0 && op.micro == kWalkedLeadingMicroBatches - 1) {
      times += program.repeats_of_last_leading_micro_batch;
    }
    w.host_kernels += static_cast<int64_t>(times) * op.host_kernels;
    w.host_hooks += static_cast<int64_t>(times) * op.host_hooks;
    if (op.kind == OpKind::kBackward) {
      w.host_python_kernels += static_cast<int64_t>(times) * op.host_python_kernels;
      w.host_autograd_kernels += static_cast<int64_t>(times) * (op.host_kernels - op.host_python_kernels);
    } else if (op.kind != OpKind::kOptimizer) {  // the optimizer's launches are in host_params
      w.host_python_kernels += static_cast<int64_t>(times) * op.host_kernels;
    }
    w.host_params += static_cast<int64_t>(times) * op.host_params;
    if (op.stream == Stream::kHost) continue;  // an offloaded optimizer runs on the CPU
    w.matmul_flops += times * op.matmul_flops;
    w.attention_flops += times * op.attention_flops;
    w.memory_bytes += times * op.memory_bytes;
  }
  return w;
}

TraceCalibration CalibrateFromTrace(const TorchTrace& trace, const StepWork& work,
                                    const profiles::GpuSpec& gpu, model::DType dtype,
                                    const CostConstants& base) {
  TraceCalibration out;
  out.costs = base;
  const TraceStep& m = trace.typical;
  const double peak = DensePeak(gpu, dtype).count(), bw = gpu.memory_bandwidth.count();
  auto efficiency = [&](const char* term, double work_units, double per_unit_peak, double measured_s,
                        double CostConstants::*field) {
    TraceFitRow r;
    r.term = term;
    r.measured = measured_s;
    r.base = base.*field;
    r.predicted = work_units > 0 ? work_units / (per_unit_peak * r.base) : 0;
    r.fitted = r.base;
    if (work_units > 0 && measured_s > 0) {
      r.fitted = work_units / (per_unit_peak * measured_s);
      r.fitted_from_trace = true;
      out.costs.*field = r.fitted;
      if (r.fitted > 1) {  // a trace has CUDA kernels: a real GPU, its peaks from the catalog
        out.warnings.push_back(std::string(term) + " " + G(r.fitted) +
                               " > 1: the program counts more work than the device's peak allows in "
                               "the measured time (work the traced job does not do, or kernels missing "
                               "from the trace)");
      }
    } else {
      out.warnings.push_back(std::string(term) + " kept at " + G(r.base) +
                             (work_units > 0 ? ": the trace has no such kernels"
                                             : ": the simulated plan has no such work"));
    }
    out.rows.push_back(r);
  };
  efficiency("matmul_efficiency", work.matmul_flops, peak, m.gemm_s, &CostConstants::matmul_efficiency);
  efficiency("attention_efficiency", work.attention_flops, peak, m.attention_s,
             &CostConstants::attention_efficiency);
  efficiency("memory_efficiency", work.memory_bytes, bw, m.memory_bound_s, &CostConstants::memory_efficiency);

  Seconds CostConstants::*hook_field =
      work.one_rank ? &CostConstants::host_per_fsdp_hook_one_rank : &CostConstants::host_per_fsdp_hook;
  TraceFitRow hook;
  hook.term = work.one_rank ? "host_per_fsdp_hook_one_rank_s" : "host_per_fsdp_hook_s";
  hook.base = hook.fitted = (base.*hook_field).count();
  hook.measured = m.fsdp_hook_s;
  hook.predicted = hook.base * static_cast<double>(work.host_hooks);
  if (m.fsdp_hooks > 0 && work.host_hooks > 0) {
    hook.fitted = m.fsdp_hook_s / static_cast<double>(m.fsdp_hooks);
    hook.fitted_from_trace = true;
    out.costs.*hook_field = Seconds::Of(hook.fitted);
  } else if (work.host_hooks > 0) {
    out.warnings.push_back(hook.term + " kept at " + G(hook.base) +
                           ": the trace has no FSDP::pre_forward / pre_backward / post_backward spans");
  }
  out.rows.push_back(hook);

  // The kernels' and the optimizer's host time with the base constants, and the factor that
  // makes it the measured rest.
  const Seconds CostConstants::*param_field =
      work.fused_optimizer ? &CostConstants::host_per_fused_optimizer_param : &CostConstants::host_per_optimizer_param;
  const double kernels_base = base.host_per_kernel.count() * static_cast<double>(work.host_python_kernels) +
                              base.host_per_backward_kernel.count() * static_cast<double>(work.host_autograd_kernels) +
                              (base.*param_field).count() * static_cast<double>(work.host_params);
  TraceFitRow kernel;
  kernel.term = "host_per_kernel_s";
  kernel.base = kernel.fitted = base.host_per_kernel.count();
  double busy = std::max(0.0, m.wall_s - m.sync_s);
  kernel.measured = busy;
  kernel.predicted = kernels_base + hook.predicted;
  if (kernels_base > 0 && busy > 0) {
    double rest = busy - (out.costs.*hook_field).count() * static_cast<double>(work.host_hooks);
    const double factor = std::max(0.0, rest) / kernels_base;
    kernel.fitted = factor * base.host_per_kernel.count();
    kernel.fitted_from_trace = true;
    out.costs.host_per_kernel = Seconds::Of(kernel.fitted);
    out.costs.host_per_backward_kernel = Seconds::Of(factor * base.host_per_backward_kernel.count());
    out.costs.host_per_optimizer_param = Seconds::Of(factor * base.host_per_optimizer_param.count());
    out.costs.host_per_fused_optimizer_param = Seconds::Of(factor * base.host_per_fused_optimizer_param.count());
    if (rest <= 0) {
      out.warnings.push_back("the FSDP2 hooks alone fill the host's busy time: host_per_kernel_s is 0");
    }
  } else {
    out.warnings.push_back("host_per_kernel_s kept at " + G(kernel.base) +
                           ": no host busy time or no modelled kernels");
  }
  out.rows.push_back(kernel);
  // A launch call that waits for a slot in the device's full launch queue is the GPU, not the
  // host: its time inflates the host's busy time.
  if (busy > 0 && m.launch_call_s > 0.2 * busy) {
    out.warnings.push_back("launch calls took " + G(100 * m.launch_call_s / busy) +
                           " % of the host's busy time (a full launch queue: the GPU was the "
                           "bottleneck); host_per_kernel_s from this trace is an upper bound");
  }
  out.warnings.insert(out.warnings.begin(), trace.warnings.begin(), trace.warnings.end());
  return out;
}

}  // namespace shardtune::sim
