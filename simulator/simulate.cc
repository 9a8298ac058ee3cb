// SimulateStep: costs per op, the event schedule, and the step's figures.
#include "simulator/simulate.h"

#if defined(__GLIBC__)
#include <malloc.h>  // mallopt (RetainFreedHeap)
#endif

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include "model/errors.h"
#include "model/module_tree.h"
#include "model/trainable.h"
#include "simulator/kernel_time.h"
#include "simulator/step_walk.h"

namespace shardtune::sim {
namespace {

struct Links {
  GroupLink shard, replicate, host, cp, expert_shard, ep;
  // Fluid-model link the Ulysses all-to-alls share: the shard group's (0) when both groups stay
  // inside one node (every GPU's NVLink carries both), else a link of their own (3).
  int8_t cp_link = 3;
  // The expert-parallel all-to-alls likewise: the shard group's link inside a node, else their
  // own (5). The efsdp all-gathers and reduce-scatters share the shard group's link (0): they run
  // on FSDP's streams between the other units' collectives.
  int8_t ep_link = 5;
};

Links DescribeLinks(const profiles::Topology& topo, const profiles::ClusterSpec& c,
                    const MemoryReport& m, const CostConstants& k) {
  Links l;
  if (m.cp > 1) {
    // cp groups are consecutive ranks (inside the node first, as verl's and torchtitan's meshes
    // put cp innermost); all of them run their all-to-alls at the same time.
    std::vector<std::vector<int>> cp_rings;
    for (int i = 0; i < m.world / m.cp; ++i) cp_rings.push_back(topo.ShardGroup(m.cp, i));
    l.cp = DescribeGroup(topo, c, cp_rings, k);
  }
  std::vector<std::vector<int>> shard_rings, replica_rings;
  for (int i = 0; i < m.replicas; ++i) shard_rings.push_back(topo.ShardGroup(m.shard_group, i));
  for (int j = 0; j < m.shard_group; ++j) replica_rings.push_back(topo.ReplicaGroup(m.shard_group, j));
  l.shard = DescribeGroup(topo, c, shard_rings, k);
  l.replicate = DescribeGroup(topo, c, replica_rings, k);
  if (m.cp > 1 && !l.cp.crosses_nodes() && !l.shard.crosses_nodes()) l.cp_link = 0;
  if (m.ep > 1) {
    // torchtitan's mesh puts ep innermost (consecutive ranks of a shard group: ParallelDims
    // builds [dp_replicate, efsdp, ep]); the efsdp group is the ranks of a shard group with the
    // same position in their ep group (stride ep).
    std::vector<std::vector<int>> ep_rings, efsdp_rings;
    for (int i = 0; i < m.world / m.ep; ++i) ep_rings.push_back(topo.ShardGroup(m.ep, i));
    for (int g = 0; g < m.replicas; ++g) {
      std::vector<int> group = topo.ShardGroup(m.shard_group, g);
      for (int j = 0; j < m.ep; ++j) {
        std::vector<int> ring;
        for (size_t r = static_cast<size_t>(j); r < group.size(); r += static_cast<size_t>(m.ep)) ring.push_back(group[r]);
        efsdp_rings.push_back(std::move(ring));
      }
    }
    l.ep = DescribeGroup(topo, c, ep_rings, k);
    l.expert_shard = DescribeGroup(topo, c, efsdp_rings, k);
    if (!l.ep.crosses_nodes() && !l.shard.crosses_nodes()) l.ep_link = 0;
  }
  // Host <-> device copies over the GPU's own PCIe link, or NVLink-C2C on a Grace superchip
  // (GpuSpec::CopyLink), at that link family's achieved fraction.
  const profiles::LinkSpec& copy = profiles::FindLink(c.gpu.CopyLink(), "gpu " + c.gpu.name);
  l.host.ranks = 2;
  l.host.bus_bandwidth = BytesPerSecond::Of(copy.bandwidth_per_direction.count() * FamilyEfficiency(copy.family, k));
  l.host.intra_hop_latency = copy.latency;
  return l;
}

// The group a collective op runs on (ProgramOp::group: 0 shard, 1 replicate, kExpertShardGroup).
const GroupLink& CollectiveGroup(const Links& l, const ProgramOp& op) {
  return op.group == 1 ? l.replicate : op.group == kExpertShardGroup ? l.expert_shard : l.shard;
}

// The host time that issues `op` (CostConstants' host terms): kernels at the issuing thread's
// rate, the optimizer's parameter tensors, FSDP2's hooks (cheaper on a one-rank mesh, where
// FSDP2 runs no collectives).
double HostSeconds(const ProgramOp& op, const model::Plan& plan, const Links& l, const CostConstants& k) {
  const double python = op.kind == OpKind::kBackward    ? op.host_python_kernels
                        : op.kind == OpKind::kOptimizer ? 0
                                                        : op.host_kernels;
  const double autograd = op.kind == OpKind::kBackward ? op.host_kernels - op.host_python_kernels : 0;
  const bool fused = plan.optimizer_impl == model::OptimizerImpl::kFused;
  const bool one_rank = l.shard.ranks <= 1 && l.replicate.ranks <= 1;
  return python * k.host_per_kernel.count() + autograd * k.host_per_backward_kernel.count() +
         op.host_params * (fused ? k.host_per_fused_optimizer_param : k.host_per_optimizer_param).count() +
         op.host_hooks * (one_rank ? k.host_per_fsdp_hook_one_rank : k.host_per_fsdp_hook).count();
}

// Ops of steps before `from_step` are left at zero cost (the step-time bound reads step 1 only).
std::vector<OpCost> CostOps(const StepProgram& p, const profiles::ClusterSpec& c,
                            const model::Plan& plan, const Links& l, const CostConstants& k,
                            int from_step = 0) {
  std::vector<OpCost> costs(p.ops.size());
  // The host's memory bandwidth is shared by the ranks of one host (a GB200 tray's 4, not the
  // NVL72 node's 72).
  double host_bw = k.host_memory_bandwidth_per_node.count() / std::max(1, c.GpusPerHost());
  // The blocks' collectives repeat through the step with the same kind, size and group: each
  // distinct one is priced once (NcclComm::Cost tries every algorithm and protocol), the few of
  // a step searched in order.
  struct Priced {
    profiles::Collective kind;
    int64_t bytes;
    const GroupLink* group;
    CollectiveTerms terms;
  };
  std::vector<Priced> priced;
  const profiles::NcclReduceOp reduce_op = Fsdp2ReduceOp(plan.reduce_dtype);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp& op = p.ops[i];
    if (op.step < from_step) continue;
    OpCost& oc = costs[i];
    double local = ComputeTime(op.matmul_flops, op.attention_flops, op.memory_bytes, c.gpu,
                               plan.param_dtype, k, op.fp32_matmul_flops).count();
    // On CPU ranks the kernels run on the issuing thread itself: their time is the compute.
    if (!c.cpu_only) oc.host_ns = ToNanos(HostSeconds(op, plan, l, k));
    switch (op.kind) {
      case OpKind::kAllGather: case OpKind::kReduceScatter: case OpKind::kAllReduce: {
        const GroupLink& g = CollectiveGroup(l, op);
        oc.latency_ns = ToNanos(local);
        if (g.ranks > 1 && op.comm_bytes > 0) {
          auto at = std::find_if(priced.begin(), priced.end(), [&](const Priced& q) {
            return q.kind == op.collective && q.bytes == op.comm_bytes && q.group == &g;
          });
          if (at == priced.end()) {
            priced.push_back({op.collective, op.comm_bytes, &g,
                              CollectiveCost(op.collective, Bytes::Of(op.comm_bytes), g, reduce_op)});
            at = priced.end() - 1;
          }
          const CollectiveTerms& t = at->terms;
          oc.latency_ns = ToNanos(local + t.latency.count());
          oc.transfer_ns = std::max<int64_t>(1, ToNanos(t.bus_bytes / t.bus_bandwidth.count()));
        }
        oc.link = op.group == kExpertShardGroup ? 0 : op.group;
        break;
      }
      case OpKind::kAllToAll: {
        // Each dist.all_to_all call pays the latency; the bytes are S x (n-1)/n at the cp (or
        // ep) group's all-to-all bus bandwidth (nccl-tests doc/PERFORMANCE.md, alltoall;
        // across nodes GroupLink::all_to_all_bus_bandwidth).
        const bool ep = op.group == kExpertParallelGroup;
        const GroupLink& g = ep ? l.ep : l.cp;
        double bytes =
            static_cast<double>(op.comm_bytes) * profiles::BusBwFactor(op.collective, g.ranks);
        double lat = g.ranks > 1 ? op.calls * CollectiveLatency(op.collective, g).count() : 0;
        oc.latency_ns = ToNanos(lat);
        oc.transfer_ns = g.ranks > 1 && bytes > 0
                             ? std::max<int64_t>(1, ToNanos(bytes / g.AllToAllBandwidth().count()))
                             : 0;
        oc.link = ep ? l.ep_link : l.cp_link;
        break;
      }
      case OpKind::kHostToDevice: case OpKind::kDeviceToHost:
        oc.latency_ns = ToNanos(l.host.intra_hop_latency.count());
        oc.transfer_ns = std::max<int64_t>(1, ToNanos(static_cast<double>(op.comm_bytes) / l.host.bus_bandwidth.count()));
        oc.link = 2;
        break;
      default:
        oc.fixed_ns = op.stream == Stream::kHost ? ToNanos(op.memory_bytes / host_bw) : ToNanos(local);
    }
  }
  return costs;
}

// The step's phases (SimReport::phases), by index so the per-op loop builds no strings.
constexpr const char* kPhaseNames[] = {"forward compute",  "backward compute",  "optimizer step",
                                       "all-gather",       "reduce-scatter",    "replica all-reduce",
                                       "host copies",      "all-to-all",         "copy-in/copy-out"};
constexpr size_t kNumPhases = sizeof(kPhaseNames) / sizeof(kPhaseNames[0]);

size_t PhaseOf(const ProgramOp& op) {
  switch (op.kind) {
    case OpKind::kForward: return 0;
    case OpKind::kBackward: return 1;
    case OpKind::kOptimizer: return 2;
    case OpKind::kAllGather: return 3;
    case OpKind::kReduceScatter: return 4;
    case OpKind::kAllReduce: return 5;
    case OpKind::kHostToDevice: case OpKind::kDeviceToHost: return 6;
    case OpKind::kAllToAll: return 7;
    default: return 8;
  }
}

double ModelFlopsPerToken(const model::ModelSpec& s, const model::Plan& plan, int64_t seq) {
  // 6N for forward+backward of the parameters a token touches, 12·L·q_dim·S for attention
  // scores and values (Chowdhery et al. 2022, PaLM, appendix B; a sliding layer's window for S).
  // A VL model's tower runs per patch, not per token: its parameters leave N, and 3x its blocks'
  // forward FLOPs per token of the sequence join (model::VisionBlockForwardFlops).
  double n = s.moe.enabled() ? static_cast<double>(model::ActiveParamsPerToken(s))
                             : static_cast<double>(model::ParameterCount(s) - model::CountParameters(s).vision);
  double vision = 0;
  model::VisionLoad load = model::VisionLoadOf(s, plan, seq);
  load.patches_per_token /= std::max(1, plan.cp);  // per token of the sequence, not of a cp slice
  for (int b = 0; b < s.VisionBlocks() && load.runs(); ++b) {
    const model::VisionBlockFlops f = model::VisionBlockForwardFlops(s, b, load);
    vision += 3 * (f.matmul + f.attention);
  }
  return 6 * n + 3.0 * s.num_layers * model::AttentionForwardFlopsPerToken(s, seq).count() + vision;
}

// SimReport::collectives: the steady step's collectives grouped by (group, kind, size), each
// priced as CostOps priced it.
void SummarizeCollectives(const Links& l, profiles::NcclReduceOp reduce_op, SimReport* r) {
  const auto& ops = r->program.ops;
  r->op_collective.assign(ops.size(), -1);
  std::map<std::tuple<int, int, int64_t>, int32_t> index;
  for (size_t i = 0; i < ops.size(); ++i) {
    const ProgramOp& op = ops[i];
    if (op.comm_bytes <= 0 || (op.kind != OpKind::kAllGather && op.kind != OpKind::kReduceScatter &&
                               op.kind != OpKind::kAllReduce)) {
      continue;
    }
    const GroupLink& g = CollectiveGroup(l, op);
    if (g.ranks < 2) continue;
    const auto key = std::make_tuple(static_cast<int>(op.group), static_cast<int>(op.collective), op.comm_bytes);
    auto it = index.find(key);
    if (it == index.end()) {
      CollectiveSummary c;
      c.group = op.group == 1 ? "replicate" : op.group == kExpertShardGroup ? "expert_shard" : "shard";
      c.kind = op.collective;
      c.ranks = g.ranks;
      c.nodes = g.nodes;
      c.bytes = Bytes::Of(op.comm_bytes);
      c.terms = CollectiveCost(op.collective, c.bytes, g, reduce_op);
      it = index.emplace(key, static_cast<int32_t>(r->collectives.size())).first;
      r->collectives.push_back(std::move(c));
    }
    r->op_collective[i] = it->second;
    if (op.step == 1) ++r->collectives[static_cast<size_t>(it->second)].calls;
  }
  // Largest first; the ops' indices follow the rows.
  std::vector<int32_t> order(r->collectives.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return r->collectives[static_cast<size_t>(a)].bytes.count() > r->collectives[static_cast<size_t>(b)].bytes.count();
  });
  std::vector<int32_t> rank_of(order.size());
  std::vector<CollectiveSummary> sorted;
  for (size_t i = 0; i < order.size(); ++i) {
    rank_of[static_cast<size_t>(order[i])] = static_cast<int32_t>(i);
    sorted.push_back(std::move(r->collectives[static_cast<size_t>(order[i])]));
  }
  r->collectives = std::move(sorted);
  for (int32_t& c : r->op_collective) {
    if (c >= 0) c = rank_of[static_cast<size_t>(c)];
  }
}

}  // namespace

