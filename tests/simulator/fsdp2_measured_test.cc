// The memory model against PyTorch FSDP2 itself: every run in
// tests/data/validation/fsdp2_h100_measured.json (HF Llama-3.2-1B and Llama-3-8B under
// fully_shard on an H100, worlds 1-8, micro-batches 1-8, with and without checkpointing,
// reshard_after_forward on and off, foreach and fused AdamW, gradient accumulation) must be
// predicted within kTolerance for torch.cuda.max_memory_allocated at step 0 and in the steady
// state. The reference is the measurement, not shardtune's output.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/hf_config.h"
#include "model/presets.h"
#include "profiles/cluster.h"
#include "simulator/memory_ledger.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {
namespace {

// The acceptance band of this comparison (relative error of the peak allocated bytes).
constexpr double kTolerance = 0.02;

// torch.cuda.max_memory_reserved against the caching allocator replay (simulator/allocator_sim.h),
// at step 0 and in the steady steps, for all 25 runs (the expandable-segments run is printed, not
// held: it has its own model). Two bands: every run within kReservedTolerance, and the median
// within kReservedMedianTolerance. Why not tighter: the replay places each tensor as the
// allocator does, but the ledger's working sets are replayed as tensors of the largest saved
// shape (not the kernels' real temporaries) and a segment's allocations come in the ledger's
// order, not the kernels'; one misplaced [B, S, V] fp32 logits block (2 GiB on Llama-3-8B at
// 2048 tokens) is 5-10% of these runs' reserved. Worst case at the time of writing: -11.7%
// (Llama-3-8B, world 8, micro-batch 1, steady); median 2.3%; the per-pool-peak estimate it
// replaced was off by up to 35% (step 0) and 22% (steady).
constexpr double kReservedTolerance = 0.12;
constexpr double kReservedMedianTolerance = 0.04;

std::string DataPath(const std::string& file) {
  const char* dir = std::getenv("SHARDTUNE_TEST_DATA_DIR");
  std::string base = dir ? dir : SHARDTUNE_TEST_DATA_DIR;
  return base + "/validation/" + file;
}

nlohmann::json LoadRuns() {
  std::ifstream in(DataPath("fsdp2_h100_measured.json"));
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

// The runs of a JSON-lines file of tests/data/validation (one document per line).
std::vector<nlohmann::json> LoadJsonLines(const std::string& file) {
  std::ifstream in(DataPath(file));
  EXPECT_TRUE(in.good()) << file;
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
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
  // PEFT runs (tests/bench/fsdp2_reference/compare_estimate.py flags()): adapters fp32,
  // --freeze-layers K freezes the embeddings and blocks 0..K-1, --base-dtype is the frozen dtype.
  if (c.value("lora_rank", 0) > 0) {
    p.lora.rank = c.at("lora_rank").get<int>();
    p.lora.alpha = c.at("lora_alpha").get<double>();
    std::stringstream targets(c.at("lora_targets").get<std::string>());
    for (std::string t; std::getline(targets, t, ',');) p.lora.targets.push_back(t);
    p.lora.dtype = model::DType::kFp32;
  }
  if (c.value("freeze_layers", -1) >= 0) {
    p.frozen_prefixes.push_back("model.embed_tokens");
    for (int i = 0; i < c.at("freeze_layers").get<int>(); ++i)
      p.frozen_prefixes.push_back("model.layers." + std::to_string(i) + ".");
  }
  if (c.value("base_dtype", "fp32") == "bf16") p.frozen_dtype = model::DType::kBf16;
  if (c.value("offload", 0) != 0) p.offload = model::Offload::kAll;
  return p;
}

// max_memory_reserved of step 0 and the most of the later steps (the measurement resets peaks
// between phases, so each step's figure is the reserved bytes it ended with).
std::pair<double, double> MeasuredReserved(const nlohmann::json& run) {
  const auto& steps = run.at("steps");
  double steady = 0;
  for (size_t s = 1; s < steps.size(); ++s)
    steady = std::max(steady, steps.at(s).at("max_reserved").get<double>());
  return {steps.at(0).at("max_reserved").get<double>(), steady};
}

// The estimate of a measured run of `spec` under `plan`, its step-0 and steady peaks
// (max_memory_allocated of step 0 and the most of the later steps) checked to kTolerance.
MemoryReport ExpectPeaksWithinTolerance(const nlohmann::json& run, const model::ModelSpec& spec,
                                        const model::Plan& plan) {
  const auto& c = run.at("config");
  auto cluster = profiles::ParseClusterShorthand(std::to_string(c.at("world").get<int>()) + "xH100");
  MemoryReport m = EstimateMemory(spec, cluster, plan);
  double step0 = run.at("steps").at(0).at("peak_allocated").get<double>();
  double steady = 0;
  for (size_t s = 1; s < run.at("steps").size(); ++s) {
    steady = std::max(steady, run.at("steps").at(s).at("peak_allocated").get<double>());
  }
  std::string id = c.dump();
  EXPECT_NEAR(static_cast<double>(m.step0_peak.count()) / step0, 1.0, kTolerance) << id;
  EXPECT_NEAR(static_cast<double>(m.steady_peak.count()) / steady, 1.0, kTolerance) << id;
  return m;
}

// A preset model's run (the config's "model"), planned from its config.
MemoryReport ExpectPeaksWithinTolerance(const nlohmann::json& run) {
  const auto& c = run.at("config");
  return ExpectPeaksWithinTolerance(run, model::FindModelPreset(c.at("model").get<std::string>()), PlanOf(c));
}

TEST(Fsdp2MeasuredTest, PeakAllocatedWithinTolerance) {
  nlohmann::json doc = LoadRuns();
  int compared = 0;
  for (const auto& r : doc.at("runs")) {
    if (r.contains("error")) continue;  // an out-of-memory run has no peaks
    ExpectPeaksWithinTolerance(r);
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

// The LoRA / frozen / offload runs (peft.get_peft_model before fully_shard, CPUOffloadPolicy): the
// same 2% on the peak allocated, and the trainable parameter count PEFT / requires_grad reports.
// They exercise what autograd saves around frozen Linear layers (model/autograd_ledger.h) and
// the frozen parameters' load dtype.
TEST(Fsdp2MeasuredTest, PeftFrozenAndOffloadPeakAllocatedWithinTolerance) {
  int compared = 0, lora = 0, frozen = 0, offload = 0;
  for (const nlohmann::json& r : LoadJsonLines("fsdp2_h100_peft_offload.jsonl")) {
    if (r.contains("error")) continue;
    const auto& c = r.at("config");
    model::Plan plan = PlanOf(c);
    MemoryReport m = ExpectPeaksWithinTolerance(r);
    EXPECT_EQ(m.trainable_parameters, r.at("n_trainable").get<int64_t>()) << c.dump();
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

// The architectures of 2026 (tests/data/validation/fsdp2_h100_arch2026.jsonl, measured on the
// lent H100 on 2026-11-26 by measure_fsdp2.py --hf-config, cut to 4-6 layers, as rank 0 of 8
// over the fake process group, transformers 5.17): Qwen3-30B-A3B (MoE, transformers 5's experts),
// gpt-oss-20b (sinks, MoE), DeepSeek-V2-Lite (MLA, a dense first block), Gemma 3 27B (sliding
// and global layers), Phi-4, OLMo 2 13B, with and without checkpointing. Each run's model is the
// config transformers built (the record's hf_config_json): its parameter count must be
// transformers' own, and the peaks within kTolerance. transformers 5 built some of these models
// in their config's bfloat16 and the harness did not upcast them: their master dtype is the bytes
// per parameter a rank held after init (compare_estimate.py master_dtype_of).
TEST(Fsdp2MeasuredTest, Architectures2026PeakAllocatedWithinTolerance) {
  int compared = 0, bf16_master = 0;
  for (const nlohmann::json& run : LoadJsonLines("fsdp2_h100_arch2026.jsonl")) {
    if (run.contains("error")) continue;
    const auto& c = run.at("config");
    model::ModelSpec spec = model::ImportHfConfig(run.at("hf_config_json"), c.at("hf_config").get<std::string>(), nullptr);
    EXPECT_EQ(model::ParameterCount(spec), run.at("n_params").get<int64_t>()) << c.at("hf_config");
    model::Plan plan = PlanOf(c);
    double per_param = run.at("after_init_allocated").get<double>() /
                       (run.at("n_params").get<double>() / c.at("world").get<int>());
    if (per_param < 3) {
      plan.master_dtype = model::DType::kBf16;
      ++bf16_master;
    }
    ExpectPeaksWithinTolerance(run, spec, plan);
    ++compared;
  }
  EXPECT_EQ(compared, 10);
  EXPECT_GE(bf16_master, 1);
}

// Prints, per run, the measured max_memory_reserved and the error of the per-pool-peak estimate
// the replay replaced (MemoryLedger::pool_peaks, one figure for both steps) and of the replay.
TEST(Fsdp2MeasuredTest, MaxReservedWithinTolerance) {
  std::vector<nlohmann::json> runs;
  nlohmann::json doc = LoadRuns();
  for (const auto& r : doc.at("runs")) runs.push_back(r);
  for (const auto& r : LoadJsonLines("fsdp2_h100_peft_offload.jsonl")) runs.push_back(r);
  std::printf("%-52s %8s %8s | %7s %7s | %7s %7s\n", "run", "meas0", "measS", "old0", "oldS",
              "new0", "newS");
  double worst = 0;
  int compared = 0;
  std::vector<double> errors;
  for (const auto& r : runs) {
    if (r.contains("error") || !r.contains("config")) continue;
    const auto& c = r.at("config");
    model::ModelSpec spec = model::FindModelPreset(c.at("model").get<std::string>());
    auto cluster = profiles::ParseClusterShorthand(std::to_string(c.at("world").get<int>()) + "xH100");
    model::Plan plan = PlanOf(c);
    MemoryEstimate est = EstimateMemoryWithProgram(spec, cluster, plan, {}, false);
    int64_t old_reserved = 0;
    MemoryLedger ledger(est.program);
    for (int64_t p : ledger.pool_peaks()) old_reserved += p;
    auto [m0, ms] = MeasuredReserved(r);
    double gib = 1024.0 * 1024 * 1024;
    double o0 = static_cast<double>(old_reserved) / m0 - 1, os = static_cast<double>(old_reserved) / ms - 1;
    double n0 = static_cast<double>(est.report.reserved_step0.count()) / m0 - 1;
    double ns = static_cast<double>(est.report.reserved_steady.count()) / ms - 1;
    std::string id = c.at("model").get<std::string>() + " w" + std::to_string(c.at("world").get<int>()) +
                     " mb" + std::to_string(c.at("mb").get<int>()) + " " + c.at("ckpt").get<std::string>() +
                     (c.at("reshard").get<int>() ? "" : " noreshard") + " " + c.at("optim").get<std::string>() +
                     (c.at("accum").get<int>() > 1 ? " accum" + std::to_string(c.at("accum").get<int>()) : "") +
                     (c.value("lora_rank", 0) > 0 ? " lora" + std::to_string(c.at("lora_rank").get<int>()) : "") +
                     (c.value("freeze_layers", -1) >= 0 ? " freeze" + std::to_string(c.at("freeze_layers").get<int>()) : "") +
                     (c.value("base_dtype", "fp32") == "bf16" ? " base-bf16" : "") +
                     (c.value("offload", 0) ? " offload" : "") + " " + c.value("tag", "");
    std::printf("%-52s %8.2f %8.2f | %+6.1f%% %+6.1f%% | %+6.1f%% %+6.1f%%\n", id.c_str(), m0 / gib,
                ms / gib, 100 * o0, 100 * os, 100 * n0, 100 * ns);
    if (c.value("tag", "") == "expandable") continue;  // a different allocator mode
    EXPECT_NEAR(n0, 0.0, kReservedTolerance) << id;
    EXPECT_NEAR(ns, 0.0, kReservedTolerance) << id;
    worst = std::max({worst, std::abs(n0), std::abs(ns)});
    errors.push_back(std::abs(n0));
    errors.push_back(std::abs(ns));
    ++compared;
  }
  std::sort(errors.begin(), errors.end());
  double median = errors.empty() ? 0 : errors[errors.size() / 2];
  std::printf("replay error: worst %.1f%%, median %.1f%% over %d runs\n", 100 * worst, 100 * median,
              compared);
  EXPECT_LE(median, kReservedMedianTolerance);
  EXPECT_GE(compared, 20);
}

}  // namespace
}  // namespace shardtune::sim
