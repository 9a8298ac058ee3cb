// Host helpers of the CUDA kernel tests (tests/executor/*_gpu_test.cc): whether a device is
// visible, and float <-> bf16 / fp16 bits on the host (round to nearest even), so a reference sees
// the values the device reads and the device's output can be read back.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace shardtune::exec::kernels {

inline bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float FromBf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float FromHalf(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -24)
                     : std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
// A value k / 256 with 1 <= |k| <= 2047 (or 0) is an fp16 normal number: its exact bits.
inline uint16_t ToHalfExact(float f) {
  if (f == 0) return 0;
  int e = 0;
  float frac = std::frexp(std::fabs(f), &e);  // |f| = frac x 2^e, frac in [0.5, 1)
  auto mant = static_cast<uint32_t>(std::lround((2 * frac - 1) * 1024));
  auto exp = static_cast<uint32_t>(e - 1 + 15);
  return static_cast<uint16_t>(((f < 0 ? 1u : 0u) << 15) | (exp << 10) | mant);
}


}  // namespace shardtune::exec::kernels