struct SimContext::Impl {
  explicit Impl(const profiles::ClusterSpec& c) : topo(c) {}
  profiles::Topology topo;
  ModelCache models;
  std::map<std::tuple<int, int, int>, Links> links;  // by (shard group, cp, ep) (efficiencies fixed per use)
};

SimContext::SimContext(const profiles::ClusterSpec& cluster) : impl_(std::make_unique<Impl>(cluster)) {}
SimContext::~SimContext() = default;

ModelCache& CacheOf(SimContext& ctx) { return ctx.impl().models; }

namespace {

// The plan's links, described once per (shard group, cp, ep) and kept in the context.
const Links& LinksFor(SimContext* ctx, const profiles::ClusterSpec& cluster, const MemoryReport& m,
                      const CostConstants& k) {
  auto& cache = ctx->impl().links;
  const std::tuple<int, int, int> key{m.shard_group, m.cp, m.ep};
  auto it = cache.find(key);
  if (it == cache.end()) {
    it = cache.insert_or_assign(key, DescribeLinks(ctx->impl().topo, cluster, m, k)).first;
  }
  return it->second;
}

}  // namespace

namespace {

// Step 1 of a program whose ops cost `costs`, as StepLowerBound reads it. A program that left out
// repeated micro-batches (step_walk.h skip_repeated_micro_batches) keeps one copy of the last
// leading micro-batch; it stands for `copies` identical ones, which the full program runs one
// after another (every op of micro-batch m precedes every op of m+1).
struct BoundInputs {
  const StepProgram& p;
  const std::vector<OpCost>& costs;
  int64_t copies = 1;

