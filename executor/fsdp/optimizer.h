// The optimizer on the sharded fp32 parameters: each rank updates only its flat shards (ZeRO).
// AdamW is torch.optim.AdamW's single-tensor formula (torch/optim/adamw.py, _single_tensor_adamw;
// on host shards in one pass, kernels/host_adamw.h):
// decoupled weight decay p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). SGD: p -= lr * g.
// Weight decay applies to every element (one parameter group, as a plain torch.optim.AdamW).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.h"

namespace shardtune::exec {

struct AdamWOptions {
  double beta1 = 0.9;  // torch.optim.AdamW defaults
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  // torch.optim.AdamW(fused=True): one at::_fused_adamw_ over every shard (PyTorch's
  // multi-tensor CUDA kernel, aten/src/ATen/native/cuda/fused_adamw_impl.cu: reads p, g, m, v
  // and writes p, m, v once, 28 bytes per fp32 element, where the per-op path makes nine passes).
  // REQUIRES FusedAdamWAvailable(shards' device) (run_cmd records foreach otherwise) for device
  // shards; host shards (CPU ranks, CPU offload) always take the one-pass host kernel, which is
  // the fused update's traffic (run_cmd records fused for them).
  bool fused = false;
};

// torch.optim.AdamW(foreach=True)'s step `step` (>= 1) at `lr` over the lists, op for op as
// torch/optim/adam.py _multi_tensor_adam runs it (decoupled weight decay, AdamWOptions' betas and
// eps; exp_avg's lerp as mul_ + add_; _foreach_sqrt allocates the denominators afresh): PyTorch's
// own path, which the probe times on host tensors (CPU offload, probe.cc) and
// tests/bench/host_optimizer_bench compares the host kernel with. Not what `run` steps.
void TorchForeachAdamWStep(std::vector<at::Tensor>& p, const std::vector<at::Tensor>& g,
                           std::vector<at::Tensor>& m, std::vector<at::Tensor>& v, double lr,
                           double weight_decay, int64_t step);

// This LibTorch has at::_fused_adamw_ (>= 2.1) and `device` is "cuda".
bool FusedAdamWAvailable(const std::string& device);

// Host shards are updated (AdamW) and measured (gradient clipping) by the one-pass kernels of
// kernels/host_adamw.h, split across the intra-op threads in ranges of at least this many
// elements (256 KiB of each fp32 array), and the clipping norm sums squares in blocks of this
// size, added in order, so its bits do not depend on the thread count.
inline constexpr int64_t kHostGrainNumel = int64_t{1} << 16;

class ShardedOptimizer {
 public:
  // `params` are the flat fp32 shards; grads are read from `grads` at Step() time (same order).
  // REQUIRES: kind is kAdamW or kSgd (Adafactor is not implemented).
  ShardedOptimizer(model::Optimizer kind, AdamWOptions options, std::vector<at::Tensor*> params,
                   std::vector<at::Tensor*> grads);
  // One update with learning rate `lr`; shards whose gradient is undefined are skipped
  // (torch skips parameters whose .grad is None). AdamW state is created lazily, as
  // torch.optim.AdamW does: zeros for a shard at the first Step() that updates it, so the first
  // step's peak holds the state's creation and the start-up holds none.
  void Step(double lr);
  // True for optimizers that keep state (AdamW), whether or not it was created yet.
  bool keeps_state() const { return kind_ == model::Optimizer::kAdamW; }
  // Creates the state of every shard that has none (a checkpoint load, or a save after a step
  // that skipped every update). No-op for SGD.
  void EnsureState();
  int64_t step() const { return step_; }
  void set_step(int64_t s) { step_ = s; }
  // AdamW state per shard, for checkpoints: empty for SGD and before the first Step() or
  // EnsureState(); afterwards one tensor per shard (undefined for a shard never updated).
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }

 private:
  model::Optimizer kind_;
  AdamWOptions options_;
  std::vector<at::Tensor*> params_, grads_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  void FusedAdamWStep(double lr);
  void StateOf(size_t i);  // creates shard i's AdamW state where it has none
  int64_t step_ = 0;
};

}  // namespace shardtune::exec
