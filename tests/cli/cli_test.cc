// The shardtune binary as users run it: the default estimate works with no files, --json prints
// one parseable document with the contract keys, and every bad input is a one-line error with
// exit code 1 naming the flag or file and key.
#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "model/packing.h"
#include "model/plan.h"

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "shardtune_cli_" + name;
}

Result RunCli(const std::string& args) {
  // One stderr file per call and process: ctest -j runs these tests concurrently.
  static int calls = 0;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string err_path = TempPath(std::string(info ? info->name() : "x") + "_" +
                                  std::to_string(::getpid()) + "_" + std::to_string(++calls) + ".err");
  std::string cmd = std::string(SHARDTUNE_BIN) + " " + args + " 2>" + err_path;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  std::remove(err_path.c_str());  // leave nothing behind in the temporary folder
  return r;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

void ExpectOneLineError(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("error: "));
  EXPECT_THAT(r.err, ::testing::HasSubstr(needle));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliTest, DefaultEstimateRunsWithNoFiles) {
  Result r = RunCli("estimate");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("peak allocated"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("breakdown at the peak"));
}

// --sdpa-backend: which measured attention rows time the step. On the shipped H100 profile,
// whose rows are torch 2.11's own choice (cuDNN), cudnn is auto; flash has no measured rows and
// takes the catalog's attention efficiency (lower than cuDNN's measured one), so it is slower.
// A bad value is one line naming the flag and the choices.
TEST(CliTest, SdpaBackendPicksTheMeasuredAttentionRows) {
  auto attention_s = [](const std::string& backend) {
    Result r = RunCli("simulate --model llama3-8b --cluster 8xH100 --seq-len 8192 --json" +
                      (backend.empty() ? std::string() : " --sdpa-backend " + backend));
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out).at("time_by_category_s").at("attention").get<double>();
  };
  double automatic = attention_s("");
  EXPECT_DOUBLE_EQ(attention_s("cudnn"), automatic);
  EXPECT_GT(attention_s("flash"), 1.2 * automatic);
  ExpectOneLineError(RunCli("simulate --model llama3-8b --cluster 8xH100 --sdpa-backend fa3"),
                     "--sdpa-backend");
}

// --ep: expert parallelism of an MoE model under torchtitan's code; every misuse is one line
// naming the key and the rule, and `run` (whose MoE holds every expert on every rank) refuses it.
// verl's activation offload: the plan line says it, the flags check it (block wrapping, GPU ranks).
TEST(CliTest, ActivationOffloadIsNamedAndChecked) {
  Result r = RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-len 4096 --activation-offload verl_async");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("+ activations to pinned host memory layer by layer (verl's enable_activation_offload)"),
            std::string::npos)
      << r.out;
  ExpectOneLineError(RunCli("estimate --model llama3-8b --cluster 8xH100 --activation-offload verl_async --wrap every:2"),
                     "activation_offload: expected none unless wrap is block");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster cpu:2 --activation-offload verl_async"),
                     "activation_offload: expected none on CPU ranks");
  ExpectOneLineError(RunCli("estimate --model llama3-8b --cluster 8xH100 --activation-offload verl"),
                     "--activation-offload: expected one of none, verl_async");
}