  bool Repeated(const ProgramOp& op) const {
    return copies > 1 && op.micro == kWalkedLeadingMicroBatches - 1;
  }
  // The least time op i can take once started: its fixed time, or its latency and its transfer
  // alone on the link. The fluid model rounds a shared transfer's finish to whole nanoseconds at
  // each rate change (event_sim.cc Reschedule), so a transfer may end a few nanoseconds early:
  // 4 ns less per transfer keeps the bound below any schedule.
  int64_t LeastNs(size_t i) const {
    const OpCost& c = costs[i];
    return c.fixed_ns + c.latency_ns + (c.transfer_ns > 0 ? std::max<int64_t>(0, c.transfer_ns - 4) : 0);
  }
  bool InStep1(int32_t d) const { return d >= 0 && p.ops[static_cast<size_t>(d)].step == 1; }
  bool Counted(const ProgramOp& op) const { return op.step == 1 && op.kind != OpKind::kStartup; }
};

// The busy time of every resource over step 1, per stream, per link and on the host (each link's
// transfers at full bandwidth, copies counted), and per micro-batch the program holds the
// all-gather and reduce-scatter streams' transfers and the compute stream's per-unit kernels
// (-1: a micro-batch the program left out).
struct ResourceSums {
  std::array<int64_t, kNumStreams> stream_ns{};
  std::array<int64_t, 6> link_ns{};
  int64_t host_ns = 0, segment_ns = 0;
  std::array<int64_t, kNumStreams> stream_transfer_ns{};
  std::vector<std::array<int64_t, 3>> micro_ns;
  int64_t gpu_optimizer_ns = 0, unit_kernels_ns = 0;
};

ResourceSums SumResources(const BoundInputs& in, const model::Plan& plan) {
  ResourceSums r;
  const auto micro_batches = static_cast<size_t>(std::max(1, in.p.grad_accum));
  r.micro_ns.assign(micro_batches, {-1, -1, -1});
  // The compute stream's per-unit kernels (StepTimeBound::unit_kernels_per_micro_batch_ns).
  // Under no_sync the post-backward kernels are left out: every micro-batch but a lone one keeps
  // (and the syncing one reads) the fp32 accumulated gradients, so a micro-batch's post-backward
  // work depends on how many there are and another plan's figure would not bound it.
  auto unit_kernel = [&plan](const ProgramOp& op) {
    return op.stream == Stream::kDefault &&
           (op.kind == OpKind::kCopyOut || (op.kind == OpKind::kPostBackward && !plan.no_sync));
  };
  for (size_t i = 0; i < in.p.ops.size(); ++i) {
    const ProgramOp& op = in.p.ops[i];
    if (!in.Counted(op)) continue;
    const OpCost& c = in.costs[i];
    int64_t times = in.Repeated(op) ? in.copies : 1;
    auto st = static_cast<size_t>(op.stream);
    r.stream_ns[st] += times * in.LeastNs(i);
    if (op.micro >= 0 && static_cast<size_t>(op.micro) < micro_batches) {
      auto& m = r.micro_ns[static_cast<size_t>(op.micro)];
      for (int64_t& v : m) v = std::max<int64_t>(0, v);
      if (c.transfer_ns > 0 && op.stream == Stream::kAllGather) m[0] += std::max<int64_t>(0, c.transfer_ns - 4);
      if (c.transfer_ns > 0 && op.stream == Stream::kReduceScatter) m[1] += std::max<int64_t>(0, c.transfer_ns - 4);
      if (unit_kernel(op)) m[2] += in.LeastNs(i);
    }
    if (op.kind == OpKind::kOptimizer && op.stream == Stream::kDefault) r.gpu_optimizer_ns += times * in.LeastNs(i);
    if (unit_kernel(op)) r.unit_kernels_ns += times * in.LeastNs(i);
    if (c.transfer_ns > 0) {
      r.stream_transfer_ns[st] += times * std::max<int64_t>(0, c.transfer_ns - 4);
      r.link_ns[static_cast<size_t>(std::clamp<int>(c.link, 0, 5))] +=
          times * std::max<int64_t>(0, c.transfer_ns - 4);
    }
    r.host_ns += times * c.host_ns;
    if (op.stream == Stream::kDefault && (op.kind == OpKind::kForward || op.kind == OpKind::kBackward)) {
      r.segment_ns += times * in.LeastNs(i);
    }
  }
  return r;
}

// The schedule of step 1 with every op at its least duration and no link shared, from the end
// of step 0 (time 0): the first op of step 1 is a host sync, so the host issues step 1 only
// once every op of step 0 has finished. Each op starts no earlier than its dependencies' end,
// its stream's previous op's end and its issue (the host issues in program order); all three
// recurrences are monotone, so each op ends no later than in any event-simulated schedule
// (which adds link sharing), and the last end bounds the step from below.
class LeastSchedule {
 public:
  explicit LeastSchedule(const BoundInputs& in) : in_(in), end_(in.p.ops.size(), 0) {}

