// One rank's allocations through FSDP2 training steps, in CPU program order (which is what
// torch.cuda.max_memory_allocated measures). Sources for each rule are in the comments; the
// notes behind them: FSDPParamGroup.{pre_forward, post_forward, pre_backward, post_backward},
// foreach_all_gather / foreach_reduce in _fsdp_collectives.py, torch/optim/adam.py.
#include "simulator/step_walk.h"

#include <algorithm>
#include <string>

#include "model/errors.h"

namespace shardtune::sim {
namespace {

using model::DType;
using model::Plan;

const char* kShardedParams = "sharded parameters";
const char* kShardedGrads = "sharded gradients";
const char* kOptState = "optimizer state";
const char* kOptTemp = "optimizer step temporaries";
const char* kGathered = "gathered (unsharded) parameters";
const char* kAgBuf = "all-gather buffers";
const char* kUnshardedGrads = "unsharded gradients";
const char* kRsBuf = "reduce-scatter buffers";
const char* kNoSyncGrads = "no_sync accumulated gradients";
const char* kActs = "activations saved for backward";
const char* kWorking = "activation working set (temporaries, gradients)";
const char* kResidual = "residual stream";
const char* kLoss = "logits and loss";

class Walker {
 public:
  Walker(const WalkSetup& s, MemoryLedger* l) : s_(s), l_(l), p_(*s.plan) {
    n_ = s.shard_n;
    tokens_ = static_cast<double>(p_.micro_batch) * static_cast<double>(s.seq_len);
    e_param_ = model::BytesPerElement(p_.param_dtype);
    e_reduce_ = model::BytesPerElement(p_.reduce_dtype);
    size_t u = s.units.size();
    gathered_.assign(u, false);
    prefetched_.assign(u, 0);
    has_sharded_grad_.assign(u, false);
    inplace_accum_.assign(u, false);
    unsharded_grad_.assign(u, 0);
    accumulated_.assign(u, 0);
    sharded_grad_.assign(u, 0);
  }

  void Run() {
    // Persistent sharded parameters (fp32 master, one padded buffer per parameter).
    if (p_.offload != model::Offload::kAll) {
      l_->Phase("start-up · sharded parameters");
      for (const auto& u : s_.units) {
        l_->Alloc(kShardedParams, Stream::kDefault, u.PaddedShardNumel(n_) * ShardedParamBytesPerElement(p_));
      }
    }
    for (step_ = 0; step_ < 2; ++step_) {
      for (micro_ = 0; micro_ < p_.grad_accum; ++micro_) {
        Forward();
        Backward();
      }
      OptimizerStep();
    }
    l_->Finish();
  }

 private:
  std::string Tag() const {
    return "step " + std::to_string(step_) + " · micro-batch " + std::to_string(micro_ + 1) + "/" +
           std::to_string(p_.grad_accum);
  }
  int64_t Tok(double per_token) const { return static_cast<int64_t>(per_token * tokens_); }
  bool ReshardAfterForward(const model::FsdpUnit& u) const {
    bool zero3 = p_.strategy == model::ShardingStrategy::kFullShard ||
                 p_.strategy == model::ShardingStrategy::kHybridShard;
    // FSDP2 leaves the root gathered after forward (its backward needs it at once).
    return zero3 && p_.reshard_after_forward && !u.is_root && n_ > 1;
  }
  int64_t GatheredBytes(size_t i) const {
    // Unsharded params: ws x padded shard per param, in param dtype (_fsdp_param.py
    // init_all_gather_outputs). NO_SHARD with a lower param dtype casts a full copy.
    return s_.units[i].PaddedShardNumel(n_) * n_ * e_param_;
  }
  bool NeedsGatherCopy() const {
    return n_ > 1 || model::BytesPerElement(p_.master_dtype) != e_param_ || p_.offload == model::Offload::kAll;
  }

  // foreach_all_gather: a param-dtype copy of the shards (all_gather_copy_in), the flat output
  // ws x sum(padded shard) on the all-gather stream; CPU offload first copies the shard H2D.
  void IssueAllGather(size_t i) {
    if (n_ == 1) return;
    int64_t shard = s_.units[i].PaddedShardNumel(n_);
    if (p_.offload == model::Offload::kAll) l_->Transient(kAgBuf, Stream::kAllGather, shard * 4);
    l_->Alloc(kAgBuf, Stream::kAllGather, shard * e_param_);
    l_->Alloc(kAgBuf, Stream::kAllGather, shard * n_ * e_param_);
    l_->Free(kAgBuf, Stream::kAllGather, shard * e_param_);
    prefetched_[i] = shard * n_ * e_param_;
  }

