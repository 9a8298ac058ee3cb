// `shardtune simulate`: schedule the step program and report times; --trace writes the timeline.
#include "cli/simulate_cmd.h"

#include <iomanip>

#include "cli/format.h"
#include "cli/report_words.h"
#include "profiles/cluster_presets.h"
#include "simulator/job_phases.h"
#include "simulator/memory_report_json.h"
#include "simulator/trace_json.h"

namespace shardtune::cli {

// The per-phase table and verdict of `estimate` (defined in cli/estimate_cmd.cc).
void PrintPhases(const sim::JobPhases& p, std::ostream& out);

namespace {

nlohmann::ordered_json CollectiveJson(const sim::CollectiveSummary& c) {
  nlohmann::ordered_json j = {{"group", c.group},
                              {"collective", profiles::ToString(c.kind)},
                              {"ranks", c.ranks},
                              {"nodes", c.nodes},
                              {"bytes", c.bytes.count()},
                              {"calls_per_step", c.calls},
                              {"model", c.terms.nccl ? "nccl" : "topology"},
                              {"bus_bandwidth_bytes_per_s", c.terms.bus_bandwidth.count()},
                              {"latency_s", c.terms.latency.count()},
                              {"time_each_s", c.terms.time().count()}};
  if (c.terms.nccl) {
    j["algorithm"] = profiles::ToString(c.terms.nccl->algo);
    j["protocol"] = profiles::ToString(c.terms.nccl->proto);
    j["channels"] = c.terms.nccl->channels;
    // Only where a tuner plugin overrode NCCL's own choice, so other answers keep their bytes.
    if (c.terms.nccl->by_tuner) j["chosen_by"] = "tuner plugin";
  }
  return j;
}

// The steady step's collectives, largest first (at most 6 rows): how each is run and priced.
void PrintCollectives(const sim::SimReport& r, const profiles::ClusterSpec& cluster, std::ostream& out) {
  if (r.collectives.empty()) return;
  out << "  collectives (each alone on its links; NCCL's choice where its model applies";
  const std::string nics = profiles::DescribeNics(cluster);
  if (!nics.empty()) out << "; " << nics;
  out << "):\n";
  size_t shown = 0;
  for (const sim::CollectiveSummary& c : r.collectives) {
    if (++shown > 6) {
      out << "    ... " << r.collectives.size() - 6 << " more in --json\n";
      break;
    }
    out << "    " << std::left << std::setw(15) << profiles::ToString(c.kind) << std::right << std::setw(10)
        << FormatBytes(c.bytes) << " x" << std::setw(4) << c.calls << "  " << c.group << " group of " << c.ranks
        << (c.nodes > 1 ? " on " + std::to_string(c.nodes) + " nodes" : "") << ": ";
    if (c.terms.nccl) {
      out << profiles::ToString(c.terms.nccl->algo) << "/" << profiles::ToString(c.terms.nccl->proto) << ", "
          << c.terms.nccl->channels << (c.terms.nccl->algo == profiles::NcclAlgo::kNvls ||
                                                c.terms.nccl->algo == profiles::NcclAlgo::kNvlsTree ||
                                                c.terms.nccl->algo == profiles::NcclAlgo::kCollNetDirect
                                            ? " heads"
                                            : " channels")
          << (c.terms.nccl->by_tuner ? " (tuner plugin's pick)" : "");
    } else {
      out << "one ring (topology graph)";
    }
    out << ", busbw " << std::setprecision(0) << c.terms.bus_bandwidth.count() / 1e9 << " GB/s, "
        << std::setprecision(2) << c.terms.time().count() * 1e3 << " ms each\n";
  }
}

void PrintTable(const Job& job, const sim::SimReport& r, std::ostream& out) {
  const auto& m = r.memory;
  out << "shardtune simulate: " << job.spec.name << " (" << FormatCount(m.parameters)
      << " parameters" << (job.model_from.empty() ? "" : "; " + job.model_from) << ") on " << job.cluster.name << " (" << m.world << " ranks, "
      << job.cluster.gpu.name << "), " << model::ToString(job.plan.strategy) << ", micro-batch "
      << job.plan.micro_batch << " x " << job.SeqLen() << " tokens, grad-accum "
      << job.plan.grad_accum;
  if (job.plan.cp > 1) {
    out << ", Ulysses cp " << job.plan.cp << " (" << job.SeqLen() / job.plan.cp
        << " tokens per rank)";
  }
  out << "; " << job.seq_len_note << "; timed by " << job.timed_by << "\n";
  // The answer first (issue #49 item 3): a step that does not fit has no step time to speak of.
  const std::string label = !m.fits ? "DOES NOT FIT" : IsMarginal(m.capacity - m.required, m.capacity)
                                                          ? "FITS, MARGINALLY"
                                                          : "FITS";
  out << "=> " << label << ": " << FormatBytes(m.required) << " required per GPU of "
      << FormatBytes(m.capacity) << " usable ("
      << (m.fits ? "headroom " + FormatBytes(m.capacity - m.required)
                 : "short by " + FormatBytes(m.required - m.capacity))
      << ", at " << m.peak_phase << ")";
  if (m.fits) {
    out << "; " << std::fixed << std::setprecision(3) << r.step_time.count() << " s per step, "
        << std::setprecision(0) << r.tokens_per_s << " tokens/s\n\n";
  } else {
    out << "; the step below is what it would take if it fit (shardtune estimate says what would "
           "make it fit)\n\n";
  }
  out << std::fixed;
  out << "Step (steady state, step 1)\n";
  out << "  step time                " << std::setprecision(4) << r.step_time.count() << " s\n";
  out << "  throughput               " << std::setprecision(0) << r.tokens_per_s << " tokens/s ("
      << r.tokens_per_s_per_gpu << " per GPU)\n";
  out << "  MFU                      " << std::setprecision(1) << 100 * r.mfu << " %  (6N + 12·L·H·S = "
      << std::setprecision(2) << r.model_flops_per_token / 1e9 << " GFLOP per token)\n";
  out << "  compute                  " << std::setprecision(4) << r.compute.count() << " s\n";
  out << "  exposed communication    " << r.exposed_comm.count() << " s ("
      << std::setprecision(1) << 100 * r.exposed_comm.count() / r.step_time.count()
      << " % of the step)\n";
  if (r.cp > 1) {
    out << "  Ulysses cp " << r.cp << "            " << std::setprecision(4) << r.all_to_all.count()
        << " s of all-to-alls on the critical path (" << r.all_to_all_calls_per_step << " calls, "
        << FormatBytes(r.all_to_all_per_step) << " total size per step; FSDP over "
        << (m.cp_fsdp_mesh == "dp" ? "dp ranks, cp ranks replicate" : "dp x cp ranks") << ")\n";
  }
  // The GPU's categories partition the step (compute stream busy + exposed communication); the
  // host's issue time runs beside them (simulate.h SimReport::time_by_category).
  out << "  where the step goes (the GPU's time; sums to the step time):\n";
  Seconds host_issue;
  for (const auto& [k, v] : r.time_by_category) {
    if (k == "host_issue") {
      host_issue = v;
      continue;
    }
    out << "    " << std::left << std::setw(22) << k << std::right << std::setprecision(4) << v.count() << " s\n";
  }
  out << "  host issue               " << std::setprecision(4) << host_issue.count()
      << " s (the CPU issuing kernels and FSDP hooks, beside the GPU; in the step only where the "
         "GPU waits for it)\n";
  out << "  busy time by phase (streams overlap):\n";
  for (const auto& [k, v] : r.phases) {
    out << "    " << std::left << std::setw(22) << k << std::right << std::setprecision(4) << v.count() << " s\n";
  }
  PrintCollectives(r, job.cluster, out);
  out << "\nMemory per GPU (the same program as estimate)\n";
  out << "  peak allocated           " << FormatBytes(m.peak_allocated) << " at " << m.peak_phase << ", "
      << std::setprecision(3) << r.peak_time.count() << " s into its step\n";
  out << "  required                 " << FormatBytes(m.required) << (m.fits ? " fits in " : " DOES NOT FIT in ")
      << FormatBytes(m.capacity) << "\n";
}

// TRL's chunked NLL (LossKernel trl_chunked_nll) runs its head GEMMs in fp32: the same plan with
// TRL's other losses, loss_type nll (the model's cross-entropy) and use_liger_kernel with
// liger_kernel_config's fused_linear_cross_entropy alone (its module patches off), so the answer
// says what the default costs.
struct LossAlternative {
  std::string config;  // the SFTConfig setting
  model::LossKernel kernel;
  sim::SimReport report;
};
std::vector<LossAlternative> TrlLossAlternatives(const Job& job) {
  std::vector<LossAlternative> out;
  if (job.plan.loss_kernel != model::LossKernel::kTrlChunkedNll) return out;
  sim::SimOptions o = job.options;
  o.with_timeline = false;
  for (auto [config, kernel] : {std::pair<const char*, model::LossKernel>{"loss_type: nll", model::LossKernel::kCrossEntropy},
                                {"use_liger_kernel (fused loss only)", model::LossKernel::kFusedLinear}}) {
    model::Plan p = job.plan;
    p.loss_kernel = kernel;
    if (!p.FusedLossConflicts().empty()) continue;
    out.push_back({config, kernel, sim::SimulateStep(job.spec, job.cluster, p, o)});
  }
  return out;
}

void PrintLossAlternatives(const sim::SimReport& r, const std::vector<LossAlternative>& alts, std::ostream& out) {
  if (alts.empty()) return;
  out << "\nTRL's chunked NLL (loss_type chunked_nll, TRL's default) multiplies its head in fp32 (no tensor cores "
         "under torch's default allow_tf32 False); the same plan with TRL's other losses:\n";
  for (const LossAlternative& a : alts) {
    const auto& m = a.report.memory;
    out << "  " << std::left << std::setw(36) << a.config << std::right << std::setprecision(4)
        << a.report.step_time.count() << " s per step (" << std::showpos << std::setprecision(1)
        << 100 * (a.report.step_time.count() / r.step_time.count() - 1) << std::noshowpos << " %), peak "
        << FormatBytes(m.peak_allocated) << ", " << (m.fits ? "fits" : "DOES NOT FIT") << "\n";
  }
}

}  // namespace

void AddSimulateCommand(CLI::App* app, SimulateArgs* a) {
  CLI::App* sub = app->add_subcommand("simulate", "Predict one training step: time, throughput, memory timeline");
  AddJobFlags(sub, &a->job);
  sub->add_option("--trace", a->trace, "Write the predicted step as a Chrome trace (Perfetto)");
}

void RunSimulate(const SimulateArgs& a, std::ostream& out, std::ostream& err) {
  Job job = ResolveJob(a.job);
  sim::SimReport r = sim::SimulateStep(job.spec, job.cluster, job.plan, job.options);
  sim::JobPhases job_phases =
      sim::EstimateJobPhases(r.program, r.memory, job.spec, job.cluster, job.plan, job.options.memory);
  if (!a.trace.empty()) {
    sim::WriteFileAtomically(
        a.trace, sim::ChromeTrace(r, "shardtune simulate · " + job.spec.name, &job_phases).dump() + "\n");
    WriteLine(err, "wrote ", a.trace);
  }
  sim::FeatureSavings savings;
  if (sim::UsesFeatures(job.plan)) {
    savings =
        sim::CompareWithFullFinetune(job.spec, job.cluster, job.plan, job.options.memory, r.memory);
  }
  const std::vector<LossAlternative> loss_alternatives = TrlLossAlternatives(job);
  if (!a.job.json) {
    for (const auto& w : job.warnings) WriteLine(err, "warning: ", w);
    PrintTable(job, r, out);
    PrintLossAlternatives(r, loss_alternatives, out);
    PrintFeatureSavings(savings, r.memory, out);
    PrintPhases(job_phases, out);
    return;
  }
  nlohmann::ordered_json j = JobHeaderJson(job, "shardtune.simulate");
  j["step_time_s"] = r.step_time.count();
  j["tokens_per_s"] = r.tokens_per_s;
  j["tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu;
  j["mfu"] = r.mfu;
  j["model_flops_per_token"] = r.model_flops_per_token;
  j["compute_s"] = r.compute.count();
  j["exposed_comm_s"] = r.exposed_comm.count();
  j["cp"] = r.cp;
  j["all_to_all"] = {{"bytes_per_step", r.all_to_all_per_step.count()},
                     {"calls_per_step", r.all_to_all_calls_per_step},
                     {"time_s", r.all_to_all.count()},
                     {"group_size", r.cp_group.ranks},
                     {"bus_bandwidth_bytes_per_s", r.cp_group.AllToAllBandwidth().count()},
                     {"ep_group_size", r.ep_group.ranks},
                     {"ep_bus_bandwidth_bytes_per_s", r.ep_group.AllToAllBandwidth().count()}};
  nlohmann::ordered_json collectives = nlohmann::ordered_json::array();
  for (const sim::CollectiveSummary& c : r.collectives) collectives.push_back(CollectiveJson(c));
  j["collectives"] = collectives;
  nlohmann::ordered_json phases = nlohmann::ordered_json::object();
  for (const auto& [k, v] : r.phases) phases[k] = v.count();
  j["phases_s"] = phases;
  nlohmann::ordered_json categories = nlohmann::ordered_json::object();
  for (const auto& [k, v] : r.time_by_category) categories[k] = v.count();
  j["time_by_category_s"] = categories;
  j["peak_time_s"] = r.peak_time.count();
  nlohmann::ordered_json mem = sim::MemoryReportToJson(r.memory, a.job.timeline, JudgedOnSentence(r.memory));
  for (auto it = mem.begin(); it != mem.end(); ++it) j[it.key()] = it.value();
  if (sim::UsesFeatures(job.plan))
    j["savings_vs_full_finetune"] = sim::FeatureSavingsToJson(savings);
  j["phases"] = sim::JobPhasesToJson(job_phases);
  if (!loss_alternatives.empty()) {
    nlohmann::ordered_json alts = nlohmann::ordered_json::array();
    for (const LossAlternative& alt : loss_alternatives) {
      alts.push_back({{"config", alt.config},
                      {"loss_kernel", model::ToString(alt.kernel)},
                      {"step_time_s", alt.report.step_time.count()},
                      {"peak_allocated_bytes", alt.report.memory.peak_allocated.count()},
                      {"fits", alt.report.memory.fits}});
    }
    j["loss_alternatives"] = alts;
  }
  j["warnings"] = job.warnings;
  out << j.dump(2) << "\n";
}

}  // namespace shardtune::cli
