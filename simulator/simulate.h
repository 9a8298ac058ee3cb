// One training step predicted in time: the StepProgram of the memory model scheduled by the
// event simulator with the cost models. Step time, throughput, MFU, exposed communication, a
// per-phase breakdown, and when the memory peak happens.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/cost_model.h"
#include "simulator/event_sim.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {

struct SimOptions {
  MemoryOptions memory;
  CostConstants costs;
  bool with_timeline = true;  // build the memory timeline and op names (reports, traces)
  // Schedule the steady step (step 1) alone. The same figures: step 1 begins with the host
  // waiting for every op of step 0 (the loop's per-step sync, ProgramOp::host_sync), so it starts
  // from an idle machine whatever step 0 did; only the schedule of step 0's ops (left at 0) and
  // the peak's time when the memory peak is in step 0 (SimReport::peak_time, then 0) are not
  // computed. The planner's search sets it (half the events per simulation).
  bool steady_step_only = false;
};

// One kind of collective of the steady step: the group it runs on, its size per call and what
// prices it (NCCL's model: algorithm, protocol, channels; else the topology graph's ring).
struct CollectiveSummary {
  std::string group;  // "shard", "replicate", "expert_shard"
  profiles::Collective kind = profiles::Collective::kAllGather;
  int ranks = 1;
  int nodes = 1;
  Bytes bytes;          // S per call (nccl-tests convention: the gathered / input size)
  int64_t calls = 0;    // calls in the steady step (copies of left-out micro-batches not counted)
  CollectiveTerms terms;  // latency, bus bandwidth (with the concurrent share), NCCL's choice
};

struct SimReport {
  MemoryReport memory;
  Seconds step_time;                 // the steady step (step 1)
  double tokens_per_step = 0;        // whole job
  double tokens_per_s = 0;           // whole job
  double tokens_per_s_per_gpu = 0;
  double model_flops_per_token = 0;  // 6N + 12·L·q_dim·S (PaLM appendix B convention)
  double mfu = 0;                    // model FLOP/s per GPU over the dense bf16 peak
  Seconds compute;                   // compute stream busy in the step
  Seconds exposed_comm;              // step time the compute stream spends waiting
  std::vector<std::pair<std::string, Seconds>> phases;  // per-phase busy time in the step
  // Where the steady step's time goes: the compute stream's busy time split by ComputeTime's
  // terms ("gemm", "attention", "memory_bound", "op_overhead"; memory-bound includes FSDP's
  // copy-in/copy-out and the optimizer), "exposed_communication" (step minus compute) and
  // "host_issue" (the CPU's time to issue the step's kernels and FSDP hooks, which runs beside
  // the GPU and shows only where the GPU waits for it).
  std::vector<std::pair<std::string, Seconds>> time_by_category;
  Seconds peak_time;                 // when the memory peak's op starts, from its step's start
  // Ulysses context parallelism (plan.cp > 1): the all-to-alls of the steady step on one rank.
  int cp = 1;
  Bytes all_to_all_per_step;              // sum of total sizes S (nccl-tests convention)
  int64_t all_to_all_calls_per_step = 0;  // dist.all_to_all calls (4 per layer per pass)
  Seconds all_to_all;                     // all-to-all stream busy time; on the critical path
  GroupLink cp_group;                     // the cp group on the topology (ranks 1 when cp 1)
  GroupLink ep_group;                     // the expert-parallel group (ranks 1 when ep 1)
  // The steady step's all-gathers, reduce-scatters and all-reduces by (group, kind, size), largest
  // first, and for each op the row it belongs to (-1: not one of them). Filled when
  // SimOptions::with_timeline (reports and traces), empty otherwise.
  std::vector<CollectiveSummary> collectives;
  std::vector<int32_t> op_collective;
  StepProgram program;
  Schedule schedule;
  std::vector<int64_t> allocated_after;  // bytes after each op (memory counter track)
};

