// One FSDP unit's flat parameter (FSDP1's FlatParameter layout, FSDP2's per-unit all-gather):
// the unit's parameters concatenated in module order, padded at the end to a multiple of the
// shard group size n and cut into n equal shards. Each rank keeps its fp32 master shard; the
// gathered buffer (param dtype) exists only while the unit is gathered. The model's parameters
// are leaf tensors that view the gathered buffer's storage; freeing sets that storage to 0
// bytes and gathering allocates it again, so the views autograd saved stay valid (FSDP2 frees
// with storage.resize_(0) for the same reason). Padding differs from FSDP2, which pads each
// parameter's dim 0 (at most n-1 elements per unit here, per parameter there).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/module_tree.h"

namespace torch::autograd {
struct Node;
}

namespace shardtune::exec {

class Communicator;
class Work;

struct ParamSlot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in elements, within the flat parameter
  int64_t numel = 0;
};

struct FlatParamOptions {
  at::ScalarType param_dtype = at::kFloat;   // gathered buffer and compute
  at::ScalarType reduce_dtype = at::kFloat;  // gradient reduction
  // The sharded parameter's dtype: fp32 master for trainable ones; a frozen flat parameter keeps
  // the dtype the model was loaded in (plan frozen_dtype), as FSDP2 keeps each sharded parameter
  // in the module's dtype and casts in the all-gather copy-in.
  at::ScalarType shard_dtype = at::kFloat;
  int shard_size = 1;                        // n, ranks in the shard group
  int shard_rank = 0;
  uint64_t seed = 0;             // parameter initialization
  bool norm_unit_offset = false;  // Gemma: norm weights start at 0 (they scale by 1 + w)
  at::Device device = at::kCPU;  // where gathered buffers (and shards, unless offloaded) live
  // CPU offload (plan offload optimizer|all) on a GPU run: the fp32 master shard, its gradient
  // and so the optimizer state live in page-locked host memory; a gather copies the shard to
  // the device first (FSDP2 CPUOffloadPolicy(pin_memory=True):
  // torch/distributed/fsdp/_fully_shard/_fsdp_param.py, `sharded_param.to(device,
  // non_blocking=True)` before the all-gather copy-in). Ignored on a CPU run (already host).
  bool offload_shard = false;
  // ZeRO-Offload (plan offload optimizer): a param-dtype copy of the shard stays on `device`,
  // refreshed after each optimizer step (RefreshDeviceShard), so gathers need no host copy.
  bool keep_device_shard = false;
  // false: a frozen flat parameter (plan.frozen_prefixes, LoRA's base weights): its views do not
  // require grad, it gets no grad hooks, no gradient, no reduction and no optimizer state.
  bool requires_grad = true;
  // An expert-parallel unit (module_tree.h, ep > 1): its tensors hold experts first_expert ..
  // of num_experts, initialised by Transformer::InitLocalExperts (gated: SwiGLU experts). -1: not one.
  int64_t first_expert = -1;
  int64_t num_experts = 0;
  bool gated_experts = true;
};

class FlatParam {
 public:
  // Initializes the unit's parameters (Transformer::InitParameter) and keeps this rank's shard.
  FlatParam(const model::FsdpUnit& unit, const FlatParamOptions& options);
  ~FlatParam();
  FlatParam(const FlatParam&) = delete;
  FlatParam& operator=(const FlatParam&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<ParamSlot>& slots() const { return slots_; }
  int64_t numel() const { return numel_; }  // unpadded
  int64_t padded_numel() const { return shard_numel_ * options_.shard_size; }
  int64_t shard_numel() const { return shard_numel_; }
  const FlatParamOptions& options() const { return options_; }
  bool trainable() const { return options_.requires_grad; }

  at::Tensor& shard() { return shard_; }            // [shard_numel] shard_dtype (fp32 master)
  at::Tensor& grad_shard() { return grad_shard_; }  // [shard_numel] fp32, undefined when zero
  // Where shard(), grad_shard() and the optimizer state live (the host under CPU offload).
  at::Device shard_device() const { return shard_.device(); }
  bool offloaded() const { return shard_.device() != full_.device(); }
  // After shard() changed (optimizer step, checkpoint load): refreshes the device copy of a
  // ZeRO-Offload shard (no-op without one).
  void RefreshDeviceShard();
  // The parameters in slots() order: leaf tensors (requires_grad unless frozen) viewing the
  // gathered buffer.
  const std::vector<at::Tensor>& params() const { return params_; }

  bool gathered() const { return gathered_; }
  // Allocates the gathered buffer, writes this rank's shard into its slot (cast to param
  // dtype) and issues the all-gather. Returns null when nothing is left to wait for (n == 1).
  std::unique_ptr<Work> BeginGather(Communicator& shard_comm);
  void MarkGathered() { gathered_ = true; }
  // Frees the gathered buffer's memory (its storage becomes 0 bytes). The views stay.
  void Free();
  int64_t gathered_bytes() const;

  // Called when one parameter's gradient was accumulated; true when all of them were.
  bool CountGradReady();
  // The unit's gradients as one flat tensor [padded_numel] in reduce dtype (zeros in the
  // padding); the parameters' .grad are released.
  at::Tensor TakeFlatGrad();
  // Keeps the parameters' AccumulateGrad nodes alive and calls `on_grad` after each one ran
  // (on the autograd thread), so the runtime knows when the unit's backward is complete.
  // REQUIRES: trainable().
  void InstallGradHooks(std::function<void()> on_grad);

 private:
  std::string name_;
  FlatParamOptions options_;
  std::vector<ParamSlot> slots_;
  int64_t numel_ = 0, shard_numel_ = 0;
  at::Tensor shard_, grad_shard_, full_;
  at::Tensor device_shard_;  // [shard_numel] param dtype on the device (keep_device_shard only)
  std::vector<at::Tensor> params_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  bool gathered_ = false;
  int grads_ready_ = 0;
};

}  // namespace shardtune::exec
