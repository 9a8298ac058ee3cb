// run's pre-flight check: the job's phases estimated on this machine before any rank starts.
#include "cli/run_preflight.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "cli/format.h"
#include "model/dtype.h"
#include "model/module_tree.h"
#include "model/trainable.h"
#include "planner/advice.h"
#include "planner/offload_advisor.h"
#include "profiles/cluster.h"
#include "profiles/device_names.h"
#include "profiles/this_machine.h"
#include "simulator/job_phases.h"
#include "simulator/memory_model.h"
#include "model/text.h"

namespace shardtune::cli {
namespace {

// The metadata blob (JSON: one entry per unit) and the RNG state, generously: 64 KiB plus 256
// bytes per unit.
int64_t MetadataAllowanceBytes(size_t units) { return (int64_t{64} << 10) + 256 * static_cast<int64_t>(units); }

std::string Plural(int n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// The first sentence of the estimate's advice that is not about offload (CPU ranks have no
// device to offload from), else "".
std::string FirstAdvice(const model::Plan& plan, const sim::MemoryReport& r, bool cpu,
                        const std::vector<planner::Alternative>& alts) {
  for (std::string a : planner::AdviseOnMemory(plan, r, alts)) {
    if (cpu && a.find("offload") != std::string::npos) continue;
    // A sentence inside the one-line error: lower-case start, no final period.
    if (!a.empty() && a.back() == '.') a.pop_back();
    if (a.size() > 1 && std::isupper(static_cast<unsigned char>(a[0])) &&
        std::islower(static_cast<unsigned char>(a[1]))) {
      a[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(a[0])));
    }
    return a;
  }
  return "";
}

}  // namespace

int64_t CheckpointFileBytes(const model::ModelSpec& spec, const model::Plan& plan, int world) {
  const int g = std::max(1, plan.ResolvedShardGroup(world, world));
  const int64_t master = model::BytesPerElement(plan.master_dtype);
  const int64_t frozen = model::BytesPerElement(plan.FrozenDtype());
  int64_t bytes = 0;
  const auto units = model::ApplyTrainability(spec, plan, model::BuildFsdpUnits(spec, plan.wrap, plan.ep));
  for (const model::FsdpUnit& u : units) {
    const model::ExecutorFlatUnit f = model::ExecutorFlatUnitOf(u, plan, g);
    bytes += f.shard_numel * (f.trains ? master : frozen);
    if (f.trains && plan.optimizer == model::Optimizer::kAdamW) bytes += 2 * f.shard_numel * master;
  }
  return bytes + MetadataAllowanceBytes(units.size());
}

CheckpointCount CountCheckpoints(int64_t resume_step, int64_t steps, int every, int keep) {
  CheckpointCount c;
  for (int64_t s = resume_step + 1; s <= steps; ++s) {
    if ((every > 0 && s % every == 0) || s == steps) ++c.written;
  }
  c.alive = keep > 0 ? std::min<int64_t>(c.written, keep + 1) : c.written;
  return c;
}

int64_t FreeDiskBytes(const std::string& dir) {
  if (const char* fake = std::getenv("SHARDTUNE_TEST_DISK_FREE_BYTES"); fake != nullptr && *fake) {
    return model::ParseInt64(fake).value_or(-1);
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir.empty() ? fs::path(".") : fs::path(dir), ec);
  while (!p.empty() && !fs::exists(p, ec)) {
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  struct statvfs st {};
  if (::statvfs(p.string().c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

PreflightResult CheckRunFitsThisMachine(const PreflightRequest& q) {
  PreflightResult res;
  const int procs = std::max(1, q.local_processes);
  sim::MemoryOptions opt;
  opt.model_load = sim::ModelLoad::kExecutor;  // executor/fsdp/flat_param.cc: init, then shard
  opt.checkpoint_format = q.checkpoints ? sim::CheckpointFormat::kSharded : sim::CheckpointFormat::kNone;
  opt.host_estimate = false;
  opt.resume_creates_state_only = true;  // executor/train/trainer_checkpoint.cc LoadState

  // The machine's figures and the cluster the estimate runs on.
  profiles::ClusterSpec cluster;
  Bytes budget;  // what the judged figure is compared with
  std::string budget_text;
  if (!q.cuda) {
    const profiles::MachineMemory m = profiles::ReadThisMachine();
    if (!m.read) {
      res.warnings.push_back("run pre-flight: " + m.source + " is unreadable: the plan's memory is not checked against this machine");
    } else {
      cluster = profiles::ParseClusterShorthand("cpu:" + std::to_string(q.world));
      cluster.host_memory_per_node = m.available;
      cluster.gpu.usable_memory = m.available / procs;
      budget = m.available;
      budget_text = "this machine has " + FormatBytes(m.available) + " available (MemAvailable of " + m.source + ")";
    }
  } else {
    std::string why;
    const std::vector<profiles::GpuMemoryNow> gpus = profiles::ReadGpuMemory(procs, &why);
    if (gpus.empty()) {
      res.warnings.push_back("run pre-flight: " + why + ": the plan's GPU memory is not checked");
    } else {
      profiles::DeviceMatch match = profiles::MatchCudaDevice(gpus.front().name, gpus.front().total);
      if (match.gpu == nullptr) {
        res.warnings.push_back("run pre-flight: " + match.why + ": the plan's GPU memory is not checked");
      } else {
        cluster = profiles::ParseClusterShorthand(std::to_string(q.world) + "x" + match.gpu->name);
        const profiles::GpuMemoryNow* least = &gpus.front();
        for (const auto& g : gpus) {
          if (g.free < least->free) least = &g;
        }
        cluster.gpu.usable_memory = least->free;
        budget = least->free;
        budget_text = "GPU " + std::to_string(least->index) + " (" + least->name + ") has " +
                      FormatBytes(least->free) + " free (NVML)";
      }
    }
  }

  if (budget.count() > 0) {
    sim::MemoryEstimate est = sim::EstimateMemoryWithProgram(q.spec, cluster, q.plan, opt, false);
    sim::JobPhases phases = sim::EstimateJobPhases(est.program, est.report, q.spec, cluster, q.plan, opt);
    const Bytes launcher = !q.cuda && procs > 1 ? opt.constants.cpu_launcher : Bytes();
    const sim::PhaseMemory* worst = nullptr;
    Bytes worst_need;
    for (const sim::PhaseMemory& ph : phases.phases) {
      const Bytes need = q.cuda ? ph.required : ph.required * procs + launcher;
      if (worst == nullptr || need > worst_need) {
        worst = &ph;
        worst_need = need;
      }
    }
    auto parts = [&](const sim::PhaseMemory& ph) {
      if (q.cuda) return FormatBytes(ph.required) + " per GPU";
      std::string s = FormatBytes(worst_need) + " of RAM on this machine (" + Plural(procs, "CPU rank") +
                      " x " + FormatBytes(ph.required);
      if (launcher.count() > 0) s += " + launcher " + FormatBytes(launcher);
      return s + ")";
    };
    if (worst_need > budget) {
      auto alts = planner::CompareOffloadAndCheckpointing(q.spec, cluster, q.plan, opt);
      std::string hint = FirstAdvice(q.plan, est.report, !q.cuda, alts);
      if (!worst->hint.empty() && worst->phase != sim::JobPhase::kStep0 && worst->phase != sim::JobPhase::kSteady) {
        hint = worst->hint;
      }
      if (hint.empty()) {
        hint = q.cuda ? "a smaller micro-batch or activation checkpointing (shardtune tune ranks the plans that fit)"
                      : "a smaller micro-batch, activation checkpointing or fewer CPU ranks on this host (shardtune tune --cluster cpu:" +
                            std::to_string(q.world) + " ranks the plans that fit)";
      }
      res.error = "run pre-flight: the " + std::string(sim::ToString(worst->phase)) + " needs " + parts(*worst) +
                  ", " + budget_text + " (at: " + worst->moment + "); hint: " + hint +
                  "; --no-preflight starts it anyway";
      return res;
    }
    res.notes.push_back("pre-flight: fits this machine: the " + std::string(sim::ToString(worst->phase)) +
                        " needs " + parts(*worst) + ", " + budget_text);
  }

  if (q.checkpoints && !q.out_dir.empty()) {
    const CheckpointCount count = CountCheckpoints(q.resume_step, q.steps, q.checkpoint_every, q.keep_checkpoints);
    const int64_t files = q.cuda || procs == q.world ? q.world : procs;  // emulated: rank 0's file
    const int64_t one = CheckpointFileBytes(q.spec, q.plan, q.world) * files;
    const int64_t need = one * count.alive;
    const int64_t free = FreeDiskBytes(q.out_dir);
    if (free < 0) {
      res.warnings.push_back("run pre-flight: the free space of --out \"" + q.out_dir + "\" is unreadable: checkpoints are not checked against it");
    } else if (need > free) {
      std::ostringstream e;
      e << "run pre-flight: --out \"" << q.out_dir << "\": " << count.alive << " checkpoint"
        << (count.alive == 1 ? "" : "s") << " of " << FormatBytes(Bytes::Of(one)) << " on disk at once need "
        << FormatBytes(Bytes::Of(need)) << ", its filesystem has " << FormatBytes(Bytes::Of(free))
        << " free; hint: "
        << (q.keep_checkpoints > 1 || q.keep_checkpoints == 0 ? "--keep-checkpoints 1 keeps the newest only (2 on disk while one is written), "
                                                              : "")
        << "a larger --checkpoint-every, another --out, or --no-checkpoints; --no-preflight starts it anyway";
      res.error = e.str();
      return res;
    } else if (count.written > 0) {
      res.notes.push_back("pre-flight: " + std::to_string(count.alive) + " checkpoint" + (count.alive == 1 ? "" : "s") +
                          " of " + FormatBytes(Bytes::Of(one)) + " fit the " + FormatBytes(Bytes::Of(free)) +
                          " free under --out");
    }
  }
  return res;
}

}  // namespace shardtune::cli
