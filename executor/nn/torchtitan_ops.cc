// torchtitan's fused RMSNorm and MoE token dispatch (see the header), as LibTorch custom
// autograd Functions where autograd must save less than the composite ops would (as ulysses.cc).
#include "executor/nn/torchtitan_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <numeric>

#include "executor/comm/communicator.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedRmsNormFunction : public torch::autograd::Function<FusedRmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                               double eps) {
    at::Tensor x32 = x.to(at::kFloat);
    at::Tensor rstd = at::rsqrt(x32.pow(2).mean({-1}, /*keepdim=*/true) + eps);  // [.., 1] fp32
    at::Tensor y = (x32 * rstd * w.to(at::kFloat)).to(x.scalar_type());
    ctx->save_for_backward({x, rstd, w});
    return {y};
  }
  // x̂ = x · rstd; dx = rstd · (g·w − x̂ · mean(g·w·x̂)); dw = Σ_rows g·x̂ (in fp32).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &rstd = saved[1], &w = saved[2];
    at::Tensor g32 = grads[0].to(at::kFloat);
    at::Tensor xhat = x.to(at::kFloat) * rstd;
    at::Tensor gw = g32 * w.to(at::kFloat);
    at::Tensor dx = rstd * (gw - xhat * (gw * xhat).mean({-1}, /*keepdim=*/true));
    at::Tensor dw;
    if (w.requires_grad()) dw = (g32 * xhat).reshape({-1, w.numel()}).sum(0).to(w.scalar_type());
    return {dx.to(x.scalar_type()), dw, at::Tensor()};
  }
};

// GroupedLinear (torchtitan_ops.h): one [E, in, out] tensor rather than E [out, in] ones.
bool StackedWeights(at::TensorList w) { return w.size() == 1 && w[0].dim() == 3; }

// Expert e's weight as the [in, out] matrix its rows multiply.
at::Tensor ExpertMatrix(const variable_list& w, size_t e) {
  return StackedWeights(w) ? w[0].select(0, static_cast<int64_t>(e)) : w[e].t();
}

// The grouped product into a fresh [S, out] output.
at::Tensor GroupedProduct(const at::Tensor& rows, const std::vector<int64_t>& counts, const variable_list& w) {
  at::Tensor out = at::empty({rows.size(0), ExpertMatrix(w, 0).size(1)}, rows.options());
  int64_t offset = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t n = counts[e];
    if (n > 0) {
      at::Tensor dst = out.narrow(0, offset, n);
      at::mm_out(dst, rows.narrow(0, offset, n), ExpertMatrix(w, e));
    }
    offset += n;
  }
  return out;
}

// Saves what the grouped product's backward reads: the rows, the weights, the counts.
void SaveGrouped(AutogradContext* ctx, const at::Tensor& rows, const std::vector<int64_t>& counts,
                 const variable_list& w) {
  ctx->saved_data["counts"] = counts;
  variable_list saved{rows};
  saved.insert(saved.end(), w.begin(), w.end());
  ctx->save_for_backward(saved);
}

// The grouped product's backward; `first` is the rows' edge (needs_input_grad counts the tensor
// inputs only: the weights' edges follow the rows'). Returns one gradient per argument from the
// rows on: the rows', none for the counts, each weight's.
variable_list GroupedBackward(AutogradContext* ctx, const variable_list& grads, size_t first) {
  std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
  variable_list saved = ctx->get_saved_variables();
  const at::Tensor rows = saved[0];
  variable_list w(saved.begin() + 1, saved.end());
  const bool stacked = StackedWeights(w);
  at::Tensor g = grads[0].contiguous();
  at::Tensor grad_rows;
  if (ctx->needs_input_grad(first)) grad_rows = at::empty_like(rows);
  variable_list grad_w(w.size());
  if (stacked && ctx->needs_input_grad(first + 1)) grad_w[0] = at::zeros_like(w[0]);
  int64_t offset = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t n = counts[e];
    at::Tensor ge = g.narrow(0, offset, n), xe = rows.narrow(0, offset, n);
    if (grad_rows.defined() && n > 0) {
      at::Tensor dst = grad_rows.narrow(0, offset, n);
      at::mm_out(dst, ge, ExpertMatrix(w, e).t());
    }
    if (stacked) {
      if (grad_w[0].defined() && n > 0) {
        at::Tensor dst = grad_w[0].select(0, static_cast<int64_t>(e));
        at::mm_out(dst, xe.t(), ge);
      }
    } else if (ctx->needs_input_grad(first + 1 + e)) {  // edges: the tensor inputs only
      grad_w[e] = n > 0 ? at::mm(ge.t(), xe) : at::zeros_like(w[e]);  // [out, in]
    }
    offset += n;
  }
  variable_list result{grad_rows, at::Tensor()};
  result.insert(result.end(), grad_w.begin(), grad_w.end());
  return result;
}

