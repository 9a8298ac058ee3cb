// The recompute nodes as LibTorch custom autograd Functions, and the storage refill of
// selective checkpointing.
#include "executor/nn/recompute.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (not pulled in by ATen.h in LibTorch 2.x)
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>

#include "model/errors.h"

namespace shardtune::exec {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// saved_data holds IValues only: a pointer travels as an integer.
template <typename T>
int64_t PointerBits(T* p) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(p));
}

// Runs under no-grad (Function::apply): nothing inside fn is saved. Outputs: fn(x) and, with a
// `side` list, whatever fn appended to it (taken out of it; Recompute puts the node's outputs
// back). Backward reruns fn with grad, takes the rerun's appends out of *side and backpropagates
// every output's gradient (a side output no loss read gets zeros).
struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  // The function and the list outlive the backward (REQUIRES of Recompute).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const SegmentFn* fn,
                               std::vector<at::Tensor>* side) {
    ctx->saved_data["fn"] = PointerBits(fn);
    ctx->saved_data["side"] = PointerBits(side);
    ctx->save_for_backward({x});
    return Run(*fn, x, side);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto fn =
        reinterpret_cast<const SegmentFn*>(static_cast<intptr_t>(ctx->saved_data["fn"].toInt()));
    auto side = reinterpret_cast<std::vector<at::Tensor>*>(
        static_cast<intptr_t>(ctx->saved_data["side"].toInt()));
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    variable_list outputs;
    {
      at::AutoGradMode enable(true);
      outputs = Run(*fn, x, side);
    }
    SHARDTUNE_CHECK(outputs.size() == grads.size())
        << "the rerun made " << outputs.size() - 1 << " side outputs, the forward " << grads.size() - 1;
    variable_list with_grad, their_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].requires_grad()) continue;
      with_grad.push_back(outputs[i]);
      their_grads.push_back(grads[i].defined() ? grads[i] : at::zeros_like(outputs[i]));
    }
    torch::autograd::backward(with_grad, their_grads);
    return {x.grad(), at::Tensor(), at::Tensor()};
  }

  // fn(x), then what it appended to *side (removed from it).
  static variable_list Run(const SegmentFn& fn, const at::Tensor& x, std::vector<at::Tensor>* side) {
    const size_t before = side != nullptr ? side->size() : 0;
    variable_list out = {fn(x)};
    if (side != nullptr) {
      out.insert(out.end(), side->begin() + static_cast<std::ptrdiff_t>(before), side->end());
      side->resize(before);
    }
    return out;
  }
};

struct PieceFunction : public torch::autograd::Function<PieceFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, int64_t fn,
                               double arg) {
    ctx->saved_data["fn"] = fn;
    ctx->saved_data["arg"] = arg;
    ctx->save_for_backward(inputs.vec());
    return {reinterpret_cast<PieceFn>(static_cast<intptr_t>(fn))(inputs.vec(), arg)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto fn = reinterpret_cast<PieceFn>(static_cast<intptr_t>(ctx->saved_data["fn"].toInt()));
    variable_list saved = ctx->get_saved_variables();
    std::vector<at::Tensor> in, wanted;
    for (size_t i = 0; i < saved.size(); ++i) {
      in.push_back(saved[i].detach());
      if (ctx->needs_input_grad(i)) {
        in.back().requires_grad_(true);
        wanted.push_back(in.back());
      }
    }
    variable_list out(saved.size() + 2);  // + fn and arg
    if (wanted.empty()) return out;
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = fn(in, ctx->saved_data["arg"].toDouble());
    }
    variable_list g = torch::autograd::grad({y}, wanted, {grads[0]}, /*retain_graph=*/false,
                                            /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0, j = 0; i < saved.size(); ++i) {
      if (ctx->needs_input_grad(i)) out[i] = g[j++];
    }
    return out;
  }
};

