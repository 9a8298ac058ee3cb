// The walker behind BuildStepProgram (internal to the simulator; split out to keep files short).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "simulator/step_walk.h"

namespace shardtune::sim::internal {

// FlashAttention-2 (Dao 2023, section 3.1): backward does 2.5x the forward matmul FLOPs of
// attention (5 GEMMs vs 2); linear layers do 2x (input and weight gradients).
inline constexpr double kAttentionBackwardRatio = 2.5;
inline constexpr double kMatmulBackwardRatio = 2.0;
// Traffic per fp32 element of torch.optim.AdamW's per-op paths (foreach and for-loop): mul_(p) 8,
// lerp_(m, g) 12, mul_(v) 8, addcmul_(v, g, g) 12, sqrt(v) 8, div_ 8, add_ 8, addcdiv_(p, m, t)
// 16 = 80 bytes; _fused_adamw_ reads p, g, m, v and writes p, m, v: 28; SGD with momentum
// (foreach): 32 (Walker::OptimizerStep; kernel_time.cc reads the host rate in the same unit).
inline constexpr double kForeachAdamWBytesPerElement = 80;
inline constexpr double kFusedAdamWBytesPerElement = 28;
inline constexpr double kSgdBytesPerElement = 32;
// Memory-bound ops move about twice their forward traffic in backward (read saved tensors and
// the incoming gradient, write the input gradient).
inline constexpr double kElementwiseBackwardRatio = 2.0;

// One piece of a block's compute split around Ulysses all-to-alls: its work, then the
// all-to-all that follows it (none in the last piece).
// Expert parallelism splits an MoE block the same way around its dispatch and combine.
struct UlyssesPiece {
  double matmul_flops = 0, attention_flops = 0, memory_bytes = 0;
  int16_t host_kernels = 0;
  int64_t all_to_all_bytes = 0;  // total size S of the all-to-alls after this piece
  int8_t all_to_all_calls = 0;
  int8_t group = 3;        // 3: the cp group (Ulysses), kExpertParallelGroup: the ep group
  bool host_sync = false;  // the host waits for the GPU before issuing the all-to-all (torchtitan's
                           // dispatch reads the exchanged token counts with .tolist())
};

// A block's pieces (at most ten: a recomputed forward's five, then backward's five, with both
// Ulysses and expert parallelism), kept in place: the walk builds a chain per block per pass,
// and a heap vector each time showed in perf.
struct UlyssesPieces {
  std::array<UlyssesPiece, 10> v{};
  size_t n = 0;
  void push_back(const UlyssesPiece& p) { v.at(n++) = p; }
  size_t size() const { return n; }
  bool empty() const { return n == 0; }
  const UlyssesPiece& operator[](size_t i) const { return v[i]; }
};

class Walker {
 public:
  Walker(const WalkSetup& s, StepProgram* prog);
  ~Walker();
  void Run();
  ForwardEndBound ForwardEndLowerBound() const;  // step_walk.h ForwardEndLowerBound
  void BackwardLowerBounds(ForwardEndBound* out) const;

 private:
  // Program building.
  int32_t Begin(OpKind kind, Stream stream, int32_t unit, int32_t segment);
  void Dep(int32_t op);
  void Alloc(Category c, Stream pool, int64_t bytes);
  void Free(Category c, Stream pool, int64_t bytes);
  void Transient(Category c, Stream pool, int64_t bytes);
  // Tensor events for the allocator replay (no-ops returning -1 unless s_.record_tensors).
  int32_t TAlloc(Stream pool, int64_t bytes);
  void TFree(int32_t* id);  // frees `*id` (if >= 0) and sets it to -1
  void TFreeAll(std::vector<int32_t>* ids);
  void TTransient(Stream pool, int64_t bytes) {
    int32_t id = TAlloc(pool, bytes);
    TFree(&id);
  }
  // A working set the ledger keeps as one figure, replayed as tensors of at most the ledger's
  // largest saved tensor (an op's temporaries are tensors of the shapes it saves: [B, S, I],
  // [B, S, V] fp32 logits), all alive at the moment of the peak.
  void TWorkingSet(int64_t bytes, const model::ActivationLedger& l);
  // Unit i's unsharded gradients made in segment `seg` (seg < 0: all of them), one per parameter.
  void TAllocGrads(size_t i, int seg);
  // What block `block` saves for backward, one tensor per SavedTensor of its ledger (the block
  // input alone under full checkpointing; selective checkpointing's outputs as one lump).
  void TAllocSaved(int block, Stream pool = Stream::kDefault);
  std::vector<int64_t> TrainableShardNumels() const;
  int64_t OptimizerLaunches() const;
  void OptimizerStateTensors(int64_t state);
  void ForeachSqrtTensors();
  ProgramOp& Cur() { return prog_->ops.back(); }

