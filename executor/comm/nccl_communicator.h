// The NCCL communicator: ncclAllGather / ncclReduceScatter / ncclAllReduce / ncclBroadcast on
// this process's own CUDA stream, ordered after the legacy default stream (LibTorch's default
// current stream) with events. Built only with SHARDTUNE_WITH_NCCL (CUDA toolkit + nccl.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/rendezvous.h"

namespace shardtune::exec {

// True when this build has the NCCL communicator.
bool NcclAvailable();

// True when this process sees at least one CUDA device (false without NCCL support).
bool CudaDeviceAvailable();

// The NCCL library's version, "2.28.3" (ncclGetVersion: major*10000 + minor*100 + patch since
// 2.9); "" when built without NCCL.
std::string NcclVersionString();

// The NCCL communicator of group `group` number `index` (members: the global `ranks`, in
// group-rank order) on CUDA device `device`. The group's rank 0 publishes the ncclUniqueId in
// the rendezvous store (`rendezvous` may be null for a one-rank group: nothing to exchange).
// Tensors should live on that device; CPU tensors (loss and norm scalars, checkpoint metadata)
// are staged through the device. Wait() blocks the host until the collective finished (so its
// GPU time can be recorded) and orders the default stream after it. Throws BackendError (also
// when built without NCCL).
std::unique_ptr<Communicator> MakeNcclCommunicator(Rendezvous* rendezvous, const std::string& group,
                                                   int index, const std::vector<int>& ranks,
                                                   int device, std::shared_ptr<CollectiveLog> log);

}  // namespace shardtune::exec