  // The latest end of step 1's ops: the path bound.
  int64_t Run() {
    const size_t n = in_.p.ops.size();
    for (size_t i = 0; i < n; ++i) {
      const ProgramOp& op = in_.p.ops[i];
      if (!in_.Counted(op)) continue;  // step 0: ended by time 0
      if (!in_.Repeated(op)) {
        int64_t deps_end = 0;
        for (int32_t d : op.deps) {
          if (in_.InStep1(d)) deps_end = std::max(deps_end, end_[static_cast<size_t>(d)]);
        }
        end_[i] = Place(i, deps_end);
        continue;
      }
      i = RunCopies(i) - 1;
    }
    return all_done_;
  }

 private:
  // Places op i once its dependencies have ended (`deps_end`; `fixed_end`: those that lie
  // before a repeated micro-batch's copies, see RunCopies); returns its least end. `*slow_binds`
  // is set when a fixed dependency, or the host's issue unless `issue_moves`, alone delays the op.
  int64_t Place(size_t i, int64_t deps_end, int64_t fixed_end = 0, bool* slow_binds = nullptr,
                bool issue_moves = true) {
    const ProgramOp& op = in_.p.ops[i];
    auto st = static_cast<size_t>(op.stream);
    if (op.host_sync) issue_ = std::max(issue_, all_done_);
    issue_ += in_.costs[i].host_ns;
    int64_t moving = std::max(free_ns_[st], deps_end);
    int64_t slow = fixed_end;
    if (issue_moves) moving = std::max(moving, issue_);
    else slow = std::max(slow, issue_);
    if (slow > moving && slow_binds != nullptr) *slow_binds = true;
    int64_t ready = std::max(moving, slow);
    int64_t e = ready + in_.LeastNs(i);
    free_ns_[st] = e;
    all_done_ = std::max(all_done_, e);
    return e;
  }

