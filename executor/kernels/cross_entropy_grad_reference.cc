// The host reference of the cross-entropy gradient kernel (cross_entropy_grad.h), in double.
#include <algorithm>
#include <cmath>

#include "executor/kernels/cross_entropy_grad.h"

namespace shardtune::exec::kernels {

void CrossEntropyGradReference(const float* logits, int64_t rows, int64_t vocab,
                               const int64_t* labels, int64_t ignore_index, double scale,
                               double softcap, double* grad, double* loss_rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits + r * vocab;
    const int64_t y = labels[r];
    const bool counted = y != ignore_index && y >= 0 && y < vocab;
    auto capped = [&](double x) { return softcap > 0 ? softcap * std::tanh(x / softcap) : x; };
    double m = -INFINITY;
    for (int64_t j = 0; j < vocab; ++j) m = std::max(m, capped(z[j]));
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(capped(z[j]) - m);
    loss_rows[r] = counted ? std::log(s) + m - capped(z[y]) : 0.0;
    for (int64_t j = 0; j < vocab; ++j) {
      double d = counted ? (std::exp(capped(z[j]) - m) / s - (j == y ? 1.0 : 0.0)) * scale : 0.0;
      if (softcap > 0) {
        double t = std::tanh(z[j] / softcap);
        d *= 1.0 - t * t;
      }
      grad[r * vocab + j] = d;
    }
  }
}

}  // namespace shardtune::exec::kernels
