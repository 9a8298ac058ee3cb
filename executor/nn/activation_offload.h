// Activation offload as verl runs it (`enable_activation_offload`, Plan::activation_offload
// verl_async): the tensors autograd saves in each transformer layer's forward go to host memory,
// block by block, and come back one block ahead of that block's backward. Ported from
// verl/utils/activation_offload.py (volcengine/verl, AsyncDoubleBufferGroupOffloadHandler,
// CpuOffloadHookWithOffloadHandler, GroupCommitFunction, FSDPParameterFilter):
//  - one group per FSDP layer; the last layer's group stays on the device (num_offload_group =
//    layers - 1), and verl turns the feature off below three layers;
//  - forward: at layer g's commit (after its forward) the copy of group g to the host starts and
//    group g-1's device tensors are dropped (after the compute and copy streams waited for each
//    other), so at most two groups are on the device;
//  - backward: at layer g's commit (when its output's gradient arrives, before its backward)
//    group g-1 is brought back; a saved tensor is handed over (and forgotten) when autograd
//    unpacks it;
//  - the layer's own parameters (their storages) are saved as they are, and tensors that share
//    a storage offset and dtype are copied once.
// LibTorch's C++ API has no saved_tensors_hooks context (Python's pushes PyObjects): the hooks
// come from the autograd engine's get_default_saved_variable_hooks, which SavedVariable asks for
// every tensor it saves (torch/csrc/autograd/saved_variable.cpp get_default_hooks); shardtune
// installs an engine whose override answers for the thread's active layer
// (InstallSavedTensorHooksEngine).
//
// On CUDA the copies run on their own device-to-host and host-to-device streams into pinned
// host tensors, with verl's stream waits; on CPU ranks (an emulation of the device: the tensor
// allocator counts as device memory, memory_tracker.h) the host copies are plain heap buffers
// outside LibTorch's allocator and the copies are synchronous.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace shardtune::exec {

// Makes LibTorch's default autograd engine one that takes saved-tensor hooks from C++
// (ActivationOffload's layer contexts). Idempotent; REQUIRES: no backward runs meanwhile (the
// engine a running backward uses is not swapped; later ones use the new engine).
void InstallSavedTensorHooksEngine();

class ActivationOffload {
 public:
  // `layers`: the FSDP layers whose saved tensors are grouped (>= 3, as verl requires);
  // `device`: where the model computes.
  ActivationOffload(int layers, const at::Device& device);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  // Around one layer's forward, once its parameters are gathered (verl's pre_forward /
  // post_forward around the wrapped forward, inside FSDP2's hooks): tensors saved on this thread
  // in between go through the handler. `params`: the layer's parameters; tensors that view
  // their storages are saved as they are (FSDPParameterFilter). A forward's first layer (layer
  // 0 entered with no group open) starts a new step. Only in grad mode; layers in order.
  void EnterLayer(const std::vector<at::Tensor>& params);
  // Leaves the layer's context and returns y through the group commit (verl's
  // group_prefetch_offload_commit on the layer's first output): the forward commit runs now, the
  // backward one when y's gradient arrives.
  at::Tensor LeaveLayer(const at::Tensor& y);

  // Leaves the layer's context without a commit (its forward threw).
  void CancelLayer();

  // Host bytes of the copies made in the last forward (one per distinct tensor).
  int64_t host_bytes() const;
  // For tests: called with each distinct tensor the handler copies to the host (reload false,
  // at the copy) and with the tensor it brings back for it (reload true), `copy` numbering the
  // copies of one forward from 0.
  using Observer = std::function<void(bool reload, int64_t copy, const at::Tensor& tensor)>;
  void set_observer(Observer f);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtune::exec
