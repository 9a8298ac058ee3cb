// The watchdog thread: wakes a few times per bound, compares the time since the last progress.
#include "executor/train/watchdog.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>

#include "executor/comm/collective_log.h"

namespace shardtune::exec {

Watchdog::Watchdog(double timeout_s, int rank, std::function<void(const std::string&)> on_stall)
    : timeout_s_(timeout_s), rank_(rank), on_stall_(std::move(on_stall)) {
  last_progress_s_ = MonotonicSeconds();
  if (timeout_s_ > 0 && on_stall_) thread_ = std::thread([this] { Run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Progress() {
  std::lock_guard<std::mutex> lock(mu_);
  last_progress_s_ = MonotonicSeconds();
}

void Watchdog::SetPhase(const std::string& phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = phase;
  last_progress_s_ = MonotonicSeconds();
}

void Watchdog::Run() {
  // Checking 4 times per bound (at most every second) detects a stall within 1.25 bounds.
  auto tick = std::chrono::duration<double>(std::min(1.0, timeout_s_ / 4));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, tick, [this] { return stop_; });
    if (stop_) return;
    double idle = MonotonicSeconds() - last_progress_s_;
    if (idle < timeout_s_) continue;
    std::ostringstream msg;
    msg << std::fixed << std::setprecision(1) << "watchdog: rank " << rank_
        << " made no progress for " << idle << " s in phase \"" << phase_
        << "\" (bound --watchdog-timeout " << timeout_s_
        << " s; hint: a stalled or dead peer, or a hung collective; raise the bound for slow "
           "steps)";
    std::string text = msg.str();
    lock.unlock();
    on_stall_(text);
    return;
  }
}

}  // namespace shardtune::exec