  // wait_for_unshard: copy-out into the unsharded params. In forward the flat output is kept
  // (AllGatherState) until the next unit's copy-out; in backward it is freed at once.
  void Unshard(size_t i, bool forward) {
    if (gathered_[i]) return;
    if (!NeedsGatherCopy()) { gathered_[i] = true; return; }
    if (prefetched_[i] == 0) IssueAllGather(i);
    // The previous unit's flat buffer is dropped (all_gather_state = None) before this copy-out.
    if (forward && deferred_ag_ > 0) l_->Free(kAgBuf, Stream::kAllGather, deferred_ag_);
    l_->Alloc(kGathered, Stream::kDefault, GatheredBytes(i));
    gathered_[i] = true;
    if (forward) {
      deferred_ag_ = prefetched_[i];
    } else if (prefetched_[i] > 0) {
      l_->Free(kAgBuf, Stream::kAllGather, prefetched_[i]);
    }
    prefetched_[i] = 0;
  }

  void Reshard(size_t i) {
    if (!gathered_[i]) return;
    gathered_[i] = false;
    if (NeedsGatherCopy()) l_->Free(kGathered, Stream::kDefault, GatheredBytes(i));
  }

  void Forward() {
    const auto& spec = *s_.spec;
    int L = spec.num_layers;
    const auto& units = s_.units;
    double res = model::ResidualPerToken(spec, model::ActivationOptionsFor(p_, s_.seq_len));
    for (int seg = 0; seg < model::NumSegments(L); ++seg) {
      for (size_t i = 0; i < units.size(); ++i) {
        if (units[i].first_segment == seg) {
          l_->Phase(Tag() + " · forward · all-gather " + units[i].name);
          Unshard(i, true);
          if (p_.forward_prefetch) PrefetchForward(seg);
        }
      }
      if (seg == 0) {
        l_->Phase(Tag() + " · forward · embeddings");
        l_->Alloc(kResidual, Stream::kDefault, Tok(res));
      } else if (seg <= L) {
        l_->Phase(Tag() + " · forward · block " + std::to_string(seg - 1));
        l_->Transient(kWorking, Stream::kDefault, Tok(s_.block.full.forward_peak_per_token - res));
        l_->Alloc(kActs, Stream::kDefault, Tok(BlockSaved(seg - 1)));
      } else if (seg == model::HeadSegment(L)) {
        l_->Phase(Tag() + " · forward · LM head and loss");
        l_->Transient(kWorking, Stream::kDefault, Tok(s_.head.forward_peak_per_token - res));
        l_->Alloc(kLoss, Stream::kDefault, Tok(s_.head.saved_per_token));
      }
      for (size_t k = units.size(); k-- > 0;) {
        if (units[k].last_segment == seg && ReshardAfterForward(units[k])) Reshard(k);
      }
    }
    if (deferred_ag_ > 0) {
      l_->Free(kAgBuf, Stream::kAllGather, deferred_ag_);
      deferred_ag_ = 0;
    }
  }

  void PrefetchForward(int seg) {
    for (size_t j = 0; j < s_.units.size(); ++j) {
      if (s_.units[j].first_segment > seg && !gathered_[j] && prefetched_[j] == 0) {
        IssueAllGather(j);
        return;
      }
    }
  }

  bool Checkpointed(int block) const {
    switch (p_.checkpointing) {
      case model::Checkpointing::kNone: return false;
      case model::Checkpointing::kFull: return true;
      case model::Checkpointing::kSelective: return false;
      case model::Checkpointing::kEveryK: return block % std::max(1, p_.checkpoint_every_k) == 0;
    }
    return false;
  }
  double BlockSaved(int block) const {
    if (Checkpointed(block)) return s_.block.checkpoint_input_per_token;
    if (p_.checkpointing == model::Checkpointing::kSelective) return s_.block.selective_per_token;
    return s_.block.full.saved_per_token;
  }

  void Backward();
  void PrefetchBackward(int seg);
  void PostBackward(size_t i, bool sync);
  void OptimizerStep();

