// `calibrate`'s fits: non-negative least squares (Lawson & Hanson, "Solving Least Squares
// Problems", 1974, ch. 23) with Eigen, on relative residuals, for compute, collectives and memory.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include <Eigen/Dense>

#include "model/errors.h"
#include "simulator/calibration.h"

namespace shardtune::sim {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// min ||A x - b|| subject to x >= 0, Lawson-Hanson active set. Columns are scaled to unit norm
// first (the unknowns span 1e-12 s/FLOP to 1e-3 s) and the solution scaled back.
VectorXd Nnls(const MatrixXd& a_in, const VectorXd& b) {
  const Eigen::Index n = a_in.cols();
  VectorXd scale = VectorXd::Ones(n);
  MatrixXd a = a_in;
  for (Eigen::Index j = 0; j < n; ++j) {
    double norm = a.col(j).norm();
    if (norm > 0) {
      scale(j) = norm;
      a.col(j) /= norm;
    }
  }
  VectorXd x = VectorXd::Zero(n);
  std::vector<bool> passive(static_cast<size_t>(n), false);
  const double tol = 1e-12 * std::max(1.0, b.norm());
  for (int outer = 0; outer < 3 * n + 10; ++outer) {
    VectorXd w = a.transpose() * (b - a * x);
    Eigen::Index best = -1;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (!passive[static_cast<size_t>(j)] && w(j) > tol && (best < 0 || w(j) > w(best))) best = j;
    }
    if (best < 0) break;
    passive[static_cast<size_t>(best)] = true;
    for (int inner = 0; inner < 3 * n + 10; ++inner) {
      std::vector<Eigen::Index> idx;
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<size_t>(j)]) idx.push_back(j);
      }
      MatrixXd ap(a.rows(), static_cast<Eigen::Index>(idx.size()));
      for (size_t c = 0; c < idx.size(); ++c) ap.col(static_cast<Eigen::Index>(c)) = a.col(idx[c]);
      VectorXd zp = ap.colPivHouseholderQr().solve(b);
      VectorXd z = VectorXd::Zero(n);
      for (size_t c = 0; c < idx.size(); ++c) z(idx[c]) = zp(static_cast<Eigen::Index>(c));
      bool feasible = true;
      for (Eigen::Index j : idx) feasible = feasible && z(j) > 0;
      if (feasible) {
        x = z;
        break;
      }
      double alpha = 1;
      for (Eigen::Index j : idx) {
        if (z(j) <= 0) alpha = std::min(alpha, x(j) / (x(j) - z(j)));
      }
      x += alpha * (z - x);
      for (Eigen::Index j : idx) {
        if (x(j) <= 1e-15) {
          passive[static_cast<size_t>(j)] = false;
          x(j) = 0;
        }
      }
    }
  }
  return x.cwiseQuotient(scale);
}

// Relative residuals (fit - measured) / measured of rows a x vs targets t.
FitSummary Residuals(const std::string& term, const MatrixXd& a, const VectorXd& x, const VectorXd& t) {
  FitSummary f;
  f.term = term;
  f.rows = static_cast<int>(t.size());
  VectorXd r = (a * x - t).cwiseQuotient(t);
  if (r.size() == 0) return f;
  f.rms_relative_residual = std::sqrt(r.squaredNorm() / static_cast<double>(r.size()));
  f.max_relative_residual = r.cwiseAbs().maxCoeff();
  return f;
}

// One compute row: features [matmul/peak, attention/peak, bytes/bw, ops] (ComputeTime's terms,
// cost_model.h: the seconds each class takes at efficiency 1), measured seconds, row weight.
struct ComputeRow {
  double f[4];
  double t, weight;
};

// Rows are weighted by how often they run per step over the run's step time, so the fit
// minimises the error of each run's compute relative to its step: a 0.1 ms span the model
// misses by 90 % must not outweigh the blocks that make the step.
std::vector<ComputeRow> ComputeRows(const std::vector<CalibrationRun>& runs) {
  std::vector<ComputeRow> rows;
  auto add = [&rows](const RunPrediction& p, const ComputeWork& w, double t, double weight) {
    if (w.ops == 0 || !(t > 0)) return;
    double peak = p.dtype == model::DType::kFp32 ? p.gpu.tf32_dense.count()
                  : p.dtype == model::DType::kFp16 ? p.gpu.fp16_dense.count()
                                                   : p.gpu.bf16_dense.count();
    rows.push_back({{w.matmul_flops / peak, w.attention_flops / peak,
                     w.memory_bytes / p.gpu.memory_bandwidth.count(), static_cast<double>(w.ops)}, t, weight});
  };
  for (const CalibrationRun& r : runs) {
    const model::Measurements& m = *r.measurements;
    double per_step = static_cast<double>(m.grad_accum) / m.mean_step_time_s;  // calls per step / step
    for (size_t i = 0; i < m.compute.size(); ++i) {
      add(r.prediction, r.prediction.compute[i], m.compute[i].PerCallS(), per_step);
    }
    if (auto opt = m.OptimizerPerStepS()) add(r.prediction, r.prediction.optimizer, *opt, 1 / m.mean_step_time_s);
  }
  return rows;
}