TEST(CliTest, ExpertParallelDegreeIsCheckedAndReported) {
  Result r = RunCli("estimate --model qwen3-30b-a3b --cluster 8xH100 --seq-len 4096 --modeling torchtitan "
                    "--ep 4 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("per_rank").at("expert_parallel_degree").get<int>(), 4);
  EXPECT_EQ(j.at("per_rank").at("expert_shard_group_size").get<int>(), 2);
  ExpectOneLineError(RunCli("estimate --model qwen3-30b-a3b --cluster 8xH100 --modeling torchtitan --ep 3"),
                     "expert_parallel_degree: expected a divisor of the FSDP shard group 8");
  // Under --modeling hf, ep is ROLL's ExpertParallel around transformers' experts; the plan line
  // says whose dispatch it estimated. GPT-OSS's expert biases are not in ROLL's experts forward.
  r = RunCli("estimate --model qwen3-30b-a3b --cluster 8xH100 --seq-len 4096 --ep 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("expert parallelism 2 (each rank holds 1/2 of every MoE layer's experts, "
                       "sharded over 4 ranks; tokens reach them by ROLL's all-to-all dispatch"),
            std::string::npos)
      << r.out;
  ExpectOneLineError(RunCli("estimate --model gpt-oss-20b --cluster 8xH100 --ep 2"),
                     "no expert biases");
  ExpectOneLineError(RunCli("simulate --model llama3-8b --cluster 8xH100 --modeling torchtitan --ep 2"),
                     "expected 1 for llama3-8b");
  ExpectOneLineError(RunCli("tune --model gpt-oss-20b --cluster 8xH100 --global-batch 8 --ep 2"),
                     "no expert biases");
  // run trains ep > 1 with torchtitan's code (run_equivalence_test.cc); what it refuses:
  ExpectOneLineError(RunCli("run --model tiny-llama --steps 1 --ep 2 --out " + TempPath("ep_run")),
                     "a dense model has no experts to split");
  ExpectOneLineError(RunCli("run --model qwen3-30b-a3b --steps 1 --ep 2 --out " + TempPath("ep_run")),
                     "expected --modeling torchtitan for shardtune run");
  ExpectOneLineError(RunCli("run --model qwen3-30b-a3b --modeling torchtitan --steps 1 --ep 2 --out " +
                            TempPath("ep_run")),
                     "--ep: expected a divisor of the shard group size 1");
  // tune searches ep and says per ep whether it fits and how fast its best plan is.
  r = RunCli("tune --model qwen3-30b-a3b --cluster 8xH100 --modeling torchtitan --global-batch 16 "
             "--seq-len 2048 --cp-sizes 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  std::vector<int> eps;
  for (const auto& v : j.at("cp_verdicts")) {
    eps.push_back(v.at("ep").get<int>());
    EXPECT_EQ(v.at("why").get<std::string>().rfind("ep=" + std::to_string(eps.back()) + ": ", 0), 0u);
  }
  EXPECT_EQ(eps, (std::vector<int>{1, 2, 4, 8}));
  r = RunCli("tune --model qwen3-30b-a3b --cluster 8xH100 --modeling torchtitan --global-batch 16 "
             "--seq-len 2048 --cp-sizes 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("Expert parallelism: which ep sizes fit\n  ep=1: "));
}

// run computes HF's MoE auxiliary loss (output_router_logits) with any checkpointing; with cp a
// rank's loss is its share of the group's, which HF's per-rank load_balancing_loss_func does not
// split: refused by name before a rank starts.
TEST(CliTest, RunRefusesTheAuxLossWithContextParallelism) {
  std::ifstream in(std::string(SHARDTUNE_TEST_DATA_DIR) + "/../executor/data/micro-qwen-moe.model.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["moe"]["router_aux_loss"] = true;
  std::string model = WriteFile("aux.model.json", j.dump());
  ExpectOneLineError(RunCli("run --model " + model + " --seq-len 16 --steps 1 --nproc 2 --cp 2 --out " +
                            TempPath("aux_run")),
                     "--cp 2: expected 1 with the MoE auxiliary loss");
}

TEST(CliTest, JsonHasContractKeys) {
  Result r = RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-len 4096 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("model").at("parameters").get<int64_t>(), 8'030'261'248LL);
  for (const char* k : {"model_state_bytes", "peak_bytes", "breakdown", "peak_phase"}) {
    EXPECT_TRUE(j.at("per_rank").contains(k)) << k;
  }
  EXPECT_TRUE(j.at("fits").is_boolean());
  EXPECT_TRUE(j.at("host").at("peak_bytes_per_node").is_number_integer());
  EXPECT_TRUE(j.at("host").at("fits").is_boolean());
  int64_t sum = 0;
  const nlohmann::json& breakdown = j.at("per_rank").at("breakdown");
  for (auto it = breakdown.begin(); it != breakdown.end(); ++it) sum += it->get<int64_t>();
  EXPECT_EQ(sum, j.at("per_rank").at("peak_bytes").get<int64_t>());
}

// Rotary models compute positions for any length: beyond max_position_embeddings (llama3-8b:
// 8,192) the plan is estimated with a warning; learned positions (GPT-2: 1,024) are a hard limit.
TEST(CliTest, RotaryModelsBeyondTheirTrainedContextWarnLearnedPositionsRefuse) {
  Result r = RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-len 65536 --cp 8 --checkpointing full");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("warning: --seq-len 65536 is beyond llama3-8b's max_seq_len"));
  ExpectOneLineError(RunCli("estimate --model gpt2 --cluster 8xH100 --seq-len 2048"), "seq_len");
}

// The 2026 architectures (issue #20) as a user meets them: presets listed and estimated, a
// published multimodal config estimated on its text backbone with one warning for the vision
// tower, an MXFP4 checkpoint estimated dequantized with a warning, and what is not modelled
// refused as a one-line error naming the file and the key; `run` refuses what its runtime does
// not compute before any rank starts.
TEST(CliTest, TwentyTwentySixArchitecturesEstimateWarnAndRefuseByName) {
  std::string models = RunCli("models").out;
  for (const char* p : {"qwen3-30b-a3b", "qwen3-235b-a22b", "phi-4", "olmo2-13b", "gemma2-9b",
                        "gemma3-27b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3",
                        "deepseek-v2-lite"}) {
    EXPECT_THAT(models, ::testing::HasSubstr(p));
  }
  const std::string data = std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/";
  // Gemma3ForConditionalGeneration reads with its SigLIP tower (tests/model/vision_test.cc); text
  // batches leave the tower idle, which the answer says.
  Result g3 = RunCli("estimate --model " + data + "gemma-3-27b.config.json --cluster 8xH100 "
                     "--seq-len 2048 --checkpointing full --json");
  EXPECT_EQ(g3.code, 0) << g3.err;
  nlohmann::json j = nlohmann::json::parse(g3.out);  // --json: warnings travel in the document
  EXPECT_EQ(j.at("model").at("parameters").get<int64_t>(), 27'432'406'640);
  EXPECT_THAT(j.at("warnings").dump(), ::testing::HasSubstr("the batches are text only"));
  Result oss = RunCli("estimate --model " + data + "gpt-oss-20b.config.json --cluster 8xH100");
  EXPECT_EQ(oss.code, 0) << oss.err;
  EXPECT_THAT(oss.err, ::testing::HasSubstr("quantization_config: the checkpoint's experts are quantized"));
  std::string phi = WriteFile("phi_dropout.json",
                              R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 256,
                                  "intermediate_size": 512, "num_hidden_layers": 2,
                                  "num_attention_heads": 4, "vocab_size": 512,
                                  "max_position_embeddings": 128, "resid_pdrop": 0.1})");
  ExpectOneLineError(RunCli("estimate --model " + phi + " --cluster 8xH100"), "/resid_pdrop: expected 0");
  std::remove(phi.c_str());
  // GPT-OSS trains in run (tests/executor/gpt_oss_executor_test.cc), but not under Ulysses cp.
  ExpectOneLineError(RunCli("run --model gpt-oss-20b --nproc 2 --cp 2 --steps 1 --out " + TempPath("oss_run")),
                     "Ulysses is not implemented with attention sinks");
  // Gemma 2's attention soft-capping: eager attention applies it, transformers' sdpa drops it.
  ExpectOneLineError(RunCli("run --model gemma2-9b --steps 1 --out " + TempPath("gemma2_run")),
                     "--attention sdpa: gemma2-9b's attn_logit_softcapping");
  // DeepSeek: the FP8 checkpoint estimated in the compute dtype with a warning; `run` trains MLA
  // with the published configs' YaRN (tests/executor/rotary_test.cc); Ulysses cp refused for MLA,
  // by `run` too, before a rank starts.
  Result ds = RunCli("estimate --model " + data + "deepseek-v3.config.json --cluster 32x8xH100 "
                     "--seq-len 4096 --checkpointing full --json");
  EXPECT_EQ(ds.code, 0) << ds.err;
  nlohmann::json dj = nlohmann::json::parse(ds.out);
  EXPECT_EQ(dj.at("model").at("parameters").get<int64_t>(), 671'026'404'352);
  EXPECT_THAT(dj.at("warnings").dump(), ::testing::HasSubstr("quantization_config"));
  ExpectOneLineError(RunCli("run --model deepseek-v2-lite --nproc 2 --cp 2 --steps 1 --out " + TempPath("ds_run")),
                     "multi-head latent attention");
  ExpectOneLineError(RunCli("estimate --model deepseek-v2-lite --cluster 8xH100 --cp 2"),
                     "Ulysses cp is not modelled for MLA");
}

TEST(CliTest, ModelsAndGpusList) {
  EXPECT_THAT(RunCli("models").out, ::testing::HasSubstr("llama2-70b"));
  EXPECT_THAT(RunCli("gpus").out, ::testing::HasSubstr("H100"));
  // Every row's name stands apart from the next column ("deepseek-v2-lite15.71 B" ran together):
  // the first word of each line is a whole preset or GPU name followed by at least two spaces.
  for (const char* cmd : {"models", "gpus"}) {
    std::istringstream lines(RunCli(cmd).out);
    std::string line;
    std::getline(lines, line);  // header
    int rows = 0;
    while (std::getline(lines, line) && !line.empty()) {  // gpus: the node presets follow a blank line
      const size_t end = line.find(' ');
      ASSERT_NE(end, std::string::npos) << line;
      EXPECT_EQ(line.compare(end, 2, "  "), 0) << cmd << ": " << line;
      ++rows;
    }
    EXPECT_GT(rows, 5) << cmd;
  }
  // The node presets, each with its NIC layout and source.
  const std::string gpus = RunCli("gpus").out;
  EXPECT_THAT(gpus, ::testing::HasSubstr("Node presets"));
  EXPECT_THAT(gpus, ::testing::HasSubstr("p5, p5.48xlarge"));
  EXPECT_THAT(gpus, ::testing::HasSubstr("8 x 400 Gb/s InfiniBand NDR"));
}

TEST(CliTest, UnknownPresetSuggestsClosest) {
  ExpectOneLineError(RunCli("estimate --model llama3-8bb"), "llama3-8b");
}

TEST(CliTest, BadClusterShorthand) { ExpectOneLineError(RunCli("estimate --cluster 8xH1OO"), "--cluster"); }

TEST(CliTest, ShardGroupMustDivideWorld) {
  ExpectOneLineError(RunCli("estimate --strategy hybrid_shard --shard-group 3"), "shard");
}

TEST(CliTest, GlobalBatchMustMatchAccumulation) {
  ExpectOneLineError(RunCli("estimate --micro-batch 2 --grad-accum 4 --global-batch 100"), "--global-batch");
}

TEST(CliTest, BadEnumFlagListsChoices) {
  ExpectOneLineError(RunCli("estimate --strategy fully_shard"), "full_shard");
}

TEST(CliTest, PlanFileUnknownKeyNamesKey) {
  std::string f = WriteFile("plan_bad.json",
                            R"({"schema": "shardtune.plan", "schema_version": 1, "micro_bach": 2})");
  ExpectOneLineError(RunCli("estimate --plan " + f), "micro_bach");
}

TEST(CliTest, PlanFileSyntaxErrorNamesFile) {
  std::string f = WriteFile("plan_syntax.json", "{\"schema\": ");
  ExpectOneLineError(RunCli("estimate --plan " + f), "plan_syntax.json");
}

TEST(CliTest, ModelSpecZeroLayersRejected) {
  std::string f = WriteFile("model_zero.json", R"({"schema": "shardtune.model", "schema_version": 1,
    "name": "m", "num_layers": 0, "hidden": 64, "num_heads": 4, "ffn_hidden": 128,
    "vocab_size": 100, "max_seq_len": 32})");
  ExpectOneLineError(RunCli("estimate --model " + f), "num_layers");
}

TEST(CliTest, SeqLenAboveModelMaximumRejected) {
  ExpectOneLineError(RunCli("estimate --model gpt2 --seq-len 4096"), "seq_len");
}

TEST(CliTest, FlagsOverridePlanFile) {
  std::string f = WriteFile("plan_ok.json",
                            R"({"schema": "shardtune.plan", "schema_version": 1, "micro_batch": 2})");
  Result r = RunCli("estimate --model tiny-llama --cluster 2xH100 --plan " + f + " --micro-batch 3 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("plan").at("micro_batch").get<int>(), 3);
}

TEST(CliTest, SimulateJsonHasTimeKeysAndMatchesEstimatePeak) {
  Result sim = RunCli("simulate --model llama3.2-1b --cluster 8xH100 --seq-len 1024 --json");
  Result est = RunCli("estimate --model llama3.2-1b --cluster 8xH100 --seq-len 1024 --json");
  ASSERT_EQ(sim.code, 0) << sim.err;
  ASSERT_EQ(est.code, 0) << est.err;
  auto s = nlohmann::json::parse(sim.out);
  auto e = nlohmann::json::parse(est.out);
  for (const char* k : {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "compute_s",
                        "exposed_comm_s", "phases_s", "fits", "host"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_EQ(s.at("per_rank").at("peak_bytes"), e.at("per_rank").at("peak_bytes"));
  EXPECT_EQ(s.at("per_rank").at("peak_phase"), e.at("per_rank").at("peak_phase"));
  // tokens/s = global batch x S / step time (8 ranks x micro-batch 1 x 1024 tokens)
  EXPECT_NEAR(s.at("tokens_per_s").get<double>(), 8 * 1024 / s.at("step_time_s").get<double>(), 1e-6 * 8 * 1024);
  // Where the step goes: the compute stream's busy time split by ComputeTime's terms adds up to
  // compute_s (up to the ns rounding of each op), and exposed communication is step - compute.
  const auto& cat = s.at("time_by_category_s");
  double compute = 0;
  for (const char* k : {"gemm", "attention", "memory_bound", "op_overhead"}) {
    ASSERT_TRUE(cat.contains(k)) << k;
    EXPECT_GE(cat.at(k).get<double>(), 0) << k;
    compute += cat.at(k).get<double>();
  }
  EXPECT_NEAR(compute, s.at("compute_s").get<double>(), 1e-6);
  EXPECT_GT(cat.at("gemm").get<double>(), 0);
  EXPECT_DOUBLE_EQ(cat.at("exposed_communication").get<double>(), s.at("exposed_comm_s").get<double>());
  EXPECT_GT(cat.at("host_issue").get<double>(), 0);
}

// Each collective of the steady step says how NCCL runs it, so a user can hold it against their
// nccl-tests output: a DGX pair's block all-gathers cross nodes over 8 rail channels of 48 GB/s
// (NCCL's search: one channel per 400 Gb/s NIC behind a Gen5 switch), and the trace's spans
// carry the same fields.
TEST(CliTest, SimulateJsonAndTraceNameEachCollectivesAlgorithm) {
  const std::string trace = TempPath("collectives.trace.json");
  Result r = RunCli("simulate --model llama3-8b --cluster 2xdgx-h100 --seq-len 4096 --json --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("collectives"));
  int gathers = 0;
  for (const auto& c : j.at("collectives")) {
    EXPECT_EQ(c.at("model"), "nccl");
    EXPECT_EQ(c.at("ranks"), 16);
    EXPECT_EQ(c.at("nodes"), 2);
    if (c.at("collective") != "all_gather") continue;
    ++gathers;
    EXPECT_EQ(c.at("algorithm"), "ring");
    EXPECT_EQ(c.at("channels"), 8);
    EXPECT_GT(c.at("calls_per_step").get<int>(), 0);
    if (c.at("bytes").get<int64_t>() >= (int64_t{256} << 20)) {
      EXPECT_EQ(c.at("protocol"), "Simple");
      EXPECT_DOUBLE_EQ(c.at("bus_bandwidth_bytes_per_s").get<double>(), 8 * 48e9);
    }
  }
  EXPECT_GT(gathers, 0);
  std::ifstream in(trace);
  const auto t = nlohmann::json::parse(in);
  int spans = 0;
  for (const auto& e : t.at("traceEvents")) {
    if (e.value("cat", "") != "all-gather" || !e.contains("args")) continue;
    if (!e.at("args").contains("algorithm")) continue;
    ++spans;
    EXPECT_EQ(e.at("args").at("algorithm"), "ring");
    EXPECT_EQ(e.at("args").at("channels"), 8);
  }
  EXPECT_GT(spans, 0);
}

// FSDP2 averages gradients with ReduceOp.AVG (bf16/fp32), which NCCL runs as a pre-multiplied sum
// that NVLink SHARP cannot reduce (ncclNvlsSupported): NO_SHARD's all-reduce inside one H100 node
// is the ring, not NVLS. With InfiniBand SHARP in the cluster file (NCCL's CollNet), the HSDP
// replica group's all-reduce across 4 nodes runs CollNet; without it, the ring or the tree.
TEST(CliTest, SimulateNamesCollNetWithIbSharpAndNoNvlsForAveragedGradients) {
  Result node = RunCli("simulate --model llama3-8b --cluster 8xH100 --strategy no_shard --seq-len 2048 --json");
  ASSERT_EQ(node.code, 0) << node.err;
  int reduces = 0;
  const auto node_json = nlohmann::json::parse(node.out);
  for (const auto& c : node_json.at("collectives")) {
    if (c.at("collective") != "all_reduce") continue;
    ++reduces;
    EXPECT_EQ(c.at("algorithm"), "ring");
  }
  EXPECT_GT(reduces, 0);
  for (bool sharp : {true, false}) {
    const std::string file = WriteFile(sharp ? "sharp.json" : "no_sharp.json",
                                       std::string(R"({"schema": "shardtune.cluster", "schema_version": 1,
                                           "nodes": 4, "gpus_per_node": 8, "gpu": "H100",
                                           "inter_node_link": "ib-ndr", "ib_sharp": )") +
                                           (sharp ? "true}" : "false}"));
    Result r = RunCli("simulate --model llama3-8b --cluster " + file +
                      " --strategy hybrid_shard --seq-len 2048 --global-batch 64 --json");
    ASSERT_EQ(r.code, 0) << r.err;
    int replica = 0;
    const auto j = nlohmann::json::parse(r.out);
    for (const auto& c : j.at("collectives")) {
      if (c.at("collective") != "all_reduce" || c.at("nodes") != 4) continue;
      ++replica;
      const std::string algo = c.at("algorithm");
      if (sharp) {
        EXPECT_EQ(algo.rfind("collnet_", 0), 0u) << algo;
      } else {
        EXPECT_TRUE(algo == "ring" || algo == "tree") << algo;
      }
    }
    EXPECT_GT(replica, 0) << (sharp ? "with" : "without") << " SHARP";
  }
}

// A plan with TRL's chunked NLL loss: simulate says what TRL's other losses would take, each
// simulated on the same plan (the text and --json agree).
TEST(CliTest, SimulateComparesTrlsChunkedLossWithItsOtherLosses) {
  const std::string args = "simulate --model llama3-8b --cluster 8xH100 --seq-len 4096 --loss-kernel trl_chunked_nll";
  Result text = RunCli(args);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("TRL's chunked NLL (loss_type chunked_nll"), std::string::npos) << text.out;
  Result js = RunCli(args + " --json");
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  ASSERT_TRUE(j.contains("loss_alternatives"));
  ASSERT_EQ(j.at("loss_alternatives").size(), 2u);
  for (const auto& alt : j.at("loss_alternatives")) {
    Result one = RunCli("simulate --model llama3-8b --cluster 8xH100 --seq-len 4096 --json --loss-kernel " +
                        alt.at("loss_kernel").get<std::string>());
    ASSERT_EQ(one.code, 0) << one.err;
    const auto o = nlohmann::json::parse(one.out);
    EXPECT_DOUBLE_EQ(alt.at("step_time_s").get<double>(), o.at("step_time_s").get<double>());
    EXPECT_FALSE(o.contains("loss_alternatives"));
  }
  Result plain = RunCli("simulate --model llama3-8b --cluster 8xH100 --seq-len 4096");
  EXPECT_EQ(plain.out.find("TRL's chunked NLL"), std::string::npos);
}

// A `trl dpo --config` file layered on an Accelerate config: the reference copy's wrapping
// follows the Accelerate file's fsdp_version (FSDP2: its root only; none given: Accelerate's
// default FSDP1), the breakdown names the reference's bytes, tune keeps the rows in pairs and
// pastes back --reference, and run refuses the DPO step (estimated, not run).
TEST(CliTest, TrlDpoConfigEstimatesTheReferenceForwardAsTheFsdpVersionWrapsIt) {
  const std::string dpo = WriteFile("dpo.yaml",
                                    "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\ndtype: bfloat16\nbeta: 0.01\n"
                                    "per_device_train_batch_size: 2\ngradient_accumulation_steps: 2\nmax_length: 1024\n"
                                    "output_dir: o\n");
  const std::string fsdp2 = WriteFile("fsdp2.yaml",
                                      "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\n"
                                      "fsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                                      "  fsdp_reshard_after_forward: true\n");
  Result two = RunCli("estimate --cluster 8xH100 --from " + fsdp2 + " --from " + dpo);
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_NE(two.out.find("micro-batch 4 x 1024 tokens"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("FSDP2 on its root only"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("reference model shards"), std::string::npos) << two.out;
  EXPECT_NE(two.err.find("which TRL shards with FSDP2 on its root only"), std::string::npos) << two.err;
  Result one = RunCli("estimate --cluster 8xH100 --from " + dpo);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("FSDP1 a block per unit"), std::string::npos) << one.out;
  EXPECT_NE(one.err.find("no fsdp_version given: Accelerate's default 1"), std::string::npos) << one.err;
  // The whole copy gathered at once needs more than a block at a time.
  Result j2 = RunCli("estimate --cluster 8xH100 --json --from " + fsdp2 + " --from " + dpo);
  Result j1 = RunCli("estimate --cluster 8xH100 --json --from " + dpo);
  ASSERT_EQ(j2.code, 0) << j2.err;
  ASSERT_EQ(j1.code, 0) << j1.err;
  EXPECT_GT(nlohmann::json::parse(j2.out).at("per_rank").at("peak_bytes").get<double>(),
            nlohmann::json::parse(j1.out).at("per_rank").at("peak_bytes").get<double>());
  Result t = RunCli("tune --cluster 8xH100 --from " + fsdp2 + " --from " + dpo);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("--reference fsdp2_root"), std::string::npos) << t.out;
  for (const std::string odd : {"mb=1 ", "mb=3 ", "mb=5 "}) EXPECT_EQ(t.out.find(odd), std::string::npos) << odd;
  ExpectOneLineError(RunCli("run --model tiny-llama --steps 1 --reference fsdp2_root --loss-kernel trl_logps"),
                     "reference: expected none and cross_entropy");
  // The flag's values, and adapters to turn off.
  ExpectOneLineError(RunCli("estimate --model llama3-8b --cluster 8xH100 --reference copy"),
                     "--reference: expected one of none, fsdp2_root, fsdp1_blocks, adapters_off, got \"copy\"");
  ExpectOneLineError(RunCli("estimate --model llama3-8b --cluster 8xH100 --reference adapters_off"),
                     "reference: expected fsdp2_root or fsdp1_blocks without LoRA adapters to turn off");
}

// The text's "where the step goes" lists the GPU's categories, which add up to the step time it
// prints (to its 4 decimals, one rounding per line); the host's issue time, which overlaps them,
// is printed apart and says so (issue #49: 1.72 s of categories for a 1.40 s step).
TEST(CliTest, SimulateTextCategoriesSumToTheStepTime) {
  // TRL's chunked NLL head runs fp32 GEMMs (ProgramOp::fp32_matmul_flops): counted as GEMM time.
  for (const std::string extra : {"", " --loss-kernel trl_chunked_nll"}) {
  Result r = RunCli("simulate --model llama3-8b --cluster 8xH100 --seq-len 4096" + extra);
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  double step = -1, sum = 0;
  int rows = 0;
  bool in_categories = false;
  while (std::getline(in, line)) {
    if (line.rfind("  step time", 0) == 0) step = std::stod(line.substr(line.find_first_of("0123456789")));
    if (line.rfind("  where the step goes", 0) == 0) {
      in_categories = true;
      continue;
    }
    if (in_categories && line.rfind("    ", 0) == 0) {
      std::istringstream l(line);
      std::string name;
      double v = 0;
      l >> name >> v;
      sum += v;
      ++rows;
      continue;
    }
    in_categories = false;
  }
  ASSERT_GT(step, 0) << r.out;
  EXPECT_EQ(rows, 5) << r.out;
  EXPECT_NEAR(sum, step, rows * 0.5e-4 + 0.5e-4) << r.out;
  EXPECT_NE(r.out.find("  host issue "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("beside the GPU"), std::string::npos) << r.out;
  }
}

TEST(CliTest, SimulateWritesAChromeTrace) {
  std::string trace = TempPath("trace.json");
  Result r = RunCli("simulate --model tiny-llama --cluster 2xH100 --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(trace);
  auto j = nlohmann::json::parse(in);
  int complete = 0, counters = 0;
  for (const auto& ev : j.at("traceEvents")) {
    complete += ev.at("ph") == "X";
    counters += ev.at("ph") == "C";
  }
  EXPECT_GT(complete, 0);
  EXPECT_EQ(complete, counters);  // one memory counter sample per op
}

TEST(CliTest, SimulateListsEveryPlanProblem) {
  Result r = RunCli("simulate --strategy hybrid_shard --shard-group 3 --micro-batch 0 --global-batch 7");
  ExpectOneLineError(r, "shard");
  EXPECT_THAT(r.err, ::testing::HasSubstr("micro_batch"));
  EXPECT_THAT(r.err, ::testing::HasSubstr("--global-batch"));
}

TEST(CliTest, SimulateRejectsRangesBeyondTheModel) {
  ExpectOneLineError(RunCli("simulate --model tiny-llama --wrap ranges:0-1,2-9"), "ranges");
}

TEST(CliTest, TuneWritesAWinnerThatEstimateReads) {
  std::string plan = TempPath("winner.json");
  Result r = RunCli("tune --model tiny-llama --cluster 2xH100 --global-batch 8 --seq-len 128 --top 2 --out " + plan);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("Top plans"));
  Result e = RunCli("estimate --model tiny-llama --cluster 2xH100 --plan " + plan + " --json");
  ASSERT_EQ(e.code, 0) << e.err;
  auto j = nlohmann::json::parse(e.out);
  // micro-batch x grad-accum x 2 ranks = the requested global batch of 8
  EXPECT_EQ(j.at("plan").at("micro_batch").get<int>() * j.at("plan").value("grad_accum", 1) * 2, 8);
}

// A plan with activation offload says what it holds in pinned host memory: tune's winner on the
// NVL72 preset (the first blocks offloaded beside per-block recompute, issue #46) prints a host
// line, and its JSON figure is the one estimate puts in the same plan's host breakdown during
// training (every GPU of a tray's copies).
TEST(CliTest, TuneSaysWhatActivationOffloadHoldsOnTheHost) {
  const std::string plan = TempPath("offload_winner.json");
  const std::string job = " --model llama3-70b --cluster nvl72 --global-batch 72 --seq-len 16384";
  Result t = RunCli("tune" + job + " --cp-sizes 1 --strategy full_shard --top 1 --json --out " + plan);
  ASSERT_EQ(t.code, 0) << t.err;
  const auto tj = nlohmann::json::parse(t.out);
  const auto& top = tj.at("top").at(0);
  ASSERT_TRUE(top.contains("activation_offload_pinned_bytes_per_host")) << top.dump();
  const int64_t pinned = top.at("activation_offload_pinned_bytes_per_host").get<int64_t>();
  Result e = RunCli("estimate" + job + " --plan " + plan + " --json");
  ASSERT_EQ(e.code, 0) << e.err;
  const auto ej = nlohmann::json::parse(e.out);
  int64_t in_estimate = -1;
  for (const auto& ph : ej.at("phases").at("list")) {
    const auto& b = ph.at("host").at("breakdown");
    if (b.contains("offloaded activations (pinned, power-of-two blocks)")) {
      in_estimate = b.at("offloaded activations (pinned, power-of-two blocks)").get<int64_t>();
    }
  }
  EXPECT_EQ(pinned, in_estimate);
  Result text = RunCli("tune" + job + " --cp-sizes 1 --strategy full_shard --top 1");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("of pinned activation copies per host (its 4 GPUs)"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("offloaded to pinned host memory"));
}

TEST(CliTest, TuneJsonRanksBestFirst) {
  Result r = RunCli("tune --model tiny-llama --cluster 2xH100 --global-batch 8 --seq-len 128 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& top = j.at("top");
  ASSERT_GE(top.size(), 1u);
  // Best first: by throughput, except that plans within 2% of the fastest step (ties the time
  // model cannot separate, planner::kRankTolerance) are ordered by safety and say so.
  double fastest = 1e300;
  for (const auto& c : top) fastest = std::min(fastest, c.at("step_time_s").get<double>());
  for (size_t i = 1; i < top.size(); ++i) {
    if (top[i - 1].at("tokens_per_s").get<double>() >= top[i].at("tokens_per_s").get<double>()) continue;
    EXPECT_LE(top[i - 1].at("step_time_s").get<double>(), fastest * 1.02) << i;
    EXPECT_LE(top[i].at("step_time_s").get<double>(), fastest * 1.02) << i;
  }
  // A plan faster than #1 says why #1 is ranked above it.
  for (size_t i = 1; i < top.size(); ++i) {
    if (top[i].at("step_time_s").get<double>() < top[0].at("step_time_s").get<double>()) {
      EXPECT_NE(top[i].at("why_not_best").get<std::string>().find("cannot tell apart"), std::string::npos) << i;
    }
  }
  EXPECT_TRUE(j.at("fits").get<bool>());
}

TEST(CliTest, TuneExportsTheWinner) {
  Result r = RunCli("tune --model tiny-llama --cluster 2xH100 --global-batch 8 --seq-len 128 --export deepspeed --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  auto ds = nlohmann::json::parse(j.at("export").at("text").get<std::string>());
  // DeepSpeed's train_batch_size is the global batch: micro x accumulation x ranks = 8.
  EXPECT_EQ(ds.at("train_batch_size").get<int>(), 8);
  ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 128 --export deepspeeed"), "deepspeed");
}

// The node search stops at the fewest nodes whose best plan fits and reaches the floor; every
// smaller count either had no fitting plan or stayed below the floor.
TEST(CliTest, TuneSearchesTheFewestNodes) {
  Result r = RunCli("tune --model llama3-8b --cluster 4x1xH100 --global-batch 4 --seq-len 2048 "
                    "--search-nodes --min-tokens-per-s 5000 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto ns = nlohmann::json::parse(r.out).at("node_search");
  ASSERT_GE(ns.size(), 1u);
  const auto& last = ns.back();
  if (last.at("fits").get<bool>() && last.at("tokens_per_s").get<double>() >= 5000) {
    for (size_t i = 0; i + 1 < ns.size(); ++i) {
      EXPECT_FALSE(ns[i].at("fits").get<bool>() && ns[i].at("tokens_per_s").get<double>() >= 5000) << i;
    }
  } else {
    EXPECT_EQ(ns.size(), 4u);  // searched them all without reaching the floor
  }
}

TEST(CliTest, TuneRejectsContradictoryBatchFlags) {
  ExpectOneLineError(RunCli("tune --global-batch 8 --global-batch-tokens 65536 --seq-len 8192"),
                     "exactly one");
  ExpectOneLineError(RunCli("tune --global-batch 12 --seq-len 1024"), "multiple of the 8");
  ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 1024 --objective cost"), "--price-per-gpu-hour");
  ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 1024 --grad-accum 2"), "--grad-accum");
  ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 1024 --min-tokens-per-s -5"), "--min-tokens-per-s");
  ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 1024 --top 0"), "--top");
  ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 1024 --loss-kernels cross_entropy,fused"),
                     "--loss-kernels: expected one of cross_entropy, fused_linear, verl_flash_ce, verl_padded_ce, verl_fused_torch, verl_fused_triton, trl_chunked_nll, trl_logps, got \"fused\"");
  ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 1024 --loss-kernel fused_linear "
                            "--loss-kernels cross_entropy,fused_linear"),
                     "--loss-kernels: leave out --loss-kernel");
  // Liger-Kernel's module patches: parsed, named in the plan line, checked against the model.
  Result liger = RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-len 2048 --liger all");
  ASSERT_EQ(liger.code, 0) << liger.err;
  EXPECT_NE(liger.out.find("Liger-Kernel's RMSNorm SwiGLU RoPE modules"), std::string::npos) << liger.out;
  ExpectOneLineError(RunCli("estimate --liger rmsnorm"),
                     "--liger: expected none, all or a comma list of rms_norm, swiglu, rope, got \"rmsnorm\"");
  ExpectOneLineError(RunCli("estimate --model gemma2-9b --liger swiglu"),
                     "/liger/swiglu: expected false for gemma2-9b");
  ExpectOneLineError(RunCli("estimate --loss-kernel fused_linear --keep-logits"),
                     "keep_logits: expected false with loss_kernel fused_linear");
}

// tune --loss-kernels searches the fused linear cross-entropy beside the plain loss; at 8192
// tokens on Llama-3-8B it lets a plan without checkpointing fit, and the winner says so.
TEST(CliTest, TuneSearchesTheLossKernel) {
  Result r = RunCli("tune --model llama3-8b --cluster 8xH100 --global-batch 16 --seq-len 8192 "
                    "--offload none --loss-kernels cross_entropy,fused_linear --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& top = j.at("top").at(0);
  EXPECT_NE(top.at("key").get<std::string>().find("loss=fused_linear"), std::string::npos) << top.dump();
}

// first:K in tune (issue #46): refined after the search when nothing pins the axis (Mixtral on two
// nodes: the winner reruns only its first K blocks); not when the winner is to be exported (no
// format says first:K); searched at the user's K when --checkpointing first:K pins it.
TEST(CliTest, TuneNarrowsCheckpointingToFirstKUnlessExportedOrPinned) {
  const std::string job = "tune --model mixtral-8x7b --cluster 2x8xH100 --global-batch 64 --seq-len 4096 --json";
  Result free_r = RunCli(job);
  ASSERT_EQ(free_r.code, 0) << free_r.err;
  auto free_j = nlohmann::json::parse(free_r.out);
  EXPECT_GE(free_j.at("work").at("refined_checkpointing").get<int>(), 1);
  EXPECT_NE(free_j.at("top").at(0).at("key").get<std::string>().find("ckpt=first:"), std::string::npos);
  Result exported = RunCli(job + " --export torchtitan");
  ASSERT_EQ(exported.code, 0) << exported.err;
  auto ex_j = nlohmann::json::parse(exported.out);
  EXPECT_EQ(ex_j.at("work").at("refined_checkpointing").get<int>(), 0);
  for (const auto& c : ex_j.at("top")) EXPECT_EQ(c.at("key").get<std::string>().find("ckpt=first:"), std::string::npos);
  Result pinned = RunCli("tune --model tiny-llama --cluster 2xH100 --global-batch 8 --seq-len 128 "
                         "--checkpointing first:1 --json");
  ASSERT_EQ(pinned.code, 0) << pinned.err;
  auto pin_j = nlohmann::json::parse(pinned.out);
  ASSERT_FALSE(pin_j.at("top").empty());
  for (const auto& c : pin_j.at("top")) EXPECT_NE(c.at("key").get<std::string>().find("ckpt=first:1"), std::string::npos);
}

// --- calibrate / validate / tune --measure (issue #6) ---

// A real 1-rank CPU run (3 steps, so the first is left out of the steady figures), made once.
const std::string& MeasuredRun() {
  static const std::string path = [] {
    std::string dir = TempPath("measured_run_" + std::to_string(::getpid()));
    Result r = RunCli("run --model tiny-llama --nproc 1 --steps 3 --micro-batch 1 --seq-len 32 --out " + dir);
    EXPECT_EQ(r.code, 0) << r.err;
    return dir + "/measurements.json";
  }();
  return path;
}

TEST(CliTest, ValidateComparesEveryFigureOfARealRun) {
  Result r = RunCli("validate --measurements " + MeasuredRun() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "shardtune.validate");
  ASSERT_EQ(j["runs"].size(), 1u);
  std::set<std::string> kinds;
  for (const auto& row : j["runs"][0]["rows"]) {
    kinds.insert(row["kind"].get<std::string>());
    double pred = row["predicted"], meas = row["measured"];
    // error = (predicted - measured) / measured, as printed.
    EXPECT_NEAR(row["error"].get<double>(), (pred - meas) / meas, 1e-12) << row["name"];
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"step", "phase", "compute", "memory"}));  // 1 rank: no collectives
  EXPECT_GE(j["summary"]["all"]["worst_abs_error"].get<double>(),
            j["summary"]["all"]["median_abs_error"].get<double>());
  EXPECT_TRUE(j["warnings"].empty()) << j["warnings"];  // steady spans present
  Result text = RunCli("validate --measurements " + MeasuredRun());
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("step time"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("median |error|"));
}

// A run measured on an H100 is predicted on what simulate uses for H100 clusters: the catalog's
// measured profile (profiles/measured/), so validate without --profile equals validate with that
// file, and differs from the datasheet defaults (an empty profile). The run: shardtune run on the
// lent H100, 2026-11-26 (tests/data/validation/executor_h100_2026-11-26.json).
TEST(CliTest, ValidatePredictsAnH100RunOnTheCatalogsMeasuredTables) {
  std::ifstream in(std::string(SHARDTUNE_TEST_DATA_DIR) + "/validation/executor_h100_2026-11-26.json");
  ASSERT_TRUE(in.good());
  nlohmann::json doc = nlohmann::json::parse(in);
  std::string run = WriteFile("h100_w1_mb4_measurements.json", doc["runs"]["w1_mb4"].dump());
  std::string catalog = std::string(SHARDTUNE_TEST_DATA_DIR) + "/../../profiles/measured/h100-sxm-80g.profile.json";
  std::string none = WriteFile("empty_profile.json", R"({"schema": "shardtune.profile", "schema_version": 3})");
  auto step = [&](const std::string& extra) {
    Result r = RunCli("validate --cluster 1xH100 --measurements " + run + extra + " --json");
    EXPECT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);  // kept: the loop reads into it
    for (const auto& row : j["runs"][0]["rows"]) {
      if (row["kind"] == "step") return row["predicted"].get<double>();
    }
    ADD_FAILURE() << "no step row";
    return 0.0;
  };
  double by_default = step(""), with_catalog = step(" --profile " + catalog), datasheet = step(" --profile " + none);
  EXPECT_DOUBLE_EQ(by_default, with_catalog);
  EXPECT_NE(by_default, datasheet);
}

// --plot (issue #19): estimate, tune and validate draw self-contained pictures; the measured
// peaks of a real run are drawn over its prediction; a name that is neither .svg nor .html is a
// one-line error and nothing is written.
TEST(CliTest, PlotFlagsWritePicturesAndRefuseOtherNames) {
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  std::string est = TempPath("memory.svg"), pareto = TempPath("pareto.html"), val = TempPath("validate.svg");
  Result e = RunCli("estimate --model llama3.2-1b --cluster 8xH100 --seq-len 2048 --plot " + est);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(slurp(est).rfind("<svg", 0), 0u);
  EXPECT_THAT(slurp(est), ::testing::HasSubstr("usable capacity"));
  Result t = RunCli("tune --model llama3.2-1b --cluster 8xH100 --global-batch 16 --seq-len 1024 --plot " + pareto);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(slurp(pareto).rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_THAT(slurp(pareto), ::testing::HasSubstr("winner: "));
  Result v = RunCli("validate --measurements " + MeasuredRun() + " --plot " + val);
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_THAT(slurp(val), ::testing::HasSubstr("measured peak allocated (tracked)"));
  EXPECT_THAT(slurp(val), ::testing::HasSubstr(">measured "));  // a phase's measured peak
  for (const char* cmd : {"estimate --plot ", "tune --global-batch 16 --seq-len 1024 --plot ",
                          "validate --measurements "}) {
    std::string bad = TempPath("picture.png");
    std::string line = std::string(cmd) + bad;
    if (std::string(cmd).rfind("validate", 0) == 0) line = std::string(cmd) + MeasuredRun() + " --plot " + bad;
    ExpectOneLineError(RunCli(line), "--plot: expected a file name ending in .svg or .html");
    std::ifstream probe(bad);
    EXPECT_FALSE(probe.good()) << line;
  }
}

// --memory-snapshot (issue #19): the prediction as torch.cuda.memory._snapshot()'s pickle
// (contents: tests/simulator/memory_snapshot_test.cc); another extension or an unwritable
// folder is a one-line error and leaves no file.
TEST(CliTest, MemorySnapshotWritesAPickleAndRefusesOtherNames) {
  std::string good = TempPath("predicted.pickle"), bad = TempPath("predicted.json");
  Result e = RunCli("estimate --model llama3.2-1b --cluster 8xH100 --seq-len 2048 --memory-snapshot " + good);
  ASSERT_EQ(e.code, 0) << e.err;
  std::ifstream in(good, std::ios::binary);
  std::string head(2, '\0');
  in.read(head.data(), 2);
  EXPECT_EQ(head, std::string("\x80\x02"));  // pickle protocol 2
  ExpectOneLineError(RunCli("estimate --memory-snapshot " + bad),
                     "--memory-snapshot: expected a file name ending in .pickle");
  EXPECT_FALSE(std::ifstream(bad).good());
  ExpectOneLineError(RunCli("estimate --memory-snapshot /nonexistent-shardtune/m.pickle"),
                     "/nonexistent-shardtune/m.pickle: cannot write");
  std::remove(good.c_str());
}

TEST(CliTest, CalibrateWritesAProfileThatEverySubcommandAccepts) {
  std::string prof = TempPath("calibrated_profile.json");
  Result r = RunCli("calibrate " + MeasuredRun() + " --out " + prof);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("Residuals"));
  std::ifstream in(prof);
  auto p = nlohmann::json::parse(in);
  EXPECT_EQ(p["schema"], "shardtune.profile");
  EXPECT_EQ(p["schema_version"], 3);  // simulator/profile_json.h kProfileSchemaVersion
  EXPECT_EQ(p["provenance"]["measurements"][0], MeasuredRun());
  EXPECT_FALSE(p["fit"].empty());
  for (const char* cmd : {"estimate", "simulate"}) {
    Result e = RunCli(std::string(cmd) + " --model tiny-llama --cluster cpu:1 --seq-len 32 --profile " + prof + " --json");
    EXPECT_EQ(e.code, 0) << cmd << ": " << e.err;
  }
  Result t = RunCli("tune --model tiny-llama --cluster cpu:1 --global-batch 2 --seq-len 32 --profile " + prof);
  EXPECT_EQ(t.code, 0) << t.err;
  // Validating the fit's own run with its profile: the per-step phase totals (forward, backward,
  // optimizer), which the time-weighted fit targets, move towards the measurement. (Single spans
  // may not: the fit weights each by its share of the step.)
  Result before = RunCli("validate --measurements " + MeasuredRun() + " --json");
  Result after = RunCli("validate --measurements " + MeasuredRun() + " --profile " + prof + " --json");
  ASSERT_EQ(after.code, 0) << after.err;
  auto jb = nlohmann::json::parse(before.out), ja = nlohmann::json::parse(after.out);
  EXPECT_LT(ja["summary"]["phase"]["median_abs_error"].get<double>(),
            jb["summary"]["phase"]["median_abs_error"].get<double>());
}

// A PyTorch profiler trace (Kineto's Chrome trace JSON) of three steps of llama3.2-1b on one
// H100, written here: each step 0.2 s of wall time with 10 ms blocked in a synchronize, GEMM,
// flash-attention and elementwise kernels, and FSDP2 hook spans.
std::string TraceOfThreeSteps() {
  nlohmann::json ev = nlohmann::json::array();
  int64_t corr = 0;
  auto x = [&](const char* cat, const std::string& name, double ts, double dur) {
    ev.push_back({{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", dur}});
  };
  auto launch = [&](double ts, const char* kernel, double dur) {
    ++corr;
    ev.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", 1},
                  {"ts", ts}, {"dur", 3}, {"args", {{"correlation", corr}}}});
    ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", kernel}, {"pid", 0}, {"tid", 7}, {"ts", ts + 5},
                  {"dur", dur}, {"args", {{"correlation", corr}, {"device", 0}}}});
  };
  for (int s = 0; s < 3; ++s) {
    double t0 = 1e6 * (s + 1);
    x("user_annotation", "ProfilerStep#" + std::to_string(s), t0, 200000);
    launch(t0 + 100, "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", 60000);
    launch(t0 + 200, "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>(Flash_fwd_params)", 8000);
    launch(t0 + 300, "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>", 40000);
    for (int h = 0; h < 48; ++h) x("user_annotation", "FSDP::pre_forward (model.layers." + std::to_string(h % 16) + ")", t0 + 1000 + 100 * h, 50);
    x("cuda_runtime", "cudaDeviceSynchronize", t0 + 189000, 10000);
  }
  nlohmann::json doc = {{"schemaVersion", 1}, {"deviceProperties", {{{"id", 0}, {"name", "NVIDIA H100 80GB HBM3"}}}},
                        {"baseTimeNanoseconds", 1795000000000000000LL}, {"traceEvents", ev}};
  return WriteFile("fsdp2_trace.json", doc.dump());
}

// A profile probed on one device kind does not time another's steps (issue #49 item 2: a CPU
// probe made an 8xH100 step 49 s under an H100 header); the first line says what timed the step.
// A search that finds nothing fails (exit 2), names the binding constraint first and quotes only
// advice it checked (issue #49 item 4).
// The verdict is the second line (issue #49 item 3): estimate and simulate say fits or not and
// by how much before anything else; a fit within 2% of the usable memory is marginal; the
// "judged on" paragraph is behind --explain.
// Every top plan of tune is printed as the flags that reproduce it (issue #49 item 6): estimate
// with those flags builds the same plan (the JSON plans compare equal).
TEST(CliTest, TunePlansPasteBackAsFlags) {
  const std::vector<std::pair<std::string, std::string>> jobs = {
      {"--model llama3-8b --cluster 2x8xH100", " --global-batch 64 --seq-len 8192"},
      {"--model llama3.1-8b --cluster 8xH100", " --seq-len 65536 --global-batch 8"}};
  for (const auto& [model_cluster, batch] : jobs) {
    Result t = RunCli("tune " + model_cluster + batch + " --top 5 --json");
    ASSERT_EQ(t.code, 0) << t.err;
    auto top = nlohmann::json::parse(t.out)["top"];
    ASSERT_FALSE(top.empty());
    for (const auto& entry : top) {
      const std::string flags = entry["flags"].get<std::string>();
      Result e = RunCli("estimate " + model_cluster + " --seq-len " +
                        std::to_string(entry["plan"]["seq_len"].get<int64_t>()) + " " + flags + " --json");
      ASSERT_EQ(e.code, 0) << flags << "\n" << e.err;
      auto plan = nlohmann::json::parse(e.out)["plan"];
      auto want = entry["plan"];
      for (auto it = want.begin(); it != want.end(); ++it) {
        EXPECT_EQ(plan[it.key()], it.value()) << it.key() << " of " << flags;
      }
    }
  }
}

// Every file-writing flag says "wrote FILE" on stderr (issue #49 item 9).
// A mistyped flag name gets a suggestion, as mistyped values do (issue #49 item 9).
TEST(CliTest, AMistypedFlagGetsADidYouMean) {
  ExpectOneLineError(RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-lne 4096"),
                     "(did you mean \"--seq-len\"?)");
  ExpectOneLineError(RunCli("tune --model llama3-8b --cluster 8xH100 --global-bach 8"),
                     "(did you mean \"--global-batch\"?)");
  Result far = RunCli("estimate --zzzzzz 1");
  EXPECT_EQ(far.code, 1);
  EXPECT_THAT(far.err, ::testing::Not(::testing::HasSubstr("did you mean")));
}

TEST(CliTest, EveryWrittenFileIsNamedOnStderr) {
  const std::string plot = TempPath("wrote_memory.svg"), snap = TempPath("wrote.pickle"),
                    trace = TempPath("wrote_trace.json"), plan = TempPath("wrote_plan.json"),
                    pareto = TempPath("wrote_pareto.svg"), yaml = TempPath("wrote_accelerate.yaml");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"estimate --model llama3-8b --cluster 8xH100 --plot " + plot + " --memory-snapshot " + snap, {plot, snap}},
      {"simulate --model llama3-8b --cluster 8xH100 --trace " + trace, {trace}},
      {"tune --model llama3-8b --cluster 8xH100 --global-batch 64 --seq-len 8192 --out " + plan + " --plot " + pareto,
       {plan, pareto}},
      {"export --plan " + plan + " --format accelerate --model llama3-8b --cluster 8xH100 --out " + yaml, {yaml}},
  };
  for (const auto& [cmd, files] : cases) {
    Result r = RunCli(cmd);
    ASSERT_EQ(r.code, 0) << cmd << "\n" << r.err;
    for (const std::string& f : files) {
      EXPECT_THAT(r.err, ::testing::HasSubstr("wrote " + f + "\n")) << cmd;
      EXPECT_TRUE(std::ifstream(f).good()) << f;
    }
  }
}

TEST(CliTest, TheVerdictIsTheSecondLine) {
  auto line = [](const std::string& text, int n) {
    std::istringstream in(text);
    std::string l;
    for (int i = 0; i < n; ++i) std::getline(in, l);
    return l;
  };
  Result oom = RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-len 8192");
  ASSERT_EQ(oom.code, 0) << oom.err;
  EXPECT_THAT(line(oom.out, 2), ::testing::StartsWith("=> DOES NOT FIT: runs out in steady step: "));
  // The first what-if row that fits, as flags, with its own figures.
  EXPECT_THAT(line(oom.out, 3), ::testing::StartsWith("=> fits with --offload "));
  EXPECT_THAT(oom.out, ::testing::Not(::testing::HasSubstr("judged on:")));
  Result fit = RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-len 2048 --explain");
  EXPECT_THAT(line(fit.out, 2), ::testing::StartsWith("=> FITS: fits in every phase; tightest: "));
  EXPECT_THAT(fit.out, ::testing::HasSubstr("judged on:"));
  Result sim = RunCli("simulate --model llama3-8b --cluster 8xH100 --seq-len 2048");
  EXPECT_THAT(line(sim.out, 2), ::testing::MatchesRegex("=> FITS: .* required per GPU of 79.1 GiB usable \\(headroom .*"));
  EXPECT_THAT(line(sim.out, 2), ::testing::HasSubstr(" s per step, "));
}

TEST(CliTest, TuneWithoutAFittingPlanExitsTwoAndNamesTheBindingConstraint) {
  const std::string out = TempPath("nofit_plan.json");
  Result mem = RunCli("tune --model llama3-405b --cluster 1xRTX4090 --global-batch 8 --seq-len 2048 --out " + out);
  EXPECT_EQ(mem.code, 2) << mem.err;
  EXPECT_THAT(mem.out, ::testing::HasSubstr("No plan fits in memory: "));
  // Offload all was in the search: it is not advised as the way out, its own need is quoted.
  EXPECT_THAT(mem.out, ::testing::HasSubstr("offloading all states to host RAM was searched and still needs at least"));
  EXPECT_THAT(mem.out, ::testing::Not(::testing::HasSubstr("would make it fit")));
  EXPECT_FALSE(std::ifstream(out).good());
  EXPECT_THAT(mem.err, ::testing::HasSubstr("--out " + out + " not written: no plan fits"));
  Result floor = RunCli("tune --model llama3-8b --cluster 8xH100 --global-batch 64 --seq-len 8192 "
                        "--objective memory --min-tokens-per-s 10000000 --json");
  EXPECT_EQ(floor.code, 2) << floor.err;
  auto j = nlohmann::json::parse(floor.out);
  EXPECT_EQ(j["no_plan_reason"], "constraint");
  EXPECT_THAT(j["advice_if_none"].get<std::string>(),
              ::testing::StartsWith("No plan meets the constraints: plans fit in memory"));
  EXPECT_THAT(j["advice_if_none"].get<std::string>(), ::testing::HasSubstr("throughput floor"));
  EXPECT_THAT(j["advice_if_none"].get<std::string>(), ::testing::HasSubstr("(--min-tokens-per-s)"));
}

TEST(CliTest, AProfileOfAnotherDeviceIsRefusedAndTheHeaderNamesWhatTimedTheStep) {
  const std::string h100 = std::string(SHARDTUNE_SOURCE_DIR) + "/profiles/measured/h100-sxm-80g.profile.json";
  const std::string job = "simulate --model llama3-8b --seq-len 2048 --profile " + h100;
  Result ok = RunCli(job + " --cluster 8xH100");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_THAT(ok.out.substr(0, ok.out.find('\n')),
              ::testing::HasSubstr("timed by --profile " + h100 + " (probed on NVIDIA H100 80GB HBM3, "));
  ExpectOneLineError(RunCli(job + " --cluster 8xA100"),
                     "measured on \"NVIDIA H100 80GB HBM3\" (H100-SXM-80G), but --cluster 8xA100 is A100-SXM-80G GPUs");
  ExpectOneLineError(RunCli(job + " --cluster cpu:2"), "but --cluster cpu:2 is CPU ranks");
  ExpectOneLineError(RunCli("tune --model llama3-8b --seq-len 2048 --global-batch 8 --cluster 8xA100 --profile " + h100),
                     "--profile " + h100 + ": measured on");
  Result datasheet = RunCli("simulate --model llama3-8b --seq-len 2048 --cluster 8xA100");
  EXPECT_THAT(datasheet.out.substr(0, datasheet.out.find('\n')),
              ::testing::HasSubstr("timed by datasheet peaks x the cost model's default efficiencies"));
}

TEST(CliTest, CalibrateFromAProfilerTraceWritesAProfileThatSimulateUses) {
  std::string trace = TraceOfThreeSteps();
  std::string prof = TempPath("trace_profile.json");
  std::string job = " --model llama3.2-1b --cluster 1xH100 --micro-batch 1 --seq-len 2048";
  Result r = RunCli("calibrate --trace " + trace + job + " --out " + prof);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("matmul_efficiency"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("predicted, fitted"));
  std::ifstream in(prof);
  auto p = nlohmann::json::parse(in);
  EXPECT_EQ(p["schema"], "shardtune.profile");
  EXPECT_EQ(p["provenance"]["device"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(p["provenance"]["date"], "2026-11-18");  // 1795000000 s after the epoch, UTC
  EXPECT_EQ(p["provenance"]["measurements"][0], trace);
  // The GEMM time fixes the matmul efficiency: 60 ms for the plan's matmul FLOPs. Simulating the
  // same plan with the profile puts its GEMM share at the measured 60 ms.
  Result s = RunCli("simulate" + job + " --profile " + prof + " --json");
  ASSERT_EQ(s.code, 0) << s.err;
  auto j = nlohmann::json::parse(s.out);
  EXPECT_NEAR(j["time_by_category_s"]["gemm"].get<double>(), 0.060, 0.060 * 1e-3);
  // 1xH100 is a one-rank mesh: the hooks' measured mean is its constant; the sharded one stays.
  EXPECT_NEAR(p["compute"]["host_per_fsdp_hook_one_rank_s"].get<double>(), 50e-6, 1e-12);
  EXPECT_NEAR(p["compute"]["host_per_fsdp_hook_s"].get<double>(), 1.93e-3, 1e-12);  // cost_model.h's
  // Bad uses are one-line errors.
  ExpectOneLineError(RunCli("calibrate --trace " + trace + " --cluster 1xH100 --out " + TempPath("never.json")),
                     "--model is required");
  ExpectOneLineError(RunCli("calibrate " + MeasuredRun() + " --micro-batch 2 --out " + TempPath("never.json")),
                     "--micro-batch describes the run of --trace");
  ExpectOneLineError(RunCli("calibrate --out " + TempPath("never.json")), "expected measurements.json files");
  std::string bad = WriteFile("bad_trace.json", R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]})");
  ExpectOneLineError(RunCli("calibrate --trace " + bad + job + " --out " + TempPath("never.json")),
                     "bad_trace.json:/traceEvents/0: expected \"dur\" (a number), missing");
}

TEST(CliTest, ValidateWarnsAboutAProfileFromAnotherMachine) {
  std::string prof = WriteFile("other_machine_profile.json", R"({"schema": "shardtune.profile", "schema_version": 2,
      "name": "h100 box", "provenance": {"hostname": "gpu-node-7", "device": "cuda"}})");
  Result r = RunCli("validate --measurements " + MeasuredRun() + " --profile " + prof);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("warning: "));
  EXPECT_THAT(r.err, ::testing::HasSubstr("gpu-node-7"));
}

TEST(CliTest, MalformedMeasurementsAreOneLineErrors) {
  std::string bad = WriteFile("bad_measurements.json",
                              R"({"schema": "shardtune.measurements", "schema_version": 1, "model": {"name": 3}})");
  ExpectOneLineError(RunCli("validate --measurements " + bad), "bad_measurements.json:/: missing required key \"environment\"");
  ExpectOneLineError(RunCli("calibrate " + bad + " --out " + TempPath("never.json")), "/model/name");
  std::string syntax = WriteFile("syntax_measurements.json", "{\"schema\": ");
  ExpectOneLineError(RunCli("validate --measurements " + syntax), "syntax_measurements.json");
  std::string plan = WriteFile("a_plan.json", R"({"schema": "shardtune.plan", "schema_version": 1})");
  ExpectOneLineError(RunCli("validate --measurements " + plan), "shardtune.measurements");
  ExpectOneLineError(RunCli("validate --measurements " + MeasuredRun() + " --cluster 8xH100"), "world of 1");
}

TEST(CliTest, TuneMeasureRejectsWhatItCannotRun) {
  // A GPU cluster's plans train on this machine's GPU (tune_measure_test.cc): refused without one.
  std::ifstream gpu("/dev/nvidia0");
  if (!gpu.good() && !std::ifstream("/dev/nvidiactl").good()) {
    ExpectOneLineError(RunCli("tune --global-batch 8 --seq-len 1024 --measure 2"),
                       "--measure: 8xH100 plans train on this machine's GPU, and it has none");
  }
  ExpectOneLineError(RunCli("tune --model tiny-llama --cluster cpu:1 --global-batch 2 --seq-len 32 --measure 0"),
                     "--measure");
  ExpectOneLineError(RunCli("tune --model tiny-llama --cluster cpu:1 --global-batch 2 --seq-len 32 --measure 1 "
                            "--measure-steps 1"), "--measure-steps");
}

// --jobs: a thread count from 1 to 1024; the JSON reports the threads used and the work done.
TEST(CliTest, TuneJobsIsCheckedAndReported) {
  const std::string base = "tune --model tiny-llama --cluster 8xH100 --global-batch 8 --seq-len 128 ";
  ExpectOneLineError(RunCli(base + "--jobs 0"), "--jobs: expected a number of threads from 1 to 1024, got 0");
  ExpectOneLineError(RunCli(base + "--jobs two"), "--jobs: expected an integer, got \"two\"");
  Result r = RunCli(base + "--jobs 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("work").at("threads").get<int>(), 2);
  const auto& w = j.at("work");
  // Every plan is walked for memory, ruled out by the memory bound, or ruled out by the compute
  // bound before its walk (search_rank.cc BookVerdicts).
  EXPECT_EQ(w.at("memory_checked").get<int64_t>() + w.at("pruned_by_memory_bound").get<int64_t>() +
                w.at("pruned_before_walk").get<int64_t>(),
            w.at("enumerated").get<int64_t>());
  EXPECT_GT(w.at("wall_s").get<double>(), 0.0);
}

// tune --allocator (issue #46): the allocator is checked, the answer says which one judged it, and
// under expandable segments the winner's need is what estimate says for that plan and allocator.
TEST(CliTest, TuneAllocatorIsCheckedAndJudgesThePlans) {
  const std::string base = "tune --model tiny-llama --cluster 2xH100 --global-batch 8 --seq-len 128 ";
  ExpectOneLineError(RunCli(base + "--allocator expandable"),
                     "--allocator: expected default, expandable_segments or both, got \"expandable\"");
  Result r = RunCli(base + "--allocator expandable_segments --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("allocator"), "expandable_segments");
  const auto& best = j.at("top").at(0);
  Result e = RunCli("estimate --model tiny-llama --cluster 2xH100 --seq-len 128 --allocator expandable_segments " +
                    best.at("flags").get<std::string>() + " --json");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(nlohmann::json::parse(e.out).at("per_rank").at("required_bytes"), best.at("required_bytes"));
  // both: the answer is the better of the two searches; the other's winner is reported.
  Result b = RunCli(base + "--allocator both --json");
  ASSERT_EQ(b.code, 0) << b.err;
  auto jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(jb.at("allocators_searched"), "both");
  const auto& other = jb.at("other_allocator");
  EXPECT_NE(other.at("allocator"), jb.at("allocator"));
  ASSERT_TRUE(other.at("found").get<bool>());
  // Expandable segments answer only when their best step beats the default's by more than the
  // 2% tie tolerance (planner::kRankTolerance); otherwise the default, one knob fewer.
  double fastest = 1e300;
  for (const auto& c : jb.at("top")) fastest = std::min(fastest, c.at("step_time_s").get<double>());
  const double other_step = other.at("step_time_s").get<double>();
  if (jb.at("allocator") == "expandable_segments") {
    EXPECT_LT(fastest * 1.02, other_step);
  } else {
    EXPECT_GE(fastest, 0.0);
    EXPECT_LE(fastest, other_step * 1.02);
  }
}

// The issue's case: Qwen3-30B-A3B on 8 H100 at 64 x 4096. Under the default allocator the fastest
// plan without offload runs out of memory only in the caching allocator's replay; the answer names
// it with both figures, and estimate of that plan agrees with each.
TEST(CliTest, TuneNamesThePlanThatLostOnlyToFragmentation) {
  Result r = RunCli("tune --model qwen3-30b-a3b --cluster 8xH100 --global-batch 64 --seq-len 4096 --cp-sizes 1 "
                    "--strategy full_shard --checkpointing full --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("lost_to_fragmentation")) << r.out.substr(0, 2000);
  const auto& f = j.at("lost_to_fragmentation");
  EXPECT_LT(f.at("step_time_s").get<double>(), j.at("top").at(0).at("step_time_s").get<double>());
  const int64_t capacity = f.at("capacity_bytes");
  EXPECT_GT(f.at("default_required_bytes").get<int64_t>(), capacity);
  EXPECT_LE(f.at("expandable_segments_required_bytes").get<int64_t>(), capacity);
  const std::string est = "estimate --model qwen3-30b-a3b --cluster 8xH100 --seq-len 4096 " +
                          f.at("flags").get<std::string>() + " --json";
  Result d = RunCli(est);
  Result x = RunCli(est + " --allocator expandable_segments");
  ASSERT_EQ(d.code, 0) << d.err;
  ASSERT_EQ(x.code, 0) << x.err;
  auto jd = nlohmann::json::parse(d.out), jx = nlohmann::json::parse(x.out);
  EXPECT_FALSE(jd.at("fits").get<bool>());
  EXPECT_TRUE(jx.at("fits").get<bool>());
  EXPECT_EQ(jd.at("per_rank").at("required_bytes"), f.at("default_required_bytes"));
  EXPECT_EQ(jx.at("per_rank").at("required_bytes"), f.at("expandable_segments_required_bytes"));
  // The text says it beside the top plans, with the setting that makes it fit.
  Result t = RunCli("tune --model qwen3-30b-a3b --cluster 8xH100 --global-batch 64 --seq-len 4096 --cp-sizes 1 "
                    "--strategy full_shard --checkpointing full");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_THAT(t.out, ::testing::HasSubstr("Lost only to the caching allocator's fragmentation"));
  EXPECT_THAT(t.out, ::testing::HasSubstr("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
}

TEST(CliTest, TuneMeasureRunsTheTopPlansAndReportsTheMeasuredWinner) {
  std::string dir = TempPath("tune_measure_" + std::to_string(::getpid()));
  Result r = RunCli("tune --model tiny-llama --cluster cpu:1 --global-batch 2 --seq-len 32 --measure 2 "
                    "--measure-steps 3 --measure-dir " + dir + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& m = j["measured"];
  ASSERT_EQ(m["plans"].size(), 2u);
  // Ranked by measured throughput, best first; the winner is the first.
  EXPECT_GE(m["plans"][0]["measured_tokens_per_s"].get<double>(), m["plans"][1]["measured_tokens_per_s"].get<double>());
  EXPECT_EQ(m["measured_winner"], m["plans"][0]["key"]);
  std::ifstream prof(m["profile"].get<std::string>());
  EXPECT_EQ(nlohmann::json::parse(prof)["schema"], "shardtune.profile");
  EXPECT_FALSE(m["calibrated_top"].empty());
}

// Issue #11: the whole job. The JSON carries every phase; a consolidated checkpoint of an 8B
// model gathered on every GPU (12 bytes per parameter) is what decides the verdict, and the text
// says so; the simulate trace marks the phases.
TEST(CliTest, EstimatePhasesNameTheDecidingPhase) {
  Result r = RunCli("estimate --seq-len 2048 --checkpoint-format full --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& ph = j["phases"];
  ASSERT_EQ(ph["list"].size(), 5u);
  EXPECT_TRUE(ph["training_fits"].get<bool>());
  EXPECT_FALSE(ph["fits"].get<bool>());
  EXPECT_EQ(ph["deciding_phase"], "checkpoint save");
  for (const auto& p : ph["list"]) {
    EXPECT_EQ(p["nvidia_smi_bytes"].get<int64_t>(),
              p["reserved_bytes"].get<int64_t>() + p["outside_allocator_bytes"].get<int64_t>());
  }
  Result text = RunCli("estimate --seq-len 2048 --checkpoint-format full");
  EXPECT_THAT(text.out, ::testing::HasSubstr("fits in training, runs out while saving"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("use sharded checkpoints"));
}

TEST(CliTest, SimulateTraceMarksThePhases) {
  std::string trace = TempPath("phases_trace_" + std::to_string(::getpid()) + ".json");
  Result r = RunCli("simulate --model tiny-llama --cluster 4xH100 --seq-len 64 --json --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["phases"]["list"].size(), 5u);
  std::ifstream in(trace);
  auto t = nlohmann::json::parse(in);
  int marks = 0;
  for (const auto& e : t["traceEvents"]) marks += e.value("cat", "") == "phase" && e["ph"] != "e" ? 1 : 0;
  EXPECT_EQ(marks, 5);
}

std::string ConfigPath(const std::string& name) {
  return std::string(SHARDTUNE_TEST_DATA_DIR) + "/configs/" + name;
}

TEST(CliTest, EstimateFromRollConfig) {
  Result r = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " +
                    ConfigPath("roll_fsdp2_train.yaml"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("warning: "));  // learning_rate & co. are ignored
  EXPECT_THAT(r.err, ::testing::HasSubstr("/actor_train/training_args/learning_rate"));
}

// fsdp_size 4 of 8 GPUs: HSDP in groups of 4; ulysses_size 2; batch 1 x 32. The config's
// sequence (2048 + 4096) is longer than tiny-llama's 256, so --seq-len, a plan flag, overrides it.
// Without --model, the model is the one the config loads (verl's actor_rollout_ref.model.path
// "Qwen/Qwen3-8B"), said on the first line and in --json; --model, when given, wins; a model
// shardtune cannot read is a one-line error naming the key.
TEST(CliTest, FromConfigNamesTheModelWhenNoModelFlag) {
  const std::string file = ConfigPath("verl_grpo_qwen3_8b.yaml");
  Result text = RunCli("estimate --cluster 8xH100 --from " + file);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr(
                            "shardtune estimate: qwen3-8b (8.19 B parameters; named by " + file +
                            ":/actor_rollout_ref/model/path \"Qwen/Qwen3-8B\")"));
  Result j = RunCli("estimate --cluster 8xH100 --json --from " + file);
  ASSERT_EQ(j.code, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc.at("model").at("name"), "qwen3-8b");
  EXPECT_EQ(doc.at("model").at("parameters"), 8'190'735'360);  // HF num_parameters()
  EXPECT_THAT(doc.at("model").at("named_in").get<std::string>(),
              ::testing::HasSubstr(":/actor_rollout_ref/model/path"));
  // verl builds an untied model on rank 0's CPU and on the meta device elsewhere
  // (get_init_weight_context_manager): the model-load default follows it; the flag still wins.
  EXPECT_TRUE(doc.at("host").at("breakdown").contains("full model copy on rank 0")) << j.out;
  Result every = RunCli("estimate --cluster 8xH100 --json --model-load every-rank --from " + file);
  ASSERT_EQ(every.code, 0) << every.err;
  EXPECT_FALSE(nlohmann::json::parse(every.out).at("host").at("breakdown").contains(
      "full model copy on rank 0"));
  Result flag = RunCli("estimate --model tiny-llama --seq-len 256 --cluster 8xH100 --json --from " + file);
  ASSERT_EQ(flag.code, 0) << flag.err;
  EXPECT_EQ(nlohmann::json::parse(flag.out).at("model").at("name"), "tiny-llama");
  EXPECT_FALSE(nlohmann::json::parse(flag.out).at("model").contains("named_in"));
  ExpectOneLineError(RunCli("estimate --cluster 8xH100 --from " + file +
                            " --set actor_rollout_ref.model.path=mistralai/Mistral-Large-Instruct-2411"),
                     ":/actor_rollout_ref/model/path: expected a preset, a Hugging Face id of one");
  Result sim = RunCli("simulate --cluster 8xH100 --from " + file);
  ASSERT_EQ(sim.code, 0) << sim.err;
  EXPECT_THAT(sim.out, ::testing::HasSubstr("shardtune simulate: qwen3-8b (8.19 B parameters; named by"));
}

TEST(CliTest, FromConfigIsReadAndPlanFlagsOverrideIt) {
  Result r = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " +
                    ConfigPath("roll_rlvr_fsdp2_cp2.yaml") + " --seq-len 256 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("plan").at("strategy"), "hybrid_shard");
  EXPECT_EQ(j.at("plan").at("shard_group_size"), 4);
  EXPECT_EQ(j.at("plan").at("cp"), 2);
  EXPECT_EQ(j.at("plan").at("grad_accum"), 32);
  EXPECT_EQ(j.at("plan").at("seq_len"), 256);
  ASSERT_TRUE(j.at("warnings").is_array());
  bool ignored = false;
  for (const auto& w : j.at("warnings")) {
    ignored = ignored || w.get<std::string>().find("/actor_infer") != std::string::npos;
  }
  EXPECT_TRUE(ignored) << j.at("warnings").dump();
}

// Two files layer in order: the Trainer arguments set the batch over the Accelerate config.
TEST(CliTest, SeveralFromFilesApplyInOrder) {
  Result r = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " +
                    ConfigPath("accelerate_fsdp1.yaml") + " --from " +
                    ConfigPath("hf_trainer_args.json") + " --seq-len 128 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out).at("plan");
  EXPECT_EQ(plan.at("offload"), "none");  // the Trainer's fsdp options have no "offload"
  EXPECT_EQ(plan.at("micro_batch"), 2);
  EXPECT_EQ(plan.at("checkpointing"), "full");
}

TEST(CliTest, BadFromConfigsAreOneLineErrors) {
  // The sequence of the RLVR example is longer than tiny-gpt2's learned position table (a hard
  // limit, unlike rotary positions): the plan's problem names the file.
  ExpectOneLineError(RunCli("estimate --model tiny-gpt2 --cluster 8xH100 --from " +
                            ConfigPath("roll_rlvr_fsdp2_cp2.yaml")),
                     "roll_rlvr_fsdp2_cp2.yaml");
  // 8 GPUs in device_mapping, 16 in --cluster: tune searches the cluster it is given, so the
  // worker must have all of it (estimate takes the worker's 8: WorkerOnPartOfThePool).
  ExpectOneLineError(RunCli("tune --model tiny-llama --cluster 2x8xH100 --from " +
                            ConfigPath("roll_fsdp2_train.yaml")),
                     "device_mapping: expected the --cluster world size 16 ranks, got 8");
  std::string bad = WriteFile("bad_accelerate.yaml",
                              "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FUL_SHARD\n");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + bad),
                     "/fsdp_config/fsdp_sharding_strategy: expected one of FULL_SHARD");
  ExpectOneLineError(RunCli("estimate --model tiny-gpt2 --cluster 8xH100 --from " +
                            ConfigPath("accelerate_fsdp2.yaml")),
                     "expected the model's block class \"GPT2Block\", got \"LlamaDecoderLayer\"");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --from " + ConfigPath("verl_sft.yaml") +
                            " --from-format rol"),
                     "--from-format: expected one of accelerate, hf-trainer, roll, verl");
}

// No silent defaults for the sequence length (issue #45): a config that carries none needs
// --seq-len; with no config and no flag the model's maximum is capped at 8,192 tokens
// (cli/plan_flags.h kDefaultSeqLenTokens) and the answer's first line says so.
TEST(CliTest, SequenceLengthIsNeverTheModelsMaximumSilently) {
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --from " +
                            ConfigPath("accelerate_fsdp2.yaml")),
                     "expected a sequence length, got none");
  Result given = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " +
                        ConfigPath("accelerate_fsdp2.yaml") + " --seq-len 128 --json");
  ASSERT_EQ(given.code, 0) << given.err;
  EXPECT_EQ(nlohmann::json::parse(given.out).at("seq_len_source"),
            "128 tokens per sequence (--seq-len)");
  // Llama 3.1: max_position_embeddings 131072.
  Result capped = RunCli("estimate --model llama3.1-8b --cluster 8xH100 --json");
  ASSERT_EQ(capped.code, 0) << capped.err;
  auto j = nlohmann::json::parse(capped.out);
  EXPECT_EQ(j.at("plan").at("seq_len"), 8192);
  EXPECT_THAT(j.at("seq_len_source").get<std::string>(),
              ::testing::HasSubstr("131072-token maximum capped at 8192"));
  Result text = RunCli("estimate --model llama3.1-8b --cluster 8xH100");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out.substr(0, text.out.find('\n')),
              ::testing::HasSubstr("8192 tokens per sequence (no --seq-len given"));
}

// Hydra-style overrides on the --from config, as a verl launch script writes them.
TEST(CliTest, SetOverridesTheFromConfig) {
  std::string file = WriteFile("verl_set.yaml",
                               "trainer:\n  n_gpus_per_node: 8\n  nnodes: 1\n"
                               "data:\n  max_prompt_length: 64\n  max_response_length: 64\n"
                               "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 16\n"
                               "    ppo_micro_batch_size_per_gpu: 1\n");
  Result r = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                    " --set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"
                    " --set data.max_response_length=192 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out).at("plan");
  EXPECT_EQ(plan.at("micro_batch"), 2);
  EXPECT_EQ(plan.at("grad_accum"), 1);  // 16 prompts / 8 ranks / 2
  EXPECT_EQ(plan.at("seq_len"), 256);
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --set a.b=1"),
                     "--set a.b=1: expected a --from config to override, got no --from");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                            " --set +data.max_prompt_length=1"),
                     "expected key data.max_prompt_length to be absent or null");
}