struct GroupedLinearFunction : public torch::autograd::Function<GroupedLinearFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& rows,
                               const std::vector<int64_t>& counts, at::TensorList weights) {
    variable_list w(weights.begin(), weights.end());
    SaveGrouped(ctx, rows, counts, w);
    return {GroupedProduct(rows, counts, w)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return GroupedBackward(ctx, grads, 0);
  }
};

// GroupedLinear with its forward value the `saved` output of the same product (op SAC's replay).
struct ReplayGroupedLinearFunction : public torch::autograd::Function<ReplayGroupedLinearFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& saved, const at::Tensor& rows,
                               const std::vector<int64_t>& counts, at::TensorList weights) {
    SaveGrouped(ctx, rows, counts, variable_list(weights.begin(), weights.end()));
    // A fresh alias: the output is a new tensor of this node, its bytes the saved ones.
    return {saved.alias()};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out{at::Tensor()};
    for (at::Tensor& g : GroupedBackward(ctx, grads, 1)) out.push_back(std::move(g));
    return out;
  }
};

Communicator& FromContext(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["ep"].toInt()));
}

at::Tensor RowsAllToAll(const at::Tensor& x, Communicator& ep, const std::vector<int64_t>& in,
                        const std::vector<int64_t>& out) {
  at::Tensor send = x.contiguous();
  std::vector<int64_t> shape = send.sizes().vec();
  shape[0] = std::accumulate(out.begin(), out.end(), int64_t{0});
  at::Tensor recv = at::empty(shape, send.options());
  ep.AllToAllV(send, recv, in, out)->Wait();
  return recv;
}

struct AllToAllRowsFunction : public torch::autograd::Function<AllToAllRowsFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, Communicator* ep,
                               const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
    ctx->saved_data["ep"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(ep));
    ctx->saved_data["in"] = in;
    ctx->saved_data["out"] = out;
    return {RowsAllToAll(x, *ep, in, out)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    std::vector<int64_t> in = ctx->saved_data["in"].toIntVector();
    std::vector<int64_t> out = ctx->saved_data["out"].toIntVector();
    return {RowsAllToAll(grads[0], FromContext(ctx), out, in), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};


}  // namespace

at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  SHARDTUNE_CHECK(w.dim() == 1 && x.size(-1) == w.size(0)) << "rms_norm over " << w.size(0);
  return FusedRmsNormFunction::apply(x, w, eps)[0];
}

