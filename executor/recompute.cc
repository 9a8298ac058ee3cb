// The recompute node as a LibTorch custom autograd Function.
#include "executor/recompute.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace shardtune::exec {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  // Runs under no-grad (Function::apply): nothing inside fn is saved.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const SegmentFn* fn) {
    // saved_data holds IValues only: the function travels as an integer. It outlives the
    // backward (REQUIRES of Recompute).
    ctx->saved_data["fn"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(fn));
    ctx->save_for_backward({x});
    return {(*fn)(x)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto fn =
        reinterpret_cast<const SegmentFn*>(static_cast<intptr_t>(ctx->saved_data["fn"].toInt()));
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = (*fn)(x);
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Recompute(const SegmentFn* fn, const at::Tensor& x) {
  return RecomputeFunction::apply(x, fn)[0];
}

}  // namespace shardtune::exec
