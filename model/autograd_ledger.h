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
  // Adds a tensor that earlier sub-graphs made and that exists when this one starts (live from
  // the start, requiring grad as the graph's input does): e.g. every layer's router logits,
  // which the head's auxiliary loss reads. Its gradient, once made, outlives this sub-graph's
  // backward (the earlier sub-graphs consume it).
  int Leaf(const std::string& name, double bytes_per_token);
  // Marks a tensor as held by the caller for the whole step (HF's outputs.logits).
  void HoldByCaller(int tensor);
  // Keeps a tensor live to the end of forward without saving it for backward (the model's return
  // value holds HF's logits while the loss runs; torchtitan's loop deletes `pred` after the loss).
  void HoldThroughForward(int tensor);
  // Keeps `tensor` live until the last op recorded so far has run, without that op reading it
  // (no gradient flows to it): a Python local that outlives its last use until its function
  // returns (transformers' grouped_mm_experts_forward holds selected_hidden_states, the weighted
  // expert outputs and their unsorted copy until it returns). REQUIRES: an op was recorded.
  void KeepAliveThroughLastOp(int tensor);
  // Records an op in forward order. `saved` lists the tensors autograd keeps for its backward and
  // which gradient needs each (a plain id: any); `backward_workspace` is scratch its backward
  // kernel allocates (bytes per token). Gradients flow to every input in `inputs` that requires
  // grad (parameters are not tensors of this graph).
  void Op(const std::string& name, const std::vector<int>& inputs, int output,
          const std::vector<SavedFor>& saved, double backward_workspace = 0);
  // Records one op that makes views of `base` (slicing x[..., a:b], Tensor.chunk; a view of a
  // view is a view of its base), one per name, of `bytes_per_token` logical bytes each. A view
  // has no storage and launches no kernel; whatever saves a view keeps its base's whole storage
  // alive (a SavedVariable holds the tensor, and the tensor its base's storage). Backward is one
  // node (SliceBackward0 per slice op; SplitBackward0 for a chunk's views together) that takes
  // the views' gradients and materialises one gradient of the base's full size
  // (tools/autograd/derivatives.yaml: slice_backward / split_backward allocate the base's shape).
  std::vector<int> Views(int base, const std::vector<std::string>& names,
                         const std::vector<double>& bytes_per_token);
  // Marks the last recorded op as a matmul or attention kernel (compute-bound): its traffic is
  // not counted in elementwise_traffic_per_token.
  void MarkComputeBound();
  // Gives the last recorded op scratch its forward kernel allocates and frees before returning
  // (bytes per token, live beside its inputs and output at that moment): verl's Triton linear
  // cross-entropy's per-split partials.
  void SetForwardWorkspace(double bytes_per_token);
  // Marks the last recorded op's backward as writing its input gradients into storage that
  // already exists instead of allocating them: Liger's RMSNorm writes dX into dY (in_place), its
  // SiLU-mul writes da and db into the saved a and b. The node allocates nothing fresh; the
  // gradients then count at their size as usual (the storage they took is released with the
  // incoming gradient or the saved tensors).
  void MarkInPlaceBackward();
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
    double bytes;  // a view's: its logical size (its gradient's); it owns no storage
    bool held = false;
    bool held_forward = false;
    int base = -1;  // a view's base tensor (never itself a view); -1: owns its storage
    bool leaf = false;  // made before this sub-graph (Leaf)
  };
  struct OpInfo {
    std::string name;
    std::vector<int> inputs;
    int output;
    std::vector<SavedFor> saved;
    double backward_workspace;
    bool compute_bound = false;
    double forward_workspace = 0;
    bool in_place_backward = false;
    double param_elements = 0;
    bool param_trains = false, param_requires_grad = false;
    std::vector<int> more_outputs = {};  // a Views op's outputs after the first
    std::vector<int> kept = {};          // KeepAliveThroughLastOp: freed after this op, no grad
    bool view = false;              // a Views op: no kernel, no traffic
  };
  // The tensor whose storage `t` uses: its base for a view, else itself.
  size_t Storage(int t) const;
  // What autograd records: per tensor, requires_grad; per op, the tensors it actually saves.
  struct Recorded {
    std::vector<bool> requires_grad;
    std::vector<std::vector<int>> saves;
  };
  Recorded Record(int input, bool input_requires_grad) const;
  double Forward(int input, int output, const Recorded& rec, std::vector<bool>* is_saved) const;
  double Backward(int output, const Recorded& rec, const std::vector<bool>& is_saved,
                  std::vector<ActivationLedger::BackwardPoint>* profile, int* backward_ops) const;
  std::vector<TensorInfo> tensors_;
  std::vector<OpInfo> ops_;
};

}  // namespace shardtune::model