  // For each template op of the repeated micro-batch [b0, b1) and each of its dependency slots:
  // the template op standing for it in the copy before, or -1. Only a few slots reach the
  // micro-batch before (the next micro-batch's first all-gather waits for this one's last
  // copy-out, and so on): their roles are looked up in one scan of the template, and a role held
  // more than once is left unmapped.
  std::vector<std::array<int64_t, 3>> PreviousCopyDeps(size_t b0, size_t b1) const {
    const StepProgram& p = in_.p;
    std::vector<std::array<int64_t, 3>> prev_of(b1 - b0, {-1, -1, -1});
    auto same_role = [](const ProgramOp& x, const ProgramOp& y) {
      return x.kind == y.kind && x.stream == y.stream && x.unit == y.unit && x.segment == y.segment;
    };
    struct Cross {
      size_t op, slot;
      const ProgramOp* role;
      int64_t match = -1;
      int matches = 0;
    };
    std::vector<Cross> cross;
    for (size_t j = b0; j < b1; ++j) {
      const auto& deps = p.ops[j].deps;
      for (size_t slot = 0; slot < deps.size(); ++slot) {
        int32_t d = deps[slot];
        if (in_.InStep1(d) && static_cast<size_t>(d) < b0 &&
            p.ops[static_cast<size_t>(d)].micro == kWalkedLeadingMicroBatches - 2) {
          cross.push_back({j, slot, &p.ops[static_cast<size_t>(d)]});
        }
      }
    }
    for (size_t j = b0; j < b1 && !cross.empty(); ++j) {
      for (Cross& x : cross) {
        if (same_role(p.ops[j], *x.role)) {
          x.match = static_cast<int64_t>(j);
          ++x.matches;
        }
      }
    }
    for (const Cross& x : cross) {
      if (x.matches == 1) prev_of[x.op - b0][x.slot] = x.match;
    }
    return prev_of;
  }

