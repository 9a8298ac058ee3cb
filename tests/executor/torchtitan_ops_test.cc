// torchtitan's ops in the executor (executor/nn/torchtitan_ops.h) against references written here:
// the fused RMSNorm and its gradients against the composite formula in double precision, the
// token dispatch and combine against a per-token loop, and the expert-parallel layout's initial
// values against the HF per-expert tensors they stand for.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "executor/kernels/rms_norm.h"
#include "executor/nn/torchtitan_ops.h"
#include "executor/nn/transformer.h"

namespace shardtune::exec {
namespace {

// y = x · rsqrt(mean(x²) + eps) · w in double, with autograd's gradients of Σ y·g.
struct NormReference {
  at::Tensor y, dx, dw;
};
NormReference RmsNormReference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& g,
                               double eps) {
  at::Tensor xd = x.to(at::kDouble).detach().requires_grad_(true);
  at::Tensor wd = w.to(at::kDouble).detach().requires_grad_(true);
  at::Tensor y = xd * at::rsqrt(xd.pow(2).mean({-1}, true) + eps) * wd;
  torch::autograd::backward({(y * g.to(at::kDouble)).sum()});
  return {y.detach(), xd.grad(), wd.grad()};
}

double MaxRelative(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>();
}

class FusedRmsNormTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(FusedRmsNormTest, ValuesAndGradientsMatchTheDoubleReference) {
  const at::ScalarType dt = GetParam();
  at::manual_seed(3);
  const double eps = 1e-6;
  at::Tensor x = (at::randn({3, 5, 24}) * 2.0).to(dt).requires_grad_(true);
  at::Tensor w = (at::rand({24}) + 0.5).to(dt).requires_grad_(true);
  at::Tensor g = at::randn({3, 5, 24}).to(dt);
  NormReference ref = RmsNormReference(x, w, g, eps);
  at::Tensor y = FusedRmsNorm(x, w, eps);
  EXPECT_EQ(y.scalar_type(), dt);
  torch::autograd::backward({y}, {g});
  // fp32: summation order; bf16: the output's and gradients' rounding (8 bits of mantissa).
  const double tol = dt == at::kFloat ? 1e-5 : 1e-2;
  EXPECT_LT(MaxRelative(y, ref.y), tol);
  EXPECT_LT(MaxRelative(x.grad(), ref.dx), tol);
  EXPECT_LT(MaxRelative(w.grad(), ref.dw), tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedRmsNormTest, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const ::testing::TestParamInfo<at::ScalarType>& p) {
                           return std::string(c10::toString(p.param));
                         });

// The RMSNorm kernels' host reference (executor/kernels/rms_norm.h, which the GPU test holds the
// kernels to) computes what the executor's ATen FusedRmsNorm computes: y, dx and dw in fp32.
TEST(FusedRmsNormTest, TheKernelsHostReferenceIsTheAtenPath) {
  at::manual_seed(8);
  const int64_t rows = 6, hidden = 40;
  const double eps = 1e-5;
  at::Tensor x = at::randn({rows, hidden}).requires_grad_(true);
  at::Tensor w = (at::rand({hidden}) + 0.5).requires_grad_(true);
  at::Tensor g = at::randn({rows, hidden});
  at::Tensor y = FusedRmsNorm(x, w, eps);
  torch::autograd::backward({y}, {g});
  std::vector<double> ry(static_cast<size_t>(rows * hidden)), rstd(static_cast<size_t>(rows)),
      rdx(static_cast<size_t>(rows * hidden)), rdw(static_cast<size_t>(hidden));
  at::Tensor xc = x.detach().contiguous(), wc = w.detach().contiguous(), gc = g.contiguous();
  kernels::RmsNormReference(xc.data_ptr<float>(), wc.data_ptr<float>(), gc.data_ptr<float>(), rows,
                            hidden, eps, ry.data(), rstd.data(), rdx.data(), rdw.data());
  auto as = [](std::vector<double>& v, std::vector<int64_t> shape) {
    return at::from_blob(v.data(), shape, at::kDouble);
  };
  EXPECT_LT(MaxRelative(y.detach(), as(ry, {rows, hidden})), 1e-6);
  EXPECT_LT(MaxRelative(x.grad(), as(rdx, {rows, hidden})), 1e-5);
  EXPECT_LT(MaxRelative(w.grad(), as(rdw, {hidden})), 1e-5);
}

// Each token's output is Σ_j score[t, j] · f_e(x[t]) over its k choices, with f_e(x) = (e + 1)·x
// applied to the dispatched rows (the expert a row belongs to read from the dispatch's counts).
// GroupedLinear against a per-expert F.linear / matmul loop in double: the same output and the
// same gradients, for per-expert [out, in] weights and for one stacked [E, in, out] tensor; an
// expert no row chose gets a zero gradient (defined), as torch._grouped_mm's does.
TEST(GroupedLinearTest, MatchesThePerExpertLoopAndGivesAnUnchosenExpertZeros) {
  at::manual_seed(7);
  const std::vector<int64_t> counts{3, 0, 5, 2};
  const int64_t S = 10, in = 6, out = 4, E = 4;
  at::Tensor rows = at::randn({S, in}, at::kDouble).requires_grad_(true);
  at::Tensor g = at::randn({S, out}, at::kDouble);
  auto reference = [&](const at::Tensor& x, const std::function<at::Tensor(int64_t, const at::Tensor&)>& expert) {
    std::vector<at::Tensor> parts;
    int64_t offset = 0;
    for (int64_t e = 0; e < E; ++e) {
      parts.push_back(expert(e, x.narrow(0, offset, counts[static_cast<size_t>(e)])));
      offset += counts[static_cast<size_t>(e)];
    }
    return at::cat(parts, 0);
  };
  // Per-expert F.linear weights.
  std::vector<at::Tensor> w, w_ref;
  for (int64_t e = 0; e < E; ++e) {
    w.push_back(at::randn({out, in}, at::kDouble).requires_grad_(true));
    w_ref.push_back(w.back().detach().clone().requires_grad_(true));
  }
  at::Tensor rows_ref = rows.detach().clone().requires_grad_(true);
  at::Tensor y = GroupedLinear(rows, counts, w);
  at::Tensor y_ref = reference(rows_ref, [&](int64_t e, const at::Tensor& r) {
    return at::linear(r, w_ref[static_cast<size_t>(e)]);
  });
  EXPECT_TRUE(at::allclose(y, y_ref));
  torch::autograd::backward({(y * g).sum(), (y_ref * g).sum()});
  EXPECT_TRUE(at::allclose(rows.grad(), rows_ref.grad()));
  for (int64_t e = 0; e < E; ++e) {
    ASSERT_TRUE(w[static_cast<size_t>(e)].grad().defined()) << e;
    if (counts[static_cast<size_t>(e)] == 0) {
      EXPECT_EQ(w[static_cast<size_t>(e)].grad().abs().max().item<double>(), 0.0);
    } else {
      EXPECT_TRUE(at::allclose(w[static_cast<size_t>(e)].grad(), w_ref[static_cast<size_t>(e)].grad())) << e;
    }
  }
  // One stacked [E, in, out] tensor (x @ W[e]).
  at::Tensor stacked = at::randn({E, in, out}, at::kDouble).requires_grad_(true);
  at::Tensor stacked_ref = stacked.detach().clone().requires_grad_(true);
  at::Tensor rows2 = rows.detach().clone().requires_grad_(true);
  at::Tensor rows2_ref = rows.detach().clone().requires_grad_(true);
  at::Tensor z = GroupedLinear(rows2, counts, {stacked});
  at::Tensor z_ref = reference(rows2_ref, [&](int64_t e, const at::Tensor& r) {
    return at::matmul(r, stacked_ref.select(0, e));
  });
  EXPECT_TRUE(at::allclose(z, z_ref));
  torch::autograd::backward({(z * g).sum(), (z_ref * g).sum()});
  EXPECT_TRUE(at::allclose(stacked.grad(), stacked_ref.grad()));
  EXPECT_EQ(stacked.grad().select(0, 1).abs().max().item<double>(), 0.0);
  EXPECT_TRUE(at::allclose(rows2.grad(), rows2_ref.grad()));
}

TEST(TokenDispatchTest, CombineSumsEachTokensChosenExpertsOutputsWeightedByTheirScores) {
  at::manual_seed(5);
  const int64_t T = 7, H = 4, E = 5, k = 2;
  at::Tensor x = at::randn({T, H}).requires_grad_(true);
  at::Tensor ids = std::get<1>(at::rand({T, E}).topk(k, -1));
  at::Tensor scores = at::rand({T, k}).requires_grad_(true);
  RoutedTokens r = DispatchTokens(x, scores, ids, E, nullptr);
  ASSERT_EQ(r.per_expert.size(), static_cast<size_t>(E));
  ASSERT_EQ(r.rows.size(0), T * k);
  std::vector<at::Tensor> outs;
  int64_t offset = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = r.per_expert[static_cast<size_t>(e)];
    outs.push_back(r.rows.narrow(0, offset, n) * static_cast<double>(e + 1));
    offset += n;
  }
  at::Tensor out = CombineTokens(at::cat(outs, 0), r, x, nullptr);
  at::Tensor want = at::zeros({T, H}, at::kDouble);
  at::Tensor xd = x.detach().to(at::kDouble), sd = scores.detach().to(at::kDouble);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[t][j].item<int64_t>();
      want[t] += sd[t][j] * static_cast<double>(e + 1) * xd[t];
    }
  }
  EXPECT_LT((out.to(at::kDouble) - want).abs().max().item<double>(), 1e-6);
  // d out / d score[t, j] = (e + 1)·x[t]: the scores' gradient of Σ out.
  torch::autograd::backward({out.sum()});
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const double e1 = static_cast<double>(ids[t][j].item<int64_t>() + 1);
      EXPECT_NEAR(scores.grad()[t][j].item<double>(), e1 * xd[t].sum().item<double>(), 1e-5);
    }
  }
}

