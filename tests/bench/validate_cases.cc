// Prints predicted vs published figures for validation case files (shared/validation/
// public_cases.json and tests/data/validation/*.json): throughput cases are simulated with the
// setup they state (fields marked unconfirmed are the best reading of the source); hardware
// cases are compared with the catalog. Reports each error; tunes nothing.
// Usage: validate_cases FILE...
#include <cmath>
#include <cstdio>
#include <string>

#include "model/plan.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "profiles/cluster.h"
#include "profiles/hardware.h"
#include "simulator/profile_json.h"
#include "simulator/simulate.h"

namespace {

using namespace shardtune;

void Row(const std::string& id, const std::string& what, double predicted, double measured) {
  double err = 100.0 * (predicted - measured) / measured;
  std::printf("%-40s %-26s predicted %12.4g  published %12.4g  error %+7.1f%%\n", id.c_str(),
              what.c_str(), predicted, measured, err);
}

// The IBM/Meta FSDP blog case: Llama-2-7B on 16 nodes of 8 A100-80G at 4096 tokens. Read from
// the source: HSDP within a node (fms-fsdp's default sharding), SDPA flash attention, MFU = HFU
// (no recomputation), ibm-fms's own Llama (closer to torchtitan's code than to HF's).
sim::SimReport SimulateSetup(const nlohmann::json& setup) {
  std::string m = setup.at("model").get<std::string>();
  std::string cluster;
  model::Plan p;
  if (setup.contains("cluster")) {  // a setup in shardtune's own flag vocabulary
    cluster = setup.at("cluster").get<std::string>();
    if (setup.contains("strategy")) {  // as --strategy
      p.strategy = model::ParseEnum<model::ShardingStrategy>(setup.at("strategy").get<std::string>(),
                                                             "setup.strategy");
    }
  } else {
    cluster = std::to_string(setup.at("nodes").get<int>()) + "x" +
              std::to_string(setup.at("gpus_per_node").get<int>()) + "x" + setup.at("gpu").get<std::string>();
    p.strategy = model::ShardingStrategy::kHybridShard;
    p.modeling = model::Modeling::kTorchtitan;
    p.micro_batch = 2;
  }
  if (setup.contains("micro_batch")) p.micro_batch = setup.at("micro_batch").get<int>();
  p.seq_len = setup.at("seq_len").get<int64_t>();
  if (setup.contains("modeling") && setup.at("modeling") == "torchtitan") p.modeling = model::Modeling::kTorchtitan;
  if (setup.contains("checkpointing")) {  // as --checkpointing: none|full|selective|every:K
    model::ParseCheckpointingSpec(setup.at("checkpointing").get<std::string>(), "setup.checkpointing", &p);
  }
  if (setup.contains("sdpa_backend")) {  // as --sdpa-backend
    p.sdpa_backend = model::ParseEnum<model::SdpaBackend>(setup.at("sdpa_backend").get<std::string>(),
                                                          "setup.sdpa_backend");
  }
  profiles::ClusterSpec c = profiles::ParseClusterShorthand(cluster);
  sim::SimOptions options;  // as simulate: the catalog's measured profile for the GPU, if any
  const sim::Profile prof = sim::JobProfile("", c.gpu);
  options.memory.constants = prof.memory;
  options.costs = prof.costs;
  return sim::SimulateStep(model::FindModelPreset(m), c, p, options);
}

void Hardware(const nlohmann::json& c) {
  const auto& measured = c.at("measured");
  if (c.at("id") == "gpu-peaks") {
    for (auto it = measured.begin(); it != measured.end(); ++it) {
      const auto& g = profiles::FindGpu(it.key(), "case gpu-peaks");
      if (it->contains("bf16_dense_flops")) Row(it.key(), "bf16 dense FLOP/s", g.bf16_dense.count(), it->at("bf16_dense_flops").get<double>());
      if (it->contains("hbm_bytes_per_s")) Row(it.key(), "memory bytes/s", g.memory_bandwidth.count(), it->at("hbm_bytes_per_s").get<double>());
    }
    return;
  }
  sim::CostConstants k;
  const auto& h100 = profiles::FindGpu("H100-SXM-80G", "case");
  if (measured.contains("flops_per_s")) {
    Row(c.at("id").get<std::string>(), "matmul FLOP/s (by construction)",
        h100.bf16_dense.count() * k.matmul_efficiency, measured.at("flops_per_s").get<double>());
  }
  if (measured.contains("bytes_per_s")) {
    Row(c.at("id").get<std::string>(), "copy bytes/s (by construction)",
        h100.memory_bandwidth.count() * k.memory_efficiency, measured.at("bytes_per_s").get<double>());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: validate_cases FILE...\n");
    return 2;
  }
  int failures = 0;
  for (int a = 1; a < argc; ++a) {
    try {
      nlohmann::json j = model::ReadJsonFile(argv[a]);
      for (const auto& c : j.at("cases")) {
        std::string id = c.at("id").get<std::string>();
        if (c.at("kind") == "hardware") {
          Hardware(c);
          continue;
        }
        sim::SimReport r = SimulateSetup(c.at("setup"));
        const auto& m = c.at("measured");
        if (m.contains("tokens_per_s_per_gpu")) Row(id, "tokens/s per GPU", r.tokens_per_s_per_gpu, m.at("tokens_per_s_per_gpu").get<double>());
        if (m.contains("mfu")) Row(id, "MFU", r.mfu, m.at("mfu").get<double>());
        // torchtitan logs torch.cuda.max_memory_reserved() as "memory" (GiB).
        if (m.contains("max_reserved_gib")) {
          Row(id, "max reserved (GiB)", static_cast<double>(r.memory.reserved_no_pressure.count()) / (1 << 30),
              m.at("max_reserved_gib").get<double>());
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s: %s\n", argv[a], e.what());
      ++failures;
    }
  }
  return failures ? 1 : 0;
}
