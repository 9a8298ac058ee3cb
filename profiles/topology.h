// The cluster as a graph (Boost.Graph behind a pimpl): GPUs, NVSwitch/PCIe switches, NICs and the
// fabric switch, with the queries the simulator needs about groups of ranks.
// Ranks are laid out node-major: rank r lives on node r / gpus_per_node (torchrun's order).
#pragma once

#include <memory>
#include <vector>

#include "model/units.h"
#include "profiles/cluster.h"

namespace shardtune::profiles {

class Topology {
 public:
  explicit Topology(const ClusterSpec& cluster);
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;

  int world_size() const;
  int NodeOf(int rank) const;
  // Number of distinct nodes the ranks live on.
  int NodesSpanned(const std::vector<int>& ranks) const;
  // True when every rank of the group is reachable from every other over NVLink alone
  // (vacuously true for fewer than two ranks). REQUIRES: each rank in [0, world_size).
  bool InOneNvlinkDomain(const std::vector<int>& ranks) const;
  // Per-direction bandwidth of the slowest hop of a ring visiting `ranks` in order, where each
  // hop's bandwidth is the minimum edge capacity on its path divided by the number of ring hops
  // that share that edge. REQUIRES: ranks.size() >= 2, each in [0, world_size).
  //
  // Model (documented choices): each NVLink GPU reaches its node's NVSwitch at the per-GPU
  // NVLink bandwidth; every GPU reaches its node's host bridge by its own PCIe link (PCIe-only
  // GPUs talk to each other that way); NIC j of a node serves GPUs j*G/M .. (j+1)*G/M-1 (M =
  // nics_per_node) through their PCIe links; all NICs meet at one non-blocking fabric switch.
  // Routes are the lowest-latency paths, so a GPU leaves its node through its own NIC (no PXN).
  // A ring over ranks laid out node by node crosses each node boundary once per direction, so
  // each NIC direction carries one hop: the bottleneck is min(NIC, the crossing GPU's PCIe
  // link). For "/node" NICs faster than one PCIe link (e.g. roce800/node on PCIe 5) that is the
  // PCIe link: a single ring enters and leaves a node through one GPU (NCCL's multiple channels
  // can spread this; not modelled). Rings that share a NIC at the same time: see below.
  // Thread-safe (routes are cached under a mutex).
  BytesPerSecond RingBottleneck(const std::vector<int>& ranks) const;
  // As RingBottleneck for several rings running at the same time (e.g. the replica groups of
  // HSDP all-reducing together): edge users are counted over all rings, so 8 rings crossing one
  // per-node NIC get 1/8 of it each. REQUIRES: rings non-empty, each as for RingBottleneck.
  BytesPerSecond ConcurrentRingBottleneck(const std::vector<std::vector<int>>& rings) const;
  // One-way latency between two ranks: sum of the link latencies on the path (0 when a == b).
  // A hop through NVSwitch or a PCIe bridge costs one NCCL hwLat of that link class; a hop
  // between nodes costs the fabric's NET latency (links.json).
  Seconds PathLatency(int a, int b) const;
  // The `index`-th shard group of `group_size` consecutive ranks (HSDP shard groups), and the
  // `index`-th replica group: ranks with the same position in each shard group. Throws
  // InputError when group_size does not divide world_size. REQUIRES: index in range.
  std::vector<int> ShardGroup(int group_size, int index) const;
  std::vector<int> ReplicaGroup(int group_size, int index) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtune::profiles
