// DeepSeek in the executor (issue #20): multi-head latent attention and DeepSeek's router against
// references written out here in doubles from modeling_deepseek_v3.py (DeepseekV3Attention with
// apply_rotary_pos_emb_interleave, DeepseekV3TopkRouter / route_tokens_to_experts) and DeepSeek's
// V2 MoEGate; what `run` still refuses, by name.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "executor/nn/transformer.h"
#include "executor/nn/transformer_support.h"
#include "model/model_spec_json.h"
#include "model/presets.h"
#include "model/strict_json.h"

namespace shardtune::exec {
namespace {

using ::testing::HasSubstr;

model::ModelSpec Micro(const std::string& file) {
  return model::ReadModelSpecFile(std::string(SHARDTUNE_EXECUTOR_TEST_DATA_DIR) + "/" + file);
}

double At(const at::Tensor& t, std::vector<int64_t> idx) {
  at::Tensor x = t;
  for (int64_t i : idx) x = x[i];
  return x.item<double>();
}

// y[s, o] = sum_i x[s, i] W[o, i] (nn.Linear without bias), on [S, in] rows.
std::vector<std::vector<double>> Linear(const std::vector<std::vector<double>>& x, const at::Tensor& w) {
  std::vector<std::vector<double>> y(x.size(), std::vector<double>(static_cast<size_t>(w.size(0))));
  for (size_t s = 0; s < x.size(); ++s) {
    for (int64_t o = 0; o < w.size(0); ++o) {
      double acc = 0;
      for (int64_t i = 0; i < w.size(1); ++i) acc += x[s][static_cast<size_t>(i)] * At(w, {o, i});
      y[s][static_cast<size_t>(o)] = acc;
    }
  }
  return y;
}

// DeepseekV3RMSNorm: weight * x / sqrt(mean(x^2) + eps), per row.
std::vector<std::vector<double>> RmsNorm(std::vector<std::vector<double>> x, const at::Tensor& w,
                                         double eps) {
  for (auto& row : x) {
    double ms = 0;
    for (double v : row) ms += v * v;
    ms /= static_cast<double>(row.size());
    for (size_t i = 0; i < row.size(); ++i) row[i] = At(w, {static_cast<int64_t>(i)}) * row[i] / std::sqrt(ms + eps);
  }
  return x;
}

// Rotation of one head's rope part as stored (interleaved pairs x[2j], x[2j+1]) at position
// `pos`: apply_rotary_pos_emb_interleave de-interleaves into halves, then rotate_half's rotation
// with inv_freq[j] = theta^(-2j/d): out[j] = x[2j] cos - x[2j+1] sin, out[j + d/2] = x[2j+1] cos
// + x[2j] sin (the output in half layout).
std::vector<double> RotateInterleaved(const std::vector<double>& x, double pos, double theta) {
  size_t d = x.size();
  std::vector<double> out(d);
  for (size_t j = 0; j < d / 2; ++j) {
    // fp32 frequencies as transformers computes them; the angle in fp32 too
    float inv = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * j) / static_cast<float>(d));
    double ang = static_cast<double>(static_cast<float>(pos) * inv);
    out[j] = x[2 * j] * std::cos(ang) - x[2 * j + 1] * std::sin(ang);
    out[j + d / 2] = x[2 * j + 1] * std::cos(ang) + x[2 * j] * std::sin(ang);
  }
  return out;
}

