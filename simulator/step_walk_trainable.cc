// Walker: what frozen parameters, LoRA adapters, inference roles, per-expert FSDP units and the
// tiled MLP change in one rank's steps (the units' requires_grad come from model/trainable.h).
#include <algorithm>
#include <functional>

#include "model/errors.h"
#include "model/module_tree.h"
#include "model/tiled_mlp.h"
#include "model/trainable.h"
#include "simulator/step_walk_rules.h"

namespace shardtune::sim::internal {

void Walker::InitTrainability() {
  const auto& spec = *s_.spec;
  size_t u = units_.size();
  auto segs = static_cast<size_t>(model::NumSegments(nb_));
  grad_shard_numel_.assign(u, 0);
  if (ep_units_) grad_gathered_numel_.assign(u, 0);
  shard_bytes_.assign(u, 0);
  copy_in_bytes_.assign(u, 0);
  weight_grad_fraction_.assign(segs, 0.0);
  adapter_numel_.assign(segs, 0.0);
  std::vector<double> mat(segs, 0.0), mat_train(segs, 0.0);
  const auto& moe = spec.moe;
  // A routed expert sees top_k / num_experts of the tokens (balanced router).
  double expert_share = moe.enabled() ? static_cast<double>(moe.top_k) / moe.num_experts : 1.0;
  for (size_t i = 0; i < u; ++i) {
    for (const auto& prm : units_[i].params) {
      int64_t ps = prm.PaddedShardNumel(n_);
      int64_t e = ShardedBytesPerElement(p_, prm);
      shard_bytes_[i] += ps * e;
      copy_in_bytes_[i] += ps * AllGatherCopyInBytesPerElement(e, e_param_);
      bool trains = prm.requires_grad && p_.Trains();
      if (trains) {
        grad_shard_numel_[i] += ps;
        if (ep_units_) grad_gathered_numel_[i] += prm.GatheredNumel(n_);
      }
      // The tied embedding's weight is booked with the LM head, whose backward first produces a
      // gradient for it (model/module_tree.cc).
      bool tied = spec.tied_embeddings && !spec.value_head &&
                  prm.segment == model::HeadSegment(nb_) && prm.dim0 == spec.vocab_size;
      if (trains && (prm.segment == 0 || tied)) lookup_grad_bytes_ += prm.numel() * e_param_;
      if (trains && tied) tied_grad_bytes_ += prm.numel() * e_param_;
      auto seg = static_cast<size_t>(prm.segment);
      if (prm.lora_adapter) {
        // What the adapters save is in the block's ledger (model/activations.h Trainability).
        double share =
            moe.enabled() && prm.name.find(".experts.") != std::string::npos ? expert_share : 1.0;
        adapter_numel_[seg] += share * static_cast<double>(prm.numel());
      } else if (prm.inner > 1 && seg > 0) {  // matmul weights (segment 0 holds lookup tables)
        mat[seg] += static_cast<double>(prm.numel());
        if (trains) mat_train[seg] += static_cast<double>(prm.numel());
      }
    }
    total_grad_shard_numel_ += grad_shard_numel_[i];
  }
  for (size_t g = 0; g < segs; ++g)
    weight_grad_fraction_[g] = mat[g] > 0 ? mat_train[g] / mat[g] : 0.0;
  first_backward_seg_ = p_.Trains() ? model::FirstBackwardSegment(units_, nb_)
                                    : model::NumSegments(nb_);
  vision_backward_from_ = p_.Trains() ? model::FirstTowerGradSegment(spec, units_)
                                      : model::NumSegments(nb_);
  SHARDTUNE_CHECK(!p_.Trains() || first_backward_seg_ < model::NumSegments(nb_))
      << "a training plan with nothing trainable (TrainabilityProblems rejects it)";
  if (p_.tiled_mlp_shards > 1) {
    tiled_mlp_flops_ = model::MlpForwardFlopsPerToken(spec, spec.num_layers - 1).count();
    tiled_dense_mlp_flops_ = model::MlpForwardFlopsPerToken(spec, 0).count();
  }
}

// Narayanan et al. 2021 (Megatron-LM, section 5.1 / eq. 3 derivation): a matmul's backward costs
// 2x its forward, one input-gradient and one weight-gradient GEMM. A frozen weight needs only the
// input gradient (autograd skips outputs that do not require grad: should_compute_output), so
// the ratio is 1 + the share of the segment's matmul weights that train.
double Walker::BackwardMatmulRatio(int seg) const {
  return 1.0 + weight_grad_fraction_[static_cast<size_t>(seg)];
}

// LoRA's extra forward: 2 x (r x in + out x r) per token per adapted projection (Hu et al. 2021).
double Walker::AdapterFlopsPerToken(int seg) const {
  return 2.0 * adapter_numel_[static_cast<size_t>(seg)];
}

// TiledMLP's backward re-runs every tile's MLP forward with grad enabled (tiled_mlp.h).
double Walker::TiledRecomputeFlopsPerToken(int block) const {
  if (block < nv_ || !Backprops(model::BlockSegment(block))) return 0.0;
  return block - nv_ < s_.spec->DenseLayers() ? tiled_dense_mlp_flops_ : tiled_mlp_flops_;
}

// Under no_grad nothing is saved, so the forward keeps only the op being run: the training
// ledger's forward peak less what it had saved by then, plus the two largest saved tensors (the
// inputs and output of the op at the peak, e.g. silu(gate) and up feeding the product).
int64_t Walker::InferWorkingSet(int block) const {
  const model::ActivationLedger& l = Blk(block).full;
  double top1 = 0, top2 = 0;
  for (const auto& t : l.saved) {
    if (t.bytes_per_token > top1) {
      top2 = top1;
      top1 = t.bytes_per_token;
    } else if (t.bytes_per_token > top2) {
      top2 = t.bytes_per_token;
    }
  }
  double training = l.forward_peak_per_token - BlockResidual(block);
  double ws = l.forward_peak_per_token - l.saved_per_token + top1 + top2 - BlockResidual(block);
  return Tok(std::max(0.0, std::min(training, ws)));
}

const std::vector<int32_t>& Walker::ExpertsStarting(int seg) const {
  return experts_starting_[static_cast<size_t>(seg)];
}

// Per-expert units (ROLL wrap_policy.moe_experts): the expert's pre-forward hook gathers it when
// the block's MoE layer calls it, and its post-forward reshards it, so one expert is gathered at
// a time (the next one's all-gather is issued at its own pre-forward). The block's compute is one
// op, run with the first expert gathered; the others follow it in program order.
void Walker::ForwardExperts(int seg, bool before_compute) {
  const std::vector<int32_t>& ex = ExpertsStarting(seg);
  if (ex.empty()) return;
  if (before_compute) {
    Unshard(static_cast<size_t>(ex.front()), true);
    return;
  }
  for (size_t k = 1; k < ex.size(); ++k) {
    auto prev = static_cast<size_t>(ex[k - 1]);
    if (ReshardAfterForward(units_[prev])) Reshard(prev);
    Unshard(static_cast<size_t>(ex[k]), true);
  }
}

// Backward of per-expert units: the first expert is gathered with the block and its gradients
// made by the block's backward op; each other expert is gathered, gets its gradients and is
// reduce-scattered in turn (its post-backward hook), before the block's own post-backward.
void Walker::BackwardExperts(int seg, bool before_compute, bool sync) {
  const std::vector<int32_t>& ex = ExpertsStarting(seg);
  if (ex.empty()) return;
  if (before_compute) {
    Unshard(static_cast<size_t>(ex.front()), false);
    return;
  }
  PostBackward(static_cast<size_t>(ex.front()), sync);
  for (size_t k = 1; k < ex.size(); ++k) {
    auto i = static_cast<size_t>(ex[k]);
    Unshard(i, false);
    last_backward_ = Begin(OpKind::kBackward, Stream::kDefault, -1, seg);
    if (!inplace_accum_[i] && p_.Trains()) {
      int64_t g = 0;
      for (const auto& prm : units_[i].params) g += prm.requires_grad ? prm.numel() * e_param_ : 0;
      unsharded_grad_[i] += g;
      Alloc(Category::kUnshardedGrads, Stream::kDefault, g);
      TAllocGrads(i, -1);
    }
    PostBackward(i, sync);
  }
}

}  // namespace shardtune::sim::internal
