// The FSDP runtime against a plain LibTorch computation of the same transformer without any
// sharding (leaf parameters, one autograd pass): gradients must agree for every wrap policy,
// activation checkpointing and reshard setting, and gathered memory must be freed when the
// plan says so. Runs in-process on the Emulated communicator (one rank, or rank 0 of N).
#include "executor/fsdp/fsdp_runtime.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "executor/errors.h"
#include "model/model_spec_json.h"
#include "model/module_tree.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec {
namespace {

constexpr uint64_t kSeed = 7;

model::ModelSpec Spec(const std::string& file) {
  return model::ReadModelSpecFile(testing::DataPath(file));
}

ProcessGroups Emulated(int shard, int replicate, std::shared_ptr<CollectiveLog> log) {
  return {MakeEmulatedCommunicator("world", 0, 1, log),
          MakeEmulatedCommunicator("shard", 0, shard, log),
          MakeEmulatedCommunicator("replicate", 0, replicate, log), nullptr, nullptr, nullptr};
}

struct Batch {
  at::Tensor tokens, labels;  // [B, S] int64
};

Batch MakeBatch(const model::ModelSpec& spec, int64_t B, int64_t S, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {at::randint(spec.vocab_size, {B, S}, gen, at::kLong),
          at::randint(spec.vocab_size, {B, S}, gen, at::kLong)};
}

// The reference: every parameter a plain fp32 leaf, initialized as the runtime initializes it.
struct Plain {
  ParamTable table;
  explicit Plain(const model::ModelSpec& spec) {
    model::WrapPolicy block;
    for (const model::FsdpUnit& u : model::BuildFsdpUnits(spec, block)) {
      for (const model::ParamTensor& p : u.params) {
        at::Tensor t = at::empty(Transformer::Shape(p.dim0, p.inner), at::kFloat);
        Transformer::InitParameter(p.name, kSeed, t);
        table[p.name] = t.requires_grad_(true);
      }
    }
  }
  at::Tensor Loss(const Transformer& tf, const Batch& b) {
    at::Tensor x = b.tokens;
    for (int s = 0; s < tf.num_segments(); ++s) x = tf.Segment(table, s, x, b.labels);
    return x;
  }
};

// Max |runtime grad - reference grad| over every parameter (the runtime's grads are the flat
// fp32 shards of a 1-rank group, so the shard is the whole unit).
double MaxGradDiff(FsdpRuntime& rt, Plain& ref) {
  double d = 0;
  for (FlatParam* u : rt.units()) {
    for (const ParamSlot& s : u->slots()) {
      at::Tensor mine = u->grad_shard().narrow(0, s.offset, s.numel);
      at::Tensor want = ref.table.at(s.name).grad().reshape({-1});
      d = std::max(d, (mine - want).abs().max().item<double>());
    }
  }
  return d;
}

struct Case {
  std::string name, model, wrap, checkpointing;
  model::ShardingStrategy strategy = model::ShardingStrategy::kFullShard;
  bool embedding_unit = false, head_unit = false;
};

class ExecutorFsdpRuntimeTest : public ::testing::TestWithParam<Case> {};

model::Plan PlanOf(const Case& c) {
  model::Plan p;
  p.strategy = c.strategy;
  p.reshard_after_forward = model::StrategyReshardsAfterForward(c.strategy);
  p.wrap = model::ParseWrapSpec(c.wrap, "wrap");
  p.wrap.embedding_unit = c.embedding_unit;
  p.wrap.head_unit = c.head_unit;
  model::ParseCheckpointingSpec(c.checkpointing, "checkpointing", &p);
  p.param_dtype = model::DType::kFp32;
  p.forward_prefetch = true;
  return p;
}

TEST_P(ExecutorFsdpRuntimeTest, GradientsEqualPlainAutograd) {
  const Case& c = GetParam();
  model::ModelSpec spec = Spec(c.model);
  auto log = std::make_shared<CollectiveLog>();
  Recorder rec;
  RuntimeOptions ro{PlanOf(c), 1, kSeed, at::kCPU};
  FsdpRuntime rt(spec, ro, Emulated(1, 1, log), &rec);
  Plain ref(spec);
  // Two micro-batches with accumulation: sync on the last only when no_sync would apply.
  Batch b1 = MakeBatch(spec, 2, 16, 1), b2 = MakeBatch(spec, 2, 16, 2);
  at::Tensor l1 = rt.Forward(b1.tokens, b1.labels);
  // After forward, units that reshard hold no gathered memory; the root always keeps it.
  for (size_t u = 0; u < rt.units().size(); ++u) {
    bool keeps = rt.unit_specs()[u].is_root || !model::StrategyReshardsAfterForward(c.strategy);
    EXPECT_EQ(rt.units()[u]->gathered_bytes() > 0, keeps) << rt.units()[u]->name();
  }
  rt.Backward(l1, 0.5, /*sync=*/true);
  at::Tensor l2 = rt.Forward(b2.tokens, b2.labels);
  rt.Backward(l2, 0.5, /*sync=*/true);
  for (FlatParam* u : rt.units())
    EXPECT_EQ(u->gathered_bytes(), 0) << u->name() << " after backward";
  // The reference forward never checkpoints (selective changes the runtime's transformer).
  TransformerOptions plain_options;
  plain_options.sdpa = ro.plan.attention == model::Attention::kSdpa;
  Transformer plain(spec, plain_options);
  at::Tensor r1 = ref.Loss(plain, b1), r2 = ref.Loss(plain, b2);
  ((r1 + r2) * 0.5).backward();
  EXPECT_EQ(l1.item<double>(), r1.item<double>());
  double d = MaxGradDiff(rt, ref);
  std::cout << "[ " << c.name << " ] max |grad - plain autograd grad| = " << d << "\n";
  EXPECT_LE(d, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Plans, ExecutorFsdpRuntimeTest,
    ::testing::Values(Case{"llama_block", "micro-llama.model.json", "block", "none"},
                      Case{"llama_full_recompute", "micro-llama.model.json", "block", "full"},
                      Case{"llama_every2_shard_grad_op", "micro-llama.model.json", "every:2",
                           "every:2", model::ShardingStrategy::kShardGradOp},
                      Case{"llama_size_wrap", "micro-llama.model.json", "size:10K", "none"},
                      Case{"llama_own_embedding_head", "micro-llama.model.json", "block", "full",
                           model::ShardingStrategy::kFullShard, true, true},
                      Case{"gpt2_block_recompute", "micro-gpt2.model.json", "block", "full"},
                      Case{"gpt2_tied_embedding_unit", "micro-gpt2.model.json", "block", "none",
                           model::ShardingStrategy::kFullShard, true, false},
                      Case{"llama_selective", "micro-llama.model.json", "block", "selective"},
                      Case{"llama_selective_size_wrap_shard_grad_op", "micro-llama.model.json",
                           "size:10K", "selective", model::ShardingStrategy::kShardGradOp},
                      Case{"gpt2_selective", "micro-gpt2.model.json", "block", "selective"},
                      // The MoE auxiliary loss through recomputed blocks: their router logits are
                      // side outputs of the recompute node (recompute.h).
                      Case{"qwen_moe_aux_loss_full_recompute", "micro-qwen-moe-aux.model.json",
                           "block", "full"},
                      Case{"qwen_moe_aux_loss_every2", "micro-qwen-moe-aux.model.json", "block",
                           "every:2"},
                      Case{"qwen_moe_aux_loss_no_recompute", "micro-qwen-moe-aux.model.json",
                           "block", "none"}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// The runtime options of the tests below: micro-llama's plan with block units and no recompute,
// on `world` ranks.
RuntimeOptions BlockUnitOptions(int world) {
  return {PlanOf(Case{"block", "micro-llama.model.json", "block", "none"}), world, kSeed, at::kCPU};
}

TEST(ExecutorFsdpRuntimeNoSyncTest, UnshardedAccumulationEqualsPerMicroBatchReduction) {
  model::ModelSpec spec = Spec("micro-llama.model.json");
  auto log = std::make_shared<CollectiveLog>();
  Recorder rec;
  FsdpRuntime sync(spec, BlockUnitOptions(1), Emulated(1, 1, log), &rec);
  FsdpRuntime nosync(spec, BlockUnitOptions(1), Emulated(1, 1, log), &rec);
  Batch b1 = MakeBatch(spec, 1, 16, 3), b2 = MakeBatch(spec, 1, 16, 4);
  for (auto [rt, first_sync] : {std::pair{&sync, true}, std::pair{&nosync, false}}) {
    rt->Backward(rt->Forward(b1.tokens, b1.labels), 0.5, first_sync);
    rt->Backward(rt->Forward(b2.tokens, b2.labels), 0.5, true);
  }
  double d = 0;
  for (size_t u = 0; u < sync.units().size(); ++u) {
    d = std::max(d, (sync.units()[u]->grad_shard() - nosync.units()[u]->grad_shard())
                        .abs()
                        .max()
                        .item<double>());
  }
  std::cout << "no_sync vs sync max diff " << d << "\n";
  EXPECT_LE(d, 1e-6);
}

// Rank 0 of 4 (Emulated): shards are ceil(numel / 4) padded, every unit is all-gathered in
// forward and again in backward (FULL_SHARD) and reduce-scattered once per backward.
TEST(ExecutorFsdpRuntimeEmulatedTest, RankOfFourShardsAndRecordsEveryCollective) {
  model::ModelSpec spec = Spec("micro-llama.model.json");
  auto log = std::make_shared<CollectiveLog>();
  Recorder rec;
  FsdpRuntime rt(spec, BlockUnitOptions(4), Emulated(4, 1, log), &rec);
  Batch b = MakeBatch(spec, 1, 16, 5);
  rt.Backward(rt.Forward(b.tokens, b.labels), 1.0, true);
  int ag = 0, rs = 0;
  for (const CollectiveRecord& r : log->Snapshot()) {
    ag += r.kind == profiles::Collective::kAllGather;
    rs += r.kind == profiles::Collective::kReduceScatter;
    EXPECT_EQ(r.group_size, 4);
  }
  int units = static_cast<int>(rt.units().size());
  EXPECT_EQ(ag, 2 * (units - 1) + 1);  // the root is not resharded after forward
  EXPECT_EQ(rs, units);
  for (FlatParam* u : rt.units()) {
    EXPECT_EQ(u->shard_numel(), (u->numel() + 3) / 4) << u->name();
    EXPECT_EQ(u->padded_numel() % 4, 0);
    ASSERT_TRUE(u->grad_shard().defined());
    EXPECT_EQ(u->grad_shard().numel(), u->shard_numel());
  }
}

// A shard group whose reduce-scatter fails, as Gloo's does when a peer died.
class FailingReduceScatter : public Communicator {
 public:
  explicit FailingReduceScatter(std::shared_ptr<CollectiveLog> log)
      : Communicator("shard", 0, 2, log), inner_(MakeEmulatedCommunicator("shard", 0, 2, log)) {}
  std::unique_ptr<Work> AllGather(const at::Tensor& s, const at::Tensor& f) override {
    return inner_->AllGather(s, f);
  }
  std::unique_ptr<Work> ReduceScatter(const at::Tensor&, const at::Tensor&) override {
    throw BackendError("rank 0 (shard group 0, 2 ranks): reduce_scatter failed: peer gone");
  }
  std::unique_ptr<Work> AllReduce(const at::Tensor& t) override { return inner_->AllReduce(t); }
  std::unique_ptr<Work> AllToAll(const at::Tensor& in, const at::Tensor& out) override {
    return inner_->AllToAll(in, out);
  }
  std::unique_ptr<Work> AllToAllV(const at::Tensor& in, const at::Tensor& out,
                                  const std::vector<int64_t>& in_splits,
                                  const std::vector<int64_t>& out_splits) override {
    return inner_->AllToAllV(in, out, in_splits, out_splits);
  }
  std::unique_ptr<Work> Broadcast(const at::Tensor& t, int root) override {
    return inner_->Broadcast(t, root);
  }
  void Barrier() override {}

 private:
  std::unique_ptr<Communicator> inner_;
};

// A collective that fails inside an autograd hook reaches the caller as the BackendError it
// was (cli/main.cc then exits 3 with its message), not as an internal error.
TEST(ExecutorFsdpRuntimeErrorTest, CollectiveFailureInsideBackwardHookSurfacesAsBackendError) {
  model::ModelSpec spec = Spec("micro-llama.model.json");
  auto log = std::make_shared<CollectiveLog>();
  Recorder rec;
  ProcessGroups g{MakeEmulatedCommunicator("world", 0, 1, log),
                  std::make_shared<FailingReduceScatter>(log),
                  MakeEmulatedCommunicator("replicate", 0, 1, log), nullptr, nullptr, nullptr};
  FsdpRuntime rt(spec, BlockUnitOptions(2), g, &rec);
  Batch b = MakeBatch(spec, 1, 16, 6);
  at::Tensor loss = rt.Forward(b.tokens, b.labels);
  EXPECT_THROW(
      {
        try {
          rt.Backward(loss, 1.0, true);
        } catch (const BackendError& e) {
          EXPECT_NE(std::string(e.what()).find("reduce_scatter failed: peer gone"),
                    std::string::npos);
          throw;
        }
      },
      BackendError);
}

}  // namespace
}  // namespace shardtune::exec
