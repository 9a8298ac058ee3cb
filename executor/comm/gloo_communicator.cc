// c10d ProcessGroupGloo behind the Communicator seam. Compiled with SHARDTUNE_HAVE_GLOO only
// where Gloo's headers exist; elsewhere MakeGlooCommunicator says so.
#include "executor/comm/gloo_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>

#include "executor/errors.h"

#ifdef SHARDTUNE_HAVE_GLOO
#include <ATen/ATen.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "executor/comm/rendezvous_impl.h"
#include "model/errors.h"
#endif

namespace shardtune::exec {

#ifndef SHARDTUNE_HAVE_GLOO
bool GlooAvailable() { return false; }
std::unique_ptr<Communicator> MakeGlooCommunicator(Rendezvous&, const std::string&, int,
                                                   const std::vector<int>&,
                                                   std::shared_ptr<CollectiveLog>) {
  throw BackendError("this shardtune was built without Gloo (no gloo headers): CPU ranks need it");
}
#else
bool GlooAvailable() { return true; }

namespace {

// Gloo (this LibTorch) has no bf16 kernels. Moving data does not care about the type: 16-bit
// floats travel as bytes. Sums are done in fp32 (AllReduce) or locally (ReduceScatter).
at::Tensor AsWire(const at::Tensor& t) {
  bool half = t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
  return half ? t.view(at::kByte) : t;
}

// A c10d Work plus what must happen after it (e.g. the local sum of a reduce-scatter).
class GlooWork : public Work {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish, CollectiveRecord r,
           CollectiveLog* log, std::string where)
      : work_(std::move(work)),
        finish_(std::move(finish)),
        record_(std::move(r)),
        log_(log),
        where_(std::move(where)) {}
  ~GlooWork() override {
    if (work_) {
      try {
        work_->wait();
      } catch (...) {  // the error was or will be reported by whoever waits on the group
      }
    }
  }
  void Wait() override {
    if (!work_) return;
    try {
      work_->wait();
    } catch (const std::exception& e) {
      work_.reset();
      std::string why = FirstLine(e.what());
      bool peer = why.find("onnection") != std::string::npos ||
                  why.find("imed out") != std::string::npos ||
                  why.find("imeout") != std::string::npos;
      throw BackendError(where_ + ": " + profiles::ToString(record_.kind) + " of " +
                         std::to_string(record_.full_size_bytes) + " bytes failed" +
                         (peer ? " (a peer rank exited or did not answer within --timeout)" : "") +
                         ": " + why);
    }
    work_.reset();
    // The collective's own time: to its completion (seen by the future's callback on Gloo's
    // thread, not when we got round to waiting), plus our local post-processing.
    double done = done_s_->load();
    double end = done > 0 ? done : MonotonicSeconds();
    double t0 = MonotonicSeconds();
    if (finish_) finish_();
    record_.time_s = end - record_.start_s + (MonotonicSeconds() - t0);
    log_->Add(record_);
  }
  void Attach(c10::intrusive_ptr<c10d::Work> work) {
    work_ = std::move(work);
    try {
      auto done = done_s_;
      work_->getFuture()->addCallback(
          [done](c10::ivalue::Future&) { done->store(MonotonicSeconds()); });
    } catch (const std::exception&) {  // no future: Wait() time it is
    }
  }
  std::vector<at::Tensor> inputs, outputs;  // kept alive until the work is done
  std::vector<std::vector<at::Tensor> > output_lists;

