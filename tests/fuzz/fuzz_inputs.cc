// The fuzzed parsers: text parsers take the bytes directly; the file parsers (cluster JSON,
// profile) read them from a memfd through /proc/self/fd/N, so the file-reading path is fuzzed too.
#include "tests/fuzz/fuzz_inputs.h"

#include <sys/mman.h>
#include <unistd.h>

#include <exception>
#include <stdexcept>

#include "model/errors.h"
#include "model/hf_config.h"
#include "model/model_spec.h"
#include "model/model_spec_json.h"
#include "model/plan.h"
#include "model/plan_json.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "profiles/cluster.h"
#include "model/measurements_json.h"
#include "simulator/torch_trace.h"
#include "simulator/profile_json.h"
#include "planner/configs/import.h"

namespace shardtune::fuzz {
namespace {

// A path whose content is `text`: one memfd per process, rewritten for each input.
std::string AsFile(const std::string& text) {
  static int fd = -1;
  if (fd < 0) fd = memfd_create("shardtune_fuzz", 0);
  if (fd < 0) throw std::runtime_error("memfd_create failed");
  if (ftruncate(fd, 0) != 0) throw std::runtime_error("ftruncate failed");
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n <= 0) throw std::runtime_error("pwrite failed");
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

void UseModel(const model::ModelSpec& spec) {
  volatile int64_t n = model::ParameterCount(spec);
  (void)n;
}

void UsePlan(const model::Plan& plan) {
  // The worlds a CLI run meets: one rank, one node, many nodes; depths of a tiny and a big model.
  for (int world : {1, 8, 4096}) {
    for (int layers : {2, 126}) {
      volatile size_t n = plan.Problems("plan.json:", world, 8, layers, 131072).size();
      (void)n;
    }
  }
}

void Parse(const std::string& name, const std::string& text) {
  if (name == "model_spec") {
    UseModel(model::ModelSpecFromJson(model::ParseJsonText(text, "model.json"), "model.json"));
  } else if (name == "hf_config") {
    std::vector<std::string> warnings;
    UseModel(model::ImportHfConfig(model::ParseJsonText(text, "config.json"), "config.json",
                                   &warnings));
  } else if (name == "cluster_json") {
    profiles::ReadClusterFile(AsFile(text));
  } else if (name == "cluster_shorthand") {
    profiles::ParseClusterShorthand(text);
  } else if (name == "plan_json") {
    UsePlan(model::PlanFromJson(model::ParseJsonText(text, "plan.json"), "plan.json"));
  } else if (name == "profile_json") {
    sim::ReadProfileFile(AsFile(text));
  } else if (name == "config_import") {
    // --from: an Accelerate / HF Trainer / ROLL / verl file (format detected), for tiny-llama on
    // one 8-GPU node, then what estimate does next with the plan.
    static const model::ModelSpec spec = model::FindModelPreset("tiny-llama");
    static const profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("8xH100");
    model::Plan plan;
    configs::ImportConfigText(text, "cfg.yaml", configs::MakeImportContext(spec, cluster), nullptr, &plan);
    UsePlan(plan);
  } else if (name == "measurements_json") {
    model::MeasurementsFromJson(model::ParseJsonText(text, "measurements.json"), "measurements.json");
  } else if (name == "torch_trace") {
    // calibrate --trace: the trace, then the fit against a fixed step's work.
    sim::TorchTrace t = sim::TorchTraceFromJson(model::ParseJsonText(text, "trace.json"), "trace.json");
    static const profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("1xH100");
    sim::StepWork w;
    w.matmul_flops = 1e13;
    w.attention_flops = 1e12;
    w.memory_bytes = 1e10;
    w.host_kernels = 1000;
    w.host_hooks = 48;
    sim::CalibrateFromTrace(t, w, cluster.gpu, model::DType::kBf16, sim::CostConstants{});
  } else {
    throw std::logic_error("unknown fuzz target " + name);
  }
}

std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

}  // namespace

const std::vector<std::string>& TargetNames() {
  static const std::vector<std::string> kNames = {"model_spec",        "hf_config",
                                                  "cluster_json",      "cluster_shorthand",
                                                  "plan_json",         "profile_json",
                                                  "measurements_json", "config_import",
                                                  "torch_trace"};
  return kNames;
}

std::string RunOne(const std::string& name, const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    Parse(name, text);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    if (msg.empty()) return "InputError with an empty message";
    if (msg.find('\n') != std::string::npos || msg.find('\r') != std::string::npos) {
      return "InputError message spans several lines: " + OneLine(msg);
    }
    return "";
  } catch (const std::exception& e) {
    return std::string("not an InputError: ") + OneLine(e.what());
  }
  return "";
}

}  // namespace shardtune::fuzz