constexpr const char* kEfficiencyNames[] = {"matmul_efficiency", "attention_efficiency", "memory_efficiency"};

// Solves for y = [1/e_mm, 1/e_att, 1/e_mem, overhead_s]. A class whose fitted time per unit of
// work comes out ~0 (efficiency above the ceiling 16) is not identifiable: its work is collinear
// with the others' across these runs. It keeps its prior `*effs[j]`, its predicted time moves to
// the right-hand side, and the rest is fitted again. `fixed` marks those classes.
VectorXd SolveCompute(const MatrixXd& a, const VectorXd& b, double* const effs[3], std::vector<bool>* fixed,
                      std::vector<std::string>* warnings) {
  VectorXd y;
  for (int round = 0; round < 3; ++round) {
    MatrixXd af = a;
    VectorXd bf = b;
    for (int j = 0; j < 3; ++j) {
      if (!(*fixed)[static_cast<size_t>(j)]) continue;
      bf -= a.col(j) / *effs[j];
      af.col(j).setZero();
    }
    y = Nnls(af, bf);
    bool changed = false;
    for (int j = 0; j < 3; ++j) {
      if ((*fixed)[static_cast<size_t>(j)] || a.col(j).norm() == 0 || y(j) > 1.0 / 16) continue;
      (*fixed)[static_cast<size_t>(j)] = true;
      changed = true;
      warnings->push_back(std::string("compute: ") + kEfficiencyNames[j] +
                          " not identifiable from these runs (its work is collinear with the other "
                          "terms); kept at " + std::to_string(*effs[j]));
    }
    if (!changed) break;
  }
  return y;
}

void FitCompute(const std::vector<CalibrationRun>& runs, CalibrationResult* out) {
  std::vector<ComputeRow> rows = ComputeRows(runs);
  CostConstants& k = out->profile.costs;
  if (rows.empty()) {
    out->warnings.push_back("compute: no measured spans matched the program; efficiencies unchanged");
    return;
  }
  const auto n = static_cast<Eigen::Index>(rows.size());
  MatrixXd a(n, 4), abs_rows(n, 4);
  VectorXd t(n), b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const ComputeRow& row = rows[static_cast<size_t>(i)];
    for (int j = 0; j < 4; ++j) {
      abs_rows(i, j) = row.f[j];
      a(i, j) = row.f[j] * row.weight;
    }
    t(i) = row.t;
    b(i) = row.t * row.weight;
  }
  double* const effs[3] = {&k.matmul_efficiency, &k.attention_efficiency, &k.memory_efficiency};
  std::vector<bool> fixed(3, false);
  VectorXd y = SolveCompute(a, b, effs, &fixed, &out->warnings);
  std::string note = "t = matmul/(peak·e_mm) + attention/(peak·e_att) + bytes/(bw·e_mem) + overhead;";
  for (int j = 0; j < 3; ++j) {
    if (fixed[static_cast<size_t>(j)]) {
      y(j) = 1 / *effs[j];
      note += std::string(" ") + kEfficiencyNames[j] + " not identifiable (kept);";
    } else if (a.col(j).norm() == 0) {
      note += std::string(" ") + kEfficiencyNames[j] + " not measured (kept);";
    } else if (y(j) >= 1e3) {
      *effs[j] = 1e-3;
      y(j) = 1e3;
      out->warnings.push_back(std::string("compute: ") + kEfficiencyNames[j] + " fitted below 1e-3; clamped to "
                              "the profile's floor 1e-3");
    } else {
      *effs[j] = 1.0 / y(j);
    }
  }
  k.compute_op_overhead = Seconds::Of(y(3));
  FitSummary f = Residuals("compute (per segment and phase, optimizer)", abs_rows, y, t);
  f.note = note;
  out->profile.fits.push_back(f);
}

// One collective row: kind (all-gather, reduce-scatter, all-reduce), S·BusBwFactor(kind, n),
// the measured seconds and the row's weight.
struct CollectiveRow {
  int kind;
  double busbytes, t, weight;
};

