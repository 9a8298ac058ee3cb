// The device probe: GEMMs over the model's shapes, attention, the memory-bound kernels FSDP2
// and the training loop run, host costs, host<->device copies, and collectives over a group.
#include "executor/probe/probe.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "executor/comm/communicator.h"
#include "executor/comm/gloo_communicator.h"
#include "executor/comm/nccl_communicator.h"
#include "executor/comm/rendezvous.h"
#include "executor/cuda_support.h"
#include "executor/errors.h"
#include "executor/fsdp/optimizer.h"
#include "executor/host_info.h"
#include "model/errors.h"
#include "model/gemm_shapes.h"

namespace shardtune::exec {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

at::ScalarType ScalarOf(model::DType d) {
  switch (d) {
    case model::DType::kFp32: return at::kFloat;
    case model::DType::kBf16: return at::kBFloat16;
    case model::DType::kFp16: return at::kHalf;
  }
  return at::kFloat;
}


// Times `f` as the median of `iters` timings after `warmup` calls. Each timing runs f `reps`
// times between device synchronizations (reps chosen so one timing lasts about a millisecond:
// a single sub-millisecond kernel would otherwise be dominated by the synchronization) and
// divides by reps.
class Timer {
 public:
  Timer(bool cuda, int device, int warmup, int iters)
      : cuda_(cuda), device_(device), warmup_(warmup), iters_(iters) {}

