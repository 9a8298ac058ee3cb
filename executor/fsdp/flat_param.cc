// Flat parameter storage: init, shard, gather into a re-allocatable buffer, free, flat grads.
#include "executor/fsdp/flat_param.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "executor/comm/communicator.h"
#include "executor/nn/transformer.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace {

// Runs a callback after an AccumulateGrad node (the parameter's .grad is then set).
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

FlatParam::FlatParam(const model::FsdpUnit& unit, const FlatParamOptions& o)
    : name_(unit.name), options_(o) {
  SHARDTUNE_CHECK(o.shard_size >= 1 && o.shard_rank >= 0 && o.shard_rank < o.shard_size)
      << "shard rank " << o.shard_rank << " of " << o.shard_size;
  for (const model::ParamTensor& p : unit.params) {
    ParamSlot s{p.name, Transformer::Shape(p.dim0, p.inner), numel_, p.numel()};
    numel_ += s.numel;
    slots_.push_back(std::move(s));
  }
  shard_numel_ = (numel_ + o.shard_size - 1) / o.shard_size;  // pad to a multiple of n
  at::NoGradGuard no_grad;
  at::Tensor full = at::zeros({padded_numel()}, at::kFloat);  // [padded] fp32, init only
  for (const ParamSlot& s : slots_) {
    at::Tensor slot = full.narrow(0, s.offset, s.numel).view(s.shape);
    if (o.first_expert >= 0) {
      Transformer::InitLocalExperts(s.name, o.seed, slot, o.first_expert, o.num_experts,
                                    o.gated_experts);
    } else {
      Transformer::InitParameter(s.name, o.seed, slot, o.norm_unit_offset);
    }
  }
  bool offload = o.offload_shard && o.device.is_cuda();
  SHARDTUNE_CHECK(!o.requires_grad || o.shard_dtype == at::kFloat)
      << name_ << ": trainable shards are fp32 masters";
  shard_ = full.narrow(0, o.shard_rank * shard_numel_, shard_numel_).to(o.shard_dtype).clone();
  if (offload) {
    shard_ = shard_.pin_memory();  // page-locked: asynchronous host <-> device copies
    if (o.keep_device_shard) device_shard_ = shard_.to(o.device).to(o.param_dtype);
  } else {
    shard_ = shard_.to(o.device);
  }
  full_ = at::empty({padded_numel()}, at::TensorOptions().dtype(o.param_dtype).device(o.device));
  for (const ParamSlot& s : slots_) {
    std::vector<int64_t> strides(s.shape.size(), 1);
    for (size_t i = s.shape.size(); i-- > 1;) strides[i - 1] = strides[i] * s.shape[i];
    at::Tensor v =
        at::empty({0}, full_.options()).set_(full_.storage(), s.offset, s.shape, strides);
    params_.push_back(v.requires_grad_(o.requires_grad));
  }
  Free();
}

FlatParam::~FlatParam() = default;

std::unique_ptr<Work> FlatParam::BeginGather(Communicator& comm) {
  SHARDTUNE_CHECK(comm.size() == options_.shard_size) << name_ << ": shard group size";
  c10::StorageImpl* st = full_.storage().unsafeGetStorageImpl();
  size_t bytes = static_cast<size_t>(padded_numel()) * full_.element_size();
  if (st->nbytes() != bytes) {
    st->set_data_ptr_noswap(st->allocator()->allocate(bytes));
    st->set_nbytes(bytes);
  }
  at::NoGradGuard no_grad;
  at::Tensor local = full_.narrow(0, options_.shard_rank * shard_numel_, shard_numel_);
  if (device_shard_.defined()) {
    local.copy_(device_shard_);  // ZeRO-Offload: the param-dtype shard is already here
  } else if (offloaded()) {
    // CPU offload: host fp32 shard -> device (asynchronous from pinned memory), then the cast
    // in the copy-in, as FSDP2 does.
    local.copy_(shard_.to(full_.device(), /*non_blocking=*/true));
  } else {
    local.copy_(shard_);  // fp32 master -> param dtype
  }
  if (options_.shard_size == 1) {
    gathered_ = true;
    return nullptr;
  }
  return comm.AllGather(local, full_);
}

void FlatParam::RefreshDeviceShard() {
  if (!device_shard_.defined()) return;
  at::NoGradGuard no_grad;
  // Pinned host fp32 -> device, then the cast there (a cross-device copy_ with a dtype change
  // converts on the host: ATen/native/cuda/Copy.cu).
  device_shard_.copy_(shard_.to(device_shard_.device(), /*non_blocking=*/true));
}

void FlatParam::Free() {
  c10::StorageImpl* st = full_.storage().unsafeGetStorageImpl();
  st->set_data_ptr_noswap(at::DataPtr(nullptr, full_.device()));
  st->set_nbytes(0);
  gathered_ = false;
}

int64_t FlatParam::gathered_bytes() const { return static_cast<int64_t>(full_.storage().nbytes()); }

bool FlatParam::CountGradReady() {
  if (++grads_ready_ < static_cast<int>(params_.size())) return false;
  grads_ready_ = 0;
  return true;
}

at::Tensor FlatParam::TakeFlatGrad() {
  at::NoGradGuard no_grad;
  at::Tensor flat = at::empty({padded_numel()}, full_.options().dtype(options_.reduce_dtype));
  for (size_t i = 0; i < slots_.size(); ++i) {
    at::Tensor& g = params_[i].mutable_grad();
    SHARDTUNE_CHECK(g.defined()) << name_ << ": no gradient for " << slots_[i].name;
    flat.narrow(0, slots_[i].offset, slots_[i].numel).copy_(g.reshape({-1}));
    g = at::Tensor();
  }
  if (padded_numel() > numel_) flat.narrow(0, numel_, padded_numel() - numel_).zero_();
  return flat;
}

void FlatParam::InstallGradHooks(std::function<void()> on_grad) {
  SHARDTUNE_CHECK(trainable()) << name_ << ": a frozen flat parameter has no gradients";
  for (const at::Tensor& p : params_) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(p);
    acc->add_post_hook(std::make_unique<GradReadyHook>(on_grad));
    accumulators_.push_back(std::move(acc));
  }
}

}  // namespace shardtune::exec
