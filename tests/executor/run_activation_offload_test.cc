// verl's activation offload in shardtune's executor (executor/nn/activation_offload.h, issue #46:
// run executes what estimate, simulate and the verl export already model):
// 1. The handler alone, on a 4-layer graph of CPU tensors: every tensor it copies comes back
//    bit-identical, the layer's parameters are never copied, the last layer's tensors stay, the
//    gradients equal those of the same graph without offload bit for bit, and at the forward's
//    end the tracked (device) memory is lower by what it copied, less the input the test holds.
// 2. `shardtune run --activation-offload verl_async`: the losses and step-1 gradient norm of no
//    offload (1e-6 relative, fp32), with no checkpointing and with full checkpointing, on 1 and
//    2 ranks (real processes, Gloo on 127.0.0.1).
// 3. Memory: one rank, a micro-batch of 8 x 128 tokens: the step-0 peak drops below no offload's,
//    and validate predicts it within 3%.
// 4. Offloaded leading blocks beside per-block recompute (issue #46): the same losses on 1 and 2
//    ranks, the peak within 3% of validate; selective recompute of an offloaded block is refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "executor/memory_tracker.h"
#include "executor/nn/activation_offload.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

constexpr int kLayers = 4;
constexpr int64_t kRows = 64, kDim = 32;

struct GraphRun {
  std::vector<at::Tensor> weight_grads;
  at::Tensor input_grad;
  int64_t tracked_after_forward = 0;  // tracked bytes the forward added
};

// y_l = tanh(x_l @ w_l) * x_l over kLayers layers, loss = sum(y). Autograd saves per layer x_l and
// w_l (mm), tanh's output t_l (tanh) and t_l and x_l again (mul).
GraphRun RunGraph(ActivationOffload* offload, const at::Tensor& x0, const std::vector<at::Tensor>& weights) {
  GraphRun r;
  const int64_t before = TrackedBytes();
  at::Tensor x = x0;
  for (int l = 0; l < kLayers; ++l) {
    if (offload != nullptr) offload->EnterLayer({weights[static_cast<size_t>(l)]});
    at::Tensor y = at::tanh(at::mm(x, weights[static_cast<size_t>(l)])) * x;
    if (offload != nullptr) y = offload->LeaveLayer(y);
    x = y;
  }
  at::Tensor loss = x.sum();
  x = at::Tensor();
  r.tracked_after_forward = TrackedBytes() - before;
  loss.backward();
  for (const at::Tensor& w : weights) r.weight_grads.push_back(w.grad().clone());
  r.input_grad = x0.grad().clone();
  return r;
}

// A copy outside LibTorch's (tracked) allocator, so that keeping it does not move the figures.
at::Tensor UntrackedClone(const at::Tensor& t) {
  void* p = std::malloc(static_cast<size_t>(t.numel()) * t.element_size());
  at::Tensor out = at::from_blob(p, t.sizes(), [](void* q) { std::free(q); }, t.options());
  out.copy_(t);
  return out;
}

bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