  template <typename F>
  double Median(F&& f) {
    for (int i = 0; i < warmup_; ++i) f();
    Sync();
    auto t0 = Clock::now();
    f();
    Sync();
    double once = Since(t0);
    int reps = static_cast<int>(std::clamp(1e-3 / std::max(once, 1e-9), 1.0, 100.0));
    std::vector<double> t;
    for (int i = 0; i < iters_; ++i) {
      auto s = Clock::now();
      for (int r = 0; r < reps; ++r) f();
      Sync();
      t.push_back(Since(s) / reps);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

 private:
  void Sync() {
    if (cuda_) SynchronizeCuda(device_);
  }
  bool cuda_;
  int device_, warmup_, iters_;
};

struct Context {
  const ProbeOptions& o;
  at::Device device;
  Timer timer;
  Clock::time_point start;
  bool OverBudget() const { return Since(start) > o.budget_s; }
  at::TensorOptions Opts(model::DType d) const {
    return at::TensorOptions().dtype(ScalarOf(d)).device(device);
  }
};

void ProbeGemms(Context& c, const std::vector<model::DType>& dtypes, profiles::KernelTables* t) {
  std::set<std::tuple<int64_t, int64_t, int64_t, int>> shapes;  // m, n, k, role
  for (int64_t m : c.o.tokens) {
    std::vector<model::GemmShape> fwd = model::BlockForwardGemms(c.o.spec, m, c.o.spec.num_layers - 1);
    if (c.o.spec.Heterogeneous()) {  // the dense prefix's MLP shapes too
      for (const auto& g : model::BlockForwardGemms(c.o.spec, m, 0)) fwd.push_back(g);
    }
    fwd.push_back(model::HeadForwardGemm(c.o.spec, m));
    for (const model::GemmShape& g : model::WithBackward(fwd)) {
      shapes.insert({g.m, g.n, g.k, static_cast<int>(g.role)});
    }
  }
  // Smallest first, so a budget cut leaves the small shapes measured and the interpolation
  // extrapolates upward at the largest sample's throughput (kernel_time.h).
  std::vector<std::tuple<int64_t, int64_t, int64_t, int>> order(shapes.begin(), shapes.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::get<0>(a) * std::get<1>(a) * std::get<2>(a) <
           std::get<0>(b) * std::get<1>(b) * std::get<2>(b);
  });
  for (model::DType d : dtypes) {
    double rate = 0;  // last achieved FLOP/s: skip shapes that would overrun the budget
    for (const auto& [m, n, k, role] : order) {
      double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
      double left = c.o.budget_s - Since(c.start);
      if (left <= 0 || (rate > 0 && flops / rate * (c.o.warmup + c.o.iters + 1) > left)) break;
      // The operands in the layout autograd uses for this product (model/gemm_shapes.h).
      at::Tensor a, b;
      switch (static_cast<model::GemmRole>(role)) {
        case model::GemmRole::kForward:
          a = at::randn({m, k}, c.Opts(d));
          b = at::randn({n, k}, c.Opts(d)).t();
          break;
        case model::GemmRole::kInputGrad:
          a = at::randn({m, k}, c.Opts(d));
          b = at::randn({k, n}, c.Opts(d));
          break;
        case model::GemmRole::kWeightGrad:
          a = at::randn({k, m}, c.Opts(d)).t();
          b = at::randn({k, n}, c.Opts(d));
          break;
      }
      at::Tensor out = at::empty({m, n}, c.Opts(d));
      double s = c.timer.Median([&] { at::mm_out(out, a, b); });
      rate = flops / s;
      profiles::GemmSample g;
      g.dtype = d;
      g.tf32 = d == model::DType::kFp32 && c.device.is_cuda();
      g.m = m;
      g.n = n;
      g.k = k;
      g.time = Seconds::Of(s);
      t->gemm.push_back(g);
    }
  }
}

// Causal attention forward and backward. LibTorch >= 2.0: at::scaled_dot_product_attention;
// 1.13: the math path (QK^T, mask, softmax, PV) as the executor's eager attention runs it.
// On CUDA with LibTorch >= 2.5 every fused backend the shape admits is timed by forcing it
// (at::globalContext().setSDPUse*, what torch.nn.attention.sdpa_kernel does), and the row of the
// one PyTorch picks itself (at::_fused_sdp_choice: aten sdp_utils.cpp select_sdp_backend; on an
// H100 cuDNN attention with torch 2.11, FlashAttention-2 before) is marked pytorch_default, so
// `--sdpa-backend` can ask for another torch's choice. Older LibTorch: PyTorch's own choice,
// labelled by its priority order (flash for bf16/fp16, memory-efficient for fp32).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define SHARDTUNE_PROBE_SDPA_BACKENDS 1
namespace {
// at::SDPBackend (ATen/SDPBackend.h): math 0, flash_attention 1, efficient_attention 2,
// cudnn_attention 3.
const char* SdpBackendName(int64_t b) {
  switch (b) {
    case 0: return "math";
    case 1: return "flash";
    case 2: return "efficient";
    case 3: return "cudnn";
    default: return "";
  }
}
// Enables only SDPA backend `b` (an at::SDPBackend value) while alive.
class SdpBackendScope {
 public:
  explicit SdpBackendScope(int64_t b)
      : flash_(at::globalContext().userEnabledFlashSDP()),
        efficient_(at::globalContext().userEnabledMemEfficientSDP()),
        math_(at::globalContext().userEnabledMathSDP()),
        cudnn_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseFlash(b == 1);
    at::globalContext().setSDPUseMemEfficient(b == 2);
    at::globalContext().setSDPUseMath(b == 0);
    at::globalContext().setSDPUseCuDNN(b == 3);
  }
  ~SdpBackendScope() {
    at::globalContext().setSDPUseFlash(flash_);
    at::globalContext().setSDPUseMemEfficient(efficient_);
    at::globalContext().setSDPUseMath(math_);
    at::globalContext().setSDPUseCuDNN(cudnn_);
  }
  SdpBackendScope(const SdpBackendScope&) = delete;
  SdpBackendScope& operator=(const SdpBackendScope&) = delete;

