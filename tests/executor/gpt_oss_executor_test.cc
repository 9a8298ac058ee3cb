// GPT-OSS in the executor (issue #20), against references written here in doubles from
// transformers' modeling_gpt_oss.py: eager attention with each head's sink logit in the softmax
// (dropped after it), and the MoE block (a biased router, softmax over the top-k logits; 3-D
// experts x @ W[e] + b[e] with gate and up interleaved, the clamped SwiGLU (up + 1) x gate x
// sigmoid(1.702 gate), clamps at 7). The 1-vs-2-rank run is in run_equivalence_test.cc.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "executor/nn/transformer.h"
#include "executor/nn/transformer_support.h"
#include "model/module_tree.h"
#include "model/model_spec_json.h"
#include "tests/executor/attention_reference.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec {
namespace {

model::ModelSpec MicroGptOss() {
  model::ModelSpec s = model::ReadModelSpecFile(testing::DataPath("micro-gpt-oss.model.json"));
  s.FillDefaults();
  return s;
}

using testing::MaxError;

std::vector<double> SinkReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& sinks) {
  return testing::CausalAttentionReference(q, k, v, /*cap=*/0, sinks);
}

TEST(GptOssExecutorTest, SinksJoinTheSoftmaxAndAreDropped) {
  model::ModelSpec spec = MicroGptOss();
  const int64_t B = 2, a = spec.num_heads, kv = spec.num_kv_heads, S = 7, D = spec.head_dim;
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::manual_seed(5);
  at::Tensor q = 2 * at::randn({B, a, S, D}, f64), k = 2 * at::randn({B, kv, S, D}, f64);
  at::Tensor v = at::randn({B, kv, S, D}, f64);
  at::Tensor sinks = 3 * at::randn({a}, f64);  // large: the sink takes a visible share
  TransformerOptions o;
  o.sdpa = true;  // ignored with sinks: GPT-OSS attends eagerly (no sdpa path in transformers)
  Transformer t(spec, o);
  at::Tensor got = t.Core(q, k, v, 0, sinks);
  EXPECT_LT(MaxError(got, SinkReference(q, k, v, sinks)), 1e-10);
  // Without the sinks the rows are plain softmaxes: different outputs.
  EXPECT_GT(MaxError(t.Core(q, k, v, 0, at::full({a}, -1e9, f64)), SinkReference(q, k, v, sinks)), 1e-2);
}

// Param: torchtitan's model code (GptOssMoE: its TokenChoiceTopKRouter with the gate's bias,
// softmax over every expert in fp32, top-k, route_norm; the sorted dispatch and fp32-weighted
// combine; GptOssGroupedExperts' swiglu as addcmul) or transformers' (false). Renormalising the
// top-k of a softmax gives the softmax over the top-k logits, so both must equal one reference;
// torchtitan's router and combine run in fp32 (autocast; routed_output.to(float32)), so its
// outputs carry fp32 rounding.
class GptOssMoeTest : public ::testing::TestWithParam<bool> {};

TEST_P(GptOssMoeTest, MoeBlockIsTheReference) {
  const bool torchtitan = GetParam();
  model::ModelSpec spec = MicroGptOss();
  const std::string pre = "model.layers.0.block_sparse_moe";
  const int64_t H = spec.hidden, E = spec.moe.num_experts, F = spec.moe.expert_ffn_hidden,
                k = spec.moe.top_k, T = 9;
  ParamTable p;
  at::manual_seed(3);
  for (const model::FsdpUnit& u : model::BuildFsdpUnits(spec, model::WrapPolicy{})) {
    for (const model::ParamTensor& t : u.params) {
      // Weights large enough that the clamps at 7 bind for some entries.
      p[t.name] = at::randn(Transformer::Shape(t.dim0, t.inner), at::kDouble) * 0.8;
    }
  }
  at::Tensor x = at::randn({1, T, H}, at::kDouble) * 2;
  TransformerOptions o;
  o.torchtitan = torchtitan;
  Transformer tf(spec, o);
  at::Tensor got = tf.Moe(p, pre, x).view({T, H});
  const at::Tensor W = p.at(pre + ".gate.weight"), b = p.at(pre + ".gate.bias");
  const at::Tensor gu = p.at(pre + ".experts.gate_up_proj").view({E, H, 2 * F});
  const at::Tensor gub = p.at(pre + ".experts.gate_up_proj_bias").view({E, 2 * F});
  const at::Tensor dn = p.at(pre + ".experts.down_proj").view({E, F, H});
  const at::Tensor dnb = p.at(pre + ".experts.down_proj_bias").view({E, H});
  std::vector<double> want;
  int clamped = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<std::pair<double, int64_t>> logit;
    for (int64_t e = 0; e < E; ++e) {
      double z = b[e].item<double>();
      for (int64_t i = 0; i < H; ++i) z += W[e][i].item<double>() * x[0][t][i].item<double>();
      logit.push_back({z, e});
    }
    std::sort(logit.begin(), logit.end(), [](auto l, auto r) { return l.first > r.first; });
    double norm = 0;
    for (int64_t j = 0; j < k; ++j) norm += std::exp(logit[static_cast<size_t>(j)].first - logit[0].first);
    std::vector<double> row(static_cast<size_t>(H), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = logit[static_cast<size_t>(j)].second;
      const double w = std::exp(logit[static_cast<size_t>(j)].first - logit[0].first) / norm;
      std::vector<double> g(static_cast<size_t>(F));
      for (int64_t f = 0; f < F; ++f) {
        double gate = gub[e][2 * f].item<double>(), up = gub[e][2 * f + 1].item<double>();
        for (int64_t i = 0; i < H; ++i) {
          gate += x[0][t][i].item<double>() * gu[e][i][2 * f].item<double>();
          up += x[0][t][i].item<double>() * gu[e][i][2 * f + 1].item<double>();
        }
        clamped += gate > 7.0 || std::fabs(up) > 7.0;
        gate = std::min(gate, 7.0);
        up = std::clamp(up, -7.0, 7.0);
        g[static_cast<size_t>(f)] = (up + 1) * gate / (1 + std::exp(-1.702 * gate));
      }
      for (int64_t i = 0; i < H; ++i) {
        double y = dnb[e][i].item<double>();
        for (int64_t f = 0; f < F; ++f) y += g[static_cast<size_t>(f)] * dn[e][f][i].item<double>();
        row[static_cast<size_t>(i)] += w * y;
      }
    }
    want.insert(want.end(), row.begin(), row.end());
  }
  EXPECT_GT(clamped, 0);  // the clamps were exercised
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  EXPECT_GT(scale, 1.0);
  // fp64 throughout (transformers) or fp32 routing weights (torchtitan: 2^-24 relative).
  EXPECT_LT(MaxError(got, want), (torchtitan ? 1e-6 : 1e-11) * scale);
}

INSTANTIATE_TEST_SUITE_P(Modeling, GptOssMoeTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("torchtitan") : std::string("hf");
                         });

TEST(GptOssExecutorTest, RunTakesItExceptWithUlysses) {
  model::ModelSpec spec = MicroGptOss();
  EXPECT_EQ(TransformerSupportProblem(spec), "");
  EXPECT_NE(UlyssesProblem(spec, 2).find("attention sinks"), std::string::npos);
}

}  // namespace
}  // namespace shardtune::exec
