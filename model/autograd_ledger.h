// A ledger of live tensors through one forward and backward pass of a small op graph, as PyTorch's
// eager autograd runs it: forward keeps what each op saves (torch/csrc/autograd SavedVariable),
// frees other temporaries after their last use; backward frees an op's saved tensors once no
// later backward node needs them, and materialises one gradient per differentiable input.
#pragma once

#include <string>
#include <vector>

#include "model/activations.h"

namespace shardtune::model {

class AutogradLedger {
 public:
  // Adds a tensor of `bytes_per_token` bytes (x B·S) and returns its id.
  int Tensor(const std::string& name, double bytes_per_token);
  // Marks a tensor as held by the caller for the whole step (HF's outputs.logits).
  void HoldByCaller(int tensor);
  // Keeps a tensor live to the end of forward without saving it for backward (the model's return
  // value holds HF's logits while the loss runs; torchtitan's loop deletes `pred` after the loss).
  void HoldThroughForward(int tensor);
  // Records an op in forward order. `saved` lists the tensors autograd keeps for its backward;
  // `backward_workspace` is scratch its backward kernel allocates (bytes per token).
  // Gradients flow to every input in `inputs` (parameters are not tensors of this graph).
  void Op(const std::string& name, const std::vector<int>& inputs, int output,
          const std::vector<int>& saved, double backward_workspace = 0);
  // Marks the last recorded op as a matmul or attention kernel (compute-bound): its traffic is
  // not counted in elementwise_traffic_per_token.
  void MarkComputeBound();
  // Gives the last recorded op `elements` parameter elements: its backward allocates their
  // gradient (a Linear's weight, a norm's scale).
  void SetParamElements(double elements);
  double BytesPerToken(int tensor) const;
  // Walks forward from `input` then backward from `output` and returns the ledger.
  // REQUIRES: the ops form a chain from `input` to `output` in recording order.
  ActivationLedger Run(int input, int output) const;

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
    std::vector<int> saved;
    double backward_workspace;
    bool compute_bound = false;
    double param_elements = 0;
  };
  double Forward(int input, int output, std::vector<bool>* is_saved) const;
  double Backward(int output, const std::vector<bool>& is_saved,
                  std::vector<ActivationLedger::BackwardPoint>* profile) const;
  std::vector<TensorInfo> tensors_;
  std::vector<OpInfo> ops_;
};

}  // namespace shardtune::model
