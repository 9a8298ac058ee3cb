// A rank that stops making progress (a stalled peer, a hung collective, a deadlock) is named
// with its phase within a bound instead of hanging until a collective timeout (issue #11). A
// thread watches a progress counter that the run bumps at every phase change and micro-batch.
// Plain C++ (no Torch). The library never exits: what happens on a stall is the caller's.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace shardtune::exec {

class Watchdog {
 public:
  // Watches from a thread started here. When neither Progress() nor SetPhase() was called for
  // `timeout_s` seconds, calls `on_stall` once, from that thread, with one line such as "watchdog:
  // rank 1 made no progress for 2.0 s in phase \"steady step\" ...", then stops watching.
  // timeout_s <= 0 or an empty on_stall: watches nothing. Thread-safe.
  Watchdog(double timeout_s, int rank, std::function<void(const std::string&)> on_stall);
  ~Watchdog();  // stops and joins the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Progress();
  // Names what the rank does now (also progress), e.g. "step 0", "checkpoint save".
  void SetPhase(const std::string& phase);

 private:
  void Run();

  double timeout_s_;
  int rank_;
  std::function<void(const std::string&)> on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  double last_progress_s_ = 0;
  std::string phase_ = "start-up";
  std::thread thread_;
};

}  // namespace shardtune::exec
