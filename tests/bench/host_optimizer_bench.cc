// Benchmark (not a test): the host AdamW step of CPU offload, shardtune's one-pass kernel
// (executor/kernels/host_adamw.h through ShardedOptimizer) against the two paths
// torch.optim.AdamW takes on CPU tensors, which is what FSDP2's CPUOffloadPolicy runs:
//  - foreach (torch/optim/adam.py _multi_tensor_adam; measure_fsdp2.py passes foreach=True):
//    _foreach_mul_(p), exp_avg lerp as mul_ + add_, _foreach_mul_(v), _foreach_addcmul_,
//    _foreach_sqrt into new tensors, _foreach_div_, _foreach_add_, _foreach_addcdiv_;
//  - for-loop (_single_tensor_adam, foreach=False): the same ops one tensor at a time.
// Each over `--tensors` fp32 shards totalling `--elements`, median of `--iters` steps after one
// warm-up. Prints seconds per step, the rate in elements per second, and each path's time over
// shardtune's. The DRAM traffic each path needs: 80 bytes per element for the per-op paths (and
// a fresh temporary per tensor per step), 28 for the one-pass kernel.
//
// Usage: build/tests/bench/host_optimizer_bench [--elements N] [--tensors T] [--iters K] [--threads J]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "executor/host_info.h"
#include "executor/fsdp/optimizer.h"

namespace {

using shardtune::exec::AdamWOptions;
using shardtune::exec::ShardedOptimizer;

double MedianSeconds(int iters, const std::function<void()>& fn) {
  fn();  // warm-up: first-touch page faults of the state, as the first optimizer step pays them
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    auto s = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int64_t Arg(int argc, char** argv, const char* name, int64_t dflt) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) {
      char* end = nullptr;
      long long v = std::strtoll(argv[i + 1], &end, 10);
      if (!end || *end != '\0' || v <= 0) {
        std::fprintf(stderr, "host_optimizer_bench: %s: expected a positive integer, got \"%s\"\n", name, argv[i + 1]);
        std::exit(2);
      }
      return v;
    }
  }
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t elements = Arg(argc, argv, "--elements", int64_t{1} << 26);
  const int64_t tensors = Arg(argc, argv, "--tensors", 8);
  const int iters = static_cast<int>(Arg(argc, argv, "--iters", 5));
  const int64_t threads = Arg(argc, argv, "--threads", 0);
  if (threads > 0) at::set_num_threads(static_cast<int>(threads));
  at::NoGradGuard no_grad;
  at::manual_seed(0);
  const int64_t per = elements / tensors;
  auto make = [&](bool zeros) {
    std::vector<at::Tensor> v;
    for (int64_t i = 0; i < tensors; ++i) v.push_back(zeros ? at::zeros({per}) : at::randn({per}));
    return v;
  };
  const double lr = 1e-4, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf("host AdamW step, %s, %s, %d intra-op threads, %lld fp32 elements in %lld tensors, median of %d\n",
              date, shardtune::exec::CpuModel().c_str(), at::get_num_threads(),
              static_cast<long long>(per * tensors), static_cast<long long>(tensors), iters);

  // torch.optim.AdamW(foreach=True) on CPU tensors.
  std::vector<at::Tensor> p = make(false), g = make(false), m = make(true), v = make(true);
  int64_t step = 0;
  const double t_foreach =
      MedianSeconds(iters, [&] { shardtune::exec::TorchForeachAdamWStep(p, g, m, v, lr, wd, ++step); });
  // torch.optim.AdamW(foreach=False): _single_tensor_adam.
  step = 0;
  const double t_loop = MedianSeconds(iters, [&] {
    ++step;
    double bc1 = 1 - std::pow(b1, static_cast<double>(step));
    double bc2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(step)));
    for (int64_t i = 0; i < tensors; ++i) {
      const auto k = static_cast<size_t>(i);
      p[k].mul_(1 - lr * wd);
      m[k].mul_(b1).add_(g[k], 1 - b1);
      v[k].mul_(b2).addcmul_(g[k], g[k], 1 - b2);
      at::Tensor denom = v[k].sqrt().div_(bc2_sqrt).add_(eps);
      p[k].addcdiv_(m[k], denom, -lr / bc1);
    }
  });
  // shardtune's host step (state created at its first step, inside the warm-up).
  std::vector<at::Tensor*> pp, gp;
  for (int64_t i = 0; i < tensors; ++i) {
    pp.push_back(&p[static_cast<size_t>(i)]);
    gp.push_back(&g[static_cast<size_t>(i)]);
  }
  AdamWOptions o;
  o.weight_decay = wd;
  ShardedOptimizer mine(shardtune::model::Optimizer::kAdamW, o, pp, gp);
  const double t_mine = MedianSeconds(iters, [&] { mine.Step(lr); });

  const double n = static_cast<double>(per * tensors);
  std::printf("| path | s per step | elements/s | DRAM bytes/element (needed) | time / shardtune's |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  std::printf("| torch.optim.AdamW foreach=True (FSDP2 CPUOffloadPolicy, measure_fsdp2.py) | %.4f | %.3g | 80 | %.2fx |\n",
              t_foreach, n / t_foreach, t_foreach / t_mine);
  std::printf("| torch.optim.AdamW foreach=False | %.4f | %.3g | 80 | %.2fx |\n", t_loop, n / t_loop, t_loop / t_mine);
  std::printf("| shardtune host AdamW (one pass) | %.4f | %.3g | 28 | 1.00x |\n", t_mine, n / t_mine);
  return 0;
}
