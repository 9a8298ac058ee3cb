// Plan export: each format is parsed back by a real parser (PyYAML, Python's tomllib, nlohmann
// JSON) and its keys are checked against the plan; notes cover what a format cannot say.
#include "planner/configs/export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/errors.h"
#include "model/presets.h"
#include "model/strict_json.h"
#include "model/plan_json.h"
#include "planner/configs/config_yaml.h"
#include "planner/configs/import.h"
#include "profiles/cluster.h"

namespace shardtune::configs {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::ThrowsMessage;

bool PythonHas(const std::string& module) {
  std::string cmd = "python3 -c 'import " + module + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// Writes `text` to a temporary file, has python3 load it with `loader` (an expression of the
// open file `f`) and print it as JSON, and parses that. Fails the test on any error.
json LoadWithPython(const std::string& text, const std::string& module, const std::string& loader) {
  std::string path = ::testing::TempDir() + "shardtune_export_" + std::to_string(::getpid()) + "_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::ofstream(path, std::ios::binary) << text;
  std::string cmd = "python3 -c 'import json, sys, " + module +
                    "; f = open(sys.argv[1], \"rb\"); " + "print(json.dumps(" + loader + "))' '" +
                    path + "' 2>&1";
  std::string output;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) ADD_FAILURE() << "popen failed: " << cmd;
  char buf[4096];
  while (pipe != nullptr && std::fgets(buf, sizeof buf, pipe) != nullptr) output += buf;
  int status = pipe != nullptr ? ::pclose(pipe) : -1;
  std::remove(path.c_str());
  EXPECT_EQ(status, 0) << output << "\n--- input ---\n" << text;
  return model::ParseJsonText(status == 0 ? output : "null", "python3 " + module + " output");
}

// Typed reads by JSON pointer that report a missing key or a wrong type as a value, so a bad
// export fails an EXPECT instead of throwing (and never builds a json from a C string, which
// trips GCC 12's -Warray-bounds false positive in nlohmann::json).
std::string Str(const json& doc, const std::string& ptr) {
  json::json_pointer p(ptr);
  if (!doc.contains(p)) return "<missing>";
  const json& v = doc.at(p);
  return v.is_string() ? v.get<std::string>() : "<not a string: " + v.dump() + ">";
}
int64_t Int(const json& doc, const std::string& ptr) {
  json::json_pointer p(ptr);
  if (!doc.contains(p) || !doc.at(p).is_number_integer()) return -999;
  return doc.at(p).get<int64_t>();
}
std::string Bool(const json& doc, const std::string& ptr) {
  json::json_pointer p(ptr);
  if (!doc.contains(p)) return "<missing>";
  const json& v = doc.at(p);
  return v.is_boolean() ? (v.get<bool>() ? "true" : "false") : "<not a bool: " + v.dump() + ">";
}
bool Has(const json& doc, const std::string& ptr) { return doc.contains(json::json_pointer(ptr)); }

json LoadYaml(const std::string& text) { return LoadWithPython(text, "yaml", "yaml.safe_load(f)"); }
json LoadToml(const std::string& text) {
  return LoadWithPython(text, "tomllib", "tomllib.load(f)");
}

#define SHARDTUNE_REQUIRE_PYTHON(module)                                                    \
  if (!PythonHas(module)) {                                                                 \
    GTEST_SKIP() << "python3 with " << (module) << " not found (CI installs python3-yaml; " \
                 << "tomllib needs Python >= 3.11)";                                        \
  }

// The plan of the example: HYBRID_SHARD in groups of 8 over 2 nodes x 8 GPUs.
struct Job {
  model::Plan plan;
  ExportContext ctx;
};

Job HybridJob() {
  Job j;
  j.plan.strategy = model::ShardingStrategy::kHybridShard;
  j.plan.shard_group_size = 8;
  j.plan.micro_batch = 2;
  j.plan.grad_accum = 4;
  j.plan.seq_len = 4096;
  j.plan.checkpointing = model::Checkpointing::kFull;
  j.plan.offload = model::Offload::kAll;
  auto spec = model::FindModelPreset("llama3-8b");
  auto cluster = profiles::ParseClusterShorthand("2x8xH100");
  EXPECT_TRUE(j.plan
                  .Problems("plan", cluster.world_size(), cluster.gpus_per_node, spec.num_layers,
                            spec.max_seq_len)
                  .empty());
  j.ctx = MakeExportContext(spec, cluster, j.plan);
  return j;
}

Job OneNodeJob(model::ShardingStrategy s) {
  Job j;
  j.plan.strategy = s;
  j.plan.reshard_after_forward = model::StrategyReshardsAfterForward(s);
  j.plan.seq_len = 2048;
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  return j;
}

size_t CountNoteComments(const std::string& text) {
  size_t n = 0;
  for (size_t at = text.find("# note: "); at != std::string::npos;
       at = text.find("# note: ", at + 1))
    ++n;
  return n;
}

TEST(ExportFormatTest, EveryNameRoundTrips) {
  for (const auto& name : ExportFormatNames()) {
    EXPECT_EQ(ToString(ParseExportFormat(name, "--format")), name);
  }
  EXPECT_EQ(ParseExportFormat("hf-trainer", "--format"), ExportFormat::kHfTrainer);
}

TEST(ExportFormatTest, UnknownNameListsTheFormatsAndSuggestsTheClosest) {
  EXPECT_THAT(
      [] { ParseExportFormat("deepspeeed", "--format"); },
      ThrowsMessage<InputError>(AllOf(
          HasSubstr(
              "--format: expected one of accelerate, torchtitan, hf-trainer, deepspeed, roll"),
          HasSubstr("got \"deepspeeed\""), HasSubstr("did you mean \"deepspeed\"?"))));
  EXPECT_THAT([] { ParseExportFormat("megatron-lm-xyz", "--format"); },
              ThrowsMessage<InputError>(testing::Not(HasSubstr("did you mean"))));
}

TEST(ExportContextTest, LayerClassFollowsTheArchitecture) {
  EXPECT_EQ(HfDecoderLayerClass(model::FindModelPreset("llama3-8b")), "LlamaDecoderLayer");
  EXPECT_EQ(HfDecoderLayerClass(model::FindModelPreset("gpt2")), "GPT2Block");
  EXPECT_EQ(HfDecoderLayerClass(model::FindModelPreset("mixtral-8x7b")), "MixtralDecoderLayer");
  EXPECT_EQ(HfDecoderLayerClass(model::FindModelPreset("mistral-7b")), "MistralDecoderLayer");
  EXPECT_EQ(HfDecoderLayerClass(model::FindModelPreset("qwen2.5-7b")), "Qwen2DecoderLayer");
  EXPECT_EQ(HfDecoderLayerClass(model::FindModelPreset("qwen3-8b")), "Qwen3DecoderLayer");
  model::ModelSpec neox = model::FindModelPreset("llama3-8b");
  neox.parallel_residual = true;
  EXPECT_EQ(HfDecoderLayerClass(neox), "GPTNeoXLayer");
}

TEST(ExportContextTest, GlobalBatchIsMicroBatchTimesAccumulationTimesWorld) {
  Job j = HybridJob();
  EXPECT_EQ(j.ctx.world_size, 2 * 8);
  EXPECT_EQ(j.ctx.global_batch, 2 * 4 * (2 * 8));
  EXPECT_EQ(j.ctx.seq_len, 4096);
}

TEST(ExportTest, AccelerateYamlCarriesHybridShardingOffloadAndCheckpointing) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = HybridJob();
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kAccelerate);
  json y = LoadYaml(r.text);
  EXPECT_EQ(Str(y, "/distributed_type"), "FSDP");
  EXPECT_EQ(Str(y, "/mixed_precision"), "bf16");
  EXPECT_EQ(Int(y, "/num_machines"), 2);
  EXPECT_EQ(Int(y, "/num_processes"), 2 * 8);
  EXPECT_EQ(Int(y, "/fsdp_config/fsdp_version"), 2);
  EXPECT_EQ(Bool(y, "/fsdp_config/fsdp_reshard_after_forward"), "true");
  EXPECT_EQ(Str(y, "/fsdp_config/fsdp_auto_wrap_policy"), "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(Str(y, "/fsdp_config/fsdp_transformer_layer_cls_to_wrap"), "LlamaDecoderLayer");
  EXPECT_EQ(Bool(y, "/fsdp_config/fsdp_offload_params"), "true");
  EXPECT_EQ(Bool(y, "/fsdp_config/fsdp_activation_checkpointing"), "true");
  EXPECT_FALSE(Has(y, "/fsdp_config/fsdp_forward_prefetch"));  // the FSDP2 plugin rejects it
  EXPECT_EQ(Int(y, "/parallelism_config/parallelism_config_dp_replicate_size"), 16 / 8);
  EXPECT_EQ(Int(y, "/parallelism_config/parallelism_config_dp_shard_size"), 8);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_THAT(r.notes[0], HasSubstr("gradient_accumulation_steps=4"));
  EXPECT_THAT(r.notes[0], HasSubstr("batch_size=2 sequences of 4096 tokens"));
  EXPECT_EQ(CountNoteComments(r.text), r.notes.size());
}

