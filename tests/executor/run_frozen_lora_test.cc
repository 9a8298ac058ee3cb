// Frozen parameters and LoRA adapters in `shardtune run` (issue #9), with real processes (Gloo on
// 127.0.0.1): 1 and 2 ranks give the same loss curve at the same global batch; frozen weights
// leave training bit-identical to their initialization while trainable ones (and adapters)
// change; only trainable flat parameters have AdamW state in the checkpoint and reduce-scatters
// in measurements.json; the full state dict carries the adapters under PEFT's module names.
// Tolerances as run_equivalence_test.cc: step 1 to fp32 summation order, later steps 2e-4.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "executor/train/checkpoint.h"
#include "executor/nn/transformer.h"
#include "model/module_tree.h"
#include "model/presets.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

using nlohmann::json;

constexpr int kSteps = 4, kSeed = 5, kLoraRank = 4;

struct Case {
  std::string name;
  std::string model;                // file in tests/executor/data
  std::vector<std::string> freeze;  // --freeze prefixes
  std::vector<std::string> lora_targets;  // non-empty: --lora-rank kLoraRank
  std::vector<std::string> flags;         // more flags for both runs
  std::string precision = "fp32";         // --precision (param dtype; adapters stay fp32)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

bool StartsWith(const std::string& s, const std::string& head) { return s.rfind(head, 0) == 0; }
bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> Args(const Case& c, const std::string& out, int steps) {
  std::vector<std::string> a = {
      "run", "--model", DataPath(c.model), "--steps", std::to_string(steps), "--out", out,
      "--seq-len", "32", "--global-batch", "4", "--threads", "1", "--max-grad-norm", "1.0",
      "--precision", c.precision, "--seed", std::to_string(kSeed), "--lr", "3e-3"};
  for (const std::string& p : c.freeze) a.insert(a.end(), {"--freeze", p});
  if (!c.lora_targets.empty()) {
    std::string t;
    for (const std::string& x : c.lora_targets) t += (t.empty() ? "" : ",") + x;
    a.insert(a.end(), {"--lora-rank", std::to_string(kLoraRank), "--lora-targets", t});
  }
  a.insert(a.end(), c.flags.begin(), c.flags.end());
  return a;
}

bool Frozen(const Case& c, const std::string& name) {
  if (!c.lora_targets.empty()) return name.find(".lora_") == std::string::npos;  // base weights
  return std::any_of(c.freeze.begin(), c.freeze.end(),
                     [&](const std::string& p) { return StartsWith(name, p); });
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// safetensors: 8-byte little-endian header length, JSON header, data; every tensor F32.
std::map<std::string, at::Tensor> ReadSafeTensors(const std::string& path) {
  std::string bytes = ReadText(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes.at(static_cast<size_t>(i)));
  json header = json::parse(bytes.substr(8, n));
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(t.at("dtype"), "F32") << name;
    std::vector<int64_t> shape = t.at("shape");
    int64_t begin = t.at("data_offsets")[0];
    at::Tensor x = at::empty(shape, at::kFloat);
    std::memcpy(x.data_ptr(), bytes.data() + 8 + n + begin, static_cast<size_t>(x.nbytes()));
    out[name] = x;
  }
  return out;
}

// True when `name` is the weight of a LoRA target projection ("...<target>.weight").
bool IsTarget(const Case& c, const model::ParamTensor& p) {
  for (const std::string& t : c.lora_targets) {
    if (p.inner > 1 && (p.name == t + ".weight" || EndsWith(p.name, "." + t + ".weight"))) return true;
  }
  return false;
}

// The reduce-scatter bytes of one step on 2 ranks: per trainable flat parameter its padded size
// (ceil(numel / 2) x 2 elements) x 4 bytes (fp32 reduce), summed over the block-wrapped units.
// LoRA adds A [r, in] and B [out, r] per target weight (Linear [out, in], GPT-2 Conv1D [in, out]).
int64_t ReduceScatterBytesPerStep(const Case& c, const model::ModelSpec& spec) {
  bool conv1d = spec.positions == model::PositionKind::kLearned;
  int64_t total = 0;
  for (const model::FsdpUnit& u : model::BuildFsdpUnits(spec, model::WrapPolicy{})) {
    int64_t trainable = 0;
    for (const model::ParamTensor& p : u.params) {
      if (!Frozen(c, p.name)) trainable += p.numel();
      if (IsTarget(c, p)) {
        int64_t in = conv1d ? p.dim0 : p.inner, out = conv1d ? p.inner : p.dim0;
        trainable += kLoraRank * in + out * kLoraRank;
      }
    }
    total += (trainable + 1) / 2 * 2 * 4;
  }
  return total;
}

bool FrozenBf16(const Case& c) {
  for (size_t i = 0; i + 1 < c.flags.size(); ++i) {
    if (c.flags[i] == "--frozen-dtype" && c.flags[i + 1] == "bf16") return true;
  }
  return false;
}

class ExecutorFrozenLoraTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExecutorFrozenLoraTest, TwoRanksMatchOneRankAndOnlyTrainableParametersChange) {
  const Case& c = GetParam();
  TempDir tmp;
  std::vector<std::string> one = Args(c, tmp.Sub("one"), kSteps), two = Args(c, tmp.Sub("two"), kSteps);
  one.push_back("--export-full-state-dict");
  two.insert(two.end(), {"--export-full-state-dict", "--nproc", "2"});
  ProcessResult r1 = RunShardtune(one);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  ProcessResult r2 = RunShardtune(two);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;

