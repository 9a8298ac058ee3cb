// The memory model against PyTorch FSDP2 with frozen layers, PEFT LoRA and CPU offload: every run
// in tests/data/validation/fsdp2_h100_peft_offload.jsonl (HF Llama-3.2-1B and Llama-3-8B under
// fully_shard on an H100, measured by tests/bench/fsdp2_reference/measure_fsdp2.py: LoRA r16 on
// q,v or all projections over an fp32 or bf16 base, the embeddings and the first 8 / 15 / 16
// layers frozen, CPUOffloadPolicy) must be predicted within kTolerance for
// torch.cuda.max_memory_allocated at step 0 and in the steady state. The reference is the
// measurement, not shardtune's output. These runs exercise what autograd saves around frozen
// Linear layers (model/autograd_ledger.h) and the frozen parameters' load dtype.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {
namespace {

constexpr double kTolerance = 0.02;  // as fsdp2_measured_test.cc

std::vector<nlohmann::json> LoadRuns() {
  const char* dir = std::getenv("SHARDTUNE_TEST_DATA_DIR");
  std::string base = dir ? dir : SHARDTUNE_TEST_DATA_DIR;
  std::ifstream in(base + "/validation/fsdp2_h100_peft_offload.jsonl");
  EXPECT_TRUE(in.good());
  std::vector<nlohmann::json> runs;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) runs.push_back(nlohmann::json::parse(line));
  }
  return runs;
}

// measure_fsdp2.py's arguments as a plan: bf16 params, fp32 reduce, foreach AdamW, every block
// and the root fully_shard-ed with reshard_after_forward=True, HF's loss.
model::Plan PlanOf(const nlohmann::json& c) {
  model::Plan p;
  p.micro_batch = c.at("mb").get<int>();
  p.seq_len = c.at("seq").get<int64_t>();
  p.grad_accum = c.at("accum").get<int>();
  p.checkpointing = c.at("ckpt") == "full" ? model::Checkpointing::kFull : model::Checkpointing::kNone;
  p.reshard_after_forward = c.at("reshard").get<int>() != 0;
  p.param_dtype = c.at("param_dtype") == "fp32" ? model::DType::kFp32 : model::DType::kBf16;
  if (c.at("lora_rank").get<int>() > 0) {
    p.lora.rank = c.at("lora_rank").get<int>();
    p.lora.alpha = c.at("lora_alpha").get<double>();
    std::stringstream targets(c.at("lora_targets").get<std::string>());
    for (std::string t; std::getline(targets, t, ',');) p.lora.targets.push_back(t);
    p.lora.dtype = model::DType::kFp32;  // peft autocast_adapter_dtype
  }
  int frozen = c.at("freeze_layers").get<int>();
  if (frozen >= 0) {
    p.frozen_prefixes.push_back("model.embed_tokens");
    for (int i = 0; i < frozen; ++i) p.frozen_prefixes.push_back("model.layers." + std::to_string(i) + ".");
  }
  if (c.at("base_dtype") == "bf16") p.frozen_dtype = model::DType::kBf16;
  if (c.at("offload").get<int>() != 0) p.offload = model::Offload::kAll;
  return p;
}

TEST(Fsdp2PeftMeasuredTest, PeakAllocatedWithinTolerance) {
  int compared = 0, lora = 0, frozen = 0, offload = 0;
  for (const nlohmann::json& r : LoadRuns()) {
    if (r.contains("error")) continue;
    const auto& c = r.at("config");
    model::ModelSpec spec = model::FindModelPreset(c.at("model").get<std::string>());
    auto cluster = profiles::ParseClusterShorthand(std::to_string(c.at("world").get<int>()) + "xH100");
    model::Plan plan = PlanOf(c);
    MemoryReport m = EstimateMemory(spec, cluster, plan);
    double step0 = r.at("steps").at(0).at("peak_allocated").get<double>();
    double steady = 0;
    for (size_t s = 1; s < r.at("steps").size(); ++s) {
      steady = std::max(steady, r.at("steps").at(s).at("peak_allocated").get<double>());
    }
    std::string id = c.dump();
    EXPECT_NEAR(static_cast<double>(m.step0_peak.count()) / step0, 1.0, kTolerance) << id;
    EXPECT_NEAR(static_cast<double>(m.steady_peak.count()) / steady, 1.0, kTolerance) << id;
    // The measured trainable count is PEFT's / requires_grad's own.
    EXPECT_EQ(m.trainable_parameters, r.at("n_trainable").get<int64_t>()) << id;
    ++compared;
    lora += plan.lora.enabled();
    frozen += !plan.frozen_prefixes.empty();
    offload += plan.offload != model::Offload::kNone;
  }
  EXPECT_GE(compared, 10);
  EXPECT_GE(lora, 5);
  EXPECT_GE(frozen, 3);
  EXPECT_GE(offload, 2);
}

}  // namespace
}  // namespace shardtune::sim
