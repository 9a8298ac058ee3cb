// Walker: compute ops (forward, backward, recomputation), backward with prefetch, post-backward
// reduce-scatter (FSDPParamGroup.post_backward, foreach_reduce) and the optimizer step.
#include <algorithm>

#include "model/errors.h"
#include "model/module_tree.h"
#include "model/trainable.h"
#include "simulator/memory_ledger.h"
#include "simulator/step_walk_rules.h"

namespace shardtune::sim::internal {

void Walker::BlockForwardFlops(int b, double* attention, double* matmul) const {
  if (b < nv_) {
    const model::VisionBlockFlops f = model::VisionBlockForwardFlops(*s_.spec, b, s_.vision);
    *attention = f.attention;
    *matmul = f.matmul;
    return;
  }
  // A packed row's tokens attend within their sequences: both the attention FLOPs and the
  // block's total (whose matmul part is the difference) at the sequence's length.
  const int64_t attn_seq = s_.plan->AttentionSeqLen(s_.seq_len);
  *attention = model::AttentionForwardFlopsPerToken(*s_.spec, attn_seq).count();
  *matmul = model::BlockForwardFlopsPerToken(*s_.spec, attn_seq, b - nv_).count() - *attention;
}

void Walker::ForwardCompute(int seg) {
  const auto& spec = *s_.spec;
  const int L = nb_;
  if (seg == model::FinalNormSegment(L)) return;  // counted with the head
  Begin(OpKind::kForward, Stream::kDefault, -1, seg);
  if (seg == 0) {
    Cur().host_kernels = 1;
    Alloc(Category::kResidual, Stream::kDefault, Tok(residual_));
    Cur().memory_bytes = 2 * residual_ * tokens_;  // embedding gather: read rows, write output
    residual_id_ = TAlloc(Stream::kDefault, Tok(residual_));
  } else if (seg <= L) {
    const int b = seg - 1;
    if (b == nv_) Hold(&mrope_tables_, Category::kActivations);  // the text model's position_embeddings
    if (b == 0 && nv_ > 0) {  // the patch embedding's output: the tower's residual stream
      Hold(&pixels_, Category::kVisionActivations);
      Hold(&vision_rotary_, Category::kVisionActivations);
      Alloc(Category::kResidual, Stream::kDefault, Tok(vision_residual_));
      vision_residual_id_ = TAlloc(Stream::kDefault, Tok(vision_residual_));
    }
    double attn = 0, mm = 0;
    BlockForwardFlops(b, &attn, &mm);
    Cur().attention_flops = attn * tokens_;
    Cur().matmul_flops = (mm + AdapterFlopsPerToken(seg)) * tokens_;
    Cur().memory_bytes = Blk(seg - 1).full.elementwise_traffic_per_token * tokens_;
    int64_t ws = p_.Trains() ? Tok(Blk(seg - 1).full.forward_peak_per_token - BlockResidual(b))
                             : InferWorkingSet(seg - 1);
    Transient(Category::kWorkingSet, Stream::kDefault, ws);
    TWorkingSet(ws, Blk(seg - 1).full);
    Alloc(SavedCategory(b), Stream::kDefault, BlockSavedBytes(seg - 1));
    TAllocSaved(seg - 1);
    Cur().host_kernels = static_cast<int16_t>(Blk(seg - 1).full.forward_ops);
    if (SplitBlock(seg - 1)) {
      UlyssesChain(UlyssesForwardPieces(seg - 1, Cur().memory_bytes, Cur().host_kernels));
    }
    if (b == nv_ - 1) {  // the merger's output replaced the image tokens' embeddings
      Free(Category::kResidual, Stream::kDefault, Tok(vision_residual_));
      TFree(&vision_residual_id_);
      if (!p_.Trains() || vision_backward_from_ >= model::NumSegments(nb_)) {
        Release(&vision_rotary_, Category::kVisionActivations);  // no graph through the tower
      }
    }
    CommitActivationOffload(b);  // last: it begins the block's device-to-host copy
  } else {
    // The text model's forward returns: its M-RoPE tables go unless a checkpointed layer saved
    // them (they then live to the backward's end).
    if (mrope_tables_.live > 0) {
      bool saved = false;
      for (int b = nv_; b < L && p_.Trains() && !saved; ++b) saved = Checkpointed(b) && Backprops(model::BlockSegment(b));
      if (!saved) Release(&mrope_tables_, Category::kActivations);
    }
    const model::ActivationLedger::FusedLoss& fused = head_.fused_loss;
    // The fused linear cross-entropy runs all three head GEMMs in forward (model/activations.h);
    // verl's fused heads only the logits'.
    const bool all_gemms = fused.on && fused.gradients_in_forward && p_.Trains();
    const double head_flops = (all_gemms ? 1.0 + BackwardMatmulRatio(seg) : 1.0) *
                              model::HeadForwardFlopsPerToken(spec).count() * tokens_;
    // TRL's chunked head multiplies in fp32 (FusedLoss::fp32_gemms).
    (fused.fp32_gemms ? Cur().fp32_matmul_flops : Cur().matmul_flops) = head_flops;
    Cur().memory_bytes = head_.elementwise_traffic_per_token * tokens_;
    int64_t ws = Tok(head_.forward_peak_per_token - residual_);
    fused_weight_grad_ = 0;
    if (fused.on) {
      // Liger's weight gradient [V, H] is made at the start and kept to backward; the chunk
      // loop's transients come on top of what is live then (FusedLoss).
      fused_weight_grad_ = p_.Trains() ? static_cast<int64_t>(fused.weight_grad_bytes) : 0;
      const int64_t rows = model::FusedChunkRows(fused, static_cast<int64_t>(tokens_), spec.vocab_size, spec.hidden);
      ws = std::max(ws, Tok(fused.live_per_token) + fused_weight_grad_ +
                            static_cast<int64_t>(fused.chunk_row_bytes * static_cast<double>(rows) +
                                                 fused.chunk_fixed_bytes));
    }
    Transient(Category::kWorkingSet, Stream::kDefault, ws);
    TWorkingSet(ws, head_);
    if (p_.Trains()) {
      Alloc(Category::kLoss, Stream::kDefault, Tok(head_.saved_per_token) + fused_weight_grad_);
      if (rec_) {
        for (const auto& t : head_.saved) loss_ids_.push_back(TAlloc(Stream::kDefault, Tok(t.bytes_per_token)));
        if (fused_weight_grad_ > 0) fused_weight_grad_id_ = TAlloc(Stream::kDefault, fused_weight_grad_);
      }
    } else if (fused.on) {
      // no_grad through verl's fused head: the log-probs and entropy [T] come back, no logits.
      kept_logits_ = 0;
    } else {  // no_grad: only the logits [B, S, V] the caller gets back (log-probs are taken from
              // them); a value head's are its values [B, S, 1]
      kept_logits_ = Tok(static_cast<double>(e_param_ * spec.HeadOutputs()));
      Alloc(Category::kLoss, Stream::kDefault, kept_logits_);
      kept_logits_id_ = TAlloc(Stream::kDefault, kept_logits_);
    }
    Cur().host_kernels = static_cast<int16_t>(head_.forward_ops);
  }
}

// The working set of a segment's backward on top of its parameter gradients `grads`: autograd
// allocates a matmul's weight gradient when that node runs, so at the moment of most live
// activation bytes only the gradients of the nodes already run exist (e.g. the LM head's dW is
// made after the loss backward's fp32 peak). Peak = max over nodes of (B·S x live per token +
// grads x fraction of the parameters whose gradients exist), minus `grads`, which the caller
// has already allocated.
int64_t Walker::BackwardWorkingSet(const model::ActivationLedger& l, int64_t grads) const {
  // A walk asks about few distinct ledgers (the block's, the head's; per block under LoRA), each
  // with the same grads in every micro-batch: a small memo keyed by ledger and grads.
  WorkingSetMemo& memo = working_set_memo_[(reinterpret_cast<uintptr_t>(&l) / alignof(model::ActivationLedger)) %
                                           working_set_memo_.size()];
  if (memo.ledger == &l && memo.grads == grads) return memo.bytes;
  int64_t peak = Tok(l.backward_peak_per_token);  // a ledger without a profile
  if (!l.backward_profile.empty()) peak = 0;
  for (const auto& p : l.backward_profile) {
    peak = std::max(peak, Tok(p.live_per_token) +
                              static_cast<int64_t>(p.param_grad_fraction * static_cast<double>(grads)));
  }
  memo = {&l, grads, std::max<int64_t>(0, peak - grads)};
  return memo.bytes;
}

// `grads`: bytes of parameter gradients AccumulateGrad allocates in this segment.
void Walker::BackwardCompute(int seg, int64_t grads) {
  const auto& spec = *s_.spec;
  const int L = nb_;
  if (seg >= 1 && seg <= L) ReloadActivations(seg - 1);  // the block below comes back meanwhile
  last_backward_ = Begin(OpKind::kBackward, Stream::kDefault, -1, seg);
  if (seg >= 1 && seg <= L && reload_op_[static_cast<size_t>(seg - 1)] >= 0) {
    Dep(reload_op_[static_cast<size_t>(seg - 1)]);  // its own reload, issued a block earlier
    reload_op_[static_cast<size_t>(seg - 1)] = -1;
  }
  if (seg == model::HeadSegment(L) && fused_weight_grad_ > 0) {
    // The fused loss's weight gradient, made in forward, is the one AccumulateGrad takes.
    Free(Category::kLoss, Stream::kDefault, fused_weight_grad_);
    TFree(&fused_weight_grad_id_);
    fused_weight_grad_ = 0;
  }
  Alloc(Category::kUnshardedGrads, Stream::kDefault, grads);
  for (int32_t u : seg_grad_units_) TAllocGrads(static_cast<size_t>(u), seg);
  seg_grad_units_.clear();
  if (seg == model::FinalNormSegment(L)) return;  // its compute is counted with the head
  if (seg == model::HeadSegment(L)) {
    const model::ActivationLedger::FusedLoss& fused = head_.fused_loss;
    if (!fused.on) {
      Cur().matmul_flops =
          BackwardMatmulRatio(seg) * model::HeadForwardFlopsPerToken(spec).count() * tokens_;
      Cur().memory_bytes = kElementwiseBackwardRatio * head_.elementwise_traffic_per_token * tokens_;
    } else if (!fused.gradients_in_forward) {
      // verl's fused heads: the logits GEMM again and both gradient GEMMs, whether or not the
      // weight trains (model/activations.cc VerlFusedTorchHead, VerlFusedTritonHead); TRL's
      // chunked head as many as it runs, in fp32; the final norm's backward and the chunk
      // loop's passes.
      const double gemms = fused.backward_head_gemms > 0 ? fused.backward_head_gemms : 1.0 + kMatmulBackwardRatio;
      (fused.fp32_gemms ? Cur().fp32_matmul_flops : Cur().matmul_flops) =
          gemms * model::HeadForwardFlopsPerToken(spec).count() * tokens_;
      Cur().memory_bytes =
          kElementwiseBackwardRatio * (head_.elementwise_traffic_per_token - fused.chunk_traffic_per_token) * tokens_ +
          fused.backward_traffic_per_token * tokens_;
    } else {  // the final norm's backward, and the two saved gradients scaled in place
      Cur().memory_bytes =
          kElementwiseBackwardRatio *
              ((head_.elementwise_traffic_per_token - fused.chunk_traffic_per_token) * tokens_ +
               static_cast<double>(e_param_) * static_cast<double>(spec.hidden) * tokens_) +
          2.0 * fused.weight_grad_bytes;
    }
    Cur().host_kernels = static_cast<int16_t>(head_.backward_ops);
    Free(Category::kLoss, Stream::kDefault, Tok(head_.saved_per_token));
    Free(Category::kResidual, Stream::kDefault, Tok(residual_));
    int64_t ws = BackwardWorkingSet(head_, grads);
    if (fused.on && !fused.gradients_in_forward) {
      // verl's fused heads: a chunk's transients (or, at its weight GEMM, the rows still live and
      // the [V, H] product) on top of what the ledger has live at the head's node.
      const int64_t rows = model::FusedChunkRows(fused, static_cast<int64_t>(tokens_), spec.vocab_size, spec.hidden);
      const double r = static_cast<double>(rows);
      // From the second chunk on, the loop's variables still hold the chunk before's outputs.
      const double carry = static_cast<double>(tokens_) > r
                               ? fused.backward_carry_bytes + fused.backward_carry_row_bytes * r +
                                     fused.backward_carry_per_token * tokens_
                               : 0.0;
      const double chunk = carry + fused.backward_fixed_bytes +
                           std::max(fused.backward_chunk_row_bytes * r,
                                    fused.backward_dw_row_bytes * r + fused.backward_dw_bytes);
      const int64_t at_node = Tok(fused.backward_point.live_per_token) +
                              static_cast<int64_t>(fused.backward_point.param_grad_fraction * static_cast<double>(grads) + chunk) -
                              grads;
      ws = std::max(ws, at_node);
    }
    Transient(Category::kWorkingSet, Stream::kDefault, ws);
    if (rec_) {
      TFreeAll(&loss_ids_);
      TFree(&residual_id_);
      TWorkingSet(ws, head_);
    }
    if (p_.keep_logits) {
      kept_logits_ = Tok(static_cast<double>(e_param_ * spec.HeadOutputs()));
      Alloc(Category::kLoss, Stream::kDefault, kept_logits_);
      kept_logits_id_ = TAlloc(Stream::kDefault, kept_logits_);
    }
  } else if (seg >= 1) {
    int b = seg - 1;
    double attn = 0, mm = 0;
    BlockForwardFlops(b, &attn, &mm);
    double elem = Blk(b).full.elementwise_traffic_per_token;
    // Recomputation re-runs the forward (full), or its memory-bound part (selective).
    double re_mm = Checkpointed(b) ? 1.0 : 0.0;
    double re_elem = Checkpointed(b) || Selective(b) ? 1.0 : 0.0;
    // Selective (torchtitan op SAC) reruns the mms its policy did not save
    // (BlockActivations::selective_recompute_matmul_flops_per_token).
    const auto sac = ExplicitSac(b);
    double re_sac = re_mm == 0 && re_elem > 0
                        ? (sac ? Blk(b).SacRecomputeMatmulFlopsPerToken(*sac)
                               : Blk(b).selective_recompute_matmul_flops_per_token)
                        : 0;
    Cur().matmul_flops = ((BackwardMatmulRatio(seg) + re_mm) * mm +
                          (kMatmulBackwardRatio + re_mm) * AdapterFlopsPerToken(seg) +
                          (re_mm > 0 ? 0 : TiledRecomputeFlopsPerToken(b)) + re_sac) *
                         tokens_;
    // The backward nodes' kernels (ActivationLedger::backward_ops: about two per forward op, one
    // fewer per frozen weight), plus the recomputed forward.
    Cur().host_kernels = static_cast<int16_t>(Blk(b).full.backward_ops +
                                              (re_elem > 0 ? 1 : 0) * Blk(b).full.forward_ops);
    Cur().host_python_kernels = static_cast<int16_t>(re_elem > 0 ? Blk(b).full.forward_ops : 0);
    // ... and the attention core where its policy keeps none of it (eager attention).
    double re_attn = re_mm == 0 && re_elem > 0
                         ? (sac ? Blk(b).SacRecomputeAttention(*sac) : Blk(b).selective_recompute_attention)
                         : 0;
    Cur().attention_flops = (kAttentionBackwardRatio + re_mm + re_attn) * attn * tokens_;
    Cur().memory_bytes = (kElementwiseBackwardRatio + re_elem) * elem * tokens_;
    Free(SavedCategory(b), SavedPool(b), BlockSavedBytes(b));
    // A reentrant checkpoint's backward (CheckpointFunction.backward) holds the rerun's output and
    // the incoming gradient, each the block's residual, through the whole rerun's backward.
    const int64_t reentrant =
        p_.checkpoint_reentrant && Checkpointed(b) ? 2 * Tok(BlockResidual(b)) : 0;
    Transient(Category::kWorkingSet, Stream::kDefault, BackwardWorkingSet(Blk(b).full, grads) + reentrant);
    if (rec_) {
      TFreeAll(&act_ids_[static_cast<size_t>(b)]);
      TWorkingSet(BackwardWorkingSet(Blk(b).full, grads) + reentrant, Blk(b).full);
    }
    if (SplitBlock(b)) {
      last_backward_ = UlyssesChain(
          UlyssesBackwardPieces(b, Checkpointed(b), Cur().memory_bytes, Cur().host_kernels));
    }
  } else {
    // embedding_dense_backward_cuda zero-fills the whole weight gradient, then scatter-adds the
    // rows; a weight tied to the LM head gets two gradients, which autograd's InputBuffer adds
    // (read both, write one).
    Cur().memory_bytes = 2 * residual_ * tokens_ + static_cast<double>(lookup_grad_bytes_) +
                         3.0 * static_cast<double>(tied_grad_bytes_);
    Cur().host_kernels = 2;
  }
}

// Backward runs segments in reverse. Pre-backward all-gathers a resharded unit and, with
// BACKWARD_PRE, prefetches the next one (FSDP2 default: one unit ahead). Gradients of a unit's
// parameters appear (param dtype, unpadded) in the segment that used them.
void Walker::Backward() {
  bool sync = !p_.no_sync || micro_ == p_.grad_accum - 1;
  backward_cursor_ = 0;
  for (int seg = model::NumSegments(nb_) - 1; seg >= 0; --seg) {
    if (SkippedSegment(seg)) continue;  // the tower did not run: no graph, no hooks
    const auto& starts = starts_[static_cast<size_t>(seg)];
    if (!Backprops(seg)) {
      // Autograd never reaches this segment: no pre-backward all-gather, no compute; units that
      // start here still get their post-backward (the root's final callback) for grads made above.
      for (size_t k = starts.size(); k-- > 0;) PostBackward(static_cast<size_t>(starts[k]), sync);
      continue;
    }
    for (int32_t ei : ends_[static_cast<size_t>(seg)]) {
      auto i = static_cast<size_t>(ei);
      if (units_[i].is_expert) continue;  // one at a time, BackwardExperts
      Unshard(i, false);
      if (p_.backward_prefetch == model::BackwardPrefetch::kPre) PrefetchBackward(seg, last_copy_out_);
    }
    BackwardExperts(seg, true, sync);
    int64_t grads = 0;
    double inplace_bytes = 0;
    for (const auto& [ui, made] : grads_by_segment_[static_cast<size_t>(seg)]) {
      auto i = static_cast<size_t>(ui);
      int64_t g = made;
      if (inplace_accum_[i]) {  // no_sync without a reduce dtype: AccumulateGrad's += in place
        inplace_bytes += 3.0 * static_cast<double>(g);
        continue;
      }
      if (units_[i].is_expert && !gathered_[i]) continue;  // its gradients come with its own pass
      // Each unit's gradients in the caching allocator's 512-byte blocks, as the ledger frees them
      // unit by unit at post-backward: one rounded sum over several units (the root and an
      // expert-parallel unit in one segment) could be less than the units' rounded parts.
      g = RoundToBlock(g);
      unsharded_grad_[i] += g;
      grads += g;
      if (rec_) seg_grad_units_.push_back(ui);
    }
    BackwardCompute(seg, grads);
    Cur().memory_bytes += inplace_bytes;
    BackwardExperts(seg, false, sync);
    for (size_t k = starts.size(); k-- > 0;) {
      if (!units_[static_cast<size_t>(starts[k])].is_expert)
        PostBackward(static_cast<size_t>(starts[k]), sync);
    }
  }
  Begin(OpKind::kPostBackward, Stream::kDefault, -1, -1);
  Dep(last_reduce_);
  ReleaseMicroBatchTensors();  // the micro-batch's inputs go with it
  Free(Category::kReduceScatterBuffers, Stream::kDefault, deferred_rs_);
  deferred_rs_ = 0;
  TFreeAll(&deferred_rs_ids_);
  if (kept_logits_ > 0 && micro_ < p_.grad_accum - 1) {
    Free(Category::kLoss, Stream::kDefault, kept_logits_);
    kept_logits_ = 0;
    TFree(&kept_logits_id_);
  }
}

// The next unit in backward order: the latest-ending unit that ends before `seg` and is neither
// gathered nor already prefetched. BACKWARD_PRE issues it at the current unit's pre-backward
// (after its copy-out); BACKWARD_POST at its post-backward, after its gradient computation.
void Walker::PrefetchBackward(int seg, int32_t dep) {
  // Segments only decrease within a backward pass, so units ending at or after `seg` are done
  // for good: the cursor skips them once.
  while (backward_cursor_ < backward_order_.size() &&
         units_[static_cast<size_t>(backward_order_[backward_cursor_])].last_segment >= seg) {
    ++backward_cursor_;
  }
  for (size_t k = backward_cursor_; k < backward_order_.size(); ++k) {
    auto i = static_cast<size_t>(backward_order_[k]);
    if (gathered_[i] || prefetch_op_[i] >= 0) continue;
    if (SkippedSegment(units_[i].first_segment) || !Backprops(units_[i].last_segment)) continue;
    IssueAllGather(i, dep);
    return;
  }
}

}  // namespace shardtune::sim::internal

