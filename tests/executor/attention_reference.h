// Causal attention written out in doubles: the reference of the executor's attention tests
// (Gemma 2's soft-capping, GPT-OSS's sinks; transformer.cc Core).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace shardtune::exec::testing {

// out[b, h, i, :] = sum_{j <= i} p_ij v[b, h / (a / kv), j, :], p_ij = exp(s_ij - m) / Z with
// s_ij = q_i . k_j / sqrt(D), soft-capped to cap x tanh(s / cap) when cap > 0, m the row's max
// and Z = sum_{j <= i} exp(s_ij - m), plus exp(sinks[h] - m) (m then over the sink too) when
// `sinks` [a] is given: the sink takes a share of the row and gives nothing back (GPT-OSS).
inline std::vector<double> CausalAttentionReference(const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v, double cap,
                                                    const at::Tensor& sinks = {}) {
  int64_t B = q.size(0), a = q.size(1), S = q.size(2), D = q.size(3), kv = k.size(1);
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < a; ++h) {
      const int64_t g = h / (a / kv);
      const double sink = sinks.defined() ? sinks[h].item<double>() : 0.0;
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double m = sinks.defined() ? sink : -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[b][h][i][d].item<double>() * k[b][g][j][d].item<double>();
          double x = dot / std::sqrt(static_cast<double>(D));
          if (cap > 0) x = cap * std::tanh(x / cap);
          s[static_cast<size_t>(j)] = x;
          m = std::max(m, x);
        }
        double z = sinks.defined() ? std::exp(sink - m) : 0.0;
        for (double& x : s) z += (x = std::exp(x - m));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += s[static_cast<size_t>(j)] / z * v[b][g][j][d].item<double>();
          out.push_back(o);
        }
      }
    }
  }
  return out;
}

// max |got - want| over the elements of `got` in row-major order.
inline double MaxError(const at::Tensor& got, const std::vector<double>& want) {
  at::Tensor flat = got.to(at::kDouble).contiguous().view({-1});
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(flat[static_cast<int64_t>(i)].item<double>() - want[i]));
  }
  return err;
}

}  // namespace shardtune::exec::testing
