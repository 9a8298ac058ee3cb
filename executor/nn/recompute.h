// Activation checkpointing. `Recompute` is torch.utils.checkpoint's reentrant variant: the
// segment's forward runs without saving activations; its backward runs the forward again with
// grad enabled and backpropagates through it, which also accumulates the parameters' gradients.
// `RecomputePiece` + `DropUntilBackward` are selective checkpointing (torchtitan's op-level SAC,
// torchtitan/models/llama3/infra/parallelize.py `_save_list`: matmul, attention and collective
// outputs are saved, everything else is recomputed): a memory-bound piece of a block (a norm,
// SwiGLU's silu(gate) x up, GELU) keeps only its inputs, and its output, when a matmul saved it,
// is freed after forward and recomputed into the same storage before that matmul's backward.
#pragma once

#include <ATen/core/Tensor.h>

#include "model/plan.h"

#include <functional>
#include <vector>

namespace shardtune::exec {

using SegmentFn = std::function<at::Tensor(const at::Tensor&)>;

// Returns fn(x) with a graph that recomputes fn in backward. With `side`, tensors fn appends to
// *side while it runs (an MoE block's router logits, HF's outputs.router_logits) become outputs
// of the recompute node too, and replace the no-grad ones in *side, so a loss that reads them
// (the MoE auxiliary loss at the head) sends its gradient into the block's rerun in backward, as
// torch.utils.checkpoint does for a layer that returns its router logits; the rerun's own
// appends are taken out of *side again. REQUIRES: `fn` (and `side`) outlive the backward pass and
// fn computes the same function when called again (no dropout, fixed params).
at::Tensor Recompute(const SegmentFn* fn, const at::Tensor& x,
                     std::vector<at::Tensor>* side = nullptr);

// A pure function of its input tensors (activations and parameters alike) and one number (an
// epsilon, a flag). Plain function pointer: it outlives every graph.
using PieceFn = at::Tensor (*)(const std::vector<at::Tensor>& inputs, double arg);

// Returns fn(inputs, arg) with a graph that saves only `inputs` (all defined) and, in backward,
// reruns fn on them with grad enabled and differentiates it: the inputs get their gradients as
// from the piece itself (parameters among them through their own AccumulateGrad, so FSDP's
// per-unit hooks see them). Not reentrant: nothing is accumulated inside the backward.
at::Tensor RecomputePiece(PieceFn fn, double arg, const std::vector<at::Tensor>& inputs);

// Frees the storage of `y` = RecomputePiece(fn, arg, inputs) now that its consumers ran (their
// graphs may have saved y or views of it), and refills the same storage with fn(inputs, arg)
// (no grad) in a hook on the gradient of each consumer output that requires grad, i.e. before
// any consumer's backward reads y; the refilled bytes live until the last consumer released
// them. Writes go through an alias of the storage, so y's version counter does not change (as
// FSDP2 does with storage.resize_). REQUIRES: y owns its storage (a fresh piece output), and
// `consumers` are every tensor computed from y.
void DropUntilBackward(const at::Tensor& y, PieceFn fn, double arg,
                       const std::vector<at::Tensor>& inputs,
                       const std::vector<at::Tensor>& consumers);

// Op-level SAC (torch.utils.checkpoint create_selective_checkpoint_contexts): the block is
// checkpointed whole, and the outputs of the ops its policy saves are kept from the forward and
// handed back to the rerun in backward instead of recomputing them. The policy is a resolved save
// set (model::ResolveSacSave: torchtitan's rule as its source writes it,
// torchtitan/distributed/activation_checkpoint.py SelectiveAC, or the ops named in issue #46's
// per-block save sets): bit i keeps the block's i-th projection in forward order, bit 7 the SDPA
// kernel's output. The transformer asks the tape at each projection and attention core
// (transformer.cc Proj, Core); SacRecompute drives the modes.
struct SacTape {
  enum class Mode { kOff, kRecord, kReplay };
  Mode mode = Mode::kOff;
  model::SacSave save = 0;        // this pass's policy, resolved (op bits only)
  int proj_count = 0;             // this pass's projections so far (biased ones included)
  std::vector<at::Tensor> saved;  // kRecord: appended in forward order; kReplay: read in order
  size_t next = 0;                // kReplay: the next saved output to hand back

  bool Active() const { return mode != Mode::kOff; }
  // Counts one projection; true when the policy saves its output.
  bool SavesProjection() {
    const int i = proj_count++;
    return i < model::kSacMatmuls && (save >> i & 1U) != 0;
  }
  // Whether the policy saves the SDPA kernel's output.
  bool SavesSdpa() const { return (save & model::kSacSdpaBit) != 0; }
  // kReplay: the next saved output (REQUIRES: one is left).
  at::Tensor TakeSaved();
  // kRecord: keeps y for the replay; no-op otherwise.
  void Record(const at::Tensor& y) {
    if (mode == Mode::kRecord) saved.push_back(y);
  }
  // One projection of the block (counted when `counted`: a dense one, a grouped expert GEMM; not
  // GPT-2's Conv1D): `run(kept)` computes it, `kept` being the output the forward kept when this
  // pass replays a projection the policy saves (run hands it back with the projection's backward:
  // ReplayLinear, GroupedLinear's replay), else undefined (run computes it). A saved projection's
  // output is recorded in the forward.
  template <typename Run>
  at::Tensor Projection(bool counted, const Run& run) {
    const bool taped = Active() && counted && SavesProjection();
    at::Tensor y = run(taped && mode == Mode::kReplay ? TakeSaved() : at::Tensor());
    if (taped) Record(y);
    return y;
  }
};

// Returns fn(x) with a graph that keeps x and the outputs fn put on *tape (kRecord, under
// no-grad) and, in backward, reruns fn with grad on the tape in kReplay (which hands those
// outputs back) and backpropagates through it. REQUIRES: fn outlives the backward, asks *tape
// the same questions in both passes (the same ops in the same order), and no other SacRecompute
// runs on the same tape meanwhile.
// `save`: the block's resolved save set (model::ResolveSacSave).
at::Tensor SacRecompute(const SegmentFn* fn, const at::Tensor& x, SacTape* tape, model::SacSave save);

// y = x W^T (+ b) (nn.Linear, aten.mm or aten.addmm on the flattened rows) whose forward value is
// the `saved` output of the same product from the checkpoint's forward: backward is aten.mm's
// (dx = dy W, dW = dy^T x, db = the rows' sum of dy), nothing is recomputed. `b` may be undefined.
at::Tensor ReplayLinear(const at::Tensor& saved, const at::Tensor& x, const at::Tensor& w,
                        const at::Tensor& b = at::Tensor());

}  // namespace shardtune::exec
