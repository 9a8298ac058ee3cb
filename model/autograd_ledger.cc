// Forward/backward walk of a recorded op graph with a byte ledger (see autograd_ledger.h).
#include "model/autograd_ledger.h"

#include <algorithm>
#include <map>
#include <set>

#include "model/errors.h"

namespace shardtune::model {

int AutogradLedger::Tensor(const std::string& name, double bytes_per_token) {
  tensors_.push_back({name, bytes_per_token});
  return static_cast<int>(tensors_.size()) - 1;
}

int AutogradLedger::Leaf(const std::string& name, double bytes_per_token) {
  int t = Tensor(name, bytes_per_token);
  tensors_.back().leaf = true;
  return t;
}

void AutogradLedger::HoldByCaller(int tensor) {
  SHARDTUNE_CHECK(tensor >= 0 && tensor < static_cast<int>(tensors_.size())) << tensor;
  tensors_[static_cast<size_t>(tensor)].held = true;
}

void AutogradLedger::HoldThroughForward(int tensor) {
  SHARDTUNE_CHECK(tensor >= 0 && tensor < static_cast<int>(tensors_.size())) << tensor;
  tensors_[static_cast<size_t>(tensor)].held_forward = true;
}

void AutogradLedger::KeepAliveThroughLastOp(int tensor) {
  SHARDTUNE_CHECK(tensor >= 0 && tensor < static_cast<int>(tensors_.size())) << tensor;
  SHARDTUNE_CHECK(!ops_.empty()) << "no op to keep " << tensors_[static_cast<size_t>(tensor)].name << " through";
  ops_.back().kept.push_back(tensor);
}

void AutogradLedger::Op(const std::string& name, const std::vector<int>& inputs, int output,
                        const std::vector<SavedFor>& saved, double backward_workspace) {
  int n = static_cast<int>(tensors_.size());
  SHARDTUNE_CHECK(output >= 0 && output < n) << name;
  for (int t : inputs) SHARDTUNE_CHECK(t >= 0 && t < n) << name;
  for (const SavedFor& s : saved) {
    SHARDTUNE_CHECK(s.tensor >= 0 && s.tensor < n) << name;
    SHARDTUNE_CHECK(s.grad == SavedFor::kAnyGrad || s.grad == SavedFor::kParamGrad ||
                    (s.grad >= 0 && s.grad < static_cast<int>(inputs.size())))
        << name << " saves for gradient " << s.grad;
  }
  ops_.push_back({name, inputs, output, saved, backward_workspace});
}

std::vector<int> AutogradLedger::Views(int base, const std::vector<std::string>& names,
                                       const std::vector<double>& bytes_per_token) {
  int n = static_cast<int>(tensors_.size());
  SHARDTUNE_CHECK(base >= 0 && base < n) << "view of " << base;
  SHARDTUNE_CHECK(!names.empty() && names.size() == bytes_per_token.size()) << names.size();
  int root = static_cast<int>(Storage(base));
  std::vector<int> ids;
  for (size_t i = 0; i < names.size(); ++i) {
    tensors_.push_back({names[i], bytes_per_token[i]});
    tensors_.back().base = root;
    ids.push_back(static_cast<int>(tensors_.size()) - 1);
  }
  OpInfo op{names.front() + " (view)", {base}, ids.front(), {}, 0};
  op.more_outputs.assign(ids.begin() + 1, ids.end());
  op.view = true;
  ops_.push_back(op);
  return ids;
}

size_t AutogradLedger::Storage(int t) const {
  const TensorInfo& info = tensors_[static_cast<size_t>(t)];
  return static_cast<size_t>(info.base >= 0 ? info.base : t);
}

void AutogradLedger::MarkComputeBound() {
  SHARDTUNE_CHECK(!ops_.empty()) << "no op to mark";
  ops_.back().compute_bound = true;
}

void AutogradLedger::SetForwardWorkspace(double bytes_per_token) {
  SHARDTUNE_CHECK(!ops_.empty()) << "no op to give a forward workspace";
  ops_.back().forward_workspace = bytes_per_token;
}

void AutogradLedger::MarkInPlaceBackward() {
  SHARDTUNE_CHECK(!ops_.empty()) << "no op to mark";
  ops_.back().in_place_backward = true;
}

void AutogradLedger::SetParam(double elements, bool trains, bool requires_grad) {
  SHARDTUNE_CHECK(!ops_.empty()) << "no op to give parameters";
  SHARDTUNE_CHECK(requires_grad || !trains) << ops_.back().name;
  ops_.back().param_elements = elements;
  ops_.back().param_trains = trains;
  ops_.back().param_requires_grad = requires_grad;
}

double AutogradLedger::BytesPerToken(int tensor) const {
  SHARDTUNE_CHECK(tensor >= 0 && tensor < static_cast<int>(tensors_.size())) << tensor;
  return tensors_[static_cast<size_t>(tensor)].bytes;
}

// torch/csrc/autograd (VariableType codegen, gen_variable_type.py): an op makes a grad_fn only
// when compute_requires_grad(inputs) (an input or a parameter requires grad), and its output then
// requires grad. A saved tensor whose formula belongs to one gradient is saved under
// should_compute_output(that edge), i.e. when that input requires grad; one used by a
// multi-output formula whenever the node exists.
AutogradLedger::Recorded AutogradLedger::Record(int input, bool input_requires_grad) const {
  Recorded r;
  r.requires_grad.assign(tensors_.size(), false);
  r.requires_grad[static_cast<size_t>(input)] = input_requires_grad;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (tensors_[t].leaf) r.requires_grad[t] = input_requires_grad;
  }
  r.saves.resize(ops_.size());
  for (size_t k = 0; k < ops_.size(); ++k) {
    const OpInfo& op = ops_[k];
    bool node = op.param_requires_grad;
    for (int t : op.inputs) node = node || r.requires_grad[static_cast<size_t>(t)];
    if (!node) continue;
    r.requires_grad[static_cast<size_t>(op.output)] = true;
    for (int t : op.more_outputs) r.requires_grad[static_cast<size_t>(t)] = true;
    for (const SavedFor& s : op.saved) {
      bool needed = s.grad == SavedFor::kAnyGrad;
      if (s.grad == SavedFor::kParamGrad) needed = op.param_trains;
      if (s.grad >= 0) {
        auto in = static_cast<size_t>(op.inputs[static_cast<size_t>(s.grad)]);
        needed = r.requires_grad[in];
      }
      if (needed) r.saves[k].push_back(s.tensor);
    }
  }
  return r;
}

