// The executor's MoE block against the dense block it must reduce to. A dense block is the
// reference (its math follows modeling_llama.py and is checked against HF elsewhere); the MoE
// block shares its attention and norms, and its experts copy the dense MLP:
//   - one expert, top 1: the routing weight is 1, the block is the dense one;
//   - three identical experts, top 2, a zero router (uniform softmax): renormalised weights
//     (Mixtral, norm_topk_prob) sum to 1, so the block is the dense one; without renormalising
//     (Qwen's norm_topk_prob false) each weight is 1/3 and the MLP's output is 2/3 of the dense
//     one, which a dense block with down_proj x 2/3 gives (the MLP is linear in down_proj);
//   - a gated shared expert with a zero gate (sigmoid 1/2) next to one routed expert: the MLP's
//     output is 1 + 1/2 of the dense one.
// The tokens are dispatched and scattered back (index_select, index_add) on every path, so a
// token sent to the wrong row or weighted with another token's weight changes the output.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "executor/nn/transformer.h"
#include "model/module_tree.h"
#include "tests/model/decoder_shape.h"

namespace shardtune::exec {
namespace {

model::ModelSpec Dense() {
  return model::testing_util::Decoder("dense", {/*layers=*/1, /*hidden=*/16, /*heads=*/2, /*kv_heads=*/1,
                                                /*ffn_hidden=*/24, /*vocab=*/32, /*max_seq_len=*/16});
}

model::ModelSpec Moe(int experts, int top_k, bool renormalise, bool shared) {
  model::ModelSpec s = Dense();
  s.name = "moe";
  s.moe.num_experts = experts;
  s.moe.top_k = top_k;
  s.moe.expert_ffn_hidden = s.ffn_hidden;
  s.moe.norm_topk_prob = renormalise;
  if (shared) {
    s.moe.num_shared_experts = 1;
    s.moe.shared_expert_ffn_hidden = s.ffn_hidden;
    s.moe.shared_expert_gate = true;
  }
  return s;
}

// Every parameter of `spec` initialised as the executor does (seed 7), in fp32.
ParamTable Params(const model::ModelSpec& spec) {
  ParamTable p;
  for (const model::FsdpUnit& u : model::BuildFsdpUnits(spec, model::WrapPolicy{})) {
    for (const model::ParamTensor& t : u.params) {
      at::Tensor full = at::zeros(Transformer::Shape(t.dim0, t.inner), at::kFloat);
      Transformer::InitParameter(t.name, 7, full);
      p[t.name] = full;
    }
  }
  return p;
}

// The MoE parameters set from the dense ones: every expert (and the shared expert) a copy of
// the dense MLP, the router and the shared expert's gate zero.
ParamTable FromDense(const model::ModelSpec& moe, const ParamTable& dense) {
  ParamTable p = Params(moe);
  const std::string block = "model.layers.0.";
  for (auto& [name, t] : p) {
    auto d = dense.find(name);
    if (d != dense.end()) {
      t = d->second.clone();
      continue;
    }
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
          name.find(std::string(".") + proj + ".weight") != std::string::npos) {
        t = dense.at(block + "mlp." + proj + ".weight").clone();
      }
    }
    if (name.find("block_sparse_moe.gate.") != std::string::npos ||
        name.find("shared_expert_gate.") != std::string::npos) {
      t.zero_();
    }
  }
  return p;
}

// The MLP's weights x 20 (std 0.4): its output then weighs in the block's beside the residual,
// so a wrong weighting shows well above the comparisons' tolerance.
ParamTable LargerMlp(ParamTable p) {
  for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
    std::string name = std::string("model.layers.0.mlp.") + proj + ".weight";
    p[name] = p.at(name) * 20.0;
  }
  return p;
}

// `torchtitan`: torchtitan's model code (TransformerOptions::torchtitan: fused RMSNorm, its
// router, token dispatcher and combine), for the MoE block and its dense reference alike.
at::Tensor BlockOut(const model::ModelSpec& spec, const ParamTable& p, const at::Tensor& x,
                    bool torchtitan) {
  TransformerOptions o;
  o.torchtitan = torchtitan;
  Transformer t(spec, o);
  return t.Segment(p, model::BlockSegment(0), x, at::Tensor());
}

// Seeds ATen's default generator before the fixture's tensors are drawn.
struct Seeded {
  Seeded() { at::manual_seed(11); }
};