TEST(DeepseekExecutorTest, LatentAttentionMatchesTheModelingCodeWrittenOut) {
  model::ModelSpec s = Micro("micro-deepseek-v3.model.json");
  s.FillDefaults();
  const model::MlaSpec& m = s.mla;
  const int64_t S = 5, H = s.hidden, a = s.num_heads, nope = m.qk_nope_head_dim,
                rope = m.qk_rope_head_dim, vd = m.v_head_dim, ql = m.q_lora_rank,
                kvl = m.kv_lora_rank;
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::manual_seed(11);
  const std::string pre = "model.layers.0.self_attn";
  ParamTable p;
  p[pre + ".q_a_proj.weight"] = at::randn({ql, H}, f64) * 0.2;
  p[pre + ".q_a_layernorm.weight"] = 1 + 0.1 * at::randn({ql}, f64);
  p[pre + ".q_b_proj.weight"] = at::randn({a * (nope + rope), ql}, f64) * 0.2;
  p[pre + ".kv_a_proj_with_mqa.weight"] = at::randn({kvl + rope, H}, f64) * 0.2;
  p[pre + ".kv_a_layernorm.weight"] = 1 + 0.1 * at::randn({kvl}, f64);
  p[pre + ".kv_b_proj.weight"] = at::randn({a * (nope + vd), kvl}, f64) * 0.2;
  p[pre + ".o_proj.weight"] = at::randn({H, a * vd}, f64) * 0.2;
  at::Tensor x = at::randn({1, S, H}, f64);
  TransformerOptions o;
  o.dtype = at::kDouble;
  o.sdpa = false;
  o.norm_eps = s.norm_eps;
  o.rope_theta = s.rope_theta;
  Transformer t(s, o);
  at::Tensor q_a = at::linear(x, p[pre + ".q_a_proj.weight"]);
  at::Tensor ckv = at::linear(x, p[pre + ".kv_a_proj_with_mqa.weight"]);
  at::Tensor got = t.MlaAttention(p, pre, {q_a, ckv});
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{1, S, H}));

  // The reference, token by token.
  std::vector<std::vector<double>> xs(static_cast<size_t>(S), std::vector<double>(static_cast<size_t>(H)));
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t h = 0; h < H; ++h) xs[static_cast<size_t>(i)][static_cast<size_t>(h)] = At(x, {0, i, h});
  }
  auto q = Linear(RmsNorm(Linear(xs, p[pre + ".q_a_proj.weight"]), p[pre + ".q_a_layernorm.weight"], s.norm_eps),
                  p[pre + ".q_b_proj.weight"]);
  auto kv_a = Linear(xs, p[pre + ".kv_a_proj_with_mqa.weight"]);
  std::vector<std::vector<double>> latent, k_rope;
  for (const auto& row : kv_a) {
    latent.emplace_back(row.begin(), row.begin() + kvl);
    k_rope.push_back(RotateInterleaved({row.begin() + kvl, row.end()}, static_cast<double>(&row - &kv_a[0]), s.rope_theta));
  }
  auto kv = Linear(RmsNorm(latent, p[pre + ".kv_a_layernorm.weight"], s.norm_eps), p[pre + ".kv_b_proj.weight"]);
  const double scale = 1.0 / std::sqrt(static_cast<double>(nope + rope));
  std::vector<std::vector<double>> attn_out(static_cast<size_t>(S), std::vector<double>(static_cast<size_t>(a * vd)));
  for (int64_t h = 0; h < a; ++h) {
    for (int64_t i = 0; i < S; ++i) {
      const auto& qi = q[static_cast<size_t>(i)];
      std::vector<double> q_pass(qi.begin() + h * (nope + rope), qi.begin() + h * (nope + rope) + nope);
      std::vector<double> q_rot = RotateInterleaved(
          {qi.begin() + h * (nope + rope) + nope, qi.begin() + (h + 1) * (nope + rope)}, static_cast<double>(i),
          s.rope_theta);
      std::vector<double> w(static_cast<size_t>(i + 1));
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= i; ++j) {
        const auto& kj = kv[static_cast<size_t>(j)];
        double dot = 0;
        for (int64_t d = 0; d < nope; ++d) dot += q_pass[static_cast<size_t>(d)] * kj[static_cast<size_t>(h * (nope + vd) + d)];
        for (int64_t d = 0; d < rope; ++d) dot += q_rot[static_cast<size_t>(d)] * k_rope[static_cast<size_t>(j)][static_cast<size_t>(d)];
        w[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, w[static_cast<size_t>(j)]);
      }
      double z = 0;
      for (double& v : w) z += (v = std::exp(v - mx));
      for (int64_t d = 0; d < vd; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) {
          acc += w[static_cast<size_t>(j)] / z * kv[static_cast<size_t>(j)][static_cast<size_t>(h * (nope + vd) + nope + d)];
        }
        attn_out[static_cast<size_t>(i)][static_cast<size_t>(h * vd + d)] = acc;
      }
    }
  }
  auto want = Linear(attn_out, p[pre + ".o_proj.weight"]);
  double err = 0, scale_of = 0;
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      double w = want[static_cast<size_t>(i)][static_cast<size_t>(h)];
      err = std::max(err, std::abs(At(got, {0, i, h}) - w));
      scale_of = std::max(scale_of, std::abs(w));
    }
  }
  // The norms and the softmax run in fp32 as transformers' do; the rest in doubles.
  EXPECT_LT(err, 1e-5 * std::max(1.0, scale_of));
  EXPECT_GT(scale_of, 0.1);  // a non-trivial output
}

