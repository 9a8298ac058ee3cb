// NCCL collectives behind the Communicator seam (compiled with SHARDTUNE_WITH_NCCL only; the
// stub at the end answers otherwise).
#include "executor/comm/nccl_communicator.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "executor/errors.h"

#ifdef SHARDTUNE_WITH_NCCL
#include <ATen/ATen.h>

#include "executor/comm/nccl_check.h"
#include "model/errors.h"
#endif

namespace shardtune::exec {

#ifndef SHARDTUNE_WITH_NCCL
bool NcclAvailable() { return false; }
bool CudaDeviceAvailable() { return false; }
std::string NcclVersionString() { return ""; }
std::unique_ptr<Communicator> MakeNcclCommunicator(Rendezvous*, const std::string&, int,
                                                   const std::vector<int>&, int,
                                                   std::shared_ptr<CollectiveLog>) {
  throw BackendError("this shardtune was built without NCCL (SHARDTUNE_WITH_NCCL off)");
}
#else
bool NcclAvailable() { return true; }

bool CudaDeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string NcclVersionString() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // nccl.h: NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z from 2.9 on (X*1000 + Y*100 + Z before).
  int major = v >= 10000 ? v / 10000 : v / 1000;
  int minor = v >= 10000 ? (v / 100) % 100 : (v / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

namespace {

ncclDataType_t NcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kDouble:
      return ncclFloat64;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kByte:
      return ncclUint8;
    default:
      break;
  }
  throw BackendError(std::string("NCCL: unsupported dtype ") + c10::toString(t));
}

class NcclWork : public Work {
 public:
  NcclWork(cudaEvent_t start, cudaEvent_t done, CollectiveRecord r, CollectiveLog* log, int rank,
           std::vector<at::Tensor> keep)
      : start_(start),
        done_(done),
        record_(std::move(r)),
        log_(log),
        rank_(rank),
        keep_(std::move(keep)) {}
  ~NcclWork() override {
    if (done_ != nullptr) cudaEventSynchronize(done_);
    Release();
  }
  // Stream-ordered, as c10d's ProcessGroupNCCL::WorkNCCL::wait (synchronizeStream): the compute
  // (legacy default) stream waits for the collective's done event and the host goes on. The
  // buffers may then be freed: the caching allocator reuses their blocks only for work on the
  // default stream, which is ordered after the collective. The collective's GPU time (start to
  // done event) is read later, when the log is resolved (after the step's synchronize).
  void Wait() override {
    if (done_ == nullptr) return;
    int rank = rank_;
    SHARDTUNE_CUDA_CHECK(cudaStreamWaitEvent(nullptr, done_, 0), rank);
    cudaEvent_t start = start_, done = done_;
    start_ = done_ = nullptr;
    log_->AddPending(record_, [start, done](bool wait) -> std::optional<double> {
      if (!wait && cudaEventQuery(done) == cudaErrorNotReady) return std::nullopt;
      float ms = 0;
      bool ok = cudaEventSynchronize(done) == cudaSuccess &&
                cudaEventElapsedTime(&ms, start, done) == cudaSuccess;
      cudaEventDestroy(start);
      cudaEventDestroy(done);
      return ok ? 1e-3 * ms : 0.0;
    });
    Release();
  }

 private:
  void Release() {
    if (start_) cudaEventDestroy(start_);
    if (done_) cudaEventDestroy(done_);
    start_ = done_ = nullptr;
    keep_.clear();
  }
  cudaEvent_t start_, done_;
  CollectiveRecord record_;
  CollectiveLog* log_;
  int rank_;
  std::vector<at::Tensor> keep_;  // the tensors NCCL reads and writes, alive until done
};

// A collective on CPU tensors run through device copies: Wait() waits for it and copies the
// device result back into the host tensor.
class StagedWork : public Work {
 public:
  StagedWork(std::unique_ptr<Work> inner, at::Tensor device_result, at::Tensor host_result)
      : inner_(std::move(inner)), device_(std::move(device_result)), host_(std::move(host_result)) {}
  void Wait() override {
    if (!inner_) return;
    inner_->Wait();
    inner_.reset();
    host_.copy_(device_);
  }

