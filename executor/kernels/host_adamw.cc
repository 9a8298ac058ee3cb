// The host optimizer's kernels (host_adamw.h). Compiled with -O3 -fno-math-errno
// (executor/CMakeLists.txt) so the loops vectorise, sqrt included.
#include "executor/kernels/host_adamw.h"

#include <cmath>

namespace shardtune::exec {

HostAdamWScalars MakeHostAdamWScalars(double lr, double beta1, double beta2, double eps,
                                      double weight_decay, int64_t step) {
  HostAdamWScalars s;
  const double t = static_cast<double>(step);
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  s.neg_step_size = static_cast<float>(-lr / (1.0 - std::pow(beta1, t)));
  return s;
}

void HostAdamWRange(float* __restrict p, const float* __restrict g, float* __restrict m,
                    float* __restrict v, int64_t begin, int64_t end, const HostAdamWScalars& s) {
  const HostAdamWScalars k = s;  // locals the vectoriser can keep in registers
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float pi = p[i] * k.decay;                                  // p.mul_(1 - lr * wd)
    const float mi = m[i] * k.beta1 + k.one_minus_beta1 * gi;         // m.mul_(b1).add_(g, 1 - b1)
    const float vi = v[i] * k.beta2 + k.one_minus_beta2 * gi * gi;    // v.mul_(b2).addcmul_(g, g, 1 - b2)
    const float denom = std::sqrt(vi) / k.bias_correction2_sqrt + k.eps;
    p[i] = pi + k.neg_step_size * (mi / denom);                       // p.addcdiv_(m, denom, -step)
    m[i] = mi;
    v[i] = vi;
  }
}

double HostSumOfSquares(const float* x, int64_t begin, int64_t end) {
  // Eight interleaved accumulators (a fixed order, so the same bits for the same range), which
  // keeps eight fp64 adds in flight instead of one chain.
  constexpr int kLanes = 8;
  double lane[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double xj = x[i + j];
      lane[j] += xj * xj;
    }
  }
  double tail = 0;
  for (; i < end; ++i) tail += static_cast<double>(x[i]) * x[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

}  // namespace shardtune::exec