// Forward: a tensor is live from the op that makes it until its last consumer (or the last
// consumer of a view of it) has run, or until backward if some op saves it or a view of it (or
// the caller holds it). The graph's input is live at the start. Views own no bytes; `is_saved`
// marks storages (a saved view marks its base).
double AutogradLedger::Forward(int input, int output, const Recorded& rec,
                               std::vector<bool>* is_saved) const {
  size_t n = tensors_.size();
  is_saved->assign(n, false);
  std::vector<int> last_use(n, -1);
  std::vector<bool> held_forward(n, false);
  for (size_t k = 0; k < ops_.size(); ++k) {
    for (int t : ops_[k].inputs) last_use[Storage(t)] = static_cast<int>(k);
    for (int t : ops_[k].kept) last_use[Storage(t)] = std::max(last_use[Storage(t)], static_cast<int>(k));
    for (int t : rec.saves[k]) (*is_saved)[Storage(t)] = true;
  }
  for (size_t t = 0; t < n; ++t) {
    if (tensors_[t].held) (*is_saved)[Storage(static_cast<int>(t))] = true;
    if (tensors_[t].held_forward) held_forward[Storage(static_cast<int>(t))] = true;
  }
  const size_t out_storage = Storage(output);
  std::vector<bool> live(n, false);
  live[static_cast<size_t>(input)] = true;
  for (size_t t = 0; t < n; ++t) live[t] = live[t] || tensors_[t].leaf;
  auto live_bytes = [&] {
    double b = 0;
    for (size_t t = 0; t < n; ++t) b += live[t] && tensors_[t].base < 0 ? tensors_[t].bytes : 0;
    return b;
  };
  double peak = live_bytes();
  for (size_t k = 0; k < ops_.size(); ++k) {
    live[static_cast<size_t>(ops_[k].output)] = true;
    peak = std::max(peak, live_bytes() + ops_[k].forward_workspace);
    auto release = [&](int t) {
      size_t st = Storage(t);
      if (last_use[st] == static_cast<int>(k) && !(*is_saved)[st] && !held_forward[st] &&
          st != out_storage) {
        live[st] = false;
      }
    };
    for (int t : ops_[k].inputs) release(t);
    for (int t : ops_[k].kept) release(t);
  }
  return peak;
}