 private:
  bool flash_, efficient_, math_, cudnn_;
};
}  // namespace
#endif

void ProbeAttention(Context& c, const std::vector<model::DType>& dtypes,
                    profiles::KernelTables* t) {
  const model::ModelSpec& s = c.o.spec;
  std::vector<int64_t> seqs = c.device.is_cuda() ? std::vector<int64_t>{1024, 2048, 4096, 8192}
                                                 : std::vector<int64_t>{128, 256, 512};
  for (model::DType d : dtypes) {
    for (int64_t seq : seqs) {
      if (c.OverBudget()) return;
      auto opts = c.Opts(d);
      at::Tensor q = at::randn({1, s.num_heads, seq, s.head_dim}, opts).requires_grad_();
      at::Tensor k = at::randn({1, s.num_heads, seq, s.head_dim}, opts).requires_grad_();
      at::Tensor v = at::randn({1, s.num_heads, seq, s.head_dim}, opts).requires_grad_();
      auto forward = [&]() -> at::Tensor {
#if TORCH_VERSION_MAJOR >= 2
        return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
        at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(s.head_dim));
        at::Tensor mask = at::ones({seq, seq}, c.Opts(model::DType::kFp32).dtype(at::kBool)).triu(1);
        return at::matmul(at::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1), v);
#endif
      };
      at::Tensor grad = at::randn({1, s.num_heads, seq, s.head_dim}, c.Opts(d));
      auto measure = [&](const std::string& backend, bool pytorch_default) {
        double fwd = c.timer.Median([&] {
          torch::NoGradGuard g;
          forward();
        });
        double both = c.timer.Median([&] {
          at::Tensor o = forward();
          o.backward(grad);
        });
        profiles::AttentionSample a;
        a.backend = backend;
        a.pytorch_default = pytorch_default;
        a.dtype = d;
        a.batch = 1;
        a.seq_len = seq;
        a.heads = s.num_heads;
        a.kv_heads = s.num_heads;  // k and v at full heads (GQA repeats them before the kernel)
        a.head_dim = s.head_dim;
        a.causal = true;
        a.forward = Seconds::Of(fwd);
        a.backward = Seconds::Of(std::max(both - fwd, 1e-9));
        t->attention.push_back(a);
      };
#ifdef SHARDTUNE_PROBE_SDPA_BACKENDS
      if (c.device.is_cuda()) {
        const int64_t chosen = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true);
        for (int64_t b : {int64_t{3}, int64_t{1}, int64_t{2}}) {  // cudnn, flash, efficient
          if (c.OverBudget()) return;
          SdpBackendScope only(b);
          int64_t got = -1;
          try {
            got = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true);
          } catch (const c10::Error&) {  // the shape or dtype is not one this backend takes
            continue;
          }
          if (got != b) continue;
          measure(SdpBackendName(b), b == chosen);
        }
        continue;
      }
#endif
      std::string backend = c.device.is_cuda() ? "math" : "cpu";
#if TORCH_VERSION_MAJOR >= 2
      // PyTorch's SDPA priority (flash, memory-efficient, math; aten sdp_utils.cpp): flash takes
      // only fp16/bf16, so an fp32 probe runs the memory-efficient kernel.
      if (c.device.is_cuda()) backend = d == model::DType::kFp32 ? "efficient" : "flash";
#endif
      measure(backend, true);
    }
  }
}