// Fits one (link family, group size): unknowns [latency per kind..., 1/busbw] with features
// [one-hot kind, S·BusBwFactor(kind, n)] (cost_model.h CollectiveTime), relative rows.
void FitCollectiveGroup(const std::string& family, int group_size,
                        const std::vector<CollectiveRow>& rows, const std::string& note,
                        CalibrationResult* out) {
  const auto n = static_cast<Eigen::Index>(rows.size());
  MatrixXd a = MatrixXd::Zero(n, 4), abs_rows = MatrixXd::Zero(n, 4);
  VectorXd b(n), t(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const CollectiveRow& r = rows[static_cast<size_t>(i)];
    abs_rows(i, r.kind) = 1;
    abs_rows(i, 3) = r.busbytes;
    a.row(i) = abs_rows.row(i) * (r.weight / r.t);
    b(i) = r.weight;
    t(i) = r.t;
  }
  VectorXd x = Nnls(a, b);
  CollectiveCalibration cal;
  cal.link_family = family;
  cal.group_size = group_size;
  std::string label = "collectives " + family + " x" + std::to_string(group_size);
  if (x(3) <= 0) {
    out->warnings.push_back(label + ": the sizes measured do not constrain the bandwidth (all "
                            "latency-bound); set to 1e15 B/s");
    cal.bus_bandwidth = BytesPerSecond::Of(1e15);
  } else {
    cal.bus_bandwidth = BytesPerSecond::Of(std::min(1e15, 1.0 / x(3)));
  }
  std::set<int> kinds;
  for (const CollectiveRow& r : rows) kinds.insert(r.kind);
  for (int kd : kinds) cal.latency[static_cast<size_t>(kd)] = Seconds::Of(x(kd));
  out->profile.costs.collectives.push_back(cal);
  FitSummary f = Residuals(label, abs_rows, x, t);
  f.note = note;
  out->profile.fits.push_back(f);
}

// Collectives per (bottleneck link family, group size) of the measured runs, rows weighted by
// sqrt(calls).
void FitCollectives(const std::vector<CalibrationRun>& runs, CalibrationResult* out) {
  std::map<std::pair<std::string, int>, std::vector<CollectiveRow>> groups;
  for (const CalibrationRun& r : runs) {
    const model::Measurements& m = *r.measurements;
    for (size_t i = 0; i < m.collectives.size(); ++i) {
      const model::MeasuredCollective& c = m.collectives[i];
      int kind = static_cast<int>(c.kind);
      if (c.emulated || c.group_size < 2 || kind > 2 || !(c.PerCallS() > 0)) continue;
      // A group measured only in the first step (no steady calls while others have them) is
      // start-up, not training.
      if (!c.steady_time_s && m.HasSteadyCompute()) continue;
      double bus = static_cast<double>(c.bytes) * profiles::BusBwFactor(c.kind, c.group_size);
      groups[{r.prediction.collective_families[i], c.group_size}].push_back(
          {kind, bus, c.PerCallS(), std::sqrt(static_cast<double>(c.steady_time_s ? c.steady_count : c.count))});
    }
  }
  for (const auto& [key, rows] : groups) {
    FitCollectiveGroup(key.first, key.second, rows,
                       "t = latency[kind] + S·f(kind, n)/busbw; issue to Wait(), so queueing behind "
                       "earlier collectives and peers arriving late count as latency",
                       out);
  }
}

// Memory outside the tracked tensors: required - tracked = context + per_comm·communicators +
// frag·tracked (memory_model.h: required = peak·(1+frag) + context + NCCL per communicator),
// with required the device memory used on a GPU and the RSS on CPU ranks.
void FitMemory(const std::vector<CalibrationRun>& runs, CalibrationResult* out) {
  struct Row { double comms, tracked, rss; };
  std::vector<Row> rows;
  for (const CalibrationRun& r : runs) {
    for (const model::MeasuredRankMemory& k : r.measurements->memory_per_rank) {
      if (k.RequiredBytes() > 0) {
        rows.push_back({static_cast<double>(r.prediction.communicators),
                        static_cast<double>(k.tracked_peak_bytes), static_cast<double>(k.RequiredBytes())});
      }
    }
  }
  if (rows.empty()) return;
  const auto n = static_cast<Eigen::Index>(rows.size());
  MatrixXd a(n, 3);
  VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    a.row(i) << 1.0, r.comms, r.tracked;
    y(i) = r.rss - r.tracked;
  }
  // The communicator count is identifiable only when runs differ in it; else it is folded into
  // the context term.
  double cmin = a.col(1).minCoeff(), cmax = a.col(1).maxCoeff();
  std::string note = "rss - tracked = context + per_communicator·communicators + fragmentation·tracked;";
  if (cmin == cmax) {
    a.col(1).setZero();
    note += " communicator count constant across runs: per-communicator buffers folded into context (0);";
  }
  VectorXd x = Nnls(a, y);
  MemoryConstants& k = out->profile.memory;
  k.cuda_context = Bytes::Of(static_cast<int64_t>(std::llround(x(0))));
  k.nccl_per_communicator = Bytes::Of(static_cast<int64_t>(std::llround(x(1))));
  k.nvls_per_communicator = Bytes();
  k.fragmentation_fraction = std::min(1.0, x(2));
  VectorXd rss(n);
  for (Eigen::Index i = 0; i < n; ++i) rss(i) = rows[static_cast<size_t>(i)].rss;
  MatrixXd full(n, 4);
  full << a, a.col(2);  // rss = (that) + tracked
  VectorXd xf(4);
  xf << x(0), x(1), x(2), 1.0;
  FitSummary f = Residuals("memory overheads (RSS or device used, per rank)", full, xf, rss);
  f.note = note;
  out->profile.fits.push_back(f);
}

