// Random valid-looking plans for the simulator's property tests (micro_batch_skip_test.cc,
// one_number_test.cc): every searched knob drawn from a small set; the caller keeps the plans
// Plan::Problems accepts. The lists that differ between tests come in `RandomPlanSpace`.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"

namespace shardtune::sim::testing {

// The property tests' seed: SHARDTUNE_TEST_SEED when set, else `fallback` (print it with
// SCOPED_TRACE so a failure can be replayed).
inline uint64_t TestSeed(uint64_t fallback) {
  const char* env = std::getenv("SHARDTUNE_TEST_SEED");
  return env ? std::strtoull(env, nullptr, 10) : fallback;
}

// The property tests' random engine, seeded with TestSeed(fallback): while it lives, every failure
// of the test names the seed ("SHARDTUNE_TEST_SEED=..."), as a SCOPED_TRACE would.
class SeededRng : public std::mt19937_64 {
 public:
  explicit SeededRng(uint64_t fallback) : SeededRng(Seed{TestSeed(fallback)}) {}

 private:
  struct Seed {
    uint64_t value;
  };
  explicit SeededRng(Seed seed)
      : std::mt19937_64(seed.value),
        trace_(__FILE__, __LINE__, "SHARDTUNE_TEST_SEED=" + std::to_string(seed.value)) {}

  ::testing::ScopedTrace trace_;
};

// The plans the property tests keep: those Plan::Problems accepts for this model and cluster.
inline bool Valid(const model::Plan& p, const model::ModelSpec& spec,
                  const profiles::ClusterSpec& cluster) {
  return p.Problems("plan", cluster.world_size(), cluster.gpus_per_node, spec.num_layers,
                    spec.SeqLenLimit())
      .empty();
}

template <typename T>
T Pick(std::mt19937_64& rng, std::initializer_list<T> v) {
  return *(v.begin() + static_cast<std::ptrdiff_t>(rng() % v.size()));
}

template <typename T>
T PickOf(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[static_cast<size_t>(rng() % v.size())];
}

struct RandomPlanSpace {
  std::vector<int> micro_batches = {1, 2};
  std::vector<int> grad_accums = {1, 2, 4, 5, 6, 8};
  std::vector<int64_t> seq_lens = {256, 512};
  std::vector<int> hybrid_groups = {2};
};

inline model::Plan RandomPlan(std::mt19937_64& rng, const RandomPlanSpace& space = {}) {
  model::Plan p;
  p.strategy = Pick(rng, {model::ShardingStrategy::kFullShard, model::ShardingStrategy::kShardGradOp,
                          model::ShardingStrategy::kNoShard, model::ShardingStrategy::kHybridShard,
                          model::ShardingStrategy::kHybridShardZero2});
  p.shard_group_size = p.Hybrid() ? PickOf(rng, space.hybrid_groups) : 0;
  p.reshard_after_forward = model::StrategyReshardsAfterForward(p.strategy);
  p.micro_batch = PickOf(rng, space.micro_batches);
  p.grad_accum = PickOf(rng, space.grad_accums);
  p.seq_len = PickOf(rng, space.seq_lens);
  p.no_sync = rng() % 3 == 0;
  p.checkpointing = Pick(rng, {model::Checkpointing::kNone, model::Checkpointing::kFull,
                               model::Checkpointing::kSelective, model::Checkpointing::kEveryK});
  p.checkpoint_every_k = p.checkpointing == model::Checkpointing::kEveryK ? 2 : 1;
  p.offload = Pick(rng, {model::Offload::kNone, model::Offload::kOptimizer, model::Offload::kAll});
  p.forward_prefetch = rng() % 2 == 0;
  p.backward_prefetch = Pick(rng, {model::BackwardPrefetch::kPre, model::BackwardPrefetch::kNone});
  p.keep_logits = rng() % 4 == 0;
  if (rng() % 3 == 0) p.cp = 2;
  if (rng() % 4 == 0) {
    p.lora.rank = 8;
    p.lora.targets = {"q_proj", "v_proj"};
  }
  if (rng() % 3 == 0) {
    p.wrap.kind = model::WrapPolicy::Kind::kEveryK;
    p.wrap.every_k = 2;
  }
  p.wrap.embedding_unit = p.wrap.head_unit = rng() % 2 == 0;
  return p;
}

}  // namespace shardtune::sim::testing