void ProbeMemoryKernels(Context& c, model::DType d, profiles::KernelTables* t) {
  const int64_t e = model::BytesPerElement(d);
  const int64_t max_elems = c.device.is_cuda() ? int64_t{1} << 28 : int64_t{1} << 24;
  constexpr int kParts = 8;  // tensors per foreach / copy-in list
  auto add = [&](profiles::MemoryKernel k, int64_t bytes, double s) {
    t->memory.push_back({k, bytes, Seconds::Of(s)});
  };
  for (int64_t n = int64_t{1} << 16; n <= max_elems; n *= 4) {
    if (c.OverBudget()) return;
    at::Tensor a = at::randn({n}, c.Opts(d)), b = at::randn({n}, c.Opts(d));
    at::Tensor out = at::empty({n}, c.Opts(d));
    add(profiles::MemoryKernel::kElementwise, 3 * n * e,
        c.timer.Median([&] { at::mul_out(out, a, b); }));
    at::Tensor f32 = at::randn({n}, c.Opts(model::DType::kFp32));
    at::Tensor bf16 = at::empty({n}, c.Opts(model::DType::kBf16));
    add(profiles::MemoryKernel::kCast, 6 * n, c.timer.Median([&] { bf16.copy_(f32); }));
    add(profiles::MemoryKernel::kCopy, 2 * n * e, c.timer.Median([&] { out.copy_(a); }));
    // FSDP2 copy-in / copy-out / chunk-cat over kParts tensors of n / kParts elements.
    std::vector<at::Tensor> parts;
    for (int i = 0; i < kParts; ++i) parts.push_back(at::randn({n / kParts}, c.Opts(d)));
    at::Tensor flat = at::empty({n / kParts * kParts}, c.Opts(d));
    add(profiles::MemoryKernel::kAllGatherCopyIn, 2 * n * e, c.timer.Median([&] {
          std::vector<at::Tensor> dst = flat.chunk(kParts);
          for (int i = 0; i < kParts; ++i) dst[static_cast<size_t>(i)].copy_(parts[static_cast<size_t>(i)]);
        }));
    add(profiles::MemoryKernel::kAllGatherCopyOut, 2 * n * e, c.timer.Median([&] {
          std::vector<at::Tensor> src = flat.chunk(kParts);
          for (int i = 0; i < kParts; ++i) parts[static_cast<size_t>(i)].copy_(src[static_cast<size_t>(i)]);
        }));
    add(profiles::MemoryKernel::kReduceScatterChunkCat, 2 * n * e, c.timer.Median([&] {
          std::vector<at::Tensor> rows;
          for (const at::Tensor& p : parts) rows.push_back(p.view({8, -1}));
          at::Tensor out_rows = flat.view({8, -1});
          at::cat_out(out_rows, rows, 1);
        }));
    // AdamW, foreach (torch/optim/adam.py _multi_tensor_adam, decoupled weight decay), fp32.
    std::vector<at::Tensor> p32, g32, m32, v32;
    for (int i = 0; i < kParts; ++i) {
      p32.push_back(at::randn({n / kParts}, c.Opts(model::DType::kFp32)));
      g32.push_back(at::randn({n / kParts}, c.Opts(model::DType::kFp32)));
      m32.push_back(at::zeros({n / kParts}, c.Opts(model::DType::kFp32)));
      v32.push_back(at::zeros({n / kParts}, c.Opts(model::DType::kFp32)));
    }
    // The ops torch.optim.AdamW(foreach=True) runs (TorchForeachAdamWStep, optimizer.h), the
    // bias correction's _foreach_div_ of the denominators included (profiles measured before
    // 2026-11-28 timed eight of its nine passes, without it).
    add(profiles::MemoryKernel::kAdamwForeach, 16 * n, c.timer.Median([&] {
          TorchForeachAdamWStep(p32, g32, m32, v32, 1e-3, 0.01, 2);
        }));
  }
  // Cross-entropy over [T, V] logits (HF: logits.float(), then F.cross_entropy).
  const int64_t v = std::max<int64_t>(2, c.o.spec.vocab_size);
  for (int64_t tok : {int64_t{64}, int64_t{256}, int64_t{1024}}) {
    if (c.OverBudget() || (!c.device.is_cuda() && tok * v > (int64_t{1} << 24))) return;
    at::Tensor logits = at::randn({tok, v}, c.Opts(d)).requires_grad_();
    at::Tensor target = at::randint(v, {tok}, at::TensorOptions().dtype(at::kLong).device(c.device));
    add(profiles::MemoryKernel::kCrossEntropy, 4 * tok * v, c.timer.Median([&] {
          at::Tensor loss = at::cross_entropy_loss(logits.to(at::kFloat), target);
          loss.backward();
        }));
  }
}

// torch.optim.AdamW(foreach=True) on fp32 tensors in host memory, as FSDP2's CPUOffloadPolicy
// steps it (torch/optim/adam.py _multi_tensor_adam; on CPU each _foreach op runs ATen's op per
// tensor, and _foreach_sqrt allocates every denominator afresh each step), timed on the host
// whatever the probe's device. 8 tensors of N/8, N up to 2^27 on a GPU machine's host (64 MB per
// tensor: above glibc's 32 MB mmap threshold, so the denominators page-fault in each step as a
// large model's do) and 2^24 on a CPU probe. bytes = 16 N, as adamw_foreach.
void ProbeHostOptimizer(Context& c, profiles::KernelTables* t) {
  const int64_t max_elems = c.device.is_cuda() ? int64_t{1} << 27 : int64_t{1} << 24;
  constexpr int kParts = 8;
  Timer host(false, 0, 1, c.o.iters);
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  for (int64_t n = int64_t{1} << 20; n <= max_elems; n *= 4) {
    if (c.OverBudget()) return;
    std::vector<at::Tensor> p, g, m, v;
    for (int i = 0; i < kParts; ++i) {
      p.push_back(at::randn({n / kParts}, f32));
      g.push_back(at::randn({n / kParts}, f32));
      m.push_back(at::zeros({n / kParts}, f32));
      v.push_back(at::zeros({n / kParts}, f32));
    }
    const double s = host.Median([&] { TorchForeachAdamWStep(p, g, m, v, 1e-4, 0.01, 1); });
    t->memory.push_back({profiles::MemoryKernel::kHostAdamwForeach, 16 * n, Seconds::Of(s)});
  }
}