TEST(ExportTest, TorchtitanTomlCarriesDegreesBatchAndCheckpointing) {
  SHARDTUNE_REQUIRE_PYTHON("tomllib");
  Job j = HybridJob();
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan);
  json t = LoadToml(r.text);
  EXPECT_EQ(Str(t, "/model/name"), "llama3");
  EXPECT_EQ(Str(t, "/model/flavor"), "8B");
  EXPECT_EQ(Int(t, "/training/local_batch_size"), 2);
  // torchtitan derives grad-accum = global / (local x dp degree) (train.py).
  EXPECT_EQ(Int(t, "/training/global_batch_size"), 2 * 4 * 16);
  EXPECT_EQ(Int(t, "/training/seq_len"), 4096);
  EXPECT_EQ(Bool(t, "/training/enable_cpu_offload"), "true");
  EXPECT_EQ(Str(t, "/training/mixed_precision_param"), "bfloat16");
  EXPECT_EQ(Str(t, "/training/mixed_precision_reduce"), "float32");
  EXPECT_EQ(Str(t, "/training/dtype"), "float32");
  EXPECT_EQ(Int(t, "/parallelism/data_parallel_replicate_degree"), 2);
  EXPECT_EQ(Int(t, "/parallelism/data_parallel_shard_degree"), 8);
  EXPECT_EQ(Str(t, "/parallelism/fsdp_reshard_after_forward"), "always");
  EXPECT_EQ(Str(t, "/activation_checkpoint/mode"), "full");
  EXPECT_EQ(CountNoteComments(r.text), r.notes.size());
}

