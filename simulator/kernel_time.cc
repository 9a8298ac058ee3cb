// Kernel times interpolated from measured tables (kernel_time.h states the rules).
#include "simulator/kernel_time.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <utility>

#include "simulator/step_walk_rules.h"

namespace shardtune::sim {
namespace {

// Samples the inverse-distance weighting takes into account.
constexpr size_t kNearest = 4;

double Log2(double x) { return std::log2(std::max(1.0, x)); }

// One sample as a point in log space with its throughput (FLOP/s), FLOPs and time.
struct Point {
  double x[3];
  double flops_per_s, flops, time_s;
};

// Interpolated time of a query with coordinates `q` and `flops` FLOPs over `points` (kernel_time.h:
// inverse squared distance over the nearest kNearest, no gain beyond the samples, the smallest
// sample's time as the floor below them).
std::optional<Seconds> Interpolate(std::vector<Point> points, const double q[3], double flops) {
  if (points.empty() || !(flops > 0)) return std::nullopt;
  auto dist2 = [&](const Point& p) {
    double d = 0;
    for (int i = 0; i < 3; ++i) d += (p.x[i] - q[i]) * (p.x[i] - q[i]);
    return d;
  };
  std::stable_sort(points.begin(), points.end(),
                   [&](const Point& a, const Point& b) { return dist2(a) < dist2(b); });
  double rate = 0;
  if (dist2(points.front()) == 0) {
    rate = points.front().flops_per_s;
  } else {
    double wsum = 0, acc = 0;
    for (size_t i = 0; i < std::min(kNearest, points.size()); ++i) {
      double w = 1.0 / dist2(points[i]);
      wsum += w;
      acc += w * points[i].flops_per_s;
    }
    rate = acc / wsum;
    // No extrapolated gain: a query beyond every sample in some dimension reaches no more than
    // the fastest of its nearest samples.
    double nearest_best = 0;
    for (size_t i = 0; i < std::min(kNearest, points.size()); ++i) {
      nearest_best = std::max(nearest_best, points[i].flops_per_s);
    }
    rate = std::min(rate, nearest_best);
  }
  double t = flops / rate;
  const Point* smallest = &points.front();
  for (const Point& p : points) {
    if (p.flops < smallest->flops) smallest = &p;
  }
  if (flops < smallest->flops) t = std::max(t, smallest->time_s);
  return Seconds::Of(t);
}

double AttentionForwardFlops(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                             bool causal) {
  // QK^T and PV: 2 GEMMs of 2·s·s·d FLOPs per head (FlashAttention-2, Dao 2023, section 4.1),
  // half of the score matrix under a causal mask.
  double f = 4.0 * static_cast<double>(batch) * static_cast<double>(heads) *
             static_cast<double>(seq) * static_cast<double>(seq) * static_cast<double>(head_dim);
  return causal ? f / 2 : f;
}

}  // namespace

std::optional<Seconds> GemmTime(const profiles::KernelTables& t, model::DType dtype,
                                bool allow_tf32, const model::GemmShape& s) {
  // fp32: the samples whose TF32 setting matches, where the table has both kinds (a CPU table
  // has only plain fp32, which is what an fp32 GEMM runs there).
  bool both = false, seen[2] = {false, false};
  for (const auto& g : t.gemm) {
    if (g.dtype == model::DType::kFp32) seen[g.tf32 ? 1 : 0] = true;
  }
  both = seen[0] && seen[1];
  std::vector<Point> pts;
  for (const auto& g : t.gemm) {
    if (g.dtype != dtype || (dtype == model::DType::kFp32 && both && g.tf32 != allow_tf32)) continue;
    model::GemmShape gs{g.m, g.n, g.k};
    pts.push_back({{Log2(static_cast<double>(g.m)), Log2(static_cast<double>(g.n)),
                    Log2(static_cast<double>(g.k))},
                   gs.flops() / g.time.count(), gs.flops(), g.time.count()});
  }
  double q[3] = {Log2(static_cast<double>(s.m)), Log2(static_cast<double>(s.n)),
                 Log2(static_cast<double>(s.k))};
  return Interpolate(std::move(pts), q, s.flops());
}

std::optional<Seconds> AttentionTime(const profiles::KernelTables& t, model::DType dtype,
                                     int64_t batch, int64_t seq_len, int64_t heads,
                                     int64_t head_dim, const std::string& backend) {
  // backend "": PyTorch's own choice, the rows it picked where the probe marked them; an older
  // profile marks none, and its rows are what PyTorch picked (that probe never forced a backend).
  const bool marked = std::any_of(t.attention.begin(), t.attention.end(), [&](const profiles::AttentionSample& s) {
    return s.dtype == dtype && s.pytorch_default;
  });
  std::vector<Point> pts;
  for (const auto& a : t.attention) {
    if (a.dtype != dtype) continue;
    if (backend.empty() ? marked && !a.pytorch_default : a.backend != backend) continue;
    // Forward + backward FLOPs: the backward's GEMMs are twice the forward's (dQ, dK, dV, dP).
    double f = 3 * AttentionForwardFlops(a.batch, a.seq_len, a.heads, a.head_dim, a.causal);
    double time = a.forward.count() + a.backward.count();
    pts.push_back({{Log2(static_cast<double>(a.batch * a.heads)),
                    Log2(static_cast<double>(a.seq_len)), Log2(static_cast<double>(a.head_dim))},
                   f / time, f, time});
  }
  double q[3] = {Log2(static_cast<double>(batch * heads)), Log2(static_cast<double>(seq_len)),
                 Log2(static_cast<double>(head_dim))};
  return Interpolate(std::move(pts), q, 3 * AttentionForwardFlops(batch, seq_len, heads, head_dim, true));
}

std::optional<Seconds> MemoryKernelTime(const profiles::KernelTables& t,
                                        profiles::MemoryKernel kernel, int64_t bytes) {
  std::vector<std::pair<double, double>> pts;  // (bytes, seconds), by size
  for (const auto& m : t.memory) {
    if (m.kernel == kernel) pts.push_back({static_cast<double>(m.bytes), m.time.count()});
  }
  if (pts.empty() || bytes <= 0) return std::nullopt;
  std::sort(pts.begin(), pts.end());
  const double b = static_cast<double>(bytes);
  if (b <= pts.front().first) return Seconds::Of(pts.front().second);  // launch-bound floor
  if (b >= pts.back().first) return Seconds::Of(b / (pts.back().first / pts.back().second));
  size_t hi = 1;
  while (pts[hi].first < b) ++hi;
  const auto& lo_p = pts[hi - 1];
  const auto& hi_p = pts[hi];
  double f = (Log2(b) - Log2(lo_p.first)) / (Log2(hi_p.first) - Log2(lo_p.first));
  double bw = (1 - f) * lo_p.first / lo_p.second + f * hi_p.first / hi_p.second;
  return Seconds::Of(b / bw);
}

namespace {

// GemmTime and AttentionTime memoised per thread for the tables in use: a search asks for the
// same few dozen shapes for every plan, and each lookup interpolates over every sample (tune on
// 8xH100 took 37% longer without this). The cache holds the tables it was filled from, so an
// address cannot be reused by other tables while it is in use.
class ShapeTimeCache {
 public:
  std::optional<Seconds> Gemm(const std::shared_ptr<const profiles::KernelTables>& t, model::DType d,
                              const model::GemmShape& g) {
    Use(t);
    const std::array<int64_t, 4> key{static_cast<int64_t>(d), g.m, g.n, g.k};
    auto it = gemm_.find(key);
    if (it != gemm_.end()) return it->second;
    return gemm_[key] = GemmTime(*t, d, true, g);
  }
  std::optional<Seconds> Attention(const std::shared_ptr<const profiles::KernelTables>& t, model::DType d,
                                   int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                                   model::SdpaBackend backend) {
    Use(t);
    const std::array<int64_t, 6> key{static_cast<int64_t>(d), batch, seq, heads, head_dim,
                                     static_cast<int64_t>(backend)};
    auto it = attention_.find(key);
    if (it != attention_.end()) return it->second;
    return attention_[key] = AttentionTime(*t, d, batch, seq, heads, head_dim,
                                           backend == model::SdpaBackend::kAuto ? "" : model::ToString(backend));
  }

