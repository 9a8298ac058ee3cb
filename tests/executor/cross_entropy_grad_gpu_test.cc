// The cross-entropy gradient kernel (executor/kernels/cross_entropy_grad.h) on a GPU against its
// double-precision host reference: losses and gradients for fp32, bf16 and fp16 logits, ignored
// labels, Gemma 2's soft-capping, a vocabulary that is no multiple of the block, and more threads
// than entries. ctest label gpu; skipped where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "executor/kernels/cross_entropy_grad.h"
#include "tests/executor/half_bits.h"

namespace shardtune::exec::kernels {
namespace {

struct Case {
  ElementType type;
  int64_t rows, vocab;
  double softcap;
};

void Check(const Case& c) {
  std::mt19937 gen(11);
  std::normal_distribution<float> n(0.f, 3.f);
  const int64_t count = c.rows * c.vocab;
  std::vector<float> values(static_cast<size_t>(count));
  std::vector<uint16_t> half(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    float v = n(gen);
    if (c.type == ElementType::kBf16) {
      half[static_cast<size_t>(i)] = ToBf16(v);
      v = FromBf16(half[static_cast<size_t>(i)]);
    } else if (c.type == ElementType::kFp16) {
      v = std::clamp(std::round(v * 256.f), -2047.f, 2047.f) / 256.f;  // exact in fp16
      half[static_cast<size_t>(i)] = ToHalfExact(v);
      EXPECT_EQ(FromHalf(half[static_cast<size_t>(i)]), v);
    }
    values[static_cast<size_t>(i)] = v;
  }
  std::vector<int64_t> labels(static_cast<size_t>(c.rows));
  for (int64_t r = 0; r < c.rows; ++r) labels[static_cast<size_t>(r)] = (r * 7919) % c.vocab;
  labels[1] = -100;  // ignored
  const float scale = 1.f / static_cast<float>(c.rows - 1);
  std::vector<double> want_grad(static_cast<size_t>(count)), want_loss(static_cast<size_t>(c.rows));
  CrossEntropyGradReference(values.data(), c.rows, c.vocab, labels.data(), -100, scale, c.softcap,
                            want_grad.data(), want_loss.data());

  const size_t elem = c.type == ElementType::kFp32 ? 4 : 2;
  void* d_logits = nullptr;
  int64_t* d_labels = nullptr;
  float *d_scale = nullptr, *d_loss = nullptr;
  ASSERT_EQ(cudaMalloc(&d_logits, static_cast<size_t>(count) * elem), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_labels), labels.size() * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_scale), 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_loss), static_cast<size_t>(c.rows) * 4), cudaSuccess);
  const void* src = c.type == ElementType::kFp32 ? static_cast<const void*>(values.data())
                                                 : static_cast<const void*>(half.data());
  cudaMemcpy(d_logits, src, static_cast<size_t>(count) * elem, cudaMemcpyHostToDevice);
  cudaMemcpy(d_labels, labels.data(), labels.size() * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(d_scale, &scale, 4, cudaMemcpyHostToDevice);
  CrossEntropyGradArgs a;
  a.logits = d_logits;
  a.type = c.type;
  a.rows = c.rows;
  a.vocab = c.vocab;
  a.labels = d_labels;
  a.scale = d_scale;
  a.softcap = static_cast<float>(c.softcap);
  a.loss_rows = d_loss;
  ASSERT_EQ(LaunchCrossEntropyGrad(a, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> loss(static_cast<size_t>(c.rows));
  cudaMemcpy(loss.data(), d_loss, loss.size() * 4, cudaMemcpyDeviceToHost);
  std::vector<float> grad(static_cast<size_t>(count));
  if (c.type == ElementType::kFp32) {
    cudaMemcpy(grad.data(), d_logits, static_cast<size_t>(count) * 4, cudaMemcpyDeviceToHost);
  } else {
    cudaMemcpy(half.data(), d_logits, static_cast<size_t>(count) * 2, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h = half[static_cast<size_t>(i)];
      grad[static_cast<size_t>(i)] = c.type == ElementType::kBf16 ? FromBf16(h) : FromHalf(h);
    }
  }
  cudaFree(d_logits);
  cudaFree(d_labels);
  cudaFree(d_scale);
  cudaFree(d_loss);
  // fp32 arithmetic (fast exp) against double; the stored gradient rounded to the dtype.
  const double rel = c.type == ElementType::kFp32 ? 2e-5 : c.type == ElementType::kBf16 ? 8e-3 : 1e-3;
  for (int64_t r = 0; r < c.rows; ++r) {
    EXPECT_NEAR(loss[static_cast<size_t>(r)], want_loss[static_cast<size_t>(r)],
                1e-4 * std::max(1.0, std::fabs(want_loss[static_cast<size_t>(r)])))
        << "row " << r;
  }
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < count; ++i) {
    worst = std::max(worst, std::fabs(grad[static_cast<size_t>(i)] - want_grad[static_cast<size_t>(i)]));
    largest = std::max(largest, std::fabs(want_grad[static_cast<size_t>(i)]));
  }
  EXPECT_LE(worst, rel * largest);
  for (int64_t j = 0; j < c.vocab; ++j) EXPECT_EQ(grad[static_cast<size_t>(c.vocab + j)], 0.f);  // row 1
}

TEST(CrossEntropyGradKernelTest, MatchesTheHostReference) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device visible";
  for (const Case& c : {Case{ElementType::kFp32, 5, 50257, 0}, Case{ElementType::kBf16, 6, 128256, 0},
                        Case{ElementType::kFp16, 4, 32000, 0}, Case{ElementType::kBf16, 3, 256000, 30},
                        Case{ElementType::kFp32, 3, 100, 0}}) {
    SCOPED_TRACE(static_cast<int>(c.type));
    SCOPED_TRACE(c.vocab);
    Check(c);
  }
}

}  // namespace
}  // namespace shardtune::exec::kernels