void ProbeHost(Context& c, profiles::KernelTables* t) {
  at::Tensor a = at::ones({1}, c.Opts(model::DType::kFp32));
  at::Tensor b = at::ones({1}, c.Opts(model::DType::kFp32));
  at::Tensor out = at::empty({1}, c.Opts(model::DType::kFp32));
  // One op through the dispatcher on a one-element tensor: on a CPU rank the kernel runs on the
  // calling thread, so this is the launch cost too; on a GPU the launch is timed without a
  // synchronization per call (the host's issue rate, which is what the GPU waits for).
  constexpr int kCalls = 2000;
  auto per_call = [&] {
    std::vector<double> samples;
    for (int r = 0; r < c.o.iters; ++r) {
      auto s = Clock::now();
      for (int i = 0; i < kCalls; ++i) at::add_out(out, a, b);
      samples.push_back(Since(s) / kCalls);
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
  };
  double d = per_call();
  t->host.op_dispatch = Seconds::Of(d);
  t->host.kernel_launch = Seconds::Of(d);
  if (c.device.is_cuda()) SynchronizeCuda(c.o.cuda_device);
  // module_hook: LibTorch's C++ modules have no hooks; FSDP2's Python hooks are not measurable
  // from here (left out; the catalog's figure stays).
}

void ProbeCopies(Context& c, profiles::KernelTables* t) {
  if (!c.device.is_cuda()) return;  // host <-> device copies exist only with a GPU
  for (int64_t bytes = int64_t{1} << 20; bytes <= (int64_t{1} << 28); bytes *= 4) {
    for (bool pinned : {true, false}) {
      if (c.OverBudget()) return;
      at::Tensor host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned));
      at::Tensor dev = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(c.device));
      t->copies.push_back({true, pinned, bytes, Seconds::Of(c.timer.Median([&] { dev.copy_(host, pinned); }))});
      t->copies.push_back({false, pinned, bytes, Seconds::Of(c.timer.Median([&] { host.copy_(dev, pinned); }))});
    }
  }
}

}  // namespace

ProbeResult RunProbe(const ProbeOptions& in) {
  ProbeOptions o = in;
  if (o.device != "cpu" && o.device != "cuda") {
    throw InputError("--device: expected cpu or cuda, got \"" + o.device + "\"");
  }
  if (o.device == "cuda" && !CudaAvailable()) {
    throw InputError("--device cuda: no CUDA device is visible to this LibTorch (use --device cpu)");
  }
  if (o.tokens.empty()) {
    o.tokens = o.device == "cuda" ? std::vector<int64_t>{1024, 2048, 4096, 8192, 16384}
                                  : std::vector<int64_t>{64, 256, 1024};
  }
  if (o.dtypes.empty()) {
    o.dtypes = o.device == "cuda" ? std::vector<model::DType>{model::DType::kBf16, model::DType::kFp32}
                                  : std::vector<model::DType>{model::DType::kFp32};
  }
  if (o.threads > 0) at::set_num_threads(o.threads);
  if (o.device == "cuda") SetCudaDevice(o.cuda_device);
  at::manual_seed(0);
  at::Device device = o.device == "cuda" ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o.cuda_device))
                                         : at::Device(at::kCPU);
  Context c{o, device, Timer(o.device == "cuda", o.cuda_device, o.warmup, o.iters), Clock::now()};
  ProbeResult r;
  r.device_name = o.device == "cuda" ? CudaDeviceName(o.cuda_device) : "cpu (" + CpuModel() + ", " +
                                           std::to_string(at::get_num_threads()) + " threads)";
  r.torch_version = TORCH_VERSION;
  if (o.device == "cuda") {  // the profile's provenance (profile_json.h)
    r.cuda_version = CudaRuntimeVersion();
    r.driver_version = NvidiaDriverVersion();
    const std::string supports = CudaDriverVersion();
    if (r.driver_version.empty() && !supports.empty()) r.driver_version = "supports CUDA " + supports;
    r.nccl_version = NcclVersionString();
  }
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  try {
    // Cheapest tables first, so a short --budget-s still leaves every kind of kernel timed at
    // its smaller sizes.
    say("probe: host costs");
    ProbeHost(c, &r.tables);
    say("probe: memory-bound kernels");
    ProbeMemoryKernels(c, o.dtypes.front(), &r.tables);
    say("probe: host optimizer (AdamW on CPU tensors, as CPU offload runs it)");
    ProbeHostOptimizer(c, &r.tables);
    say("probe: GEMMs over " + std::to_string(o.tokens.size()) + " token counts");
    ProbeGemms(c, o.dtypes, &r.tables);
    say("probe: attention");
    ProbeAttention(c, o.dtypes, &r.tables);
    ProbeCopies(c, &r.tables);
  } catch (const c10::Error& e) {
    throw BackendError(std::string("probe: LibTorch failed: ") + e.what_without_backtrace());
  }
  r.elapsed_s = Since(c.start);
  say("probe: " + std::to_string(r.tables.gemm.size()) + " GEMM, " +
      std::to_string(r.tables.attention.size()) + " attention, " +
      std::to_string(r.tables.memory.size()) + " memory-bound samples in " +
      std::to_string(static_cast<int>(r.elapsed_s)) + " s");
  return r;
}