// For each token: V3 (noaux_tc) keeps the topk_group best of n_group groups by the sum of each
// group's two best sigmoid scores, takes the top-k experts of those groups, and weights them by
// their scores renormalised (+1e-20) and times routed_scaling_factor; V2's greedy takes the top-k
// softmax scores, unnormalised and times routed_scaling_factor.
TEST(DeepseekExecutorTest, RouterChoosesAndWeightsAsDeepseek) {
  // The third case: V2's group_limited_greedy (DeepSeek-V2's MoEGate) on the V2-Lite micro
  // model's router, its experts in 4 groups of which 2 are kept.
  for (const char* file : {"micro-deepseek-v3.model.json", "micro-deepseek-v2-lite.model.json",
                           "group_limited_greedy"}) {
    const bool grouped = std::string(file) == "group_limited_greedy";
    model::ModelSpec s = Micro(grouped ? "micro-deepseek-v2-lite.model.json" : file);
    if (grouped) {
      s.moe.topk_method = "group_limited_greedy";
      s.moe.n_group = 4;
      s.moe.topk_group = 2;
    }
    s.FillDefaults();
    const model::MoeSpec& m = s.moe;
    const int64_t T = 7, H = s.hidden, E = m.num_experts;
    auto f64 = at::TensorOptions().dtype(at::kDouble);
    at::manual_seed(5);
    ParamTable p;
    const std::string pre = "model.layers.1.block_sparse_moe";
    p[pre + ".gate.weight"] = at::randn({E, H}, f64);
    at::Tensor x = at::randn({T, H}, f64);
    TransformerOptions o;
    o.dtype = at::kDouble;
    Transformer t(s, o);
    auto [chosen, weights] = t.DeepseekRoute(p, pre, x);
    ASSERT_EQ(chosen.sizes(), (std::vector<int64_t>{T, m.top_k})) << file;
    at::Tensor logits = at::linear(x, p[pre + ".gate.weight"]);  // doubles
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> score(static_cast<size_t>(E));
      double zmax = -std::numeric_limits<double>::infinity(), z = 0;
      for (int64_t e = 0; e < E; ++e) zmax = std::max(zmax, At(logits, {i, e}));
      for (int64_t e = 0; e < E; ++e) z += std::exp(At(logits, {i, e}) - zmax);
      for (int64_t e = 0; e < E; ++e) {
        double l = At(logits, {i, e});
        score[static_cast<size_t>(e)] = m.sigmoid_scores ? 1 / (1 + std::exp(-l)) : std::exp(l - zmax) / z;
      }
      std::vector<int64_t> allowed;
      if (m.topk_method == "noaux_tc") {
        int64_t per = E / m.n_group;
        std::vector<std::pair<double, int64_t>> groups;
        for (int64_t g = 0; g < m.n_group; ++g) {
          std::vector<double> in(score.begin() + g * per, score.begin() + (g + 1) * per);
          std::sort(in.rbegin(), in.rend());
          groups.push_back({in[0] + in[1], g});
        }
        std::sort(groups.rbegin(), groups.rend());
        for (int64_t g = 0; g < m.topk_group; ++g) {
          for (int64_t e = 0; e < per; ++e) allowed.push_back(groups[static_cast<size_t>(g)].second * per + e);
        }
      } else if (m.topk_method == "group_limited_greedy") {
        int64_t per = E / m.n_group;
        std::vector<std::pair<double, int64_t>> groups;
        for (int64_t g = 0; g < m.n_group; ++g) {
          groups.push_back({*std::max_element(score.begin() + g * per, score.begin() + (g + 1) * per), g});
        }
        std::sort(groups.rbegin(), groups.rend());
        for (int64_t g = 0; g < m.topk_group; ++g) {
          for (int64_t e = 0; e < per; ++e) allowed.push_back(groups[static_cast<size_t>(g)].second * per + e);
        }
      } else {
        for (int64_t e = 0; e < E; ++e) allowed.push_back(e);
      }
      std::sort(allowed.begin(), allowed.end(), [&](int64_t u, int64_t v) {
        return score[static_cast<size_t>(u)] > score[static_cast<size_t>(v)];
      });
      std::vector<int64_t> want(allowed.begin(), allowed.begin() + m.top_k);
      double sum = 0;
      for (int64_t e : want) sum += score[static_cast<size_t>(e)];
      std::set<int64_t> got_set;
      for (int64_t j = 0; j < m.top_k; ++j) got_set.insert(static_cast<int64_t>(At(chosen, {i, j})));
      EXPECT_EQ(got_set, std::set<int64_t>(want.begin(), want.end())) << file << " token " << i;
      for (int64_t j = 0; j < m.top_k; ++j) {
        int64_t e = static_cast<int64_t>(At(chosen, {i, j}));
        double w = score[static_cast<size_t>(e)];
        if (m.sigmoid_scores) {
          w = w / (sum + 1e-20) * m.routed_scaling_factor;
        } else {
          w = w * m.routed_scaling_factor;  // V2 greedy with norm_topk_prob false
        }
        EXPECT_NEAR(At(weights, {i, j}), w, 1e-6 * std::max(1.0, w)) << file;  // fp32 router
      }
    }
  }
}

TEST(DeepseekExecutorTest, WhatRunDoesNotComputeIsRefusedByName) {
  model::ModelSpec v3 = model::FindModelPreset("deepseek-v3");
  EXPECT_EQ(TransformerSupportProblem(v3), "");  // its YaRN is computed (rotary_test.cc)
  model::ModelSpec v2 = Micro("micro-deepseek-v2-lite.model.json");
  v2.moe.topk_method = "group_limited_greedy";  // computed now (RouterChoosesAndWeightsAsDeepseek)
  EXPECT_EQ(TransformerSupportProblem(v2), "");
  EXPECT_THAT(UlyssesProblem(Micro("micro-deepseek-v3.model.json"), 2),
              HasSubstr("multi-head latent attention"));
}

}  // namespace
}  // namespace shardtune::exec
