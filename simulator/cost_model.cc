// Compute and collective cost models.
#include "simulator/cost_model.h"

#include <algorithm>
#include <cmath>

#include "model/errors.h"

namespace shardtune::sim {
namespace {

// NCCL src/graph/tuning.cc, ncclTunerConstantsDefaults.baseLatencies, Simple protocol (us).
constexpr double kRingBaseLatencyS = 8.4e-6;
constexpr double kTreeBaseLatencyS = 8.4e-6;

// An all-to-all over `ranks` GPUs spread evenly over `nodes` nodes, every GPU of every node
// running one at once (all the cp or ep groups of the world), as NCCL runs it: grouped
// ncclSend/ncclRecv to every peer (nccl-tests src/alltoall.cu), with PXN (NCCL_PXN_DISABLE=0, the
// default since 2.12) moving each send to another node over NVLink to the GPU beside the NIC of
// the destination's rail, so that the node's NICs carry the node's traffic evenly. Of the S bytes
// a GPU sends, (n - g)/n go to the other nodes (g of the group's GPUs per node) and (g - 1)/n to
// its own node's; the network part, at the node's NIC bandwidth / its GPUs, sets the time, and
// NVLink carries the rest and PXN's hop. Bus bandwidth in nccl-tests' units, S (n - 1)/n / time:
// one GPU's network bandwidth x (n - 1)/(n - g), which S. Jeaugey gives as "N/(N-1)x the
// bandwidth per GPU, N being the number of nodes" (NVIDIA/nccl-tests#130, 2023-02-03; "Alltoall
// cannot aggregate the bandwidth of multiple NICs", #267, 2024-11-19). Both links at their
// families' achieved fractions (CostConstants: network_efficiency, nvlink_efficiency).
BytesPerSecond AllToAllAcrossNodes(const profiles::ClusterSpec& c, int ranks, int nodes,
                                   const CostConstants& k) {
  const double n = ranks, g = static_cast<double>(ranks / nodes), per_node = c.gpus_per_node;
  const double net_per_gpu = c.nics_per_node * c.nic_bandwidth.count() / per_node *
                             FamilyEfficiency(c.inter_node.family, k);
  const double intra = c.intra_node.bandwidth_per_direction.count() *
                       FamilyEfficiency(c.intra_node.family, k);
  const double net_s = (n - g) / n / net_per_gpu;                            // per byte of S
  const double intra_s = ((g - 1) / n + (n - g) / n * (1 - 1 / per_node)) / intra;
  return BytesPerSecond::Of((n - 1) / n / std::max(net_s, intra_s));
}

int Log2Ceil(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return l;
}

}  // namespace

double FamilyEfficiency(const std::string& family, const CostConstants& k) {
  if (family == "nvlink") return k.nvlink_efficiency;
  if (family == "pcie") return k.pcie_efficiency;
  return k.network_efficiency;
}

FlopsPerSecond DensePeak(const profiles::GpuSpec& gpu, model::DType dtype) {
  switch (dtype) {
    case model::DType::kBf16: return gpu.bf16_dense;
    case model::DType::kFp16: return gpu.fp16_dense;
    case model::DType::kFp32: return gpu.tf32_dense;  // torch allows TF32 matmuls for fp32 (opt-in)
  }
  return gpu.bf16_dense;
}

double Fp32GemmSeconds(double fp32_matmul_flops, const profiles::GpuSpec& gpu, model::DType dtype) {
  if (!(fp32_matmul_flops > 0)) return 0;
  const double fp32_peak = gpu.fp32.count() > 0 ? gpu.fp32.count() : DensePeak(gpu, dtype).count();
  return fp32_matmul_flops / (fp32_peak * kFp32GemmEfficiency);
}

Seconds ComputeTime(double matmul_flops, double attention_flops, double memory_bytes,
                    const profiles::GpuSpec& gpu, model::DType dtype, const CostConstants& k,
                    double fp32_matmul_flops) {
  double peak = DensePeak(gpu, dtype).count();
  double t = 0;
  if (matmul_flops > 0) t += matmul_flops / (peak * k.matmul_efficiency);
  t += Fp32GemmSeconds(fp32_matmul_flops, gpu, dtype);
  if (attention_flops > 0) t += attention_flops / (peak * k.attention_efficiency);
  if (memory_bytes > 0) t += memory_bytes / (gpu.memory_bandwidth.count() * k.memory_efficiency);
  if (matmul_flops > 0 || attention_flops > 0 || memory_bytes > 0 || fp32_matmul_flops > 0) {
    t += k.compute_op_overhead.count();
  }
  return Seconds::Of(t);
}

GroupLink DescribeGroup(const profiles::Topology& topo, const profiles::ClusterSpec& cluster,
                        const std::vector<std::vector<int>>& rings, const CostConstants& k) {
  SHARDTUNE_CHECK(!rings.empty() && !rings.front().empty()) << "empty group";
  const std::vector<int>& r = rings.front();
  GroupLink g;
  g.ranks = static_cast<int>(r.size());
  g.nodes = topo.NodesSpanned(r);
  g.intra_hop_latency = cluster.intra_node.latency;
  g.inter_hop_latency = cluster.inter_node.latency;
  if (g.ranks < 2) return g;
  BytesPerSecond raw = rings.size() > 1 ? topo.ConcurrentRingBottleneck(rings) : topo.RingBottleneck(r);
  // The bottleneck of a ring that leaves its node is the network (NIC or PCIe to it); inside a
  // node it is the intra-node link.
  const std::string& family = g.nodes > 1 ? cluster.inter_node.family : cluster.intra_node.family;
  g.bus_bandwidth = BytesPerSecond::Of(raw.count() * FamilyEfficiency(family, k));
  // Concurrent rings share a fitted or NCCL-modelled bandwidth as they share the raw one.
  g.concurrent_share = rings.size() > 1 ? raw.count() / topo.RingBottleneck(r).count() : 1.0;
  bool calibrated = false;
  for (const CollectiveCalibration& cal : k.collectives) {
    if (cal.link_family != family || cal.group_size != g.ranks) continue;
    g.bus_bandwidth = BytesPerSecond::Of(cal.bus_bandwidth.count() * g.concurrent_share);
    g.latency_override = cal.latency;
    calibrated = true;
  }
  if (!calibrated && profiles::NcclModelApplies(cluster, r)) {
    g.nccl = std::make_shared<const profiles::NcclComm>(profiles::NcclShapeOf(cluster, r));
    if (g.nodes > 1 && cluster.nics_per_node > 0) {
      g.all_to_all_bus_bandwidth = AllToAllAcrossNodes(cluster, g.ranks, g.nodes, k);
    }
  }
  return g;
}

Seconds CollectiveLatency(profiles::Collective c, const GroupLink& g) {
  int n = g.ranks;
  if (n < 2) return Seconds();
  if (const auto& fitted = g.latency_override[static_cast<size_t>(c)]) return *fitted;
  double intra = g.intra_hop_latency.count(), inter = g.inter_hop_latency.count();
  bool ar = c == profiles::Collective::kAllReduce;
  int steps = ar ? 2 * (n - 1) : n - 1;
  int inter_steps = g.nodes == 1 ? 0 : (ar ? 2 * (g.nodes - 1) : g.nodes - 1);
  double ring = kRingBaseLatencyS + (steps - inter_steps) * intra + inter_steps * inter;
  if (!ar) return Seconds::Of(ring);
  double tree = kTreeBaseLatencyS + 2 * ((n / g.nodes - 1) * intra + Log2Ceil(g.nodes) * inter);
  return Seconds::Of(std::min(ring, tree));
}

profiles::NcclReduceOp Fsdp2ReduceOp(model::DType reduce_dtype) {
  return reduce_dtype == model::DType::kFp16 ? profiles::NcclReduceOp::kSum : profiles::NcclReduceOp::kScaled;
}

CollectiveTerms CollectiveCost(profiles::Collective c, Bytes full_size, const GroupLink& g,
                               profiles::NcclReduceOp op) {
  SHARDTUNE_CHECK(g.ranks >= 2 && full_size.count() > 0) << "a collective needs 2 ranks and bytes";
  CollectiveTerms t;
  t.bus_bytes = static_cast<double>(full_size.count()) * profiles::BusBwFactor(c, g.ranks);
  const bool nccl_kind = c == profiles::Collective::kAllGather || c == profiles::Collective::kReduceScatter ||
                         c == profiles::Collective::kAllReduce;
  if (g.nccl && nccl_kind) {
    t.nccl = g.nccl->Cost(c, full_size, op);
    t.latency = t.nccl->latency;
    t.bus_bandwidth = t.nccl->bus_bandwidth * g.concurrent_share;
    return t;
  }
  t.latency = CollectiveLatency(c, g);
  t.bus_bandwidth = g.bus_bandwidth;
  return t;
}

Seconds CollectiveTime(profiles::Collective c, Bytes full_size, const GroupLink& g) {
  if (g.ranks < 2 || full_size.count() <= 0) return Seconds();
  return CollectiveCost(c, full_size, g).time();
}

}  // namespace shardtune::sim
