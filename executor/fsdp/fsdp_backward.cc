// FSDP runtime, backward side: re-gather before a segment's backward, reduce a unit's flat
// gradient once its parameters' gradients are all accumulated, finish reductions in order.
// The hooks run on the autograd engine's thread (the caller's thread for CPU tensors).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <torch/csrc/autograd/autograd.h>

#include "executor/cuda_support.h"
#include "executor/fsdp/fsdp_runtime_impl.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace {
// *acc += g, or *acc = g while *acc is undefined (a gradient accumulated over micro-batches).
void Accumulate(at::Tensor* acc, const at::Tensor& g) {
  if (acc->defined()) {
    acc->add_(g);
  } else {
    *acc = g;
  }
}
}  // namespace

void FsdpRuntime::Impl::CloseBackwardSegment() {
  if (backward_segment < 0) return;
  double now = MonotonicSeconds();
  recorder->Add({segments[static_cast<size_t>(backward_segment)].name, "backward", Lane::kCompute,
                 backward_mark_s, now - backward_mark_s});
  backward_segment = -1;
}

void FsdpRuntime::Impl::FinishFrozen(int u) {
  UnitState& unit = units[static_cast<size_t>(u)];
  SHARDTUNE_CHECK(!unit.flat->trainable() && !unit.backward_done) << unit.flat->name();
  if (unit.gather) {  // prefetched, then not needed
    unit.gather->Wait();
    unit.gather.reset();
    --inflight_gathers;
  }
  unit.flat->Free();
  unit.backward_done = true;
}

void FsdpRuntime::Impl::PreBackward(int segment) {
  CloseBackwardSegment();
  // A frozen unit has no AccumulateGrad to say its backward is over: it is once the backward
  // reaches a segment before its first one.
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u].flat->trainable() && !units[u].backward_done && (*unit_specs)[u].first_segment > segment) {
      FinishFrozen(static_cast<int>(u));
    }
  }
  // A unit whose gradients are all done (e.g. the root once its own segments are through) is
  // not needed by the rest of backward, even though its segment range covers it.
  for (int u : segments[static_cast<size_t>(segment)].covering) {
    if (!units[static_cast<size_t>(u)].backward_done) EnsureGathered(u);
  }
  if (options.plan.backward_prefetch == model::BackwardPrefetch::kPre) {
    Prefetch(BackwardCandidates(segment), kBackwardPrefetchAhead);
  }
  backward_segment = segment;
  backward_mark_s = MonotonicSeconds();
}

void FsdpRuntime::Impl::PostBackward(int u) {
  UnitState& state = units[static_cast<size_t>(u)];
  double t0 = MonotonicSeconds();
  FlatParam& unit = *state.flat;
  at::NoGradGuard no_grad;
  // Reshard first, then gather the gradients into the flat reduce input: FSDP2's post_backward
  // (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py) runs reshard() before
  // foreach_reduce, so the unsharded parameters are gone when the reduce-scatter input is made.
  unit.Free();
  // FSDPParamGroup.post_backward waits for the previous unit's reduce-scatter (the compute stream
  // waits for comm_ctx.reduce_scatter_state's event, then drops the state holding its input)
  // before foreach_reduce allocates this unit's input: one reduce-scatter input at a time, the
  // new one in flight while the next unit computes.
  if (sync) DrainReductions(0);
  at::Tensor flat = unit.TakeFlatGrad();  // [padded] reduce dtype
  ++units_done;
  state.backward_done = true;
  if (!sync) {  // no_sync: keep the unsharded gradient, reduce on the last micro-batch
    Accumulate(&state.nosync_grad, flat);
    recorder->Add({unit.name(), "post_backward", Lane::kReduce, t0, MonotonicSeconds() - t0});
    return;
  }
  if (state.nosync_grad.defined()) {
    flat.add_(state.nosync_grad);
    state.nosync_grad = at::Tensor();
  }
  Reduction r;
  r.unit = u;
  r.input = flat;
  Communicator& shard = *state.shard_comm;
  if (shard.size() > 1) {
    r.output = at::empty({unit.shard_numel()}, flat.options());
    r.work = shard.ReduceScatter(r.input, r.output);
  } else {
    r.output = flat;
    if (groups.replicate->size() > 1) {
      r.work = groups.replicate->AllReduce(r.output);
      r.replicated = true;
    }
  }
  reductions.push_back(std::move(r));
  recorder->Add({unit.name(), "post_backward", Lane::kReduce, t0, MonotonicSeconds() - t0});
  if (options.plan.backward_prefetch == model::BackwardPrefetch::kPost && backward_segment >= 0) {
    Prefetch(BackwardCandidates(backward_segment), kBackwardPrefetchAhead);
  }
}

