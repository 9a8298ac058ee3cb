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
#include "profiles/nccl_model.h"
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
  // ranks of one host: the node's, or a GB200 tray's 4 where ClusterSpec::gpus_per_host splits
  // the node): a guess.
  BytesPerSecond host_memory_bandwidth_per_node = BytesPerSecond::GBps(200);
  // Fixed time per compute op (a kernel or a whole segment's dispatch), on top of its work: what
  // makes small ops reach less of the peak than large ones. 0 until calibrated (the GPU numbers
  // above are large-GEMM figures).
  Seconds compute_op_overhead;
  // Host (CPU) time to issue work, which the GPU cannot run ahead of (simulate's host model).
  // Measured on the lent H100 machine's host (Intel Xeon, 16 cores; torch 2.11.0+cu130,
  // transformers 5.17.0; 2026-11-27) by tests/bench/fsdp2_reference/host_costs.py: HF
  // Llama-3.2-1B / Llama-3-8B stepped on 16-token inputs (the GPU idles, so each phase's wall
  // time is the host's), untraced, launches counted by a separate profiled step; the figures are
  // the medians over its seven configurations and two sessions
  // (tests/data/validation/fsdp2_h100_host_costs*.jsonl). The host was noisy: per-configuration
  // medians spread 25-41 us (forward) and 18-32 us (backward). The literature's figure was 10 us
  // per op (H. He, "Making Deep Learning Go Brrrr From First Principles", 2022).
  //  - per kernel a forward issues from Python (HF modules; a checkpointed block's recomputation
  //    too): 37 us;
  Seconds host_per_kernel = Seconds::Micros(37);
  //  - per kernel the autograd engine's C++ thread issues in backward: 24 us;
  Seconds host_per_backward_kernel = Seconds::Micros(24);
  //  - per parameter tensor per optimizer step, torch.optim.AdamW over FSDP2's DTensor shards
  //    (every foreach op unwraps each DTensor: the cost scales with tensors, not launches: 480
  //    launches on one rank and 64 on rank 0 of 8 took the same 12 ms for 146 tensors): 81 us
  //    foreach, 45 us fused (one _fused_adamw_ per group);
  Seconds host_per_optimizer_param = Seconds::Micros(81);
  Seconds host_per_fused_optimizer_param = Seconds::Micros(45);
  // FSDP2's Python hooks, each pre-forward (with its post-forward), pre-backward and
  // post-backward (the host time fully_shard adds to a unit, over the same model without it,
  // per hook; the hooks' own copy-in, all-gather, copy-out and reduce-scatter launches
  // included), measured as above: 1.93 ms on a sharded mesh (rank 0 of 8; 1.1-2.6 ms per
  // configuration), 1.45 ms on a one-rank mesh, where FSDP2 runs no all-gather or reduce-scatter
  // (1.3-1.7 ms). The literature's figure: FSDP::pre_forward at about 1 ms per call on a Xeon
  // with torch 2.10 (pytorch/pytorch#173680).
  Seconds host_per_fsdp_hook = Seconds::Micros(1930);
  Seconds host_per_fsdp_hook_one_rank = Seconds::Micros(1450);
  // Fitted collective costs (calibrated profiles); empty: the topology and NCCL's model.
  std::vector<CollectiveCalibration> collectives;
  // Measured kernel tables (`shardtune probe`, a profile's "kernels" section); null or empty: the
  // datasheet peaks times the efficiencies above. Shared, immutable once built.
  std::shared_ptr<const profiles::KernelTables> tables;
};

// The dense tensor-core peak the efficiencies are fractions of: bf16, fp16, or TF32 for fp32.
FlopsPerSecond DensePeak(const profiles::GpuSpec& gpu, model::DType dtype);
// The achieved fraction of a link family's bandwidth: nvlink_efficiency, pcie_efficiency, or
// network_efficiency for the fabrics (ib, roce, eth).
double FamilyEfficiency(const std::string& family, const CostConstants& k);

// Time of a compute op: matmul FLOPs and attention FLOPs at the GPU's dense peak for `dtype`
// times their efficiencies, plus memory-bound bytes at HBM bandwidth times its efficiency (the
// op's kernels run one after another, so the terms add), plus k.compute_op_overhead for an op
// with any work. `fp32_matmul_flops`: GEMMs in fp32 without tensor cores, at the GPU's FP32 peak
// times kFp32GemmEfficiency.
Seconds ComputeTime(double matmul_flops, double attention_flops, double memory_bytes,
                    const profiles::GpuSpec& gpu, model::DType dtype, const CostConstants& k,
                    double fp32_matmul_flops = 0);
// The fraction of the non-tensor-core FP32 peak a large SGEMM reaches. A guess (cuBLAS SGEMM on
// large square shapes runs near its peak; no probe row measures it yet): calibration or a probe
// should replace it.
inline constexpr double kFp32GemmEfficiency = 0.85;
// ComputeTime's fp32 GEMM term: `fp32_matmul_flops` at the GPU's FP32 peak (the dtype's dense
// peak where the catalog has none) times kFp32GemmEfficiency; 0 for no FLOPs.
double Fp32GemmSeconds(double fp32_matmul_flops, const profiles::GpuSpec& gpu, model::DType dtype);