// One pass of a block over the tape in `mode` (kRecord from empty; kReplay over `outputs`): the
// tape is off and empty again when the pass ends, by return or by exception.
class TapePass {
 public:
  TapePass(SacTape* tape, SacTape::Mode mode, model::SacSave save, std::vector<at::Tensor> outputs = {})
      : tape_(tape) {
    SHARDTUNE_CHECK(!tape->Active()) << "nested selective checkpoints on one tape";
    tape->mode = mode;
    tape->save = save;
    tape->proj_count = 0;
    tape->next = 0;
    tape->saved = std::move(outputs);
  }
  ~TapePass() {
    tape_->saved.clear();
    tape_->mode = SacTape::Mode::kOff;
  }
  TapePass(const TapePass&) = delete;
  TapePass& operator=(const TapePass&) = delete;

 private:
  SacTape* tape_;
};

// SacRecompute's node: forward (no grad) records the tape, backward replays it.
struct SacFunction : public torch::autograd::Function<SacFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const SegmentFn* fn,
                               SacTape* tape, int64_t save) {
    ctx->saved_data["fn"] = PointerBits(fn);
    ctx->saved_data["tape"] = PointerBits(tape);
    ctx->saved_data["save"] = save;
    at::Tensor y;
    c10::List<at::Tensor> outputs;
    {
      TapePass pass(tape, SacTape::Mode::kRecord, static_cast<model::SacSave>(save));
      y = (*fn)(x);
      for (at::Tensor& t : tape->saved) outputs.push_back(std::move(t));
    }
    // The node owns the block input and the saved outputs until its backward. The outputs ride
    // in saved_data (no-grad tensors: nothing for autograd's version check), so the backward can
    // hand them over and the node keep no reference while the rerun's graph still runs.
    ctx->save_for_backward({x});
    ctx->saved_data["outputs"] = std::move(outputs);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto fn =
        reinterpret_cast<const SegmentFn*>(static_cast<intptr_t>(ctx->saved_data["fn"].toInt()));
    auto tape = reinterpret_cast<SacTape*>(static_cast<intptr_t>(ctx->saved_data["tape"].toInt()));
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    std::vector<at::Tensor> outputs;
    for (const at::Tensor& t : ctx->saved_data["outputs"].toTensorList()) outputs.push_back(t);
    ctx->saved_data.erase("outputs");
    at::Tensor y;
    {
      // The pass's end lets go of what the rerun did not take; its graph holds what it needs.
      TapePass pass(tape, SacTape::Mode::kReplay, static_cast<model::SacSave>(ctx->saved_data["save"].toInt()),
                    std::move(outputs));
      at::AutoGradMode enable(true);
      y = (*fn)(x);
      SHARDTUNE_CHECK(tape->next == tape->saved.size())
          << "the rerun took " << tape->next << " saved outputs, the forward saved " << tape->saved.size();
    }
    if (y.requires_grad()) {
      // Backpropagate from y's node with y itself let go first: nothing in the rerun's graph saves
      // the block's output (its last op is the residual add, whose backward reads no tensor), so
      // its bytes are free through the rerun's backward, as under PyTorch's non-reentrant
      // checkpoint (the only one op SAC runs under), which never recreates the output. The
      // incoming gradient stays held by this node's caller until it returns: one block residual
      // the non-reentrant checkpoint frees after the MLP's backward (executor/README.md).
      torch::autograd::edge_list roots{torch::autograd::impl::gradient_edge(y)};
      y.reset();
      torch::autograd::Engine::get_default_engine().execute(roots, {grads[0]}, /*keep_graph=*/false,
                                                            /*create_graph=*/false, /*accumulate_grad=*/true);
    }
    return {x.grad(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y = x W^T (+ b) with y's value the saved output: the forward keeps x and W, the backward is
// aten.mm's (and the rows' sum of dy for the bias). One Function per arity, so that an undefined
// bias is never an autograd input.
variable_list ReplayGrads(AutogradContext* ctx, const variable_list& grads, bool bias) {
  variable_list s = ctx->get_saved_variables();
  const at::Tensor& x = s[0];
  const at::Tensor& w = s[1];
  at::Tensor dy = grads[0].reshape({-1, grads[0].size(-1)});  // [rows, out]
  variable_list out{at::Tensor(), at::Tensor(), at::Tensor()};
  if (ctx->needs_input_grad(1)) out[1] = at::mm(dy, w).view(x.sizes());
  if (ctx->needs_input_grad(2)) out[2] = at::mm(dy.t(), x.reshape({-1, x.size(-1)}));
  if (bias) out.push_back(ctx->needs_input_grad(3) ? dy.sum(0) : at::Tensor());
  return out;
}

struct ReplayLinearFunction : public torch::autograd::Function<ReplayLinearFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& saved, const at::Tensor& x,
                               const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    // A fresh alias: the output is a new tensor of this node, its bytes the saved ones.
    return {saved.alias()};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return ReplayGrads(ctx, grads, false); }
};

struct ReplayAffineFunction : public torch::autograd::Function<ReplayAffineFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& saved, const at::Tensor& x,
                               const at::Tensor& w, const at::Tensor& /*b*/) {
    ctx->save_for_backward({x, w});
    return {saved.alias()};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return ReplayGrads(ctx, grads, true); }
};