namespace shardtune::sim::internal {

// FSDPParamGroup.post_backward: reshard, then foreach_reduce: the compute stream waits for the
// previous unit's reduce-scatter (ReduceScatterState) and releases its input, a flat
// reduce-dtype input of ws x padded shard is allocated and the unsharded grads copied in and
// dropped; the output (padded shard, reduce-scatter stream) becomes the sharded grads or is
// added into them. HSDP then all-reduces the shard across replicas; offload copies it D2H.
void Walker::PostBackward(size_t i, bool sync) {
  const auto& u = units_[i];
  auto unit = static_cast<int32_t>(i);
  int32_t post = Begin(OpKind::kPostBackward, Stream::kDefault, unit, -1);
  // The post-backward hook: reshard + foreach_reduce in Python. A unit backward never reached (a
  // frozen prefix, resharded after forward) gets its post_backward from the root's final
  // callback (_root_post_backward_final_callback), which finds it sharded and without gradients
  // and returns (FSDPParamGroup.post_backward: fsdp_params_with_grad empty): Python bookkeeping
  // of tens of microseconds, not a hook's reshard and reduce, so no hook is charged.
  Cur().host_hooks = grad_shard_numel_[i] == 0 && !gathered_[i] ? 0 : 1;
  Reshard(i);
  if (p_.backward_prefetch == model::BackwardPrefetch::kPost) {
    PrefetchBackward(u.first_segment, last_backward_);
    if (Cur().kind != OpKind::kPostBackward) post = Begin(OpKind::kPostBackward, Stream::kDefault, unit, -1);
  }
  // foreach_reduce covers only parameters with a gradient (FSDPParamGroup.post_backward:
  // fsdp_params_with_grad); a unit with none reduces nothing.
  if (grad_shard_numel_[i] == 0) return;
  if (sync) {
    ReduceGradients(i, post);
  } else {
    KeepGradientsForNoSync(i);
  }
}

// set_requires_gradient_sync(False): to_accumulated_grad_if_needed keeps an fp32 copy of the
// whole unsharded grad until the syncing micro-batch; without a reduce dtype the param-dtype .grad
// stays and is accumulated in place.
void Walker::KeepGradientsForNoSync(size_t i) {
  const auto& u = units_[i];
  if (e_reduce_ != e_param_) {
    if (accumulated_[i] == 0) {
      accumulated_[i] = 0;
      for (const auto& prm : u.params)
        accumulated_[i] += prm.requires_grad ? prm.numel() * e_reduce_ : 0;
      Alloc(Category::kNoSyncGrads, Stream::kDefault, accumulated_[i]);
      if (rec_) {  // to_accumulated_grad_if_needed: grad.to(reduce_dtype) per parameter
        for (const auto& prm : u.params) {
          if (prm.requires_grad) nosync_ids_[i].push_back(TAlloc(Stream::kDefault, prm.numel() * e_reduce_));
        }
      }
    }
    Cur().memory_bytes = static_cast<double>(unsharded_grad_[i] + 2 * accumulated_[i]);
    Free(Category::kUnshardedGrads, Stream::kDefault, unsharded_grad_[i]);
    unsharded_grad_[i] = 0;
    if (rec_) TFreeAll(&ugrad_ids_[i]);
  } else {
    inplace_accum_[i] = true;
  }
}

// foreach_reduce of a syncing micro-batch: the reduce-scatter input (the copy-in of the unsharded
// grads, which are freed), the reduce-scatter (a copy on a one-rank mesh), the sharded grads or
// their accumulation, the replicas' all-reduce under HSDP, and the offload copy to the host.
void Walker::ReduceGradients(size_t i, int32_t post) {
  auto unit = static_cast<int32_t>(i);
  Dep(last_reduce_);
  Free(Category::kReduceScatterBuffers, Stream::kDefault, deferred_rs_);
  int64_t shard = grad_shard_numel_[i];
  int64_t rs_in = GradGatheredNumel(i) * e_reduce_;
  Alloc(Category::kReduceScatterBuffers, Stream::kDefault, rs_in);
  Cur().memory_bytes = static_cast<double>(unsharded_grad_[i] + accumulated_[i] + rs_in);
  Free(Category::kUnshardedGrads, Stream::kDefault, unsharded_grad_[i]);
  unsharded_grad_[i] = 0;
  inplace_accum_[i] = false;
  Free(Category::kNoSyncGrads, Stream::kDefault, accumulated_[i]);
  accumulated_[i] = 0;
  deferred_rs_ = rs_in;
  if (rec_) {  // the reduce-scatter input, one flat buffer; the grads copied in are dropped
    TFreeAll(&deferred_rs_ids_);
    deferred_rs_ids_.push_back(TAlloc(Stream::kDefault, rs_in));
    TFreeAll(&ugrad_ids_[i]);
    TFreeAll(&nosync_ids_[i]);
  }
  int64_t rs_out = shard * e_reduce_;
  if (units_[i].ShardRanks(n_) > 1) {
    last_reduce_ = Begin(OpKind::kReduceScatter, Stream::kReduceScatter, unit, -1);
    Dep(post);
    Cur().collective = profiles::Collective::kReduceScatter;
    Cur().comm_bytes = rs_in;
    if (units_[i].expert_parallel) Cur().group = kExpertShardGroup;
    if (s_.reduce_scatter_receive_buffer) {  // freed with the input, at the next reduction
      Alloc(Category::kReduceScatterBuffers, Stream::kDefault, rs_in);
      deferred_rs_ += rs_in;
      if (rec_) deferred_rs_ids_.push_back(TAlloc(Stream::kDefault, rs_in));
    }
  } else {
    // A one-rank mesh reduces nothing: foreach_reduce copies the reduce-scatter input into the
    // output on the reduce-scatter stream (reduce_output.copy_(reduce_scatter_input); earlier
    // releases call NCCL's reduce-scatter, which on one rank copies the same bytes).
    last_reduce_ = Begin(OpKind::kReduceScatter, Stream::kReduceScatter, unit, -1);
    Dep(post);
    Cur().collective = profiles::Collective::kReduceScatter;
    Cur().memory_bytes = 2.0 * static_cast<double>(rs_out);
  }
  const int32_t first_reduce_op = last_reduce_;
  bool offloaded = p_.offload != model::Offload::kNone;
  // After the reduction, on the stream that ran it last (foreach_reduce's post_reduce_stream):
  // the cast of the output to the sharded parameter's dtype when the reduce dtype differs
  // (_to_dtype_if_needed), and accumulating into an earlier micro-batch's sharded gradient, which
  // reads both and writes one (sharded_param.grad._local_tensor += new_sharded_grad).
  int64_t e_master = model::BytesPerElement(p_.master_dtype);
  double post_reduce_bytes = static_cast<double>(shard) *
                             static_cast<double>((e_reduce_ != e_master ? e_reduce_ + e_master : 0) +
                                                 (!offloaded && has_sharded_grad_[i] ? 3 * e_master : 0));
  if (offloaded || has_sharded_grad_[i]) {
    // Offload: copied to the host's grads; accumulation: sharded_grad += output, then freed.
    Transient(Category::kReduceScatterBuffers, Stream::kReduceScatter, rs_out);
    TTransient(Stream::kReduceScatter, rs_out);
  } else {
    sharded_grad_[i] = shard * model::BytesPerElement(p_.master_dtype);
    Alloc(Category::kShardedGrads, Stream::kReduceScatter, sharded_grad_[i]);
    // The reduce output, one flat buffer on the reduce-scatter stream; the sharded .grad of each
    // parameter is a view into it (foreach_reduce: torch.as_strided(reduce_output, ...)).
    if (rec_) sharded_grad_id_[i] = TAlloc(Stream::kReduceScatter, sharded_grad_[i]);
    has_sharded_grad_[i] = true;
  }
  if (s_.replicas > 1) {
    last_reduce_ = Begin(OpKind::kAllReduce, Stream::kReduceScatter, unit, -1);
    Dep(post);
    Cur().collective = profiles::Collective::kAllReduce;
    Cur().comm_bytes = rs_out;
    Cur().group = 1;
  }
  // An fp16 reduction divides by the data-parallel size around NCCL's sum to avoid overflow
  // (_get_gradient_divide_factors: pre-divide the input on the reduce-scatter stream by the
  // largest power of two p with p^2 < factor, post-divide the output by the rest; fp32 and bf16
  // use ReduceOp.AVG and launch no division).
  if (p_.reduce_dtype == model::DType::kFp16) {
    int factor = n_ * s_.replicas, pre = 1;
    while (factor % pre == 0 && factor / pre > pre) pre *= 2;
    if (pre != 1) prog_->ops[static_cast<size_t>(first_reduce_op)].memory_bytes += 2.0 * static_cast<double>(rs_in);
    if (static_cast<double>(factor) / pre != 1.0) post_reduce_bytes += 2.0 * static_cast<double>(rs_out);
  }
  prog_->ops[static_cast<size_t>(last_reduce_)].memory_bytes += post_reduce_bytes;
  if (offloaded) {
    last_d2h_ = Begin(OpKind::kDeviceToHost, Stream::kCopy, unit, -1);
    Dep(last_reduce_);
    Dep(post);
    Cur().comm_bytes = rs_out;
    Cur().group = 2;
  }
}

// The optimizer state OptimizerStep creates (AdamW: two moments; SGD: momentum; Adafactor:
// factored second moments), on the GPU unless offloaded.
int64_t Walker::OptimizerStateBytes() const {
  if (!p_.Trains() || p_.offload != model::Offload::kNone) return 0;
  int64_t e = model::BytesPerElement(p_.master_dtype);
  switch (p_.optimizer) {
    case model::Optimizer::kAdamW: return 2 * total_grad_shard_numel_ * e;
    case model::Optimizer::kSgd: return total_grad_shard_numel_ * e;
    case model::Optimizer::kAdafactor: return factored_numel_ * e;
  }
  return 0;
}

ForwardEndBound Walker::ForwardEndLowerBound() const {
  ForwardEndBound out;
  int64_t& states = out.states_bytes;
  states = s_.workspace_bytes + OptimizerStateBytes();
  if (p_.offload != model::Offload::kAll) {
    for (int64_t bytes : shard_bytes_) states += bytes;
  }
  // Forward unshards every unit but the experts (ForwardExperts gathers and reshards them one at
  // a time); those it does not reshard stay gathered into backward.
  for (size_t i = 0; i < units_.size(); ++i) {
    if (SkippedSegment(units_[i].first_segment)) continue;  // a tower that does not run
    if (!units_[i].is_expert && !ReshardAfterForward(units_[i])) states += GatheredBytes(i);
  }
  int64_t& act = out.activations_bytes;
  // Offloaded blocks' GPU copies are gone by the forward's end (the last block's commit drops the
  // one before it).
  for (int b = 0; b < nb_; ++b) act += OffloadsActivations(b) ? 0 : BlockSavedBytes(b);
  if (p_.Trains()) {
    // ForwardCompute: the residual stream from the embeddings (freed by the head's
    // BackwardCompute) and, in the head's forward op, first its working set (logits, the fp32
    // upcast and the loss's temporaries, freed at once), then what the head and loss saved:
    // every block's saved activations are alive at both moments.
    act += Tok(residual_) + std::max(Tok(head_.forward_peak_per_token - residual_),
                                     Tok(head_.saved_per_token));
  }
  BackwardLowerBounds(&out);
  return out;
}

// ForwardEndBound's backward moments: each block's backward op in step 1's first micro-batch.
void Walker::BackwardLowerBounds(ForwardEndBound* out) const {
  const int L = s_.spec->num_layers;
  // Not modelled for a VL model's tower (its blocks' moments are not in this figure).
  if (!p_.Trains() || model::ChangesTrainability(*s_.spec, p_) || s_.spec->moe.enabled() || L < 1 || nv_ > 0) return;
  int64_t base = s_.workspace_bytes + OptimizerStateBytes();
  if (p_.offload != model::Offload::kAll) {
    for (int64_t bytes : shard_bytes_) base += bytes;
  }
  const auto L_size = static_cast<size_t>(L);
  out->backward_states_bytes.assign(L_size, 0);
  out->backward_prefetch_bytes.assign(L_size, 0);
  out->backward_activations_bytes.assign(L_size, 0);
  int64_t saved_below = 0;  // blocks 0 .. b-1
  for (int b = 0; b < L; ++b) {
    const int f = b + 1;  // block b's segment
    int64_t states = base;
    int64_t prefetch = 0;
    int64_t last_reduced_first = -1, last_reduced_rs = 0;
    for (size_t i = 0; i < units_.size(); ++i) {
      const auto& u = units_[i];
      if (u.first_segment <= f) {
        // Post-backward not yet run: gathered if forward kept it or it spans the block (Unshard
        // at its last segment), and its gradients from the segments after the block unreduced.
        bool kept = !ReshardAfterForward(u);
        if (kept || u.last_segment >= f) states += GatheredBytes(i);
      } else if (!p_.no_sync &&
                 (last_reduced_first < 0 || u.first_segment < last_reduced_first)) {
        // Reduced already; the one whose post-backward ran last (the least first segment above
        // the block) still holds its reduce-scatter input.
        last_reduced_first = u.first_segment;
        last_reduced_rs = GradGatheredNumel(i) * e_reduce_;
      }
    }
    states += last_reduced_rs;
    // Unsharded gradients made by the segments after the block, of units not reduced yet.
    for (size_t g = static_cast<size_t>(f) + 1; g < grads_by_segment_.size(); ++g) {
      for (const auto& [ui, bytes] : grads_by_segment_[g]) {
        if (units_[static_cast<size_t>(ui)].first_segment <= f) states += bytes;
      }
    }
    // As if BACKWARD_PRE (the caller counts it only then): the first unit in backward order
    // that ends below the block and that forward resharded. PrefetchBackward, called after the
    // Unshard of every unit at the segment where it ends (the head's, at least), has issued its
    // all-gather, and its copy-out is still to come.
    for (int32_t k : backward_order_) {
      const auto& u = units_[static_cast<size_t>(k)];
      if (u.last_segment >= f || !ReshardAfterForward(u)) continue;
      prefetch = GatheredNumel(static_cast<size_t>(k)) * e_param_;
      break;
    }
    const auto bi = static_cast<size_t>(b);
    out->backward_states_bytes[bi] = states;
    out->backward_prefetch_bytes[bi] = prefetch;
    // With activation offload the blocks below are on the host but the one reloaded meanwhile.
    const int64_t resident_below =
        b >= 1 && OffloadsActivations(b - 1) ? saved_below + BlockSavedBytes(b - 1) : saved_below;
    out->backward_activations_bytes[bi] = resident_below + BackwardWorkingSet(Blk(b).full, 0);
    if (!OffloadsActivations(b)) saved_below += BlockSavedBytes(b);
  }
}

// torch.optim.AdamW (foreach, the CUDA default): exp_avg and exp_avg_sq are created at the first
// step(); _multi_tensor_adam allocates exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs) for the whole
// param group; fused has no full-size temporary; the for-loop path ~2 tensors of the largest param.
// Traffic per fp32 element: step_walk_rules.h (kForeachAdamWBytesPerElement and its siblings).
void Walker::OptimizerStep() {
  micro_ = 0;
  bool offloaded = p_.offload != model::Offload::kNone;
  last_optimizer_ = Begin(OpKind::kOptimizer, offloaded ? Stream::kHost : Stream::kDefault, -1, -1);
  Dep(last_reduce_);
  Dep(last_d2h_);
  int64_t shard = total_grad_shard_numel_, largest = largest_param_shard_;
  int64_t e = model::BytesPerElement(p_.master_dtype);
  double traffic_per_elem = kForeachAdamWBytesPerElement;
  if (p_.optimizer == model::Optimizer::kSgd) traffic_per_elem = kSgdBytesPerElement;
  else if (p_.optimizer_impl == model::OptimizerImpl::kFused) traffic_per_elem = kFusedAdamWBytesPerElement;
  Cur().memory_bytes = traffic_per_elem * static_cast<double>(shard);
  // Its host cost is per parameter tensor (CostConstants::host_per_optimizer_param: the launches,
  // issued from C++ inside each foreach op, are part of it, so they are counted, not charged).
  if (optimizer_launches_ < 0) optimizer_launches_ = OptimizerLaunches();  // once per walk
  if (optimizer_params_ < 0) optimizer_params_ = static_cast<int64_t>(TrainableShardNumels().size());
  Cur().host_kernels = static_cast<int16_t>(std::min<int64_t>(INT16_MAX, optimizer_launches_));
  Cur().host_params = static_cast<int16_t>(std::min<int64_t>(INT16_MAX, optimizer_params_));
  if (!offloaded) {
    int64_t state = OptimizerStateBytes();
    if (!optimizer_state_) {
      Alloc(Category::kOptimizerState, Stream::kDefault, state);
      OptimizerStateTensors(state);
    }
    optimizer_state_ = true;
    if (p_.optimizer != model::Optimizer::kSgd) {
      switch (p_.optimizer_impl) {
        case model::OptimizerImpl::kForeach:
          Transient(Category::kOptimizerTemp, Stream::kDefault, shard * e);
          ForeachSqrtTensors();
          break;
        case model::OptimizerImpl::kForLoop:
          Transient(Category::kOptimizerTemp, Stream::kDefault, 2 * largest * e);
          TTransient(Stream::kDefault, 2 * largest * e);
          break;
        case model::OptimizerImpl::kFused: break;
      }
    }
  }
  if (p_.offload == model::Offload::kOptimizer) {  // ZeRO-Offload: updated params back to the GPU
    last_optimizer_ = Begin(OpKind::kHostToDevice, Stream::kCopy, -1, -1);
    Dep(prog_->ops.size() >= 2 ? static_cast<int32_t>(prog_->ops.size()) - 2 : -1);
    Cur().comm_bytes = shard * e_param_;
    Cur().group = 2;
  }
  Begin(OpKind::kZeroGrad, Stream::kDefault, -1, -1);
  for (size_t i = 0; i < sharded_grad_.size(); ++i) {
    Free(Category::kShardedGrads, Stream::kReduceScatter, sharded_grad_[i]);
    sharded_grad_[i] = 0;
    has_sharded_grad_[i] = false;
    if (rec_) TFree(&sharded_grad_id_[i]);
  }
  Free(Category::kLoss, Stream::kDefault, kept_logits_);
  kept_logits_ = 0;
  TFree(&kept_logits_id_);
}

int64_t Walker::OptimizerLaunches() const {
  return s_.optimizer_launches >= 0 ? s_.optimizer_launches : OptimizerKernelLaunches(*s_.spec, units_, p_, n_);
}

std::vector<int64_t> Walker::TrainableShardNumels() const { return sim::TrainableShardNumels(*s_.spec, units_, p_, n_); }

// Optimizer state, created at the first step() (adam.py _init_group: exp_avg = zeros_like(p),
// then exp_avg_sq, parameter by parameter; SGD: momentum_buffer = clone(grad)); Adafactor's
// factored moments stay one lump of `state` bytes.
void Walker::OptimizerStateTensors(int64_t state) {
  if (!rec_) return;
  int64_t e = model::BytesPerElement(p_.master_dtype);
  if (p_.optimizer == model::Optimizer::kAdafactor) {
    TAlloc(Stream::kDefault, state);
    return;
  }
  int per_param = p_.optimizer == model::Optimizer::kAdamW ? 2 : 1;
  for (int64_t ps : TrainableShardNumels()) {
    for (int k = 0; k < per_param; ++k) TAlloc(Stream::kDefault, ps * e);
  }
}

// _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), one tensor per
// parameter, all alive until the update is done.
void Walker::ForeachSqrtTensors() {
  if (!rec_) return;
  int64_t e = model::BytesPerElement(p_.master_dtype);
  std::vector<int32_t> ids;
  for (int64_t ps : TrainableShardNumels()) ids.push_back(TAlloc(Stream::kDefault, ps * e));
  TFreeAll(&ids);
}

}  // namespace shardtune::sim::internal
