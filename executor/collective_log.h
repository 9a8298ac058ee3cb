// The record of every collective a rank ran: kind, total size, group, time. Communicators append
// to it (from any thread); measurements.json and trace.json are written from it.
#pragma once

#include <cstdint>
#include <mutex>
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
  void Add(const CollectiveRecord& r) {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(r);
  }
  std::vector<CollectiveRecord> Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    records_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::vector<CollectiveRecord> records_;
};

}  // namespace shardtune::exec