// How far the mechanistic peak (memory_model, nothing fitted) is from the tracked peak.
void ReportPeakModel(const std::vector<CalibrationRun>& runs, CalibrationResult* out) {
  FitSummary f;
  f.term = "peak allocated (memory model, not fitted)";
  double sq = 0;
  for (const CalibrationRun& r : runs) {
    double pred = static_cast<double>(r.prediction.report.memory.peak_allocated.count());
    double meas = static_cast<double>(r.measurements->peak_tracked_bytes);
    double e = (pred - meas) / meas;
    sq += e * e;
    f.max_relative_residual = std::max(f.max_relative_residual, std::fabs(e));
    ++f.rows;
  }
  f.rms_relative_residual = std::sqrt(sq / std::max(1, f.rows));
  f.note = "a mechanism, not a constant: a large residual names a missing allocation";
  out->profile.fits.push_back(f);
}

}  // namespace

void FitProbedCollectives(const std::vector<profiles::CollectiveSample>& samples,
                          const std::string& link_family, CalibrationResult* out) {
  std::map<int, std::vector<CollectiveRow>> groups;  // by group size
  for (const profiles::CollectiveSample& c : samples) {
    int kind = static_cast<int>(c.kind);
    if (kind > 2 || c.ranks < 2) continue;  // the fit's unknowns: AG, RS, AR latencies
    double bus = static_cast<double>(c.bytes) * profiles::BusBwFactor(c.kind, c.ranks);
    groups[c.ranks].push_back({kind, bus, c.time.count(), 1.0});
  }
  for (const auto& [n, rows] : groups) {
    FitCollectiveGroup(link_family, n, rows,
                       "t = latency[kind] + S·f(kind, n)/busbw over the probe's sizes (median of "
                       "its timed calls each)",
                       out);
  }
}

CalibrationResult Calibrate(const std::vector<CalibrationRun>& runs, const Profile& base) {
  SHARDTUNE_CHECK(!runs.empty()) << "Calibrate needs at least one run";
  CalibrationResult out;
  out.profile = base;
  out.profile.fits.clear();
  out.profile.costs.collectives.clear();
  const model::MeasuredEnvironment& e = runs.front().measurements->environment;
  ProfileProvenance& p = out.profile.provenance;
  out.profile.has_provenance = true;
  p = ProfileProvenance{};
  p.hostname = e.hostname;
  p.cpu_model = e.cpu_model;
  p.device = e.device;
  p.backend = e.backend;
  p.torch_version = e.torch_version;
  p.shardtune_version = e.shardtune_version;
  for (const CalibrationRun& r : runs) {
    const model::MeasuredEnvironment& o = r.measurements->environment;
    p.measurements.push_back(r.measurements->path);
    if (o.hostname != e.hostname || o.cpu_model != e.cpu_model || o.device != e.device ||
        o.torch_version != e.torch_version || o.backend != e.backend) {
      out.warnings.push_back(r.measurements->path + ": measured on " + o.hostname + " (" + o.cpu_model +
                             ", torch " + o.torch_version + ", " + o.backend + "), not " + e.hostname +
                             " like " + runs.front().measurements->path + "; one profile mixes two machines");
    }
    if (!r.measurements->HasSteadyCompute()) {
      out.warnings.push_back(r.measurements->path + ": no steady-state spans (run without trace or with one "
                             "step): its first step's one-time costs are in the fit");
    }
  }
  out.profile.name = "calibrated on " + e.hostname + " (" + e.cpu_model + ", " + e.device + ", " + e.backend +
                     ", torch " + e.torch_version + ") from " + std::to_string(runs.size()) + " run(s)";
  FitCompute(runs, &out);
  FitCollectives(runs, &out);
  FitMemory(runs, &out);
  ReportPeakModel(runs, &out);
  return out;
}

}  // namespace shardtune::sim