std::vector<int64_t> ToHost(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

at::Tensor GroupedLinear(const at::Tensor& rows, const std::vector<int64_t>& counts,
                         at::TensorList weights, const at::Tensor& saved) {
  const bool stacked = StackedWeights(weights);
  SHARDTUNE_CHECK(!counts.empty() && (stacked ? weights[0].size(0) == static_cast<int64_t>(counts.size())
                                              : weights.size() == counts.size()))
      << counts.size() << " expert counts for " << weights.size() << " weight tensors";
  SHARDTUNE_CHECK(std::accumulate(counts.begin(), counts.end(), int64_t{0}) == rows.size(0))
      << "expert counts do not sum to the " << rows.size(0) << " rows";
  if (saved.defined()) {
    SHARDTUNE_CHECK(saved.dim() == 2 && saved.size(0) == rows.size(0))
        << "a kept grouped output of " << saved.sizes() << " for " << rows.size(0) << " rows";
    return ReplayGroupedLinearFunction::apply(saved, rows, counts, weights)[0];
  }
  return GroupedLinearFunction::apply(rows, counts, weights)[0];
}

at::Tensor AllToAllRows(const at::Tensor& x, Communicator& ep, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits) {
  return AllToAllRowsFunction::apply(x, &ep, input_splits, output_splits)[0];
}

RoutedTokens DispatchTokens(const at::Tensor& flat, const at::Tensor& scores,
                            const at::Tensor& expert_ids, int64_t num_experts, Communicator* ep) {
  const int64_t k = expert_ids.size(1);
  RoutedTokens r;
  at::Tensor ids = expert_ids.reshape({-1});
  at::Tensor counts;  // [E] int64: this rank's rows per expert (num_local_tokens_per_expert)
  at::Tensor order;
  {
    at::NoGradGuard no_grad;
    counts = at::bincount(ids, {}, num_experts);
    // torch.argsort(ids, stable=True)
    order = std::get<1>(at::sort(ids, /*stable=*/true, /*dim=*/0, /*descending=*/false));
    r.token_of_row = at::div(order, k, "floor");
  }
  r.scores_of_row = scores.reshape({-1}).index_select(0, order);
  at::Tensor routed = flat.index_select(0, r.token_of_row);  // [T·k, H]
  if (ep == nullptr || ep->size() == 1) {
    r.rows = routed;
    r.per_expert = ToHost(counts);
    return r;
  }
  const int64_t n = ep->size(), el = num_experts / n;
  SHARDTUNE_CHECK(num_experts % n == 0) << num_experts << " experts over ep " << n;
  at::Tensor received_counts = at::empty_like(counts);  // [E]: chunk j = rank j's counts for ours
  ep->AllToAll(counts.contiguous(), received_counts)->Wait();
  std::vector<int64_t> sent = ToHost(counts), got = ToHost(received_counts);
  r.input_splits.assign(static_cast<size_t>(n), 0);
  r.output_splits.assign(static_cast<size_t>(n), 0);
  r.per_expert.assign(static_cast<size_t>(el), 0);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < el; ++i) {
      size_t ji = static_cast<size_t>(j * el + i);
      r.input_splits[static_cast<size_t>(j)] += sent[ji];
      r.output_splits[static_cast<size_t>(j)] += got[ji];
      r.per_expert[static_cast<size_t>(i)] += got[ji];
    }
  }
  at::Tensor received = AllToAllRows(routed, *ep, r.input_splits, r.output_splits);  // [R, H]
  // _permute: rank-major (rank j, local expert i) segments -> expert-major (i, j).
  std::vector<int64_t> start(got.size(), 0);
  for (size_t s = 1; s < got.size(); ++s) start[s] = start[s - 1] + got[s - 1];
  std::vector<int64_t> perm;
  perm.reserve(static_cast<size_t>(received.size(0)));
  for (int64_t i = 0; i < el; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      size_t ji = static_cast<size_t>(j * el + i);
      for (int64_t t = 0; t < got[ji]; ++t) perm.push_back(start[ji] + t);
    }
  }
  r.permuted_indices = at::tensor(perm, at::TensorOptions().dtype(at::kLong)).to(flat.device());
  r.rows = received.index_select(0, r.permuted_indices);
  return r;
}

at::Tensor CombineTokens(const at::Tensor& expert_out, const RoutedTokens& r, const at::Tensor& flat,
                         Communicator* ep) {
  at::Tensor back = expert_out;
  if (ep != nullptr && ep->size() > 1) {
    at::Tensor inverse;  // _unpermute: out[permuted_indices] = expert_out
    {
      at::NoGradGuard no_grad;
      inverse = at::empty_like(r.permuted_indices);
      inverse.index_copy_(0, r.permuted_indices,
                          at::arange(r.permuted_indices.numel(), r.permuted_indices.options()));
    }
    back = AllToAllRows(expert_out.index_select(0, inverse), *ep, r.output_splits, r.input_splits);
  }
  at::Tensor weighted =
      (back.to(at::kFloat) * r.scores_of_row.unsqueeze(1)).to(flat.scalar_type());  // [T·k, H]
  const int64_t H = flat.size(1);
  return at::zeros_like(flat).scatter_add(0, r.token_of_row.unsqueeze(1).expand({-1, H}), weighted);
}

}  // namespace shardtune::exec