// The MoE presets torchtitan v0.2.2 ships as flavors (models/gpt_oss, models/deepseek_v3),
// written as its [model] name and flavor; a model it has no flavor for gets a comment and a note.
TEST(ExportTest, TorchtitanTomlNamesTheMoeFlavors) {
  SHARDTUNE_REQUIRE_PYTHON("tomllib");
  const std::vector<std::array<std::string, 3>> cases = {{"gpt-oss-20b", "gpt_oss", "20b"},
                                                         {"gpt-oss-120b", "gpt_oss", "120b"},
                                                         {"deepseek-v3", "deepseek_v3", "671B"}};
  for (const auto& [preset, name, flavor] : cases) {
    SCOPED_TRACE(preset);
    Job j = HybridJob();
    j.plan.modeling = model::Modeling::kTorchtitan;
    j.ctx.model_name = preset;
    ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan);
    json t = LoadToml(r.text);
    EXPECT_EQ(Str(t, "/model/name"), name);
    EXPECT_EQ(Str(t, "/model/flavor"), flavor);
    for (const std::string& n : r.notes) EXPECT_THAT(n, Not(HasSubstr("no torchtitan model flavor")));
  }
  Job j = HybridJob();
  j.ctx.model_name = "gemma3-27b";
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan);
  EXPECT_THAT(r.text, HasSubstr("# name and flavor: no torchtitan model matches"));
}

TEST(ExportTest, HfTrainerJsonCarriesFsdpOptionsAndBatch) {
  Job j = HybridJob();
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kHfTrainer);
  json h = model::ParseJsonText(r.text, "hf-trainer");
  EXPECT_EQ(Int(h, "/per_device_train_batch_size"), 2);
  EXPECT_EQ(Int(h, "/gradient_accumulation_steps"), 4);
  EXPECT_EQ(Bool(h, "/bf16"), "true");
  EXPECT_EQ(Bool(h, "/gradient_checkpointing"),
            "false");  // FSDP: fsdp_config.activation_checkpointing
  EXPECT_EQ(Str(h, "/fsdp"), "full_shard auto_wrap offload");
  EXPECT_EQ(Int(h, "/fsdp_config/version"), 2);
  EXPECT_EQ(Bool(h, "/fsdp_config/reshard_after_forward"), "true");
  EXPECT_EQ(Bool(h, "/fsdp_config/activation_checkpointing"), "true");
  EXPECT_EQ(Str(h, "/fsdp_config/transformer_layer_cls_to_wrap/0"), "LlamaDecoderLayer");
  std::string all;
  for (const auto& n : r.notes) all += n + "\n";
  EXPECT_THAT(all, HasSubstr("parallelism_config_dp_replicate_size 2"));
  EXPECT_THAT(all, HasSubstr("parallelism_config_dp_shard_size 8"));
}

TEST(ExportTest, DeepspeedJsonIsZero3WithHpzOffloadAndBatch) {
  Job j = HybridJob();
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kDeepspeed);
  json d = model::ParseJsonText(r.text, "deepspeed");
  EXPECT_EQ(Int(d, "/train_batch_size"), 2 * 4 * 16);  // DeepSpeed checks micro x accum x world
  EXPECT_EQ(Int(d, "/train_micro_batch_size_per_gpu"), 2);
  EXPECT_EQ(Int(d, "/gradient_accumulation_steps"), 4);
  EXPECT_EQ(Bool(d, "/bf16/enabled"), "true");
  EXPECT_EQ(Str(d, "/communication_data_type"), "fp32");
  EXPECT_EQ(Int(d, "/zero_optimization/stage"), 3);
  EXPECT_EQ(Int(d, "/zero_optimization/zero_hpz_partition_size"), 8);
  EXPECT_EQ(Str(d, "/zero_optimization/offload_optimizer/device"), "cpu");
  EXPECT_EQ(Str(d, "/zero_optimization/offload_param/device"), "cpu");
  std::string all;
  for (const auto& n : r.notes) all += n + "\n";
  EXPECT_THAT(all, HasSubstr("hpZ"));
  EXPECT_THAT(all, HasSubstr("gradient_checkpointing_enable"));
  EXPECT_THAT(all, HasSubstr("no FSDP units"));
}

TEST(ExportTest, RollYamlCarriesFsdpSizeDtypesOffloadAndWrapPolicy) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = HybridJob();
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kRoll);
  json y = LoadYaml(r.text);
  const std::string s = "/actor_train/strategy_args/strategy_config";
  EXPECT_EQ(Str(y, "/actor_train/strategy_args/strategy_name"), "fsdp2_train");
  EXPECT_EQ(Int(y, s + "/fsdp_size"), 8);    // < world 16: HSDP with 16 / 8 replicas
  EXPECT_FALSE(Has(y, s + "/param_dtype"));  // unset: fp32 master weights, bf16 compute
  EXPECT_EQ(Str(y, s + "/reduce_dtype"), "fp32");
  EXPECT_EQ(Bool(y, s + "/reshard_after_forward"), "true");
  EXPECT_EQ(Bool(y, s + "/offload_policy"), "true");
  EXPECT_EQ(Str(y, s + "/wrap_policy/transformer_layer_cls_to_wrap/0"), "LlamaDecoderLayer");
  EXPECT_EQ(Bool(y, "/actor_train/model_args/disable_gradient_checkpointing"), "false");
  EXPECT_EQ(Int(y, "/actor_train/model_args/ulysses_size"), 1);
  EXPECT_EQ(Int(y, "/actor_train/training_args/per_device_train_batch_size"), 2);
  EXPECT_EQ(Int(y, "/actor_train/training_args/gradient_accumulation_steps"), 4);
  EXPECT_EQ(Str(y, "/actor_train/device_mapping"), "list(range(0,16))");
  EXPECT_EQ(Int(y, "/sequence_length"), 4096);
  EXPECT_EQ(CountNoteComments(r.text), r.notes.size());
}

