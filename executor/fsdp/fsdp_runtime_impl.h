// The FSDP runtime's state, shared by fsdp_runtime.cc (construction, forward, clipping) and
// fsdp_backward.cc (backward hooks, reductions). Internal to the executor.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "executor/fsdp/fsdp_runtime.h"
#include "executor/nn/activation_offload.h"
#include "executor/nn/recompute.h"

namespace shardtune::exec {

struct FsdpRuntime::Impl {
  RuntimeOptions options;
  ProcessGroups groups;
  Recorder* recorder = nullptr;
  const Transformer* transformer = nullptr;
  const std::vector<model::FsdpUnit>* unit_specs = nullptr;

  // One FSDP unit's runtime state (FSDP2's FSDPParamGroup, for one flat parameter).
  struct UnitState {
    std::unique_ptr<FlatParam> flat;
    bool reshard_after_forward = false;
    // The group its shards live in: groups.shard, or groups.expert_shard for an expert-parallel
    // unit.
    Communicator* shard_comm = nullptr;
    std::unique_ptr<Work> gather;  // issued, not yet waited
    bool backward_done = false;    // its post-backward ran in this backward (never re-gather it)
    at::Tensor nosync_grad;        // [padded] reduce dtype, accumulated under no_sync
  };
  std::vector<UnitState> units;  // forward order
  int inflight_gathers = 0;
  ParamTable table;  // every parameter, by name
  // One forward segment (the embeddings, a block, the head): which units it starts, ends and
  // covers, and how it runs.
  struct SegmentState {
    std::vector<int> starting, ending, covering;  // unit indices
    std::string name;
    bool recompute = false;  // activation checkpointing
    bool op_sac = false;     // ... as op-level SAC (SacRecompute)
    model::SacSave sac_save = 0;  // op_sac: what the block keeps (model::ResolveSacSave)
    SegmentFn fn;            // for Recompute
    // Its output required grad in the last forward, so its backward runs (false for frozen
    // segments before the first trainable parameter).
    bool grad = true;
    bool trains = false;  // a trainable parameter computes in it
  };
  std::vector<SegmentState> segments;

  // Backward state.
  bool sync = true;
  int backward_segment = -1;  // the segment whose backward runs now
  double backward_mark_s = 0;
  int units_done = 0;  // units whose post-backward ran in this backward
  struct Reduction {
    int unit = 0;
    at::Tensor input, output;  // [padded] and [shard] in reduce dtype
    std::unique_ptr<Work> work;
    // NO_SHARD (shard group of 1): `work` is already the all-reduce over the replicas, issued
    // in PostBackward like DDP's bucket all-reduce, so it overlaps the next unit's backward.
    bool replicated = false;
  };
  std::deque<Reduction> reductions;
  // CPU offload: gradient shards on their way to the host (non-blocking device-to-host copies
  // into pinned memory), added to the units' grad_shard() once Backward has waited for them.
  struct HostGrad {
    int unit = 0;
    at::Tensor grad;  // [shard] fp32 on the host, being written
  };
  std::vector<HostGrad> host_grads;
  // verl's activation offload (Plan::activation_offload verl_async) over the text blocks; null
  // without it or below three blocks (verl turns it off there).
  std::unique_ptr<ActivationOffload> activation_offload;
  int activation_offload_layers = 0;  // the text blocks its handler covers (the first ones)

  // fsdp_runtime.cc
  void Issue(int unit);
  void EnsureGathered(int unit);
  // Issues all-gathers for `candidates` in order while fewer than `max_ahead` are in flight (the
  // unit being computed is already waited for and is not counted).
  void Prefetch(const std::vector<int>& candidates, int max_ahead);
  // How many units a prefetch keeps in flight ahead of the one being computed:
  //  - forward (explicit forward_prefetch, set_modules_to_forward_prefetch):
  //    max_inflight_allgathers - 1, at least 1 (the estimate's Walker::Forward);
  //  - backward: one. FSDP2's FSDPParamGroup._backward_prefetch prefetches the single group
  //    before the current one in reverse post-forward order
  //    (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py), so a unit's pre-backward
  //    (or post-backward, BACKWARD_POST) holds the current unit and one gathering.
  int ForwardPrefetchAhead() const;
  static constexpr int kBackwardPrefetchAhead = 1;
  std::vector<int> BackwardCandidates(int segment) const;
  // fsdp_backward.cc
  void PreBackward(int segment);
  void PostBackward(int unit);
  void FinishReduction(Reduction& r);
  void DrainReductions(size_t keep);
  void CloseBackwardSegment();
  // Frees a frozen unit whose backward is over (or never ran) and marks it done.
  void FinishFrozen(int unit);
};

}  // namespace shardtune::exec
