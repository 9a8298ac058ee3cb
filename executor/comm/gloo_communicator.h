// The Gloo communicator: c10d's ProcessGroupGloo over the run's TCPStore (CPU tensors, real
// processes). This LibTorch's Gloo group lacks reduce_scatter and _allgather_base, so
// reduce-scatter is built from alltoall_base plus a local sum (each rank sends (n-1)/n of the
// data, what a ring reduce-scatter sends; recorded as such) and all-gather into a flat tensor
// uses the list form of allgather on views of it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/rendezvous.h"

namespace shardtune::exec {

// True when this build has the Gloo communicator (Gloo's headers were found; the GPU machine's
// Python wheel ships none).
bool GlooAvailable();

// The communicator of the group `group` number `index` whose members are the global `ranks`, in
// group-rank order. Every member calls it with the same arguments, in the same order relative
// to its other groups; it returns once all members joined. REQUIRES: the caller's rank is in
// `ranks`. Throws BackendError (also when built without Gloo).
std::unique_ptr<Communicator> MakeGlooCommunicator(Rendezvous& rendezvous, const std::string& group,
                                                   int index, const std::vector<int>& ranks,
                                                   std::shared_ptr<CollectiveLog> log);

}  // namespace shardtune::exec