TEST(ExportTest, RollWritesParamDtypeWhenMasterWeightsShareIt) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = HybridJob();
  j.plan.master_dtype = model::DType::kBf16;
  json y = LoadYaml(ExportPlan(j.plan, j.ctx, ExportFormat::kRoll).text);
  EXPECT_EQ(Str(y, "/actor_train/strategy_args/strategy_config/param_dtype"), "bf16");
}

TEST(ExportTest, ShardGradOpMapsToZero2AndNoResharding) {
  SHARDTUNE_REQUIRE_PYTHON("tomllib");
  Job j = OneNodeJob(model::ShardingStrategy::kShardGradOp);
  json d = model::ParseJsonText(ExportPlan(j.plan, j.ctx, ExportFormat::kDeepspeed).text, "ds");
  EXPECT_EQ(Int(d, "/zero_optimization/stage"), 2);
  EXPECT_FALSE(Has(d, "/zero_optimization/zero_hpz_partition_size"));
  json t = LoadToml(ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan).text);
  EXPECT_EQ(Int(t, "/parallelism/data_parallel_shard_degree"), 8);
  EXPECT_EQ(Int(t, "/parallelism/data_parallel_replicate_degree"), 1);
  EXPECT_EQ(Str(t, "/parallelism/fsdp_reshard_after_forward"), "never");
  json h = model::ParseJsonText(ExportPlan(j.plan, j.ctx, ExportFormat::kHfTrainer).text, "hf");
  EXPECT_EQ(Str(h, "/fsdp"), "shard_grad_op auto_wrap");
  EXPECT_EQ(Bool(h, "/fsdp_config/reshard_after_forward"), "false");
}

TEST(ExportTest, NoShardIsDataParallelEverywhere) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = OneNodeJob(model::ShardingStrategy::kNoShard);
  json a = LoadYaml(ExportPlan(j.plan, j.ctx, ExportFormat::kAccelerate).text);
  EXPECT_EQ(Str(a, "/distributed_type"), "MULTI_GPU");
  EXPECT_FALSE(Has(a, "/fsdp_config"));
  json d = model::ParseJsonText(ExportPlan(j.plan, j.ctx, ExportFormat::kDeepspeed).text, "ds");
  EXPECT_EQ(Int(d, "/zero_optimization/stage"), 0);
  json h = model::ParseJsonText(ExportPlan(j.plan, j.ctx, ExportFormat::kHfTrainer).text, "hf");
  EXPECT_EQ(Str(h, "/fsdp"), "");  // TrainingArguments' "no FSDP", so an import reads DDP
  ExportResult roll = ExportPlan(j.plan, j.ctx, ExportFormat::kRoll);
  ASSERT_FALSE(roll.notes.empty());
  EXPECT_THAT(roll.notes[0], HasSubstr("no replicate-only mode"));
}

TEST(ExportTest, EveryKCheckpointingIsTorchtitanLayerSacAndANoteElsewhere) {
  SHARDTUNE_REQUIRE_PYTHON("tomllib");
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.checkpointing = model::Checkpointing::kEveryK;
  j.plan.checkpoint_every_k = 2;
  json t = LoadToml(ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan).text);
  EXPECT_EQ(Str(t, "/activation_checkpoint/mode"), "selective");
  EXPECT_EQ(Str(t, "/activation_checkpoint/selective_ac_option"), "2");
  ExportResult a = ExportPlan(j.plan, j.ctx, ExportFormat::kAccelerate);
  std::string all;
  for (const auto& n : a.notes) all += n + "\n";
  EXPECT_THAT(all, HasSubstr("checkpointing every:2"));
}

// first:K (Megatron's recompute_method block) has no key in torchtitan, verl, HF or Accelerate:
// each writes full checkpointing and says what was lost.
TEST(ExportTest, FirstKCheckpointingIsWrittenAsFullWithANote) {
  SHARDTUNE_REQUIRE_PYTHON("tomllib");
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.checkpointing = model::Checkpointing::kFirstK;
  j.plan.checkpoint_first_k = 12;
  ExportResult titan = ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan);
  EXPECT_EQ(Str(LoadToml(titan.text), "/activation_checkpoint/mode"), "full");
  for (ExportFormat f : {ExportFormat::kTorchtitan, ExportFormat::kAccelerate, ExportFormat::kVerl}) {
    std::string all;
    for (const auto& n : ExportPlan(j.plan, j.ctx, f).notes) all += n + "\n";
    EXPECT_THAT(all, HasSubstr("checkpointing first:12"));
    EXPECT_THAT(all, HasSubstr("written as"));
  }
}

// verl's FSDP engine and PPO workers read enable_activation_offload (hf_model.yaml); its legacy
// fsdp_sft_trainer.py and the other formats have no such switch and say so.
TEST(ExportTest, ActivationOffloadIsVerlsSwitchAndANoteElsewhere) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.activation_offload = model::ActivationOffload::kVerlAsync;
  j.ctx.verl_trainer = VerlTrainer::kSftEngine;
  ExportResult engine = ExportPlan(j.plan, j.ctx, ExportFormat::kVerl);
  json v = LoadYaml(engine.text);
  EXPECT_EQ(v.at(json::json_pointer("/model/enable_activation_offload")), true);
  for (const auto& n : engine.notes) EXPECT_THAT(n, Not(HasSubstr("activation_offload")));
  j.ctx.verl_trainer = VerlTrainer::kSft;
  ExportResult legacy = ExportPlan(j.plan, j.ctx, ExportFormat::kVerl);
  EXPECT_THAT(legacy.text, Not(HasSubstr("enable_activation_offload: true")));
  std::string legacy_notes;
  for (const auto& n : legacy.notes) legacy_notes += n + "\n";
  EXPECT_THAT(legacy_notes, HasSubstr("fsdp_sft_trainer.py has no switch"));
  for (ExportFormat f : {ExportFormat::kTorchtitan, ExportFormat::kAccelerate, ExportFormat::kHfTrainer,
                         ExportFormat::kDeepspeed, ExportFormat::kRoll}) {
    std::string all;
    for (const auto& n : ExportPlan(j.plan, j.ctx, f).notes) all += n + "\n";
    EXPECT_THAT(all, HasSubstr("activation_offload verl_async")) << ExportFormatNames()[static_cast<size_t>(f)];
    EXPECT_THAT(all, HasSubstr("written without it"));
  }
  // Without it, verl's file does not name the key.
  j.plan.activation_offload = model::ActivationOffload::kNone;
  j.ctx.verl_trainer = VerlTrainer::kSftEngine;
  EXPECT_THAT(ExportPlan(j.plan, j.ctx, ExportFormat::kVerl).text, Not(HasSubstr("enable_activation_offload")));
}

