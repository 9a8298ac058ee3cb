// The Ulysses all-to-alls as a LibTorch custom autograd Function (as recompute.cc).
#include "executor/nn/ulysses.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "executor/comm/communicator.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The tensors as they travel: chunk j of the all-to-all's input goes to cp rank j.
// Seq -> heads: x [B, s, h, D] -> [cp, B, s, h/cp, D] (chunk j: head group j); rank r receives
// [cp, B, s, h/cp, D] with chunk j = sequence slice j of its head group r -> [B, S, h/cp, D].
at::Tensor SeqToHeads(const at::Tensor& x, Communicator& cp) {
  int64_t n = cp.size(), B = x.size(0), s = x.size(1), h = x.size(2), D = x.size(3);
  SHARDTUNE_CHECK(h % n == 0) << h << " heads over cp " << n;
  at::Tensor send = x.reshape({B, s, n, h / n, D}).permute({2, 0, 1, 3, 4}).contiguous();
  at::Tensor recv = at::empty_like(send);
  cp.AllToAll(send, recv)->Wait();
  return recv.permute({1, 0, 2, 3, 4}).reshape({B, n * s, h / n, D});
}

// Heads -> seq: y [B, S, h', D] -> [cp, B, S/cp, h', D] (chunk j: sequence slice j); rank r
// receives chunk j = head group j of its slice r -> [B, S/cp, cp * h', D].
at::Tensor HeadsToSeq(const at::Tensor& y, Communicator& cp) {
  int64_t n = cp.size(), B = y.size(0), S = y.size(1), h = y.size(2), D = y.size(3);
  SHARDTUNE_CHECK(S % n == 0) << "sequence " << S << " over cp " << n;
  at::Tensor send = y.reshape({B, n, S / n, h, D}).permute({1, 0, 2, 3, 4}).contiguous();
  at::Tensor recv = at::empty_like(send);
  cp.AllToAll(send, recv)->Wait();
  return recv.permute({1, 2, 0, 3, 4}).reshape({B, S / n, n * h, D});
}

Communicator& FromContext(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["cp"].toInt()));
}

using AllToAll = at::Tensor (*)(const at::Tensor&, Communicator&);

// One direction of the all-to-all; its backward is the other direction, its inverse.
// saved_data holds IValues only: the communicator travels as an integer (it outlives the graph).
template <AllToAll kForward, AllToAll kBackward>
struct AllToAllFunction : public torch::autograd::Function<AllToAllFunction<kForward, kBackward>> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, Communicator* cp) {
    ctx->saved_data["cp"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(cp));
    return {kForward(x, *cp)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {kBackward(grads[0], FromContext(ctx)), at::Tensor()};
  }
};

using SeqToHeadsFunction = AllToAllFunction<SeqToHeads, HeadsToSeq>;
using HeadsToSeqFunction = AllToAllFunction<HeadsToSeq, SeqToHeads>;

}  // namespace

at::Tensor GatherSeqScatterHeads(const at::Tensor& x, Communicator& cp) {
  return SeqToHeadsFunction::apply(x, &cp)[0];
}

at::Tensor GatherHeadsScatterSeq(const at::Tensor& x, Communicator& cp) {
  return HeadsToSeqFunction::apply(x, &cp)[0];
}

}  // namespace shardtune::exec
