// The RMSNorm kernels (executor/kernels/rms_norm.h) on a GPU against their double-precision host
// reference: y, rstd, dx and dw for fp32, bf16 (bf16 or fp32 weights) and fp16 activations, a
// hidden size that is no multiple of the block, more rows than the dw pass's chunks, and no dw.
// ctest label gpu; skipped where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "executor/kernels/rms_norm.h"
#include "tests/executor/half_bits.h"

namespace shardtune::exec::kernels {
namespace {

// Host values as the device reads them (rounded to `t`), and their bits.
struct HostTensor {
  std::vector<float> values;
  std::vector<uint16_t> half;
  ElementType type;
  size_t Bytes() const { return values.size() * (type == ElementType::kFp32 ? 4 : 2); }
  const void* Data() const {
    return type == ElementType::kFp32 ? static_cast<const void*>(values.data())
                                      : static_cast<const void*>(half.data());
  }
};

HostTensor Make(int64_t n, ElementType t, std::mt19937* gen, float mean, float stddev) {
  std::normal_distribution<float> d(mean, stddev);
  HostTensor h{std::vector<float>(static_cast<size_t>(n)), std::vector<uint16_t>(static_cast<size_t>(n)), t};
  for (size_t i = 0; i < h.values.size(); ++i) {
    float v = d(*gen);
    if (t == ElementType::kBf16) {
      h.half[i] = ToBf16(v);
      v = FromBf16(h.half[i]);
    } else if (t == ElementType::kFp16) {
      v = std::clamp(std::round(v * 256.f), -2047.f, 2047.f) / 256.f;  // exact in fp16
      h.half[i] = ToHalfExact(v);
    }
    h.values[i] = v;
  }
  return h;
}

std::vector<float> Read(const void* d, int64_t n, ElementType t) {
  std::vector<float> out(static_cast<size_t>(n));
  if (t == ElementType::kFp32) {
    cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost);
    return out;
  }
  std::vector<uint16_t> bits(out.size());
  cudaMemcpy(bits.data(), d, bits.size() * 2, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < out.size(); ++i) out[i] = t == ElementType::kBf16 ? FromBf16(bits[i]) : FromHalf(bits[i]);
  return out;
}

void* Upload(const HostTensor& h) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, h.Bytes()), cudaSuccess);
  cudaMemcpy(d, h.Data(), h.Bytes(), cudaMemcpyHostToDevice);
  return d;
}

// max |got - want| relative to max |want|.
double Relative(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    largest = std::max(largest, std::fabs(want[i]));
  }
  return worst / std::max(largest, 1e-30);
}

struct Case {
  ElementType type, weight_type;
  int64_t rows, hidden;
  bool dw;
};

void Check(const Case& c) {
  std::mt19937 gen(5);
  const int64_t n = c.rows * c.hidden;
  const float eps = 1e-6f;
  HostTensor x = Make(n, c.type, &gen, 0.f, 2.f);
  HostTensor dy = Make(n, c.type, &gen, 0.f, 1.f);
  HostTensor w = Make(c.hidden, c.weight_type, &gen, 1.f, 0.25f);
  std::vector<double> y(static_cast<size_t>(n)), rstd(static_cast<size_t>(c.rows)),
      dx(static_cast<size_t>(n)), dw(static_cast<size_t>(c.hidden));
  RmsNormReference(x.values.data(), w.values.data(), dy.values.data(), c.rows, c.hidden, eps,
                   y.data(), rstd.data(), dx.data(), dw.data());

  void *d_x = Upload(x), *d_dy = Upload(dy), *d_w = Upload(w);
  const size_t elem = c.type == ElementType::kFp32 ? 4 : 2;
  const size_t welem = c.weight_type == ElementType::kFp32 ? 4 : 2;
  void *d_y = nullptr, *d_dx = nullptr, *d_dw = nullptr;
  float *d_rstd = nullptr, *d_ws = nullptr;
  ASSERT_EQ(cudaMalloc(&d_y, static_cast<size_t>(n) * elem), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dx, static_cast<size_t>(n) * elem), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_dw, static_cast<size_t>(c.hidden) * welem), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_rstd), static_cast<size_t>(c.rows) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_ws),
                       static_cast<size_t>(RmsNormBackwardWorkspaceFloats(c.rows, c.hidden)) * 4),
            cudaSuccess);
  RmsNormForwardArgs f;
  f.x = d_x;
  f.w = d_w;
  f.y = d_y;
  f.rstd = d_rstd;
  f.type = c.type;
  f.weight_type = c.weight_type;
  f.rows = c.rows;
  f.hidden = c.hidden;
  f.eps = eps;
  ASSERT_EQ(LaunchRmsNormForward(f, nullptr), 0);
  RmsNormBackwardArgs b;
  b.dy = d_dy;
  b.x = d_x;
  b.w = d_w;
  b.rstd = d_rstd;
  b.dx = d_dx;
  b.dw = c.dw ? d_dw : nullptr;
  b.workspace = d_ws;
  b.type = c.type;
  b.weight_type = c.weight_type;
  b.rows = c.rows;
  b.hidden = c.hidden;
  ASSERT_EQ(LaunchRmsNormBackward(b, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got_y = Read(d_y, n, c.type), got_dx = Read(d_dx, n, c.type);
  std::vector<float> got_rstd = Read(d_rstd, c.rows, ElementType::kFp32);
  std::vector<float> got_dw = c.dw ? Read(d_dw, c.hidden, c.weight_type) : std::vector<float>();
  for (void* p : {d_x, d_dy, d_w, d_y, d_dx, d_dw, static_cast<void*>(d_rstd), static_cast<void*>(d_ws)}) cudaFree(p);
  // fp32 arithmetic against double; the stored outputs rounded to their dtypes (bf16: 8 bits,
  // fp16: 11 bits of mantissa); dw sums rows x (dy x̂) in fp32 before its rounding.
  auto tol = [](ElementType t) { return t == ElementType::kFp32 ? 2e-5 : t == ElementType::kBf16 ? 8e-3 : 1e-3; };
  EXPECT_LT(Relative(got_y, y), tol(c.type));
  EXPECT_LT(Relative(got_rstd, rstd), 1e-6);
  EXPECT_LT(Relative(got_dx, dx), tol(c.type));
  if (c.dw) EXPECT_LT(Relative(got_dw, dw), std::max(tol(c.weight_type), 1e-4));
}

TEST(RmsNormKernelTest, MatchesTheHostReference) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device visible";
  for (const Case& c : {Case{ElementType::kFp32, ElementType::kFp32, 7, 4096, true},
                        Case{ElementType::kBf16, ElementType::kBf16, 300, 2048, true},
                        Case{ElementType::kBf16, ElementType::kFp32, 5, 1000, true},
                        Case{ElementType::kFp16, ElementType::kFp16, 9, 5120, true},
                        Case{ElementType::kBf16, ElementType::kBf16, 3, 128, false}}) {
    SCOPED_TRACE(static_cast<int>(c.type));
    SCOPED_TRACE(c.hidden);
    Check(c);
  }
}

}  // namespace
}  // namespace shardtune::exec::kernels