  // FSDP2 rules.
  void Forward();
  void Backward();
  void ForwardCompute(int seg);
  void BackwardCompute(int seg, int64_t grads);
  int64_t BackwardWorkingSet(const model::ActivationLedger& l, int64_t grads) const;
  // Ulysses (plan.cp > 1, step_walk_ulysses.cc): the current op, already begun with its memory
  // actions, becomes pieces[0]; each later piece is a compute op of the same kind that waits for
  // the all-to-alls of the piece before it. Returns the last compute op.
  int32_t UlyssesChain(const UlyssesPieces& pieces);
  // `block`: which block (0-based) the op computes.
  UlyssesPieces UlyssesForwardPieces(int block, double elem_bytes, int16_t host_kernels) const;
  // True when the block's compute is split around all-to-alls (cp > 1, or an MoE block under
  // expert parallelism).
  bool SplitBlock(int block) const;
  UlyssesPieces UlyssesBackwardPieces(int block, bool recompute, double elem_bytes,
                                      int16_t host_kernels) const;
  void IssueAllGather(size_t i, int32_t dep);
  void Unshard(size_t i, bool forward);
  void Reshard(size_t i);
  void PrefetchBackward(int seg, int32_t dep);
  void PostBackward(size_t i, bool sync);
  void KeepGradientsForNoSync(size_t i);
  void ReduceGradients(size_t i, int32_t post);
  void OptimizerStep();
  int64_t OptimizerStateBytes() const;
  bool ReshardAfterForward(const model::FsdpUnit& u) const;
  int64_t GatheredBytes(size_t i) const;
  bool Checkpointed(int block) const;
  bool Selective(int block) const;  // model::BlockSelective
  // A selective block's explicit op-level SAC save set (model::BlockSacSave), or nullopt where
  // it runs the block's own selective rule (torchtitan's, or the per-piece recompute).
  std::optional<model::SacSave> ExplicitSac(int block) const;
  double BlockSaved(int block) const;
  // What autograd keeps for the block that does not scale with tokens: HF DeepSeek's router
  // matmul F.linear(x.float(), W.float()) saves the fp32 copy of its weight [E, H] for the input's
  // gradient (modeling_deepseek_v3.py DeepseekV3TopkRouter; 7.3 MB per MoE layer in V3), unless the
  // block is recomputed (checkpointing keeps only its input) or the weight is fp32 already.
  int64_t BlockFixedSaved(int block) const;
  // Tok(BlockSaved(block)) + BlockFixedSaved(block): the bytes the block keeps until its backward.
  int64_t BlockSavedBytes(int block) const;
  // The saved tensors of `block` as the allocator replay sees them (TAllocSaved's pieces).
  std::vector<int64_t> SavedTensorBytes(int block) const;
  // verl's activation offload: whether `block`'s saved tensors go to the host (every layer but the
  // last, with at least three layers: activation_offload.py enable_activation_offloading).
  bool OffloadsActivations(int block) const;
  // The forward commit of `block` (GroupCommitFunction.forward): frees the previous block's GPU
  // copies once their device-to-host copy is done, and starts this block's.
  void CommitActivationOffload(int block);
  // The backward commit of `block`: reloads the block before it (bulk_reload_group) on the copy
  // stream while this one computes.
  void ReloadActivations(int block);
  // The category a block's saved tensors count under: the vision tower's or the text model's.
  Category SavedCategory(int block) const {
    return block < nv_ ? Category::kVisionActivations : Category::kActivations;
  }
  // The pool a block's saved tensors are freed into in backward: the copy stream's for reloaded
  // ones (allocated under the h2d stream), else the default.
  Stream SavedPool(int block) const;
  // What block `block` records: its own ledger under frozen parameters, LoRA or a dense prefix
  // (model::ModelSpec::Heterogeneous), else block_.
  const model::BlockActivations& Blk(int block) const {
    return s_.blocks.empty() ? block_ : *s_.blocks[static_cast<size_t>(block)];
  }
  int64_t Tok(double per_token) const { return static_cast<int64_t>(per_token * tokens_); }
  // Frozen parameters, LoRA, inference roles, expert units, tiled MLP (step_walk_trainable.cc).
  void InitTrainability();
  bool Backprops(int seg) const {
    if (seg >= 1 && seg <= nv_) return seg >= vision_backward_from_ && !SkippedSegment(seg);
    return seg >= first_backward_seg_;
  }
  // A vision segment of a step without images: the tower does not run (no gather, no compute).
  bool SkippedSegment(int seg) const { return seg >= 1 && seg <= nv_ && !s_.vision.runs(); }
  // Forward FLOPs per token of block b: its attention and the rest (matmuls, LoRA excluded).
  void BlockForwardFlops(int b, double* attention, double* matmul) const;
  // The residual stream a block reads (the tower's or the text model's), per token.
  double BlockResidual(int b) const { return b < nv_ ? vision_residual_ : residual_; }
  double BackwardMatmulRatio(int seg) const;
  double AdapterFlopsPerToken(int seg) const;
  double TiledRecomputeFlopsPerToken(int block) const;
  int64_t InferWorkingSet(int block) const;
  void ForwardExperts(int seg, bool before_compute);
  void BackwardExperts(int seg, bool before_compute, bool sync);
  const std::vector<int32_t>& ExpertsStarting(int seg) const;  // per-expert units starting at seg

