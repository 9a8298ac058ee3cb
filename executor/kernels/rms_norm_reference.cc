// The host reference of the RMSNorm kernels (rms_norm.h), in double.
#include <cmath>

#include "executor/kernels/rms_norm.h"

namespace shardtune::exec::kernels {

void RmsNormReference(const float* x, const float* w, const float* dy, int64_t rows,
                      int64_t hidden, double eps, double* y, double* rstd, double* dx, double* dw) {
  for (int64_t j = 0; j < hidden; ++j) dw[j] = 0;
  const double n = static_cast<double>(hidden);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * hidden;
    const float* gr = dy + r * hidden;
    double ss = 0;
    for (int64_t j = 0; j < hidden; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const double rs = 1.0 / std::sqrt(ss / n + eps);
    rstd[r] = rs;
    double dot = 0;  // sum_j dy*w*x̂
    for (int64_t j = 0; j < hidden; ++j) {
      const double xhat = xr[j] * rs;
      y[r * hidden + j] = xhat * w[j];
      dot += static_cast<double>(gr[j]) * w[j] * xhat;
      dw[j] += static_cast<double>(gr[j]) * xhat;
    }
    for (int64_t j = 0; j < hidden; ++j) {
      const double xhat = xr[j] * rs;
      dx[r * hidden + j] = rs * (static_cast<double>(gr[j]) * w[j] - xhat * dot / n);
    }
  }
}

}  // namespace shardtune::exec::kernels