  // The repeated micro-batch starting at b0: the full program runs `copies` of it one after
  // another, each copy's ops after the copy before on every stream and on the host, so the
  // recurrence runs over the copies as it would over the full program. A copy's dependency on
  // the micro-batch before it (the template's on micro-batch kWalkedLeadingMicroBatches - 2) is,
  // from the second copy on, the previous copy's op with the same kind, stream, unit and
  // segment; an op the template does not hold once is left as the template names it, which
  // precedes the real one on its stream and so ends no later (a lower figure keeps the bound).
  // Returns the end of the block, b1.
  size_t RunCopies(size_t b0) {
    const StepProgram& p = in_.p;
    const size_t n = p.ops.size();
    size_t b1 = b0;
    while (b1 < n && in_.Counted(p.ops[b1]) && in_.Repeated(p.ops[b1])) ++b1;
    const std::vector<std::array<int64_t, 3>> prev_of = PreviousCopyDeps(b0, b1);
    // The recurrence is max-plus: once a copy ends exactly P later than the copy before, op for
    // op, with every stream it uses also P later, and neither a dependency on an op before the
    // copies nor the host's issue delays any of its ops, every later copy repeats it P later
    // still (each of its terms is the previous copy's plus P; the fixed ones, which did not delay
    // it, delay it even less, and so does the host, which runs ahead by its own Q <= P per copy
    // when no op of the copy waits for the device), so the last copy's ends follow without
    // running the copies between. A copy with a host sync moves the host with the device:
    // then the host too must be exactly P later.
    std::array<bool, kNumStreams> block_stream{};
    bool block_syncs = false;
    for (size_t j = b0; j < b1; ++j) {
      block_stream[static_cast<size_t>(p.ops[j].stream)] = true;
      block_syncs = block_syncs || p.ops[j].host_sync;
    }
    std::vector<int64_t> prev_end(b1 - b0, 0);  // the copy before's ends
    std::array<int64_t, kNumStreams> prev_free{};
    int64_t prev_issue = 0, prev_all_done = 0;
    for (int64_t c = 0; c < in_.copies; ++c) {
      bool slow_binds = false;
      for (size_t j = b0; j < b1; ++j) {
        int64_t deps_end = 0, fixed_end = 0;
        const auto& deps = p.ops[j].deps;
        for (size_t slot = 0; slot < deps.size(); ++slot) {
          int32_t d = deps[slot];
          if (!in_.InStep1(d)) continue;
          int64_t m = prev_of[j - b0][slot];
          if (static_cast<size_t>(d) >= b0) {
            deps_end = std::max(deps_end, end_[static_cast<size_t>(d)]);  // this copy's
          } else if (c > 0 && m >= 0) {
            deps_end = std::max(deps_end, prev_end[static_cast<size_t>(m) - b0]);
          } else {
            fixed_end = std::max(fixed_end, end_[static_cast<size_t>(d)]);
          }
        }
        end_[j] = Place(j, deps_end, fixed_end, &slow_binds, block_syncs);
      }
      if (c > 0 && !slow_binds && c + 1 < in_.copies) {
        const int64_t period = all_done_ - prev_all_done, host_period = issue_ - prev_issue;
        bool periodic = block_syncs ? host_period == period : host_period <= period;
        for (size_t st = 0; st < block_stream.size() && periodic; ++st) {
          periodic = !block_stream[st] || free_ns_[st] - prev_free[st] == period;
        }
        for (size_t j = b0; j < b1 && periodic; ++j) periodic = end_[j] - prev_end[j - b0] == period;
        if (periodic) {
          const int64_t later = in_.copies - 1 - c;  // copies left
          for (size_t j = b0; j < b1; ++j) end_[j] += later * period;
          for (size_t st = 0; st < block_stream.size(); ++st) {
            if (block_stream[st]) free_ns_[st] += later * period;
          }
          issue_ += later * host_period;
          all_done_ += later * period;
          break;
        }
      }
      std::copy(end_.begin() + static_cast<std::ptrdiff_t>(b0), end_.begin() + static_cast<std::ptrdiff_t>(b1),
                prev_end.begin());
      prev_free = free_ns_;
      prev_issue = issue_;
      prev_all_done = all_done_;
    }
    return b1;
  }

