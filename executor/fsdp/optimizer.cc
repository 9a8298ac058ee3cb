// Sharded AdamW / SGD on flat fp32 shards.
#include "executor/fsdp/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <torch/version.h>

#include <algorithm>
#include <cmath>

#include "executor/kernels/host_adamw.h"
#include "model/errors.h"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define SHARDTUNE_HAVE_FUSED_ADAMW 1
#else
#define SHARDTUNE_HAVE_FUSED_ADAMW 0
#endif

namespace shardtune::exec {

bool FusedAdamWAvailable(const std::string& device) {
  return SHARDTUNE_HAVE_FUSED_ADAMW && device == "cuda";
}

void TorchForeachAdamWStep(std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
                           std::vector<at::Tensor>& m, std::vector<at::Tensor>& v, double lr,
                           double weight_decay, int64_t step) {
  const AdamWOptions o;
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, static_cast<double>(step)));
  at::_foreach_mul_(p, 1.0 - lr * weight_decay);
  at::_foreach_mul_(m, o.beta1);
  at::_foreach_add_(m, g, 1.0 - o.beta1);
  at::_foreach_mul_(v, o.beta2);
  at::_foreach_addcmul_(v, g, g, 1.0 - o.beta2);
  std::vector<at::Tensor> denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, o.eps);
  at::_foreach_addcdiv_(p, m, denom, -lr / bc1);
}

ShardedOptimizer::ShardedOptimizer(model::Optimizer kind, AdamWOptions options,
                                   std::vector<at::Tensor*> params, std::vector<at::Tensor*> grads)
    : kind_(kind), options_(options), params_(std::move(params)), grads_(std::move(grads)) {
  SHARDTUNE_CHECK(kind_ == model::Optimizer::kAdamW || kind_ == model::Optimizer::kSgd)
      << "optimizer " << model::ToString(kind_);
  SHARDTUNE_CHECK(params_.size() == grads_.size()) << "params and grads";
}

void ShardedOptimizer::EnsureState() {
  if (!keeps_state()) return;
  for (size_t i = 0; i < params_.size(); ++i) StateOf(i);
}

// torch/optim/adamw.py _init_group: state["exp_avg"] = zeros_like(p) on first use.
void ShardedOptimizer::StateOf(size_t i) {
  if (exp_avg_.size() != params_.size()) {
    exp_avg_.resize(params_.size());
    exp_avg_sq_.resize(params_.size());
  }
  if (!exp_avg_[i].defined()) exp_avg_[i] = at::zeros_like(*params_[i]);
  if (!exp_avg_sq_[i].defined()) exp_avg_sq_[i] = at::zeros_like(*params_[i]);
}

void ShardedOptimizer::Step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const AdamWOptions& o = options_;
  // On device shards, fused is at::_fused_adamw_; on host shards the one-pass kernel below is
  // already what fused means (one read of p, g, m, v and one write of p, m, v per element).
  const bool host_shards = std::any_of(params_.begin(), params_.end(),
                                       [](const at::Tensor* t) { return t->defined() && t->is_cpu(); });
  if (o.fused && kind_ == model::Optimizer::kAdamW && !host_shards) {
    FusedAdamWStep(lr);
    return;
  }
  double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step_));
  double bc2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, static_cast<double>(step_)));
  const HostAdamWScalars host =
      MakeHostAdamWScalars(lr, o.beta1, o.beta2, o.eps, o.weight_decay, step_);
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = *params_[i];
    const at::Tensor& g = *grads_[i];
    if (!g.defined()) continue;
    if (kind_ == model::Optimizer::kSgd) {
      p.add_(g, -lr);
      continue;
    }
    StateOf(i);
    if (p.is_cpu()) {
      // On the host (CPU runs, CPU offload): one pass per element over p, g, m, v
      // (kernels/host_adamw.h), the shard split across the intra-op threads.
      SHARDTUNE_CHECK(p.scalar_type() == at::kFloat && g.scalar_type() == at::kFloat &&
                      p.is_contiguous() && g.is_contiguous())
          << "host AdamW expects contiguous fp32 shards";
      float* pp = p.data_ptr<float>();
      const float* gp = g.data_ptr<float>();
      float* mp = exp_avg_[i].data_ptr<float>();
      float* vp = exp_avg_sq_[i].data_ptr<float>();
      at::parallel_for(0, p.numel(), kHostGrainNumel, [&](int64_t begin, int64_t end) {
        HostAdamWRange(pp, gp, mp, vp, begin, end, host);
      });
      continue;
    }
    // On a GPU: torch.optim.AdamW's single-tensor ops, one pass each over the whole shard.
    at::Tensor& m = exp_avg_[i];
    at::Tensor& v = exp_avg_sq_[i];
    p.mul_(1.0 - lr * o.weight_decay);
    m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
    at::Tensor denom = v.sqrt();
    denom.div_(bc2_sqrt).add_(o.eps);
    p.addcdiv_(m, denom, -lr / bc1);
  }
}

// torch/optim/adam.py _fused_adam: state steps are float tensors on the device, incremented
// before the kernel reads them (one tensor holding this step serves every shard: the kernel
// only reads it); no grad scaling, no amsgrad.
void ShardedOptimizer::FusedAdamWStep(double lr) {
  std::vector<at::Tensor> ps, gs, ms, vs, steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads_[i]->defined()) continue;
    StateOf(i);
    ps.push_back(*params_[i]);
    gs.push_back(*grads_[i]);
    ms.push_back(exp_avg_[i]);
    vs.push_back(exp_avg_sq_[i]);
  }
  if (ps.empty()) return;
#if SHARDTUNE_HAVE_FUSED_ADAMW
  at::Tensor step = at::full({}, static_cast<double>(step_), ps[0].options().dtype(at::kFloat));
  steps.assign(ps.size(), step);
  const AdamWOptions& o = options_;
  at::_fused_adamw_(ps, gs, ms, vs, /*max_exp_avg_sqs=*/{}, steps, lr, o.beta1, o.beta2, o.weight_decay,
                    o.eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  SHARDTUNE_CHECK(false) << "fused AdamW needs LibTorch >= 2.1 (FusedAdamWAvailable)";
#endif
}

}  // namespace shardtune::exec