// What simulations of one cluster can share: its topology graph and the group descriptions
// already computed (keyed by shard group size). Not thread-safe; one per thread.
class SimContext {
 public:
  explicit SimContext(const profiles::ClusterSpec& cluster);
  ~SimContext();
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Schedules a memory estimate's program (the rest of SimulateStep); `est` is consumed.
SimReport SimulateProgram(MemoryEstimate&& est, const model::ModelSpec& spec,
                          const profiles::ClusterSpec& cluster, const model::Plan& plan,
                          const SimOptions& options, SimContext* ctx);
// A lower bound on the steady step time, from the schedule the event simulation (event_sim.h)
// can never beat: the host issues step 1's ops one after another only once step 0 has finished
// (the loop's loss.item() sync, step_walk_forward.cc), each stream runs its ops in order, and an
// op takes at least its fixed time, or its latency plus its transfer alone on the link. Over
// that schedule without link sharing (every op at its least duration) and every serial
// resource's busy time (each link's transfers at full bandwidth), the largest is the bound;
// `resource` names it ("schedule without link contention", "compute stream", "host issue
// (kernel launches and hooks)", "host optimizer step", "PCIe link", ...). `compute_s`: the
// compute stream's busy time; `segment_compute_s` that of its forward and backward segment
// kernels alone (the part a plan's strategy, wrap, offload and prefetch leave unchanged);
// `all_gather_transfer_s` and `reduce_scatter_transfer_s` the transfers alone of the all-gather
// and reduce-scatter streams (bytes at the link's full bandwidth, no latency or copy kernels);
// `host_optimizer_s` the host optimizer step's time (CPU offload). `*_per_micro_batch_ns`: the
// least of those transfers over the step's micro-batches (a micro-batch's collectives move
// parameter and gradient bytes, never activations, so they do not depend on the micro-batch
// size: the planner bounds a plan's transfers by its micro-batch count times this figure of
// another plan with the same units, groups and cp). A program that left out repeated
// micro-batches gives a bound no higher than the full program's
// (tests/simulator/micro_batch_skip_test.cc).
struct StepTimeBound {
  double seconds = 0;
  const char* resource = "compute stream";
  double compute_s = 0;
  double segment_compute_s = 0;
  double all_gather_transfer_s = 0, reduce_scatter_transfer_s = 0, host_optimizer_s = 0;
  // In integer ns, as the sums above are made, so that n copies of an equal figure are exactly
  // their sum.
  int64_t all_gather_per_micro_batch_ns = 0, reduce_scatter_per_micro_batch_ns = 0;
  // The compute stream's work besides the forward and backward segments, each of which waits
  // its turn there: the per-unit kernels of one micro-batch (the least over step 1's
  // micro-batches, as above): the all-gather copy-outs and the post-backward kernels (the
  // reduce-scatter copy-in of the unsharded gradients, no_sync's accumulation), all sized by
  // parameters and gradients, not activations; and the optimizer step's kernels (the tuner's
  // prewalk bounds, #18).
  int64_t unit_kernels_per_micro_batch_ns = 0;
  double unit_kernels_s = 0, gpu_optimizer_s = 0;
};
StepTimeBound StepLowerBound(const MemoryEstimate& est, const model::ModelSpec& spec,
                             const profiles::ClusterSpec& cluster, const model::Plan& plan,
                             const SimOptions& options, SimContext* ctx);
ModelCache& CacheOf(SimContext& ctx);

// REQUIRES: inputs validated (Plan::Problems empty). `ctx`, when given, must have been built for
// `cluster`; it saves rebuilding the topology on every call.
SimReport SimulateStep(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                       const model::Plan& plan, const SimOptions& options = {},
                       SimContext* ctx = nullptr);

// Keeps the memory a walk frees in the process heap instead of handing it back to the kernel:
// every plan allocates and frees the same large buffers (a step program's ops and memory
// actions, the per-op costs), and glibc's default trimming of the heap top (M_TRIM_THRESHOLD,
// 128 KiB) can make each plan fault those pages in again, depending only on where the freed
// blocks happen to lie (simulate_bench, 2026-11-27: 303,416 page faults in 3 s and 2,428
// simulations/s, against 342 and 3,433 with this). Call once at the start of a process that walks
// many plans (the CLI, the benches); it caps what stays cached at 256 MiB. No effect off glibc.
void RetainFreedHeap();

}  // namespace shardtune::sim
