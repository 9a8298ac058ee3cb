// Strong unit types (README.md "Conventions"): bytes, FLOPs, seconds and their rates. No implicit
// conversion to or from double; only meaningful operators exist. GB = 1e9 (bandwidth), GiB = 2^30
// (capacity).
#pragma once

#include <cmath>
#include <cstdint>

namespace shardtune {

inline constexpr double kGB = 1e9;                          // decimal, as nccl-tests reports busbw
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;    // binary, as capacities are quoted
inline constexpr double kMiB = 1024.0 * 1024.0;

class Seconds;

// A byte count (int64). Capacity, tensor sizes, memory footprints.
class Bytes {
 public:
  constexpr Bytes() = default;
  static constexpr Bytes Of(int64_t n) { return Bytes(n); }
  static Bytes GiB(double n) { return Bytes(static_cast<int64_t>(std::llround(n * kGiB))); }
  static Bytes MiB(double n) { return Bytes(static_cast<int64_t>(std::llround(n * kMiB))); }
  static Bytes GB(double n) { return Bytes(static_cast<int64_t>(std::llround(n * kGB))); }
  constexpr int64_t count() const { return n_; }
  double gib() const { return static_cast<double>(n_) / kGiB; }
  double gb() const { return static_cast<double>(n_) / kGB; }

  constexpr Bytes operator+(Bytes o) const { return Bytes(n_ + o.n_); }
  constexpr Bytes operator-(Bytes o) const { return Bytes(n_ - o.n_); }
  constexpr Bytes& operator+=(Bytes o) { n_ += o.n_; return *this; }
  constexpr Bytes& operator-=(Bytes o) { n_ -= o.n_; return *this; }
  constexpr Bytes operator*(int64_t k) const { return Bytes(n_ * k); }
  constexpr Bytes operator/(int64_t k) const { return Bytes(n_ / k); }
  constexpr bool operator==(Bytes o) const { return n_ == o.n_; }
  constexpr bool operator!=(Bytes o) const { return n_ != o.n_; }
  constexpr bool operator<(Bytes o) const { return n_ < o.n_; }
  constexpr bool operator<=(Bytes o) const { return n_ <= o.n_; }
  constexpr bool operator>(Bytes o) const { return n_ > o.n_; }
  constexpr bool operator>=(Bytes o) const { return n_ >= o.n_; }

 private:
  constexpr explicit Bytes(int64_t n) : n_(n) {}
  int64_t n_ = 0;
};
constexpr Bytes operator*(int64_t k, Bytes b) { return b * k; }

// Floating-point operations (double: 6·N·tokens overflows int64).
class Flops {
 public:
  constexpr Flops() = default;
  static constexpr Flops Of(double n) { return Flops(n); }
  constexpr double count() const { return n_; }
  constexpr Flops operator+(Flops o) const { return Flops(n_ + o.n_); }
  constexpr Flops& operator+=(Flops o) { n_ += o.n_; return *this; }
  constexpr Flops operator*(double k) const { return Flops(n_ * k); }
  constexpr bool operator==(Flops o) const { return n_ == o.n_; }
  constexpr bool operator<(Flops o) const { return n_ < o.n_; }

 private:
  constexpr explicit Flops(double n) : n_(n) {}
  double n_ = 0;
};

class Seconds {
 public:
  constexpr Seconds() = default;
  static constexpr Seconds Of(double s) { return Seconds(s); }
  static constexpr Seconds Micros(double us) { return Seconds(us * 1e-6); }
  constexpr double count() const { return s_; }
  constexpr Seconds operator+(Seconds o) const { return Seconds(s_ + o.s_); }
  constexpr Seconds operator-(Seconds o) const { return Seconds(s_ - o.s_); }
  constexpr Seconds& operator+=(Seconds o) { s_ += o.s_; return *this; }
  constexpr Seconds operator*(double k) const { return Seconds(s_ * k); }
  constexpr bool operator<(Seconds o) const { return s_ < o.s_; }
  constexpr bool operator==(Seconds o) const { return s_ == o.s_; }

 private:
  constexpr explicit Seconds(double s) : s_(s) {}
  double s_ = 0;
};

class BytesPerSecond {
 public:
  constexpr BytesPerSecond() = default;
  static constexpr BytesPerSecond Of(double bps) { return BytesPerSecond(bps); }
  static constexpr BytesPerSecond GBps(double g) { return BytesPerSecond(g * kGB); }
  // Gigabits per second (link rates, e.g. a 400 Gb/s NIC = 50 GB/s).
  static constexpr BytesPerSecond Gbps(double g) { return BytesPerSecond(g * kGB / 8.0); }
  constexpr double count() const { return bps_; }
  constexpr bool operator<(BytesPerSecond o) const { return bps_ < o.bps_; }
  constexpr bool operator==(BytesPerSecond o) const { return bps_ == o.bps_; }
  constexpr BytesPerSecond operator*(double k) const { return BytesPerSecond(bps_ * k); }

 private:
  constexpr explicit BytesPerSecond(double bps) : bps_(bps) {}
  double bps_ = 0;
};

class FlopsPerSecond {
 public:
  constexpr FlopsPerSecond() = default;
  static constexpr FlopsPerSecond Of(double f) { return FlopsPerSecond(f); }
  static constexpr FlopsPerSecond TFlops(double t) { return FlopsPerSecond(t * 1e12); }
  constexpr double count() const { return f_; }
  constexpr bool operator<(FlopsPerSecond o) const { return f_ < o.f_; }
  constexpr FlopsPerSecond operator*(double k) const { return FlopsPerSecond(f_ * k); }

 private:
  constexpr explicit FlopsPerSecond(double f) : f_(f) {}
  double f_ = 0;
};

inline Seconds operator/(Bytes b, BytesPerSecond r) {
  return Seconds::Of(static_cast<double>(b.count()) / r.count());
}
inline Seconds operator/(Flops f, FlopsPerSecond r) { return Seconds::Of(f.count() / r.count()); }

}  // namespace shardtune
