// `shardtune env` (env_cmd.h): exec::CollectEnvironment, written as text or JSON.
#include "cli/env_cmd.h"

#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/exec_forward.h"
#include "cli/format.h"
#include "executor/probe/env_report.h"

namespace shardtune::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string OrNone(const std::string& s) { return s.empty() ? "none" : s; }

Json ToJson(const exec::EnvReport& r) {
  Json blas{{"found", r.blas.found},
            {"vendor", exec::BlasVendorName(r.blas.vendor)},
            {"library", r.blas.library},
            {"version", r.blas.version},
            {"threading", r.blas.threading},
            {"threads", r.blas.threads},
            {"gflops_one_core", r.blas_gflops_one_core},
            {"warning", r.blas_warning}};
  Json env = Json::object();
  for (const auto& kv : r.thread_env) env[kv.first] = kv.second;
  Json gpus = Json::array();
  for (const exec::EnvGpu& g : r.gpus) {
    gpus.push_back(Json{{"index", g.index},
                        {"name", g.name},
                        {"total_memory_bytes", g.total_memory_bytes},
                        {"compute_capability", g.compute_capability},
                        {"multiprocessors", g.multiprocessors},
                        {"catalog_entry", g.catalog_entry},
                        {"catalog_note", g.catalog_note}});
  }
  return Json{{"schema", "shardtune.env"},
              {"schema_version", 1},
              {"shardtune_version", r.shardtune_version},
              {"torch", Json{{"version", r.torch_version},
                             {"cuda", r.torch_cuda},
                             {"intra_op_threads", r.intra_op_threads},
                             {"inter_op_threads", r.inter_op_threads},
                             {"build", r.torch_build}}},
              {"host", Json{{"cpu_model", r.cpu_model},
                            {"cpu_cores", r.cpu_cores},
                            {"memory_bytes", r.host_memory_bytes},
                            {"thread_environment", env}}},
              {"blas", blas},
              {"gloo", Json{{"available", r.gloo}, {"version", r.gloo_version}}},
              {"nccl", Json{{"available", r.nccl}, {"version", r.nccl_version}}},
              {"cuda", Json{{"runtime_version", r.cuda_runtime_version},
                            {"driver_supports_cuda", r.cuda_driver_version},
                            {"nvidia_driver_version", r.nvidia_driver_version}}},
              {"gpus", gpus}};
}

void PrintText(const exec::EnvReport& r, std::ostream& out) {
  auto row = [&out](const std::string& k, const std::string& v) {
    out << "  " << std::left << std::setw(22) << k << v << "\n";
  };
  out << "shardtune " << r.shardtune_version << "\n\nLibTorch\n";
  row("version", r.torch_version + (r.torch_cuda ? " (CUDA)" : " (CPU only)"));
  row("intra-op threads", std::to_string(r.intra_op_threads));
  row("inter-op threads", std::to_string(r.inter_op_threads));
  out << "  build:\n";
  for (const std::string& line : r.torch_build) out << "    " << line << "\n";
  out << "\nHost\n";
  row("cpu", r.cpu_model);
  row("cores", std::to_string(r.cpu_cores));
  row("memory", FormatBytes(Bytes::Of(r.host_memory_bytes)));
  for (const auto& kv : r.thread_env) row(kv.first, kv.second);
  out << "\nBLAS (resolved at run time)\n";
  row("vendor", exec::BlasVendorName(r.blas.vendor));
  row("library", OrNone(r.blas.library));
  if (!r.blas.version.empty()) row("version", r.blas.version);
  if (!r.blas.threading.empty()) row("threading", r.blas.threading);
  if (r.blas.threads > 0) row("threads", std::to_string(r.blas.threads));
  if (r.blas_gflops_one_core > 0) {
    std::ostringstream g;
    g << std::fixed << std::setprecision(1) << r.blas_gflops_one_core
      << " GFLOP/s (fp32 1024x1024x1024 matmul, one thread)";
    row("measured", g.str());
  }
  out << "\nCommunication\n";
  row("gloo", r.gloo ? "yes (" + OrNone(r.gloo_version) + ")" : "no (built without Gloo headers)");
  row("nccl", r.nccl ? "yes (" + OrNone(r.nccl_version) + ")" : "no (built without NCCL)");
  out << "\nCUDA\n";
  row("runtime", OrNone(r.cuda_runtime_version));
  row("driver", r.nvidia_driver_version.empty() ? OrNone(r.cuda_driver_version)
                                                : r.nvidia_driver_version + " (CUDA " +
                                                      OrNone(r.cuda_driver_version) + ")");
  if (r.gpus.empty()) row("gpus", "none visible");
  for (const exec::EnvGpu& g : r.gpus) {
    row("gpu " + std::to_string(g.index),
        g.name + ", " + FormatBytes(Bytes::Of(g.total_memory_bytes)) + ", sm " +
            g.compute_capability + " -> " +
            (g.catalog_entry.empty() ? "no catalog entry: " + g.catalog_note : g.catalog_entry));
  }
}

}  // namespace

void AddEnvCommand(CLI::App* app, EnvArgs* a) {
  CLI::App* sub = app->add_subcommand("env", kEnvCommandHelp);
  sub->add_flag("--json", a->json, "One JSON document (schema shardtune.env) on stdout");
  sub->add_flag("--no-bench", a->no_bench, "Skip the timed single-core matmul");
}

int RunEnvCommand(const EnvArgs& a, std::ostream& out, std::ostream& err) {
  exec::EnvOptions o;
  o.measure_blas = !a.no_bench;
  exec::EnvReport r = exec::CollectEnvironment(o);
  if (a.json) {
    out << ToJson(r).dump(2) << "\n";
  } else {
    PrintText(r, out);
  }
  if (!r.blas_warning.empty()) WriteLine(err, "warning: ", r.blas_warning);
  return 0;
}

}  // namespace shardtune::cli