// Param: torchtitan's model code (true) or transformers' (false).
class MoeReferenceTest : public ::testing::TestWithParam<bool> {
 protected:
  at::Tensor BlockOut(const model::ModelSpec& spec, const ParamTable& p, const at::Tensor& x) {
    return exec::BlockOut(spec, p, x, GetParam());
  }
  Seeded seeded_;
  model::ModelSpec dense_ = Dense();
  ParamTable dense_params_ = LargerMlp(Params(dense_));
  at::Tensor x_ = at::randn({2, 5, 16}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor DenseOut(double down_scale = 1.0) {
    ParamTable p = dense_params_;
    std::string down = "model.layers.0.mlp.down_proj.weight";
    p[down] = p[down] * down_scale;
    return BlockOut(dense_, p, x_);
  }
};

TEST_P(MoeReferenceTest, OneExpertIsTheDenseBlock) {
  model::ModelSpec m = Moe(1, 1, true, false);
  at::Tensor got = BlockOut(m, FromDense(m, dense_params_), x_);
  EXPECT_TRUE(at::allclose(got, DenseOut(), 1e-5, 1e-6));
}

TEST_P(MoeReferenceTest, RenormalisedTopKOfIdenticalExpertsIsTheDenseBlock) {
  model::ModelSpec m = Moe(3, 2, true, false);
  at::Tensor got = BlockOut(m, FromDense(m, dense_params_), x_);
  EXPECT_TRUE(at::allclose(got, DenseOut(), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(got, DenseOut(2.0 / 3), 1e-5, 1e-6));
}

TEST_P(MoeReferenceTest, UnnormalisedTopKWeighsEachExpertByItsSoftmax) {
  model::ModelSpec m = Moe(3, 2, false, false);
  at::Tensor got = BlockOut(m, FromDense(m, dense_params_), x_);
  EXPECT_TRUE(at::allclose(got, DenseOut(2.0 / 3), 1e-5, 1e-6));
}

TEST_P(MoeReferenceTest, GatedSharedExpertAddsHalfItsOutput) {
  model::ModelSpec m = Moe(1, 1, true, true);
  at::Tensor got = BlockOut(m, FromDense(m, dense_params_), x_);
  EXPECT_TRUE(at::allclose(got, DenseOut(1.5), 1e-5, 1e-6));
}

// Two experts, top 1: expert 1 the dense MLP, expert 0 the same with down_proj x 3, and a random
// router. Renormalised top 1 weighs the chosen expert by 1, so each token's output is exactly the
// dense block's or the x 3 block's, never a mixture, and (for this seed) both occur: a token
// dispatched to the wrong expert's rows or scattered to another token's row would break it.
TEST_P(MoeReferenceTest, TokensReachOnlyTheExpertsTheyChose) {
  model::ModelSpec m = Moe(2, 1, true, false);
  ParamTable p = FromDense(m, dense_params_);
  std::string e0 = "model.layers.0.block_sparse_moe.experts.0.down_proj.weight";
  p[e0] = p[e0] * 3.0;
  p.at("model.layers.0.block_sparse_moe.gate.weight").normal_(0.0, 1.0);
  at::Tensor got = BlockOut(m, p, x_);
  at::Tensor dense = DenseOut();
  at::Tensor tripled = DenseOut(3.0);
  at::Tensor d1 = (got - dense).abs().amax(-1), d3 = (got - tripled).abs().amax(-1);
  at::Tensor either = d1.lt(1e-5).logical_or(d3.lt(1e-5));
  EXPECT_TRUE(either.all().item<bool>());
  EXPECT_TRUE(d1.lt(1e-5).any().item<bool>());
  EXPECT_TRUE(d3.lt(1e-5).any().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Modeling, MoeReferenceTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("torchtitan") : std::string("hf");
                         });

}  // namespace
}  // namespace shardtune::exec

