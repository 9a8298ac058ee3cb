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

}  // namespace shardtune::exec
