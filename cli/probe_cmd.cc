// `shardtune probe`: flags -> exec::ProbeOptions, the ranks for --nproc, the profile file.
#include "cli/probe_cmd.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <memory>
#include <sstream>
#include <vector>

#include "cli/exec_forward.h"
#include "cli/format.h"
#include "cli/run_cmd.h"
#include "executor/errors.h"
#include "executor/host_info.h"
#include "executor/probe/probe.h"
#include "executor/rank_env.h"
#include "model/errors.h"
#include "model/plan.h"
#include "model/presets.h"
#include "simulator/calibration.h"
#include "simulator/profile_json.h"
#include "simulator/trace_json.h"
#include "model/text.h"

namespace shardtune::cli {
namespace {

// Collectives up to this total size: 64 MiB on CPU ranks (Gloo over loopback), 1 GiB on GPUs.
constexpr int64_t kCpuCollectiveMaxBytes = int64_t{1} << 26;
constexpr int64_t kGpuCollectiveMaxBytes = int64_t{1} << 30;
constexpr int kMaxProbeRanks = 64;

std::vector<std::string> SplitComma(const std::string& text) {
  std::vector<std::string> v;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(item);
  return v;
}

std::vector<int64_t> ParseTokens(const std::string& text) {
  std::vector<int64_t> v;
  for (const std::string& item : SplitComma(text)) {
    const int64_t n = model::ParseInt64(item).value_or(0);
    if (n < 1 || n > (int64_t{1} << 24)) {
      throw InputError("--tokens: expected comma-separated integers in [1, 16777216], got \"" +
                       item + "\"");
    }
    v.push_back(n);
  }
  return v;
}

std::string Today() {
  std::time_t now = std::time(nullptr);
  char buf[16];
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

}  // namespace

void AddProbeCommand(CLI::App* app, ProbeArgs* a) {
  CLI::App* sub = app->add_subcommand("probe", kProbeCommandHelp);
  sub->add_option("--device", a->device, "cpu|cuda: the device to measure (default cpu)");
  sub->add_option("--model", a->model,
                  "Whose GEMM and attention shapes to time (default tiny-llama on cpu, "
                  "llama3.2-1b on cuda)");
  sub->add_option("--out", a->out, "The profile to write (shardtune.profile JSON)")->required();
  sub->add_option("--tokens", a->tokens,
                  "GEMM rows to time, comma-separated (micro-batch x sequence / cp)");
  sub->add_option("--dtypes", a->dtypes, "Dtypes to time, comma-separated (fp32, bf16, fp16)");
  sub->add_option("--nproc", a->nproc,
                  "Local ranks for the collectives (Gloo on cpu, NCCL on cuda; 1: none)");
  sub->add_option("--threads", a->threads, "Intra-op threads per rank (0: LibTorch's default)");
  sub->add_option("--budget-s", a->budget_s,
                  "Stop adding kernel samples after this many seconds (default 100)");
  sub->add_option("--timeout-s", a->timeout_s, "Rendezvous and collective timeout (--nproc)");
  sub->add_option("--name", a->name, "Free-text name of the profile");
}

int RunProbeCommand(const ProbeArgs& a, std::ostream& out, std::ostream& err) {
  if (a.device != "cpu" && a.device != "cuda") {
    throw InputError("--device: expected cpu or cuda, got \"" + a.device + "\"");
  }
  if (a.nproc < 1 || a.nproc > kMaxProbeRanks) {
    throw InputError("--nproc: expected an integer in [1, " + std::to_string(kMaxProbeRanks) +
                     "], got " + std::to_string(a.nproc));
  }
  if (!(a.budget_s > 0) || a.budget_s > 3600) {
    throw InputError("--budget-s: expected seconds in (0, 3600], got " + std::to_string(a.budget_s));
  }
  if (a.threads < 0) {
    throw InputError("--threads: expected an integer >= 0, got " + std::to_string(a.threads));
  }
  if (!(a.timeout_s > 0)) {
    throw InputError("--timeout-s: expected seconds > 0, got " + std::to_string(a.timeout_s));
  }
  // The profile is written after minutes of measuring: a folder that is not there fails now.
  const std::filesystem::path out_dir = std::filesystem::path(a.out).parent_path();
  if (!out_dir.empty() && !std::filesystem::is_directory(out_dir)) {
    throw InputError("--out: expected a file in an existing folder, got \"" + a.out + "\" (no folder " +
                     out_dir.string() + ")");
  }
  exec::ProbeOptions o;
  o.device = a.device;
  const std::string model = a.model.empty() ? (a.device == "cuda" ? "llama3.2-1b" : "tiny-llama") : a.model;
  o.spec = model::ResolveModelArg(model, nullptr);
  o.tokens = ParseTokens(a.tokens);
  for (const std::string& d : SplitComma(a.dtypes)) {
    o.dtypes.push_back(model::ParseEnum<model::DType>(d, "--dtypes"));
  }
  o.threads = a.threads;
  o.budget_s = a.budget_s;

  exec::RankEnv env = exec::RankEnvFromVariables(EnvironmentMap());
  if (!env.launched && a.nproc > 1) return LaunchThisProgramAsRanks(a.nproc, err);
  std::vector<profiles::CollectiveSample> collectives;
  std::string backend;
  if (env.launched && env.world_size > 1) {
    // The collectives first, with every rank present; then every rank times the kernels.
    const bool cuda = a.device == "cuda";
    backend = cuda ? "nccl" : "gloo";
    o.cuda_device = cuda ? env.local_rank : 0;
    if (env.rank == 0) err << "probe: collectives over " << env.world_size << " " << backend << " ranks\n";
    collectives = exec::ProbeCollectivesOverWorld(env, a.timeout_s, a.device, o.cuda_device,
                                                  cuda ? kGpuCollectiveMaxBytes : kCpuCollectiveMaxBytes, 5);
  }
  // Every rank times the kernels at once, as every rank computes at once in a run: ranks that
  // share a host's cores and memory bandwidth (CPU ranks) are measured under that sharing; rank
  // 0's tables are written.
  if (env.rank == 0) o.progress = [&err](const std::string& s) { err << s << "\n"; };
  exec::ProbeResult r = exec::RunProbe(o);
  if (env.rank != 0) return 0;
  r.tables.collectives = collectives;

  sim::Profile p;
  p.name = a.name.empty() ? r.device_name + ", torch " + r.torch_version + ", " + Today() : a.name;
  p.has_provenance = true;
  p.provenance.hostname = Hostname();
  p.provenance.cpu_model = exec::CpuModel();  // the host that issued the kernels, GPU or not
  p.provenance.device = r.device_name;
  p.provenance.backend = backend.empty() ? a.device : backend;
  p.provenance.torch_version = r.torch_version;
  p.provenance.cuda_version = r.cuda_version;
  p.provenance.driver_version = r.driver_version;
  p.provenance.nccl_version = r.nccl_version;
  p.provenance.date = Today();
  p.provenance.command = OwnCommandLine();
  if (r.tables.host.kernel_launch) p.costs.host_per_kernel = *r.tables.host.kernel_launch;
  if (backend == "gloo") {
    // CPU ranks of one host talk over loopback (cpu:N clusters' link family): the samples become
    // that family's fitted collective model. NCCL samples stay in the tables only: which link
    // the local GPUs share (NVLink or PCIe) is not known here.
    sim::CalibrationResult fit;
    fit.profile = p;
    sim::FitProbedCollectives(r.tables.collectives, "loopback", &fit);
    for (const std::string& w : fit.warnings) WriteLine(err, "warning: ", w);
    p = fit.profile;
  }
  p.costs.tables = std::make_shared<profiles::KernelTables>(std::move(r.tables));
  sim::WriteFileAtomically(a.out, sim::ProfileToJson(p).dump(2) + "\n");
  out << "wrote " << a.out << " (" << p.costs.tables->gemm.size() << " GEMM, "
      << p.costs.tables->attention.size() << " attention, " << p.costs.tables->memory.size()
      << " memory-bound, " << p.costs.tables->collectives.size() << " collective samples; "
      << static_cast<int>(r.elapsed_s) << " s)\n";
  return 0;
}

}  // namespace shardtune::cli
