// Benchmark helper (not a test): one plan's per-block activation choices as shardtune costs them,
// and shardtune's per-block answers at a range of budgets, as JSON for tests/bench/sac_compare.py
// (which runs PyTorch's auto-SAC, tests/bench/pytorch_auto_sac.py, on the same op table).
//
//   sac_levels MODEL CLUSTER SEQ_LEN MICRO_BATCH [BUDGETS]
//
// MODEL: a preset; the plan is torchtitan's modeling, bf16, SDPA (op-level SAC applies to its dense
// block, and to an MoE block of routed experts: w1, w3, w2 are then the experts' grouped GEMMs).
// The op table: per op of model::kSacOpNames, the bytes keeping its output costs and the
// seconds rerunning it costs (planner/block_levels.h's rates: the walk's), the block input, the
// bytes a block keeps beyond the ops' outputs without checkpointing, and the elementwise rerun
// every checkpointed block pays (with an MoE block's router). Budgets: BUDGETS (default 13) points of total kept bytes over the
// blocks, evenly from every block at full checkpointing to every block keeping everything.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/presets.h"
#include "planner/block_levels.h"
#include "profiles/cluster.h"
#include "simulator/simulate.h"

int main(int argc, char** argv) {
  using namespace shardtune;
  if (argc < 5) {
    std::cerr << "usage: sac_levels MODEL CLUSTER SEQ_LEN MICRO_BATCH [BUDGETS]\n";
    return 2;
  }
  const model::ModelSpec spec = model::FindModelPreset(argv[1]);
  const profiles::ClusterSpec cluster = profiles::ParseClusterShorthand(argv[2]);
  model::Plan plan;
  plan.modeling = model::Modeling::kTorchtitan;
  plan.seq_len = std::atoll(argv[3]);
  plan.micro_batch = std::atoi(argv[4]);
  const int points = argc > 5 ? std::atoi(argv[5]) : 13;
  const planner::PlanBlock pb = planner::PlanBlockOf(spec, cluster, plan, sim::SimOptions{}.costs);
  const model::BlockActivations& b = pb.block;
  if (!b.HasOpSac()) {
    std::cerr << argv[1] << ": op-level SAC does not apply to its block (model::TorchtitanOpSacApplies)\n";
    return 1;
  }
  const double t = pb.tokens;
  nlohmann::ordered_json j;
  j["model"] = spec.name;
  j["cluster"] = cluster.name;
  j["seq_len"] = plan.seq_len;
  j["micro_batch"] = plan.micro_batch;
  j["blocks"] = spec.num_layers;
  j["block_input_bytes"] = t * b.checkpoint_input_per_token;
  double op_bytes = 0;
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (int i = 0; i < model::kSacOps; ++i) {
    const auto& op = b.sac_ops[static_cast<size_t>(i)];
    const double secs = i < model::kSacMatmuls
                            ? t * op.recompute_matmul_flops_per_token * pb.rates.matmul_s_per_flop
                            : t * pb.attention_flops_per_token * pb.rates.attention_s_per_flop;
    ops.push_back({{"name", model::kSacOpNames[i]}, {"output_bytes", t * op.output_per_token}, {"recompute_s", secs}});
    op_bytes += t * op.output_per_token;
  }
  j["ops"] = ops;
  j["other_saved_bytes"] = std::max(0.0, t * b.full.saved_per_token - t * b.checkpoint_input_per_token - op_bytes);
  // Every checkpointed block's elementwise rerun, and an MoE block's router gate, which op-level SAC
  // as shardtune models it always reruns (torchtitan force-recomputes it): a cost both sides pay.
  j["elementwise_recompute_s"] = t * b.full.elementwise_traffic_per_token * pb.rates.memory_s_per_byte +
                                 t * b.sac_rerun_matmul_flops_per_token * pb.rates.matmul_s_per_flop;
  const std::vector<planner::BlockLevel> levels = pb.Levels();
  const int n = spec.num_layers;
  const double lo = n * levels.front().bytes, hi = n * levels.back().bytes;
  nlohmann::ordered_json answers = nlohmann::ordered_json::array();
  const auto policy = [&](const std::vector<int>& counts, double* secs, double* bytes) {
    *secs = 0;
    *bytes = 0;
    for (size_t l = 0; l < levels.size(); ++l) {
      *secs += counts[l] * levels[l].rerun_s;
      *bytes += counts[l] * levels[l].bytes;
    }
    return model::BlockRunsToString(planner::RunsOf(levels, counts));
  };
  for (int k = 0; k < points; ++k) {
    const double budget = lo + (hi - lo) * k / std::max(1, points - 1);
    nlohmann::ordered_json a{{"budget_bytes", budget}};
    double s = 0, by = 0;
    if (auto exact = planner::CheapestMix(levels, n, budget)) {
      a["exact_policy"] = policy(*exact, &s, &by);
      a["exact_s"] = s;
      a["exact_bytes"] = by;
    }
    if (auto two = planner::CheapestTwoLevelMix(levels, n, budget)) {
      a["two_level_policy"] = policy(*two, &s, &by);
      a["two_level_s"] = s;
      a["two_level_bytes"] = by;
    }
    answers.push_back(a);
  }
  j["shardtune"] = answers;
  std::cout << j.dump(1) << "\n";
  return 0;
}