  const BoundInputs& in_;
  std::vector<int64_t> end_;
  std::array<int64_t, kNumStreams> free_ns_{};
  int64_t issue_ = 0, all_done_ = 0;  // all_done_: the latest end so far, the path bound
};

// The bound: the busiest resource or the schedule's end, whichever is later, with the figures
// the search's per-plan arithmetic reuses.
StepTimeBound BoundOf(const ResourceSums& r, int64_t schedule_ns) {
  StepTimeBound b;
  auto consider = [&](int64_t ns, const char* what) {
    double sec = static_cast<double>(ns) * 1e-9;
    if (sec > b.seconds) {
      b.seconds = sec;
      b.resource = what;
    }
  };
  // The compute stream first: on ties it is the one named.
  consider(r.stream_ns[static_cast<size_t>(Stream::kDefault)], "compute stream");
  consider(r.host_ns, "host issue (kernel launches and hooks)");
  consider(r.stream_ns[static_cast<size_t>(Stream::kHost)], "host optimizer step");
  consider(r.stream_ns[static_cast<size_t>(Stream::kAllGather)], "all-gather stream");
  consider(r.stream_ns[static_cast<size_t>(Stream::kReduceScatter)], "reduce-scatter stream");
  consider(r.stream_ns[static_cast<size_t>(Stream::kCopy)], "host<->GPU copy stream");
  consider(r.stream_ns[static_cast<size_t>(Stream::kAllToAll)], "all-to-all stream (Ulysses, expert parallel)");
  consider(r.link_ns[0], "shard-group link");
  consider(r.link_ns[1], "replica-group link");
  consider(r.link_ns[2], "PCIe link");
  consider(r.link_ns[3], "cp-group link");
  consider(r.link_ns[5], "ep-group link");
  consider(schedule_ns, "schedule without link contention");
  b.compute_s = static_cast<double>(r.stream_ns[static_cast<size_t>(Stream::kDefault)]) * 1e-9;
  b.segment_compute_s = static_cast<double>(r.segment_ns) * 1e-9;
  b.all_gather_transfer_s =
      static_cast<double>(r.stream_transfer_ns[static_cast<size_t>(Stream::kAllGather)]) * 1e-9;
  b.reduce_scatter_transfer_s =
      static_cast<double>(r.stream_transfer_ns[static_cast<size_t>(Stream::kReduceScatter)]) * 1e-9;
  b.host_optimizer_s = static_cast<double>(r.stream_ns[static_cast<size_t>(Stream::kHost)]) * 1e-9;
  // The least per micro-batch: the optimizer step's ops are labelled micro-batch 0 but move
  // nothing on these two streams and are no copy-outs, so each figure is one micro-batch's.
  std::array<int64_t, 3> least{-1, -1, -1};
  for (const auto& m : r.micro_ns) {
    for (size_t s = 0; s < least.size(); ++s) {
      if (m[s] >= 0 && (least[s] < 0 || m[s] < least[s])) least[s] = m[s];
    }
  }
  b.all_gather_per_micro_batch_ns = std::max<int64_t>(0, least[0]);
  b.reduce_scatter_per_micro_batch_ns = std::max<int64_t>(0, least[1]);
  b.unit_kernels_per_micro_batch_ns = std::max<int64_t>(0, least[2]);
  b.unit_kernels_s = static_cast<double>(r.unit_kernels_ns) * 1e-9;
  b.gpu_optimizer_s = static_cast<double>(r.gpu_optimizer_ns) * 1e-9;
  return b;
}

}  // namespace

StepTimeBound StepLowerBound(const MemoryEstimate& est, const model::ModelSpec& spec,
                             const profiles::ClusterSpec& cluster, const model::Plan& plan,
                             const SimOptions& o, SimContext* ctx) {
  CostConstants storage;
  const CostConstants& k = PlanConstants(o.costs, spec, plan, cluster.gpu, &storage);
  const std::vector<OpCost> costs = CostOps(est.program, cluster, plan,
                                            LinksFor(ctx, cluster, est.report, o.costs), k,
                                            /*from_step=*/1);
  const BoundInputs in{est.program, costs, 1 + est.program.repeats_of_last_leading_micro_batch};
  const ResourceSums sums = SumResources(in, plan);
  return BoundOf(sums, LeastSchedule(in).Run());
}

SimReport SimulateStep(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                       const model::Plan& plan, const SimOptions& o, SimContext* ctx) {
  std::unique_ptr<SimContext> own;
  if (!ctx) {
    own = std::make_unique<SimContext>(cluster);
    ctx = own.get();
  }
  MemoryEstimate est =
      EstimateMemoryWithProgram(spec, cluster, plan, o.memory, o.with_timeline, &ctx->impl().models);
  return SimulateProgram(std::move(est), spec, cluster, plan, o, ctx);
}