TEST(ExportTest, StringsWithQuotesAndBackslashesSurviveYamlAndToml) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = HybridJob();
  j.ctx.layer_class = "My\"Layer\\x\ty";
  json y = LoadYaml(ExportPlan(j.plan, j.ctx, ExportFormat::kAccelerate).text);
  EXPECT_EQ(Str(y, "/fsdp_config/fsdp_transformer_layer_cls_to_wrap"), j.ctx.layer_class);
  j.ctx.model_name = "odd\nname \"x\"";  // only in comments: must not break the document
  json r = LoadYaml(ExportPlan(j.plan, j.ctx, ExportFormat::kRoll).text);
  EXPECT_EQ(
      Str(r,
          "/actor_train/strategy_args/strategy_config/wrap_policy/transformer_layer_cls_to_wrap/0"),
      j.ctx.layer_class);
  if (PythonHas("tomllib")) {
    json t = LoadToml(ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan).text);
    EXPECT_EQ(Int(t, "/training/local_batch_size"), 2);
  }
}

TEST(ExportTest, RollYamlCarriesUlyssesLoraFreezeTiledAndMoeExperts) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.cp = 2;
  j.plan.lora.rank = 16;
  j.plan.lora.alpha = 32.0;
  j.plan.lora.targets = {"q_proj", "v_proj"};
  j.plan.frozen_prefixes = {"model.embed_tokens"};
  j.plan.tiled_mlp_shards = 4;
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  json y = LoadYaml(ExportPlan(j.plan, j.ctx, ExportFormat::kRoll).text);
  EXPECT_EQ(Int(y, "/actor_train/model_args/ulysses_size"), 2);
  EXPECT_EQ(Str(y, "/actor_train/model_args/lora_target"), "q_proj,v_proj");
  EXPECT_EQ(Int(y, "/actor_train/model_args/lora_rank"), 16);
  EXPECT_EQ(Str(y, "/actor_train/model_args/freeze_module_prefix"), "model.embed_tokens");
  const std::string s = "/actor_train/strategy_args/strategy_config";
  EXPECT_EQ(Bool(y, s + "/apply_tiled_mlp"), "true");
  EXPECT_EQ(Int(y, s + "/tiled_num_shards"), 4);
  // A MoE plan with one unit per expert names the expert MLP class and enables the patch.
  Job m;
  m.plan.seq_len = 2048;
  m.plan.wrap.expert_units = true;
  m.ctx = MakeExportContext(model::FindModelPreset("mixtral-8x7b"),
                            profiles::ParseClusterShorthand("8xH100"), m.plan);
  json e = LoadYaml(ExportPlan(m.plan, m.ctx, ExportFormat::kRoll).text);
  EXPECT_EQ(Str(e, s + "/wrap_policy/moe_experts/0"), "MixtralBlockSparseTop2MLP");
  EXPECT_EQ(Bool(e, s + "/apply_expert_patch"), "true");
}

TEST(ExportTest, RollInferRoleIsAnFsdp2InferWorker) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.role = model::Role::kInfer;
  j.plan.micro_batch = 4;
  j.plan.master_dtype = model::DType::kBf16;
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  json y = LoadYaml(ExportPlan(j.plan, j.ctx, ExportFormat::kRoll).text);
  EXPECT_EQ(Str(y, "/reference/strategy_args/strategy_name"), "fsdp2_infer");
  EXPECT_EQ(Int(y, "/reference/infer_batch_size"), 4);
  EXPECT_FALSE(Has(y, "/reference/training_args"));
  EXPECT_FALSE(Has(y, "/reference/strategy_args/strategy_config/param_dtype"));  // bf16 default
}

// The verl tests' job: 8 ranks, full sharding, Ulysses cp 2 (4 data-parallel ranks), micro-batch
// 2, grad-accum 4.
Job VerlCp2Job() {
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.cp = 2;
  j.plan.micro_batch = 2;
  j.plan.grad_accum = 4;
  return j;
}