 private:
  static std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }
  c10::intrusive_ptr<c10d::Work> work_;
  std::shared_ptr<std::atomic<double> > done_s_ = std::make_shared<std::atomic<double> >(0.0);
  std::function<void()> finish_;
  CollectiveRecord record_;
  CollectiveLog* log_;
  std::string where_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const std::string& group, int rank, int size, std::shared_ptr<CollectiveLog> log,
                   c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, std::string where)
      : Communicator(group, rank, size, std::move(log)),
        pg_(std::move(pg)),
        where_(std::move(where)) {}

  std::unique_ptr<Work> AllGather(const at::Tensor& shard, const at::Tensor& full) override {
    SHARDTUNE_CHECK(full.numel() == shard.numel() * size()) << "all-gather sizes";
    double t0 = MonotonicSeconds();
    auto w = Make(profiles::Collective::kAllGather, full, t0, Ring(full));
    w->inputs = {AsWire(shard)};
    w->output_lists = {AsWire(full).chunk(size())};
    return Issue(std::move(w),
                 [&](GlooWork& g) { return pg_->allgather(g.output_lists, g.inputs); });
  }

  std::unique_ptr<Work> ReduceScatter(const at::Tensor& full, const at::Tensor& shard) override {
    SHARDTUNE_CHECK(full.numel() == shard.numel() * size()) << "reduce-scatter sizes";
    double t0 = MonotonicSeconds();
    // alltoall_base sends chunk j of `full` to rank j; rank r receives every rank's chunk r.
    at::Tensor received = at::empty_like(full);  // [size, k], row j from rank j
    int64_t n = size(), k = shard.numel();
    at::Tensor out = shard;
    auto finish = [received, out, n, k]() mutable { at::sum_out(out, received.view({n, k}), {0}); };
    auto w = Make(profiles::Collective::kReduceScatter, full, t0, Ring(full), std::move(finish));
    w->inputs = {AsWire(full)};
    w->outputs = {AsWire(received)};
    return Issue(std::move(w), [&](GlooWork& g) {
      std::vector<int64_t> equal_splits;
      return pg_->alltoall_base(g.outputs[0], g.inputs[0], equal_splits, equal_splits);
    });
  }

  std::unique_ptr<Work> AllToAll(const at::Tensor& input, const at::Tensor& output) override {
    SHARDTUNE_CHECK(input.numel() == output.numel() && input.numel() % size() == 0 &&
                    input.is_contiguous() && output.is_contiguous())
        << "all-to-all sizes";
    double t0 = MonotonicSeconds();
    auto w = Make(profiles::Collective::kAllToAll, input, t0, Ring(input));
    // As bytes (16-bit floats have no Gloo kernels); alltoall_base splits dim 0 equally, so
    // both travel flattened.
    w->inputs = {AsWire(input.view({-1}))};
    w->outputs = {AsWire(output.view({-1}))};
    return Issue(std::move(w), [&](GlooWork& g) {
      std::vector<int64_t> equal_splits;
      return pg_->alltoall_base(g.outputs[0], g.inputs[0], equal_splits, equal_splits);
    });
  }

  std::unique_ptr<Work> AllToAllV(const at::Tensor& input, const at::Tensor& output,
                                  const std::vector<int64_t>& input_splits,
                                  const std::vector<int64_t>& output_splits) override {
    CheckSplits(input, output, input_splits, output_splits, size());
    double t0 = MonotonicSeconds();
    int64_t row_bytes = input.size(0) > 0 ? static_cast<int64_t>(input.nbytes()) / input.size(0) : 0;
    int64_t to_others = 0;
    for (int j = 0; j < size(); ++j) {
      if (j != rank()) to_others += input_splits[static_cast<size_t>(j)] * row_bytes;
    }
    auto w = Make(profiles::Collective::kAllToAll, input, t0, to_others);
    // As bytes along the last dim (a 16-bit row becomes a row of bytes): dim 0 and the splits
    // are unchanged (c10d computeLengthsAndOffsets: split x numel / rows per rank).
    w->inputs = {AsWire(input)};
    w->outputs = {AsWire(output)};
    std::vector<int64_t> in = input_splits, out = output_splits;
    return Issue(std::move(w), [&](GlooWork& g) {
      return pg_->alltoall_base(g.outputs[0], g.inputs[0], out, in);
    });
  }

  std::unique_ptr<Work> AllReduce(const at::Tensor& t) override {
    double t0 = MonotonicSeconds();
    bool half = t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
    at::Tensor wire = half ? t.to(at::kFloat) : t;  // summed in fp32 (Gloo has no bf16 sum)
    std::function<void()> finish;
    if (half) finish = [wire, out = t]() mutable { out.copy_(wire); };
    auto w = Make(profiles::Collective::kAllReduce, t, t0, 2 * Ring(wire), std::move(finish));
    w->inputs = {wire};
    return Issue(std::move(w), [&](GlooWork& g) { return pg_->allreduce(g.inputs); });
  }

  std::unique_ptr<Work> Broadcast(const at::Tensor& t, int root) override {
    double t0 = MonotonicSeconds();
    auto w = Make(profiles::Collective::kBroadcast, t, t0,
                  rank() == root ? static_cast<int64_t>(t.nbytes()) : 0);
    w->inputs = {AsWire(t)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return Issue(std::move(w), [&](GlooWork& g) { return pg_->broadcast(g.inputs, opts); });
  }

  void Barrier() override {
    try {
      pg_->barrier()->wait();
    } catch (const std::exception& e) {
      std::string why = e.what();
      throw BackendError(where_ +
                         ": barrier failed (a peer rank exited or did not answer within "
                         "--timeout): " +
                         why.substr(0, why.find('\n')));
    }
  }

 private:
  // Bytes a ring moves per rank for a (n-1)/n collective of S bytes.
  int64_t Ring(const at::Tensor& t) const {
    return static_cast<int64_t>(t.nbytes()) * (size() - 1) / size();
  }
  std::unique_ptr<GlooWork> Make(profiles::Collective kind, const at::Tensor& full, double t0,
                                 int64_t sent, std::function<void()> finish = {}) {
    CollectiveRecord r;
    r.kind = kind;
    r.group = group();
    r.group_size = size();
    r.full_size_bytes = static_cast<int64_t>(full.nbytes());
    r.sent_bytes = sent;
    r.start_s = t0;
    return std::make_unique<GlooWork>(c10::intrusive_ptr<c10d::Work>(), std::move(finish),
                                      std::move(r), &log(), where_);
  }
  template <typename F>
  std::unique_ptr<Work> Issue(std::unique_ptr<GlooWork> w, F&& call) {
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = call(*w);
    } catch (const std::exception& e) {
      throw BackendError(where_ +
                         ": issuing a collective failed: " + std::string(e.what()).substr(0, 400));
    }
    w->Attach(std::move(work));
    return w;
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::string where_;
};

}  // namespace