namespace shardtune::exec {
namespace {

// HF load_balancing_loss_func written out in doubles: per token the softmax of its logits and the
// indices of its top-k; E x sum over (slot, expert) of the fraction of tokens whose slot-th choice
// is the expert times the mean routing probability of the expert.
double AuxReference(const std::vector<at::Tensor>& logits, int E, int k) {
  std::vector<std::vector<double>> probs;
  for (const at::Tensor& l : logits) {
    for (int64_t t = 0; t < l.size(0); ++t) {
      std::vector<double> row(static_cast<size_t>(E));
      double zmax = -1e300, z = 0;
      for (int e = 0; e < E; ++e) zmax = std::max(zmax, l[t][e].item<double>());
      for (int e = 0; e < E; ++e) z += std::exp(l[t][e].item<double>() - zmax);
      for (int e = 0; e < E; ++e) row[static_cast<size_t>(e)] = std::exp(l[t][e].item<double>() - zmax) / z;
      probs.push_back(row);
    }
  }
  const double N = static_cast<double>(probs.size());
  std::vector<std::vector<double>> frac(static_cast<size_t>(k), std::vector<double>(static_cast<size_t>(E), 0));
  std::vector<double> mean(static_cast<size_t>(E), 0);
  for (const auto& row : probs) {
    std::vector<int> order(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)]; });
    for (int j = 0; j < k; ++j) frac[static_cast<size_t>(j)][static_cast<size_t>(order[static_cast<size_t>(j)])] += 1 / N;
    for (int e = 0; e < E; ++e) mean[static_cast<size_t>(e)] += row[static_cast<size_t>(e)] / N;
  }
  double sum = 0;
  for (int j = 0; j < k; ++j) {
    for (int e = 0; e < E; ++e) sum += frac[static_cast<size_t>(j)][static_cast<size_t>(e)] * mean[static_cast<size_t>(e)];
  }
  return sum * E;
}

TEST(MoeAuxLossTest, LoadBalancingLossMatchesTheReference) {
  at::manual_seed(3);
  std::vector<at::Tensor> logits = {at::randn({6, 5}, at::kFloat), at::randn({6, 5}, at::kFloat)};
  for (int k : {1, 2}) {
    double got = Transformer::LoadBalancingLoss(logits, 5, k).item<double>();
    EXPECT_NEAR(got, AuxReference(logits, 5, k), 1e-5) << k;
  }
  // Perfectly balanced routing (equal logits): every probability 1/E and the top-1 choice the
  // first expert for every token: E x (1 x 1/E) = 1.
  EXPECT_NEAR(Transformer::LoadBalancingLoss({at::zeros({4, 5})}, 5, 1).item<double>(), 1.0, 1e-6);
}

// The whole model with output_router_logits: the head's loss is the cross-entropy plus
// router_aux_loss_coef x the balancing loss of every block's router logits, and its gradient
// reaches the routers.
TEST(MoeAuxLossTest, TheHeadAddsTheWeightedAuxLossAndItsGradientReachesTheRouters) {
  at::manual_seed(4);
  model::ModelSpec with = Moe(4, 2, true, false);
  with.num_layers = 2;
  with.moe.router_aux_loss = true;
  with.moe.router_aux_loss_coef = 0.5;
  model::ModelSpec without = with;
  without.moe.router_aux_loss = false;
  at::Tensor tokens = at::randint(0, with.vocab_size, {2, 6}, at::TensorOptions().dtype(at::kLong));
  at::Tensor labels = at::randint(0, with.vocab_size, {2, 6}, at::TensorOptions().dtype(at::kLong));
  auto forward = [&](const model::ModelSpec& spec, ParamTable& p, std::vector<at::Tensor>* logits) {
    Transformer t(spec, TransformerOptions{});
    at::Tensor x = tokens;
    for (int s = 0; s < t.num_segments() - 1; ++s) x = t.Segment(p, s, x, at::Tensor());
    if (logits) *logits = t.router_logits();
    at::Tensor loss = t.Segment(p, t.num_segments() - 1, x, labels);
    EXPECT_TRUE(t.router_logits().empty());  // consumed by the head
    return loss;
  };
  ParamTable p = Params(with);
  for (auto& [name, w] : p) w.requires_grad_(true);
  std::vector<at::Tensor> logits;
  at::Tensor loss = forward(with, p, &logits);
  ASSERT_EQ(logits.size(), 2u);  // one [T, E] per MoE block
  EXPECT_EQ(logits[0].sizes(), (std::vector<int64_t>{12, 4}));
  ParamTable q = Params(without);
  for (auto& [name, w] : q) w.requires_grad_(true);
  at::Tensor plain = forward(without, q, nullptr);
  std::vector<at::Tensor> detached;
  for (const auto& l : logits) detached.push_back(l.detach());
  EXPECT_NEAR(loss.item<double>() - plain.item<double>(), 0.5 * AuxReference(detached, 4, 2), 1e-5);
  loss.backward();
  plain.backward();
  const std::string gate = "model.layers.1.block_sparse_moe.gate.weight";
  EXPECT_FALSE(at::allclose(p.at(gate).grad(), q.at(gate).grad()));
}

}  // namespace
}  // namespace shardtune::exec
