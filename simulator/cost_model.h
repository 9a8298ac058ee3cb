// Pure cost models (simulator/README.md): compute time of an op on a GPU and collective time over a
// group of ranks on the topology. Terms are named: latency + serialization. Every constant that
// is not a datasheet figure is named here with its source; a calibrated profile replaces it.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/plan.h"
#include "model/units.h"
#include "profiles/cluster.h"
#include "profiles/collective.h"
#include "profiles/kernel_tables.h"
#include "profiles/topology.h"

namespace shardtune::sim {

// A collective cost fitted from measurements (`shardtune calibrate`) for one link family and
// group size: t(c, S) = latency[c] + S x BusBwFactor(c, n) / bus_bandwidth, the same
// latency + serialization form as CollectiveTime. It replaces the topology's achieved bandwidth
// and NCCL's latency model for groups of that size whose bottleneck link is of that family.
struct CollectiveCalibration {
  std::string link_family;  // "nvlink", "pcie", "ib", "roce", "eth", "loopback"
  int group_size = 2;
  BytesPerSecond bus_bandwidth;
  // By profiles::Collective; absent: NCCL's latency model for that kind.
  std::array<std::optional<Seconds>, 5> latency;
};

struct CostConstants {
  // Achieved fraction of the dense tensor-core peak for large GEMMs: 790-798 TFLOP/s measured for
  // an 8192^3 bf16 matmul on an H100 SXM (measured on an H100: executor/README.md)
  // of 989.4 TFLOP/s.
  double matmul_efficiency = 0.807;
  // Flash attention: FlashAttention-2 (Dao 2023) reports 50-73% of A100 peak forward and ~40%
  // less in backward; 0.5 for forward+backward together is a guess.
  double attention_efficiency = 0.5;
  // Memory-bound kernels: 3.0e12 B/s measured device-to-device on an H100 (shared/validation
  // h100-d2d-copy-measured) of 3.35e12 peak.
  double memory_efficiency = 0.9;
  // Achieved fraction of a link's per-direction bandwidth as NCCL bus bandwidth, by family.
  // NVLink: 783 of 900 GB/s bidirectional measured on HGX H100 (NVIDIA/nccl#1264) = 0.87; the
  // others are guesses until calibrated.
  double nvlink_efficiency = 0.87;
  double pcie_efficiency = 0.85;
  double network_efficiency = 0.9;
  // Host memory bandwidth one rank's offloaded optimizer gets (DDR5 server, shared by the
  // node's ranks): a guess.
  BytesPerSecond host_memory_bandwidth_per_node = BytesPerSecond::GBps(200);
  // Fixed time per compute op (a kernel or a whole segment's dispatch), on top of its work: what
  // makes small ops reach less of the peak than large ones. 0 until calibrated (the GPU numbers
  // above are large-GEMM figures).
  Seconds compute_op_overhead;
  // Host (CPU) time to issue work, which the GPU cannot run ahead of (simulate's host model):
  // eager PyTorch dispatches an operator in about 10 us (H. He, "Making Deep Learning Go Brrrr
  // From First Principles", 2022: "overhead ... on the order of 10 microseconds per op"); a guess
  // for kernels issued from HF Python modules until calibrated.
  Seconds host_per_kernel = Seconds::Micros(10);
  // FSDP2's Python hooks per unit: FSDP::pre_forward measured at about 1 ms per call on a Xeon
  // with torch 2.10 (pytorch/pytorch#173680); pre_backward runs the same unshard path and
  // post_backward's foreach_reduce loops over the same parameters, so each is taken as 1 ms
  // too: a guess until calibrated.
  Seconds host_per_fsdp_hook = Seconds::Micros(1000);
  // Fitted collective costs (calibrated profiles); empty: the topology and NCCL's model.
  std::vector<CollectiveCalibration> collectives;
  // Measured kernel tables (`shardtune probe`, a profile's "kernels" section); null or empty: the
  // datasheet peaks times the efficiencies above. Shared, immutable once built.
  std::shared_ptr<const profiles::KernelTables> tables;
};

// The dense tensor-core peak the efficiencies are fractions of: bf16, fp16, or TF32 for fp32.
FlopsPerSecond DensePeak(const profiles::GpuSpec& gpu, model::DType dtype);

// Time of a compute op: matmul FLOPs and attention FLOPs at the GPU's dense peak for `dtype`
// times their efficiencies, plus memory-bound bytes at HBM bandwidth times its efficiency (the
// op's kernels run one after another, so the terms add), plus k.compute_op_overhead for an op
// with any work.
Seconds ComputeTime(double matmul_flops, double attention_flops, double memory_bytes,
                    const profiles::GpuSpec& gpu, model::DType dtype, const CostConstants& k);

// How a collective group maps onto the topology: ranks, nodes spanned, the bottleneck
// per-direction bandwidth of its ring (with concurrent rings sharing links), and the per-hop
// latencies inside and between nodes.
struct GroupLink {
  int ranks = 1;
  int nodes = 1;
  BytesPerSecond bus_bandwidth;  // achieved: bottleneck x family efficiency
  Seconds intra_hop_latency;
  Seconds inter_hop_latency;
  // Calibrated latency per profiles::Collective (from CostConstants::collectives); absent: NCCL's
  // latency model.
  std::array<std::optional<Seconds>, 5> latency_override;
  bool crosses_nodes() const { return nodes > 1; }
};

// Builds the GroupLink of `rings` (groups running the same collective at once; the first is the
// one reported). A CollectiveCalibration of k for the group's size and bottleneck link family
// replaces its bandwidth and latencies. REQUIRES: rings non-empty, each ring's ranks valid.
GroupLink DescribeGroup(const profiles::Topology& topo, const profiles::ClusterSpec& cluster,
                        const std::vector<std::vector<int>>& rings, const CostConstants& k);

// NCCL's model (src/graph/tuning.cc, Simple protocol): latency = baseLat + steps x hop latency,
// ring steps n-1 for all-gather/reduce-scatter and 2(n-1) for all-reduce, with the inter-node
// steps at the network latency; tree all-reduce 2((n/nodes-1) intra + log2(nodes) inter). The
// serialization term is S x BusBwFactor(c, n) / busbw (nccl-tests doc/PERFORMANCE.md). For
// all-reduce the faster of ring and tree is taken, as NCCL's tuner does. `full_size` is S.
Seconds CollectiveTime(profiles::Collective c, Bytes full_size, const GroupLink& g);
// The latency term alone (the part no bandwidth sharing stretches).
Seconds CollectiveLatency(profiles::Collective c, const GroupLink& g);

}  // namespace shardtune::sim