std::vector<profiles::CollectiveSample> ProbeCollectives(Communicator& world,
                                                         const std::string& backend,
                                                         const std::string& device,
                                                         int cuda_device, int64_t max_bytes,
                                                         int iters) {
  std::vector<profiles::CollectiveSample> out;
  const int n = world.size();
  const bool cuda = device == "cuda";
  auto opts = at::TensorOptions().dtype(at::kFloat).device(
      cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)) : at::Device(at::kCPU));
  for (int64_t bytes = int64_t{1} << 16; bytes <= max_bytes; bytes *= 4) {
    const int64_t numel = bytes / 4 / n * n;  // divisible by the group
    at::Tensor full = at::randn({numel}, opts), shard = at::empty({numel / n}, opts);
    at::Tensor other = at::empty({numel}, opts);
    auto time = [&](auto&& f) {
      std::vector<double> t;
      for (int i = 0; i < iters + 1; ++i) {
        world.Barrier();
        auto s = Clock::now();
        f()->Wait();
        if (cuda) SynchronizeCuda(cuda_device);
        if (i > 0) t.push_back(Since(s));  // the first is the warm-up
      }
      std::sort(t.begin(), t.end());
      return Seconds::Of(t[t.size() / 2]);
    };
    const int64_t s = numel * 4;
    out.push_back({profiles::Collective::kAllGather, backend, n, s,
                   time([&] { return world.AllGather(shard, full); })});
    out.push_back({profiles::Collective::kReduceScatter, backend, n, s,
                   time([&] { return world.ReduceScatter(full, shard); })});
    out.push_back({profiles::Collective::kAllReduce, backend, n, s,
                   time([&] { return world.AllReduce(full); })});
    out.push_back({profiles::Collective::kAllToAll, backend, n, s,
                   time([&] { return world.AllToAll(full, other); })});
  }
  return out;
}

std::vector<profiles::CollectiveSample> ProbeCollectivesOverWorld(const RankEnv& world,
                                                                  double timeout_s,
                                                                  const std::string& device,
                                                                  int cuda_device, int64_t max_bytes,
                                                                  int iters) {
  auto rendezvous = Rendezvous::Connect(RendezvousOptionsOf(world, timeout_s));
  std::vector<int> ranks;
  for (int r = 0; r < world.world_size; ++r) ranks.push_back(r);
  auto log = std::make_shared<CollectiveLog>();
  const bool cuda = device == "cuda";
  std::unique_ptr<Communicator> comm =
      cuda ? MakeNcclCommunicator(rendezvous.get(), "world", 0, ranks, cuda_device, log)
           : MakeGlooCommunicator(*rendezvous, "world", 0, ranks, log);
  std::vector<profiles::CollectiveSample> samples =
      ProbeCollectives(*comm, cuda ? "nccl" : "gloo", device, cuda_device, max_bytes, iters);
  comm->Barrier();
  return samples;
}

}  // namespace shardtune::exec