// verl's engine SFT trainer (sft_trainer_engine.yaml as composed): tune names its own budget key
// and --export verl writes that trainer's config, not a PPO actor's.
TEST(CliTest, VerlEngineSftTunesAndExportsAsItsOwnTrainer) {
  std::string file = WriteFile("verl_sft_engine.yaml",
                               "data:\n  train_batch_size: 64\n  use_dynamic_bsz: true\n"
                               "  max_token_len_per_gpu: 1024\n  max_length: 256\n"
                               "model:\n  enable_gradient_checkpointing: true\n"
                               "engine:\n  strategy: fsdp2\n");
  Result r = RunCli("tune --model tiny-llama --cluster 8xH100 --from " + file + " --export verl");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("verl data.max_token_len_per_gpu="));
  EXPECT_THAT(r.out, ::testing::HasSubstr("  - sft_trainer_engine\n"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("\nengine:\n"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("actor_rollout_ref")));
}

// verl's token budget: the plan line says packed micro-batches, and the answer gives how many
// tokens a micro-batch can hold and still fit (LargestFittingMicroBatchTokens).
TEST(CliTest, VerlTokenBudgetIsEstimatedAsPackedRows) {
  std::string file = WriteFile("verl_dynamic.yaml",
                               "trainer:\n  n_gpus_per_node: 8\n  nnodes: 1\n"
                               "data:\n  max_prompt_length: 64\n  max_response_length: 192\n"
                               "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 64\n"
                               "    use_dynamic_bsz: true\n    ppo_max_token_len_per_gpu: 1024\n");
  Result text = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("packed micro-batches of up to 1024 tokens"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("loss: verl's log-prob path"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("packed tokens: fits while a micro-batch holds at most"));
  // A micro-batch never holds more than its rank's mini-batch: 16 prompts / 8 ranks = 2
  // sequences of at most 64 + 192 tokens, 512, under the 1024-token budget.
  Result small = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                        " --set actor_rollout_ref.actor.ppo_mini_batch_size=16");
  ASSERT_EQ(small.code, 0) << small.err;
  EXPECT_THAT(small.out, ::testing::HasSubstr("packed micro-batches of up to 512 tokens"));
  Result r = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("plan").at("packed_seq_len"), 256);
  auto cap = j.at("micro_batch_token_capacity");
  EXPECT_EQ(cap.at("plan_tokens"), 1024);
  EXPECT_EQ(cap.at("longest_sequence"), 256);
  // tiny-llama on an H100 fits far more than 1024 tokens.
  EXPECT_GT(cap.at("max_tokens").get<int64_t>(), 1024);
  // The same rows from the flags.
  Result flags = RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                        "--max-tokens-per-micro-batch 1024 --json");
  ASSERT_EQ(flags.code, 0) << flags.err;
  auto fp = nlohmann::json::parse(flags.out).at("plan");
  EXPECT_EQ(fp.at("seq_len"), 1024);
  EXPECT_EQ(fp.at("packed_seq_len"), 256);
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                            "--max-tokens-per-micro-batch 100"),
                     "expected at least the longest sequence");
  // On a packed plan from a config, --seq-len sets the longest sequence and keeps the row.
  Result longest = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                          " --seq-len 128 --json");
  ASSERT_EQ(longest.code, 0) << longest.err;
  auto lp = nlohmann::json::parse(longest.out).at("plan");
  EXPECT_EQ(lp.at("seq_len"), 1024);
  EXPECT_EQ(lp.at("packed_seq_len"), 128);
  // Attention spans one packed sequence: a row of 1024 tokens holding sequences of 256 costs the
  // model FLOPs per token of 256-token sequences (6N + 12 L q_dim S with S = 256), not 1024's.
  auto flops = [&](const std::string& args) {
    Result sim = RunCli("simulate --model tiny-llama --cluster 8xH100 " + args + " --json");
    EXPECT_EQ(sim.code, 0) << sim.err;
    return nlohmann::json::parse(sim.out).at("model_flops_per_token").get<double>();
  };
  EXPECT_DOUBLE_EQ(flops("--seq-len 256 --max-tokens-per-micro-batch 1024"), flops("--seq-len 256"));
  EXPECT_GT(flops("--seq-len 256"), flops("--seq-len 128"));  // the FLOPs do depend on S
  // --global-batch counts a packed plan's sequences: 64 over 8 ranks, 8 x 256 tokens per rank in
  // rows of 1024 = 2 rows (min(8, ceil(8 x 256 / 1024))). A row of four 256-token sequences
  // costs what a micro-batch of four does: same GEMMs, attention within each sequence (the walk
  // had charged the row's 1024-token attention to the matmuls), so the step times are equal.
  auto step = [&](const std::string& args, int want_accum) {
    Result sim = RunCli("simulate --model tiny-llama --cluster 8xH100 " + args + " --json");
    EXPECT_EQ(sim.code, 0) << sim.err;
    auto j = nlohmann::json::parse(sim.out);
    EXPECT_EQ(j.at("plan").at("grad_accum"), want_accum) << args;
    return j.at("step_time_s").get<double>();
  };
  EXPECT_DOUBLE_EQ(step("--seq-len 256 --max-tokens-per-micro-batch 1024 --global-batch 64", 2),
                   step("--seq-len 256 --micro-batch 4 --global-batch 64", 2));
  // verl balances its rows instead of capping them: 16 sequences of 256 per rank under 1000
  // tokens make ceil(4096 / 1000) = 5 rows of up to ceil(16 / 5) = 4 sequences, 1024 tokens,
  // above the budget: judged there. 8 per rank make 3 rows of up to 3 = 768: the row stays 1000.
  Result balanced = RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                           "--max-tokens-per-micro-batch 1000 --global-batch 128 --json");
  ASSERT_EQ(balanced.code, 0) << balanced.err;
  auto bp = nlohmann::json::parse(balanced.out).at("plan");
  EXPECT_EQ(bp.at("seq_len"), 1024);
  EXPECT_EQ(bp.at("grad_accum"), 5);
  Result balanced_text = RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                                "--max-tokens-per-micro-batch 1000 --global-batch 128");
  ASSERT_EQ(balanced_text.code, 0) << balanced_text.err;
  EXPECT_THAT(balanced_text.err, ::testing::HasSubstr("make 5 micro-batches of up to 4 sequences, 1024 tokens"));
  EXPECT_THAT(balanced_text.out, ::testing::HasSubstr("packed rows of up to 1024 tokens (verl's largest under the budget 1000)"));
  Result capped = RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                         "--max-tokens-per-micro-batch 1000 --global-batch 64 --json");
  ASSERT_EQ(capped.code, 0) << capped.err;
  EXPECT_EQ(nlohmann::json::parse(capped.out).at("plan").at("seq_len"), 1000);
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                            "--max-tokens-per-micro-batch 1024 --global-batch 64 --grad-accum 3"),
                     "--grad-accum 3: --global-batch 64 packed sequences of up to 256 tokens fill 2 rows");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                            "--max-tokens-per-micro-batch 1024 --global-batch 60"),
                     "--global-batch: expected a multiple of the 8 data-parallel ranks");
  // --lengths mean:N judges the typical micro-batch too; its errors name the flag.
  Result typical = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                          " --lengths mean:100 --json");
  ASSERT_EQ(typical.code, 0) << typical.err;
  auto tc = nlohmann::json::parse(typical.out).at("micro_batch_token_capacity");
  EXPECT_EQ(tc.at("typical_tokens"), 1024);  // a budget's rows fill up whatever the lengths
  EXPECT_TRUE(tc.at("typical_fits").get<bool>());
  // run's uniform:MIN-MAX lengths are judged at their mean, (60 + 140) / 2 = 100.
  Result uniform = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                          " --lengths uniform:60-140 --json");
  ASSERT_EQ(uniform.code, 0) << uniform.err;
  auto uc = nlohmann::json::parse(uniform.out).at("micro_batch_token_capacity");
  EXPECT_TRUE(uc.contains("verl_rows_sampled"));  // a distribution: verl's rows are formed too
  auto same = [](nlohmann::json c) {
    c.erase("summary");
    c.erase("verl_rows_sampled");
    return c;
  };
  EXPECT_EQ(same(uc), same(tc));
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                            " --lengths 100"),
                     "--lengths: expected mean:N");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --from " + file +
                            " --lengths mean:300"),
                     "--lengths: expected a mean of at most the longest sequence 256, got 300");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 128 "
                            "--lengths mean:100"),
                     "--lengths: expected a plan with packed micro-batches");
}

