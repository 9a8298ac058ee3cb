// Sharded AdamW / SGD on flat fp32 shards.
#include "executor/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)

#include <cmath>

#include "model/errors.h"

namespace shardtune::exec {

ShardedOptimizer::ShardedOptimizer(model::Optimizer kind, AdamWOptions options,
                                   std::vector<at::Tensor*> params, std::vector<at::Tensor*> grads)
    : kind_(kind), options_(options), params_(std::move(params)), grads_(std::move(grads)) {
  SHARDTUNE_CHECK(kind_ == model::Optimizer::kAdamW || kind_ == model::Optimizer::kSgd)
      << "optimizer " << model::ToString(kind_);
  SHARDTUNE_CHECK(params_.size() == grads_.size()) << "params and grads";
  if (kind_ == model::Optimizer::kAdamW) {
    for (at::Tensor* p : params_) {
      exp_avg_.push_back(at::zeros_like(*p));
      exp_avg_sq_.push_back(at::zeros_like(*p));
    }
  }
}

void ShardedOptimizer::Step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const AdamWOptions& o = options_;
  double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step_));
  double bc2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, static_cast<double>(step_)));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = *params_[i];
    const at::Tensor& g = *grads_[i];
    if (!g.defined()) continue;
    if (kind_ == model::Optimizer::kSgd) {
      p.add_(g, -lr);
      continue;
    }
    p.mul_(1.0 - lr * o.weight_decay);
    exp_avg_[i].mul_(o.beta1).add_(g, 1.0 - o.beta1);
    exp_avg_sq_[i].mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bc2_sqrt).add_(o.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
  }
}

}  // namespace shardtune::exec
