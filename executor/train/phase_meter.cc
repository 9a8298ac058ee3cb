// Phase peaks: reset at Begin, read at End, gathered to every rank for measurements.json.
#include "executor/train/phase_meter.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "executor/comm/collective_log.h"
#include "executor/comm/communicator.h"
#include "executor/cuda_support.h"
#include "executor/memory_tracker.h"
#include "executor/train/watchdog.h"
#include "model/errors.h"

namespace shardtune::exec {

const char* PhaseName(RunPhase p) {
  switch (p) {
    case RunPhase::kLoad: return "model load";
    case RunPhase::kStep0: return "step 0";
    case RunPhase::kSteady: return "steady step";
    case RunPhase::kSave: return "checkpoint save";
    case RunPhase::kResume: return "resume";
  }
  return "?";
}

PhaseMeter::PhaseMeter(int cuda_device, Watchdog* watchdog)
    : cuda_device_(cuda_device), watchdog_(watchdog) {}

void PhaseMeter::Begin(RunPhase p) {
  SHARDTUNE_CHECK(open_ < 0) << "phase " << PhaseName(p) << " begins inside another";
  open_ = static_cast<int>(p);
  if (watchdog_) watchdog_->SetPhase(PhaseName(p));
  folded_ = SoFar();
  if (cuda_device_ >= 0) {
    SynchronizeCuda(cuda_device_);
    ResetCudaPeaks(cuda_device_);
    start_bytes_ = ReadCudaMemory(cuda_device_).allocated_bytes;
  } else {
    ResetTrackedPeak();
    start_bytes_ = TrackedBytes();
  }
  ResetResidentPeak();
  start_s_ = MonotonicSeconds();
  if (stall_phase_ == open_) {
    std::this_thread::sleep_for(std::chrono::duration<double>(stall_s_));
  }
}

void PhaseMeter::End(bool keep) {
  SHARDTUNE_CHECK(open_ >= 0) << "no phase to end";
  PhasePeak& ph = phases_[static_cast<size_t>(open_)];
  open_ = -1;
  if (watchdog_) watchdog_->Progress();
  if (!keep) return;
  if (ph.count == 0) ph.tracked_start_bytes = start_bytes_;
  ++ph.count;
  if (cuda_device_ >= 0) {
    SynchronizeCuda(cuda_device_);
    CudaMemory c = ReadCudaMemory(cuda_device_);
    ph.tracked_peak_bytes = std::max(ph.tracked_peak_bytes, c.allocated_peak_bytes);
    ph.device_allocated_peak_bytes = std::max(ph.device_allocated_peak_bytes, c.allocated_peak_bytes);
    ph.device_reserved_peak_bytes = std::max(ph.device_reserved_peak_bytes, c.reserved_peak_bytes);
    ph.device_used_bytes = std::max(ph.device_used_bytes, c.device_used_bytes);
  } else {
    ph.tracked_peak_bytes = std::max(ph.tracked_peak_bytes, TrackedPeakBytes());
  }
  ph.rss_peak_bytes = std::max(ph.rss_peak_bytes, ResidentPeakBytes());
  ph.duration_s += MonotonicSeconds() - start_s_;
}

PhaseMeter::Peaks PhaseMeter::SoFar() const {
  Peaks now;
  if (cuda_device_ >= 0) {
    CudaMemory c = ReadCudaMemory(cuda_device_);
    now.tracked = c.allocated_peak_bytes;
    now.device_reserved = c.reserved_peak_bytes;
  } else {
    now.tracked = TrackedPeakBytes();
  }
  now.rss = ResidentPeakBytes();
  return Peaks{std::max(now.tracked, folded_.tracked), std::max(now.rss, folded_.rss),
               std::max(now.device_reserved, folded_.device_reserved)};
}

std::vector<RankPhases> GatherPhases(Communicator& world, const RankPhases& mine) {
  constexpr int kFields = 8;
  std::vector<int64_t> flat;
  for (const PhasePeak& p : mine) {
    flat.insert(flat.end(), {p.count, std::llround(p.duration_s * 1e9), p.tracked_start_bytes,
                             p.tracked_peak_bytes, p.rss_peak_bytes, p.device_allocated_peak_bytes,
                             p.device_reserved_peak_bytes, p.device_used_bytes});
  }
  const int64_t per_rank = kFields * kNumRunPhases;
  at::Tensor in = at::tensor(flat, at::kLong);
  at::Tensor all = at::zeros({per_rank * world.size()}, at::kLong);
  if (world.size() > 1) {
    world.AllGather(in, all)->Wait();
  } else {
    all.copy_(in);
  }
  std::vector<RankPhases> out(static_cast<size_t>(world.size()));
  const int64_t* v = all.data_ptr<int64_t>();
  for (int r = 0; r < world.size(); ++r) {
    for (int i = 0; i < kNumRunPhases; ++i) {
      const int64_t* f = v + r * per_rank + i * kFields;
      PhasePeak& p = out[static_cast<size_t>(r)][static_cast<size_t>(i)];
      p.count = f[0];
      p.duration_s = static_cast<double>(f[1]) * 1e-9;
      p.tracked_start_bytes = f[2];
      p.tracked_peak_bytes = f[3];
      p.rss_peak_bytes = f[4];
      p.device_allocated_peak_bytes = f[5];
      p.device_reserved_peak_bytes = f[6];
      p.device_used_bytes = f[7];
    }
  }
  return out;
}

}  // namespace shardtune::exec
