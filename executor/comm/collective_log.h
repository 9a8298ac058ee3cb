// The record of every collective a rank ran: kind, total size, group, time. Communicators append
// to it (from any thread); measurements.json and trace.json are written from it.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "profiles/collective.h"

namespace shardtune::exec {

struct CollectiveRecord {
  profiles::Collective kind = profiles::Collective::kAllReduce;
  std::string group;  // "world", "shard", "replicate"
  int group_size = 1;
  int64_t full_size_bytes = 0;  // S, the total size as nccl-tests counts it
  int64_t sent_bytes = 0;       // what this rank put on the wire (e.g. (n-1)/n S for RS)
  double start_s = 0;           // issue time on the run clock (RunClock)
  double time_s = 0;            // issue to completion seen by Wait()
  bool emulated = false;        // produced locally by the Emulated communicator
};

// Seconds on a monotonic clock shared by every process of the machine (CLOCK_MONOTONIC), so
// per-rank traces line up when merged.
double MonotonicSeconds();

// Thread-safe append-only list of records.
class CollectiveLog {
 public:
  ~CollectiveLog() { Resolve(); }
  void Add(const CollectiveRecord& r) {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(r);
  }
  // A record whose duration is known only later: a CUDA collective the compute stream waits for
  // without the host waiting (NcclWork::Wait). `time_s(wait)` returns the duration, blocking
  // until the collective finished when `wait`, else nullopt while it runs; it is called until it
  // answers (finished ones are swept at each AddPending, the rest by Resolve(), Snapshot() or the
  // destructor), then dropped.
  using PendingTime = std::function<std::optional<double>(bool wait)>;
  void AddPending(const CollectiveRecord& r, PendingTime time_s) {
    std::lock_guard<std::mutex> lock(mu_);
    Sweep(false);
    pending_.push_back({records_.size(), std::move(time_s)});
    records_.push_back(r);
  }
  // Fills the times of the pending records.
  void Resolve() const {
    std::lock_guard<std::mutex> lock(mu_);
    Sweep(true);
  }
  std::vector<CollectiveRecord> Snapshot() const {
    Resolve();
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  void Clear() {
    Resolve();
    std::lock_guard<std::mutex> lock(mu_);
    records_.clear();
  }

 private:
  struct Pending {
    size_t index;
    PendingTime time_s;
  };
  void Sweep(bool wait) const {  // REQUIRES: mu_ held
    size_t kept = 0;
    for (Pending& p : pending_) {
      std::optional<double> t = p.time_s(wait);
      if (t) {
        records_[p.index].time_s = *t;
      } else {
        pending_[kept++] = std::move(p);
      }
    }
    pending_.resize(kept);
  }
  mutable std::mutex mu_;
  mutable std::vector<CollectiveRecord> records_;
  mutable std::vector<Pending> pending_;
};

}  // namespace shardtune::exec
