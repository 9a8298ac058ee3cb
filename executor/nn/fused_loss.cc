// The fused linear cross-entropy as a LibTorch custom autograd Function (as ulysses.cc).
#include "executor/nn/fused_loss.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "model/activations.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Forward runs under no grad (Function::apply); per chunk of `rows` rows (about the hidden
// states' size in logits), in this order, so that at most the chunk's logits and one fp32 copy
// are live at once (what FusedLinearHead's chunk_row_bytes counts), in as few passes over the
// [rows, V] chunk as ATen ops allow (what its chunk_traffic_per_token counts):
//   logits = x_c W^T (x's dtype); l = logits.float() (the same tensor in fp32; logits freed);
//   [softcap: t = tanh(l / cap) in place, d = 1 - t^2 (one more fp32 buffer), l = t x cap]
//   m = rowmax(l); l -= m; picked = l[label]; l = exp(l); s = rowsum(l);
//   loss_rows = log(s) - picked;
//   l *= counted x scale / s  (one pass: the softmax times the loss scale; ignored rows 0) [x d]
//   l[label] -= counted x scale [x d[label]] (one entry per row);
//   g = l.to(x's dtype) (l freed); grad_x[c] = g W (written in place); grad_W += g^T x_c.
struct FusedLinearCrossEntropyFunction
    : public torch::autograd::Function<FusedLinearCrossEntropyFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& labels, const at::Tensor& scale, double softcap,
                               int64_t ignore_index) {
    const int64_t n = x.size(0), h = x.size(1), v = weight.size(0);
    const bool x_grad = x.requires_grad(), w_grad = weight.requires_grad();
    at::Tensor grad_x = x_grad ? at::zeros_like(x) : at::Tensor();
    at::Tensor grad_w = w_grad ? at::zeros_like(weight) : at::Tensor();
    at::Tensor total = at::zeros({}, x.options().dtype(at::kFloat));
    const at::Tensor wt = weight.t();
    const int64_t chunk = std::max<int64_t>(1, model::FusedLinearChunkRows(n, v, h));
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t rows = std::min(chunk, n - start);
      const at::Tensor xc = x.narrow(0, start, rows);
      const at::Tensor lab = labels.narrow(0, start, rows).unsqueeze(1);  // [rows, 1]
      const at::Tensor counted = lab.ne(ignore_index);                       // bool [rows, 1]
      const at::Tensor safe = at::where(counted, lab, at::zeros_like(lab));
      at::Tensor l = at::mm(xc, wt);
      if (l.scalar_type() != at::kFloat) l = l.to(at::kFloat);
      at::Tensor deriv;
      if (softcap > 0) {
        l.div_(softcap).tanh_();
        deriv = l.square().neg_().add_(1.0);  // d tanh(u) / du = 1 - tanh(u)^2
        l.mul_(softcap);
      }
      l.sub_(std::get<0>(l.max(1, /*keepdim=*/true)));
      const at::Tensor picked = l.gather(1, safe);  // z[label] - rowmax
      l.exp_();
      const at::Tensor sums = l.sum(1, /*keepdim=*/true);
      const at::Tensor countedf = counted.to(at::kFloat);
      total.add_(((sums.log() - picked) * countedf).sum());
      if (!x_grad && !w_grad) continue;
      // d loss / d z = scale x (softmax - one_hot(label)) on counted rows, 0 on ignored ones.
      const at::Tensor row_scale = countedf * scale;  // [rows, 1]
      l.mul_(row_scale / sums);
      at::Tensor at_label = row_scale.neg();
      if (deriv.defined()) {
        l.mul_(deriv);  // the chain through tanh: d z / d (x W^T) = 1 - tanh^2
        at_label.mul_(deriv.gather(1, safe));
      }
      l.scatter_add_(1, safe, at_label);
      deriv.reset();
      const at::Tensor g = l.scalar_type() == x.scalar_type() ? l : l.to(x.scalar_type());
      l.reset();
      if (x_grad) {
        at::Tensor gx = grad_x.narrow(0, start, rows);
        at::mm_out(gx, g, weight);
      }
      if (grad_w.defined()) grad_w.addmm_(g.t(), xc);
    }
    ctx->saved_data["grad_x"] = grad_x;
    ctx->saved_data["grad_w"] = grad_w;
    return {total.mul_(scale)};
  }

  // The saved gradients scaled by the incoming one in place (Liger's element_mul_kernel), and
  // handed on: nothing new is allocated.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad_x = ctx->saved_data["grad_x"].toTensor();
    at::Tensor grad_w = ctx->saved_data["grad_w"].toTensor();
    ctx->saved_data.clear();
    const at::Tensor& up = grads[0];
    if (grad_x.defined()) grad_x.mul_(up);
    if (grad_w.defined()) grad_w.mul_(up);
    return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor FusedLinearCrossEntropy(const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& labels, const at::Tensor& scale,
                                   double softcap, int64_t ignore_index) {
  SHARDTUNE_CHECK(x.dim() == 2 && x.is_contiguous()) << "x must be a contiguous [N, H] tensor";
  SHARDTUNE_CHECK(weight.dim() == 2 && weight.size(1) == x.size(1) &&
                  weight.scalar_type() == x.scalar_type())
      << "weight must be [V, H] in x's dtype";
  SHARDTUNE_CHECK(labels.dim() == 1 && labels.size(0) == x.size(0) &&
                  labels.scalar_type() == at::kLong)
      << "labels must be int64 [N]";
  return FusedLinearCrossEntropyFunction::apply(x, weight, labels, scale, softcap, ignore_index)[0];
}

}  // namespace shardtune::exec