// verl: 8 ranks, cp 2 -> 4 data-parallel ranks; ppo_mini_batch_size = 2 x 4 x 4 = 32 prompts.
TEST(ExportTest, VerlYamlCarriesActorBatchUlyssesLoraAndOffload) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = VerlCp2Job();
  j.plan.offload = model::Offload::kAll;
  j.plan.checkpointing = model::Checkpointing::kFull;
  j.plan.lora.rank = 8;
  j.plan.lora.targets = {"q_proj"};
  j.plan.loss_kernel = model::LossKernel::kVerlFlashCe;  // an RL actor: verl's log-prob head
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kVerl);
  json y = LoadYaml(r.text);
  const std::string a = "/actor_rollout_ref/actor";
  EXPECT_EQ(Int(y, a + "/ppo_mini_batch_size"), 32);
  EXPECT_EQ(Int(y, a + "/ppo_micro_batch_size_per_gpu"), 2);
  EXPECT_EQ(Int(y, a + "/ulysses_sequence_parallel_size"), 2);
  EXPECT_EQ(Int(y, a + "/fsdp_config/fsdp_size"), -1);
  EXPECT_EQ(Bool(y, a + "/fsdp_config/offload_policy"), "true");
  EXPECT_EQ(Str(y, a + "/fsdp_config/model_dtype"), "fp32");
  EXPECT_EQ(Str(y, a + "/fsdp_config/wrap_policy/transformer_layer_cls_to_wrap/0"),
            "LlamaDecoderLayer");
  EXPECT_EQ(Int(y, "/actor_rollout_ref/model/lora_rank"), 8);
  EXPECT_EQ(Bool(y, "/actor_rollout_ref/model/enable_gradient_checkpointing"), "true");
  EXPECT_EQ(Int(y, "/data/max_prompt_length") + Int(y, "/data/max_response_length"), 2048);
  EXPECT_EQ(Int(y, "/trainer/n_gpus_per_node"), 8);
  EXPECT_EQ(CountNoteComments(r.text), r.notes.size());
}

// A plan tuned from a verl GRPO config keeps the config's prompt / response split and rollout.n:
// 32 sequences per update (micro 2 x accum 4 x dp 4) are 8 prompts of n 4; a sample count that
// does not divide the sequences falls back to counting them as prompts with n 1, said in a note.
TEST(ExportTest, VerlKeepsTheTunedConfigsSplitAndRolloutN) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = VerlCp2Job();
  j.plan.loss_kernel = model::LossKernel::kVerlFlashCe;
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  ASSERT_EQ(j.ctx.seq_len, 2048);
  j.ctx.verl_prompt_length = 512;
  j.ctx.verl_response_length = 1536;
  j.ctx.verl_rollout_n = 4;
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kVerl);
  json y = LoadYaml(r.text);
  EXPECT_EQ(Int(y, "/data/max_prompt_length"), 512);
  EXPECT_EQ(Int(y, "/data/max_response_length"), 1536);
  EXPECT_EQ(Int(y, "/actor_rollout_ref/rollout/n"), 4);
  EXPECT_EQ(Int(y, "/actor_rollout_ref/actor/ppo_mini_batch_size"), 32 / 4);
  for (const auto& n : r.notes) {
    EXPECT_EQ(n.find("the split is yours"), std::string::npos) << n;
    EXPECT_EQ(n.find("divide it by n"), std::string::npos) << n;
  }
  j.ctx.verl_rollout_n = 3;
  ExportResult odd_result = ExportPlan(j.plan, j.ctx, ExportFormat::kVerl);
  json odd = LoadYaml(odd_result.text);
  EXPECT_EQ(Int(odd, "/actor_rollout_ref/rollout/n"), 1);
  EXPECT_EQ(Int(odd, "/actor_rollout_ref/actor/ppo_mini_batch_size"), 32);
  bool said = false;  // the fallback is said, as when no n is known
  for (const auto& n : odd_result.notes) said = said || n.find("divide it by n") != std::string::npos;
  EXPECT_TRUE(said);
}

// A plan tuned from verl's engine SFT trainer (sft_trainer_engine.yaml) is written as that
// trainer's config, not as a PPO actor (its head is verl's log-prob path, as the actor's): the
// token budget under data, the FSDP keys and the Ulysses size under engine; read back, it is the
// same plan.
TEST(ExportTest, VerlEngineSftPlanIsTheEngineTrainersConfig) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  const std::string text =
      "data:\n  train_batch_size: 96\n  max_token_len_per_gpu: 4096\n  use_dynamic_bsz: true\n"
      "  max_length: 2048\nmodel:\n  path: meta-llama/Meta-Llama-3-8B\n  lora_rank: 8\n"
      "engine:\n  strategy: fsdp2\n  ulysses_sequence_parallel_size: 2\n";
  ImportContext ictx;
  ictx.world_size = 8;
  ictx.gpus_per_node = 8;
  ictx.layer_class = "LlamaDecoderLayer";
  model::Plan plan;
  ImportResult imported = ImportConfigText(text, "sft_engine.yaml", ictx, nullptr, &plan);
  ASSERT_EQ(imported.verl_trainer, VerlTrainer::kSftEngine);
  ExportContext ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                                        profiles::ParseClusterShorthand("8xH100"), plan);
  ctx.verl_trainer = imported.verl_trainer;
  ExportResult r = ExportPlan(plan, ctx, ExportFormat::kVerl);
  json y = LoadYaml(r.text);
  EXPECT_FALSE(y.contains("actor_rollout_ref")) << r.text;
  EXPECT_EQ(Int(y, "/data/train_batch_size"), 96);  // 6 rows of 4 full-length sequences x dp 4
  EXPECT_EQ(Bool(y, "/data/use_dynamic_bsz"), "true");
  EXPECT_EQ(Int(y, "/data/max_token_len_per_gpu"), 4096);
  EXPECT_EQ(Int(y, "/data/max_length"), 2048);
  EXPECT_EQ(Int(y, "/engine/ulysses_sequence_parallel_size"), 2);
  EXPECT_EQ(Int(y, "/model/lora_rank"), 8);
  model::Plan back;
  ImportResult again = ImportConfigText(r.text, "exported.yaml", ictx, nullptr, &back);
  EXPECT_EQ(again.verl_trainer, VerlTrainer::kSftEngine);
  EXPECT_EQ(model::PlanToJson(back).dump(1), model::PlanToJson(plan).dump(1));
}

