// The Emulated communicator (one rank of N, no peers) and the shared monotonic clock.
#include "executor/comm/communicator.h"

#include <ATen/ATen.h>
#include <time.h>

#include "model/errors.h"

namespace shardtune::exec {

void CheckSplits(const at::Tensor& input, const at::Tensor& output,
                 const std::vector<int64_t>& input_splits, const std::vector<int64_t>& output_splits,
                 int size) {
  auto sum = [](const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) {
      SHARDTUNE_CHECK(x >= 0) << "negative split " << x;
      s += x;
    }
    return s;
  };
  SHARDTUNE_CHECK(static_cast<int>(input_splits.size()) == size &&
                  static_cast<int>(output_splits.size()) == size)
      << "all-to-all: " << input_splits.size() << " / " << output_splits.size() << " splits for "
      << size << " ranks";
  SHARDTUNE_CHECK(input.dim() >= 1 && output.dim() >= 1 && sum(input_splits) == input.size(0) &&
                  sum(output_splits) == output.size(0))
      << "all-to-all: splits do not sum to the rows";
  SHARDTUNE_CHECK(input.is_contiguous() && output.is_contiguous() &&
                  input.scalar_type() == output.scalar_type() &&
                  input.device() == output.device() &&
                  input.sizes().slice(1) == output.sizes().slice(1))
      << "all-to-all: tensors differ in layout, dtype, device or row shape";
}

double MonotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

namespace {

// Work that already finished when it was issued; Wait() only records it.
class DoneWork : public Work {
 public:
  DoneWork(CollectiveLog* log, CollectiveRecord r) : log_(log), record_(std::move(r)) {}
  void Wait() override {
    if (log_ == nullptr) return;
    log_->Add(record_);
    log_ = nullptr;
  }
  ~DoneWork() override { Wait(); }

 private:
  CollectiveLog* log_;
  CollectiveRecord record_;
};

class EmulatedCommunicator : public Communicator {
 public:
  using Communicator::Communicator;
  bool emulated() const override { return true; }

  std::unique_ptr<Work> AllGather(const at::Tensor& shard, const at::Tensor& full) override {
    SHARDTUNE_CHECK(full.numel() == shard.numel() * size()) << "all-gather sizes";
    double t0 = MonotonicSeconds();
    // The shard may be a slice of `full` (FlatParam gathers in place): copy it out first.
    at::Tensor local = shard.clone();
    full.view({size(), shard.numel()}).copy_(local.view({1, shard.numel()}));
    return Done(profiles::Collective::kAllGather, full.nbytes(), t0);
  }
  std::unique_ptr<Work> ReduceScatter(const at::Tensor& full, const at::Tensor& shard) override {
    SHARDTUNE_CHECK(full.numel() == shard.numel() * size()) << "reduce-scatter sizes";
    double t0 = MonotonicSeconds();
    at::Tensor local = full.narrow(0, rank() * shard.numel(), shard.numel());
    shard.copy_(local);
    if (size() > 1) shard.mul_(static_cast<double>(size()));
    return Done(profiles::Collective::kReduceScatter, full.nbytes(), t0);
  }
  std::unique_ptr<Work> AllReduce(const at::Tensor& t) override {
    double t0 = MonotonicSeconds();
    if (size() > 1) t.mul_(static_cast<double>(size()));
    return Done(profiles::Collective::kAllReduce, t.nbytes(), t0);
  }
  std::unique_ptr<Work> AllToAll(const at::Tensor& input, const at::Tensor& output) override {
    SHARDTUNE_CHECK(input.numel() == output.numel() && input.numel() % size() == 0)
        << "all-to-all sizes";
    double t0 = MonotonicSeconds();
    int64_t k = input.numel() / size();
    // What every rank would send us if it held our data: its chunk `rank`, i.e. ours.
    at::Tensor mine = input.reshape({-1}).narrow(0, rank() * k, k).clone();
    output.view({size(), k}).copy_(mine.view({1, k}));
    return Done(profiles::Collective::kAllToAll, input.nbytes(), t0);
  }
  std::unique_ptr<Work> AllToAllV(const at::Tensor& input, const at::Tensor& output,
                                  const std::vector<int64_t>& input_splits,
                                  const std::vector<int64_t>& output_splits) override {
    CheckSplits(input, output, input_splits, output_splits, size());
    double t0 = MonotonicSeconds();
    // Every rank would send us its rows for us, i.e. our rows for `rank`. The peers are not
    // there, so a chunk whose size differs from ours (the MoE combine returns each rank what it
    // sent: output_splits are then our dispatch's input_splits) is filled with our rows repeated
    // (zeros when we have none): the sizes, and so the memory, are the real ones; the values
    // are not, as PyTorch's fake process group leaves its outputs unwritten.
    int64_t from = 0;
    for (int j = 0; j < rank(); ++j) from += input_splits[static_cast<size_t>(j)];
    const int64_t n = input_splits[static_cast<size_t>(rank())];
    at::Tensor mine = input.narrow(0, from, n).clone();
    int64_t to = 0;
    for (int j = 0; j < size(); ++j) {
      const int64_t m = output_splits[static_cast<size_t>(j)];
      at::Tensor chunk = output.narrow(0, to, m);
      if (m == n) {
        chunk.copy_(mine);
      } else if (n == 0) {
        chunk.zero_();
      } else {
        chunk.copy_(mine.index_select(0, at::arange(m, mine.options().dtype(at::kLong)).remainder(n)));
      }
      to += m;
    }
    return Done(profiles::Collective::kAllToAll, input.nbytes(), t0);
  }
  std::unique_ptr<Work> Broadcast(const at::Tensor& t, int root) override {
    SHARDTUNE_CHECK(root >= 0 && root < size()) << "broadcast root " << root;
    return Done(profiles::Collective::kBroadcast, t.nbytes(), MonotonicSeconds());
  }
  void Barrier() override {}

 private:
  std::unique_ptr<Work> Done(profiles::Collective kind, size_t bytes, double t0) {
    CollectiveRecord r;
    r.kind = kind;
    r.group = group();
    r.group_size = size();
    r.full_size_bytes = static_cast<int64_t>(bytes);
    r.sent_bytes = 0;
    r.start_s = t0;
    r.time_s = MonotonicSeconds() - t0;
    r.emulated = true;
    return std::make_unique<DoneWork>(&log(), std::move(r));
  }
};

}  // namespace

std::unique_ptr<Communicator> MakeEmulatedCommunicator(const std::string& group, int rank, int size,
                                                       std::shared_ptr<CollectiveLog> log) {
  SHARDTUNE_CHECK(size >= 1 && rank >= 0 && rank < size) << "rank " << rank << " of " << size;
  return std::make_unique<EmulatedCommunicator>(group, rank, size, std::move(log));
}

}  // namespace shardtune::exec
