// NCCL's own model of a communicator's collectives (profiles/nccl_model_notes.md): the channels
// its topology search builds (NVIDIA/nccl src/graph/search.cc), the bandwidth and latency its
// tuner gives each algorithm and protocol (src/graph/tuning.cc ncclTopoTuneModel), and the
// choice it makes for a collective of a given size (ncclTopoGetAlgoTime: the least estimated
// time). Ported from NCCL 2.30.7 (commit 5067397c); the Hopper constants are the same in 2.28.
//
// The search is not run on a topology XML: it is a closed form of what it finds on the node
// layouts shardtune describes (GPUs on an NVSwitch or on PCIe, each GPU on its own PCIe switch
// with the NICs of its rail), derived in nccl_model_notes.md sections 1-4 and checked there
// against NCCL's own search code compiled on synthetic XMLs of the same layouts. Rules:
//  - a channel of a ring (and of a tree) enters a node through one NIC and leaves through one;
//    a NIC carries floor(NIC bw / channel bw) channels, a GPU's PCIe link floor(PCIe / channel
//    bw) per direction (search.cc:117, :739-750);
//  - channel bandwidths are quantised down to the search's speed arrays (search.cc:1052-1066);
//  - NVLink carries, per GPU and direction, each channel's hop to the next GPU;
//  - NCCL doubles channels at high per-channel bandwidth (ncclTopoDupChannels, search.cc:1036)
//    and then raises a ring's bandwidth, a tree's intra-node bandwidth and NVLS's inter-node
//    bandwidth while the links allow (pass 2, search.cc:1267-1287).
// PAT (one GPU per node all-gather/reduce-scatter) is in the table (tuning.cc:215-223, :337,
// :429-433). aws-ofi-nccl's tuner plugin, which NCCL loads from the net plugin's library by
// default, overrides the choice on p5/p5e/p5en/p6-b200 past two nodes (NcclCommShape::tuner,
// profiles/nccl_tuner_regions.h). CollNet (InfiniBand SHARP through the SHARP net plugin with
// NCCL_COLLNET_ENABLE=1) adds CollNetDirect, CollNetChain and NVLS across nodes
// (NcclCommShape::collnet; nccl_model_notes.md section 9). Not modelled: the symmetric-memory kernels
// of 2.28+, the channel counts and chunk sizes tuner plugins set, and the NCCL_ALGO/NCCL_PROTO/
// NCCL_CROSS_NIC overrides. The net plugin's latency property is modelled
// (NcclCommShape::net_latency_us).
// Multi-node NVLink (GB200 NVL72) is a node of the clique's size, as NCCL sees it: with MNNVL
// it fuses the clique's topology into one system (src/graph/topo.cc:1887, "MNNVL clique
// support") and counts nodes by clique, so a rack's 72 GPUs are ppn 72 on NVLink with NVLS.
// Not modelled there: NVLS buffer registration, which MNNVL lacks (init.cc:1108).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/units.h"
#include "profiles/cluster.h"
#include "profiles/collective.h"
#include "profiles/nccl_tuner_regions.h"

