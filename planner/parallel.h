// A fixed pool of threads for the plan search: ParallelFor runs fn(i, thread) for i in [0, n)
// with dynamic scheduling. Each index is run exactly once; results written per index are the
// same for any thread count, which is what keeps the search's answer independent of --jobs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace shardtune::planner {

// REQUIRES: threads >= 1. `fn(i, t)` with t in [0, threads): thread t is the same OS thread for
// all its calls, so per-thread state indexed by t needs no lock. `on_main(done)` (may be empty)
// is called from the calling thread (t = 0) every `report_every` of its own items. The first
// exception thrown by any fn is rethrown after all threads stop.
template <typename Fn, typename OnMain>
void ParallelFor(size_t n, int threads, Fn&& fn, OnMain&& on_main, size_t report_every = 64) {
  std::atomic<size_t> next{0}, done{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto body = [&](int t) {
    size_t mine = 0;
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i, t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next.store(n);
      }
      size_t d = done.fetch_add(1) + 1;
      if (t == 0 && ++mine % report_every == 0) on_main(d);
    }
  };
  int extra = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(1, threads)), n)) - 1;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(std::max(0, extra)));
  for (int t = 1; t <= extra; ++t) pool.emplace_back(body, t);
  body(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  on_main(done.load());
}

}  // namespace shardtune::planner