 private:
  std::unique_ptr<Work> inner_;
  at::Tensor device_, host_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const std::string& group, int rank, int size, std::shared_ptr<CollectiveLog> log,
                   ncclComm_t comm, cudaStream_t stream, int global_rank, int device)
      : Communicator(group, rank, size, std::move(log)),
        comm_(comm),
        stream_(stream),
        global_rank_(global_rank),
        device_(device) {}
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  std::unique_ptr<Work> AllGather(const at::Tensor& shard, const at::Tensor& full) override {
    if (!full.is_cuda()) {
      at::Tensor d_full = at::empty(full.sizes(), full.options().device(Device()));
      return std::make_unique<StagedWork>(AllGather(shard.to(Device()), d_full), d_full, full);
    }
    return Run(profiles::Collective::kAllGather, full, {shard, full}, [&] {
      return ncclAllGather(shard.data_ptr(), full.data_ptr(), static_cast<size_t>(shard.numel()),
                           NcclType(shard.scalar_type()), comm_, stream_);
    });
  }
  std::unique_ptr<Work> ReduceScatter(const at::Tensor& full, const at::Tensor& shard) override {
    if (!full.is_cuda()) {
      at::Tensor d_shard = at::empty(shard.sizes(), shard.options().device(Device()));
      return std::make_unique<StagedWork>(ReduceScatter(full.to(Device()), d_shard), d_shard, shard);
    }
    return Run(profiles::Collective::kReduceScatter, full, {shard, full}, [&] {
      return ncclReduceScatter(full.data_ptr(), shard.data_ptr(),
                               static_cast<size_t>(shard.numel()), NcclType(full.scalar_type()),
                               ncclSum, comm_, stream_);
    });
  }
  std::unique_ptr<Work> AllReduce(const at::Tensor& t) override {
    if (!t.is_cuda()) {
      at::Tensor d = t.to(Device());
      return std::make_unique<StagedWork>(AllReduce(d), d, t);
    }
    return Run(profiles::Collective::kAllReduce, t, {t}, [&] {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                           NcclType(t.scalar_type()), ncclSum, comm_, stream_);
    });
  }
  std::unique_ptr<Work> AllToAll(const at::Tensor& input, const at::Tensor& output) override {
    SHARDTUNE_CHECK(input.numel() == output.numel() && input.numel() % size() == 0)
        << "all-to-all sizes";
    if (!input.is_cuda()) {
      at::Tensor d_out = at::empty(output.sizes(), output.options().device(Device()));
      return std::make_unique<StagedWork>(AllToAll(input.to(Device()), d_out), d_out, output);
    }
    // NCCL has no all-to-all call before 2.28: grouped point-to-point sends and receives, as
    // c10d's ProcessGroupNCCL::alltoall_base does (torch/csrc/cuda/nccl.cpp,
    // all2all_single_equal_split).
    return Run(profiles::Collective::kAllToAll, input, {input, output}, [&]() -> ncclResult_t {
      size_t k = static_cast<size_t>(input.numel() / size());
      size_t chunk_bytes = k * input.element_size();
      ncclDataType_t type = NcclType(input.scalar_type());
      const auto* send = static_cast<const char*>(input.data_ptr());
      auto* recv = static_cast<char*>(output.data_ptr());
      ncclResult_t rc = ncclGroupStart();
      if (rc != ncclSuccess) return rc;
      for (int peer = 0; peer < size() && rc == ncclSuccess; ++peer) {
        size_t off = static_cast<size_t>(peer) * chunk_bytes;
        rc = ncclSend(send + off, k, type, peer, comm_, stream_);
        if (rc == ncclSuccess) rc = ncclRecv(recv + off, k, type, peer, comm_, stream_);
      }
      ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  std::unique_ptr<Work> AllToAllV(const at::Tensor& input, const at::Tensor& output,
                                  const std::vector<int64_t>& input_splits,
                                  const std::vector<int64_t>& output_splits) override {
    CheckSplits(input, output, input_splits, output_splits, size());
    if (!input.is_cuda()) {
      at::Tensor d_out = at::empty(output.sizes(), output.options().device(Device()));
      return std::make_unique<StagedWork>(
          AllToAllV(input.to(Device()), d_out, input_splits, output_splits), d_out, output);
    }
    // Grouped point-to-point sends and receives of each peer's rows, as c10d's
    // ProcessGroupNCCL::alltoall_base with split sizes does (torch/csrc/cuda/nccl.cpp all2all_single_unequal_split).
    return Run(profiles::Collective::kAllToAll, input, {input, output}, [&]() -> ncclResult_t {
      const int64_t in_row = input.size(0) > 0 ? input.numel() / input.size(0) : 0;
      const int64_t out_row = output.size(0) > 0 ? output.numel() / output.size(0) : 0;
      const size_t esize = input.element_size();
      ncclDataType_t type = NcclType(input.scalar_type());
      const auto* send = static_cast<const char*>(input.data_ptr());
      auto* recv = static_cast<char*>(output.data_ptr());
      ncclResult_t rc = ncclGroupStart();
      if (rc != ncclSuccess) return rc;
      int64_t in_off = 0, out_off = 0;
      for (int peer = 0; peer < size() && rc == ncclSuccess; ++peer) {
        const size_t p = static_cast<size_t>(peer);
        const size_t n_send = static_cast<size_t>(input_splits[p] * in_row);
        const size_t n_recv = static_cast<size_t>(output_splits[p] * out_row);
        if (n_send > 0) rc = ncclSend(send + in_off * esize, n_send, type, peer, comm_, stream_);
        if (rc == ncclSuccess && n_recv > 0)
          rc = ncclRecv(recv + out_off * esize, n_recv, type, peer, comm_, stream_);
        in_off += static_cast<int64_t>(n_send);
        out_off += static_cast<int64_t>(n_recv);
      }
      ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }
  std::unique_ptr<Work> Broadcast(const at::Tensor& t, int root) override {
    if (!t.is_cuda()) {
      at::Tensor d = t.to(Device());
      return std::make_unique<StagedWork>(Broadcast(d, root), d, t);
    }
    return Run(profiles::Collective::kBroadcast, t, {t}, [&] {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                           NcclType(t.scalar_type()), root, comm_, stream_);
    });
  }
  void Barrier() override {
    int rank = global_rank_;
    void* one = nullptr;
    SHARDTUNE_CUDA_CHECK(cudaMalloc(&one, sizeof(float)), rank);
    ncclResult_t rc = ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm_, stream_);
    cudaError_t sync = cudaStreamSynchronize(stream_);
    cudaFree(one);
    SHARDTUNE_NCCL_CHECK(rc, rank);
    SHARDTUNE_CUDA_CHECK(sync, rank);
  }

 private:
  at::Device Device() const { return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_)); }

  template <typename F>
  std::unique_ptr<Work> Run(profiles::Collective kind, const at::Tensor& full,
                            std::vector<at::Tensor> keep, F&& call) {
    int rank = global_rank_;
    SHARDTUNE_CHECK(full.is_cuda()) << "NCCL collectives need CUDA tensors";
    cudaEvent_t ready = nullptr, start = nullptr, done = nullptr;
    SHARDTUNE_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), rank);
    SHARDTUNE_CUDA_CHECK(cudaEventCreate(&start), rank);
    SHARDTUNE_CUDA_CHECK(cudaEventCreate(&done), rank);
    SHARDTUNE_CUDA_CHECK(cudaEventRecord(ready, nullptr), rank);  // after the default stream's work
    SHARDTUNE_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0), rank);
    cudaEventDestroy(ready);
    CollectiveRecord r;
    r.kind = kind;
    r.group = group();
    r.group_size = size();
    r.full_size_bytes = static_cast<int64_t>(full.nbytes());
    r.sent_bytes = static_cast<int64_t>(static_cast<double>(full.nbytes()) *
                                        profiles::BusBwFactor(kind, size()));
    r.start_s = MonotonicSeconds();
    SHARDTUNE_CUDA_CHECK(cudaEventRecord(start, stream_), rank);
    SHARDTUNE_NCCL_CHECK(call(), rank);
    SHARDTUNE_CUDA_CHECK(cudaEventRecord(done, stream_), rank);
    return std::make_unique<NcclWork>(start, done, std::move(r), &log(), rank, std::move(keep));
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int global_rank_;
  int device_;
};

}  // namespace

