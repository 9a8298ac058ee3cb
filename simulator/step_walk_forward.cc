// Walker: program building, start-up, all-gather / reshard rules and forward (FSDP2's
// FSDPParamGroup.pre_forward / post_forward, foreach_all_gather).
#include <algorithm>

#include "model/errors.h"
#include "model/module_tree.h"
#include "model/trainable.h"
#include "simulator/step_walk_rules.h"

namespace shardtune::sim::internal {

using model::Plan;

Walker::Walker(const WalkSetup& s, StepProgram* prog)
    : s_(s), units_(*s.units), block_(*s.block), head_(*s.head), prog_(prog), p_(*s.plan) {
  n_ = s.shard_n;
  // Ulysses: each rank of a cp group holds S / cp positions of the same B sequences.
  tokens_ =
      static_cast<double>(p_.micro_batch) * static_cast<double>(s.seq_len / std::max(1, p_.cp));
  a2a_ = model::UlyssesAllToAllPerLayer(*s.spec, p_, s.seq_len);
  ep_a2a_ = model::ExpertAllToAllPerLayer(*s.spec, p_, static_cast<int64_t>(tokens_), s.moe_capacity_factor);
  e_param_ = model::BytesPerElement(p_.param_dtype);
  e_reduce_ = model::BytesPerElement(p_.reduce_dtype);
  residual_ = model::ResidualPerToken(*s.spec, model::ActivationOptionsFor(p_, s.seq_len));
  size_t u = s.units->size();
  gathered_.assign(u, false);
  has_sharded_grad_.assign(u, false);
  inplace_accum_.assign(u, false);
  prefetch_op_.assign(u, -1);
  prefetched_.assign(u, 0);
  unsharded_grad_.assign(u, 0);
  accumulated_.assign(u, 0);
  sharded_grad_.assign(u, 0);
  nb_ = s.spec->NumBlocks();
  nv_ = s.spec->VisionBlocks();
  if (nv_ > 0) {
    // The tower's residual stream [patches, C] per text token (the patch embedding's output).
    vision_residual_ = s.vision.patches_per_token * static_cast<double>(s.spec->vision.hidden) *
                       static_cast<double>(model::BytesPerElement(p_.param_dtype));
    // Qwen2VLImageProcessor's pixel_values: float32 flattened patches (verl and ROLL move the
    // micro-batch's multi_modal_inputs to the device as they are; the patch embedding casts).
    const model::VisionSpec& v = s.spec->vision;
    pixels_.per_token = s.vision.patches_per_token *
                    static_cast<double>(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size) * 4.0;
    // Qwen's 2-D rotary (rot_pos_emb; Qwen*_VisionRotaryEmbedding's inv_freq is built in fp32):
    // position_embeddings = (emb.cos(), emb.sin()), [patches, head_dim] each. SigLIP has none.
    if (v.kind != model::VisionKind::kSiglip) {
      vision_rotary_.per_token = s.vision.patches_per_token * 2.0 * static_cast<double>(v.head_dim()) * 4.0;
    }
  }
  if (!s.spec->mrope_section.empty() && p_.modeling == model::Modeling::kHf) {
    mrope_tables_.per_token = 2.0 * 3.0 * static_cast<double>(s.spec->q_dim()) / s.spec->num_heads *
                    static_cast<double>(model::BytesPerElement(p_.param_dtype));
  }
  auto segs = static_cast<size_t>(model::NumSegments(nb_));
  starts_.assign(segs, {});
  ends_.assign(segs, {});
  experts_starting_.assign(segs, {});
  grads_by_segment_.assign(segs, {});
  shard_numel_.resize(u);
  for (const auto& unit : units_) ep_units_ = ep_units_ || unit.expert_parallel;
  if (ep_units_) gathered_numel_.resize(u);
  std::vector<int64_t> by_seg(segs, 0);
  std::vector<size_t> touched;
  for (size_t i = 0; i < u; ++i) {
    const auto& unit = units_[i];
    shard_numel_[i] = unit.PaddedShardNumel(n_);
    if (ep_units_) gathered_numel_[i] = unit.GatheredNumel(n_);
    total_shard_numel_ += shard_numel_[i];
    for (const auto& prm : unit.params) {
      if (!prm.requires_grad || !p_.Trains()) continue;  // the optimizer holds trainable ones only
      ++param_tensors_;
      int64_t ps = prm.PaddedShardNumel(n_);
      largest_param_shard_ = std::max(largest_param_shard_, ps);
      // Adafactor: row and column second moments for matrices, a full one for vectors.
      factored_numel_ += prm.inner > 1 ? (prm.dim0 + n_ - 1) / n_ + prm.inner : ps;
    }
    backward_order_.push_back(static_cast<int32_t>(i));
    starts_[static_cast<size_t>(unit.first_segment)].push_back(static_cast<int32_t>(i));
    if (unit.is_expert) experts_starting_.at(static_cast<size_t>(unit.first_segment)).push_back(static_cast<int32_t>(i));
    ends_[static_cast<size_t>(unit.last_segment)].push_back(static_cast<int32_t>(i));
    // The unit's trainable bytes per segment, in segment order (a unit spans few segments: one
    // scratch vector over all segments, cleared where it was touched).
    touched.clear();
    for (const auto& prm : unit.params) {
      if (!prm.requires_grad || !p_.Trains()) continue;
      auto g = static_cast<size_t>(prm.segment);
      if (by_seg[g] == 0) touched.push_back(g);
      by_seg[g] += prm.numel() * e_param_;
    }
    std::sort(touched.begin(), touched.end());
    for (size_t g : touched) {
      if (by_seg[g] > 0) grads_by_segment_[g].push_back({static_cast<int32_t>(i), by_seg[g]});
      by_seg[g] = 0;
    }
  }
  std::stable_sort(backward_order_.begin(), backward_order_.end(), [&](int32_t a, int32_t b) {
    return units_[static_cast<size_t>(a)].last_segment > units_[static_cast<size_t>(b)].last_segment;
  });
  InitTrainability();
  rec_ = s.record_tensors;
  if (rec_) {
    ag_id_.assign(u, -1);
    sharded_grad_id_.assign(u, -1);
    gathered_ids_.assign(u, {});
    ugrad_ids_.assign(u, {});
    nosync_ids_.assign(u, {});
    act_ids_.assign(static_cast<size_t>(nb_), {});
  }
  offload_copy_op_.assign(static_cast<size_t>(nb_), -1);
  reload_op_.assign(static_cast<size_t>(nb_), -1);
}

int32_t Walker::Begin(OpKind kind, Stream stream, int32_t unit, int32_t segment) {
  // Built in place: a local op copied in reads back the small fields just stored into it as
  // 16-byte words, which stalls store forwarding (the walk's hottest line in perf, #18). Copied
  // from a constant blank op rather than value-initialised: GCC zeroes the 88 bytes with
  // `rep stos`, whose start-up cost made it half of this function's time in perf.
  static const ProgramOp kBlank{};
  ProgramOp& op = prog_->ops.emplace_back(kBlank);
  op.kind = kind;
  op.stream = stream;
  op.step = step_;
  op.micro = micro_;
  op.unit = unit >= 0 ? unit + unit_offset_ : unit;
  op.segment = segment;
  op.mem_begin = op.mem_end = static_cast<uint32_t>(prog_->actions.size());
  const auto id = static_cast<int32_t>(prog_->ops.size()) - 1;
  // An activation-offload commit made the compute stream wait for a copy: the next compute op
  // does (the copy-outs between them are not held back: an approximation of the stream wait).
  if (wait_for_copy_ >= 0 && (kind == OpKind::kForward || kind == OpKind::kBackward)) {
    const int32_t copy = wait_for_copy_;
    wait_for_copy_ = -1;
    Dep(copy);
  }
  return id;
}

void Walker::Dep(int32_t op) {
  if (op < 0) return;
  for (auto& d : Cur().deps) {
    if (d == op) return;
    if (d < 0) { d = op; return; }
  }
  SHARDTUNE_CHECK(false) << "more than 3 dependencies on " << ToString(Cur().kind);
}

void Walker::Alloc(Category c, Stream pool, int64_t bytes) {
  if (bytes <= 0) return;
  MemAction& m = prog_->actions.emplace_back();  // in place, as Begin
  m.category = Cat(c);
  m.pool = pool;
  m.bytes = bytes;
  Cur().mem_end = static_cast<uint32_t>(prog_->actions.size());
}

void Walker::Free(Category c, Stream pool, int64_t bytes) {
  if (bytes <= 0) return;
  MemAction& m = prog_->actions.emplace_back();
  m.category = Cat(c);
  m.pool = pool;
  m.bytes = -bytes;
  Cur().mem_end = static_cast<uint32_t>(prog_->actions.size());
}

void Walker::Transient(Category c, Stream pool, int64_t bytes) {
  Alloc(c, pool, bytes);
  Free(c, pool, bytes);
}

int32_t Walker::TAlloc(Stream pool, int64_t bytes) {
  if (!rec_ || bytes <= 0) return -1;
  int32_t id = prog_->num_tensor_ids++;
  prog_->tensors.push_back({static_cast<uint32_t>(prog_->ops.size() - 1), id, bytes, pool});
  return id;
}

void Walker::TFree(int32_t* id) {
  if (*id < 0) return;
  prog_->tensors.push_back({static_cast<uint32_t>(prog_->ops.size() - 1), *id, 0, Stream::kDefault});
  *id = -1;
}

void Walker::TFreeAll(std::vector<int32_t>* ids) {
  for (int32_t& id : *ids) TFree(&id);
  ids->clear();
}

void Walker::TWorkingSet(int64_t bytes, const model::ActivationLedger& l) {
  if (!rec_ || bytes <= 0) return;
  double largest = 0;
  for (const auto& t : l.saved) largest = std::max(largest, t.bytes_per_token);
  int64_t chunk = largest > 0 ? std::max<int64_t>(1, Tok(largest)) : bytes;
  std::vector<int32_t> ids;
  for (int64_t left = bytes; left > 0; left -= chunk) ids.push_back(TAlloc(Stream::kDefault, std::min(chunk, left)));
  TFreeAll(&ids);
}

void Walker::TAllocGrads(size_t i, int seg) {
  if (!rec_) return;
  for (const auto& prm : units_[i].params) {  // AccumulateGrad: .grad per parameter, param dtype
    if (!prm.requires_grad || !p_.Trains() || (seg >= 0 && prm.segment != seg)) continue;
    ugrad_ids_[i].push_back(TAlloc(Stream::kDefault, prm.numel() * e_param_));
  }
}

std::vector<int64_t> Walker::SavedTensorBytes(int block) const {
  std::vector<int64_t> out;
  if (BlockFixedSaved(block) > 0) out.push_back(BlockFixedSaved(block));
  double saved = BlockSaved(block);
  if (saved <= 0) return out;
  if (Checkpointed(block) || Selective(block)) {
    out.push_back(Tok(saved));
    return out;
  }
  for (const auto& t : Blk(block).full.saved) out.push_back(Tok(t.bytes_per_token));
  return out;
}

void Walker::TAllocSaved(int block, Stream pool) {
  if (!rec_) return;
  auto& ids = act_ids_[static_cast<size_t>(block)];
  for (int64_t bytes : SavedTensorBytes(block)) ids.push_back(TAlloc(pool, bytes));
}

bool Walker::OffloadsActivations(int block) const {
  // verl's handler over every layer but the last, or over the first k blocks and the one after
  // (Plan::activation_offload_blocks).
  return block < model::ActivationOffloadedBlocks(p_, nb_) && BlockSavedBytes(block) > 0;
}

Stream Walker::SavedPool(int block) const { return OffloadsActivations(block) ? Stream::kCopy : Stream::kDefault; }

// AsyncDoubleBufferGroupOffloadHandler.synchronize_on_group_commit_forward with layer_window_map[i]
// = i + 1 (num_offload_group = layers - 1): at block b's commit the compute stream and the d2h
// stream wait for each other, block b-1's GPU copies are dropped (tensor_tag_to_buf = None; the
// saved-tensor hooks hold only their host copies), and block b's bulk offload starts on the d2h
// stream. Block 0's starts at its own commit (current_group == 0).
void Walker::CommitActivationOffload(int block) {
  if (p_.activation_offload == model::ActivationOffload::kNone) return;
  const auto bi = static_cast<size_t>(block);
  const auto compute = static_cast<int32_t>(prog_->ops.size()) - 1;
  if (block >= 1 && OffloadsActivations(block - 1)) {
    const int prev = block - 1;
    Free(SavedCategory(prev), Stream::kDefault, BlockSavedBytes(prev));
    if (rec_) TFreeAll(&act_ids_[bi - 1]);
    wait_for_copy_ = offload_copy_op_[bi - 1];
  }
  if (!OffloadsActivations(block)) return;
  offload_copy_op_[bi] = Begin(OpKind::kDeviceToHost, Stream::kCopy, -1, model::BlockSegment(block));
  Dep(compute);
  Cur().comm_bytes = BlockSavedBytes(block);
  Cur().group = 2;
  // Pinned host blocks from the CachingHostAllocator, each saved tensor its own power-of-two block
  // (SynchronizedGroupOffloadHandler.offload: torch.empty(pin_memory=True) per tensor).
  if (step_ == 0 && micro_ == 0) {
    for (int64_t bytes : SavedTensorBytes(block)) {
      uint64_t p = 1;
      while (p < static_cast<uint64_t>(bytes)) p <<= 1;
      prog_->activation_offload_pinned_bytes += static_cast<int64_t>(p);
    }
  }
}

// AsyncDoubleBufferGroupOffloadHandler.on_group_commit_backward at block b: the h2d stream waits for
// the compute so far, the compute stream for the reloads issued so far (block b's own, issued at
// block b+1), then block b-1's copies come back on the h2d stream (bulk_reload_group), allocated
// in that stream's pool.
void Walker::ReloadActivations(int block) {
  if (p_.activation_offload == model::ActivationOffload::kNone || block < 1 || !OffloadsActivations(block - 1)) return;
  const int prev = block - 1;
  const auto pi = static_cast<size_t>(prev);
  const int32_t after = last_backward_;
  reload_op_[pi] = Begin(OpKind::kHostToDevice, Stream::kCopy, -1, model::BlockSegment(prev));
  Dep(after);
  Cur().comm_bytes = BlockSavedBytes(prev);
  Cur().group = 2;
  Alloc(SavedCategory(prev), Stream::kCopy, BlockSavedBytes(prev));
  TAllocSaved(prev, Stream::kCopy);
}

void Walker::Run() {
  // About 2 ops and 4 memory actions per unit per pass; reserving avoids regrowth.
  size_t u = units_.size();
  auto segs = static_cast<size_t>(model::NumSegments(nb_));
  int walked = s_.skip_repeated_micro_batches
                   ? std::min(kWalkedLeadingMicroBatches + 1, p_.grad_accum) : p_.grad_accum;
  size_t per_step = (u * 8 + segs * 2) * static_cast<size_t>(walked) + 8;
  prog_->ops.reserve(2 * per_step + 1);
  prog_->actions.reserve(4 * per_step + u);
  // Persistent sharded parameters: one padded buffer per parameter (_init_sharded_param).
  Begin(OpKind::kStartup, Stream::kDefault, -1, -1);
  Alloc(Category::kWorkspaces, Stream::kDefault, s_.workspace_bytes);
  TAlloc(Stream::kDefault, s_.workspace_bytes);
  AllocShardedParams();
  if (s_.reference != nullptr) {
    ref_ = std::make_unique<Walker>(*s_.reference, prog_);
    ref_->unit_offset_ = static_cast<int32_t>(prog_->unit_names.size());
    ref_->is_reference_ = true;
    for (const auto& ru : *s_.reference->units) prog_->unit_names.push_back("reference " + ru.name);
    ref_->StartReference();
  }
  for (step_ = 0; step_ < 2; ++step_) {
    size_t first_op = prog_->ops.size();
    for (micro_ = 0; micro_ < p_.grad_accum; ++micro_) {
      // Micro-batches 4 .. grad_accum-1 repeat the third (WalkSetup::skip_repeated_micro_batches).
      bool skip = s_.skip_repeated_micro_batches ||
                  (s_.skip_repeated_micro_batches_in_step0 && step_ == 0);
      if (skip && micro_ == kWalkedLeadingMicroBatches) {
        micro_ = static_cast<int16_t>(std::max(kWalkedLeadingMicroBatches, p_.grad_accum - 1));
      }
      Forward();
      if (ref_) {
        // DPOTrainer._compute_loss: `outputs` holds the policy's logits [rows, S, V] through the
        // reference's forward and the loss; they go when the function returns, before backward.
        // In fp32 selective_log_softmax's logsumexp saves them anyway (the head's saved bytes).
        const int64_t held = p_.loss_kernel == model::LossKernel::kTrlLogps && p_.param_dtype != model::DType::kFp32
                                 ? Tok(static_cast<double>(e_param_ * s_.spec->HeadOutputs()))
                                 : 0;
        Alloc(Category::kLoss, Stream::kDefault, held);
        int32_t held_id = TAlloc(Stream::kDefault, held);
        if (s_.reference->shares_policy_units) ref_->AdoptGathered(gathered_);
        ref_->ReferenceForward(step_, micro_);
        Free(Category::kLoss, Stream::kDefault, held);
        TFree(&held_id);
      }
      if (p_.Trains()) Backward();
    }
    // The loop syncs once per step (loss.item() for logging): the host issues step 1 only after
    // step 0 finished on the GPU.
    if (step_ == 1 && first_op < prog_->ops.size()) prog_->ops[first_op].host_sync = true;
    if (p_.Trains()) OptimizerStep();  // an inference role has no optimizer
  }
}

Walker::~Walker() = default;

void Walker::AllocShardedParams() {
  if (p_.offload == model::Offload::kAll) return;  // on the host
  for (int64_t bytes : shard_bytes_) Alloc(Category::kShardedParams, Stream::kDefault, bytes);
  if (rec_) {  // fully_shard + to_empty: one padded shard per parameter (_init_sharded_param)
    for (const auto& u : units_) {
      for (const auto& prm : u.params) TAlloc(Stream::kDefault, prm.PaddedShardNumel(n_) * ShardedBytesPerElement(p_, prm));
    }
  }
}

// TRL's prepare_fsdp: fully_shard / FSDP(...) of the reference copy, its shards resident from the
// start (trl/models/utils.py); a policy with its adapters off has none of its own.
void Walker::StartReference() {
  if (!s_.shares_policy_units) AllocShardedParams();
}

void Walker::AdoptGathered(const std::vector<bool>& gathered) {
  borrowed_.assign(units_.size(), false);
  for (size_t i = 0; i < units_.size() && i < gathered.size(); ++i) {
    if (gathered[i] && !gathered_[i]) borrowed_[i] = gathered_[i] = true;
  }
}

// DPOTrainer._compute_loss: the reference's forward under no_grad once the policy's log-probs
// are taken (model/plan.h InStepReference); what it gathers it frees after (its root too, under
// FSDP2: root_reshards_after_forward), its logits are dropped once their log-probs are taken.
void Walker::ReferenceForward(int16_t step, int16_t micro) {
  step_ = step;
  micro_ = micro;
  Forward();
  for (size_t i = 0; i < borrowed_.size(); ++i) {
    if (borrowed_[i]) gathered_[i] = false;  // the policy's, left as the policy had it
  }
  borrowed_.clear();
}

bool Walker::ReshardAfterForward(const model::FsdpUnit& u) const {
  bool zero3 = p_.strategy == model::ShardingStrategy::kFullShard ||
               p_.strategy == model::ShardingStrategy::kHybridShard;
  // FSDP2 leaves the root gathered after forward (its backward needs it at once): FSDPState.
  // _lazy_init sets the root group's post_forward_mesh_info = None when reshard_after_forward
  // was left at its default (None). A one-rank mesh reshards too: the bf16 unsharded parameters
  // are separate all-gather outputs (measured on an H100: the same activations-after-forward at
  // world 1 and world 8, tests/data/validation/fsdp2_h100_measured.json).
  return zero3 && p_.reshard_after_forward && (!u.is_root || s_.root_reshards_after_forward);
}

int64_t Walker::GatheredBytes(size_t i) const {
  // Unsharded params: ws x padded shard per param, param dtype (FSDPParam.init_all_gather_outputs).
  return GatheredNumel(i) * e_param_;
}

// foreach_all_gather: a param-dtype copy of the shards (all_gather_copy_in), the flat output
// ws x sum(padded shard) on the all-gather stream; CPU offload first copies the shard H2D. The
// copy-in waits for the previous copy-out (the AllGatherState event) or, without backward
// prefetch, for the backward compute that precedes it.
void Walker::IssueAllGather(size_t i, int32_t dep) {
  int64_t shard = shard_numel_[i];
  int32_t h2d = -1;
  if (p_.offload != model::Offload::kNone) {
    h2d = Begin(OpKind::kHostToDevice, Stream::kCopy, static_cast<int32_t>(i), -1);
    Cur().comm_bytes = shard_bytes_[i];
    Cur().group = 2;
    Dep(last_optimizer_);
  }
  int32_t ag = Begin(OpKind::kAllGather, Stream::kAllGather, static_cast<int32_t>(i), -1);
  Dep(dep);
  Dep(last_optimizer_);
  Dep(h2d);
  if (p_.offload == model::Offload::kAll) {
    Transient(Category::kAllGatherBuffers, Stream::kAllGather, shard * 4);
    TTransient(Stream::kAllGather, shard * 4);
  }
  // _get_param_all_gather_inputs: shards whose dtype is not param_dtype are cast by one foreach
  // copy into a flat param-dtype buffer, freed once all_gather_copy_in has copied it (replay only:
  // the ledger leaves this short-lived copy out).
  int32_t cast_id = -1;
  if (rec_) {
    int64_t cast = 0;
    for (const auto& prm : units_[i].params) {
      if (ShardedBytesPerElement(p_, prm) != e_param_) cast += prm.PaddedShardNumel(n_) * e_param_;
    }
    cast_id = TAlloc(Stream::kAllGather, cast);
  }
  // all_gather_copy_in (_fsdp_collectives.py) allocates the flat output ws x shard and copies
  // the cast shards into this rank's slice of it (all_gather_input is a narrow() view), also on a
  // one-rank mesh, where no bytes move.
  int64_t out = GatheredNumel(i) * e_param_;
  Alloc(Category::kAllGatherBuffers, Stream::kAllGather, out);
  if (rec_) {
    ag_id_[i] = TAlloc(Stream::kAllGather, out);
    TFree(&cast_id);
  }
  Cur().collective = profiles::Collective::kAllGather;
  Cur().comm_bytes = units_[i].ShardRanks(n_) > 1 ? out : 0;
  if (units_[i].expert_parallel) Cur().group = kExpertShardGroup;
  Cur().memory_bytes = static_cast<double>(copy_in_bytes_[i]);
  prefetch_op_[i] = ag;
  prefetched_[i] = out;
}

// wait_for_unshard: in forward the previous unit's flat buffer is dropped (all_gather_state =
// None) before this copy-out and this one is kept; in backward it is freed after the copy-out.
// FSDP2 always unshards into separate tensors: on a one-rank mesh too, with equal dtypes too
// (before torch 2.9 through foreach_all_gather and the copy-out into all_gather_outputs; from
// 2.9, pytorch#160135, _fsdp_param_group.py wait_for_unshard copies _sharded_param_data into
// all_gather_outputs[0] without the collective). Only FSDP1's unsharded world-1 flat parameter
// is used in place, which this walk does not model.
void Walker::Unshard(size_t i, bool forward) {
  if (gathered_[i]) return;
  gathered_[i] = true;
  // An explicitly prefetched unit's buffer is freed after its copy-out, like backward's; only the
  // implicit forward path keeps it for the next unit (wait_for_unshard, AllGatherState).
  bool implicit = forward && prefetch_op_[i] < 0;
  if (prefetch_op_[i] < 0) IssueAllGather(i, forward ? last_copy_out_ : last_backward_);
  last_copy_out_ = Begin(OpKind::kCopyOut, Stream::kDefault, static_cast<int32_t>(i), -1);
  Cur().host_hooks = 1;  // the pre-forward / pre-backward hook: unshard + wait_for_unshard
  Dep(prefetch_op_[i]);
  if (forward) {
    Free(Category::kAllGatherBuffers, Stream::kAllGather, deferred_ag_);
    deferred_ag_ = 0;
    TFree(&deferred_ag_id_);
  }
  Alloc(Category::kGathered, Stream::kDefault, GatheredBytes(i));
  if (rec_) {  // foreach_all_gather_copy_out: init_all_gather_outputs, one tensor per parameter
    for (const auto& prm : units_[i].params)
      gathered_ids_[i].push_back(TAlloc(Stream::kDefault, prm.GatheredNumel(n_) * e_param_));
  }
  Cur().memory_bytes = 2.0 * static_cast<double>(GatheredBytes(i));
  if (implicit) {
    deferred_ag_ = prefetched_[i];
    if (rec_) std::swap(deferred_ag_id_, ag_id_[i]);
  } else {
    Free(Category::kAllGatherBuffers, Stream::kAllGather, prefetched_[i]);
    if (rec_) TFree(&ag_id_[i]);
  }
  prefetch_op_[i] = -1;
  prefetched_[i] = 0;
}

void Walker::Reshard(size_t i) {
  if (!gathered_[i]) return;
  gathered_[i] = false;
  Free(Category::kGathered, Stream::kDefault, GatheredBytes(i));
  if (rec_) TFreeAll(&gathered_ids_[i]);
}

bool Walker::Checkpointed(int block) const { return model::BlockCheckpointed(p_, block, nv_); }

bool Walker::Selective(int block) const { return model::BlockSelective(p_, block, nv_); }

std::optional<model::SacSave> Walker::ExplicitSac(int block) const {
  if (!Selective(block) || !Blk(block).HasOpSac()) return std::nullopt;
  const model::SacSave save = model::BlockSacSave(p_, block, nv_);
  if (save == model::kTorchtitanSacSave) return std::nullopt;
  return save;
}

double Walker::BlockSaved(int block) const {
  // No graph before the first segment backward reaches (and none at all under no_grad).
  if (!p_.Trains() || !Backprops(model::BlockSegment(block))) return 0;
  // Full checkpointing keeps the block input of every block backward reaches (to recompute it).
  if (Checkpointed(block)) return Blk(block).checkpoint_input_per_token;
  if (const auto sac = ExplicitSac(block)) return Blk(block).SacSavedPerToken(*sac);
  if (Selective(block)) return Blk(block).selective_per_token;
  return Blk(block).full.saved_per_token;
}

int64_t Walker::BlockFixedSaved(int block) const {
  const model::ModelSpec& spec = *s_.spec;
  if (block < nv_) return 0;
  if (!spec.moe.deepseek_router || !spec.MoeLayer(block - nv_) || p_.modeling != model::Modeling::kHf) return 0;
  if (!p_.Trains() || !Backprops(model::BlockSegment(block))) return 0;
  if (Checkpointed(block) || Selective(block)) return 0;
  if (e_param_ == 4) return 0;  // W.float() of an fp32 weight is the weight itself
  return static_cast<int64_t>(spec.moe.num_experts) * spec.hidden * 4;
}

int64_t Walker::BlockSavedBytes(int block) const { return Tok(BlockSaved(block)) + BlockFixedSaved(block); }

void Walker::Forward() {
  const auto& units = units_;
  for (int seg = 0; seg < model::NumSegments(nb_); ++seg) {
    if (SkippedSegment(seg)) continue;
    for (int32_t si : starts_[static_cast<size_t>(seg)]) {
      auto i = static_cast<size_t>(si);
      if (units[i].is_expert) continue;  // one at a time, ForwardExperts
      Unshard(i, true);
      if (p_.forward_prefetch) {
        // Explicit prefetch (set_modules_to_forward_prefetch): the next units to start, up to
        // max_inflight_allgathers - 1 ahead of the one being computed.
        int budget = std::max(1, p_.max_inflight_allgathers - 1);
        for (size_t j = i + 1; j < units.size() && budget > 0; ++j) {
          if (units[j].first_segment <= seg || gathered_[j] || SkippedSegment(units[j].first_segment)) continue;
          if (prefetch_op_[j] < 0) IssueAllGather(j, last_copy_out_);
          --budget;
        }
      }
    }
    ForwardExperts(seg, true);
    ForwardCompute(seg);
    ForwardExperts(seg, false);
    const auto& ends = ends_[static_cast<size_t>(seg)];
    for (size_t e = ends.size(); e-- > 0;) {
      auto k = static_cast<size_t>(ends[e]);
      if (ReshardAfterForward(units[k])) Reshard(k);
    }
  }
  // The root's post-forward flushes the last kept all-gather buffer.
  Free(Category::kAllGatherBuffers, Stream::kAllGather, deferred_ag_);
  deferred_ag_ = 0;
  TFree(&deferred_ag_id_);
  if (!p_.Trains()) {  // no backward: the caller drops the logits, the residual stream, the pixels
    ReleaseMicroBatchTensors();
    Free(Category::kLoss, Stream::kDefault, kept_logits_);
    kept_logits_ = 0;
    Free(Category::kResidual, Stream::kDefault, Tok(residual_));
    TFree(&kept_logits_id_);
    TFree(&residual_id_);
  }
}

void Walker::Hold(HeldTensor* t, Category c) {
  if (t->per_token <= 0) return;
  t->live = Tok(t->per_token);
  Alloc(c, Stream::kDefault, t->live);
  t->id = TAlloc(Stream::kDefault, t->live);
}

void Walker::Release(HeldTensor* t, Category c) {
  if (t->live == 0) return;
  Free(c, Stream::kDefault, t->live);
  t->live = 0;
  TFree(&t->id);
}

void Walker::ReleaseMicroBatchTensors() {
  Release(&mrope_tables_, Category::kActivations);
  Release(&pixels_, Category::kVisionActivations);
  Release(&vision_rotary_, Category::kVisionActivations);
}

}  // namespace shardtune::sim::internal