  const WalkSetup& s_;
  MemoryLedger* l_;
  const Plan& p_;
  int n_ = 1;
  double tokens_ = 0;
  int64_t e_param_ = 2, e_reduce_ = 4;
  int step_ = 0, micro_ = 0;
  std::vector<bool> gathered_, has_sharded_grad_, inplace_accum_;
  std::vector<int64_t> prefetched_, unsharded_grad_, accumulated_, sharded_grad_;
  int64_t deferred_ag_ = 0, deferred_rs_ = 0, kept_logits_ = 0;
  bool optimizer_state_ = false;
};


// Backward runs segments in reverse. Pre-backward all-gathers a resharded unit and, with
// BACKWARD_PRE, prefetches the next one (FSDP2 default: one unit ahead). Gradients of a unit's
// parameters appear (param dtype, unpadded) in the segment that used them.
void Walker::Backward() {
  const auto& spec = *s_.spec;
  const auto& units = s_.units;
  int L = spec.num_layers;
  bool sync = !p_.no_sync || micro_ == p_.grad_accum - 1;
  double res = model::ResidualPerToken(spec, model::ActivationOptionsFor(p_, s_.seq_len));
  for (int seg = model::NumSegments(L) - 1; seg >= 0; --seg) {
    for (size_t i = 0; i < units.size(); ++i) {
      if (units[i].last_segment != seg) continue;
      l_->Phase(Tag() + " · backward · all-gather " + units[i].name);
      Unshard(i, false);
      if (p_.backward_prefetch != model::BackwardPrefetch::kNone) PrefetchBackward(seg);
    }
    for (size_t i = 0; i < units.size(); ++i) {
      int64_t g = 0;
      for (const auto& prm : units[i].params) g += prm.segment == seg ? prm.numel() * e_param_ : 0;
      if (g == 0 || inplace_accum_[i]) continue;  // no_sync without a reduce dtype: += in place
      l_->Alloc(kUnshardedGrads, Stream::kDefault, g);
      unsharded_grad_[i] += g;
    }
    if (seg == model::HeadSegment(L)) {
      l_->Phase(Tag() + " · backward · loss and LM head");
      l_->Free(kLoss, Stream::kDefault, Tok(s_.head.saved_per_token));
      l_->Free(kResidual, Stream::kDefault, Tok(res));
      l_->Transient(kWorking, Stream::kDefault, Tok(s_.head.backward_peak_per_token));
      if (p_.keep_logits) {
        kept_logits_ = Tok(static_cast<double>(e_param_ * spec.vocab_size));
        l_->Alloc(kLoss, Stream::kDefault, kept_logits_);
      }
    } else if (seg >= 1 && seg <= L) {
      int b = seg - 1;
      l_->Phase(Tag() + " · backward · block " + std::to_string(b) +
                (Checkpointed(b) ? " (recomputed)" : ""));
      l_->Free(kActs, Stream::kDefault, Tok(BlockSaved(b)));
      l_->Transient(kWorking, Stream::kDefault, Tok(s_.block.full.backward_peak_per_token));
    }
    for (size_t i = units.size(); i-- > 0;) {
      if (units[i].first_segment == seg) PostBackward(i, sync);
    }
  }
  l_->Phase(Tag() + " · end of backward");
  if (deferred_rs_ > 0) l_->Free(kRsBuf, Stream::kDefault, deferred_rs_);
  deferred_rs_ = 0;
  if (kept_logits_ > 0 && micro_ < p_.grad_accum - 1) {
    l_->Free(kLoss, Stream::kDefault, kept_logits_);
    kept_logits_ = 0;
  }
}

void Walker::PrefetchBackward(int seg) {
  int best = -1;
  for (size_t j = 0; j < s_.units.size(); ++j) {
    const auto& u = s_.units[j];
    if (u.last_segment >= seg || gathered_[j] || prefetched_[j] > 0) continue;
    if (best < 0 || u.last_segment > s_.units[static_cast<size_t>(best)].last_segment) {
      best = static_cast<int>(j);
    }
  }
  if (best >= 0) IssueAllGather(static_cast<size_t>(best));
}

// FSDPParamGroup.post_backward: reshard, then foreach_reduce: the previous unit's reduce-scatter
// input is released (ReduceScatterState), a flat reduce-dtype input of ws x padded shard is
// allocated on the current stream and the unsharded grads copied in and dropped; the output
// (padded shard, reduce stream) becomes the sharded grads or is added into them.
void Walker::PostBackward(size_t i, bool sync) {
  const auto& u = s_.units[i];
  l_->Phase(Tag() + " · backward · reduce-scatter " + u.name);
  Reshard(i);
  if (!sync) {
    // set_requires_gradient_sync(False): to_accumulated_grad_if_needed keeps an fp32 copy of the
    // whole unsharded grad until the syncing micro-batch; without a reduce dtype the
    // param-dtype .grad stays and is accumulated in place.
    if (e_reduce_ != e_param_) {
      if (accumulated_[i] == 0) {
        accumulated_[i] = u.NumParams() * e_reduce_;
        l_->Alloc(kNoSyncGrads, Stream::kDefault, accumulated_[i]);
      }
      l_->Free(kUnshardedGrads, Stream::kDefault, unsharded_grad_[i]);
      unsharded_grad_[i] = 0;
    } else {
      inplace_accum_[i] = true;
    }
    return;
  }
  if (deferred_rs_ > 0) l_->Free(kRsBuf, Stream::kDefault, deferred_rs_);
  int64_t shard = u.PaddedShardNumel(n_);
  int64_t rs_in = shard * n_ * e_reduce_;
  l_->Alloc(kRsBuf, Stream::kDefault, rs_in);
  l_->Free(kUnshardedGrads, Stream::kDefault, unsharded_grad_[i]);
  unsharded_grad_[i] = 0;
  inplace_accum_[i] = false;
  if (accumulated_[i] > 0) l_->Free(kNoSyncGrads, Stream::kDefault, accumulated_[i]);
  accumulated_[i] = 0;
  deferred_rs_ = rs_in;
  int64_t rs_out = shard * e_reduce_;
  if (p_.offload != model::Offload::kNone || has_sharded_grad_[i]) {
    // Offload: copied to the host's grads; accumulation: sharded_grad += output, then freed.
    l_->Transient(kRsBuf, Stream::kReduceScatter, rs_out);
  } else {
    sharded_grad_[i] = shard * model::BytesPerElement(p_.master_dtype);
    l_->Alloc(kShardedGrads, Stream::kReduceScatter, sharded_grad_[i]);
    has_sharded_grad_[i] = true;
  }
}

// torch.optim.AdamW (foreach, the CUDA default): exp_avg and exp_avg_sq are created at the first
// step(); _multi_tensor_adam allocates exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs) for the whole
// param group; fused has no full-size temporary; the for-loop path ~2 tensors of the largest param.
void Walker::OptimizerStep() {
  l_->Phase("step " + std::to_string(step_) + " · optimizer step" + (step_ == 0 ? " (state created)" : ""));
  int64_t shard = 0, largest = 0, factored = 0;
  for (const auto& u : s_.units) {
    shard += u.PaddedShardNumel(n_);
    for (const auto& prm : u.params) {
      int64_t ps = prm.PaddedShardNumel(n_);
      largest = std::max(largest, ps);
      // Adafactor: row and column second moments for matrices, a full one for vectors.
      factored += prm.inner > 1 ? (prm.dim0 + n_ - 1) / n_ + prm.inner : ps;
    }
  }
  int64_t e = model::BytesPerElement(p_.master_dtype);
  if (p_.offload == model::Offload::kNone) {
    int64_t state = 0;
    switch (p_.optimizer) {
      case model::Optimizer::kAdamW: state = 2 * shard * e; break;
      case model::Optimizer::kSgd: state = shard * e; break;
      case model::Optimizer::kAdafactor: state = factored * e; break;
    }
    if (!optimizer_state_) l_->Alloc(kOptState, Stream::kDefault, state);
    optimizer_state_ = true;
    if (p_.optimizer != model::Optimizer::kSgd) {
      switch (p_.optimizer_impl) {
        case model::OptimizerImpl::kForeach: l_->Transient(kOptTemp, Stream::kDefault, shard * e); break;
        case model::OptimizerImpl::kForLoop: l_->Transient(kOptTemp, Stream::kDefault, 2 * largest * e); break;
        case model::OptimizerImpl::kFused: break;
      }
    }
  }
  l_->Phase("step " + std::to_string(step_) + " · zero_grad(set_to_none=True)");
  for (size_t i = 0; i < sharded_grad_.size(); ++i) {
    l_->Free(kShardedGrads, Stream::kReduceScatter, sharded_grad_[i]);
    sharded_grad_[i] = 0;
    has_sharded_grad_[i] = false;
  }
  if (kept_logits_ > 0) l_->Free(kLoss, Stream::kDefault, kept_logits_);
  kept_logits_ = 0;
}

}  // namespace

int64_t ShardedParamBytesPerElement(const Plan& plan) {
  // ZeRO-Offload of the optimizer keeps only param-dtype shards on the GPU (Ren et al. 2021).
  if (plan.offload == model::Offload::kOptimizer) return model::BytesPerElement(plan.param_dtype);
  return model::BytesPerElement(plan.master_dtype);
}

void WalkSteps(const WalkSetup& setup, MemoryLedger* ledger) {
  SHARDTUNE_CHECK(setup.spec && setup.plan) << "incomplete setup";
  Walker(setup, ledger).Run();
}

}  // namespace shardtune::sim