SimReport SimulateProgram(MemoryEstimate&& est, const model::ModelSpec& spec,
                          const profiles::ClusterSpec& cluster, const model::Plan& plan,
                          const SimOptions& o, SimContext* ctx) {
  SimReport r;
  r.memory = std::move(est.report);
  r.program = std::move(est.program);
  // Measured kernel tables (a probed profile) time this plan's GEMMs, attention and
  // elementwise kernels by shape (kernel_time.h); without them, o.costs as given.
  CostConstants storage;
  const CostConstants& k = PlanConstants(o.costs, spec, plan, cluster.gpu, &storage);
  const Links& links = LinksFor(ctx, cluster, r.memory, o.costs);
  const auto& ops = r.program.ops;
  size_t first_op = 0;  // SimOptions::steady_step_only: step 1's first op
  if (o.steady_step_only) {
    while (first_op < ops.size() && ops[first_op].step < 1) ++first_op;
    SHARDTUNE_CHECK(first_op == ops.size() || ops[first_op].host_sync)
        << "the steady step does not begin with a host sync: it cannot be scheduled alone";
  }
  std::vector<OpCost> costs =
      CostOps(r.program, cluster, plan, links, k, o.steady_step_only ? 1 : 0);
  r.schedule = RunEventSimulation(r.program, costs, first_op);
  int64_t t0 = 0, t1 = 0, compute = 0;
  std::array<int64_t, kNumPhases> phase_ns{};
  std::array<bool, kNumPhases> phase_seen{};
  for (size_t i = 0; i < ops.size(); ++i) {
    int64_t dur = r.schedule.end_ns[i] - r.schedule.start_ns[i];
    if (ops[i].step == 0) t0 = std::max(t0, r.schedule.end_ns[i]);
    if (ops[i].step != 1 || ops[i].kind == OpKind::kStartup) continue;
    t1 = std::max(t1, r.schedule.end_ns[i]);
    if (ops[i].stream == Stream::kDefault) compute += dur;
    size_t ph = PhaseOf(ops[i]);
    phase_ns[ph] += dur;
    phase_seen[ph] = true;
    if (ops[i].kind == OpKind::kAllToAll) {
      r.all_to_all_per_step += Bytes::Of(ops[i].comm_bytes);
      r.all_to_all_calls_per_step += ops[i].calls;
      r.all_to_all += Seconds::Of(static_cast<double>(dur) * 1e-9);
    }
  }
  r.cp = plan.cp;
  r.cp_group = links.cp;
  r.ep_group = links.ep;
  if (o.with_timeline) SummarizeCollectives(links, Fsdp2ReduceOp(plan.reduce_dtype), &r);
  {
    // ComputeTime's terms per compute-stream op of the steady step, scaled to the op's scheduled
    // duration (the same terms CostOps charged it).
    const double peak = DensePeak(cluster.gpu, plan.param_dtype).count();
    double gemm = 0, attention = 0, memory = 0, overhead = 0, host = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const ProgramOp& op = ops[i];
      if (op.step != 1 || op.kind == OpKind::kStartup) continue;
      host += static_cast<double>(costs[i].host_ns) * 1e-9;
      if (op.stream != Stream::kDefault) continue;
      double mm = op.matmul_flops > 0 ? op.matmul_flops / (peak * k.matmul_efficiency) : 0;
      mm += Fp32GemmSeconds(op.fp32_matmul_flops, cluster.gpu, plan.param_dtype);  // GEMM time as well
      double at = op.attention_flops > 0 ? op.attention_flops / (peak * k.attention_efficiency) : 0;
      double mb = op.memory_bytes > 0
                      ? op.memory_bytes / (cluster.gpu.memory_bandwidth.count() * k.memory_efficiency)
                      : 0;
      double oh = mm + at + mb > 0 ? k.compute_op_overhead.count() : 0;
      double sum = mm + at + mb + oh;
      if (!(sum > 0)) continue;
      double dur = static_cast<double>(r.schedule.end_ns[i] - r.schedule.start_ns[i]) * 1e-9;
      gemm += dur * mm / sum;
      attention += dur * at / sum;
      memory += dur * mb / sum;
      overhead += dur * oh / sum;
    }
    r.time_by_category = {{"gemm", Seconds::Of(gemm)},
                          {"attention", Seconds::Of(attention)},
                          {"memory_bound", Seconds::Of(memory)},
                          {"op_overhead", Seconds::Of(overhead)},
                          {"host_issue", Seconds::Of(host)}};
  }
  int64_t step_ns = std::max<int64_t>(1, t1 - t0);
  r.step_time = Seconds::Of(static_cast<double>(step_ns) * 1e-9);
  r.compute = Seconds::Of(static_cast<double>(compute) * 1e-9);
  r.exposed_comm = Seconds::Of(std::max(0.0, r.step_time.count() - r.compute.count()));
  r.time_by_category.insert(r.time_by_category.end() - 1, {"exposed_communication", r.exposed_comm});
  // By name, as before (a map of the phases the step has).
  std::map<std::string, int64_t> phases;
  for (size_t ph = 0; ph < kNumPhases; ++ph) {
    if (phase_seen[ph]) phases[kPhaseNames[ph]] = phase_ns[ph];
  }
  for (const auto& [name, v] : phases) r.phases.push_back({name, Seconds::Of(static_cast<double>(v) * 1e-9)});
  int64_t seq = plan.ResolvedSeqLen(spec.max_seq_len);
  r.tokens_per_step = static_cast<double>(plan.GlobalBatch(cluster.world_size())) * static_cast<double>(seq);
  r.tokens_per_s = r.tokens_per_step / r.step_time.count();
  r.tokens_per_s_per_gpu = r.tokens_per_s / cluster.world_size();
  // Attention spans one sequence of a packed row (Plan::AttentionSeqLen).
  r.model_flops_per_token = ModelFlopsPerToken(spec, plan, plan.AttentionSeqLen(seq));
  // Frozen parameters, LoRA and inference roles do less work per token than 6N (a forward only,
  // no weight gradients of frozen weights, no backward below the first trainable parameter).
  if (model::ChangesTrainability(spec, plan)) {
    r.model_flops_per_token =
        model::ModelFlopsPerToken(spec, ctx->impl().models.UnitsFor(spec, plan), plan,
                                  plan.AttentionSeqLen(seq));
  }
  r.mfu = r.model_flops_per_token * r.tokens_per_s_per_gpu / cluster.gpu.bf16_dense.count();
  r.allocated_after = std::move(est.allocated_after);
  size_t pk = est.peak_op;
  int64_t step_start = ops[pk].step == 1 ? t0 : 0;
  r.peak_time = Seconds::Of(pk < first_op ? 0 : static_cast<double>(r.schedule.start_ns[pk] - step_start) * 1e-9);
  return r;
}

void RetainFreedHeap() {
#if defined(__GLIBC__)
  mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);
#endif
}

}  // namespace shardtune::sim
