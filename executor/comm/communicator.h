// The Communicator seam (README.md "Architecture", "Conventions"): the collectives the FSDP
// runtime needs, over one process group. Implementations: Gloo through c10d (CPU, real processes;
// gloo_communicator.h), NCCL on CUDA streams (nccl_communicator.h, only with SHARDTUNE_WITH_NCCL)
// and Emulated (below). Every call records kind, total size, group size and time in the shared
// CollectiveLog.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "executor/comm/collective_log.h"

namespace shardtune::exec {

// An issued collective. Wait() blocks until its result is in the output tensors, finishes any
// local post-processing (e.g. the sum of a reduce-scatter built from all-to-all) and records
// the collective. Destroying an unwaited Work waits (and swallows errors), so buffers the
// backend still reads are never freed under it. Not thread-safe; wait from the issuing thread
// or the autograd thread that continues its work.
class Work {
 public:
  virtual ~Work() = default;
  // Throws BackendError (with the group, the rank and the backend's message) when it failed.
  virtual void Wait() = 0;
};

class Communicator {
 public:
  Communicator(std::string group, int rank, int size, std::shared_ptr<CollectiveLog> log)
      : group_(std::move(group)), rank_(rank), size_(size), log_(std::move(log)) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::string& group() const { return group_; }
  int rank() const { return rank_; }  // rank within this group
  int size() const { return size_; }
  // A backend that runs no real exchange (Emulated): results are only correctly sized.
  virtual bool emulated() const { return false; }

  // full[size * k] <- concat over ranks of shard[k], in rank order.
  // REQUIRES: both contiguous, same dtype and device, full.numel() == size * shard.numel().
  virtual std::unique_ptr<Work> AllGather(const at::Tensor& shard, const at::Tensor& full) = 0;
  // shard[k] <- sum over ranks of full[rank * k : (rank + 1) * k] (of each rank's `full`).
  // REQUIRES: as AllGather; `full` must not be modified until Wait() returns.
  virtual std::unique_ptr<Work> ReduceScatter(const at::Tensor& full, const at::Tensor& shard) = 0;
  // t <- sum over ranks of t, in place. REQUIRES: t contiguous.
  virtual std::unique_ptr<Work> AllReduce(const at::Tensor& t) = 0;
  // output[j * k : (j + 1) * k] <- rank j's input[rank * k : (rank + 1) * k]: chunk j of this
  // rank's input goes to rank j, chunk j of the output comes from rank j (MPI_Alltoall,
  // c10d all_to_all_single with equal splits). Recorded with S = input.nbytes() (the per-rank
  // buffer, as nccl-tests' alltoall counts it) and sent bytes (n-1)/n S.
  // REQUIRES: both contiguous, same dtype, device and numel, numel divisible by size.
  virtual std::unique_ptr<Work> AllToAll(const at::Tensor& input, const at::Tensor& output) = 0;
  // The uneven all-to-all over dim 0 (c10d all_to_all_single with split sizes, which
  // torchtitan's expert-parallel token dispatcher calls): input rows [sum(input_splits), ...]
  // go input_splits[j] rows to rank j, in rank order; output rows [sum(output_splits), ...]
  // hold output_splits[j] rows from rank j, in rank order. Recorded with S = input.nbytes().
  // REQUIRES: both contiguous, same dtype, device and row shape; size() splits each, >= 0,
  // summing to the rows; every rank's input_splits[r] equals rank r's output_splits[this rank].
  virtual std::unique_ptr<Work> AllToAllV(const at::Tensor& input, const at::Tensor& output,
                                          const std::vector<int64_t>& input_splits,
                                          const std::vector<int64_t>& output_splits) = 0;
  // t <- root's t, in place. REQUIRES: t contiguous, 0 <= root < size.
  virtual std::unique_ptr<Work> Broadcast(const at::Tensor& t, int root) = 0;
  // Returns when every rank of the group has called Barrier().
  virtual void Barrier() = 0;

 protected:
  CollectiveLog& log() { return *log_; }

 private:
  std::string group_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<CollectiveLog> log_;
};

// AllToAllV's REQUIRES as a check (an internal error when broken): `size` splits each, >= 0,
// summing to the rows of input and output; contiguous tensors of one dtype, device and row shape.
void CheckSplits(const at::Tensor& input, const at::Tensor& output,
                 const std::vector<int64_t>& input_splits, const std::vector<int64_t>& output_splits,
                 int size);

// One rank (`rank`) of a group of `size` ranks, without any other process. Collectives produce
// correctly sized results as if every rank held this rank's data: all-gather replicates the
// local shard into every slot, reduce-scatter returns size x the local slice, all-reduce returns
// size x t, all-to-all fills every output chunk with the local input's chunk `rank`, broadcast
// and barrier do nothing. So one device runs the true per-rank memory and
// compute of an N-rank job (the numbers it trains on are not those of the real job).
// With size 1 it is the exact single-rank communicator. Records carry emulated = true.
std::unique_ptr<Communicator> MakeEmulatedCommunicator(const std::string& group, int rank, int size,
                                                       std::shared_ptr<CollectiveLog> log);

}  // namespace shardtune::exec
