// FSDP runtime: units, forward with all-gathers and reshards, gradient clipping.
#include "executor/fsdp/fsdp_runtime.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)

#include <algorithm>
#include <cmath>
#include <vector>

#include "executor/fsdp/fsdp_runtime_impl.h"
#include "executor/kernels/host_adamw.h"
#include "executor/fsdp/optimizer.h"
#include "executor/fsdp/param_groups.h"
#include "model/activations.h"
#include "model/errors.h"
#include "model/trainable.h"

namespace shardtune::exec {

at::ScalarType ToScalarType(model::DType d) {
  switch (d) {
    case model::DType::kFp32:
      return at::kFloat;
    case model::DType::kBf16:
      return at::kBFloat16;
    case model::DType::kFp16:
      return at::kHalf;
  }
  return at::kFloat;
}

namespace {

TransformerOptions ModelOptions(const model::ModelSpec& spec, const model::Plan& plan,
                                at::Device device) {
  TransformerOptions t;
  t.device = device;
  model::ModelSpec filled = spec;
  filled.FillDefaults();  // rope_theta and norm_eps 0 mean the defaults
  t.rope_theta = filled.rope_theta;
  t.norm_eps = filled.norm_eps;
  t.rope_scaling = filled.rope_scaling;
  t.rope_local_theta = filled.rope_local_theta;
  t.dtype = ToScalarType(plan.param_dtype);
  t.sdpa = plan.attention == model::Attention::kSdpa;
  t.selective = model::AnySelectiveBlock(plan);
  if (t.selective && plan.checkpointing != model::Checkpointing::kSelective) {
    // first:K+selective (the text layers after the first k) or blocks: (its selective runs):
    // model::BlockSelective.
    const int nv = spec.VisionBlocks();
    for (int l = 0; l < spec.num_layers; ++l) t.selective_layers.push_back(model::BlockSelective(plan, nv + l, nv));
  }
  t.fused_loss = plan.loss_kernel == model::LossKernel::kFusedLinear;
  t.torchtitan = plan.modeling == model::Modeling::kTorchtitan;
  if (plan.lora.enabled()) t.lora_scale = plan.lora.alpha / plan.lora.rank;  // PEFT: alpha / r
  return t;
}

// BuildFsdpUnits keeps the root even when wrapping left it no parameters; such a unit has
// nothing to gather or reduce. Frozen parameters and LoRA adapters split a unit into up to three
// flat parameters (param_groups.h).
std::vector<FlatParamGroup> NonEmptyGroups(const model::ModelSpec& spec, const model::Plan& plan) {
  std::vector<model::FsdpUnit> units;
  for (model::FsdpUnit& u : model::BuildFsdpUnits(spec, plan.wrap, std::max(1, plan.ep))) {
    if (!u.params.empty()) units.push_back(std::move(u));
  }
  return SplitUnits(spec, units, plan);
}

std::vector<model::FsdpUnit> Specs(const std::vector<FlatParamGroup>& groups) {
  std::vector<model::FsdpUnit> out;
  for (const FlatParamGroup& g : groups) out.push_back(g.unit);
  return out;
}

// Text block `b`'s own spec: an MoE model's dense prefix blocks have a dense MLP.
model::ModelSpec BlockSpec(const model::ModelSpec& spec, int b) {
  return spec.MoeLayer(b) || !spec.moe.enabled() ? spec : spec.DenseLayerSpec();
}

// Per block: whether selective checkpointing is torchtitan's op SAC there (the whole block
// checkpointed, its policy's op outputs kept: SacRecompute), as the estimate decides it
// (model::TorchtitanOpSacApplies, with the block's trainability as model/trainable.h derives it).
std::vector<bool> OpSacBlocks(const model::ModelSpec& spec, const model::Plan& plan) {
  std::vector<bool> out(static_cast<size_t>(spec.num_layers), false);
  if (!model::AnySelectiveBlock(plan) || plan.modeling != model::Modeling::kTorchtitan || !plan.Trains()) {
    return out;
  }
  std::vector<model::FsdpUnit> units = model::ApplyTrainability(
      spec, plan, model::BuildFsdpUnits(spec, plan.wrap, std::max(1, plan.ep)));
  model::SubgraphTrainability t = model::SubgraphTrainabilities(spec, plan, units);
  model::ActivationOptions o = model::ActivationOptionsFor(plan, plan.seq_len);
  const int nv = spec.VisionBlocks();
  for (size_t b = 0; b < out.size(); ++b) {
    out[b] = model::BlockSelective(plan, nv + static_cast<int>(b), nv) &&
             model::TorchtitanOpSacApplies(BlockSpec(spec, static_cast<int>(b)), o, t.blocks[b]);
  }
  return out;
}

// Block `block` of all (a VL model's vision blocks first) reruns in backward: the estimate's rule
// (model::BlockCheckpointed, Walker::Checkpointed).
bool Recomputes(const model::ModelSpec& spec, const model::Plan& p, int block) {
  return model::BlockCheckpointed(p, block, spec.VisionBlocks());
}

}  // namespace

FsdpRuntime::FsdpRuntime(const model::ModelSpec& spec, const RuntimeOptions& options,
                         ProcessGroups groups, Recorder* recorder)
    : impl_(std::make_unique<Impl>()),
      unit_specs_(Specs(NonEmptyGroups(spec, options.plan))),
      groups_(std::move(groups)),
      transformer_(spec, ModelOptions(spec, options.plan, options.device),
                   options.cp > 1 ? groups_.cp.get() : nullptr,
                   options.plan.ep > 1 ? groups_.ep.get() : nullptr) {
  SHARDTUNE_CHECK(groups_.shard->size() * groups_.replicate->size() ==
                  options.dp_world * options.cp)
      << "shard " << groups_.shard->size() << " x replicate " << groups_.replicate->size()
      << " != data-parallel world " << options.dp_world << " x cp " << options.cp;
  SHARDTUNE_CHECK(options.cp == 1 || (groups_.cp && groups_.cp->size() == options.cp))
      << "cp " << options.cp << " needs a cp group of that size";
  const int ep = std::max(1, options.plan.ep);
  SHARDTUNE_CHECK(ep == 1 || (groups_.ep && groups_.expert_shard && groups_.ep->size() == ep &&
                              groups_.expert_shard->size() * ep == groups_.shard->size()))
      << "ep " << ep << " needs an ep group of that size and an expert shard group of shard / ep";
  Impl& m = *impl_;
  m.options = options;
  m.groups = groups_;
  m.recorder = recorder;
  m.transformer = &transformer_;
  m.unit_specs = &unit_specs_;
  const model::Plan& plan = options.plan;
  FlatParamOptions fo;
  fo.param_dtype = ToScalarType(plan.param_dtype);
  fo.reduce_dtype = ToScalarType(plan.reduce_dtype);
  fo.shard_size = groups_.shard->size();
  fo.shard_rank = groups_.shard->rank();
  fo.seed = options.seed;
  fo.norm_unit_offset = spec.norm_unit_offset;
  fo.device = options.device;
  fo.offload_shard = plan.offload != model::Offload::kNone;
  fo.keep_device_shard = plan.offload == model::Offload::kOptimizer;
  int nseg = transformer_.num_segments();
  m.segments.resize(static_cast<size_t>(nseg));
  bool strategy_reshards = model::StrategyReshardsAfterForward(plan.strategy);
  std::vector<FlatParamGroup> flat_groups = NonEmptyGroups(spec, plan);
  for (size_t u = 0; u < unit_specs_.size(); ++u) {
    const model::FsdpUnit& us = unit_specs_[u];
    FlatParamOptions gfo = fo;
    Communicator* comm = groups_.shard.get();
    if (us.expert_parallel) {
      // This ep rank's experts, sharded over the efsdp ranks (torchtitan apply_fsdp).
      comm = groups_.expert_shard.get();
      gfo.shard_size = comm->size();
      gfo.shard_rank = comm->rank();
      const int64_t el = spec.moe.num_experts / ep;
      gfo.first_expert = groups_.ep->rank() * el;
      gfo.num_experts = spec.moe.num_experts;
      gfo.gated_experts = spec.mlp == model::MlpKind::kSwiGlu;
    }
    gfo.requires_grad = flat_groups[u].trainable;
    if (!gfo.requires_grad) gfo.shard_dtype = ToScalarType(plan.FrozenDtype());
    if (flat_groups[u].lora) gfo.param_dtype = ToScalarType(plan.lora.dtype);
    Impl::UnitState& state = m.units.emplace_back();
    state.flat = std::make_unique<FlatParam>(us, gfo);
    state.reshard_after_forward = !us.is_root && strategy_reshards && plan.reshard_after_forward;
    state.shard_comm = comm;
    int idx = static_cast<int>(u);
    m.segments[static_cast<size_t>(us.first_segment)].starting.push_back(idx);
    m.segments[static_cast<size_t>(us.last_segment)].ending.push_back(idx);
    for (int s = us.first_segment; s <= us.last_segment; ++s)
      m.segments[static_cast<size_t>(s)].covering.push_back(idx);
    const FlatParam& fp = *state.flat;
    for (size_t i = 0; i < fp.slots().size(); ++i) m.table[fp.slots()[i].name] = fp.params()[i];
    if (!fp.trainable()) continue;  // no gradients: nothing to reduce (FSDP2 fsdp_params_with_grad)
    state.flat->InstallGradHooks([this, idx]() {
      if (impl_->units[static_cast<size_t>(idx)].flat->CountGradReady()) impl_->PostBackward(idx);
    });
  }
  const std::vector<bool> op_sac = OpSacBlocks(spec, plan);
  const int nv = spec.VisionBlocks();
  // Per segment: a trainable parameter computes in it (a frozen vision block's is none).
  for (const FlatParamGroup& g : flat_groups) {
    if (!g.trainable) continue;
    for (const auto& prm : g.unit.params) m.segments[static_cast<size_t>(prm.segment)].trains = true;
  }
  for (int s = 0; s < nseg; ++s) {
    Impl::SegmentState& seg = m.segments[static_cast<size_t>(s)];
    seg.name = model::SegmentName(spec, s);
    const bool block = transformer_.IsBlockSegment(s), text = block && !transformer_.IsVisionSegment(s);
    seg.op_sac = text && op_sac[static_cast<size_t>(s - 1 - nv)];
    if (seg.op_sac) {
      // The estimate's rule, resolved once (model::ResolveSacSave, as BlockActivations::SacOps).
      seg.sac_save = model::ResolveSacSave(model::BlockSacSave(plan, s - 1, nv),
                                           model::SacUncountedProjections(BlockSpec(spec, s - 1 - nv)),
                                           plan.attention == model::Attention::kSdpa);
    }
    seg.recompute = block && (Recomputes(spec, plan, s - 1) || seg.op_sac);
    seg.fn = [this, s](const at::Tensor& x) { return transformer_.Segment(impl_->table, s, x, at::Tensor()); };
  }
  // verl's enable_activation_offloading: every FSDP layer (the text blocks under block wrapping)
  // a group, and nothing below three layers (verl/utils/activation_offload.py).
  // With activation_offload_blocks k the handler covers the first k + 1 blocks (k offloaded
  // groups, the next block closing the last one), the rest keep theirs without it.
  if (const int offloaded = model::ActivationOffloadedBlocks(plan, spec.num_layers); offloaded > 0) {
    const int layers = offloaded + 1;
    m.activation_offload = std::make_unique<ActivationOffload>(layers, options.device);
    m.activation_offload_layers = layers;
  }
}

FsdpRuntime::~FsdpRuntime() = default;

std::vector<FlatParam*> FsdpRuntime::units() {
  std::vector<FlatParam*> out;
  for (auto& u : impl_->units) out.push_back(u.flat.get());
  return out;
}

void FsdpRuntime::Impl::Issue(int u) {
  UnitState& unit = units[static_cast<size_t>(u)];
  SHARDTUNE_CHECK(!unit.flat->gathered() && !unit.gather) << unit.flat->name() << " already gathering";
  unit.gather = unit.flat->BeginGather(*unit.shard_comm);
  if (unit.gather) ++inflight_gathers;
}

void FsdpRuntime::Impl::EnsureGathered(int u) {
  UnitState& unit = units[static_cast<size_t>(u)];
  if (unit.flat->gathered()) return;
  if (!unit.gather) Issue(u);
  if (!unit.gather) return;  // a shard group of 1: the copy was the gather
  double t0 = MonotonicSeconds();
  unit.gather->Wait();
  unit.gather.reset();
  --inflight_gathers;
  unit.flat->MarkGathered();
  double t1 = MonotonicSeconds();
  // The exposed wait; the collective itself is in the CollectiveLog (and the trace).
  recorder->Add({unit.flat->name(), "all_gather_wait", Lane::kAllGather, t0, t1 - t0});
}

int FsdpRuntime::Impl::ForwardPrefetchAhead() const {
  return std::max(1, options.plan.max_inflight_allgathers - 1);
}

void FsdpRuntime::Impl::Prefetch(const std::vector<int>& candidates, int max_ahead) {
  for (int u : candidates) {
    if (inflight_gathers >= max_ahead) return;
    const UnitState& unit = units[static_cast<size_t>(u)];
    if (!unit.flat->gathered() && !unit.gather) Issue(u);
  }
}

std::vector<int> FsdpRuntime::Impl::BackwardCandidates(int segment) const {
  std::vector<int> out;
  for (int s = segment - 1; s >= 0; --s) {
    const SegmentState& seg = segments[static_cast<size_t>(s)];
    if (!seg.grad) break;  // no backward from here down (frozen)
    for (int u : seg.covering) {
      if (units[static_cast<size_t>(u)].backward_done) continue;
      if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
    }
    if (out.size() >= 4) break;
  }
  return out;
}

void FsdpRuntime::UpdateExpertBias() { transformer_.UpdateExpertBias(*groups_.world); }

at::Tensor FsdpRuntime::Forward(const at::Tensor& tokens, const at::Tensor& labels) {
  Impl& m = *impl_;
  bool grad = at::GradMode::is_enabled();
  // torchtitan's MoE counts the tokens each expert was chosen for in this forward (not in a
  // recomputed block's rerun in backward).
  struct Counting {
    const Transformer& t;
    explicit Counting(const Transformer& tr) : t(tr) { t.SetCounting(true); }
    ~Counting() { t.SetCounting(false); }
  } counting(transformer_);
  at::Tensor x = tokens;
  int nseg = transformer_.num_segments();
  for (int s = 0; s < nseg; ++s) {
    Impl::SegmentState& seg = m.segments[static_cast<size_t>(s)];
    if (transformer_.Skips(s)) {  // a VL model's tower on a text-only micro-batch
      seg.grad = false;
      continue;
    }
    for (int u : seg.starting) m.EnsureGathered(u);
    if (m.options.plan.forward_prefetch) {
      std::vector<int> next;
      for (size_t u = 0; u < m.units.size(); ++u) {
        const int first = unit_specs_[u].first_segment;
        if (first > s && !transformer_.Skips(first)) next.push_back(static_cast<int>(u));
      }
      m.Prefetch(next, m.ForwardPrefetchAhead());
    }
    double t0 = MonotonicSeconds();
    // What runs outside a vision block's checkpoint: the patch embedding before the first, the
    // merger and the scatter into the text embeddings after the last (identity elsewhere).
    x = transformer_.EnterSegment(m.table, s, x);
    // A frozen vision block computes nothing backward needs (the estimate's
    // model::FirstTowerGradSegment): its recompute input is not made to require grad.
    const bool needs_input_grad = !transformer_.IsVisionSegment(s) || seg.trains;
    if (grad && seg.recompute && !x.requires_grad() && needs_input_grad) {
      // A recomputed block after frozen ones: its input has no gradient, yet its parameters do;
      // the reentrant Function's output needs an input that requires grad (HF's
      // enable_input_require_grads, used by PEFT with gradient checkpointing, for the same).
      x = x.detach().requires_grad_(true);
    }
    // With the MoE auxiliary loss a recomputed block's router logits are outputs of its node.
    std::vector<at::Tensor>* side =
        transformer_.spec().moe.router_aux_loss ? transformer_.mutable_router_logits() : nullptr;
    // verl's offload context spans the layer's forward once FSDP gathered it (its hooks wrap the
    // module's forward, inside fully_shard's pre- and post-forward), checkpoint included.
    ActivationOffload* offload =
        grad && transformer_.IsBlockSegment(s) && !transformer_.IsVisionSegment(s) &&
                s - 1 - transformer_.spec().VisionBlocks() < m.activation_offload_layers
            ? m.activation_offload.get()
            : nullptr;
    if (offload != nullptr) {
      std::vector<at::Tensor> layer_params;
      for (int u : seg.covering) {
        const auto& ps = m.units[static_cast<size_t>(u)].flat->params();
        layer_params.insert(layer_params.end(), ps.begin(), ps.end());
      }
      offload->EnterLayer(layer_params);
    }
    at::Tensor y;
    try {
      y = !grad || !seg.recompute ? transformer_.Segment(m.table, s, x, labels)
          : seg.op_sac            ? SacRecompute(&seg.fn, x, transformer_.sac_tape(), seg.sac_save)
                                  : Recompute(&seg.fn, x, side);
    } catch (...) {
      if (offload != nullptr) offload->CancelLayer();
      throw;
    }
    if (offload != nullptr) y = offload->LeaveLayer(y);
    // Frozen segments before the first trainable parameter have no backward at all.
    seg.grad = grad && y.requires_grad();
    y = transformer_.LeaveSegment(m.table, s, y);
    m.recorder->Add({seg.name, "forward", Lane::kCompute, t0, MonotonicSeconds() - t0});
    if (seg.grad) {
      y.register_hook([this, s](const at::Tensor&) { impl_->PreBackward(s); });
    }
    for (int u : seg.ending) {
      // A unit no backward will need (frozen, before every trainable parameter) is freed now.
      Impl::UnitState& unit = m.units[static_cast<size_t>(u)];
      if (unit.reshard_after_forward || (grad && !seg.grad)) unit.flat->Free();
    }
    x = y;
  }
  // The graph keeps what it saved; a checkpointed text layer keeps M-RoPE's tables.
  bool text_recompute = false;
  for (int s = 0; s < nseg; ++s) {
    const Impl::SegmentState& seg = m.segments[static_cast<size_t>(s)];
    text_recompute = text_recompute || (seg.recompute && seg.grad && !transformer_.IsVisionSegment(s));
  }
  transformer_.ClearSharedConstants(grad && text_recompute);
  return x;
}

double FsdpRuntime::ClipGradNorm(double max_norm) {
  Impl& m = *impl_;
  at::NoGradGuard no_grad;
  // On the shards' device: the host under CPU offload (FSDP2 clips the CPU gradients there).
  at::Device where = m.units.empty() ? m.options.device : m.units.front().flat->shard_device();
  at::Tensor sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(where));
  for (auto& u : m.units) {
    const at::Tensor& g = u.flat->grad_shard();
    if (!g.defined()) continue;
    if (g.is_cuda()) {
      // An fp32 norm per shard, squared and summed: torch's clip_grad_norm_ takes
      // torch._foreach_norm of the gradients and the norm of those (torch/nn/utils/clip_grad.py);
      // no fp64 copy of the gradients on the device.
      sq += g.norm().to(at::kDouble).pow(2);
      continue;
    }
    // On the host: squares summed in fp64 in one pass (no fp64 copy of the shard), in fixed
    // blocks of kHostGrainNumel added in order, so the same bits whatever the thread count.
    SHARDTUNE_CHECK(g.scalar_type() == at::kFloat && g.is_contiguous())
        << "host gradient shards are contiguous fp32";
    const float* x = g.data_ptr<float>();
    const int64_t n = g.numel(), blocks = (n + kHostGrainNumel - 1) / kHostGrainNumel;
    std::vector<double> block_sums(static_cast<size_t>(blocks));
    at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        block_sums[static_cast<size_t>(b)] = HostSumOfSquares(
            x, b * kHostGrainNumel, std::min(n, (b + 1) * kHostGrainNumel));
      }
    });
    double shard_sq = 0;
    for (double s : block_sums) shard_sq += s;
    sq += shard_sq;
  }
  if (groups_.shard->size() > 1) groups_.shard->AllReduce(sq)->Wait();
  double norm = std::sqrt(sq.item<double>());
  if (max_norm > 0) {
    double coef = std::min(1.0, max_norm / (norm + 1e-6));
    for (auto& u : m.units) {
      if (u.flat->grad_shard().defined()) u.flat->grad_shard().mul_(coef);
    }
  }
  return norm;
}

void FsdpRuntime::RefreshDeviceShards() {
  for (auto& u : impl_->units) u.flat->RefreshDeviceShard();
}

void FsdpRuntime::ZeroGrad() {
  for (auto& u : impl_->units) u.flat->grad_shard() = at::Tensor();
}

}  // namespace shardtune::exec
