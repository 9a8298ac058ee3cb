// A ledger of live tensors through one forward and backward pass of a small op graph, as PyTorch's
// eager autograd runs it: forward keeps what each op saves (torch/csrc/autograd SavedVariable),
// frees other temporaries after their last use; backward frees an op's saved tensors once no
// later backward node needs them, and materialises one gradient per input that requires grad.
// requires_grad propagates forward from the graph's input and from trainable parameters; an op
// none of whose inputs or parameters requires grad records no node and saves nothing, and an op
// saves a tensor only when a gradient whose formula uses it is computed (codegen wraps the save in
// grad_fn->should_compute_output(edge): tools/autograd/gen_variable_type.py guard_for).
#pragma once

#include <string>
#include <vector>

#include "model/activations.h"

namespace shardtune::model {

// A tensor an op saves, and which of the op's gradients needs it: an input position (derivatives
// .yaml "mat2: mm_mat2_backward(grad, mat1, ...)" saves mat1 for mat2's gradient only), the op's
// parameter (kParamGrad: nn.Linear's input is saved for the weight's gradient only), or kAnyGrad
// (a single-input op, or a multi-output formula such as "input, weight, bias:
// native_layer_norm_backward(...)": saved whenever the node exists).
struct SavedFor {
  static constexpr int kAnyGrad = -1;
  static constexpr int kParamGrad = -2;
  SavedFor(int t, int for_grad = kAnyGrad) : tensor(t), grad(for_grad) {}  // NOLINT: implicit
  int tensor;
  int grad;
};

class AutogradLedger {
 public:
  // Adds a tensor of `bytes_per_token` bytes (x B·S) and returns its id.
  int Tensor(const std::string& name, double bytes_per_token);
  // Marks a tensor as held by the caller for the whole step (HF's outputs.logits).
  void HoldByCaller(int tensor);
  // Keeps a tensor live to the end of forward without saving it for backward (the model's return
  // value holds HF's logits while the loss runs; torchtitan's loop deletes `pred` after the loss).
  void HoldThroughForward(int tensor);
  // Records an op in forward order. `saved` lists the tensors autograd keeps for its backward and
  // which gradient needs each (a plain id: any); `backward_workspace` is scratch its backward
  // kernel allocates (bytes per token). Gradients flow to every input in `inputs` that requires
  // grad (parameters are not tensors of this graph).
  void Op(const std::string& name, const std::vector<int>& inputs, int output,
          const std::vector<SavedFor>& saved, double backward_workspace = 0);
  // Marks the last recorded op as a matmul or attention kernel (compute-bound): its traffic is
  // not counted in elementwise_traffic_per_token.
  void MarkComputeBound();
  // Gives the last recorded op `elements` parameter elements: its backward allocates their
  // gradient (a Linear's weight, a norm's scale) when `trains`. `requires_grad`: some parameter of
  // the op requires grad (its weight, or only its bias), so its output does.
  // REQUIRES: requires_grad when trains.
  void SetParam(double elements, bool trains = true, bool requires_grad = true);
  double BytesPerToken(int tensor) const;
  // Walks forward from `input` then backward from `output` and returns the ledger.
  // `input_requires_grad`: the graph's input requires grad (false for the first block a frozen
  // prefix of the model feeds). REQUIRES: the ops form a chain from `input` to `output` in
  // recording order.
  ActivationLedger Run(int input, int output, bool input_requires_grad = true) const;

 private:
  struct TensorInfo {
    std::string name;
    double bytes;
    bool held = false;
    bool held_forward = false;
  };
  struct OpInfo {
    std::string name;
    std::vector<int> inputs;
    int output;
    std::vector<SavedFor> saved;
    double backward_workspace;
    bool compute_bound = false;
    double param_elements = 0;
    bool param_trains = false, param_requires_grad = false;
  };
  // What autograd records: per tensor, requires_grad; per op, the tensors it actually saves.
  struct Recorded {
    std::vector<bool> requires_grad;
    std::vector<std::vector<int>> saves;
  };
  Recorded Record(int input, bool input_requires_grad) const;
  double Forward(int input, int output, const Recorded& rec, std::vector<bool>* is_saved) const;
  double Backward(int output, const Recorded& rec, const std::vector<bool>& is_saved,
                  std::vector<ActivationLedger::BackwardPoint>* profile) const;
  std::vector<TensorInfo> tensors_;
  std::vector<OpInfo> ops_;
};

}  // namespace shardtune::model