  std::map<int64_t, double> l1 = Losses(tmp.Sub("one")), l2 = Losses(tmp.Sub("two"));
  ASSERT_EQ(l1.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(l2.size(), static_cast<size_t>(kSteps));
  double max_diff = 0;
  for (const auto& [step, loss] : l1) max_diff = std::max(max_diff, std::fabs(loss - l2.at(step)));
  std::cout << "[ " << c.name << " ] 1 vs 2 ranks: loss max diff " << max_diff << ", losses "
            << l1.at(1) << " -> " << l1.at(kSteps) << "\n";
  // bf16 params: 1e-3, bf16 rounding of differently ordered sums (run_equivalence_test.cc).
  bool fp32 = c.precision == "fp32";
  EXPECT_LT(std::fabs(l1.at(1) - l2.at(1)), fp32 ? 1e-6 : 1e-3);
  EXPECT_LT(max_diff, fp32 ? 2e-4 : 1e-3);
  // The trainable parameters learn: every later step's loss differs from step 1's (with LoRA,
  // B = 0 makes step 1 the base model's loss; the adapters move it from step 2 on).
  for (int s = 2; s <= kSteps; ++s) EXPECT_GT(std::fabs(l1.at(s) - l1.at(1)), 1e-5) << "step " << s;

  // Frozen weights are bit-identical to their initialization (a pure function of seed and
  // name); every trainable tensor moved.
  model::ModelSpec spec = model::ResolveModelArg(DataPath(c.model), nullptr);
  spec.FillDefaults();
  std::map<std::string, at::Tensor> a = ReadSafeTensors(tmp.Sub("one") + "/model.safetensors");
  std::map<std::string, at::Tensor> b = ReadSafeTensors(tmp.Sub("two") + "/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  int frozen = 0, trainable = 0, adapters = 0;
  for (const auto& [name, t] : a) {
    SCOPED_TRACE(name);
    at::Tensor init = at::zeros(t.sizes(), at::kFloat);
    // The runtime's adapter names carry PEFT's adapter name "default"; the export drops it.
    std::string internal = name;
    for (const char* k : {".lora_A.", ".lora_B."}) {
      size_t at = internal.find(k);
      if (at != std::string::npos) internal.insert(at + 8, "default.");
    }
    Transformer::InitParameter(internal, kSeed, init);
    // --frozen-dtype bf16: the frozen shards hold the initialization rounded to bf16, as a base
    // model loaded with torch_dtype=torch.bfloat16 does.
    if (Frozen(c, name) && FrozenBf16(c)) init = init.to(at::kBFloat16).to(at::kFloat);
    if (Frozen(c, name)) {
      ++frozen;
      EXPECT_TRUE(at::equal(t, init));
      EXPECT_TRUE(at::equal(b.at(name), init));
    } else {
      ++trainable;
      EXPECT_FALSE(at::equal(t, init));
      EXPECT_LT((t - b.at(name)).abs().max().item<double>(), fp32 ? 1e-4 : 1e-2);
    }
    if (EndsWith(name, ".lora_A.weight")) {
      ++adapters;
      EXPECT_EQ(t.size(0), kLoraRank);
      std::string base = name.substr(0, name.size() - 14) + ".weight";  // "...q_proj.weight"
      ASSERT_TRUE(a.count(base));
      ASSERT_TRUE(a.count(name.substr(0, name.size() - 14) + ".lora_B.weight"));
      at::Tensor B = a.at(name.substr(0, name.size() - 14) + ".lora_B.weight");
      EXPECT_EQ(B.size(1), kLoraRank);
      bool conv1d = spec.positions == model::PositionKind::kLearned;
      EXPECT_EQ(t.size(1), a.at(base).size(conv1d ? 0 : 1));  // in
      EXPECT_EQ(B.size(0), a.at(base).size(conv1d ? 1 : 0));  // out
    }
  }
  EXPECT_GT(frozen, 0);
  EXPECT_GT(trainable, 0);
  // One adapter per target projection of the module tree.
  int targets = 0;
  for (const model::FsdpUnit& u : model::BuildFsdpUnits(spec, model::WrapPolicy{})) {
    for (const model::ParamTensor& p : u.params) targets += IsTarget(c, p) ? 1 : 0;
  }
  EXPECT_EQ(adapters, targets);
  EXPECT_EQ(targets > 0, !c.lora_targets.empty());

  // AdamW state only for trainable flat parameters (rank 0's shard file of the last step).
  std::string file = tmp.Sub("two") + "/checkpoints/" + CheckpointDirName(kSteps) + "/rank00000.bin";
  std::map<std::string, std::string> blobs;
  for (Blob& bl : DecodeBlobs(ReadText(file), file)) blobs[bl.name] = bl.bytes;
  json meta = json::parse(blobs.at("meta"));
  int with_state = 0;
  for (size_t i = 0; i < meta.at("units").size(); ++i) {
    const json& u = meta["units"][i];
    bool frozen_unit = EndsWith(u.at("name").get<std::string>(), " [frozen]");
    SCOPED_TRACE(u.dump());
    EXPECT_EQ(u.at("trainable").get<bool>(), !frozen_unit);
    ASSERT_TRUE(blobs.count("param/" + std::to_string(i)));
    // A frozen shard is stored in frozen_dtype (2 bytes per element for bf16), a trainable one
    // as its fp32 master.
    size_t element_bytes = frozen_unit && FrozenBf16(c) ? 2 : 4;
    EXPECT_EQ(blobs.at("param/" + std::to_string(i)).size(),
              element_bytes * u.at("shard_numel").get<size_t>());
    EXPECT_EQ(blobs.count("exp_avg/" + std::to_string(i)), frozen_unit ? 0u : 1u);
    EXPECT_EQ(blobs.count("exp_avg_sq/" + std::to_string(i)), frozen_unit ? 0u : 1u);
    with_state += frozen_unit ? 0 : 1;
  }
  EXPECT_GT(with_state, 0);

  // Reduce-scatters move the trainable flat parameters only; measurements.json counts every
  // rank's calls (2 ranks x kSteps steps x one per trainable flat parameter).
  json m = ReadJson(tmp.Sub("two") + "/measurements.json");
  int64_t rs_bytes = 0;
  for (const json& e : m.at("collectives")) {
    if (e.at("kind") == "reduce_scatter") rs_bytes += e.at("bytes").get<int64_t>() * e.at("count").get<int64_t>();
  }
  EXPECT_EQ(rs_bytes, 2 * kSteps * ReduceScatterBytesPerStep(c, spec));
}

INSTANTIATE_TEST_SUITE_P(
    Runs, ExecutorFrozenLoraTest,
    ::testing::Values(
        Case{"frozen_embeddings_and_layer0", "micro-llama.model.json",
             {"model.embed_tokens", "model.layers.0."}, {}, {}},
        Case{"frozen_layer1_and_head_recompute", "micro-llama.model.json",
             {"model.layers.1.", "lm_head"}, {}, {"--checkpointing", "full"}}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// The rest of the matrix carries the ctest label `extended` (tests/executor/CMakeLists.txt): it runs
// in .ci/run after the README's test command, which keeps the cases above (issue #48).
INSTANTIATE_TEST_SUITE_P(
    RunsMatrix, ExecutorFrozenLoraTest,
    ::testing::Values(
        Case{"frozen_first_layers_shard_grad_op", "micro-llama.model.json",
             {"model.embed_tokens", "model.layers.0."}, {}, {"--checkpointing", "full",
             "--strategy", "shard_grad_op"}},
        Case{"lora_q_v", "micro-llama.model.json", {}, {"q_proj", "v_proj"}, {}},
        Case{"lora_q_v_recompute", "micro-llama.model.json", {}, {"q_proj", "v_proj"},
             {"--checkpointing", "full"}},
        Case{"lora_gpt2_c_attn", "micro-gpt2.model.json", {}, {"c_attn"}, {}},
        Case{"lora_mlp_and_head_bf16_base", "micro-llama.model.json", {},
             {"o_proj", "down_proj", "lm_head"}, {}, "bf16"},
        Case{"lora_q_v_frozen_dtype_bf16", "micro-llama.model.json", {}, {"q_proj", "v_proj"},
             {"--frozen-dtype", "bf16"}},
        Case{"frozen_layer0_frozen_dtype_bf16_offload", "micro-llama.model.json",
             {"model.embed_tokens", "model.layers.0."}, {}, {"--frozen-dtype", "bf16",
             "--offload", "all"}}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// A LoRA run resumed from its checkpoint (adapters, their AdamW state, frozen base shards)
// continues with the uninterrupted run's losses (constant LR: both commands share the schedule).
TEST(ExecutorLoraResumeTest, ResumedLoraRunReproducesTheUninterruptedLosses) {
  TempDir tmp;
  Case c{"lora", "micro-llama.model.json", {}, {"q_proj", "v_proj"}, {}};
  auto args = [&](const std::string& out, int steps) {
    std::vector<std::string> a = Args(c, out, steps);
    a.insert(a.end(), {"--nproc", "2", "--checkpoint-every", "2", "--lr-schedule", "constant",
                       "--warmup-steps", "0"});
    return a;
  };
  ExpectResumeReproducesLosses(args, tmp.Sub("lora"));
}

// A checkpoint whose frozen shards are fp32 is not resumed by a run that keeps them in bf16: the
// refusal names the unit and both dtypes, and the checkpoint stays resumable by its own plan.
TEST(ExecutorLoraResumeTest, ResumeWithAnotherFrozenDtypeIsRefused) {
  TempDir tmp;
  Case c{"lora", "micro-llama.model.json", {}, {"q_proj", "v_proj"}, {}};
  std::vector<std::string> first = Args(c, tmp.Sub("out"), 1);
  first.insert(first.end(), {"--checkpoint-every", "1"});
  ProcessResult r1 = RunShardtune(first);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  std::vector<std::string> again = Args(c, tmp.Sub("out"), 2);
  again.insert(again.end(), {"--checkpoint-every", "1", "--frozen-dtype", "bf16"});
  ProcessResult r2 = RunShardtune(again);
  EXPECT_EQ(r2.exit_code, 1) << r2.output;
  EXPECT_NE(r2.output.find("[frozen]) holds Float shards, this run's are BFloat16 (frozen_dtype)"),
            std::string::npos)
      << r2.output;
  std::vector<std::string> same = Args(c, tmp.Sub("out"), 2);
  same.insert(same.end(), {"--checkpoint-every", "1"});
  ProcessResult r3 = RunShardtune(same);
  EXPECT_EQ(r3.exit_code, 0) << r3.output;
  EXPECT_NE(r3.output.find("resumed from checkpoint"), std::string::npos) << r3.output;
}

// Bad input: one "error: ..." line naming the flag, exit 1, before any rank starts.
void ExpectFlagsInputError(const std::vector<std::string>& extra, const std::string& want) {
  TempDir tmp;
  std::vector<std::string> args = {"run", "--model", DataPath("micro-llama.model.json"),
                                   "--steps", "1", "--out", tmp.Sub("out"), "--seq-len", "16"};
  args.insert(args.end(), extra.begin(), extra.end());
  ExpectInputError(args, want);
}

TEST(ExecutorFrozenLoraInputTest, UnknownPrefixTargetOrNothingTrainableIsAnInputError) {
  ExpectFlagsInputError({"--freeze", "model.layer.0."},
                        "plan:/frozen_prefixes/0: expected a prefix of a parameter name of micro-llama "
                        "(e.g. model.embed_tokens, model.layers.0., lm_head), got \"model.layer.0.\" "
                        "(flag --freeze)");
  ExpectFlagsInputError({"--lora-rank", "4", "--lora-targets", "q_proj,c_attn"},
                        "plan:/lora/targets/1: expected a projection of micro-llama (one of q_proj "
                        "k_proj v_proj o_proj gate_proj up_proj down_proj lm_head), got \"c_attn\" "
                        "(flag --lora-targets)");
  ExpectFlagsInputError({"--freeze", "model.", "--freeze", "lm_head"},
                        "plan:/frozen_prefixes: expected at least one trainable parameter");
}

}  // namespace
}  // namespace shardtune::exec::testing
