// Activation checkpointing (torch.utils.checkpoint, reentrant variant): the segment's forward
// runs without saving activations; its backward runs the forward again with grad enabled and
// backpropagates through it, which also accumulates the parameters' gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace shardtune::exec {

using SegmentFn = std::function<at::Tensor(const at::Tensor&)>;

// Returns fn(x) with a graph that recomputes fn in backward. REQUIRES: `fn` outlives the
// backward pass and computes the same function when called again (no dropout, fixed params).
at::Tensor Recompute(const SegmentFn* fn, const at::Tensor& x);

}  // namespace shardtune::exec