  // TRL DPO's reference forward (WalkSetup::reference): a walker of the reference's own setup
  // writing into the same program, its units numbered after this walk's (unit_offset_) and its
  // bytes under the reference's categories (is_reference_).
  std::unique_ptr<Walker> ref_;
  int32_t unit_offset_ = 0;
  bool is_reference_ = false;
  Category Cat(Category c) const {
    if (!is_reference_) return c;
    return c == Category::kShardedParams ? Category::kReferenceParams : Category::kReference;
  }
  // The reference's sharded parameters (none when it is the policy itself with its adapters off),
  // at the start-up op; and its forward in the current micro-batch.
  void StartReference();
  // The persistent sharded parameters, one padded shard per parameter (none under offload all).
  void AllocShardedParams();
  void ReferenceForward(int16_t step, int16_t micro);
  // The policy's units gathered now, for a reference that is the policy itself (adapters off):
  // those it finds gathered it neither gathers again nor frees.
  void AdoptGathered(const std::vector<bool>& gathered);

  const WalkSetup& s_;
  const std::vector<model::FsdpUnit>& units_;
  const model::BlockActivations& block_;
  const model::ActivationLedger& head_;
  StepProgram* prog_;
  // Per forward segment: units whose span starts / ends there, and (unit, gradient bytes) of
  // the parameters it uses (precomputed: the walk visits every segment of every pass).
  std::vector<std::vector<int32_t>> starts_, ends_, experts_starting_;
  std::vector<std::vector<std::pair<int32_t, int64_t>>> grads_by_segment_;
  std::vector<int64_t> shard_numel_;     // padded shard elements per unit
  std::vector<int32_t> backward_order_;  // units by last segment, latest first (outer first on ties)
  size_t backward_cursor_ = 0;           // units before it end at or after the current segment
  int64_t param_tensors_ = 0;  // parameter tensors of this rank (torch.optim loops over them)
  int64_t optimizer_launches_ = -1;  // OptimizerLaunches(), computed at the first step
  int64_t optimizer_params_ = -1;    // trainable parameter tensors, likewise
  int64_t total_shard_numel_ = 0, largest_param_shard_ = 0, factored_numel_ = 0;  // optimizer sizes
  const model::Plan& p_;
  int n_ = 1;
  double tokens_ = 0, residual_ = 0;  // tokens_: this rank's B·S/cp
  // Blocks in all and the vision tower's (ModelSpec::NumBlocks, VisionBlocks); the tower's
  // residual stream per text token; the first segment whose backward reaches the tower
  // (model::FirstTowerGradSegment: NumSegments when the tower is frozen).
  int nb_ = 0, nv_ = 0;
  double vision_residual_ = 0;
  int vision_backward_from_ = 0;
  int32_t vision_residual_id_ = -1;
  // A tensor one per micro-batch (bytes per text token) that the walk allocates when its maker
  // runs and frees when its holder lets go (Hold, Release).
  struct HeldTensor {
    double per_token = 0;
    int64_t live = 0;
    int32_t id = -1;
  };
  void Hold(HeldTensor* t, Category c);
  void Release(HeldTensor* t, Category c);
  // The micro-batch's pixel values (fp32 [patches, C_in·T·p·p], as the image processor makes
  // them): on the device from the tower's forward to the micro-batch's end.
  HeldTensor pixels_;
  // The tower's rotary position embeddings (cos and sin [patches, head_dim], fp32: made once per
  // forward before its blocks): kept by the tower's graph (each block's rotary saves them) to the
  // micro-batch's end when the tower trains, else freed after its forward.
  HeldTensor vision_rotary_;
  // Qwen2/2.5-VL's text M-RoPE tables (position_embeddings: cos and sin [3, B, S, d] in the
  // compute dtype, made once before the text layers): a local of the text model's forward,
  // unless a checkpointed layer saves them as its inputs, which keeps them to the backward's end.
  HeldTensor mrope_tables_;
  void ReleaseMicroBatchTensors();  // the three above, at the micro-batch's end
  model::UlyssesAllToAll a2a_;        // per layer; zero sizes when cp is 1
  model::ExpertAllToAll ep_a2a_;      // per MoE layer; zero sizes when ep is 1
  const model::ExpertAllToAll& ExpertA2a() const { return ep_a2a_; }
  int64_t e_param_ = 2, e_reduce_ = 4;
  int16_t step_ = 0, micro_ = 0;
  std::vector<bool> gathered_, has_sharded_grad_, inplace_accum_;
  std::vector<bool> borrowed_;  // a reference with adapters off: the policy's gathered units
  std::vector<int32_t> prefetch_op_;
  std::vector<int64_t> prefetched_, unsharded_grad_, accumulated_, sharded_grad_;
  int64_t deferred_ag_ = 0, deferred_rs_ = 0, kept_logits_ = 0;
  // BackwardWorkingSet's last answer per ledger: every micro-batch asks again with the same grads.
  struct WorkingSetMemo {
    const model::ActivationLedger* ledger = nullptr;
    int64_t grads = -1, bytes = 0;
  };
  mutable std::array<WorkingSetMemo, 4> working_set_memo_{};
  bool optimizer_state_ = false;
  // Trainability: per unit, padded shard elements of parameters that require grad and the bytes
  // of all its shards (adapters in lora.dtype, frozen ones in the plan's frozen dtype); per
  // segment, the share of base matmul weights that train and adapter elements; the first segment
  // backward reaches.
  std::vector<int64_t> grad_shard_numel_, shard_bytes_;
  // Per unit, the reduce-scatter input of those parameters: padded shard x the ranks each is
  // sharded over (expert-parallel units span shard / ep ranks: ParamTensor::GatheredNumel).
  // Filled only when some unit is expert-parallel (ep_units_); otherwise every parameter is
  // sharded over n_ ranks and the products below are the gathered sizes (the dense walk, which
  // the planner runs for thousands of plans, keeps its old work).
  std::vector<int64_t> grad_gathered_numel_;
  bool ep_units_ = false;
  int64_t GatheredNumel(size_t i) const { return ep_units_ ? gathered_numel_[i] : shard_numel_[i] * n_; }
  int64_t GradGatheredNumel(size_t i) const {
    return ep_units_ ? grad_gathered_numel_[i] : grad_shard_numel_[i] * n_;
  }
  // Per unit, the all-gather output (FsdpUnit::GatheredNumel).
  std::vector<int64_t> gathered_numel_;
  // Per unit, bytes the all-gather copy-in kernels move (AllGatherCopyInBytesPerElement).
  std::vector<int64_t> copy_in_bytes_;
  std::vector<double> weight_grad_fraction_, adapter_numel_;
  int first_backward_seg_ = 0;
  int64_t total_grad_shard_numel_ = 0;
  // Unsharded gradients of the trainable lookup tables (segment 0), and of the one tied to the LM
  // head among them.
  int64_t lookup_grad_bytes_ = 0, tied_grad_bytes_ = 0;
  double tiled_mlp_flops_ = 0;        // the last block's MLP forward per token (an MoE's, if any)
  double tiled_dense_mlp_flops_ = 0;  // the first block's (a dense prefix's, when there is one)
  int32_t last_copy_out_ = -1, last_backward_ = -1, last_reduce_ = -1, last_d2h_ = -1;
  // Activation offload (verl's AsyncDoubleBufferGroupOffloadHandler): per block, the device-to-host
  // copy of its saved tensors and, in backward, their reload; the copy the compute stream waits for
  // at the next commit (-1: none).
  std::vector<int32_t> offload_copy_op_, reload_op_;
  int32_t wait_for_copy_ = -1;
  int32_t last_optimizer_ = -1;
  // Tensor identities for the allocator replay (step_program.h TensorEvent).
  bool rec_ = false;
  std::vector<int32_t> ag_id_, sharded_grad_id_;  // per unit: all-gather output, sharded grads
  std::vector<std::vector<int32_t>> gathered_ids_, ugrad_ids_, nosync_ids_;  // per unit, per param
  std::vector<std::vector<int32_t>> act_ids_;  // per block: saved activations
  std::vector<int32_t> deferred_rs_ids_, loss_ids_, seg_grad_units_;
  int32_t deferred_ag_id_ = -1, residual_id_ = -1, kept_logits_id_ = -1;
  // The fused linear cross-entropy's weight gradient, held from the head's forward to its backward.
  int64_t fused_weight_grad_ = 0;
  int32_t fused_weight_grad_id_ = -1;
};

}  // namespace shardtune::sim::internal