// How a collective group maps onto the topology: ranks, nodes spanned, the bottleneck
// per-direction bandwidth of its ring (with concurrent rings sharing links), and the per-hop
// latencies inside and between nodes.
struct GroupLink {
  int ranks = 1;
  int nodes = 1;
  // Achieved: the topology graph's ring bottleneck x the link family's efficiency. What
  // all-to-alls use (NCCL's tuning model has no point-to-point term), and every collective of a
  // group NCCL's model does not describe (CPU ranks, PCIe-only nodes, uneven groups).
  BytesPerSecond bus_bandwidth;
  Seconds intra_hop_latency;
  Seconds inter_hop_latency;
  // Calibrated latency per profiles::Collective (from CostConstants::collectives); absent: NCCL's
  // latency model.
  std::array<std::optional<Seconds>, 5> latency_override;
  // NCCL's model of the group's communicator (profiles/nccl_model.h): channels over every NIC,
  // ring/tree/NVLS per collective and size. Null when it does not describe the group or a
  // calibration replaced it. Shared: GroupLinks are copied freely.
  std::shared_ptr<const profiles::NcclComm> nccl;
  // The share of its links this group gets while the other groups run the same collective at
  // once (HSDP replica groups sharing a node's NICs): the topology graph's concurrent bottleneck
  // over its lone one. Scales NCCL's bandwidths.
  double concurrent_share = 1.0;
  // An all-to-all's bus bandwidth across nodes as NCCL runs it (point-to-point to every peer,
  // DescribeGroup's AllToAllAcrossNodes); 0: inside one node, or a group that model does not
  // describe, where all-to-alls take bus_bandwidth.
  BytesPerSecond all_to_all_bus_bandwidth;
  BytesPerSecond AllToAllBandwidth() const {
    return all_to_all_bus_bandwidth.count() > 0 ? all_to_all_bus_bandwidth : bus_bandwidth;
  }
  bool crosses_nodes() const { return nodes > 1; }
};

// One collective's cost on a group: latency + bus_bytes / bus_bandwidth, with bus_bytes the
// nccl-tests volume S x BusBwFactor(c, n). `nccl` holds NCCL's choice when its model priced it.
struct CollectiveTerms {
  Seconds latency;
  double bus_bytes = 0;
  BytesPerSecond bus_bandwidth;
  std::optional<profiles::NcclCollectiveCost> nccl;
  Seconds time() const { return latency + Seconds::Of(bus_bytes / bus_bandwidth.count()); }
};

// Builds the GroupLink of `rings` (groups running the same collective at once; the first is the
// one reported), with NCCL's model of the first when it describes it. A CollectiveCalibration of
// k for the group's size and bottleneck link family replaces its bandwidth and latencies (and
// NCCL's model). REQUIRES: rings non-empty, each ring's ranks valid.
GroupLink DescribeGroup(const profiles::Topology& topo, const profiles::ClusterSpec& cluster,
                        const std::vector<std::vector<int>>& rings, const CostConstants& k);

// NCCL's model (src/graph/tuning.cc, Simple protocol): latency = baseLat + steps x hop latency,
// ring steps n-1 for all-gather/reduce-scatter and 2(n-1) for all-reduce, with the inter-node
// steps at the network latency; tree all-reduce 2((n/nodes-1) intra + log2(nodes) inter). The
// serialization term is S x BusBwFactor(c, n) / busbw (nccl-tests doc/PERFORMANCE.md). For
// all-reduce the faster of ring and tree is taken, as NCCL's tuner does. `full_size` is S.
Seconds CollectiveTime(profiles::Collective c, Bytes full_size, const GroupLink& g);
// The latency term alone (the part no bandwidth sharing stretches), for groups NCCL's model does
// not price (and all-to-alls).
Seconds CollectiveLatency(profiles::Collective c, const GroupLink& g);
// Both terms of a collective of `full_size` on `g`: NCCL's choice (its latency, its algorithm
// bandwidth as bus bandwidth, times the group's concurrent share) for all-gather, reduce-scatter
// and all-reduce on a group it describes; else the ring bottleneck and CollectiveLatency.
// REQUIRES: g.ranks >= 2, full_size > 0.
// `op` says how a reduction combines (PAT's reduce-scatter runs only a plain sum).
CollectiveTerms CollectiveCost(profiles::Collective c, Bytes full_size, const GroupLink& g,
                               profiles::NcclReduceOp op = profiles::NcclReduceOp::kSum);
// The reduction FSDP2 asks NCCL for: ReduceOp.AVG (a scaled sum on floats) for bf16 and fp32
// gradients, a plain sum with a separate divide for fp16 (torch/distributed/fsdp/_fully_shard/
// _fsdp_collectives.py _get_gradient_divide_factors: "overflow_risk").
profiles::NcclReduceOp Fsdp2ReduceOp(model::DType reduce_dtype);

}  // namespace shardtune::sim