// A training plan with a plain cross-entropy is verl's SFT trainer job (fsdp_sft_trainer.py over
// sft_trainer.yaml), not a PPO actor: data.train_batch_size is global (2 x 4 x dp 4 = 32),
// micro_batch_size_per_gpu and max_length as the plan has them, no rollout section.
TEST(ExportTest, VerlSftPlanIsTheSftTrainersConfig) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  Job j = VerlCp2Job();
  j.plan.seq_len = 2048;
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  ExportResult r = ExportPlan(j.plan, j.ctx, ExportFormat::kVerl);
  json y = LoadYaml(r.text);
  EXPECT_EQ(Int(y, "/data/train_batch_size"), 32);
  EXPECT_EQ(Int(y, "/data/micro_batch_size_per_gpu"), 2);
  EXPECT_EQ(Int(y, "/data/max_length"), 2048);
  EXPECT_EQ(Int(y, "/ulysses_sequence_parallel_size"), 2);
  EXPECT_EQ(Str(y, "/model/strategy"), "fsdp2");
  EXPECT_EQ(Int(y, "/model/fsdp_config/fsdp_size"), -1);
  EXPECT_FALSE(y.contains("actor_rollout_ref")) << r.text;
  EXPECT_EQ(r.text.find("max_prompt_length"), std::string::npos);
  EXPECT_EQ(CountNoteComments(r.text), r.notes.size());
}

// No format has a key for a load dtype of the frozen weights apart from the master weights'
// (verl's model_dtype and ROLL's param_dtype load the whole model): each says so in a note, and
// none does when frozen_dtype is unset or equals the master dtype.
TEST(ExportTest, FrozenDtypeOtherThanMasterIsANoteEverywhere) {
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.lora.rank = 8;
  j.plan.lora.targets = {"q_proj"};
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  auto noted = [&](const model::Plan& p, ExportFormat f) {
    for (const auto& n : ExportPlan(p, j.ctx, f).notes) {
      if (n.find("frozen_dtype bf16") != std::string::npos) return true;
    }
    return false;
  };
  model::Plan bf16 = j.plan;
  bf16.frozen_dtype = model::DType::kBf16;
  model::Plan same = j.plan;
  same.frozen_dtype = model::DType::kFp32;
  for (ExportFormat f : {ExportFormat::kAccelerate, ExportFormat::kTorchtitan,
                         ExportFormat::kHfTrainer, ExportFormat::kDeepspeed, ExportFormat::kRoll,
                         ExportFormat::kVerl}) {
    EXPECT_TRUE(noted(bf16, f)) << static_cast<int>(f);
    EXPECT_FALSE(noted(j.plan, f)) << static_cast<int>(f);
    EXPECT_FALSE(noted(same, f)) << static_cast<int>(f);
  }
}

