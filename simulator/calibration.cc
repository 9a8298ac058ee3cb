// Predicted vs measured for one run, and the run-to-run comparison helpers of `validate`.
// The least-squares fits of `calibrate` are in calibration_fit.cc.
#include "simulator/calibration.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "model/errors.h"
#include "model/module_tree.h"
#include "profiles/topology.h"
#include "simulator/kernel_time.h"

namespace shardtune::sim {
namespace {

// The executor's segment names (executor/train/run.cc MakeDoc: model::SegmentName) -> the program's
// segment index (model/module_tree.h: 0 embeddings, 1..L blocks with a VL model's vision blocks
// first, L+1 final norm, L+2 head). -1: unknown.
int SegmentIndex(const std::string& name, const model::ModelSpec& spec) {
  for (int s = 0; s < model::NumSegments(spec.NumBlocks()); ++s) {
    if (model::SegmentName(spec, s) == name) return s;
  }
  return -1;
}

// Only ops with work count: ComputeTime charges the per-op overhead only to them.
void Add(const ProgramOp& op, ComputeWork* w) {
  if (op.matmul_flops <= 0 && op.attention_flops <= 0 && op.memory_bytes <= 0) return;
  w->matmul_flops += op.matmul_flops;
  w->attention_flops += op.attention_flops;
  w->memory_bytes += op.memory_bytes;
  ++w->ops;
}

double PredictedSeconds(const ComputeWork& w, const profiles::GpuSpec& gpu, model::DType dtype,
                const CostConstants& k) {
  if (w.ops == 0) return 0;
  // Each op pays its own overhead (ComputeTime adds it once per call).
  double t = ComputeTime(w.matmul_flops, w.attention_flops, w.memory_bytes, gpu, dtype, k).count();
  return t + (w.ops - 1) * k.compute_op_overhead.count();
}

// The ranks of a measured group: the executor's shard groups, cp groups and ep groups are
// consecutive ranks (cp innermost: rank = dp_index x cp + cp_index; ep innermost in the shard
// group), its replicate groups ranks i, i+G, ..., its expert shard groups ranks i, i+ep, ...
// within a shard group (executor/README.md "Semantics"), the world all ranks.
std::vector<int> GroupRanks(const profiles::Topology& topo, const model::MeasuredCollective& c, int world,
                            int shard_group) {
  if (c.group == "replicate") return topo.ReplicaGroup(std::max(1, shard_group), 0);
  if (c.group == "cp" && c.group_size < world) return topo.ShardGroup(c.group_size, 0);
  if (c.group == "shard" && c.group_size < world) return topo.ShardGroup(c.group_size, 0);
  if (c.group == "ep" && c.group_size < world) return topo.ShardGroup(c.group_size, 0);
  if (c.group == "expert_shard" && c.group_size > 1) {
    const int ep = std::max(1, std::max(1, shard_group) / c.group_size);
    std::vector<int> ranks;
    for (int i = 0; i < c.group_size; ++i) ranks.push_back(i * ep);
    return ranks;
  }
  std::vector<int> all(static_cast<size_t>(std::min(world, c.group_size)));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

// The short name of a phase in validate's rows.
std::string PhaseRowName(JobPhase p) {
  switch (p) {
    case JobPhase::kLoad: return "load";
    case JobPhase::kStep0: return "step 0";
    case JobPhase::kSteady: return "steady";
    case JobPhase::kSave: return "save";
    case JobPhase::kResume: return "resume";
  }
  return "?";
}

}  // namespace

RunPrediction PredictRun(const model::Measurements& m, const model::ModelSpec& spec,
                         const profiles::ClusterSpec& cluster, const SimOptions& options) {
  model::Plan plan = m.plan;
  plan.micro_batch = m.micro_batch;
  plan.grad_accum = m.grad_accum;
  plan.seq_len = m.seq_len;
  // The executor runs eager attention on LibTorch 1.x whatever the plan says (it has no public
  // scaled_dot_product_attention there: executor/nn/transformer.cc, `options_.sdpa = false`), so
  // such a run saves and moves the S x S scores: simulate what ran.
  if (m.environment.torch_version.rfind("1.", 0) == 0) plan.attention = model::Attention::kEager;
  SimOptions o = options;
  o.with_timeline = false;
  RunPrediction p;
  p.report = SimulateStep(spec, cluster, plan, o);
  p.gpu = cluster.gpu;
  p.dtype = plan.param_dtype;
  p.spec = spec;
  p.plan = plan;
  std::map<std::pair<int, bool>, ComputeWork> by_segment;  // (segment, backward)
  for (const ProgramOp& op : p.report.program.ops) {
    if (op.step != 1) continue;
    if (op.kind == OpKind::kOptimizer) Add(op, &p.optimizer);
    if (op.micro != 0 || op.segment < 0) continue;
    if (op.kind == OpKind::kForward) Add(op, &by_segment[{op.segment, false}]);
    if (op.kind == OpKind::kBackward) Add(op, &by_segment[{op.segment, true}]);
  }
  for (const model::MeasuredCompute& c : m.compute) {
    int s = SegmentIndex(c.segment, spec);
    auto it = by_segment.find({s, c.phase == "backward"});
    p.compute.push_back(it == by_segment.end() ? ComputeWork{} : it->second);
  }
  const MemoryReport& mem = p.report.memory;
  MemoryOptions mo = o.memory;
  mo.model_load = ModelLoad::kExecutor;                // executor/fsdp/flat_param.cc: init, then shard
  mo.checkpoint_format = CheckpointFormat::kSharded;   // executor/train/checkpoint.h
  mo.resume_creates_state_only = true;                 // executor/train/trainer_checkpoint.cc
  p.phases = EstimateJobPhases(p.report.program, mem, spec, cluster, plan, mo);
  p.communicators = (mem.shard_group > 1 ? 1 : 0) + (mem.replicas > 1 ? 1 : 0);
  profiles::Topology topo(cluster);
  for (const model::MeasuredCollective& c : m.collectives) {
    std::vector<int> ranks = GroupRanks(topo, c, cluster.world_size(), mem.shard_group);
    GroupLink g = DescribeGroup(topo, cluster, {ranks}, options.costs);
    p.collective_links.push_back(g);
    p.collective_families.push_back(g.nodes > 1 ? cluster.inter_node.family : cluster.intra_node.family);
  }
  return p;
}

std::vector<ComparisonRow> CompareRun(const model::Measurements& m, const RunPrediction& p,
                                      const CostConstants& given) {
  // The constants the simulation ran with: measured kernel tables time this plan's shapes.
  CostConstants storage;
  const CostConstants& k = PlanConstants(given, p.spec, p.plan, p.gpu, &storage);
  std::vector<ComparisonRow> rows;
  auto add = [&rows](const std::string& kind, const std::string& name, double pred, double meas, bool bytes) {
    if (meas > 0) rows.push_back({kind, name, pred, meas, bytes});
  };
  add("step", "step time", p.report.step_time.count(), m.mean_step_time_s, false);
  double fwd = 0, bwd = 0, fwd_pred = 0, bwd_pred = 0;
  for (size_t i = 0; i < m.compute.size(); ++i) {
    const model::MeasuredCompute& c = m.compute[i];
    if (p.compute[i].ops == 0) continue;
    double pred = PredictedSeconds(p.compute[i], p.gpu, p.dtype, k);
    add("compute", c.segment + " " + c.phase, pred, c.PerCallS(), false);
    // One span per micro-batch per step (the executor runs every segment once per micro-batch).
    (c.phase == "forward" ? fwd : bwd) += c.PerCallS() * m.grad_accum;
    (c.phase == "forward" ? fwd_pred : bwd_pred) += pred * m.grad_accum;
  }
  add("phase", "forward compute per step", fwd_pred, fwd, false);
  add("phase", "backward compute per step", bwd_pred, bwd, false);
  if (auto opt = m.OptimizerPerStepS()) {
    add("phase", "optimizer step", PredictedSeconds(p.optimizer, p.gpu, p.dtype, k), *opt, false);
  }
  for (size_t i = 0; i < m.collectives.size(); ++i) {
    const model::MeasuredCollective& c = m.collectives[i];
    if (c.emulated || c.group_size < 2) continue;
    // Only in the first step while the run has steady figures: start-up (parameter broadcast).
    if (!c.steady_time_s && m.HasSteadyCompute()) continue;
    double pred = CollectiveTime(c.kind, Bytes::Of(c.bytes), p.collective_links[i]).count();
    add("collective",
        std::string(profiles::ToString(c.kind)) + " " + c.group + " x" + std::to_string(c.group_size) +
            " " + std::to_string(c.bytes) + " B",
        pred, c.PerCallS(), false);
  }
  const MemoryReport& mem = p.report.memory;
  add("memory", "peak allocated (tracked)", static_cast<double>(mem.peak_allocated.count()),
      static_cast<double>(m.peak_tracked_bytes), true);
  bool cuda = m.device_used_bytes > 0;
  for (const model::MeasuredPhase& ph : m.phases) {
    for (const PhaseMemory& pp : p.phases.phases) {
      // A resumed process's first step already holds the optimizer state it loaded: it is a
      // steady step for memory.
      const bool resumed_step0 = m.resumed_from_step > 0 && ph.name == ToString(JobPhase::kStep0);
      if (resumed_step0 ? pp.phase != JobPhase::kSteady : ph.name != ToString(pp.phase)) continue;
      add("memory", "memory: " + PhaseRowName(pp.phase) + " peak",
          static_cast<double>(pp.allocated_peak.count()), static_cast<double>(ph.peak_tracked_bytes),
          true);
      // CPU ranks: the phase's RSS (VmHWM from the phase's start, after the executor returned
      // freed heap before a save and a resume: executor/host_info.h ReleaseFreedHostMemory) vs
      // what the phase is judged on, its tensors + fragmentation + the process.
      if (!cuda) {
        add("memory", "memory: " + PhaseRowName(pp.phase) + " RSS",
            static_cast<double>(pp.required.count()), static_cast<double>(ph.peak_rss_bytes), true);
      }
    }
  }
  add("memory", cuda ? "peak required (device used)" : "peak required (RSS)",
      static_cast<double>(mem.required.count()),
      static_cast<double>(cuda ? m.device_used_bytes : m.peak_rss_bytes), true);
  return rows;
}

ErrorSummary Summarize(const std::vector<ComparisonRow>& rows, const std::string& kind) {
  ErrorSummary s;
  std::vector<double> errs;
  for (const ComparisonRow& r : rows) {
    if (!kind.empty() && r.kind != kind) continue;
    double e = std::fabs(r.RelativeError());
    errs.push_back(e);
    if (e >= s.worst_abs_error) {
      s.worst_abs_error = e;
      s.worst = r.name;
    }
  }
  s.rows = static_cast<int>(errs.size());
  if (errs.empty()) return s;
  std::sort(errs.begin(), errs.end());
  size_t n = errs.size();
  s.median_abs_error = n % 2 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
  return s;
}

std::vector<std::string> ProvenanceWarnings(const Profile& profile, const model::Measurements& m) {
  std::vector<std::string> w;
  if (!profile.has_provenance) return w;
  const ProfileProvenance& p = profile.provenance;
  const model::MeasuredEnvironment& e = m.environment;
  auto check = [&](const char* what, const std::string& prof, const std::string& meas) {
    if (!prof.empty() && prof != meas) {
      w.push_back(m.path + ": measured with " + what + " \"" + meas + "\", but the profile \"" +
                  profile.name + "\" was calibrated with \"" + prof +
                  "\"; its constants may not transfer");
    }
  };
  check("host", p.hostname, e.hostname);
  check("CPU", p.cpu_model, e.cpu_model);
  check("device", p.device, e.device);
  check("backend", p.backend, e.backend);
  check("torch", p.torch_version, e.torch_version);
  check("shardtune", p.shardtune_version, e.shardtune_version);
  return w;
}

}  // namespace shardtune::sim