 private:
  void Use(const std::shared_ptr<const profiles::KernelTables>& t) {
    if (t == tables_) return;
    tables_ = t;
    gemm_.clear();
    attention_.clear();
  }
  std::shared_ptr<const profiles::KernelTables> tables_;
  std::map<std::array<int64_t, 4>, std::optional<Seconds>> gemm_;
  std::map<std::array<int64_t, 6>, std::optional<Seconds>> attention_;
};

ShapeTimeCache& ThreadShapeTimes() {
  thread_local ShapeTimeCache cache;
  return cache;
}

// The sample of `kernel` with the largest footprint (of two such, the slower, as MemoryKernelTime
// takes it), or null.
const profiles::MemoryKernelSample* LargestSample(const profiles::KernelTables& t,
                                                  profiles::MemoryKernel kernel) {
  const profiles::MemoryKernelSample* largest = nullptr;
  for (const profiles::MemoryKernelSample& m : t.memory) {
    if (m.kernel != kernel || m.bytes <= 0) continue;
    if (!largest || std::make_pair(m.bytes, m.time.count()) > std::make_pair(largest->bytes, largest->time.count())) {
      largest = &m;
    }
  }
  return largest;
}

}  // namespace

CostConstants EffectiveConstants(const CostConstants& k, const model::ModelSpec& spec,
                                 const model::Plan& plan, int64_t seq_len,
                                 const profiles::GpuSpec& gpu) {
  if (!k.tables || k.tables->empty()) return k;
  const profiles::KernelTables& t = *k.tables;
  CostConstants e = k;
  const model::DType dtype = plan.param_dtype;
  const double peak = DensePeak(gpu, dtype).count();
  const int64_t local_seq = seq_len / std::max(1, plan.cp);
  const int64_t tokens = static_cast<int64_t>(plan.micro_batch) * local_seq;
  // GEMMs: layers x block + head, forward and backward, FLOP-weighted.
  // TRL's chunked head multiplies in fp32 (ProgramOp::fp32_matmul_flops): not among these.
  std::vector<model::GemmShape> head =
      plan.loss_kernel == model::LossKernel::kTrlChunkedNll ? std::vector<model::GemmShape>{}
      : model::IsVerlFusedHead(plan.loss_kernel)
          ? model::VerlFusedHeadGemms(spec, tokens, plan.loss_kernel == model::LossKernel::kVerlFusedTriton)
          : model::WithBackward(plan.loss_kernel == model::LossKernel::kFusedLinear
                                    ? model::FusedLinearHeadForwardGemms(spec, tokens)
                                    : std::vector<model::GemmShape>{model::HeadForwardGemm(spec, tokens)});
  double flops = 0, time = 0;
  bool all_timed = true;
  auto add = [&](const std::vector<model::GemmShape>& gs, double times) {
    for (const model::GemmShape& g : gs) {
      std::optional<Seconds> s = ThreadShapeTimes().Gemm(k.tables, dtype, g);
      if (!s) {
        all_timed = false;
        return;
      }
      double n = times * static_cast<double>(g.count);
      flops += n * g.flops();
      time += n * s->count();
    }
  };
  // A dense prefix (moe.first_dense_layers) runs its own MLP GEMMs: each kind of block counted
  // by its layers.
  const int dense = spec.DenseLayers();
  add(model::WithBackward(model::BlockForwardGemms(spec, tokens, spec.num_layers - 1, plan.ep)),
      spec.num_layers - dense);
  if (dense > 0) add(model::WithBackward(model::BlockForwardGemms(spec, tokens, 0)), dense);
  add(head, 1);
  if (all_timed && time > 0) e.matmul_efficiency = flops / time / peak;
  // Attention at the plan's shape (the heads a rank holds under Ulysses: heads / cp, full S).
  const int64_t heads = spec.num_heads / std::max(1, plan.cp);
  // A packed row runs attention per sequence (varlen): as many sequences of the packed length as
  // fill the row, the worst case Plan::AttentionSeqLen describes.
  const int64_t attn_seq = plan.AttentionSeqLen(seq_len);
  const int64_t attn_batch =
      static_cast<int64_t>(plan.micro_batch) * std::max<int64_t>(1, seq_len / attn_seq);
  if (auto a = ThreadShapeTimes().Attention(k.tables, dtype, attn_batch, attn_seq,
                                            std::max<int64_t>(1, heads), spec.head_dim,
                                            plan.sdpa_backend)) {
    // In the walk's convention (step_walk_backward.cc ForwardCompute): 4·S·q_dim FLOPs per token
    // forward, no causal halving, and kAttentionBackwardRatio times that backward; so the
    // efficiency that reproduces the measured forward + backward time is these FLOPs over it.
    double f = (1 + internal::kAttentionBackwardRatio) *
               AttentionForwardFlops(attn_batch, attn_seq, heads, spec.head_dim, false);
    e.attention_efficiency = f / a->count() / peak;
  }
  // Memory-bound work streams at the rate the probe measured for its largest elementwise
  // footprint. The probe times one op on the same buffers again and again, so footprints that fit
  // in the L2 (50 MB on an H100) read back from cache: 4.3 TB/s at 25 MB on the lent H100, above
  // HBM3's 3.35 TB/s peak; and the smallest measure the host's issue rate (5.5 us per op), not
  // the device. A training step's memory-bound traffic (activations, gradients, the optimizer's
  // GBs) goes to HBM between uses: at 1.6 GB the same probe read 2.99 TB/s, and FSDP2's foreach
  // AdamW over Llama-3.2-1B ran its 80 bytes per parameter at ~2.7 TB/s in the profiler trace
  // (36 ms per step, 2026-11-26). Evaluating at [tokens, hidden] (25 MB) had put the optimizer at
  // 23 ms.
  // (Of two samples of the largest footprint, the slower, as MemoryKernelTime takes it.)
  if (const profiles::MemoryKernelSample* largest = LargestSample(t, profiles::MemoryKernel::kElementwise)) {
    e.memory_efficiency =
        static_cast<double>(largest->bytes) / largest->time.count() / gpu.memory_bandwidth.count();
  }
  // CPU offload's optimizer step (OpKind::kOptimizer on the host stream, charged 80 bytes per
  // element of foreach AdamW traffic at host_memory_bandwidth_per_node / GPUs per node,
  // simulate.cc CostOps): the node's rate is what the probe measured for torch.optim.AdamW
  // (foreach) over CPU tensors at its largest footprint, one process on every core of the host.
  // A model's offloaded state is GBs, so the largest sample (2 GiB of state on a GPU machine's
  // host) is the one that pays what a real step pays: DRAM streaming and the page faults of the
  // fresh _foreach_sqrt temporaries (probe.cc ProbeHostOptimizer). Without samples the catalog's
  // guess stays (cost_model.h).
  if (const profiles::MemoryKernelSample* host_adamw =
          LargestSample(t, profiles::MemoryKernel::kHostAdamwForeach)) {
    const double elements = static_cast<double>(host_adamw->bytes) / 16;  // the table's bytes: 16 N
    e.host_memory_bandwidth_per_node =
        BytesPerSecond::Of(internal::kForeachAdamWBytesPerElement * elements / host_adamw->time.count());
  }
  // The probe times one LibTorch op issued from C++: a CPU rank's whole host cost (the kernel runs
  // on the issuing thread, as in shardtune's own runtime), but not a GPU job's, whose kernels the
  // simulator issues from Python (Hugging Face modules, FSDP2's hooks; host_per_kernel's comment
  // in cost_model.h). On the lent H100 the probe read 5.5-7.9 us per op while a profiler trace of
  // FSDP2 + HF Llama-3.2-1B at micro-batch 1 showed ~190 ms of host time for ~3,900 kernels
  // (2026-11-26): the Python figure stays the constant (or `calibrate --trace`'s fit).
  if (t.host.kernel_launch && gpu.name == "CPU") e.host_per_kernel = *t.host.kernel_launch;
  return e;
}

const CostConstants& PlanConstants(const CostConstants& k, const model::ModelSpec& spec,
                                   const model::Plan& plan, const profiles::GpuSpec& gpu,
                                   CostConstants* storage) {
  if (!k.tables || k.tables->empty()) return k;
  *storage = EffectiveConstants(k, spec, plan, plan.ResolvedSeqLen(spec.max_seq_len), gpu);
  return *storage;
}

}  // namespace shardtune::sim
