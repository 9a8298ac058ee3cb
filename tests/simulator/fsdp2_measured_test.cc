// The memory model against PyTorch FSDP2 itself: every run in
// tests/data/validation/fsdp2_h100_measured.json (HF Llama-3.2-1B and Llama-3-8B under
// fully_shard on an H100, worlds 1-8, micro-batches 1-8, with and without checkpointing,
// reshard_after_forward on and off, foreach and fused AdamW, gradient accumulation) must be
// predicted within kTolerance for torch.cuda.max_memory_allocated at step 0 and in the steady
// state. The reference is the measurement, not shardtune's output.
#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {
namespace {

// The acceptance band of this comparison (relative error of the peak allocated bytes).
constexpr double kTolerance = 0.02;

nlohmann::json LoadRuns() {
  const char* dir = std::getenv("SHARDTUNE_TEST_DATA_DIR");
  std::string base = dir ? dir : SHARDTUNE_TEST_DATA_DIR;
  std::ifstream in(base + "/validation/fsdp2_h100_measured.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

model::Plan PlanOf(const nlohmann::json& c) {
  model::Plan p;
  p.micro_batch = c.at("mb").get<int>();
  p.seq_len = c.at("seq").get<int64_t>();
  p.grad_accum = c.at("accum").get<int>();
  p.checkpointing = c.at("ckpt") == "full" ? model::Checkpointing::kFull : model::Checkpointing::kNone;
  p.reshard_after_forward = c.at("reshard").get<int>() != 0;
  std::string o = c.at("optim").get<std::string>();
  p.optimizer_impl = o == "fused"     ? model::OptimizerImpl::kFused
                     : o == "forloop" ? model::OptimizerImpl::kForLoop
                                      : model::OptimizerImpl::kForeach;
  p.attention = c.at("attn") == "eager" ? model::Attention::kEager : model::Attention::kSdpa;
  p.param_dtype = c.at("param_dtype") == "fp32" ? model::DType::kFp32 : model::DType::kBf16;
  return p;
}

TEST(Fsdp2MeasuredTest, PeakAllocatedWithinTolerance) {
  nlohmann::json doc = LoadRuns();
  int compared = 0;
  for (const auto& r : doc.at("runs")) {
    if (r.contains("error")) continue;  // an out-of-memory run has no peaks
    const auto& c = r.at("config");
    model::ModelSpec spec = model::FindModelPreset(c.at("model").get<std::string>());
    auto cluster = profiles::ParseClusterShorthand(std::to_string(c.at("world").get<int>()) + "xH100");
    MemoryReport m = EstimateMemory(spec, cluster, PlanOf(c));
    double step0 = r.at("steps").at(0).at("peak_allocated").get<double>();
    double steady = 0;
    for (size_t s = 1; s < r.at("steps").size(); ++s) {
      steady = std::max(steady, r.at("steps").at(s).at("peak_allocated").get<double>());
    }
    std::string id = c.dump();
    EXPECT_NEAR(static_cast<double>(m.step0_peak.count()) / step0, 1.0, kTolerance) << id;
    EXPECT_NEAR(static_cast<double>(m.steady_peak.count()) / steady, 1.0, kTolerance) << id;
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

}  // namespace
}  // namespace shardtune::sim
