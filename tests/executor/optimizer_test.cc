// The sharded optimizer against LibTorch's own torch::optim::AdamW (the reference path), the
// learning-rate schedules against their closed forms, and the data stream's determinism.
#include "executor/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <cmath>

#include "executor/data.h"
#include "executor/lr_schedule.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace {

TEST(ExecutorOptimizerTest, ShardedAdamWMatchesTorchOptimAdamWBitForBit) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  at::Tensor p = at::randn({1000}, gen), g;
  at::Tensor ref = p.clone().requires_grad_(true);
  torch::optim::AdamW torch_adamw({ref}, torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  AdamWOptions o;
  o.weight_decay = 0.1;
  ShardedOptimizer mine(model::Optimizer::kAdamW, o, {&p}, {&g});
  for (int step = 1; step <= 5; ++step) {
    double lr = 1e-3 * step;  // a changing LR, as the schedule does
    g = at::randn({1000}, gen);
    ref.mutable_grad() = g.clone();
    static_cast<torch::optim::AdamWOptions&>(torch_adamw.param_groups()[0].options()).lr(lr);
    torch_adamw.step();
    mine.Step(lr);
    EXPECT_TRUE(at::equal(p, ref.detach()))
        << "step " << step << " max diff " << (p - ref.detach()).abs().max().item<double>();
  }
  EXPECT_EQ(mine.step(), 5);
}

TEST(ExecutorOptimizerTest, AdamWStateIsCreatedAtTheFirstStepThatUpdatesAShard) {
  // torch.optim.AdamW creates state["exp_avg"] in _init_group, at the first step() of a
  // parameter whose .grad is set: nothing at construction, nothing for a None grad.
  at::Tensor p0 = at::ones({3}), p1 = at::ones({5}), g0 = at::ones({3}), g1;
  ShardedOptimizer adamw(model::Optimizer::kAdamW, AdamWOptions{}, {&p0, &p1}, {&g0, &g1});
  EXPECT_TRUE(adamw.keeps_state());
  EXPECT_TRUE(adamw.exp_avg().empty());
  adamw.Step(1e-3);
  ASSERT_EQ(adamw.exp_avg().size(), 2u);
  EXPECT_TRUE(adamw.exp_avg()[0].defined());
  EXPECT_EQ(adamw.exp_avg_sq()[0].numel(), 3);
  EXPECT_FALSE(adamw.exp_avg()[1].defined());  // its gradient was None
  adamw.EnsureState();                         // a checkpoint load or save
  EXPECT_TRUE(at::equal(adamw.exp_avg()[1], at::zeros({5})));
  ShardedOptimizer sgd(model::Optimizer::kSgd, AdamWOptions{}, {&p0}, {&g0});
  sgd.EnsureState();
  EXPECT_FALSE(sgd.keeps_state());
  EXPECT_TRUE(sgd.exp_avg().empty());
}

TEST(ExecutorOptimizerTest, UndefinedGradientsAreSkippedLikeNoneGrads) {
  at::Tensor p = at::ones({4}), g;
  ShardedOptimizer sgd(model::Optimizer::kSgd, AdamWOptions{}, {&p}, {&g});
  sgd.Step(0.1);
  EXPECT_TRUE(at::equal(p, at::ones({4})));
  g = at::full({4}, 2.0);
  sgd.Step(0.1);
  EXPECT_TRUE(at::allclose(p, at::full({4}, 0.8)));
}

TEST(ExecutorLrScheduleTest, WarmupThenCosineToTheMinimum) {
  LrOptions o;
  o.lr = 1.0;
  o.min_lr_ratio = 0.1;
  o.warmup_steps = 4;
  o.total_steps = 14;
  EXPECT_DOUBLE_EQ(LearningRate(o, 1), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(o, 4), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 5), 1.0);  // the first post-warmup step: cos(0)
  // Halfway through the 10 decay steps: min + (lr - min) / 2.
  EXPECT_NEAR(LearningRate(o, 10), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 5 / 10)), 1e-12);
  EXPECT_NEAR(LearningRate(o, 14), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 9 / 10)), 1e-12);
}

TEST(ExecutorLrScheduleTest, WsdStaysThenDecaysLinearlyAndConstantStays) {
  LrOptions o;
  o.lr = 1.0;
  o.min_lr_ratio = 0.0;
  o.total_steps = 10;
  o.schedule = LrSchedule::kWsd;  // 20% of 10 steps = the last 2 decay
  EXPECT_DOUBLE_EQ(LearningRate(o, 8), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 9), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(o, 10), 0.0);
  o.schedule = LrSchedule::kConstant;
  EXPECT_DOUBLE_EQ(LearningRate(o, 10), 1.0);
  EXPECT_THAT([] { ParseLrSchedule("linear", "--lr-schedule"); },
              ::testing::ThrowsMessage<InputError>(
                  ::testing::HasSubstr("expected one of cosine, wsd, constant")));
}

TEST(ExecutorDataTest, SequencesArePureFunctionsOfTheirIndex) {
  TokenSource a(DataOptions{"", 3, 16, 512}), b(DataOptions{"", 3, 16, 512});
  std::vector<int64_t> x(17), y(17), z(17);
  a.Sequence(41, x.data());
  b.Sequence(41, y.data());
  a.Sequence(42, z.data());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  for (int64_t t : x) EXPECT_TRUE(t >= 0 && t < 256);
}

}  // namespace
}  // namespace shardtune::exec