std::unique_ptr<Communicator> MakeGlooCommunicator(Rendezvous& rendezvous, const std::string& group,
                                                   int index, const std::vector<int>& ranks,
                                                   std::shared_ptr<CollectiveLog> log) {
  const RendezvousOptions& o = rendezvous.options();
  auto it = std::find(ranks.begin(), ranks.end(), o.rank);
  SHARDTUNE_CHECK(it != ranks.end()) << "rank " << o.rank << " is not in group " << group;
  int group_rank = static_cast<int>(it - ranks.begin());
  int size = static_cast<int>(ranks.size());
  std::string where = "rank " + std::to_string(o.rank) + " (" + group + " group " +
                      std::to_string(index) + ", " + std::to_string(size) + " ranks)";
  try {
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000.0));
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    bool local = o.master_addr == "127.0.0.1" || o.master_addr == "localhost";
    options->devices.push_back(local ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                     : c10d::ProcessGroupGloo::createDefaultDevice());
    options->threads = 2;
    auto store = c10::make_intrusive<c10d::PrefixStore>(group + "_" + std::to_string(index),
                                                        rendezvous.impl().store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, group_rank, size, options);
    return std::make_unique<GlooCommunicator>(group, group_rank, size, std::move(log),
                                              std::move(pg), where);
  } catch (const std::exception& e) {
    throw BackendError(where + ": creating the Gloo process group failed: " +
                       std::string(e.what()).substr(0, 400));
  }
}
#endif

}  // namespace shardtune::exec