void FsdpRuntime::Impl::FinishReduction(Reduction& r) {
  FlatParam& unit = *units[static_cast<size_t>(r.unit)].flat;
  double t0 = MonotonicSeconds();
  if (r.work) r.work->Wait();
  r.work.reset();
  r.input = at::Tensor();  // the flat gradient is no longer read
  // HSDP: the replicas' all-reduce of the reduce-scattered shard follows the reduce-scatter.
  if (groups.replicate->size() > 1 && !r.replicated) groups.replicate->AllReduce(r.output)->Wait();
  // Sum over dp_world ranks, then divide: FSDP's ReduceOp.AVG for fp32 / bf16 gradients. An
  // expert-parallel unit's gradient already holds its ep group's tokens (the all-to-alls'
  // backward brought them); its efsdp reduce-scatter and the replicas' sum add the other ranks',
  // so it is divided by dp_world too (torchtitan sets the experts' gradient_divide_factor to the
  // data-parallel degree for this). With
  // cp the sum also runs over the cp ranks, whose losses are shares of one micro-batch's mean
  // (FsdpRuntime::Forward): their sum is that micro-batch's gradient, so the divisor stays
  // dp_world (verl and torchtitan average over dp x cp and scale the loss by cp instead).
  at::Tensor g = r.output.to(at::kFloat).div_(static_cast<double>(options.dp_world));
  if (unit.offloaded()) {
    // FSDP2 with CPUOffloadPolicy: the reduced shard goes to the host without blocking
    // (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce:
    // `new_sharded_grad.to(torch.device("cpu"), non_blocking=True)`; a CUDA -> CPU copy with
    // non_blocking lands in pinned memory: ATen/native/TensorConversions.cpp `pin_out`).
    host_grads.push_back({r.unit, g.to(unit.shard_device(), /*non_blocking=*/true)});
  } else {
    Accumulate(&unit.grad_shard(), g);
  }
  double t1 = MonotonicSeconds();
  recorder->Add({unit.name(), "reduce_wait", Lane::kReduce, t0, t1 - t0});
}

void FsdpRuntime::Impl::DrainReductions(size_t keep) {
  while (reductions.size() > keep) {
    FinishReduction(reductions.front());
    reductions.pop_front();
  }
}

void FsdpRuntime::Backward(const at::Tensor& loss, double scale, bool sync) {
  Impl& m = *impl_;
  m.sync = sync;
  m.units_done = 0;
  for (Impl::UnitState& u : m.units) u.backward_done = false;
  m.backward_segment = -1;
  torch::autograd::backward({loss}, {at::full({}, scale, loss.options())});
  transformer_.ClearSharedConstants();  // made again by the blocks recomputed in backward
  m.CloseBackwardSegment();
  at::NoGradGuard no_grad;
  m.DrainReductions(0);
  if (!m.host_grads.empty()) {
    // The host copies must land before the host reads them (clipping and the optimizer run on
    // the host): FSDP2 synchronizes on its post-reduce event for the same reason.
    SynchronizeCuda(m.options.device.index());
    for (Impl::HostGrad& h : m.host_grads) {
      Accumulate(&m.units[static_cast<size_t>(h.unit)].flat->grad_shard(), h.grad);
    }
    m.host_grads.clear();
  }
  int trainable = 0;
  for (size_t u = 0; u < m.units.size(); ++u) {
    if (m.units[u].flat->trainable()) {
      ++trainable;
    } else if (!m.units[u].backward_done) {
      m.FinishFrozen(static_cast<int>(u));
    }
  }
  SHARDTUNE_CHECK(m.units_done == trainable)
      << "only " << m.units_done << " of " << trainable << " trainable FSDP units finished backward";
  SHARDTUNE_CHECK(m.inflight_gathers == 0) << m.inflight_gathers << " all-gathers left unused";
}

}  // namespace shardtune::exec