std::unique_ptr<Communicator> MakeNcclCommunicator(Rendezvous* rendezvous, const std::string& group,
                                                   int index, const std::vector<int>& ranks,
                                                   int device, std::shared_ptr<CollectiveLog> log) {
  SHARDTUNE_CHECK(rendezvous != nullptr || ranks.size() == 1)
      << "group " << group << " of " << ranks.size() << " ranks needs a rendezvous";
  int rank = rendezvous ? rendezvous->options().rank : ranks.front();
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  SHARDTUNE_CHECK(it != ranks.end()) << "rank " << rank << " is not in group " << group;
  int group_rank = static_cast<int>(it - ranks.begin()), size = static_cast<int>(ranks.size());
  SHARDTUNE_CUDA_CHECK(cudaSetDevice(device), rank);
  std::string key = "nccl_id/" + group + "_" + std::to_string(index);
  ncclUniqueId id;
  if (group_rank == 0) {
    SHARDTUNE_NCCL_CHECK(ncclGetUniqueId(&id), rank);
    const auto* p = reinterpret_cast<const uint8_t*>(&id);
    if (rendezvous) rendezvous->Set(key, std::vector<uint8_t>(p, p + sizeof(id)));
  } else {
    std::vector<uint8_t> bytes = rendezvous->Get(key);
    if (bytes.size() != sizeof(id))
      throw BackendError("rank " + std::to_string(rank) + ": bad " + key);
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclComm_t comm = nullptr;
  SHARDTUNE_NCCL_CHECK(ncclCommInitRank(&comm, size, id, group_rank), rank);
  cudaStream_t stream = nullptr;
  SHARDTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), rank);
  return std::make_unique<NcclCommunicator>(group, group_rank, size, std::move(log), comm, stream,
                                            rank, device);
}
#endif

}  // namespace shardtune::exec