// Backward: nodes run in reverse recording order. Each consumes the gradient of its output and
// allocates one gradient per input that requires grad (a second gradient for the same tensor is
// summed into the first, both live for that moment). Saved tensors are released when the
// earliest (in forward order) op saving them has run backward; caller-held tensors never are.
double AutogradLedger::Backward(int output, const Recorded& rec, const std::vector<bool>& is_saved,
                                std::vector<ActivationLedger::BackwardPoint>* profile,
                                int* backward_ops) const {
  *backward_ops = 0;
  size_t n = tensors_.size();
  double param_total = 0, param_done = 0;
  for (const OpInfo& op : ops_) param_total += op.param_trains ? op.param_elements : 0;
  auto fraction = [&] { return param_total > 0 ? param_done / param_total : 0.0; };
  std::vector<int> first_saver(n, -1);  // per storage: a saved view counts for its base
  for (size_t k = ops_.size(); k-- > 0;) {
    for (int t : rec.saves[k]) first_saver[Storage(t)] = static_cast<int>(k);
  }
  double saved_live = 0;
  std::vector<bool> saved_alive(n, false);
  for (size_t t = 0; t < n; ++t) {
    if (is_saved[t]) {
      saved_alive[t] = true;
      saved_live += tensors_[t].bytes;
    }
  }
  std::map<int, double> grads;  // tensor id -> bytes of its gradient buffer
  if (rec.requires_grad[static_cast<size_t>(output)])
    grads[output] = tensors_[static_cast<size_t>(output)].bytes;
  auto grad_bytes = [&] {
    double b = 0;
    for (const auto& kv : grads) b += kv.second;
    return b;
  };
  double peak = saved_live + grad_bytes();
  profile->push_back({peak, 0.0});
  for (size_t k = ops_.size(); k-- > 0;) {
    const OpInfo& op = ops_[k];
    bool reached = grads.count(op.output) > 0;
    for (int t : op.more_outputs) reached = reached || grads.count(t) > 0;
    if (!reached) continue;  // no gradient reaches this op
    double fresh = 0;
    std::set<int> distinct;
    for (int t : op.inputs) {
      if (rec.requires_grad[static_cast<size_t>(t)]) distinct.insert(t);
    }
    for (int t : distinct) fresh += tensors_[static_cast<size_t>(t)].bytes;
    if (op.in_place_backward) fresh = 0;  // written into storage that already exists
    // Kernels the node launches (ActivationLedger::backward_ops): an op with a parameter one per
    // gradient it makes (the input's if any input requires grad, the weight's if it trains: a
    // frozen Linear's AddmmBackward0 runs the dX GEMM only, should_compute_output); any other
    // op two, the rule the host constants were measured with.
    if (!op.view) {
      *backward_ops += op.param_elements > 0 ? (distinct.empty() ? 0 : 1) + (op.param_trains ? 1 : 0) : 2;
    }
    double now = saved_live + grad_bytes() + fresh + op.backward_workspace;
    peak = std::max(peak, now);
    if (op.param_trains) param_done += op.param_elements;  // the weight gradient is made here
    profile->push_back({now, fraction()});
    grads.erase(op.output);
    for (int t : op.more_outputs) grads.erase(t);
    for (int t : distinct) grads[t] = tensors_[static_cast<size_t>(t)].bytes;
    for (int t : rec.saves[k]) {
      size_t ut = Storage(t);
      if (first_saver[ut] == static_cast<int>(k) && saved_alive[ut] && !tensors_[ut].held) {
        saved_alive[ut] = false;
        saved_live -= tensors_[ut].bytes;
      }
    }
  }
  return peak;
}

ActivationLedger AutogradLedger::Run(int input, int output, bool input_requires_grad) const {
  ActivationLedger out;
  Recorded rec = Record(input, input_requires_grad);
  std::vector<bool> is_saved;
  out.forward_peak_per_token = Forward(input, output, rec, &is_saved);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (!is_saved[t]) continue;
    out.saved.push_back({tensors_[t].name, tensors_[t].bytes});
    out.saved_per_token += tensors_[t].bytes;
  }
  out.backward_peak_per_token =
      Backward(output, rec, is_saved, &out.backward_profile, &out.backward_ops);
  out.forward_ops = 0;
  for (const auto& op : ops_) {
    if (op.view) continue;  // no kernel, no bytes moved
    ++out.forward_ops;
    if (op.compute_bound) continue;
    std::set<int> distinct(op.inputs.begin(), op.inputs.end());
    for (int t : distinct) out.elementwise_traffic_per_token += tensors_[static_cast<size_t>(t)].bytes;
    out.elementwise_traffic_per_token += tensors_[static_cast<size_t>(op.output)].bytes;
  }
  return out;
}

}  // namespace shardtune::model