TEST(ActivationOffloadTest, CopiesComeBackBitIdenticalAndTheGradientsAreUnchanged) {
  InstallCpuMemoryTracker();
  at::manual_seed(7);
  auto make = [](bool requires_grad) {
    std::vector<at::Tensor> w;
    for (int l = 0; l < kLayers; ++l) w.push_back((at::randn({kDim, kDim}) * 0.2).requires_grad_(requires_grad));
    return w;
  };
  const at::Tensor x_init = at::randn({kRows, kDim});
  const std::vector<at::Tensor> w_init = make(false);
  auto fresh = [&](std::vector<at::Tensor>* w) {
    w->clear();
    for (const at::Tensor& t : w_init) w->push_back(t.clone().requires_grad_(true));
    return x_init.clone().requires_grad_(true);
  };

  std::vector<at::Tensor> w_plain;
  at::Tensor x_plain = fresh(&w_plain);
  const GraphRun plain = RunGraph(nullptr, x_plain, w_plain);

  ActivationOffload offload(kLayers, at::Device(at::kCPU));
  std::map<int64_t, at::Tensor> offloaded;  // a clone of each copied tensor, by copy
  int reloads = 0, bad = 0;
  std::vector<at::Tensor> w_off;
  at::Tensor x_off = fresh(&w_off);
  offload.set_observer([&](bool reload, int64_t copy, const at::Tensor& t) {
    for (const at::Tensor& w : w_off) {
      EXPECT_NE(t.storage().unsafeGetStorageImpl(), w.storage().unsafeGetStorageImpl())
          << "a parameter was copied";
    }
    if (!reload) {
      offloaded[copy] = UntrackedClone(t);
      return;
    }
    ++reloads;
    if (!SameBits(offloaded.at(copy), t)) ++bad;
  });
  const GraphRun off = RunGraph(&offload, x_off, w_off);

  // Layers 0 .. kLayers-2 are offloaded (the last stays), each copying x_l and t_l once (the
  // same tensor saved by two ops is one copy).
  const int64_t tensor_bytes = kRows * kDim * static_cast<int64_t>(sizeof(float));
  EXPECT_EQ(offloaded.size(), static_cast<size_t>(2 * (kLayers - 1)));
  EXPECT_EQ(offload.host_bytes(), 2 * (kLayers - 1) * tensor_bytes);
  EXPECT_EQ(reloads, static_cast<int>(offloaded.size()));
  EXPECT_EQ(bad, 0);
  for (int l = 0; l < kLayers; ++l) {
    EXPECT_TRUE(SameBits(off.weight_grads[static_cast<size_t>(l)], plain.weight_grads[static_cast<size_t>(l)]))
        << "layer " << l;
  }
  EXPECT_TRUE(SameBits(off.input_grad, plain.input_grad));
  // At the forward's end every offloaded group's device tensors are gone (the last commit drops
  // the one before the last layer), but x_0 (the test holds it): what was copied, less x_0.
  EXPECT_EQ(plain.tracked_after_forward - off.tracked_after_forward, offload.host_bytes() - tensor_bytes);
}


TEST(ExecutorActivationOffloadTest, SameLossesAsWithoutOffloadOnOneAndTwoRanks) {
  TempDir tmp;
  const std::string model = FourBlockLlama(tmp);
  // Both checkpointing modes on one rank, full (whose reentrant rerun unpacks the offloaded
  // block input) on two.
  for (int nproc : {1, 2}) {
    for (const std::string ckpt : {"none", "full"}) {
      if (nproc == 2 && ckpt == "none") continue;
      std::map<std::string, std::string> dirs;
      for (const std::string offload : {"none", "verl_async", "first:1"}) {
        const std::string dir = tmp.Sub(ckpt + "_" + offload + "_" + std::to_string(nproc));
        std::vector<std::string> a{"run", "--model", model, "--steps", "3", "--out", dir, "--seq-len", "32",
                                   "--global-batch", "4", "--threads", "1", "--max-grad-norm", "1.0",
                                   "--precision", "fp32", "--checkpointing", ckpt, "--activation-offload", offload};
        if (nproc > 1) a.insert(a.end(), {"--nproc", std::to_string(nproc)});
        ProcessResult p = RunShardtune(a);
        ASSERT_EQ(p.exit_code, 0) << ckpt << " " << offload << " on " << nproc << ": " << p.output;
        dirs[offload] = dir;
      }
      const std::map<int64_t, double> want = Losses(dirs["none"]);
      ASSERT_EQ(want.size(), 3u);
      // verl's every block but the last, and the handler over the first block only (issue #46's
      // per-block offload: block 1 closes its group, blocks 2-3 keep theirs).
      for (const std::string offload : {"verl_async", "first:1"}) {
        ExpectSameTraining(dirs["none"], dirs[offload],
                           offload + " " + ckpt + " on " + std::to_string(nproc) + " ranks");
      }
      EXPECT_NE(want.at(1), want.at(3)) << "training must move the loss";
    }
  }
}

TEST(ExecutorActivationOffloadTest, PeakDropsAndIsWhatValidatePredicts) {
  TempDir tmp;
  const std::string model = FourBlockLlama(tmp);
  std::map<std::string, double> measured;
  for (const std::string offload : {"none", "verl_async", "first:2"}) {
    auto [pred, meas] = Step0PeakAgainstValidate(model, tmp.Sub(offload), "none", {"--activation-offload", offload});
    ASSERT_GT(meas, 0) << offload;
    measured[offload] = meas;
    EXPECT_NEAR(pred / meas, 1.0, 0.03) << offload;
  }
  EXPECT_LT(measured["verl_async"], measured["none"]);
  // The first two blocks offloaded keep one block's activations more on the device than verl's
  // every block but the last (3 of 4), fewer than none.
  EXPECT_LT(measured["verl_async"], measured["first:2"]);
  EXPECT_LT(measured["first:2"], measured["none"]);
}