// What a refill needs; held by the consumers' hooks, emptied by the first refill.
struct Refill {
  c10::intrusive_ptr<c10::StorageImpl> storage;  // 0 bytes until refilled
  size_t nbytes = 0;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  at::TensorOptions options;
  PieceFn fn = nullptr;
  double arg = 0;
  std::vector<at::Tensor> inputs;

  void Run() {
    if (!storage) return;  // refilled already
    at::NoGradGuard no_grad;
    at::Tensor value = fn(inputs, arg);
    storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
    storage->set_nbytes(nbytes);
    at::Tensor alias = at::empty({0}, options).set_(c10::Storage(storage), offset, sizes, strides);
    alias.copy_(value);
    // From here on the consumers' saved tensors alone keep the bytes alive.
    storage.reset();
    inputs.clear();
  }
};

}  // namespace

at::Tensor Recompute(const SegmentFn* fn, const at::Tensor& x, std::vector<at::Tensor>* side) {
  variable_list out = RecomputeFunction::apply(x, fn, side);
  if (side != nullptr) side->insert(side->end(), out.begin() + 1, out.end());
  return out[0];
}

at::Tensor SacTape::TakeSaved() {
  SHARDTUNE_CHECK(mode == Mode::kReplay && next < saved.size())
      << "the rerun asked for saved output " << next << " of " << saved.size();
  // Handed over: the tape lets go, so the bytes live as long as the rerun's graph needs them.
  return std::move(saved[next++]);
}

at::Tensor SacRecompute(const SegmentFn* fn, const at::Tensor& x, SacTape* tape, model::SacSave save) {
  return SacFunction::apply(x, fn, tape, static_cast<int64_t>(save))[0];
}

at::Tensor ReplayLinear(const at::Tensor& saved, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? ReplayAffineFunction::apply(saved, x, w, b)[0] : ReplayLinearFunction::apply(saved, x, w)[0];
}

at::Tensor RecomputePiece(PieceFn fn, double arg, const std::vector<at::Tensor>& inputs) {
  return PieceFunction::apply(at::TensorList(inputs), PointerBits(fn), arg)[0];
}

void DropUntilBackward(const at::Tensor& y, PieceFn fn, double arg,
                       const std::vector<at::Tensor>& inputs,
                       const std::vector<at::Tensor>& consumers) {
  auto refill = std::make_shared<Refill>();
  refill->storage = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(
      y.storage().unsafeGetStorageImpl());
  refill->nbytes = refill->storage->nbytes();
  SHARDTUNE_CHECK(refill->nbytes ==
                  static_cast<size_t>(y.numel()) * static_cast<size_t>(y.element_size()))
      << "a dropped piece output must own its storage";
  refill->offset = y.storage_offset();
  refill->sizes = y.sizes().vec();
  refill->strides = y.strides().vec();
  refill->options = y.options().requires_grad(false);
  refill->fn = fn;
  refill->arg = arg;
  for (const at::Tensor& t : inputs) refill->inputs.push_back(t.detach());
  refill->storage->set_data_ptr_noswap(at::DataPtr(nullptr, y.device()));
  refill->storage->set_nbytes(0);
  for (const at::Tensor& c : consumers) {
    if (c.requires_grad()) c.register_hook([refill](const at::Tensor&) { refill->Run(); });
  }
}

}  // namespace shardtune::exec
