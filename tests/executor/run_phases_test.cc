// Issue #11 on the executor: per-phase memory in measurements.json with peaks derived from
// formulas (lazy AdamW state, the resume's staging, the save's in-place reads), the watchdog
// naming a stalled rank's phase, and issue #5's consolidated full state dict (safetensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/module_tree.h"
#include "model/presets.h"
#include "tests/executor/test_util.h"

namespace shardtune::exec::testing {
namespace {

using Json = nlohmann::json;

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// phase name -> rank `rank`'s figures.
std::map<std::string, Json> Phases(const Json& m, int rank = 0) {
  std::map<std::string, Json> out;
  for (const Json& p : m.at("phases")) out[p.at("name")] = p.at("per_rank").at(rank);
  return out;
}

int64_t Peak(const Json& p) { return p.at("tracked_peak_bytes").get<int64_t>(); }
int64_t Start(const Json& p) { return p.at("tracked_start_bytes").get<int64_t>(); }

// Activations (micro-batch 32 x 64 tokens, fp32 logits) dwarf the micro model's AdamW state, so
// every step's peak is in forward/backward, where the state is either absent (step 0) or not.
std::vector<std::string> MicroRun(const std::string& out, int steps) {
  return {"run", "--model", DataPath("micro-llama.model.json"), "--steps", std::to_string(steps),
          "--out", out, "--seq-len", "64", "--micro-batch", "32", "--threads", "1",
          "--precision", "fp32"};
}

TEST(ExecutorPhasesTest, LazyAdamWStateAppearsAtStepZeroAndResumeReadsIntoItInPlace) {
  TempDir tmp;
  std::string out = tmp.Sub("out");
  ProcessResult r = RunShardtune(MicroRun(out, 3));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Json m = ReadJson(out + "/measurements.json");
  int64_t shard_numel = 0, max_shard = 0;
  for (const Json& u : m.at("units")) {
    shard_numel += u.at("shard_numel").get<int64_t>();
    max_shard = std::max(max_shard, u.at("shard_numel").get<int64_t>());
  }
  const int64_t master = 4 * shard_numel;   // fp32 master shards
  const int64_t state = 2 * 4 * shard_numel;  // exp_avg + exp_avg_sq, fp32
  auto ph = Phases(m);
  ASSERT_EQ(ph.count("model load") + ph.count("step 0") + ph.count("steady step") +
                ph.count("checkpoint save"), 4u);
  EXPECT_EQ(ph.count("resume"), 0u);  // a fresh run loads nothing
  EXPECT_EQ(ph["steady step"].at("count"), 2);
  // Start-up: the tracker counts from the start, the load ends with the master shards only.
  EXPECT_EQ(Start(ph["model load"]), 0);
  EXPECT_EQ(Start(ph["step 0"]), master);  // no optimizer state before the first step()
  EXPECT_EQ(Start(ph["steady step"]), master + state);
  EXPECT_EQ(Peak(ph["steady step"]) - Peak(ph["step 0"]), state);
  // Sharded save: each shard is read in place; the only tensor is the RNG state (CPU
  // generator, a few KiB), no staging copy of the parameters or the state.
  EXPECT_EQ(Start(ph["checkpoint save"]), master + state);
  EXPECT_GT(Peak(ph["checkpoint save"]), Start(ph["checkpoint save"]));
  EXPECT_LT(Peak(ph["checkpoint save"]) - Start(ph["checkpoint save"]), 64 * 1024);
  EXPECT_LT(64 * 1024, state / 8);  // so the bound above would catch a staging copy
  for (const char* k : {"model load", "step 0", "steady step", "checkpoint save"}) {
    EXPECT_GT(ph[k].at("rss_peak_bytes").get<int64_t>(), 0) << k;
    EXPECT_GE(ph[k].at("duration_s").get<double>(), 0) << k;
  }
  EXPECT_EQ(m.at("memory").at("peak_tracked_bytes").get<int64_t>(), Peak(ph["steady step"]));

  // Resume in a fresh process: the state is created empty, then each blob is read straight into
  // its tensor (executor/train/checkpoint.h BlobFile::ReadInto): beyond the state only scalars (the
  // chosen step, the ranks' checksum verdicts) and the RNG state's bytes, no staging shard.
  ProcessResult r2 = RunShardtune(MicroRun(out, 4));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  auto re = Phases(ReadJson(out + "/measurements.json"));
  ASSERT_EQ(re.count("resume"), 1u);
  EXPECT_EQ(Start(re["resume"]), master);
  int64_t extra = Peak(re["resume"]) - Start(re["resume"]);
  EXPECT_GE(extra, state);
  EXPECT_LE(extra, state + 16 * 1024);
  EXPECT_LT(16 * 1024, 4 * max_shard);  // so the bound above would catch a staging shard
  // Its first step already holds the state: the peak of a steady step.
  EXPECT_EQ(Start(re["step 0"]), master + state);
  EXPECT_EQ(Peak(re["step 0"]), Peak(ph["steady step"]));
}

TEST(ExecutorPhasesTest, TwoRanksReportEveryRanksPhasesWithTheirShardsState) {
  TempDir tmp;
  std::string out = tmp.Sub("out");
  auto args = MicroRun(out, 2);
  args.insert(args.end(), {"--nproc", "2", "--global-batch", "64"});
  ProcessResult r = RunShardtune(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Json m = ReadJson(out + "/measurements.json");
  int64_t shard_numel = 0;
  for (const Json& u : m.at("units")) shard_numel += u.at("shard_numel").get<int64_t>();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    auto ph = Phases(m, rank);
    EXPECT_EQ(ph["step 0"].at("rank"), rank);
    // Each rank creates the state of its own shards only. The peaks themselves move by a
    // few hundred KiB between steps here: when an in-flight reduce-scatter's buffers are freed
    // depends on Gloo's timing, so only the start of each phase is exact (+ a scalar or two).
    int64_t grown = Start(ph["steady step"]) - Start(ph["step 0"]);
    EXPECT_GE(grown, 8 * shard_numel - 64);
    EXPECT_LE(grown, 8 * shard_numel + 64);
    EXPECT_EQ(ph["model load"].at("tracked_start_bytes"), 0);
  }
  for (const Json& p : m.at("phases")) {
    int64_t worst = 0;
    for (const Json& k : p.at("per_rank")) worst = std::max(worst, Peak(k));
    EXPECT_EQ(p.at("peak_tracked_bytes").get<int64_t>(), worst) << p.at("name");
  }
}

// The watchdog: a rank stalled by the test-only hook is named with its phase, exit code 3,
// long before the collective timeout (60 s by default).
TEST(ExecutorWatchdogTest, StalledSingleRankNamesItsPhaseAndExitsWithThree) {
  TempDir tmp;
  auto args = MicroRun(tmp.Sub("out"), 2);
  args.insert(args.end(), {"--watchdog-timeout", "1"});
  ProcessResult r = RunShardtune(args, 60, {{"SHARDTUNE_TEST_STALL", "0:120:step 0"}});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
  EXPECT_NE(r.output.find("error: watchdog: rank 0 made no progress for "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("in phase \"step 0\""), std::string::npos) << r.output;
}

TEST(ExecutorWatchdogTest, StalledPeerStopsBothRanksWithinTheBound) {
  TempDir tmp;
  auto args = MicroRun(tmp.Sub("out"), 3);
  // 5 s, not 2: the test failed now and then with 2 s on a 2-core machine under load ~9, where a
  // rank's start-up (exec, LibTorch load, Gloo rendezvous) can itself approach that bound.
  args.insert(args.end(), {"--nproc", "2", "--global-batch", "64", "--watchdog-timeout", "5"});
  ProcessResult r = RunShardtune(args, 90, {{"SHARDTUNE_TEST_STALL", "1:120:steady step"}});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_LT(r.seconds, 40) << r.output;  // the collective timeout is 60 s
  EXPECT_NE(r.output.find("watchdog: rank "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in phase \"steady step\""), std::string::npos) << r.output;
}

TEST(ExecutorWatchdogTest, NegativeBoundIsAnInputError) {
  TempDir tmp;
  auto args = MicroRun(tmp.Sub("out"), 1);
  args.insert(args.end(), {"--watchdog-timeout", "-1"});
  ProcessResult r = RunShardtune(args, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("error: --watchdog-timeout: expected seconds >= 0"), std::string::npos)
      << r.output;
}

// safetensors: 8-byte little-endian header length, JSON header, data.
struct SafeTensors {
  Json header;
  std::string data;
};
SafeTensors ReadSafeTensors(const std::string& bytes) {
  SafeTensors s;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes.at(static_cast<size_t>(i)));
  EXPECT_EQ(n % 8, 0u);
  s.header = Json::parse(bytes.substr(8, n));
  s.data = bytes.substr(8 + n);
  return s;
}

void CollectParams(const model::ModuleNode& node, std::map<std::string, model::ParamTensor>* out) {
  for (const auto& p : node.params) (*out)[p.name] = p;
  for (const auto& c : node.children) CollectParams(c, out);
}

TEST(ExecutorExportTest, FullStateDictOfOneAndTwoRanksIsByteIdenticalWithModuleTreeNames) {
  TempDir tmp;
  // lr 1e-30: the update underflows next to the weights, so both runs export the initialization
  // (the same bytes) after a real step, and any gather, unpadding or naming error shows.
  auto base = [&](const std::string& out) {
    return std::vector<std::string>{
        "run", "--model", DataPath("micro-llama.model.json"), "--steps", "1", "--out", out,
        "--seq-len", "16", "--threads", "1", "--global-batch", "2", "--lr", "1e-30",
        "--lr-schedule", "constant", "--warmup-steps", "0", "--export-full-state-dict"};
  };
  ProcessResult one = RunShardtune(base(tmp.Sub("one")));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two_args = base(tmp.Sub("two"));
  two_args.insert(two_args.end(), {"--nproc", "2"});
  ProcessResult two = RunShardtune(two_args);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(one.output.find("wrote " + tmp.Sub("one") + "/model.safetensors"), std::string::npos);
  std::string a = ReadText(tmp.Sub("one") + "/model.safetensors");
  std::string b = ReadText(tmp.Sub("two") + "/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "sizes " << a.size() << " and " << b.size();

  SafeTensors st = ReadSafeTensors(a);
  std::map<std::string, model::ParamTensor> params;
  CollectParams(model::BuildModuleTree(model::ResolveModelArg(DataPath("micro-llama.model.json"), nullptr)),
                &params);
  EXPECT_EQ(st.header.size(), params.size() + 1);  // + "__metadata__"
  int64_t total = 0, end = 0;
  for (const auto& [name, p] : params) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st.header.contains(name));
    const Json& t = st.header[name];
    EXPECT_EQ(t.at("dtype"), "F32");
    std::vector<int64_t> shape = t.at("shape");
    ASSERT_FALSE(shape.empty());
    EXPECT_EQ(shape[0], p.dim0);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    EXPECT_EQ(numel, p.numel());
    auto off = t.at("data_offsets").get<std::vector<int64_t>>();
    EXPECT_EQ(off[1] - off[0], 4 * p.numel());
    end = std::max(end, off[1]);
    total += p.numel();
    // Initialized weights are not all zeros (norm weights are ones).
    bool nonzero = false;
    for (int64_t i = off[0]; i < off[1] && !nonzero; ++i) nonzero = st.data[static_cast<size_t>(i)] != 0;
    EXPECT_TRUE(nonzero);
  }
  EXPECT_EQ(end, 4 * total);
  EXPECT_EQ(static_cast<int64_t>(st.data.size()), 4 * total);
  EXPECT_EQ(st.header.at("__metadata__").at("format"), "pt");
}

// Exports `model_json` (test data) under transformers' class `architecture` twice, at lr 1e-30 so
// one step leaves the initial values: by one rank with `flags`, and by two ranks with those flags,
// ep 2 and torchtitan's code. Returns {one rank's safetensors, ep's}.
std::pair<SafeTensors, SafeTensors> ExportOneRankAndEp2(const TempDir& tmp, const std::string& model_json,
                                                        const std::string& architecture,
                                                        const std::vector<std::string>& flags) {
  Json model = Json::parse(ReadText(DataPath(model_json)));
  model["hf_architecture"] = architecture;
  const std::string file = tmp.Sub(architecture + ".model.json");
  std::ofstream(file) << model.dump();
  auto base = [&](const std::string& out) {
    std::vector<std::string> a{
        "run", "--model", file, "--steps", "1", "--out", out, "--seq-len", "16", "--threads", "1",
        "--global-batch", "2", "--lr", "1e-30", "--lr-schedule", "constant", "--warmup-steps", "0",
        "--export-full-state-dict"};
    a.insert(a.end(), flags.begin(), flags.end());
    return a;
  };
  ProcessResult one = RunShardtune(base(tmp.Sub("one")));
  EXPECT_EQ(one.exit_code, 0) << one.output;
  auto ep_args = base(tmp.Sub("ep"));
  ep_args.insert(ep_args.end(), {"--nproc", "2", "--ep", "2"});
  if (std::find(flags.begin(), flags.end(), "--modeling") == flags.end()) {
    ep_args.insert(ep_args.end(), {"--modeling", "torchtitan"});
  }
  ProcessResult ep = RunShardtune(ep_args);
  EXPECT_EQ(ep.exit_code, 0) << ep.output;
  return {ReadSafeTensors(ReadText(tmp.Sub("one") + "/model.safetensors")),
          ReadSafeTensors(ReadText(tmp.Sub("ep") + "/model.safetensors"))};
}

// Each tensor of `a` (its header's entries but __metadata__), traced by name: `b` must hold it with
// the same shape and byte size; `check` then compares its bytes in each file's data.
void ForEachTensorInBoth(
    const SafeTensors& a, const SafeTensors& b,
    const std::function<void(std::string_view a_bytes, std::string_view b_bytes)>& check) {
  for (const auto& [name, t] : a.header.items()) {
    SCOPED_TRACE(name);
    if (name == "__metadata__") continue;
    ASSERT_TRUE(b.header.contains(name));
    EXPECT_EQ(t.at("shape"), b.header[name].at("shape"));
    auto oa = t.at("data_offsets").get<std::vector<int64_t>>();
    auto ob = b.header[name].at("data_offsets").get<std::vector<int64_t>>();
    ASSERT_EQ(oa[1] - oa[0], ob[1] - ob[0]);
    const size_t n = static_cast<size_t>(oa[1] - oa[0]);
    check(std::string_view(a.data).substr(static_cast<size_t>(oa[0]), n),
          std::string_view(b.data).substr(static_cast<size_t>(ob[0]), n));
  }
}

// An MoE checkpoint under transformers' names (micro-qwen-moe as Qwen2-MoE's class names it:
// "mlp.gate", "mlp.experts.N.*", "mlp.shared_expert(_gate)"), written by one rank holding every
// expert and by two ranks with expert parallelism (torchtitan's code, ep 2: 3 of 6 experts each,
// in GroupedExperts' layout): the same tensors under the same names, value for value.
TEST(ExecutorExportTest, ExpertParallelExportWritesEachExpertUnderItsHfName) {
  TempDir tmp;
  auto [a, b] = ExportOneRankAndEp2(tmp, "micro-qwen-moe.model.json", "Qwen2MoeForCausalLM", {});
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(a.header.size(), b.header.size());
  for (const char* name : {"model.layers.0.mlp.gate.weight", "model.layers.1.mlp.experts.5.down_proj.weight",
                           "model.layers.0.mlp.experts.3.gate_proj.weight",
                           "model.layers.1.mlp.shared_expert_gate.weight"}) {
    EXPECT_TRUE(a.header.contains(name)) << name;
  }
  for (const auto& [name, t] : a.header.items()) {
    EXPECT_EQ(name.find("block_sparse_moe"), std::string::npos) << name;
  }
  ForEachTensorInBoth(a, b, [](std::string_view a_bytes, std::string_view b_bytes) {
    EXPECT_TRUE(a_bytes == b_bytes);
  });
}

// GPT-OSS's experts are [E, ...] tensors under transformers' names (mlp.experts.gate_up_proj
// [E, H, 2F], its bias [E, 2F], down_proj [E, F, H], its bias [E, H]): two ranks with ep 2 (2 of
// 4 experts each, torchtitan's code) write the same tensors as one rank holding all four. Both
// runs step once at lr 1e-30, so a zero-initialised bias may move by ~1e-30 (the sign of a
// gradient the two runs round differently): values are compared within 1e-20, which an expert
// written at another's place (values ~0.02) would break.
TEST(ExecutorExportTest, ExpertParallelExportWritesGptOssExpertsAsWholeTensors) {
  TempDir tmp;
  // The one-rank run under torchtitan's code too (its RMSNorm and router), eager sink attention.
  auto [a, b] = ExportOneRankAndEp2(tmp, "micro-gpt-oss.model.json", "GptOssForCausalLM",
                                    {"--modeling", "torchtitan", "--attention", "eager"});
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(a.header.size(), b.header.size());
  const std::string experts = "model.layers.1.mlp.experts.";
  ASSERT_TRUE(b.header.contains(experts + "gate_up_proj"));
  EXPECT_EQ(b.header[experts + "gate_up_proj"].at("shape"), Json::array({4, 64, 96}));
  EXPECT_EQ(b.header[experts + "gate_up_proj_bias"].at("shape"), Json::array({4, 96}));
  EXPECT_EQ(b.header[experts + "down_proj"].at("shape"), Json::array({4, 48, 64}));
  EXPECT_EQ(b.header[experts + "down_proj_bias"].at("shape"), Json::array({4, 64}));
  EXPECT_TRUE(b.header.contains("model.layers.0.mlp.router.bias"));
  ForEachTensorInBoth(a, b, [](std::string_view a_bytes, std::string_view b_bytes) {
    const size_t n = a_bytes.size() / sizeof(float);
    std::vector<float> va(n), vb(n);
    std::memcpy(va.data(), a_bytes.data(), n * sizeof(float));
    std::memcpy(vb.data(), b_bytes.data(), n * sizeof(float));
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(va[i]) - double(vb[i])));
    EXPECT_LT(worst, 1e-20);
  });
}

TEST(ExecutorExportTest, ExportWithAnEmulatedWorldIsAnInputError) {
  TempDir tmp;
  auto args = MicroRun(tmp.Sub("out"), 1);
  args.insert(args.end(), {"--emulate-world", "4", "--export-full-state-dict"});
  ProcessResult r = RunShardtune(args, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("--export-full-state-dict: an emulated world"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace shardtune::exec::testing