namespace shardtune::profiles {

enum class NcclAlgo { kRing, kTree, kNvls, kNvlsTree, kPat, kCollNetDirect, kCollNetChain };
enum class NcclProto { kLL, kLL128, kSimple };
// "ring", "tree", "nvls", "nvls_tree", "pat", "collnet_direct", "collnet_chain" (NCCL_ALGO's
// names, lower case, words split by "_").
const char* ToString(NcclAlgo a);
const char* ToString(NcclProto p);  // "LL", "LL128", "Simple"

// One communicator as NCCL's search sees it. Bandwidths are in GB/s (1e9 B/s), NCCL's units.
struct NcclCommShape {
  int nodes = 1;
  int ranks_per_node = 1;       // NCCL's ppn: the communicator's GPUs on each node (same on all)
  int compute_capability = 90;  // SM version x 10: 70, 80, 86, 89, 90, 100
  // Per GPU and direction, as NCCL counts NVLink: links x ncclTopoNVLinkBw(cc) (topo.cc:849,
  // topo.h:19-24: 20.6 GB/s per link on SM90, 20.0 on SM80, 40.1 on SM100). 0: no NVLink.
  double nvlink_GBps = 0;
  bool nvswitch = false;  // the NVLink goes through NVSwitches (what NVLS needs)
  // The GPU's PCIe link as NCCL counts it: width x the GT/s table / 80 (topo.cc:554, :657):
  // Gen3 x16 12, Gen4 x16 24, Gen5 x16 48.
  double pcie_GBps = 0;
  // Per node: for each PCIe switch that holds a NIC, how many of the communicator's GPUs and how
  // many NICs it holds (a rail-optimised DGX: 8 x {1, 1}; one NIC per GPU pair: 4 x {2, 1};
  // AWS p5: 8 x {1, 4}; one NIC per node: {1, 1} on GPU 0's switch). Empty on one node.
  struct Switch {
    int gpus = 0;
    int nics = 0;
  };
  std::vector<Switch> switches;
  double nic_GBps = 0;  // per NIC and direction: Gb/s / 8 (topo.cc:418)
  bool nvls = true;     // NVLink SHARP enabled when the hardware has it (NCCL_NVLS_ENABLE=2)
  // The net plugin's latency property in us (ClusterSpec::net_latency): the search copies it to
  // each graph's latencyInter (search.cc:745) and the tuner adds it to every inter-node step,
  // twice for Simple ("Also add the flush extra latency", tuning.cc:389-391).
  double net_latency_us = 0;
  // The tuner plugin NCCL loads (ClusterSpec::nccl_tuner).
  NcclTuner tuner = NcclTuner::kNone;
  // CollNet usable (ClusterSpec::ib_sharp): the net plugin has a CollNet (the SHARP plugin) and
  // NCCL_COLLNET_ENABLE=1 (init.cc:2146-2158, off by default). NCCL still turns it off below
  // NCCL_COLLNET_NODE_THRESHOLD (2) nodes (init.cc:1468-1475); the model applies that itself.
  bool collnet = false;
  // The host CPU is x86 (NCCL's cpuArch), as on every node but Grace superchips (Arm).
  bool x86_host = true;
};

// How a reduction combines: a plain sum (nccl-tests' default, ncclSum), or with a scale: ncclAvg
// on floating types and ncclPreMulSum run as ncclDevPreMulSum (enqueue.cc hostToDevRedOp), which
// PAT's reduce-scatter does not run ("Tree reduceScatter doesn't support scaling yet",
// enqueue.cc:2009-2012) and NVLink SHARP does not reduce (ncclNvlsSupported, include/device.h:587:
// ncclDevSum and ncclDevMinMax only), so NVLS and NVLS tree are left out of its reduce-scatters and
// all-reduces (enqueue.cc:425-426, :2004-2007). CollNet reduces it as a sum ("Translate ncclAvg and
// PreMulSum", enqueue.cc:1960-1975). FSDP2 reduce-scatters and HSDP-all-reduces bf16 and fp32
// gradients with ReduceOp.AVG (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
// _get_gradient_divide_factors).
enum class NcclReduceOp { kSum, kScaled };

// A channel graph found by the search: channels x per-channel bandwidth inside a node and on
// the network (equal for rings; trees may run faster inside; NVLS slower inside).
struct NcclGraph {
  int channels = 0;
  double bw_intra_GBps = 0;
  double bw_inter_GBps = 0;
  bool tree_pattern = false;  // NCCL_TOPO_PATTERN_TREE: its tree bandwidth is x0.85 (tuning.cc:336)
};

struct NcclGraphs {
  NcclGraph ring, tree, nvls;  // nvls.channels = NVLS heads, 0 when NVLS is unavailable
  // CollNet's graphs, channels 0 without CollNet: Direct's channels are its heads (one per NIC
  // with a GPU of its own, as NVLS's), Chain's are the ring's (init.cc:1189-1201).
  NcclGraph collnet_direct, collnet_chain;
};

// The search's result for `shape`. REQUIRES: shape valid (ranks_per_node >= 1, nodes >= 1, a
// positive PCIe bandwidth; on several nodes at least one switch with a NIC and nic_GBps > 0).
NcclGraphs SearchNcclGraphs(const NcclCommShape& shape);

// NCCL's choice for one collective of one size, and what it predicts.
struct NcclCollectiveCost {
  NcclAlgo algo = NcclAlgo::kRing;
  NcclProto proto = NcclProto::kSimple;
  int channels = 0;                // the search graph's channels (NVLS, CollNetDirect: heads)
  double alg_bw_GBps = 0;          // NCCL's algorithm bandwidth (tree correction applied)
  Seconds latency;                 // NCCL's latency term for this (algo, proto)
  BytesPerSecond bus_bandwidth;    // in nccl-tests units: alg_bw x BusBwFactor(c, n)
  Seconds time;                    // latency + S / alg_bw: NCCL's estimate
  bool by_tuner = false;           // the tuner plugin chose (algo, proto), not NCCL's own model
};

class NcclComm {
 public:
  explicit NcclComm(const NcclCommShape& shape);
  // The (algorithm, protocol) NCCL picks for `c` over `size` bytes in total (the gathered size
  // of an all-gather, the input of a reduce-scatter), with NCCL's estimate. `c` is all-gather,
  // reduce-scatter or all-reduce (others: InternalError). size > 0. A tuner plugin's region, where
  // one holds the point, overrides NCCL's least-time choice (by_tuner).
  NcclCollectiveCost Cost(Collective c, Bytes size, NcclReduceOp op = NcclReduceOp::kSum) const;
  // NCCL's estimate for one (algorithm, protocol) entry, as NCCL_ALGO/NCCL_PROTO would force it;
  // nullopt when NCCL's table does not enable the entry for this call.
  std::optional<NcclCollectiveCost> CostOf(Collective c, Bytes size, NcclAlgo algo, NcclProto proto,
                                           NcclReduceOp op = NcclReduceOp::kSum) const;
  // The bandwidth NCCL's tuner gives `c` at large sizes with the algorithm it would pick there
  // (1 GiB per rank), as nccl-tests reports it.
  BytesPerSecond AsymptoticBusBandwidth(Collective c) const;
  const NcclCommShape& shape() const { return shape_; }
  const NcclGraphs& graphs() const { return graphs_; }
  int ranks() const { return shape_.nodes * shape_.ranks_per_node; }

 private:
  struct Entry {
    double alg_bw_GBps = 0;  // 0: disabled
    double latency_us = 0;
  };
  // [collective: AG, RS, AR][algo: NcclAlgo's order][proto]
  Entry table_[3][7][3];
  NcclCommShape shape_;
  NcclGraphs graphs_;
  std::shared_ptr<const AwsOfiRegionTuner> tuner_;  // null: no tuner plugin

  bool Enabled(Collective c, int algo, int proto, NcclReduceOp op) const;
  NcclCollectiveCost Estimate(Collective c, int64_t bytes, int algo, int proto) const;
};

// Whether NCCL's model describes `ranks` of `cluster`: GPU ranks (not cpu:N), the same number
// on each node they span, and inside a node NVLink (the PCIe-only intra-node paths, P2P through
// the CPU or host memory, are left to the topology graph).
bool NcclModelApplies(const ClusterSpec& cluster, const std::vector<int>& ranks);
// The shape of the communicator over `ranks` (node-major ranks, as Topology). REQUIRES:
// NcclModelApplies(cluster, ranks).
NcclCommShape NcclShapeOf(const ClusterSpec& cluster, const std::vector<int>& ranks);

}  // namespace shardtune::profiles