TEST(ExportTest, TorchtitanCarriesContextParallelDegree) {
  SHARDTUNE_REQUIRE_PYTHON("tomllib");
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.cp = 2;
  j.ctx = MakeExportContext(model::FindModelPreset("llama3-8b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  json t = LoadToml(ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan).text);
  EXPECT_EQ(Int(t, "/parallelism/context_parallel_degree"), 2);
  EXPECT_EQ(Int(t, "/parallelism/data_parallel_shard_degree"), 4);  // 8 = shard 4 x cp 2
}

// torchtitan's parallelism.expert_parallel_degree carries Plan::ep (ParallelDims takes the ep
// ranks from dp_shard x cp, so data_parallel_shard_degree stays the FSDP shard group); a format
// without expert parallelism says it wrote the plan without.
TEST(ExportTest, TorchtitanCarriesExpertParallelDegree) {
  SHARDTUNE_REQUIRE_PYTHON("tomllib");
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.ep = 4;
  j.plan.modeling = model::Modeling::kTorchtitan;
  j.ctx = MakeExportContext(model::FindModelPreset("qwen3-30b-a3b"),
                            profiles::ParseClusterShorthand("8xH100"), j.plan);
  json t = LoadToml(ExportPlan(j.plan, j.ctx, ExportFormat::kTorchtitan).text);
  EXPECT_EQ(Int(t, "/parallelism/expert_parallel_degree"), 4);
  EXPECT_EQ(Int(t, "/parallelism/data_parallel_shard_degree"), 8);
  auto acc = ExportPlan(j.plan, j.ctx, ExportFormat::kAccelerate);
  bool noted = false;
  for (const auto& n : acc.notes) noted |= n.find("ep 4: ") == 0;
  EXPECT_TRUE(noted);
  j.plan.ep = 1;
  for (const auto& n : ExportPlan(j.plan, j.ctx, ExportFormat::kAccelerate).notes) {
    EXPECT_NE(n.find("ep "), 0u) << n;
  }
}

// Liger's module patches: HF Trainer's liger_kernel_config carries exactly the plan's, verl's
// use_liger all three (a subset is noted and written off), every other format a note naming the
// apply call.
TEST(ExportTest, LigerKernelsAreWrittenWhereAFormatHasThem) {
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.liger = {true, true, false};
  json h = model::ParseJsonText(ExportPlan(j.plan, j.ctx, ExportFormat::kHfTrainer).text, "hf-trainer");
  EXPECT_EQ(Bool(h, "/use_liger_kernel"), "true");
  EXPECT_EQ(Bool(h, "/liger_kernel_config/rms_norm"), "true");
  EXPECT_EQ(Bool(h, "/liger_kernel_config/swiglu"), "true");
  EXPECT_EQ(Bool(h, "/liger_kernel_config/rope"), "false");
  EXPECT_EQ(Bool(h, "/liger_kernel_config/fused_linear_cross_entropy"), "false");
  for (ExportFormat f : {ExportFormat::kAccelerate, ExportFormat::kTorchtitan, ExportFormat::kDeepspeed,
                         ExportFormat::kRoll, ExportFormat::kVerl}) {
    bool noted = false;
    for (const auto& n : ExportPlan(j.plan, j.ctx, f).notes) noted |= n.find("liger") == 0;
    EXPECT_TRUE(noted) << ToString(f);
  }
  j.plan.liger = {true, true, true};
  ExportResult v = ExportPlan(j.plan, j.ctx, ExportFormat::kVerl);
  EXPECT_NE(v.text.find("use_liger: true"), std::string::npos) << v.text;
  for (const auto& n : v.notes) EXPECT_NE(n.find("liger"), 0u) << n;
}

// The fused linear cross-entropy: HF Trainer turns on Liger's kernel alone (use_liger_kernel +
// liger_kernel_config, which _apply_liger_kernel_to_instance passes to the model's apply
// function); every other format notes that it has no such key, and nothing is noted without it.
TEST(ExportTest, FusedLossIsLigerInHfTrainerAndANoteElsewhere) {
  Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
  j.plan.loss_kernel = model::LossKernel::kFusedLinear;
  ExportResult hf = ExportPlan(j.plan, j.ctx, ExportFormat::kHfTrainer);
  json h = model::ParseJsonText(hf.text, "hf-trainer");
  EXPECT_EQ(Bool(h, "/use_liger_kernel"), "true");
  EXPECT_EQ(Bool(h, "/liger_kernel_config/fused_linear_cross_entropy"), "true");
  for (const char* k : {"cross_entropy", "rope", "rms_norm", "swiglu", "geglu", "layer_norm"}) {
    EXPECT_EQ(Bool(h, std::string("/liger_kernel_config/") + k), "false") << k;
  }
  for (const auto& n : hf.notes) EXPECT_NE(n.find("loss_kernel"), 0u) << n;
  for (ExportFormat f : {ExportFormat::kAccelerate, ExportFormat::kTorchtitan, ExportFormat::kDeepspeed,
                         ExportFormat::kRoll, ExportFormat::kVerl}) {
    bool noted = false;
    for (const auto& n : ExportPlan(j.plan, j.ctx, f).notes) noted |= n.find("loss_kernel fused_linear: ") == 0;
    EXPECT_TRUE(noted) << ToString(f);
  }
  j.plan.loss_kernel = model::LossKernel::kCrossEntropy;
  EXPECT_FALSE(Has(model::ParseJsonText(ExportPlan(j.plan, j.ctx, ExportFormat::kHfTrainer).text, "hf"),
                   "/use_liger_kernel"));
  for (const auto& n : ExportPlan(j.plan, j.ctx, ExportFormat::kVerl).notes) {
    EXPECT_NE(n.find("loss_kernel"), 0u) << n;
  }
}

// The import side's YAML subset reads the example configs and every YAML export exactly as
// PyYAML's safe_load does.
TEST(ConfigYamlTest, AgreesWithPyYamlOnExamplesAndExports) {
  SHARDTUNE_REQUIRE_PYTHON("yaml");
  std::vector<std::string> texts;
  for (const char* f : {"accelerate_fsdp1.yaml", "accelerate_fsdp2.yaml", "roll_rlvr_fsdp2_cp2.yaml",
                        "verl_grpo_lora.yaml", "verl_sft.yaml"}) {
    std::ifstream in(std::string(SHARDTUNE_TEST_DATA_DIR) + "/configs/" + f);
    texts.push_back(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  Job j = HybridJob();
  for (ExportFormat f : {ExportFormat::kAccelerate, ExportFormat::kRoll, ExportFormat::kVerl}) {
    texts.push_back(ExportPlan(j.plan, j.ctx, f).text);
  }
  for (const auto& text : texts) {
    json mine = model::ParseJsonText(ParseYamlSubset(text, "t").dump(), "subset");
    EXPECT_EQ(mine, LoadYaml(text)) << text;
  }
}

TEST(ExportTest, SameInputsGiveIdenticalText) {
  Job j = HybridJob();
  for (const auto& name : ExportFormatNames()) {
    ExportFormat f = ParseExportFormat(name, "test");
    EXPECT_EQ(ExportPlan(j.plan, j.ctx, f).text, ExportPlan(j.plan, j.ctx, f).text) << name;
  }
}

}  // namespace
}  // namespace shardtune::configs

namespace shardtune::configs {
namespace {

// --sdpa-backend has no key in any format: every export says how to get it in code.
TEST(ExportTest, SdpaBackendIsANoteInEveryFormat) {
  for (ExportFormat f : {ExportFormat::kTorchtitan, ExportFormat::kAccelerate}) {
    Job j = OneNodeJob(model::ShardingStrategy::kFullShard);
    j.plan.sdpa_backend = model::SdpaBackend::kFlash;
    auto r = ExportPlan(j.plan, j.ctx, f);
    bool found = false;
    for (const auto& n : r.notes) found = found || n.find("sdpa_kernel(SDPBackend.FLASH_ATTENTION)") != std::string::npos;
    EXPECT_TRUE(found) << r.text;
    j.plan.sdpa_backend = model::SdpaBackend::kAuto;
    for (const auto& n : ExportPlan(j.plan, j.ctx, f).notes) EXPECT_EQ(n.find("sdpa_backend"), std::string::npos) << n;
  }
}

}  // namespace
}  // namespace shardtune::configs