// Experts 3, 4, 5 of 6 (ep rank 1 of 2): w1[i] = HF expert (3 + i)'s gate_proj, w3 its up_proj,
// w2 its down_proj, as InitParameter initialises those tensors.
TEST(InitLocalExpertsTest, SlicesAreTheHfExpertsTensors) {
  const int64_t F = 6, H = 4, el = 3, first = 3, E = 6;
  const std::string moe = "model.layers.1.block_sparse_moe";
  struct Want {
    const char* tensor;
    const char* hf;
    int64_t rows, cols;
  };
  for (const Want& w : {Want{"w1", "gate_proj", F, H}, Want{"w3", "up_proj", F, H},
                        Want{"w2", "down_proj", H, F}}) {
    at::Tensor full = at::zeros({el, w.rows * w.cols});
    Transformer::InitLocalExperts(moe + ".experts." + w.tensor, 9, full, first, E, /*gated=*/true);
    for (int64_t i = 0; i < el; ++i) {
      at::Tensor hf = at::zeros({w.rows, w.cols});
      Transformer::InitParameter(moe + ".experts." + std::to_string(first + i) + "." + w.hf + ".weight",
                                 9, hf);
      EXPECT_TRUE(at::equal(full[i].view({w.rows, w.cols}), hf)) << w.tensor << " expert " << first + i;
    }
  }
  // Without a gate (GELU experts) w1 is the up projection.
  at::Tensor full = at::zeros({el, F * H});
  Transformer::InitLocalExperts(moe + ".experts.w1", 9, full, first, E, /*gated=*/false);
  at::Tensor up = at::zeros({F, H});
  Transformer::InitParameter(moe + ".experts.3.up_proj.weight", 9, up);
  EXPECT_TRUE(at::equal(full[0].view({F, H}), up));
}

}  // namespace
}  // namespace shardtune::exec