// Issue #46's mix of offloaded blocks and per-block recompute: blocks 0-1 go to the host (block 0
// keeping everything, block 1 rerunning whole from its offloaded input), block 2 closes the last
// group under op-level SAC (its tensors pass the handler's hooks and stay on the device), block 3
// runs torchtitan's selective rule outside the handler.
const std::string kMixedCheckpointing = "blocks:0=none,1=full,2=sac:wk+wo+w3+sdpa,3=selective";

TEST(ExecutorActivationOffloadTest, OffloadedBlocksBesidePerBlockRecomputeTrainTheSameLosses) {
  TempDir tmp;
  const std::string model = FourBlockLlama(tmp);
  for (int nproc : {1, 2}) {
    const std::string n = std::to_string(nproc);
    std::vector<std::string> base{"run", "--model", model, "--steps", "3", "--seq-len", "32", "--global-batch", "4",
                                  "--threads", "1", "--max-grad-norm", "1.0", "--precision", "fp32", "--modeling",
                                  "torchtitan"};
    if (nproc > 1) base.insert(base.end(), {"--nproc", n});
    ProcessResult none = RunShardtune(With(base, {"--out", tmp.Sub("none_" + n), "--checkpointing", "none"}));
    ASSERT_EQ(none.exit_code, 0) << none.output;
    ProcessResult mixed = RunShardtune(With(base, {"--out", tmp.Sub("mixed_" + n), "--checkpointing",
                                                   kMixedCheckpointing, "--activation-offload", "first:2"}));
    ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
    ExpectSameTraining(tmp.Sub("none_" + n), tmp.Sub("mixed_" + n), "first:2 beside " + kMixedCheckpointing + " on " + n);
  }
}

TEST(ExecutorActivationOffloadTest, MixedPolicyPeakIsWhatValidatePredicts) {
  TempDir tmp;
  const std::string model = FourBlockLlama(tmp);
  auto [plain_pred, plain] = Step0PeakAgainstValidate(model, tmp.Sub("plain"), kMixedCheckpointing,
                                                      {"--modeling", "torchtitan"});
  auto [pred, meas] = Step0PeakAgainstValidate(model, tmp.Sub("mixed"), kMixedCheckpointing,
                                               {"--modeling", "torchtitan", "--activation-offload", "first:2"});
  ASSERT_GT(meas, 0);
  ASSERT_GT(plain, 0);
  EXPECT_NEAR(pred / meas, 1.0, 0.03);
  // The same policy without offload, within 3% too (-2.3% on 2026-12-01: the op-SAC rerun still
  // holds its incoming gradient, one block residual PyTorch's non-reentrant SAC frees earlier,
  // executor/README.md "Activation offload"). Offloading block 0's activations and block 1's
  // input lowers its peak.
  EXPECT_NEAR(plain_pred / plain, 1.0, 0.03);
  EXPECT_LT(meas, plain);
  EXPECT_LT(pred, plain_pred);
}

TEST(ExecutorActivationOffloadTest, SelectiveRecomputeOfAnOffloadedBlockIsRefused) {
  TempDir tmp;
  ExpectInputError({"run", "--model", FourBlockLlama(tmp), "--steps", "1", "--out", tmp.Sub("o"),
                    "--checkpointing", "selective", "--activation-offload", "verl_async"},
                   "--activation-offload verl_async: expected the offloaded blocks 0-2 to keep everything or rerun "
                   "whole (verl offloads beside none or full), got block 0 running selective recompute");
  ExpectInputError({"run", "--model", FourBlockLlama(tmp), "--steps", "1", "--out", tmp.Sub("o"), "--modeling",
                    "torchtitan", "--checkpointing", "blocks:0=none,1=sac:wq+sdpa,2-3=none", "--activation-offload",
                    "first:2"},
                   "got block 1 running selective recompute under --checkpointing blocks:0=none,1=sac:wq+sdpa,2-3=none");
}

}  // namespace
}  // namespace shardtune::exec::testing
