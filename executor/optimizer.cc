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
}

void ShardedOptimizer::EnsureState() {
  if (!keeps_state()) return;
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) exp_avg_[i] = at::zeros_like(*params_[i]);
    if (!exp_avg_sq_[i].defined()) exp_avg_sq_[i] = at::zeros_like(*params_[i]);
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
    // torch/optim/adamw.py _init_group: state["exp_avg"] = zeros_like(p) on first use.
    if (exp_avg_.size() != params_.size()) {
      exp_avg_.resize(params_.size());
      exp_avg_sq_.resize(params_.size());
    }
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = at::zeros_like(p);
      exp_avg_sq_[i] = at::zeros_like(p);
    }
    p.mul_(1.0 - lr * o.weight_decay);
    exp_avg_[i].mul_(o.beta1).add_(g, 1.0 - o.beta1);
    exp_avg_sq_[i].mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / bc2_sqrt).add_(o.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
  }
}

}  // namespace shardtune::exec