// tune searches a packed plan's token budget: rows of whole longest sequences, as many per step
// as the config's sequences need (ppo_mini_batch_size 64 x rollout.n 4 = 256 per step, 32 per
// rank at 2048 tokens each), then the largest budget the winner fits at, to 256 tokens, and the
// step there; the verl export writes the budget.
TEST(CliTest, TuneSearchesTheTokenBudgetOfAPackedPlan) {
  std::string file = WriteFile("verl_budget_tune.yaml",
                               "trainer:\n  n_gpus_per_node: 8\n  nnodes: 1\n"
                               "data:\n  max_prompt_length: 512\n  max_response_length: 1536\n"
                               "actor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-0.5B\n"
                               "  actor:\n    ppo_mini_batch_size: 64\n    use_dynamic_bsz: true\n"
                               "    ppo_max_token_len_per_gpu: 16384\n  rollout:\n    n: 4\n");
  std::string out = TempPath("tuned_budget_" + std::to_string(::getpid()) + ".json");
  Result r = RunCli("tune --cluster 8xH100 --json --out " + out + " --from " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("global_batch"), 64 * 4);
  EXPECT_EQ(j.at("seq_len"), 512 + 1536);
  auto best = j.at("top").at(0).at("plan");
  EXPECT_EQ(best.at("packed_seq_len"), 2048);
  const int64_t row = best.at("micro_batch").get<int64_t>() * best.at("seq_len").get<int64_t>();
  const int64_t cp = best.at("cp").get<int64_t>();
  ASSERT_EQ(row % 2048, 0);
  EXPECT_EQ(row / 2048 * best.at("grad_accum").get<int64_t>(), 256 * cp / 8);  // every sequence
  auto tb = j.at("token_budget");
  const int64_t max_tokens = tb.at("max_tokens").get<int64_t>();
  EXPECT_EQ(tb.at("row_tokens"), row);
  EXPECT_GE(max_tokens, row);
  EXPECT_EQ(max_tokens % 256, 0);
  EXPECT_EQ(tb.at("verl_ppo_max_token_len_per_gpu"), max_tokens / cp);
  EXPECT_EQ(tb.at("micro_batches_at_max"), (256 * cp / 8 * 2048 + max_tokens - 1) / max_tokens);
  // estimate's own, exact capacity of the winner agrees to the granularity.
  Result e = RunCli("estimate --model qwen2.5-0.5b --cluster 8xH100 --json --plan " + out);
  ASSERT_EQ(e.code, 0) << e.err;
  const int64_t exact =
      nlohmann::json::parse(e.out).at("micro_batch_token_capacity").at("max_tokens").get<int64_t>();
  EXPECT_NEAR(static_cast<double>(exact), static_cast<double>(max_tokens), 512.0);
  Result text = RunCli("tune --cluster 8xH100 --export verl --from " + file);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("Token budget (packed micro-batches)"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("use_dynamic_bsz: true"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("ppo_max_token_len_per_gpu: " + std::to_string(row / cp)));
  // --export verl ranks only plans verl can run, and says what it left out.
  Result verl = RunCli("tune --cluster 8xH100 --json --export verl --from " + file);
  ASSERT_EQ(verl.code, 0) << verl.err;
  auto vj = nlohmann::json::parse(verl.out);
  ASSERT_FALSE(vj.at("top").empty());
  for (const auto& t : vj.at("top")) {
    const auto& p = t.at("plan");
    EXPECT_NE(p.at("strategy"), "no_shard");
    EXPECT_EQ(p.at("wrap").at("policy"), "block") << p.dump();
    EXPECT_FALSE(p.at("wrap").at("embedding_unit").get<bool>());
    EXPECT_FALSE(p.at("wrap").at("head_unit").get<bool>());
    EXPECT_TRUE(p.at("checkpointing") == "none" || p.at("checkpointing") == "full") << p.dump();
    EXPECT_TRUE(p.at("offload") == "none" || p.at("offload") == "all") << p.dump();
    EXPECT_EQ(p.at("forward_prefetch"), false);
  }
  EXPECT_THAT(vj.at("warnings").dump(),
              ::testing::HasSubstr("--export verl: searched only plans verl's FSDP2 workers run"));
  // From flags: a packed plan needs the sequences per step, and a fixed budget must hold whole
  // longest sequences (the search's rows); both are one-line errors naming the flag.
  ExpectOneLineError(RunCli("tune --model qwen2.5-0.5b --cluster 8xH100 --seq-len 2048 "
                            "--max-tokens-per-micro-batch 4096"),
                     "packed micro-batches: expected --global-batch");
  ExpectOneLineError(RunCli("tune --model qwen2.5-0.5b --cluster 8xH100 --seq-len 2048 "
                            "--max-tokens-per-micro-batch 3000 --global-batch 64"),
                     "--max-tokens-per-micro-batch: expected a multiple of the longest sequence 2048");
  // The config's own split and samples per prompt are kept: 64 prompts x n 4.
  EXPECT_THAT(text.out, ::testing::HasSubstr("max_prompt_length: 512\n  max_response_length: 1536"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("rollout:\n    n: 4\n"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("ppo_mini_batch_size: 64 "));
  std::remove(out.c_str());
}

// A role that fits alone with every sequence at the maximum but not beside a rollout engine that
// keeps 95% of the GPU (free_cache_engine false): the verdict is the co-location's, not a mean
// length above the maximum ("average more than" 5197 tokens "all at the 3072-token maximum" was
// printed for verl's Qwen2.5-VL LoRA example).
TEST(CliTest, CoLocationFailureIsNotALengthThreshold) {
  const std::string cfg = WriteFile("coloc.yaml",
                                    "data:\n  max_prompt_length: 1024\n  max_response_length: 1024\n"
                                    "actor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-0.5B\n"
                                    "  actor:\n    ppo_mini_batch_size: 8\n    ppo_micro_batch_size_per_gpu: 4\n"
                                    "  rollout:\n    name: vllm\n    n: 1\n    gpu_memory_utilization: 0.95\n"
                                    "    free_cache_engine: false\n");
  Result r = RunCli("estimate --cluster 1xH100 --json --from " + cfg);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.at("verdict").at("fits").get<bool>());
  const std::string text = j.at("verdict").at("text");
  EXPECT_THAT(text, ::testing::HasSubstr("beside the co-located roles"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("average more than")));
}

// verl's GRPO example for Qwen3-8B (use_remove_padding, 32 sequences of up to 512 + 1024 tokens
// per micro-batch): a micro-batch holds the data's tokens. At the worst the config admits (all 32
// at 1536) the step runs out; the verdict says up to which mean length it fits (the token
// capacity / 32) and how to cap it, and with --lengths judges at the data's typical micro-batch.
TEST(CliTest, VariableLengthMicroBatchesAreJudgedAtTheDatasLengths) {
  const std::string file = ConfigPath("verl_grpo_qwen3_8b.yaml");
  Result worst = RunCli("estimate --cluster 8xH100 --json --from " + file);
  ASSERT_EQ(worst.code, 0) << worst.err;
  auto w = nlohmann::json::parse(worst.out);
  const int64_t max_tokens = w.at("micro_batch_token_capacity").at("max_tokens").get<int64_t>();
  ASSERT_GT(max_tokens, 32 * 100);
  ASSERT_LT(max_tokens, 32 * 1536);  // the worst case does not fit
  EXPECT_FALSE(w.at("verdict").at("fits").get<bool>());
  EXPECT_FALSE(w.at("verdict").at("fits_worst_case").get<bool>());
  const std::string text = w.at("verdict").at("text");
  EXPECT_THAT(text, ::testing::HasSubstr("runs out when a micro-batch's 32 sequences average more than " +
                                         std::to_string(max_tokens / 32) + " tokens"));
  EXPECT_THAT(text, ::testing::HasSubstr("ppo_max_token_len_per_gpu <= " + std::to_string(max_tokens)));
  // A mean well under the capacity: the typical micro-batch (32 x 600 tokens) fits.
  Result typical = RunCli("estimate --cluster 8xH100 --json --lengths mean:600 --from " + file);
  ASSERT_EQ(typical.code, 0) << typical.err;
  auto t = nlohmann::json::parse(typical.out);
  EXPECT_EQ(t.at("micro_batch_token_capacity").at("typical_tokens"), 32 * 600);
  EXPECT_TRUE(t.at("verdict").at("fits").get<bool>());
  EXPECT_FALSE(t.at("verdict").at("fits_worst_case").get<bool>());
  EXPECT_THAT(t.at("verdict").at("text").get<std::string>(),
              ::testing::StartsWith("fits at the given lengths (the typical micro-batch, 19200 tokens"));
  // A mean above it: still runs out.
  Result longer = RunCli("estimate --cluster 8xH100 --json --lengths mean:" +
                         std::to_string(max_tokens / 32 + 64) + " --from " + file);
  ASSERT_EQ(longer.code, 0) << longer.err;
  EXPECT_FALSE(nlohmann::json::parse(longer.out).at("verdict").at("fits").get<bool>());
}

// Advice that was checked (issue #49 item 7): a job that runs the host out at load is re-estimated
// with each load the answer suggests, and the answer says what each leaves. Llama-3-8B on 8 H100s
// under a 200 GiB host limit: every rank's full copy does not fit, and with --model-load meta (or
// rank0) the job loads but its steady step does not fit the GPU, as estimate --model-load meta
// itself says.
TEST(CliTest, LoadAdviceIsReEstimatedBeforeItIsOffered) {
  const std::string job = "estimate --model llama3-8b --cluster 8xH100 --host-memory-limit 200GiB";
  Result r = RunCli(job + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const std::string verdict = j.at("verdict").at("text").get<std::string>();
  Result meta = RunCli(job + " --model-load meta --json");
  ASSERT_EQ(meta.code, 0) << meta.err;
  auto m = nlohmann::json::parse(meta.out);
  EXPECT_FALSE(m.at("fits").get<bool>());
  const std::string meta_verdict = m.at("verdict").at("text").get<std::string>();
  EXPECT_THAT(meta_verdict, ::testing::HasSubstr("runs out in steady step"));
  EXPECT_THAT(verdict, ::testing::HasSubstr("--model-load meta (meta-device init, sharded load): loads, "
                                            "then runs out in steady step"));
  bool advised = false;
  for (const auto& line : j.at("advice")) {
    const std::string a = line.get<std::string>();
    if (a.rfind("Host RAM runs out while loading", 0) != 0) continue;
    advised = true;
    EXPECT_THAT(a, ::testing::HasSubstr("loads, then runs out in steady step"));
    EXPECT_THAT(a, ::testing::Not(::testing::HasSubstr("avoids it")));
  }
  EXPECT_TRUE(advised);
}

// One figure per plan (issue #49 item 5): a cp verdict's fastest plan needs what the top list
// says the same plan needs (both the caching-allocator replay's figure; the verdict had quoted
// the screening walk's, 72.7 GiB beside the top list's 74.8 GiB for this job).
TEST(CliTest, TuneVerdictsQuoteTheTopListsFigure) {
  Result r = RunCli("tune --model llama3.1-8b --cluster 8xH100 --seq-len 65536 --global-batch 8 --top 10 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  int matched = 0;
  for (const auto& v : j.at("cp_verdicts")) {
    for (const auto& t : j.at("top")) {
      if (t.at("key") != v.at("best_key")) continue;
      EXPECT_EQ(t.at("required_bytes"), v.at("best_required_bytes")) << v.at("best_key");
      ++matched;
    }
  }
  EXPECT_GE(matched, 1);
}

// With a length distribution, estimate forms verl's rows over simulated steps of those lengths
// (model/packing.h LargestPackedRowOverSteps, the rule `run` trains with) and says how far above
// the budget they reach and whether the largest fits.
TEST(CliTest, EstimateSamplesVerlsRowsAtTheGivenLengths) {
  Result r = RunCli("estimate --model tiny-llama --cluster 8xH100 --seq-len 256 "
                    "--max-tokens-per-micro-batch 512 --global-batch 256 --lengths uniform:32-256 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto cap = nlohmann::json::parse(r.out).at("micro_batch_token_capacity");
  const auto& s = cap.at("verl_rows_sampled");
  namespace model = shardtune::model;
  const int64_t want = model::LargestPackedRowOverSteps(
      model::SequenceLengths::Parse("uniform:32-256", "--lengths", 256), 0, 256, 512, 32, 8, 256);
  EXPECT_EQ(s.at("largest_row_tokens"), want);
  EXPECT_EQ(s.at("budget_tokens"), 512);
  EXPECT_GT(want, 512);  // balanced, not capped
  EXPECT_EQ(s.at("fits"), want <= cap.at("max_tokens").get<int64_t>());
  EXPECT_THAT(cap.at("summary").get<std::string>(),
              ::testing::HasSubstr("with uniform:32-256 lengths verl's balanced rows reached " +
                                   std::to_string(want) + " tokens in 256 simulated steps (budget 512)"));
}

// --help a person can scan (issue #49 item 9): options under headings, and the plan flags show
// the defaults the plan starts from (model::Plan{}'s), for every planning command.
TEST(CliTest, HelpGroupsOptionsAndShowsThePlansDefaults) {
  const shardtune::model::Plan d;
  namespace model = shardtune::model;
  for (const char* cmd : {"estimate", "simulate", "tune"}) {
    Result r = RunCli(std::string(cmd) + " --help");
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* heading : {"Model and cluster:", "Plan: sharding and wrapping:", "Plan: batch and sequences:",
                                "Plan: memory policy:", "Plan: precision and optimizer:", "Output:"}) {
      EXPECT_THAT(r.out, ::testing::HasSubstr(heading)) << cmd;
    }
    EXPECT_THAT(r.out, ::testing::HasSubstr("--checkpointing TEXT=" + std::string(model::ToString(d.checkpointing))));
    EXPECT_THAT(r.out, ::testing::HasSubstr("--offload TEXT=" + std::string(model::ToString(d.offload))));
    EXPECT_THAT(r.out, ::testing::HasSubstr("--micro-batch INT=" + std::to_string(d.micro_batch)));
    EXPECT_THAT(r.out, ::testing::HasSubstr("--strategy TEXT=" + std::string(model::ToString(d.strategy))));
    // Every option but --help sits under a heading: the untitled "Options:" block holds only it.
    const size_t at = r.out.find("Options:\n");
    ASSERT_NE(at, std::string::npos) << cmd;
    const std::string block = r.out.substr(at, r.out.find("\n\n", at) - at);
    EXPECT_EQ(block.find("\n  --"), std::string::npos) << cmd << ":\n" << block;
  }
  // A shown default is only shown: the plan is the same with and without the flag at it.
  Result a = RunCli("estimate --model llama3-8b --cluster 8xH100 --json");
  Result b = RunCli("estimate --model llama3-8b --cluster 8xH100 --checkpointing none --micro-batch 1 --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out).at("plan"), nlohmann::json::parse(b.out).at("plan"));
}

// --json says what was used (issue #49 item 8): the resolved sequence length and shard group,
// not the plan's "0: the default"; and pasting that plan back gives the same answer. A typed
// --seq-len 0 is an error, not the default.
TEST(CliTest, JsonPlanHoldsTheResolvedValues) {
  Result r = RunCli("estimate --model llama3-8b --cluster 2x8xH100 --strategy hybrid_shard --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("plan").at("seq_len"), 8192);  // llama3-8b's max_seq_len, the default
  EXPECT_EQ(j.at("plan").at("shard_group_size"), 8);  // hybrid: the GPUs of a node
  std::string plan = WriteFile("resolved_plan.json", j.at("plan").dump());
  Result again = RunCli("estimate --model llama3-8b --cluster 2x8xH100 --plan " + plan + " --json");
  ASSERT_EQ(again.code, 0) << again.err;
  auto k = nlohmann::json::parse(again.out);
  EXPECT_EQ(k.at("plan"), j.at("plan"));
  EXPECT_EQ(k.at("per_rank").at("peak_bytes"), j.at("per_rank").at("peak_bytes"));
  Result full = RunCli("estimate --model llama3-8b --cluster 2x8xH100 --json");
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_EQ(nlohmann::json::parse(full.out).at("plan").at("shard_group_size"), 16);
  ExpectOneLineError(RunCli("estimate --model llama3-8b --cluster 8xH100 --seq-len 0"),
                     "--seq-len: expected a whole number of tokens >= 1, got 0");
}

// verl's vLLM rollout shares the GPUs: while it generates it holds gpu_memory_utilization x the
// device's memory (+ its CUDA context) beside the actor's resident fp32 parameters and AdamW
// (16 bytes per parameter over 8 ranks) and the trainer process's context and NCCL buffers.
// Llama-3-8B GRPO on 8 H100s: the actor's step fits, but at utilization 0.9 the rollout does not
// (0.9 x 79.1 GiB + ~15 GiB of resident states); at 0.5 it does.
TEST(CliTest, VerlRolloutEngineIsCoLocatedWithTheResidentTrainer) {
  auto config = [&](const std::string& util) {
    return WriteFile("verl_grpo_" + util + ".yaml",
                     "algorithm:\n  adv_estimator: grpo\n"
                     "data:\n  max_prompt_length: 256\n  max_response_length: 256\n"
                     "trainer:\n  n_gpus_per_node: 8\n  nnodes: 1\n"
                     "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 8\n"
                     "    ppo_micro_batch_size_per_gpu: 1\n"
                     "  rollout:\n    name: vllm\n    gpu_memory_utilization: " + util + "\n");
  };
  Result r = RunCli("estimate --model llama3-8b --cluster 8xH100 --from " + config("0.9") + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& c = j.at("colocation");
  ASSERT_EQ(c.at("roles").size(), 2u);
  EXPECT_EQ(c["roles"][1]["role"], "rollout (vllm)");
  const int64_t capacity = c.at("capacity_bytes").get<int64_t>();
  const int64_t context = int64_t{621} << 20;  // MemoryConstants::cuda_context
  const int64_t share = static_cast<int64_t>(0.9 * static_cast<double>(capacity));
  EXPECT_EQ(c["roles"][1]["required_bytes"].get<int64_t>(), share + context);
  const auto& actor_residue = c["roles"][0]["idle_residue"];
  int64_t resident = actor_residue.at("sharded parameters").get<int64_t>() +
                     actor_residue.at("optimizer state").get<int64_t>();
  // The trainer process (verl: one for its roles): context, NCCL buffers, cuBLAS's 32 MiB.
  int64_t outside = int64_t{32} << 20;
  for (const auto& [k, v] : j.at("per_rank").at("outside_allocator").items()) outside += v.get<int64_t>();
  EXPECT_EQ(c["roles"][1]["colocated_required_bytes"].get<int64_t>(), share + context + resident + outside);
  EXPECT_EQ(c.at("peak_role"), "rollout (vllm)");
  EXPECT_FALSE(j.at("fits").get<bool>());
  EXPECT_FALSE(j.at("verdict").at("fits").get<bool>());
  Result half = RunCli("estimate --model llama3-8b --cluster 8xH100 --from " + config("0.5") + " --json");
  ASSERT_EQ(half.code, 0) << half.err;
  EXPECT_TRUE(nlohmann::json::parse(half.out).at("colocation").at("fits").get<bool>());
}

// A verl PPO config (adv_estimator gae) trains a critic on the actor's GPUs, in the same process:
// estimate co-locates it (its model with a value head) and gives one verdict. Llama-3-8B on 2
// H100s: each role alone just fits; beside the other's resident states (fp32 parameters and
// AdamW, 16 bytes per parameter over 2 ranks) neither does, and the JSON, the verdict and the
// last line say so together.
TEST(CliTest, VerlPpoCriticIsCoLocatedAndTheVerdictIsOne) {
  std::string file = WriteFile("verl_ppo.yaml",
                               "algorithm:\n  adv_estimator: gae\n"
                               "data:\n  max_prompt_length: 256\n  max_response_length: 256\n"
                               "trainer:\n  n_gpus_per_node: 2\n  nnodes: 1\n"
                               "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 4\n"
                               "    ppo_micro_batch_size_per_gpu: 1\n"
                               "critic:\n  ppo_micro_batch_size_per_gpu: 1\n");
  Result r = RunCli("estimate --model llama3-8b --cluster 2xH100 --from " + file + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& c = j.at("colocation");
  ASSERT_EQ(c.at("roles").size(), 2u);
  EXPECT_EQ(c["roles"][0]["role"], "actor");
  EXPECT_EQ(c["roles"][1]["role"], "critic (train)");
  // The critic's own figure is below the actor's: no [V, H] head, no vocabulary logits.
  EXPECT_LT(c["roles"][1]["required_bytes"].get<int64_t>(),
            c["roles"][0]["required_bytes"].get<int64_t>());
  int64_t actor = c["roles"][0]["required_bytes"].get<int64_t>();
  int64_t critic_idle = c["roles"][1]["idle_residue_bytes"].get<int64_t>();
  EXPECT_EQ(c["roles"][0]["colocated_required_bytes"].get<int64_t>(), actor + critic_idle);
  EXPECT_FALSE(c.at("fits").get<bool>());
  EXPECT_FALSE(j.at("fits").get<bool>());
  EXPECT_FALSE(j.at("verdict").at("fits").get<bool>());
  Result text = RunCli("estimate --model llama3-8b --cluster 2xH100 --from " + file);
  ASSERT_EQ(text.code, 0) << text.err;
  std::string last = text.out.substr(text.out.rfind("  verdict:"));
  EXPECT_THAT(last, ::testing::HasSubstr("beside the co-located roles"));
  EXPECT_EQ(last, "  verdict: " + j.at("verdict").at("text").get<std::string>() + "\n");
  // --from-worker critic: the critic alone, on the model with a value head.
  Result critic = RunCli("estimate --model llama3-8b --cluster 2xH100 --from " + file +
                         " --from-worker critic --json");
  ASSERT_EQ(critic.code, 0) << critic.err;
  EXPECT_THAT(nlohmann::json::parse(critic.out).at("model").at("name").get<std::string>(),
              ::testing::HasSubstr("value head"));
}

// A ROLL worker on part of the pool (device_mapping list(range(0,8)) of 2 nodes x 8): estimate
// runs on its 8 GPUs, one node, and says so; the per-GPU figures equal a 1x8 cluster's.
TEST(CliTest, WorkerOnPartOfThePool) {
  Result r = RunCli("estimate --model tiny-llama --cluster 2x8xH100 --from " +
                    ConfigPath("roll_fsdp2_train.yaml") + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("cluster").at("world_size"), 8);
  EXPECT_THAT(j.at("cluster").at("name").get<std::string>(), ::testing::HasSubstr("8 of its GPUs"));
  bool said = false;
  for (const auto& w : j.at("warnings")) {
    said = said || w.get<std::string>().find("the worker runs on 8 of the --cluster's 16 GPUs") !=
                       std::string::npos;
  }
  EXPECT_TRUE(said) << j.at("warnings").dump();
  Result one = RunCli("estimate --model tiny-llama --cluster 8xH100 --from " +
                      ConfigPath("roll_fsdp2_train.yaml") + " --json");
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(j.at("per_rank").at("required_bytes"),
            nlohmann::json::parse(one.out).at("per_rank").at("required_bytes"));
}

TEST(CliTest, TuneFromConfigKeepsItsGlobalBatch) {
  Result r = RunCli("tune --model tiny-llama --cluster 8xH100 --from " +
                    ConfigPath("roll_fsdp2_train.yaml") + " --top 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j.at("top").empty()) << r.out;
  auto best = j.at("top").at(0).at("plan");
  // 1 sequence x 32 micro-batches x 8 ranks = 256 sequences per step, whatever the split.
  EXPECT_EQ(best.at("micro_batch").get<int>() * best.at("grad_accum").get<int>() * 8, 256);
  EXPECT_EQ(best.at("seq_len"), 256);
}

TEST(CliTest, BadJobSettingsAreOneLineErrors) {
  ExpectOneLineError(RunCli("estimate --allocator cudaMallocAsync"), "--allocator");
  ExpectOneLineError(RunCli("estimate --host-memory-limit=-1GiB"), "--host-memory-limit");
  ExpectOneLineError(RunCli("estimate --host-memory-limit 64GB"), "--host-memory-limit");
  ExpectOneLineError(RunCli("estimate --checkpoint-format zip"), "--checkpoint-format");
  ExpectOneLineError(RunCli("estimate --load-dtype int8"), "--load-dtype");
}

// --- per-phase memory (issue #11): validate compares each measured phase with the estimate's ---

TEST(CliTest, ValidateComparesEveryMeasuredPhaseOfARealRun) {
  auto m = nlohmann::json::parse(std::ifstream(MeasuredRun()));
  std::set<std::string> measured;
  for (const auto& p : m["phases"]) measured.insert(p["name"].get<std::string>());
  // A fresh 3-step run with a final checkpoint: no resume.
  EXPECT_EQ(measured, (std::set<std::string>{"model load", "step 0", "steady step", "checkpoint save"}));
  Result r = RunCli("validate --measurements " + MeasuredRun() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  std::map<std::string, double> rows;
  for (const auto& row : j["runs"][0]["rows"]) rows[row["name"].get<std::string>()] = row["measured"];
  const std::map<std::string, std::string> names = {{"model load", "memory: load peak"},
                                                    {"step 0", "memory: step 0 peak"},
                                                    {"steady step", "memory: steady peak"},
                                                    {"checkpoint save", "memory: save peak"}};
  for (const auto& p : m["phases"]) {
    const std::string& row = names.at(p["name"].get<std::string>());
    ASSERT_EQ(rows.count(row), 1u) << row;
    EXPECT_EQ(rows[row], p["peak_tracked_bytes"].get<double>()) << row;
  }
  EXPECT_EQ(rows.count("memory: resume peak"), 0u);
  Result text = RunCli("validate --measurements " + MeasuredRun());
  EXPECT_THAT(text.out, ::testing::HasSubstr("memory: steady peak"));
}

// Vision-language models (#43): the images are part of the job; bad image flags are one-line
// errors naming the flag; a text model refuses images; run names the towers its executor lacks.
TEST(CliTest, VisionLanguageJobsTakeImages) {
  const std::string m = std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/qwen2.5-vl-7b.config.json";
  Result text = RunCli("estimate --model " + m + " --cluster 8xH100 --seq-len 4096 --json");
  Result img = RunCli("estimate --model " + m + " --cluster 8xH100 --seq-len 4096 --images 2 "
                      "--image-pixels 1280x720 --json");
  ASSERT_EQ(text.code, 0) << text.err;
  ASSERT_EQ(img.code, 0) << img.err;
  nlohmann::json jt = nlohmann::json::parse(text.out), ji = nlohmann::json::parse(img.out);
  // smart_resize: 1280 x 720 -> 1288 x 728, 46 x 26 merged tokens = 1196 an image.
  EXPECT_EQ(ji.at("plan").at("image_tokens").get<int64_t>(), 2 * 1196);
  EXPECT_EQ(ji.at("plan").at("images").get<int>(), 2);
  // Text batches: the tower's 676,550,144 parameters (tests/model/vision_test.cc) get no gradient.
  const auto& rt = jt.at("per_rank");
  const auto& ri = ji.at("per_rank");
  EXPECT_EQ(rt.at("trainable_parameters").get<int64_t>(), 8'292'166'656 - 676'550'144);
  // ... without a frozen prefix the user did not write (the plan, and its exports, have none).
  EXPECT_TRUE(jt.at("plan").at("frozen_prefixes").empty());
  EXPECT_EQ(ri.at("trainable_parameters").get<int64_t>(), 8'292'166'656);
  EXPECT_GT(ri.at("peak_allocated_bytes").get<int64_t>(), rt.at("peak_allocated_bytes").get<int64_t>());
  ExpectOneLineError(RunCli("estimate --model " + m + " --images 2 --image-pixels 1280by720"),
                     "--image-pixels: expected WIDTHxHEIGHT");
  ExpectOneLineError(RunCli("estimate --model " + m + " --image-pixels 64x64 --image-tokens 5"),
                     "--image-pixels: expected either it or --image-tokens");
  ExpectOneLineError(RunCli("estimate --model " + m + " --seq-len 1024 --image-tokens 2000"),
                     "image_tokens: expected integer in [images = 1, 1024]");
  ExpectOneLineError(RunCli("estimate --model llama3-8b --images 1 --image-tokens 64"),
                     "images: expected 0 for llama3-8b");
  ExpectOneLineError(RunCli("run --model qwen3-vl-2b --images 1 --image-tokens 64 --steps 1 --out " + TempPath("vl_run")),
                     "qwen3_vl vision tower is not run by shardtune's executor yet");
}

}  // namespace

// --- frozen parameters, LoRA, inference roles, expert units, tiled MLP (issue #9) ---

TEST(CliTest, TrainabilityPlanErrorsNameKeyAndFlag) {
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 2xH100 --freeze visual."),
                     "plan:/frozen_prefixes/0: expected a prefix of a parameter name");
  ExpectOneLineError(
      RunCli("estimate --model tiny-llama --cluster 2xH100 --lora-rank 8 --lora-targets c_attn"),
      "plan:/lora/targets/0: expected a projection of tiny-llama");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 2xH100 --wrap-experts"),
                     "--wrap-experts");
  ExpectOneLineError(
      RunCli("estimate --model tiny-llama --cluster 2xH100 --seq-len 128 --tiled-mlp 3"),
      "plan:/tiled_mlp_shards: expected a divisor of seq_len 128");
  ExpectOneLineError(RunCli("estimate --model tiny-llama --cluster 2xH100 --moe-capacity-factor 0"),
                     "--moe-capacity-factor");
}

// --moe-imbalance (issue #20's name) is --moe-capacity-factor: the same estimate, and a larger
// factor never lowers the peak (the busiest expert's intermediates grow with it).
TEST(CliTest, MoeImbalanceIsTheCapacityFactor) {
  const std::string base = "estimate --model qwen3-30b-a3b --cluster 8xH100 --seq-len 4096 --json ";
  Result a = RunCli(base + "--moe-imbalance 1.5");
  Result b = RunCli(base + "--moe-capacity-factor 1.5");
  Result c = RunCli(base);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(a.out, b.out);
  auto peak = [](const Result& r) {
    return nlohmann::json::parse(r.out).at("per_rank").at("peak_allocated_bytes").get<int64_t>();
  };
  EXPECT_GT(peak(a), peak(c));
}

TEST(CliTest, EstimateReportsWhatLoraAndFreezingSave) {
  Result r = RunCli(
      "estimate --model tiny-llama --cluster 2xH100 --seq-len 128 --lora-rank 8 "
      "--lora-targets q_proj,v_proj --freeze model.embed_tokens --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& s = j.at("savings_vs_full_finetune");
  ASSERT_EQ(s.at("features").size(), 2u);
  EXPECT_EQ(s["features"][0]["feature"], "frozen");
  EXPECT_EQ(s["features"][1]["feature"], "LoRA");
  EXPECT_GT(s["features"][1]["saved_bytes"].at("optimizer state").get<int64_t>(), 0);
  EXPECT_EQ(s["peak_saved_bytes"].get<int64_t>(), s["full_finetune_peak_bytes"].get<int64_t>() -
                                                      j["per_rank"]["peak_bytes"].get<int64_t>());
  EXPECT_LT(j["per_rank"]["trainable_parameters"].get<int64_t>(),
            j["per_rank"]["parameters"].get<int64_t>());
  Result text = RunCli(
      "estimate --model tiny-llama --cluster 2xH100 --seq-len 128 --lora-rank 8 "
      "--lora-targets q_proj,v_proj");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("Versus the full fine-tune of the same plan"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("  LoRA: "));
  EXPECT_THAT(text.out, ::testing::HasSubstr("LoRA r=8 on q_proj,v_proj"));
}

// --lora-dropout: more saved activations (each adapter keeps a dropped copy and a mask; the
// per-token formula is tests/model/activations_test.cc's), written into the plan, bad values and
// run (no dropout in the executor) are one-line errors.
TEST(CliTest, LoraDropoutFlag) {
  const std::string lora =
      " --model tiny-llama --cluster 2xH100 --seq-len 128 --lora-rank 8 --lora-targets q_proj,v_proj";
  Result a = RunCli("estimate" + lora + " --json");
  Result b = RunCli("estimate" + lora + " --lora-dropout 0.1 --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  auto activations = [](const std::string& out) {
    return nlohmann::json::parse(out)["per_rank"]["category_peaks"]["activations saved for backward"]
        .get<int64_t>();
  };
  EXPECT_GT(activations(a.out), 0);
  EXPECT_GT(activations(b.out), activations(a.out));
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(b.out)["plan"]["lora"]["dropout"].get<double>(), 0.1);
  ExpectOneLineError(RunCli("estimate" + lora + " --lora-dropout 1"), "--lora-dropout: expected a probability");
  ExpectOneLineError(RunCli("run --model tiny-llama --steps 1 --seq-len 32 --lora-rank 8 "
                            "--lora-targets q_proj --lora-dropout 0.1 --out " + TempPath("dropout_run")),
                     "--lora-dropout (plan:/lora/dropout): expected 0");
}

// run --from: an Accelerate FSDP2 config is the plan of a real run, read against the run's own
// world (--nproc); a world the file contradicts is a one-line error naming file and key.
TEST(CliTest, RunReadsItsPlanFromATrainerConfig) {
  const std::string body =
      "distributed_type: FSDP\nmixed_precision: 'no'\nfsdp_config:\n"
      "  fsdp_version: 2\n  fsdp_activation_checkpointing: true\n"
      "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
      "  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n  fsdp_reshard_after_forward: true\n"
      "num_machines: 1\nnum_processes: ";
  std::string good = WriteFile("run_from_2.yaml", body + "2\n");
  std::string out = TempPath("run_from_out");
  Result r = RunCli("run --model tiny-llama --nproc 2 --steps 1 --seq-len 32 --no-trace --no-checkpoints"
                    " --threads 1 --from " + good + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(out + "/measurements.json");
  ASSERT_TRUE(in.good());
  nlohmann::json m = nlohmann::json::parse(in);
  EXPECT_EQ(m["plan"]["checkpointing"], "full");
  EXPECT_EQ(m["plan"]["param_dtype"], "fp32");  // mixed_precision 'no'
  EXPECT_EQ(m["run"]["data_parallel_ranks"], 2);
  std::string bad = WriteFile("run_from_8.yaml", body + "8\n");
  ExpectOneLineError(RunCli("run --model tiny-llama --nproc 2 --steps 1 --seq-len 32 --from " + bad +
                            " --out " + TempPath("run_from_bad")),
                     "/num_processes: expected the --nproc world size 2 ranks, got 8 (run with "
                     "--nproc 8, or edit the config)");
}

// --frozen-dtype (estimate, simulate, tune): the frozen shards' bytes follow it, the JSON and the
// text name them, tune keeps it in the plan it writes, and a bad value is a one-line error.
TEST(CliTest, FrozenDtypeFlagSetsTheFrozenShards) {
  const std::string lora =
      " --model tiny-llama --cluster 2xH100 --seq-len 128 --lora-rank 8"
      " --lora-targets q_proj,v_proj";
  Result a = RunCli("estimate" + lora + " --json");
  Result b = RunCli("estimate" + lora + " --frozen-dtype bf16 --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  int64_t fa = ja["per_rank"]["frozen_sharded_params_bytes"].get<int64_t>();
  int64_t fb = jb["per_rank"]["frozen_sharded_params_bytes"].get<int64_t>();
  EXPECT_EQ(ja["per_rank"]["frozen_dtype"], "fp32");
  EXPECT_EQ(jb["per_rank"]["frozen_dtype"], "bf16");
  EXPECT_EQ(fa, 2 * fb);  // 4 vs 2 bytes per frozen shard element
  EXPECT_EQ(ja["per_rank"]["sharded_params_bytes"].get<int64_t>() - fa,
            jb["per_rank"]["sharded_params_bytes"].get<int64_t>() - fb);  // adapters unchanged
  Result text = RunCli("estimate" + lora + " --frozen-dtype bf16");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr(" in bf16)"));
  Result sim = RunCli("simulate" + lora + " --frozen-dtype bf16 --json");
  ASSERT_EQ(sim.code, 0) << sim.err;
  EXPECT_EQ(nlohmann::json::parse(sim.out)["per_rank"]["frozen_sharded_params_bytes"], fb);
  std::string out = TempPath("frozen_tune_plan.json");
  Result tune = RunCli("tune" + lora + " --frozen-dtype bf16 --global-batch 8 --out " + out);
  ASSERT_EQ(tune.code, 0) << tune.err;
  std::ifstream in(out);
  EXPECT_EQ(nlohmann::json::parse(in).at("frozen_dtype"), "bf16");
  ExpectOneLineError(RunCli("estimate" + lora + " --frozen-dtype int8"), "--frozen-dtype");
}

// --master-dtype: the sharded parameters, their gradients and AdamW's state follow it (a model
// loaded in bf16 and sharded without an upcast: 2 bytes each instead of 4); tune keeps it in the
// plan it writes; run refuses it (fp32 master shards only); a bad value is a one-line error.
TEST(CliTest, MasterDtypeFlagSetsTheShardedStates) {
  const std::string job = " --model tiny-llama --cluster 2xH100 --seq-len 128";
  Result a = RunCli("estimate" + job + " --json");
  Result b = RunCli("estimate" + job + " --master-dtype bf16 --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  auto ja = nlohmann::json::parse(a.out)["per_rank"], jb = nlohmann::json::parse(b.out)["per_rank"];
  for (const char* k : {"sharded_params_bytes", "sharded_grads_bytes", "optimizer_state_bytes"}) {
    EXPECT_EQ(ja[k].get<int64_t>(), 2 * jb[k].get<int64_t>()) << k;
  }
  EXPECT_LT(jb["steady_peak_bytes"].get<int64_t>(), ja["steady_peak_bytes"].get<int64_t>());
  std::string out = TempPath("master_tune_plan.json");
  Result tune = RunCli("tune" + job + " --master-dtype bf16 --global-batch 8 --out " + out);
  ASSERT_EQ(tune.code, 0) << tune.err;
  std::ifstream in(out);
  EXPECT_EQ(nlohmann::json::parse(in).at("master_dtype"), "bf16");
  ExpectOneLineError(RunCli("estimate" + job + " --master-dtype int8"), "--master-dtype");
  ExpectOneLineError(RunCli("run --model tiny-llama --steps 1 --seq-len 32 --master-dtype bf16 --out " +
                            TempPath("run_master_bf16")),
                     "master_dtype");
}

TEST(CliTest, EstimateCoLocatesRolePlans) {
  std::string ref = WriteFile(
      "ref_role.json",
      R"({"schema": "shardtune.plan", "schema_version": 1, "role": "infer", "seq_len": 128})");
  Result r = RunCli("estimate --model tiny-llama --cluster 2xH100 --seq-len 128 --role-plan " +
                    ref + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& c = j.at("colocation");
  ASSERT_EQ(c.at("roles").size(), 2u);
  int64_t actor = c["roles"][0]["required_bytes"].get<int64_t>();
  int64_t ref_idle = c["roles"][1]["idle_residue_bytes"].get<int64_t>();
  EXPECT_EQ(c["roles"][0]["colocated_required_bytes"].get<int64_t>(), actor + ref_idle);
  EXPECT_EQ(actor, j["per_rank"]["required_bytes"].get<int64_t>());
}

namespace {

// verl's reward model on the actor's GPUs (reward_model.enable, no enable_resource_pool), both
// ways verl runs it. The reward loop's engine takes gpu_memory_utilization of the device while it
// scores (and, enforce_eager by default, only its CUDA context while it sleeps): its row in the
// co-located table is that share plus its context. The legacy FSDP worker is estimated on the
// model its path names, or --reward-model; a path that resolves to nothing is a one-line error
// naming the key and the flag; --reward-model without such a worker is refused.
std::string RewardModelConfig(const std::string& name, const std::string& reward_model) {
  std::ifstream in(std::string(SHARDTUNE_TEST_DATA_DIR) + "/configs/verl_grpo_qwen3_8b.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return WriteFile(name, text + "reward_model:\n  enable: true\n" + reward_model);
}

TEST(CliTest, VerlRewardModelIsCountedBesideTheActor) {
  const std::string loop = RewardModelConfig(
      "verl_rm_loop.yaml", "  model:\n    path: ~/models/rm\n  rollout:\n    name: vllm\n    gpu_memory_utilization: 0.3\n");
  Result r = RunCli("estimate --cluster 8xH100 --json --from " + loop);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& co = j.at("colocation");
  const nlohmann::json* engine = nullptr;
  for (const auto& role : co.at("roles")) {
    if (role.at("role") == "reward model (vllm)") engine = &role;
  }
  ASSERT_NE(engine, nullptr) << co.dump();
  const int64_t context = engine->at("idle_residue").at("CUDA context and kernels").get<int64_t>();
  EXPECT_GT(context, 0);
  EXPECT_EQ(engine->at("idle_residue").size(), 1u);  // enforce_eager: no CUDA graphs
  EXPECT_EQ(engine->at("required_bytes").get<int64_t>(),
            static_cast<int64_t>(0.3 * static_cast<double>(co.at("capacity_bytes").get<int64_t>())) + context);

  const std::string legacy = RewardModelConfig(
      "verl_rm_legacy.yaml",
      "  use_reward_loop: false\n  micro_batch_size_per_gpu: 4\n  model:\n    path: Qwen/Qwen3-8B\n");
  Result l = RunCli("estimate --cluster 8xH100 --json --from " + legacy);
  ASSERT_EQ(l.code, 0) << l.err;
  const auto lj = nlohmann::json::parse(l.out);
  std::vector<std::string> names;
  for (const auto& role : lj.at("colocation").at("roles")) names.push_back(role.at("role"));
  EXPECT_THAT(names, ::testing::Contains("reward model (infer, qwen3-8b)"));
  Result flag = RunCli("estimate --cluster 8xH100 --json --reward-model tiny-llama --from " + legacy);
  ASSERT_EQ(flag.code, 0) << flag.err;
  EXPECT_THAT(flag.out, ::testing::HasSubstr("\"reward model (infer, tiny-llama)\""));

  const std::string missing = RewardModelConfig(
      "verl_rm_missing.yaml",
      "  use_reward_loop: false\n  micro_batch_size_per_gpu: 4\n  model:\n    path: /nonexistent/Some-RM-7B\n");
  ExpectOneLineError(RunCli("estimate --cluster 8xH100 --from " + missing),
                     ":/reward_model/model/path: expected a preset");
  EXPECT_THAT(RunCli("estimate --cluster 8xH100 --from " + missing).err, ::testing::HasSubstr("--reward-model"));
  ExpectOneLineError(RunCli("estimate --cluster 8xH100 --reward-model tiny-llama --from " + loop),
                     "--reward-model tiny-llama: expected a --from verl config with reward_model.enable");
}

}  // namespace
