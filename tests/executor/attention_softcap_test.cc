// Gemma 2's attention logit soft-capping in the executor: the scores are scaled, soft-capped
// (cap x tanh(scores / cap)), masked and soft-maxed, as modeling_gemma2.py's
// eager_attention_forward does (written out here in doubles); `run` applies it on the eager
// path and refuses sdpa, whose transformers path drops the cap.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "executor/nn/transformer.h"
#include "executor/nn/transformer_support.h"
#include "model/presets.h"
#include "tests/executor/attention_reference.h"
#include "tests/model/decoder_shape.h"

namespace shardtune::exec {
namespace {

model::ModelSpec Gemma2Like(double cap) {
  model::ModelSpec base = model::FindModelPreset("tiny-llama");
  base.head_dim = 16;
  base.attn_logit_softcap = cap;
  return model::testing_util::Decoder(base.name, {/*layers=*/1, /*hidden=*/64, /*heads=*/4, /*kv_heads=*/2,
                                                  /*ffn_hidden=*/128, /*vocab=*/256}, base);
}

// The reference: causal softmax over j <= i of cap x tanh(q_i . k_j / sqrt(D) / cap).
std::vector<double> Reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              double cap) {
  return testing::CausalAttentionReference(q, k, v, cap);
}

using testing::MaxError;

TEST(AttentionSoftcapTest, ScoresAreSoftCappedBeforeTheMaskAndSoftmax) {
  const int64_t B = 1, a = 4, kv = 2, S = 6, D = 16;
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::manual_seed(7);
  // Large scores, so that a cap of 0.5 changes the attention a lot.
  at::Tensor q = 3 * at::randn({B, a, S, D}, f64), k = 3 * at::randn({B, kv, S, D}, f64);
  at::Tensor v = at::randn({B, kv, S, D}, f64);
  TransformerOptions o;
  o.sdpa = false;
  Transformer capped(Gemma2Like(0.5), o), plain(Gemma2Like(0), o);
  at::Tensor got = capped.Core(q, k, v);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{B, a, S, D}));
  // The softmax runs in fp32 (softmax(..., dtype=torch.float32), as transformers does): fp32's
  // rounding, not the double reference's.
  EXPECT_LT(MaxError(got, Reference(q, k, v, 0.5)), 1e-5);
  EXPECT_LT(MaxError(plain.Core(q, k, v), Reference(q, k, v, 0)), 1e-5);
  // The cap matters at these scores: the capped and plain outputs differ.
  EXPECT_GT(MaxError(got, Reference(q, k, v, 0)), 1e-2);
}

TEST(AttentionSoftcapTest, TheModelIsBuiltWithACap) {
  EXPECT_EQ(TransformerSupportProblem(Gemma2Like(50.0)), "");
}

}  // namespace
}  // namespace shardtune::exec
