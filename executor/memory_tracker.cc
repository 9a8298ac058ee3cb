// A counting c10::Allocator that forwards to LibTorch's default CPU allocator.
#include "executor/memory_tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_map>

namespace shardtune::exec {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_window_peak{0};  // TakeTrackedWindowPeakBytes

// Live allocations: data pointer -> (bytes, the inner allocator's deleter). The context of our
// DataPtrs is the data pointer itself, as LibTorch's raw_allocate() requires (oneDNN uses it).
struct Live {
  int64_t bytes;
  c10::DeleterFnPtr deleter;
};
std::mutex g_mu;
std::unordered_map<void*, Live>& LiveMap() {
  static auto* m = new std::unordered_map<void*, Live>();  // never destroyed: frees at exit
  return *m;
}

void DeleteTracked(void* ptr) {
  Live live{0, nullptr};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = LiveMap().find(ptr);
    if (it != LiveMap().end()) {
      live = it->second;
      LiveMap().erase(it);
    }
  }
  g_live.fetch_sub(live.bytes);
  if (live.deleter != nullptr) live.deleter(ptr);
}

class CountingAllocator : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return Wrap(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return Wrap(n); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &DeleteTracked; }

 private:
  c10::DataPtr Wrap(size_t n) const {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero bytes
    c10::DeleterFnPtr deleter = inner.get_deleter();
    if (inner.get_context() != data || deleter == nullptr) return inner;  // not ours to wrap
    inner.release_context();
    auto bytes = static_cast<int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(g_mu);
      LiveMap()[data] = Live{bytes, deleter};
    }
    int64_t live = g_live.fetch_add(bytes) + bytes;
    for (std::atomic<int64_t>* p : {&g_peak, &g_window_peak}) {
      int64_t peak = p->load();
      while (live > peak && !p->compare_exchange_weak(peak, live)) {
      }
    }
    return c10::DataPtr(data, data, &DeleteTracked, device);
  }
  c10::Allocator* inner_;
};

int64_t StatusKib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return 0;
}

}  // namespace

void InstallCpuMemoryTracker() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Lives for the process: LibTorch's allocator registry holds a raw pointer.
    static CountingAllocator tracker(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(&tracker, /*priority=*/10);
  });
}

int64_t TrackedBytes() { return g_live.load(); }
int64_t TrackedPeakBytes() { return g_peak.load(); }
void ResetTrackedPeak() { g_peak.store(g_live.load()); }
int64_t TakeTrackedWindowPeakBytes() { return g_window_peak.exchange(g_live.load()); }
int64_t ResidentBytes() { return StatusKib("VmRSS"); }
int64_t ResidentPeakBytes() { return StatusKib("VmHWM"); }
bool ResetResidentPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace shardtune::exec
