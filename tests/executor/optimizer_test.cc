// The sharded optimizer against LibTorch's own torch::optim::AdamW (the reference path), the
// learning-rate schedules against their closed forms, and the data stream's determinism.
#include "executor/fsdp/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>

#include "executor/train/data.h"
#include "executor/kernels/host_adamw.h"
#include "executor/train/lr_schedule.h"
#include "model/errors.h"

namespace shardtune::exec {
namespace {

TEST(ExecutorOptimizerTest, HostAdamWMatchesTorchOptimAdamWWithinAFewUlp) {
  // The host kernel runs torch.optim.AdamW's ops in their order on each element, but in one pass
  // (kernels/host_adamw.h): where ATen's vectorised add_ fuses a multiply-add the last bit may
  // differ. Bound: each step's m, v and update carry at most ~2 roundings more or fewer than
  // ATen's, an fp32 ulp being 2^-23 relative; over 5 steps |p - ref| <= 5 x 4 x 2^-23 x |update
  // scale| on top of p's own rounding. Checked as 16 ulp of |ref| plus 16 ulp of the step size.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const int64_t n = 300000;  // several ranges of kHostGrainNumel, and a ragged tail
  at::Tensor p = at::randn({n}, gen), g;
  at::Tensor ref = p.clone().requires_grad_(true);
  torch::optim::AdamW torch_adamw({ref}, torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  AdamWOptions o;
  o.weight_decay = 0.1;
  ShardedOptimizer mine(model::Optimizer::kAdamW, o, {&p}, {&g});
  const double ulp = std::ldexp(1.0, -23);
  for (int step = 1; step <= 5; ++step) {
    double lr = 1e-3 * step;  // a changing LR, as the schedule does
    g = at::randn({n}, gen);
    ref.mutable_grad() = g.clone();
    static_cast<torch::optim::AdamWOptions&>(torch_adamw.param_groups()[0].options()).lr(lr);
    torch_adamw.step();
    at::Tensor before = p.clone();
    mine.Step(lr);
    at::Tensor r = ref.detach();
    at::Tensor bound = r.abs() * (16 * ulp) + 16 * ulp * lr;
    EXPECT_TRUE(((p - r).abs() <= bound).all().item<bool>())
        << "step " << step << " max diff " << (p - r).abs().max().item<double>();
    // Not a no-op: the update moved p (AdamW's first steps move each element by about lr).
    EXPECT_GT((p - before).abs().max().item<double>(), 0.5 * lr);
  }
  // And the moments match torch's state: m = b1 m + (1 - b1) g cancels where the two terms meet,
  // so its error is absolute, a few ulp of the terms (|g| < ~5: ulp 5e-7), not relative.
  auto& state = static_cast<torch::optim::AdamWParamState&>(
      *torch_adamw.state().at(c10::guts::to_string(ref.unsafeGetTensorImpl())));
  EXPECT_TRUE(at::allclose(mine.exp_avg()[0], state.exp_avg(), 1e-6, 2e-6))
      << (mine.exp_avg()[0] - state.exp_avg()).abs().max().item<double>();
  EXPECT_TRUE(at::allclose(mine.exp_avg_sq()[0], state.exp_avg_sq(), 1e-6, 1e-12))
      << (mine.exp_avg_sq()[0] - state.exp_avg_sq()).abs().max().item<double>();
  EXPECT_EQ(mine.step(), 5);
}

TEST(ExecutorOptimizerTest, HostAdamWGivesTheSameBitsWhateverTheThreadCount) {
  // Element-wise work: how the shard is split across threads cannot change a bit (the 1- and
  // 2-rank equivalence tests and resume rely on it).
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t n = 200003;
  at::Tensor p0 = at::randn({n}, gen), g = at::randn({n}, gen);
  at::Tensor p1 = p0.clone(), p2 = p0.clone();
  const int threads = at::get_num_threads();
  ShardedOptimizer one(model::Optimizer::kAdamW, AdamWOptions{}, {&p1}, {&g});
  ShardedOptimizer many(model::Optimizer::kAdamW, AdamWOptions{}, {&p2}, {&g});
  at::set_num_threads(1);
  one.Step(1e-3);
  one.Step(2e-3);
  at::set_num_threads(std::max(2, threads));
  many.Step(1e-3);
  many.Step(2e-3);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(p1, p2));
  EXPECT_TRUE(at::equal(one.exp_avg_sq()[0], many.exp_avg_sq()[0]));
  EXPECT_FALSE(at::equal(p1, p0));
}

TEST(ExecutorOptimizerTest, HostSumOfSquaresIsTheFp64Sum) {
  // Against an independent fp64 reference: x cast to double, squared and summed by ATen.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  at::Tensor x = at::randn({100007}, gen);
  double ref = x.to(at::kDouble).pow(2).sum().item<double>();
  double mine = HostSumOfSquares(x.data_ptr<float>(), 0, x.numel());
  EXPECT_NEAR(mine, ref, 1e-12 * ref);
  EXPECT_EQ(HostSumOfSquares(x.data_ptr<float>(), 5, 5), 0.0);
  const float three_four[] = {3.0f, 4.0f};
  EXPECT_EQ(HostSumOfSquares(three_four, 0, 2), 25.0);
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
