// Config import: the example configs of tests/data/configs (expected plans written by hand from
// each file and the source project's documented semantics), bad configs (one line naming the file
// and the key path), unknown and ignored keys, and layering of several files.
#include "planner/configs/config_toml.h"
#include "planner/configs/import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/errors.h"
#include "model/plan_json.h"

namespace shardtune::configs {
namespace {

using model::Plan;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::string Data(const std::string& name) {
  return std::string(SHARDTUNE_TEST_DATA_DIR) + "/configs/" + name;
}

// A Llama model (untied embedding) on one node of 8 GPUs.
ImportContext LlamaOn8() {
  ImportContext ctx;
  ctx.world_size = 8;
  ctx.gpus_per_node = 8;
  ctx.layer_class = "LlamaDecoderLayer";
  ctx.tied_embeddings = false;
  ctx.model_parameters = 1000000;
  return ctx;
}

void ExpectSamePlan(const Plan& got, const Plan& want) {
  EXPECT_EQ(model::PlanToJson(got).dump(1), model::PlanToJson(want).dump(1));
}

Plan FromFile(const std::string& name, const ImportContext& ctx, ImportResult* r = nullptr) {
  Plan p;
  ImportResult res = ImportConfigFile(Data(name), ctx, nullptr, &p);
  if (r) *r = res;
  return p;
}

Plan FromText(const std::string& text, const ImportContext& ctx, ImportResult* r = nullptr,
              const std::string& file = "cfg.yaml") {
  Plan p;
  ImportResult res = ImportConfigText(text, file, ctx, nullptr, &p);
  if (r) *r = res;
  return p;
}

std::string AllWarnings(const ImportResult& r) {
  std::string out;
  for (const auto& w : r.warnings) out += w + "\n";
  return out;
}

TEST(ImportFormatTest, NamesRoundTripAndUnknownSuggests) {
  for (const auto& n : ImportFormatNames())
    EXPECT_EQ(ToString(ParseImportFormat(n, "--from-format")), n);
  EXPECT_THAT([] { ParseImportFormat("rolll", "--from-format"); },
              ThrowsMessage<InputError>(HasSubstr("did you mean \"roll\"")));
}

TEST(ImportFormatTest, DetectedFromContent) {
  EXPECT_EQ(DetectImportFormat("distributed_type: FSDP\n", "a"), ImportFormat::kAccelerate);
  EXPECT_EQ(DetectImportFormat("{\"fsdp\": \"full_shard\"}", "a"), ImportFormat::kHfTrainer);
  EXPECT_EQ(DetectImportFormat("w:\n  strategy_args: {}\n", "a"), ImportFormat::kRoll);
  EXPECT_EQ(DetectImportFormat("actor_rollout_ref: {}\n", "a"), ImportFormat::kVerl);
  EXPECT_THAT([] { DetectImportFormat("foo: 1\n", "x.yaml"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("x.yaml"), HasSubstr("--from-format"))));
}

// accelerate_fsdp2.yaml: fsdp_version 2, reshard true on 8 processes -> FULL_SHARD over all 8;
// TRANSFORMER_BASED_WRAP -> one unit per block, embedding and head in the root; activation
// checkpointing -> full; mixed_precision bf16 -> bf16 params and reduction, fp32 master.
TEST(ImportAccelerateTest, Fsdp2ExampleFile) {
  ImportResult r;
  Plan got = FromFile("accelerate_fsdp2.yaml", LlamaOn8(), &r);
  Plan want;
  want.checkpointing = model::Checkpointing::kFull;
  want.param_dtype = model::DType::kBf16;
  want.reduce_dtype = model::DType::kBf16;
  ExpectSamePlan(got, want);
  EXPECT_EQ(r.format, ImportFormat::kAccelerate);
  EXPECT_EQ(r.world_size, 8);
  std::string w = AllWarnings(r);
  EXPECT_THAT(w, HasSubstr("/compute_environment"));
  EXPECT_THAT(w, HasSubstr("/tpu_use_sudo"));
  EXPECT_THAT(w, HasSubstr("fsdp_cpu_ram_efficient_loading: rank 0 alone"));
}

// accelerate_fsdp1.yaml: FULL_SHARD, BACKWARD_PRE, no forward prefetch, offload params -> all.
TEST(ImportAccelerateTest, Fsdp1ExampleFile) {
  Plan got = FromFile("accelerate_fsdp1.yaml", LlamaOn8());
  Plan want;
  want.offload = model::Offload::kAll;
  want.param_dtype = model::DType::kBf16;
  want.reduce_dtype = model::DType::kBf16;
  ExpectSamePlan(got, want);
}

TEST(ImportAccelerateTest, Fsdp1IntegerCodesAndHybrid) {
  Plan p = FromText(
      "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: 4\n"
      "  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 100000000\n"
      "  fsdp_backward_prefetch: BACKWARD_POST\n  fsdp_forward_prefetch: true\n",
      LlamaOn8());
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kHybridShard);  // code 4 = HYBRID_SHARD
  EXPECT_EQ(p.shard_group_size, 0);                              // FSDP1 hybrid: within a node
  EXPECT_EQ(p.wrap.kind, model::WrapPolicy::Kind::kSize);
  EXPECT_EQ(p.wrap.min_num_params, 100000000);
  EXPECT_EQ(p.backward_prefetch, model::BackwardPrefetch::kPost);
  EXPECT_TRUE(p.forward_prefetch);
}

TEST(ImportAccelerateTest, Fsdp2HybridFromParallelismConfig) {
  Plan p = FromText(
      "distributed_type: FSDP\nnum_processes: 16\nnum_machines: 2\nfsdp_config:\n"
      "  fsdp_version: 2\n  fsdp_reshard_after_forward: false\nparallelism_config:\n"
      "  parallelism_config_dp_replicate_size: 2\n  parallelism_config_dp_shard_size: 8\n",
      ImportContext{});
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kHybridShardZero2);
  EXPECT_EQ(p.shard_group_size, 8);
  EXPECT_FALSE(p.reshard_after_forward);
}

TEST(ImportAccelerateTest, NoWrapIsOneUnitAboveTheModelSize) {
  ImportResult r;
  Plan p = FromText("distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n",
                    LlamaOn8(), &r);
  EXPECT_EQ(p.wrap.kind, model::WrapPolicy::Kind::kSize);
  EXPECT_EQ(p.wrap.min_num_params, LlamaOn8().model_parameters + 1);
  EXPECT_THAT(AllWarnings(r), HasSubstr("NO_WRAP"));
}

TEST(ImportAccelerateTest, MultiGpuIsNoShard) {
  Plan p = FromText("distributed_type: MULTI_GPU\nmixed_precision: 'no'\nnum_processes: 8\n",
                    LlamaOn8());
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kNoShard);
  EXPECT_EQ(p.param_dtype, model::DType::kFp32);
}

// Newer Accelerate names FSDP1's strategy fsdp_reshard_after_forward too (a strategy name there).
TEST(ImportAccelerateTest, Fsdp1StrategyUnderTheNewKey) {
  Plan p = FromText(
      "distributed_type: FSDP\nfsdp_config:\n  fsdp_reshard_after_forward: SHARD_GRAD_OP\n",
      LlamaOn8());
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kShardGradOp);
  EXPECT_FALSE(p.reshard_after_forward);
}

TEST(ImportAccelerateTest, Fsdp2RejectsForwardPrefetchAndStrategyNames) {
  EXPECT_THAT(
      [] {
        FromText(
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_forward_prefetch: "
            "true\n",
            LlamaOn8());
      },
      ThrowsMessage<InputError>(
          HasSubstr("cfg.yaml:/fsdp_config/fsdp_forward_prefetch: expected false")));
  EXPECT_THAT(
      [] {
        FromText(
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_sharding_strategy: "
            "FULL_SHARD\n",
            LlamaOn8());
      },
      ThrowsMessage<InputError>(HasSubstr("fsdp_reshard_after_forward true|false")));
}

TEST(ImportHfTrainerTest, Version2RejectsHybridOptions) {
  EXPECT_THAT(
      [] {
        FromText("{\"fsdp\": \"hybrid_shard auto_wrap\", \"fsdp_config\": {\"fsdp_version\": 2}}",
                 LlamaOn8(), nullptr, "a.json");
      },
      ThrowsMessage<InputError>(HasSubstr("a.json:/fsdp: expected full_shard or shard_grad_op")));
  EXPECT_THAT([] { FromText("{\"fsdp\": \"full_shard wrap\"}", LlamaOn8(), nullptr, "a.json"); },
              ThrowsMessage<InputError>(HasSubstr("got \"wrap\"")));
}

// hf_trainer_args.json: batch 2 x accumulation 4, max_seq_length 2048, bf16 (reduction too),
// adamw_torch_fused, fsdp "full_shard auto_wrap" with version 2 -> FULL_SHARD, block wrap, and
// activation_checkpointing true.
TEST(ImportHfTrainerTest, ExampleFile) {
  ImportResult r;
  Plan got = FromFile("hf_trainer_args.json", LlamaOn8(), &r);
  Plan want;
  want.micro_batch = 2;
  want.grad_accum = 4;
  want.no_sync = true;  // the Trainer skips gradient sync until the last micro-batch
  want.seq_len = 2048;
  want.param_dtype = model::DType::kBf16;
  want.reduce_dtype = model::DType::kBf16;
  want.optimizer_impl = model::OptimizerImpl::kFused;
  want.checkpointing = model::Checkpointing::kFull;
  ExpectSamePlan(got, want);
  EXPECT_EQ(r.format, ImportFormat::kHfTrainer);
  EXPECT_THAT(AllWarnings(r), AllOf(HasSubstr("/learning_rate"), HasSubstr("/report_to")));
}

// TRL's SFT packing (trl/trainer/sft_trainer.py): under "bfd" (the default) padding-free is on, and
// a batch of per_device_train_batch_size packed examples of at most max_length tokens is one row:
// a packed micro-batch of B x max_length tokens whose sequences are at most max_length. "wrapped"
// rows are full max_length rows attended whole: the fixed-length batch.
TEST(ImportTrlTest, PackingIsOnePaddingFreeRowPerMicroBatch) {
  const std::string base = "output_dir: out\nper_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n";
  ImportResult r;
  Plan bfd = FromText(base + "max_length: 2048\npacking: true\n", LlamaOn8(), &r);
  EXPECT_EQ(bfd.micro_batch, 1);
  EXPECT_EQ(bfd.seq_len, 4 * 2048);
  EXPECT_EQ(bfd.packed_seq_len, 2048);
  EXPECT_EQ(bfd.grad_accum, 2);
  EXPECT_THAT(AllWarnings(r), HasSubstr("cfg.yaml:/packing: TRL packs (bfd)"));
  Plan wrapped = FromText(base + "max_length: 2048\npacking: true\npacking_strategy: wrapped\n", LlamaOn8());
  EXPECT_EQ(wrapped.micro_batch, 4);
  EXPECT_EQ(wrapped.seq_len, 2048);
  EXPECT_EQ(wrapped.packed_seq_len, 0);
  // No max_length: SFTConfig's default of 1024 tokens, said in a warning.
  Plan deflt = FromText(base + "packing: true\n", LlamaOn8(), &r);
  EXPECT_EQ(deflt.seq_len, 4 * 1024);
  EXPECT_EQ(deflt.packed_seq_len, 1024);
  EXPECT_THAT(r.seq_len_from, HasSubstr("TRL's SFTConfig default max_length 1024"));
  // padding_free without packing: TRL raises when max_length is set; it has no bound when not.
  EXPECT_THAT([&] { FromText(base + "max_length: 2048\npadding_free: true\n", LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/padding_free: expected true only with packing")));
  EXPECT_THAT([&] { FromText(base + "max_length: null\npacking: true\n", LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/max_length: expected an integer with packing")));
}

// TRL's ModelConfig read from the same file: the model named for the CLI, attention, the load
// dtype (kept for the trained weights without FSDP; under FSDP with mixed precision Accelerate
// upcasts the trainable ones, so only frozen weights keep it) and PEFT LoRA with TRL's defaults
// (r 16, alpha 32, dropout 0.05; PEFT's q_proj, v_proj for a Llama when no targets are named).
TEST(ImportTrlTest, ModelConfigNamesTheModelAndSetsDtypeAndLora) {
  const std::string base = "output_dir: out\nper_device_train_batch_size: 2\nbf16: true\n";
  ImportResult r;
  // fsdp "": the Trainer runs DDP, so the bf16-loaded weights train in bf16.
  Plan ddp = FromText(base + "fsdp: \"\"\nmodel_name_or_path: Qwen/Qwen2.5-7B\ndtype: bfloat16\nattn_implementation: eager\n",
                      LlamaOn8(), &r);
  EXPECT_EQ(r.model_named, "Qwen/Qwen2.5-7B");
  EXPECT_EQ(r.model_named_where, "cfg.yaml:/model_name_or_path");
  EXPECT_EQ(ddp.master_dtype, model::DType::kBf16);
  EXPECT_EQ(ddp.attention, model::Attention::kEager);
  // No fsdp key: the plan's FSDP (shardtune's default, or an Accelerate file layered first), whose
  // mixed precision Accelerate runs with fp32 master weights.
  Plan layered = FromText(base + "dtype: bfloat16\n", LlamaOn8());
  EXPECT_EQ(layered.master_dtype, model::DType::kFp32);
  Plan fsdp = FromText(base + "fsdp: full_shard auto_wrap\ntorch_dtype: bfloat16\nuse_peft: true\n", LlamaOn8(), &r);
  EXPECT_EQ(fsdp.master_dtype, model::DType::kFp32);
  ASSERT_TRUE(fsdp.frozen_dtype.has_value());
  EXPECT_EQ(*fsdp.frozen_dtype, model::DType::kBf16);
  EXPECT_EQ(fsdp.lora.rank, 16);
  EXPECT_DOUBLE_EQ(fsdp.lora.alpha, 32.0);
  EXPECT_DOUBLE_EQ(fsdp.lora.dropout, 0.05);
  EXPECT_EQ(fsdp.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_THAT(AllWarnings(r), HasSubstr("PEFT's default for the model type, q_proj, v_proj"));
  Plan all = FromText(base + "use_peft: true\nlora_r: 8\nlora_target_modules: all-linear\n", LlamaOn8());
  EXPECT_EQ(all.lora.rank, 8);
  EXPECT_EQ(all.lora.targets.size(), 7u);
  Plan off = FromText(base + "use_peft: false\nlora_r: 8\n", LlamaOn8());
  EXPECT_FALSE(off.lora.enabled());
  for (const std::string bad : {"use_dora: true", "load_in_4bit: true", "activation_offloading: true"}) {
    EXPECT_THAT([&] { FromText(base + bad + "\n", LlamaOn8()); },
                ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/" + bad.substr(0, bad.find(':')))))
        << bad;
  }
}

// An SFTConfig's defaults where TRL's differ from the Trainer's (trl/trainer/sft_config.py):
// gradient checkpointing on, bf16 unless fp16, loss_type chunked_nll (nll under Liger), and
// TrainingArguments' per_device_train_batch_size 8 when the file sets none.
TEST(ImportTrlTest, SftConfigDefaultsAndLossType) {
  ImportResult r;
  Plan d = FromText("model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: trl-lib/Capybara\n", LlamaOn8(), &r);
  EXPECT_EQ(d.micro_batch, 8);
  EXPECT_EQ(d.param_dtype, model::DType::kBf16);
  EXPECT_EQ(d.checkpointing, model::Checkpointing::kFull);
  EXPECT_EQ(d.loss_kernel, model::LossKernel::kTrlChunkedNll);
  EXPECT_EQ(d.seq_len, 1024);
  EXPECT_THAT(AllWarnings(r), HasSubstr("TrainingArguments' default 8"));
  Plan nll = FromText("output_dir: o\nper_device_train_batch_size: 2\nloss_type: nll\ngradient_checkpointing: false\n"
                      "bf16: false\n",
                      LlamaOn8());
  EXPECT_EQ(nll.micro_batch, 2);
  EXPECT_EQ(nll.loss_kernel, model::LossKernel::kCrossEntropy);
  EXPECT_EQ(nll.checkpointing, model::Checkpointing::kNone);
  EXPECT_EQ(nll.param_dtype, model::DType::kFp32);
  // max_seq_length (renamed max_length in TRL): an older TRL, without loss_type: the model's loss.
  Plan old = FromText("model_name_or_path: m\nmax_seq_length: 2048\n", LlamaOn8(), &r);
  EXPECT_EQ(old.loss_kernel, model::LossKernel::kCrossEntropy);
  EXPECT_THAT(AllWarnings(r), HasSubstr("cfg.yaml:/max_seq_length: a TRL config from before max_length"));
  Plan liger = FromText("output_dir: o\nmax_length: 512\nuse_liger_kernel: true\n", LlamaOn8());
  EXPECT_EQ(liger.loss_kernel, model::LossKernel::kFusedLinear);
  EXPECT_THAT([&] { FromText("output_dir: o\nmax_length: 512\nloss_type: dft\n", LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/loss_type: expected chunked_nll or nll")));
  EXPECT_THAT([&] { FromText("output_dir: o\nmax_length: 512\nuse_liger_kernel: true\nloss_type: chunked_nll\n", LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/loss_type: expected nll with use_liger_kernel")));
  // The Trainer's own arguments (no TRL key) keep the Trainer's behaviour.
  Plan hf = FromText("{\"per_device_train_batch_size\": 2}", LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(hf.loss_kernel, model::LossKernel::kCrossEntropy);
  EXPECT_EQ(hf.checkpointing, model::Checkpointing::kNone);
  // TrainingArguments' own defaults (training_args.py): batch 8 per device, bf16 and fp16 off.
  EXPECT_EQ(hf.param_dtype, model::DType::kFp32);
  Plan bare = FromText("{\"gradient_accumulation_steps\": 2}", LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(bare.micro_batch, 8);
  EXPECT_EQ(bare.reduce_dtype, model::DType::kFp32);
}

// A `trl dpo --config` file (trl/trainer/dpo_config.py, dpo_trainer.py at f2cd577): each pair's
// chosen and rejected rows are concatenated (2 rows per pair), max_length 1024 by default, the
// per-token log-probs of TRL's selective_log_softmax, and a reference forward in each micro-batch:
// a copy of the model (wrapped as the FSDP version says: BuildPlan settles it), the policy with
// its adapters off under PEFT, none with precomputed log-probs.
TEST(ImportTrlTest, DpoConfigDoublesTheRowsAndAddsTheReferenceForward) {
  ImportResult r;
  Plan d = FromText("model_name_or_path: alignment-handbook/zephyr-7b-sft-full\nbeta: 0.01\n"
                    "per_device_train_batch_size: 8\ngradient_accumulation_steps: 2\nmax_length: 1024\n"
                    "max_prompt_length: 512\nbf16: true\ngradient_checkpointing: true\nloss_type: sigmoid\n",
                    LlamaOn8(), &r);
  EXPECT_EQ(d.micro_batch, 16);
  EXPECT_EQ(d.seq_len, 1024);
  EXPECT_EQ(d.grad_accum, 2);
  EXPECT_EQ(d.loss_kernel, model::LossKernel::kTrlLogps);
  EXPECT_EQ(d.reference, model::InStepReference::kFsdp1Blocks);
  EXPECT_TRUE(r.reference_copy);
  EXPECT_EQ(d.checkpointing, model::Checkpointing::kFull);
  EXPECT_THAT(AllWarnings(r), HasSubstr("8 pairs per device make 16 rows"));
  // DPOConfig's defaults: max_length 1024, bf16, gradient checkpointing; a list of losses.
  Plan deflt = FromText("output_dir: o\nper_device_train_batch_size: 1\nbeta: 0.1\nloss_type: [sigmoid, sft]\n",
                        LlamaOn8(), &r);
  EXPECT_EQ(deflt.micro_batch, 2);
  EXPECT_EQ(deflt.seq_len, 1024);
  EXPECT_EQ(deflt.param_dtype, model::DType::kBf16);
  EXPECT_EQ(deflt.checkpointing, model::Checkpointing::kFull);
  EXPECT_THAT(r.seq_len_from, HasSubstr("TRL's DPOConfig default max_length 1024"));
  // PEFT: the policy with its adapters off; force_use_ref_model: a copy all the same.
  Plan peft = FromText("output_dir: o\nper_device_train_batch_size: 2\nbeta: 0.1\nuse_peft: true\n", LlamaOn8(), &r);
  EXPECT_EQ(peft.reference, model::InStepReference::kAdaptersOff);
  EXPECT_FALSE(r.reference_copy);
  Plan forced = FromText("output_dir: o\nper_device_train_batch_size: 2\nbeta: 0.1\nuse_peft: true\nforce_use_ref_model: true\n",
                         LlamaOn8());
  EXPECT_EQ(forced.reference, model::InStepReference::kFsdp1Blocks);
  // Precomputed reference log-probs: no reference in the steps.
  Plan pre = FromText("output_dir: o\nper_device_train_batch_size: 2\nbeta: 0.1\nprecompute_ref_log_probs: true\n",
                      LlamaOn8(), &r);
  EXPECT_EQ(pre.reference, model::InStepReference::kNone);
  EXPECT_THAT(AllWarnings(r), HasSubstr("cfg.yaml:/precompute_ref_log_probs: no reference forward"));
  // The file's own FSDP version is recorded for BuildPlan.
  FromText("output_dir: o\nper_device_train_batch_size: 2\nbeta: 0.1\nfsdp: full_shard auto_wrap\n"
           "fsdp_config:\n  version: 2\n",
           LlamaOn8(), &r);
  EXPECT_EQ(r.fsdp_version, 2);
  for (const auto& bad_want : std::vector<std::pair<std::string, std::string>>{
           {"loss_type: chunked_nll\n", "cfg.yaml:/loss_type: expected DPO losses among sigmoid"},
           {"use_liger_kernel: true\n", "cfg.yaml:/use_liger_kernel: expected false with a DPO config"},
           {"max_length: null\n", "cfg.yaml:/max_length: expected an integer"},
           {"use_peft: true\nsync_ref_model: true\n", "cfg.yaml:/sync_ref_model: expected false with use_peft"},
           {"use_logits_to_keep: true\n", "cfg.yaml:/use_logits_to_keep"}}) {
    // A copy, not a structured binding: clang (the sanitizer tree) refuses to capture those.
    const std::string bad = bad_want.first, want = bad_want.second;
    EXPECT_THAT([&] { FromText("output_dir: o\nper_device_train_batch_size: 2\nbeta: 0.1\n" + bad, LlamaOn8()); },
                ThrowsMessage<InputError>(HasSubstr(want)))
        << bad;
  }
}

// A recipe as open-r1 lays them out: its hub, logging and data keys are ignored by name, the rest
// is the plan (Liger's fused loss and module patches, 2 x 32768 tokens, accumulation 8).
TEST(ImportTrlTest, RecipeFileIsReadWhole) {
  ImportResult r;
  Plan p = FromFile("trl_sft_recipe.yaml", LlamaOn8(), &r);
  EXPECT_EQ(r.model_named, "Qwen/Qwen2.5-1.5B-Instruct");
  EXPECT_EQ(p.micro_batch, 2);
  EXPECT_EQ(p.seq_len, 32768);
  EXPECT_EQ(p.grad_accum, 8);
  EXPECT_EQ(p.loss_kernel, model::LossKernel::kFusedLinear);
  EXPECT_EQ(p.checkpointing, model::Checkpointing::kFull);
  EXPECT_THAT(AllWarnings(r), AllOf(HasSubstr("/hub_model_id"), HasSubstr("/dataset_name"), HasSubstr("/eos_token")));
}

// gradient_checkpointing as transformers runs it: torch.utils.checkpoint with use_reentrant True
// unless gradient_checkpointing_kwargs says False (modeling_utils.py gradient_checkpointing_enable);
// TRL's trainers default it to False; Accelerate's fsdp activation_checkpointing is non-reentrant.
TEST(ImportHfTrainerTest, GradientCheckpointingIsReentrantAsTransformersRunsIt) {
  Plan hf = FromText("{\"per_device_train_batch_size\": 2, \"gradient_checkpointing\": true}", LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(hf.checkpointing, model::Checkpointing::kFull);
  EXPECT_TRUE(hf.checkpoint_reentrant);
  Plan off = FromText("{\"per_device_train_batch_size\": 2, \"gradient_checkpointing\": true, "
                      "\"gradient_checkpointing_kwargs\": {\"use_reentrant\": false}}",
                      LlamaOn8(), nullptr, "a.json");
  EXPECT_FALSE(off.checkpoint_reentrant);
  Plan trl = FromText("model_name_or_path: m\nmax_length: 512\ngradient_checkpointing: true\n", LlamaOn8());
  EXPECT_FALSE(trl.checkpoint_reentrant);
  Plan trl_on = FromText("model_name_or_path: m\nmax_length: 512\ngradient_checkpointing: true\n"
                         "gradient_checkpointing_kwargs:\n  use_reentrant: true\n",
                         LlamaOn8());
  EXPECT_TRUE(trl_on.checkpoint_reentrant);
  Plan wrapper = FromText("{\"per_device_train_batch_size\": 2, \"fsdp\": \"full_shard auto_wrap\", "
                          "\"fsdp_config\": {\"activation_checkpointing\": true}}",
                          LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(wrapper.checkpointing, model::Checkpointing::kFull);
  EXPECT_FALSE(wrapper.checkpoint_reentrant);
}

TEST(ImportHfTrainerTest, Fsdp1OptionsWithOffloadAndSizeWrap) {
  Plan p = FromText(
      "{\"fsdp\": [\"shard_grad_op\", \"offload\"], \"fsdp_config\": {\"fsdp_min_num_params\": "
      "2000, \"backward_prefetch\": \"backward_post\"}, \"per_device_train_batch_size\": 1}",
      LlamaOn8(), nullptr, "args.json");
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kShardGradOp);
  EXPECT_FALSE(p.reshard_after_forward);
  EXPECT_EQ(p.offload, model::Offload::kAll);
  EXPECT_EQ(p.wrap.kind, model::WrapPolicy::Kind::kSize);
  EXPECT_EQ(p.wrap.min_num_params, 2000);
  EXPECT_EQ(p.backward_prefetch, model::BackwardPrefetch::kPost);
}

// use_liger_kernel: the Trainer's _apply_liger_kernel_to_instance with liger_kernel_config, whose
// apply functions default rope, rms_norm, swiglu and fused_linear_cross_entropy on and
// cross_entropy off. The fused loss is loss_kernel fused_linear, the three module patches
// Plan::liger; Liger's plain cross_entropy kernel is refused by name.
TEST(ImportHfTrainerTest, LigerKernelsAreTheFusedLossAndTheModulePatches) {
  Plan all = FromText("{\"use_liger_kernel\": true}", LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(all.loss_kernel, model::LossKernel::kFusedLinear);
  EXPECT_TRUE(all.liger.rms_norm && all.liger.swiglu && all.liger.rope);
  const std::string only =
      "\"liger_kernel_config\": {\"fused_linear_cross_entropy\": true, \"cross_entropy\": false, "
      "\"rope\": false, \"rms_norm\": false, \"swiglu\": false, \"geglu\": false, "
      "\"layer_norm\": false}";
  Plan p = FromText("{\"use_liger_kernel\": true, " + only + "}", LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(p.loss_kernel, model::LossKernel::kFusedLinear);
  EXPECT_FALSE(p.liger.any());
  Plan some = FromText("{\"use_liger_kernel\": true, \"liger_kernel_config\": {\"rope\": false, "
                       "\"fused_linear_cross_entropy\": false}}",
                       LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(some.loss_kernel, model::LossKernel::kCrossEntropy);
  EXPECT_TRUE(some.liger.rms_norm && some.liger.swiglu);
  EXPECT_FALSE(some.liger.rope);
  Plan off = FromText("{\"use_liger_kernel\": false}", LlamaOn8(), nullptr, "a.json");
  EXPECT_EQ(off.loss_kernel, model::LossKernel::kCrossEntropy);
  EXPECT_FALSE(off.liger.any());
  EXPECT_THAT(
      [] {
        FromText("{\"use_liger_kernel\": true, \"liger_kernel_config\": {\"cross_entropy\": true, "
                 "\"fused_linear_cross_entropy\": false}}",
                 LlamaOn8(), nullptr, "a.json");
      },
      ThrowsMessage<InputError>(HasSubstr("a.json:/liger_kernel_config/cross_entropy: expected false")));
}

// verl's use_liger: the actor and the reference (fsdp_workers.py _build_model_optimizer) and the
// SFT trainer apply Liger's defaults; the critic's builder does not read it.
TEST(ImportVerlTest, UseLigerPatchesTheActorAndSftNotTheCritic) {
  const std::string ppo =
      "actor_rollout_ref:\n  model:\n    use_liger: true\n  actor:\n"
      "    ppo_micro_batch_size_per_gpu: 4\n    ppo_mini_batch_size: 32\n"
      "critic:\n  enable: true\n  model:\n    use_liger: true\n  ppo_micro_batch_size_per_gpu: 4\n";
  Plan actor = FromText(ppo, LlamaOn8());
  EXPECT_TRUE(actor.liger.rms_norm && actor.liger.swiglu && actor.liger.rope);
  EXPECT_EQ(actor.loss_kernel, model::LossKernel::kVerlFlashCe);  // verl's head is unchanged
  ImportContext critic = LlamaOn8();
  critic.worker = "critic";
  EXPECT_FALSE(FromText(ppo, critic).liger.any());
  Plan sft = FromText("trainer:\n  n_gpus_per_node: 8\ndata:\n  micro_batch_size_per_gpu: 2\n"
                      "  train_batch_size: 64\nmodel:\n  partial_pretrain: x\n  use_liger: true\n",
                      LlamaOn8());
  EXPECT_TRUE(sft.liger.rms_norm && sft.liger.swiglu && sft.liger.rope);
}

// roll_rlvr_fsdp2_cp2.yaml, worker actor_train: 8 GPUs (device_mapping), fsdp_size 4 < 8 -> HSDP
// in groups of 4 (2 replicas); ulysses_size 2; param_dtype bf16 -> loaded and computed in bf16;
// reduce float32; gradient checkpointing on; per-device batch 1 x 32 accumulation; sequence
// 2048 + 4096; the untied embedding gets its own unit (apply_fsdp2).
Plan RollExamplePlan() {
  Plan want;
  want.strategy = model::ShardingStrategy::kHybridShard;
  want.shard_group_size = 4;
  want.cp = 2;
  want.master_dtype = model::DType::kBf16;
  want.param_dtype = model::DType::kBf16;
  want.checkpointing = model::Checkpointing::kFull;
  want.micro_batch = 1;
  want.grad_accum = 32;
  want.seq_len = 6144;
  want.wrap.embedding_unit = true;
  return want;
}

// verl's engine SFT trainer (verl.trainer.sft_trainer over sft_trainer_engine.yaml, as Hydra
// composes it): the FSDP engine's config at /engine with its Ulysses size, data's token budget,
// and the world from torchrun (--cluster), not trainer.n_gpus_per_node (1 in the yaml, unread).
TEST(ImportVerlTest, EngineSftReadsTheEngineSectionAndTheDataBudget) {
  const std::string text =
      "data:\n  train_batch_size: 96\n  micro_batch_size_per_gpu: 4\n  max_token_len_per_gpu: 4096\n"
      "  use_dynamic_bsz: true\n  max_length: 2048\n  pad_mode: no_padding\n"
      "model:\n  path: Qwen/Qwen2.5-0.5B\n  enable_gradient_checkpointing: true\n  use_remove_padding: true\n"
      "engine:\n  strategy: fsdp2\n  ulysses_sequence_parallel_size: 2\n  fsdp_size: -1\n  model_dtype: fp32\n"
      "trainer:\n  nnodes: 1\n  n_gpus_per_node: 1\n";
  Plan p;
  ImportResult r = ImportConfigText(text, "sft_engine.yaml", LlamaOn8(), nullptr, &p);
  EXPECT_EQ(p.cp, 2);
  // dp = 8 / 2 = 4: 96 / 4 = 24 sequences per rank; rows of 4096 x sp 2 = 8192 tokens holding
  // sequences up to 2048, four full-length ones a row (seqlen_balancing.py): 24 / 4 = 6 rows.
  EXPECT_EQ(p.seq_len, 8192);
  EXPECT_EQ(p.packed_seq_len, 2048);
  EXPECT_EQ(p.micro_batch, 1);
  EXPECT_EQ(p.grad_accum, 6);
  EXPECT_EQ(p.checkpointing, model::Checkpointing::kFull);
  EXPECT_EQ(p.loss_kernel, model::LossKernel::kVerlFlashCe);  // engine forward: logprobs_from_logits
  EXPECT_EQ(r.sequences_per_step, 96);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_THAT(r.warnings.front(), HasSubstr("/trainer/n_gpus_per_node (the world is torchrun's"));
  EXPECT_THAT(r.warnings.front(), ::testing::Not(HasSubstr("/engine/ulysses_sequence_parallel_size")));
  // A budget larger than the rank's mini-batch: a micro-batch holds at most its 24 sequences.
  Plan big;
  std::string larger = text;
  larger.replace(larger.find("4096"), 4, "65536");
  ImportConfigText(larger, "sft_engine.yaml", LlamaOn8(), nullptr, &big);
  EXPECT_EQ(big.seq_len, 24 * 2048);
  EXPECT_EQ(big.grad_accum, 1);
  // Fixed micro-batches: 24 / 4 = 6 of 4 sequences.
  Plan fixed;
  std::string off = text;
  off.replace(off.find("use_dynamic_bsz: true"), 21, "use_dynamic_bsz: false");
  ImportConfigText(off, "sft_engine.yaml", LlamaOn8(), nullptr, &fixed);
  EXPECT_EQ(fixed.micro_batch, 4);
  EXPECT_EQ(fixed.grad_accum, 6);
  EXPECT_EQ(fixed.packed_seq_len, 0);
  std::string bad = text;
  bad.replace(bad.find("train_batch_size: 96"), 20, "train_batch_size: 90");
  EXPECT_THAT([&] { ImportConfigText(bad, "sft_engine.yaml", LlamaOn8(), nullptr, &fixed); },
              ThrowsMessage<InputError>(HasSubstr("sft_engine.yaml:/data/train_batch_size: expected a multiple")));
}

TEST(ImportRollTest, ExampleFileTrainWorker) {
  ImportResult r;
  Plan got = FromFile("roll_rlvr_fsdp2_cp2.yaml", LlamaOn8(), &r);
  ExpectSamePlan(got, RollExamplePlan());
  EXPECT_EQ(r.worker, "actor_train");
  EXPECT_EQ(r.world_size, 8);
  std::string w = AllWarnings(r);
  EXPECT_THAT(w, AllOf(HasSubstr("/actor_infer"), HasSubstr("/rewards"), HasSubstr("/exp_name"),
                       HasSubstr("/actor_train/training_args/learning_rate")));
}

// The reference worker: fsdp2_infer, infer_batch_size 4, offload_policy true, no checkpointing.
TEST(ImportRollTest, ExampleFileReferenceWorker) {
  ImportContext ctx = LlamaOn8();
  ctx.worker = "reference";
  ImportResult r;
  Plan got = FromFile("roll_rlvr_fsdp2_cp2.yaml", ctx, &r);
  Plan want = RollExamplePlan();
  want.role = model::Role::kInfer;
  want.micro_batch = 4;
  want.grad_accum = 1;
  want.offload = model::Offload::kAll;
  want.checkpointing = model::Checkpointing::kNone;
  ExpectSamePlan(got, want);
  EXPECT_EQ(r.worker, "reference");
}

// ROLL's MoE examples list the attention and MLP classes (qwen3-30BA3B-rlvr_fsdp2/rlvr_config.yaml:
// [Qwen3MoeAttention, Qwen3MoeSparseMoeBlock]); for Llama the pair is LlamaAttention and LlamaMLP,
// with or without the decoder class beside them (apply_fsdp2 never wraps a parent of a selected
// module). One of the two alone is an error naming both.
TEST(ImportRollTest, AttentionAndMlpClassesAreSubBlockUnits) {
  auto roll = [](const std::string& classes) {
    return FromText("sequence_length: 1024\nsft_train:\n  strategy_args:\n"
                    "    strategy_name: fsdp2_train\n    strategy_config:\n      wrap_policy:\n"
                    "        transformer_layer_cls_to_wrap: " + classes + "\n"
                    "  device_mapping: [0, 1, 2, 3, 4, 5, 6, 7]\n",
                    LlamaOn8());
  };
  EXPECT_TRUE(roll("[LlamaAttention, LlamaMLP]").wrap.sub_block_units);
  EXPECT_TRUE(roll("[LlamaDecoderLayer, LlamaMLP, LlamaAttention]").wrap.sub_block_units);
  EXPECT_FALSE(roll("[LlamaDecoderLayer]").wrap.sub_block_units);
  EXPECT_THAT([&] { roll("[LlamaAttention]"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("transformer_layer_cls_to_wrap"),
                                              HasSubstr("LlamaAttention together with"))));
  EXPECT_THAT([&] { roll("[LlamaAttention, MixtralSparseMoeBlock]"); },
              ThrowsMessage<InputError>(HasSubstr("expected the model's block class")));
}

// ROLL's expert parallelism (qwen3-30BA3B-sft_fsdp2/sft_config_ep.yaml: fsdp_size 8, efsdp_size 1,
// ep_size 8; the RLVR example: 32, 4, 8): Plan::ep, the local experts sharded over the shard group
// / ep ranks, which must be efsdp_size; the experts module named by moe_experts is their unit
// (never per-expert units, even with apply_expert_patch). An expert mesh of another size, a
// product not dividing the world (ROLL asserts it) and ep without moe_experts are refused by
// name; efsdp_size without ep is a warning.
TEST(ImportRollTest, ExpertParallelIsThePlansEp) {
  auto roll = [](const std::string& strategy, ImportResult* r = nullptr) {
    return FromText("sequence_length: 1024\nsft_train:\n  strategy_args:\n"
                    "    strategy_name: fsdp2_train\n    strategy_config:\n      fsdp_size: 8\n" +
                        strategy + "  device_mapping: [0, 1, 2, 3, 4, 5, 6, 7]\n",
                    LlamaOn8(), r);
  };
  const std::string moe = "      wrap_policy:\n        moe_experts: [Qwen3MoeExperts]\n";
  Plan p = roll("      ep_size: 8\n      efsdp_size: 1\n      apply_expert_patch: true\n" + moe);
  EXPECT_EQ(p.ep, 8);
  EXPECT_EQ(p.ExpertShardGroup(8, 8), 1);
  EXPECT_FALSE(p.wrap.expert_units);
  EXPECT_EQ(p.modeling, model::Modeling::kHf);
  EXPECT_EQ(roll("      ep_size: 4\n      efsdp_size: 2\n" + moe).ExpertShardGroup(8, 8), 2);
  EXPECT_THAT([&] { roll("      ep_size: 4\n      efsdp_size: 1\n" + moe); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("strategy_config/efsdp_size: expected 2"),
                                              HasSubstr("shard group 8 / ep_size 4"))));
  EXPECT_THAT([&] { roll("      ep_size: 3\n" + moe); },
              ThrowsMessage<InputError>(HasSubstr("dividing the world size 8")));
  EXPECT_THAT([&] { roll("      ep_size: 8\n"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("strategy_config/ep_size"),
                                              HasSubstr("moe_experts"))));
  ImportResult r;
  EXPECT_EQ(roll("      efsdp_size: 4\n", &r).ep, 1);
  EXPECT_THAT(AllWarnings(r), HasSubstr("efsdp_size: read only with ep_size > 1"));
}

TEST(ImportRollTest, LoraDropoutIsReadAndChecked) {
  const std::string head = "sequence_length: 1024\nsft_train:\n  model_args:\n    lora_target: q_proj\n";
  const std::string tail = "  strategy_args:\n    strategy_name: fsdp2_train\n"
                           "  device_mapping: [0, 1, 2, 3, 4, 5, 6, 7]\n";
  Plan p = FromText(head + "    lora_dropout: 0.05\n" + tail, LlamaOn8());
  EXPECT_DOUBLE_EQ(p.lora.dropout, 0.05);
  EXPECT_THROW(FromText(head + "    lora_dropout: 1.5\n" + tail, LlamaOn8()), InputError);
}

TEST(ImportRollTest, DefaultsLoraFreezeTiledAndPureFsdp) {
  Plan p = FromText(
      "sequence_length: 1024\nsft_train:\n  model_args:\n    lora_target: q_proj,v_proj\n"
      "    freeze_module_prefix: model.embed_tokens, model.layers.0.\n  strategy_args:\n"
      "    strategy_name: fsdp2_train\n    strategy_config:\n      fsdp_size: 16\n"
      "      apply_tiled_mlp: true\n      reduce_scatter_during_grad_accumulation: false\n"
      "  device_mapping: [0, 1, 2, 3, 4, 5, 6, 7]\n",
      LlamaOn8());
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kFullShard);  // fsdp_size >= world: pure FSDP
  EXPECT_EQ(p.shard_group_size, 0);
  EXPECT_EQ(p.master_dtype, model::DType::kFp32);  // fsdp2_train loads fp32 without param_dtype
  EXPECT_EQ(p.param_dtype, model::DType::kBf16);
  EXPECT_EQ(p.micro_batch, 8);           // training_args.py default
  EXPECT_EQ(p.lora.rank, 8);             // model_args.py default
  EXPECT_DOUBLE_EQ(p.lora.alpha, 16.0);  // 2 x rank
  EXPECT_DOUBLE_EQ(p.lora.dropout, 0.0);  // model_args.py default
  EXPECT_EQ(p.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(p.frozen_prefixes, (std::vector<std::string>{"model.embed_tokens", "model.layers.0."}));
  EXPECT_EQ(p.tiled_mlp_shards, 4);  // tiled_num_shards default
  EXPECT_TRUE(p.no_sync);
  EXPECT_EQ(p.checkpointing, model::Checkpointing::kFull);
}

// verl_grpo_lora.yaml, actor: 8 GPUs, sp 2 -> 4 data-parallel ranks; ppo_mini_batch_size 256 x
// rollout.n 5 / 4 = 320 sequences per rank per update; micro 4 -> 80 micro-batches; sequence
// 512 + 1024; LoRA 64/32 on all linear layers; fsdp2 with fsdp_size -1 -> FULL_SHARD; actor
// model_dtype default fp32, params bf16, reduction fp32.
TEST(ImportVerlTest, ExampleFileActor) {
  ImportResult r;
  Plan got = FromFile("verl_grpo_lora.yaml", LlamaOn8(), &r);
  Plan want;
  want.cp = 2;
  want.micro_batch = 4;
  want.grad_accum = 80;
  want.seq_len = 1536;
  want.checkpointing = model::Checkpointing::kFull;
  want.lora.rank = 64;
  want.lora.alpha = 32.0;
  want.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  // use_remove_padding true: dp_actor.py's packed logits through flash-attn's cross-entropy.
  want.loss_kernel = model::LossKernel::kVerlFlashCe;
  want.loss_fp32_upcast = false;
  ExpectSamePlan(got, want);
  EXPECT_EQ(r.worker, "actor");
  EXPECT_THAT(AllWarnings(r),
              AllOf(HasSubstr("/actor_rollout_ref/rollout"), HasSubstr("/trainer/logger")));
  // use_kl_loss: the reference policy runs on the same GPUs, in verl's one process; GRPO has no
  // critic (adv_estimator grpo).
  ASSERT_EQ(r.roles.size(), 2u);
  EXPECT_EQ(r.roles[0].name, "ref");
  EXPECT_EQ(r.roles[0].plan.role, model::Role::kInfer);
  EXPECT_EQ(r.roles[0].plan.micro_batch, 40);
  EXPECT_TRUE(r.roles_in_one_process);
  // The actor's old-log-prob pass (compute_log_prob every step): forward only on the actor's own
  // FSDP module (its LoRA, sp 2, fp32 master parameters) at rollout.log_prob_micro_batch_size_per_gpu
  // 40 of the padded 1536 tokens.
  const ImportedRole& lp = r.roles[1];
  EXPECT_EQ(lp.name, "actor old log-prob");
  EXPECT_TRUE(lp.shares_actor_states);
  Plan want_lp = want;
  want_lp.role = model::Role::kInfer;
  want_lp.micro_batch = 40;
  want_lp.grad_accum = 1;
  ExpectSamePlan(lp.plan, want_lp);
}

// The ref worker: inference, log-prob micro-batch 40, parameters offloaded (verl forces CPU
// offload for non-actor roles), model_dtype default bf16, sp from the actor.
TEST(ImportVerlTest, ExampleFileRef) {
  ImportContext ctx = LlamaOn8();
  ctx.worker = "ref";
  Plan got = FromFile("verl_grpo_lora.yaml", ctx);
  Plan want;
  want.role = model::Role::kInfer;
  want.cp = 2;
  want.micro_batch = 40;
  want.seq_len = 1536;
  want.offload = model::Offload::kAll;
  want.master_dtype = model::DType::kBf16;
  want.lora.rank = 64;
  want.lora.alpha = 32.0;
  want.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  want.loss_kernel = model::LossKernel::kVerlFlashCe;  // compute_ref_log_prob: the same head
  want.loss_fp32_upcast = false;
  ExpectSamePlan(got, want);
}

// verl_sft.yaml: 8 GPUs, sp 2 -> dp 4; train_batch_size 256 / 4 = 64 per rank / micro 4 = 16.
TEST(ImportVerlTest, SftExampleFile) {
  Plan got = FromFile("verl_sft.yaml", LlamaOn8());
  Plan want;
  want.cp = 2;
  want.micro_batch = 4;
  want.grad_accum = 16;
  want.seq_len = 1024;
  want.checkpointing = model::Checkpointing::kFull;
  ExpectSamePlan(got, want);
}

// Bad configs: one line naming the file and the key path, what was expected and what was found.
TEST(ImportErrorTest, UnknownStrategyName) {
  EXPECT_THAT(
      [] {
        FromText("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FUL_SHARD\n",
                 LlamaOn8());
      },
      ThrowsMessage<InputError>(HasSubstr(
          "cfg.yaml:/fsdp_config/fsdp_sharding_strategy: expected one of FULL_SHARD, "
          "SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2, got \"FUL_SHARD\" (did you "
          "mean \"FULL_SHARD\"?)")));
}

TEST(ImportErrorTest, RollFsdpSizeNotDividingTheWorld) {
  EXPECT_THAT(
      [] {
        FromText(
            "w:\n  strategy_args:\n    strategy_name: fsdp2_train\n    strategy_config:\n"
            "      fsdp_size: 3\n  device_mapping: list(range(0,8))\n",
            LlamaOn8());
      },
      ThrowsMessage<InputError>(HasSubstr(
          "cfg.yaml:/w/strategy_args/strategy_config/fsdp_size: expected a divisor of the world "
          "size 8")));
}

TEST(ImportErrorTest, LayerClassNotInTheModel) {
  EXPECT_THAT(
      [] {
        FromText(
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: "
            "TRANSFORMER_BASED_WRAP\n  fsdp_transformer_layer_cls_to_wrap: GPT2Block\n",
            LlamaOn8());
      },
      ThrowsMessage<InputError>(HasSubstr(
          "cfg.yaml:/fsdp_config/fsdp_transformer_layer_cls_to_wrap: expected the model's block "
          "class \"LlamaDecoderLayer\", got \"GPT2Block\"")));
}

TEST(ImportErrorTest, ZeroOrNegativeBatch) {
  EXPECT_THAT(
      [] { FromText("{\"per_device_train_batch_size\": 0}", LlamaOn8(), nullptr, "a.json"); },
      ThrowsMessage<InputError>(
          HasSubstr("a.json:/per_device_train_batch_size: expected an integer in [1, ")));
  EXPECT_THAT(
      [] {
        FromText(
            "w:\n  training_args:\n    gradient_accumulation_steps: -2\n  strategy_args:\n"
            "    strategy_name: fsdp2_train\n",
            LlamaOn8());
      },
      ThrowsMessage<InputError>(
          HasSubstr("cfg.yaml:/w/training_args/gradient_accumulation_steps")));
}

TEST(ImportErrorTest, WorldSizeConflictsWithTheCluster) {
  EXPECT_THAT(
      [] { FromText("distributed_type: FSDP\nnum_processes: 16\nfsdp_config: {}\n", LlamaOn8()); },
      ThrowsMessage<InputError>(
          HasSubstr("cfg.yaml:/num_processes: expected the --cluster world size 8 ranks, got 16")));
  EXPECT_THAT(
      [] {
        FromText(
            "trainer:\n  nnodes: 2\n  n_gpus_per_node: 8\nactor_rollout_ref:\n  actor:\n"
            "    ppo_micro_batch_size_per_gpu: 1\n",
            LlamaOn8());
      },
      ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/trainer/n_gpus_per_node: expected the "
                                          "--cluster world size 8 ranks, got 16")));
}

// DeepSpeed's ZeRO config, which `export` writes but --from does not read, is named as such.
TEST(ImportErrorTest, DeepSpeedJsonIsNamed) {
  EXPECT_THAT(
      [] {
        FromText("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 3}}",
                 LlamaOn8(), nullptr, "ds.json");
      },
      ThrowsMessage<InputError>(AllOf(HasSubstr("ds.json: expected HF Trainer arguments"),
                                      HasSubstr("a DeepSpeed config (zero_optimization)"))));
  // HF Trainer arguments that name a DeepSpeed file are still HF Trainer arguments.
  EXPECT_NO_THROW(FromText("{\"per_device_train_batch_size\": 2, \"output_dir\": \"o\"}", LlamaOn8(),
                           nullptr, "a.json"));
}

// torchtitan's job TOML (torchtitan <= 0.2.2; the layout of models/llama3/train_configs/
// llama3_8b.toml, written here): 8 ranks, HSDP 2 x 4, local batch 2, global 32 -> accumulation
// 32 / (2 x 8) = 2, seq 8192, bf16 params and fp32 reduce, per-op selective checkpointing,
// torchtitan's own code with the embedding and [norm, output] as units; [model] names the preset.
// What it cannot be is refused by name: tensor, pipeline and ring-attention context parallelism,
// a world the degrees do not tile, an accumulation that does not divide, memory_budget AC.
TEST(ImportTorchtitanTest, JobTomlIsThePlan) {
  const std::string job =
      "# torchtitan job\n[job]\ndump_folder = \"./outputs\"\n\n[model]\nname = \"llama3\"\n"
      "flavor = \"8B\"\nhf_assets_path = './assets/hf/Llama-3.1-8B'\n\n[optimizer]\nname = \"AdamW\"\n"
      "lr = 3e-4\neps = 1e-8\n\n[lr_scheduler]\nwarmup_steps = 200\n\n[training]\nlocal_batch_size = 2\n"
      "global_batch_size = 32\nseq_len = 8_192\nmax_norm = 1.0  # grad clipping\nsteps = 1000\n"
      "dataset = \"c4\"\nmixed_precision_param = \"bfloat16\"\n\n[parallelism]\n"
      "data_parallel_replicate_degree = 2\ndata_parallel_shard_degree = -1\n"
      "fsdp_reshard_after_forward = \"always\"\ntensor_parallel_degree = 1\n\n"
      "[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = 'op'\n\n"
      "[compile]\nenable = false\ncomponents = [\"model\", \"loss\"]\n";
  ImportResult r;
  Plan p = FromText(job, LlamaOn8(), &r, "llama3_8b.toml");
  EXPECT_EQ(r.format, ImportFormat::kTorchtitan);
  EXPECT_EQ(r.model_named, "llama3-8b");
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kHybridShard);
  EXPECT_EQ(p.shard_group_size, 4);
  EXPECT_EQ(p.micro_batch, 2);
  EXPECT_EQ(p.grad_accum, 2);
  EXPECT_EQ(p.seq_len, 8192);
  EXPECT_EQ(p.param_dtype, model::DType::kBf16);
  EXPECT_EQ(p.reduce_dtype, model::DType::kFp32);
  EXPECT_EQ(p.master_dtype, model::DType::kFp32);
  EXPECT_EQ(p.checkpointing, model::Checkpointing::kSelective);
  EXPECT_EQ(p.modeling, model::Modeling::kTorchtitan);
  EXPECT_TRUE(p.wrap.embedding_unit && p.wrap.head_unit);
  EXPECT_EQ(p.optimizer_impl, model::OptimizerImpl::kFused);  // Optimizer.implementation's default
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = job;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  EXPECT_EQ(FromText(with("selective_ac_option = 'op'", "selective_ac_option = \"3\""), LlamaOn8()).checkpoint_every_k, 3);
  EXPECT_THAT([&] { FromText(with("tensor_parallel_degree = 1", "tensor_parallel_degree = 2"), LlamaOn8(), nullptr, "t.toml"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("t.toml:/parallelism/tensor_parallel_degree"),
                                              HasSubstr("tensor parallelism"))));
  EXPECT_THAT([&] { FromText(with("tensor_parallel_degree = 1", "context_parallel_degree = 2"), LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("ring attention")));
  EXPECT_THAT([&] { FromText(with("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 3"), LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("8 ranks (ParallelDims._validate), got 2 x 3")));
  EXPECT_THAT([&] { FromText(with("global_batch_size = 32", "global_batch_size = 36"), LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("a multiple of local_batch_size x the data-parallel degree (2 x 8)")));
  EXPECT_THAT([&] { FromText(with("mode = \"selective\"", "mode = \"memory_budget\""), LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("memory_budget")));
  EXPECT_THAT([&] { FromText(with("[compile]", "[trainng]"), LlamaOn8(), nullptr, "t.toml"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("t.toml:/trainng"), HasSubstr("did you mean \"training\"?"))));
  // v0.2.2's JobConfig: mixed_precision_reduce is Literal["float32"]; [quantize] configures the
  // converters only (ignored, said so); DeepEP's dispatch is refused, the standard one is neutral.
  EXPECT_THAT(
      [&] {
        FromText(with("mixed_precision_param = \"bfloat16\"",
                      "mixed_precision_param = \"bfloat16\"\nmixed_precision_reduce = \"bfloat16\""),
                 LlamaOn8(), nullptr, "t.toml");
      },
      ThrowsMessage<InputError>(AllOf(HasSubstr("t.toml:/training/mixed_precision_reduce"), HasSubstr("float32"))));
  ImportResult q;
  FromText(with("[compile]", "[quantize.linear.float8]\nfilter_fqns = [\"output\"]\n\n[compile]"), LlamaOn8(), &q);
  EXPECT_THAT(AllWarnings(q), HasSubstr("/quantize (read only through model.converters)"));
  EXPECT_THAT([&] { FromText(with("tensor_parallel_degree = 1", "expert_parallel_comm_backend = \"deepep\""), LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr("DeepEP")));
  EXPECT_NO_THROW(FromText(with("tensor_parallel_degree = 1", "expert_parallel_comm_backend = \"standard\""), LlamaOn8()));
  // [model]: torchtitan's Qwen3 dense flavors are the presets of the same shapes; a flavor none
  // matches is named as it is, which resolving turns into the error that asks for --model.
  ImportResult qwen;
  FromText(with("name = \"llama3\"\nflavor = \"8B\"", "name = \"qwen3\"\nflavor = \"32B\""), LlamaOn8(), &qwen);
  EXPECT_EQ(qwen.model_named, "qwen3-32b");
  ImportResult other;
  FromText(with("name = \"llama3\"\nflavor = \"8B\"", "name = \"llama4\"\nflavor = \"17bx16e\""), LlamaOn8(), &other);
  EXPECT_EQ(other.model_named, "torchtitan llama4 17bx16e");
}

// The TOML subset: tables (dotted headers nest), strings with escapes, integers with _, floats,
// booleans, arrays, comments; what it does not read is a one-line error naming the line.
TEST(TomlSubsetTest, ReadsTablesValuesAndNamesWhatItDoesNotRead) {
  nlohmann::ordered_json j = ParseTomlSubset(
      "top = 1\n[a]\ns = \"x\\\"y\\u00e9\"  # c\nl = 'C:\\p'\ni = -1_000\nf = 6e-4\nflag = true\n"
      "arr = [1, 2.5, \"z\",]\n[a.b]\nk = false\n",
      "t.toml");
  EXPECT_EQ(j["top"], 1);
  EXPECT_EQ(j["a"]["s"], "x\"y\u00e9");
  EXPECT_EQ(j["a"]["l"], "C:\\p");
  EXPECT_EQ(j["a"]["i"], -1000);
  EXPECT_DOUBLE_EQ(j["a"]["f"].get<double>(), 6e-4);
  EXPECT_EQ(j["a"]["flag"], true);
  EXPECT_EQ(j["a"]["arr"].size(), 3u);
  EXPECT_EQ(j["a"]["b"]["k"], false);  // [a.b] nests in [a]
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[a]\nk = 1\nk = 2\n", "t.toml:3: expected each key once"},
      {"[a]\n[a]\n", "t.toml:2: expected each table once"},
      {"[a]\nb = 1\n[a.b]\n", "t.toml:3: expected a new table, got [a.b], whose name holds a value"},
      {"[a]\nk = {x = 1}\n", "t.toml:2: expected a value other than an inline table"},
      {"[a]\nk = \"\"\"x\n", "t.toml:2: expected a one-line string"},
      {"[a]\nk = [1,\n2]\n", "t.toml:2: expected the array's closing ]"},
      {"[a]\n\"q\" = 1\n", "t.toml:2: expected key = value with a bare key"},
      {"[a]\nk = 1 2\n", "t.toml:2: expected the line to end after the value"},
      {"[a]\nk = 1__0\n", "t.toml:2: expected a number with _ only between digits"},
      {"[[a]]\n", "t.toml:1: expected a table header"},
      {"[a]\nk = 2024-01-01\n", "t.toml:2: expected a string (quoted), a number"},
  };
  for (const auto& item : bad) {
    const std::string& text = item.first;  // (a lambda may not capture a structured binding)
    EXPECT_THAT([&] { ParseTomlSubset(text, "t.toml"); }, ThrowsMessage<InputError>(HasSubstr(item.second)))
        << text;
  }
}

TEST(ImportErrorTest, UnknownKeyIsAnErrorWithTheClosestKnownName) {
  EXPECT_THAT(
      [] {
        FromText("distributed_type: FSDP\nfsdp_config:\n  fsdp_ofload_params: true\n", LlamaOn8());
      },
      ThrowsMessage<InputError>(AllOf(HasSubstr("cfg.yaml:/fsdp_config/fsdp_ofload_params"),
                                      HasSubstr("did you mean \"fsdp_offload_params\"?"))));
}

TEST(ImportErrorTest, UnsupportedKeyWithAnEffectIsAnError) {
  EXPECT_THAT([] { FromText("distributed_type: FSDP\nuse_cpu: true\n", LlamaOn8()); },
              ThrowsMessage<InputError>(
                  AllOf(HasSubstr("cfg.yaml:/use_cpu"), HasSubstr("training on CPUs through Accelerate"))));
  // The same key at its neutral value is accepted.
  EXPECT_NO_THROW(FromText("distributed_type: FSDP\nuse_cpu: false\nfsdp_config:\n  fsdp_version: 2\n", LlamaOn8()));
}

// verl's enable_activation_offload: fsdp_workers.py hands it to the actor's (and the critic's)
// _build_model_optimizer, never to the reference's; false or absent leaves activations on the GPU.
TEST(ImportVerlTest, ActivationOffloadIsTheActorsVerlAsyncOffload) {
  const std::string actor =
      "actor_rollout_ref:\n  model:\n    enable_activation_offload: true\n  actor:\n"
      "    ppo_micro_batch_size_per_gpu: 1\n    ppo_mini_batch_size: 8\n";
  EXPECT_EQ(FromText(actor, LlamaOn8()).activation_offload, model::ActivationOffload::kVerlAsync);
  EXPECT_EQ(FromText("actor_rollout_ref:\n  model:\n    enable_activation_offload: false\n  actor:\n"
                     "    ppo_micro_batch_size_per_gpu: 1\n    ppo_mini_batch_size: 8\n",
                     LlamaOn8())
                .activation_offload,
            model::ActivationOffload::kNone);
}

// fsdp_sft_trainer.py (the legacy SFT trainer) never reads enable_activation_offload, so its import
// warns and leaves the activations on the GPU.
TEST(ImportVerlTest, ActivationOffloadIsIgnoredWithAWarningByTheLegacySftTrainer) {
  ImportResult r;
  const Plan legacy = FromText(
      "defaults:\n  - sft_trainer\n  - _self_\ntrainer:\n  nnodes: 1\n  n_gpus_per_node: 8\n"
      "data:\n  train_batch_size: 8\n  micro_batch_size_per_gpu: 1\n"
      "  max_length: 4096\nmodel:\n  strategy: fsdp2\n  enable_activation_offload: true\n",
      LlamaOn8(), &r);
  EXPECT_EQ(legacy.activation_offload, model::ActivationOffload::kNone);
  EXPECT_THAT(AllWarnings(r), HasSubstr("fsdp_sft_trainer.py does not read it"));
}

// verl's token budget (use_dynamic_bsz): dp_actor.py update_policy packs each mini-batch into
// micro-batches of at most ppo_max_token_len_per_gpu x sp tokens (seqlen_balancing.py
// rearrange_micro_batches). 8 GPUs, sp 2 -> dp 4; mini-batch 64 prompts x rollout.n 8 = 512
// sequences, 128 per dp rank; sequences up to 1024 + 3072 = 4096 tokens; rows of 8192 x 2 =
// 16384 tokens over the cp group; at most min(128, ceil(128 x 4096 / 16384)) = 32 rows.
const char* kVerlDynamic =
    "data:\n  max_prompt_length: 1024\n  max_response_length: 3072\n"
    "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 64\n    use_dynamic_bsz: true\n"
    "    ppo_max_token_len_per_gpu: 8192\n    ulysses_sequence_parallel_size: 2\n"
    "  rollout:\n    n: 8\n";

TEST(ImportVerlTest, TokenBudgetIsAPackedRow) {
  ImportResult r;
  Plan got = FromText(kVerlDynamic, LlamaOn8(), &r);
  EXPECT_EQ(got.micro_batch, 1);
  EXPECT_EQ(got.seq_len, 16384);
  EXPECT_EQ(got.packed_seq_len, 4096);
  EXPECT_EQ(got.grad_accum, 32);
  EXPECT_EQ(got.cp, 2);
  EXPECT_EQ(got.loss_kernel, model::LossKernel::kVerlFlashCe);
  EXPECT_THAT(r.seq_len_from, HasSubstr("max_prompt_length 1024 + max_response_length 3072"));
  // The ref follows the actor's budget when it sets none (ref.yaml's oc.select defaults).
  ImportContext ref = LlamaOn8();
  ref.worker = "ref";
  Plan r2 = FromText(std::string(kVerlDynamic) + "  ref:\n    log_prob_micro_batch_size_per_gpu: 4\n", ref);
  EXPECT_EQ(r2.micro_batch, 1);
  EXPECT_EQ(r2.seq_len, 16384);
  EXPECT_EQ(r2.packed_seq_len, 4096);
  EXPECT_EQ(r2.grad_accum, 1);
  // Its own budget wins.
  Plan r3 = FromText(std::string(kVerlDynamic) +
                         "  ref:\n    log_prob_use_dynamic_bsz: true\n"
                         "    log_prob_max_token_len_per_gpu: 32768\n",
                     ref);
  EXPECT_EQ(r3.seq_len, 65536);
}

// actor.freeze_vision_tower (fsdp_workers.py: get_vl_model_vision_tower(...).requires_grad_(False))
// freezes a VL model's tower, the context's prefix (model.visual: the Qwen tower, merger
// included); on a text model verl finds no tower and trains as usual; the ref does not train.
TEST(ImportVerlTest, FreezeVisionTowerFreezesTheTowersPrefix) {
  const std::string text =
      "actor_rollout_ref:\n  actor:\n    ppo_micro_batch_size_per_gpu: 1\n    ppo_mini_batch_size: 8\n"
      "    freeze_vision_tower: true\n";
  ImportContext vl = LlamaOn8();
  vl.vision_tower_prefix = "model.visual";
  EXPECT_EQ(FromText(text, vl).frozen_prefixes, std::vector<std::string>{"model.visual"});
  EXPECT_TRUE(FromText(text, LlamaOn8()).frozen_prefixes.empty());
  const std::string off = text.substr(0, text.find("    freeze")) + "    freeze_vision_tower: false\n";
  EXPECT_TRUE(FromText(off, vl).frozen_prefixes.empty());
}

// model.exclude_modules (peft LoraConfig): a string is the regular expression itself; a list of
// names becomes one that matches a name or a ".name" suffix (metacharacters quoted).
TEST(ImportVerlTest, LoraExcludeModulesIsTheAdaptersExclusion) {
  const std::string base =
      "actor_rollout_ref:\n  actor:\n    ppo_micro_batch_size_per_gpu: 1\n    ppo_mini_batch_size: 8\n"
      "  model:\n    lora_rank: 8\n    target_modules: [q_proj]\n";
  EXPECT_EQ(FromText(base + "    exclude_modules: '.*visual.*'\n", LlamaOn8()).lora.exclude, ".*visual.*");
  EXPECT_EQ(FromText(base + "    exclude_modules: [lm_head, mlp.0]\n", LlamaOn8()).lora.exclude,
            "(.*\\.)?(lm_head|mlp\\.0)");
  EXPECT_EQ(FromText(base, LlamaOn8()).lora.exclude, "");
}

// actor_rollout_ref.rollout names the engine that shares the GPUs (import.h RolloutEngine):
// verl_grpo_lora.yaml runs vLLM at gpu_memory_utilization 0.6 with rollout.yaml's defaults
// free_cache_engine true and enforce_eager false.
void ExpectEngine(const RolloutEngine& e, const std::string& role, const std::string& name,
                  double utilization, bool free_cache_engine, bool enforce_eager) {
  EXPECT_EQ(e.role, role);
  EXPECT_EQ(e.name, name);
  EXPECT_DOUBLE_EQ(e.gpu_memory_utilization, utilization);
  EXPECT_EQ(e.free_cache_engine, free_cache_engine);
  EXPECT_EQ(e.enforce_eager, enforce_eager);
}

TEST(ImportVerlTest, RolloutEngineIsReadWithVerlsDefaults) {
  ImportResult r;
  FromFile("verl_grpo_lora.yaml", LlamaOn8(), &r);
  ASSERT_EQ(r.engines.size(), 1u);
  ExpectEngine(r.engines[0], "rollout", "vllm", 0.6, true, false);
  // The old-log-prob pass's keys are read (the actor old log-prob role), not listed as ignored.
  EXPECT_THAT(AllWarnings(r), testing::Not(HasSubstr("rollout/log_prob_micro_batch_size_per_gpu")));
  auto engine = [](const std::string& rollout) {
    ImportResult out;
    FromText(std::string(kVerlDynamic) + rollout, LlamaOn8(), &out);
    return out;
  };
  ImportResult sg = engine("    name: sglang\n    gpu_memory_utilization: 0.85\n"
                           "    free_cache_engine: false\n    enforce_eager: true\n");
  ASSERT_EQ(sg.engines.size(), 1u);
  ExpectEngine(sg.engines[0], "rollout", "sglang", 0.85, false, true);
  EXPECT_DOUBLE_EQ(engine("    name: vllm\n").engines.at(0).gpu_memory_utilization, 0.5);
  EXPECT_TRUE(engine("    name: hf\n").engines.empty());  // the actor generates
  ImportResult unnamed = engine("");
  EXPECT_TRUE(unnamed.engines.empty());
  EXPECT_THAT(AllWarnings(unnamed), HasSubstr("/actor_rollout_ref/rollout/name not given"));
  EXPECT_THAT([&] { engine("    name: vllm\n    gpu_memory_utilization: 1.5\n"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("cfg.yaml:/actor_rollout_ref/rollout/gpu_memory_utilization"),
                                              HasSubstr("got 1.5"))));
  EXPECT_THAT([&] { engine("    name: tgi\n"); },
              ThrowsMessage<InputError>(HasSubstr("expected vllm, sglang, trtllm or hf")));
}

// reward_model.enable without enable_resource_pool puts the reward model on the actor's GPUs
// (main_ppo.py add_reward_model_worker, global_pool). With use_reward_loop (true by default) it is
// the reward loop's engine with reward_model.rollout's share (dp_reward_loop.yaml defaults: 0.5,
// free_cache_engine true, enforce_eager true); otherwise fsdp_workers.py RewardModelWorker, a
// forward-only FSDP role on its own model, bf16, parameters on the host.
TEST(ImportVerlTest, RewardModelOnTheActorsGpus) {
  auto read = [](const std::string& rm) {
    ImportResult out;
    FromText(std::string(kVerlDynamic) + "    name: vllm\n" + rm, LlamaOn8(), &out);
    return out;
  };
  // The reward loop's engine, after the rollout engine.
  ImportResult loop = read("reward_model:\n  enable: true\n  model:\n    path: ~/models/rm\n"
                           "  rollout:\n    name: vllm\n    gpu_memory_utilization: 0.8\n"
                           "    tensor_model_parallel_size: 1\n");
  ASSERT_EQ(loop.engines.size(), 2u);
  ExpectEngine(loop.engines[1], "reward model", "vllm", 0.8, true, true);
  EXPECT_THAT(AllWarnings(loop), HasSubstr("/reward_model/rollout/tensor_model_parallel_size"));
  EXPECT_THAT(AllWarnings(loop), HasSubstr("/reward_model/model (the reward loop's engine does not read it)"));
  for (const auto& r : loop.roles) EXPECT_NE(r.name, "reward model");
  ImportResult defaults = read("reward_model:\n  enable: true\n  rollout:\n    name: sglang\n");
  ASSERT_EQ(defaults.engines.size(), 2u);
  EXPECT_DOUBLE_EQ(defaults.engines[1].gpu_memory_utilization, 0.5);
  // Its own pool, or not enabled: nothing on these GPUs.
  EXPECT_EQ(read("reward_model:\n  enable: true\n  enable_resource_pool: true\n  rollout:\n    name: vllm\n")
                .engines.size(), 1u);
  EXPECT_EQ(read("reward_model:\n  enable: false\n").engines.size(), 1u);
  // rollout.yaml's name is ???: required.
  EXPECT_THAT([&] { read("reward_model:\n  enable: true\n  rollout:\n    gpu_memory_utilization: 0.8\n"); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/reward_model/rollout/name")));
  EXPECT_THAT([&] { read("reward_model:\n  enable: true\n  strategy: megatron\n"); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/reward_model/strategy")));
  // The legacy worker: micro-batches of micro_batch_size_per_gpu at the padded width 4096
  // (1024 + 3072), padded rows without use_remove_padding.
  ImportResult legacy = read("reward_model:\n  enable: true\n  use_reward_loop: false\n"
                             "  micro_batch_size_per_gpu: 32\n  model:\n    path: ~/models/rm\n");
  EXPECT_EQ(legacy.engines.size(), 1u);
  const ImportedRole* rm = nullptr;
  for (const auto& r : legacy.roles) {
    if (r.name == "reward model") rm = &r;
  }
  ASSERT_NE(rm, nullptr);
  EXPECT_EQ(rm->model_named, "~/models/rm");
  EXPECT_EQ(rm->model_named_where, "cfg.yaml:/reward_model/model/path");
  EXPECT_TRUE(rm->value_head);
  EXPECT_EQ(rm->plan.role, model::Role::kInfer);
  EXPECT_EQ(rm->plan.offload, model::Offload::kAll);
  EXPECT_EQ(rm->plan.master_dtype, model::DType::kBf16);
  EXPECT_EQ(rm->plan.param_dtype, model::DType::kBf16);
  EXPECT_EQ(rm->plan.checkpointing, model::Checkpointing::kNone);
  EXPECT_EQ(rm->plan.micro_batch, 32);
  EXPECT_EQ(rm->plan.seq_len, 4096);
  EXPECT_EQ(rm->plan.packed_seq_len, 0);
  EXPECT_TRUE(rm->plan.padding_mask);
  EXPECT_EQ(rm->plan.cp, 1);
  // With the input tokenizer switch, max_length is the sequence; use_dynamic_bsz and the budget
  // default to the critic's (dp_reward_model.yaml interpolations): a packed row of
  // forward_max_token_len_per_gpu tokens.
  ImportResult dyn = read("critic:\n  use_dynamic_bsz: true\n  forward_max_token_len_per_gpu: 20000\n"
                          "reward_model:\n  enable: true\n  use_reward_loop: false\n  max_length: 2048\n"
                          "  model:\n    path: ~/models/rm\n    input_tokenizer: ~/models/actor\n"
                          "    use_remove_padding: true\n");
  rm = nullptr;
  for (const auto& r : dyn.roles) {
    if (r.name == "reward model") rm = &r;
  }
  ASSERT_NE(rm, nullptr);
  EXPECT_EQ(rm->plan.micro_batch, 1);
  EXPECT_EQ(rm->plan.seq_len, 20000);
  EXPECT_EQ(rm->plan.packed_seq_len, 2048);
  EXPECT_FALSE(rm->plan.padding_mask);
  // No path: the reward model is unknown.
  EXPECT_THAT([&] { read("reward_model:\n  enable: true\n  use_reward_loop: false\n  micro_batch_size_per_gpu: 4\n"); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/reward_model/model/path")));
  // Neither a micro-batch nor a token budget (compute_rm_score splits by micro_batch_size_per_gpu).
  EXPECT_THAT([&] { read("reward_model:\n  enable: true\n  use_reward_loop: false\n  model:\n    path: x\n"); },
              ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/reward_model/micro_batch_size_per_gpu")));
}

// The old-log-prob pass follows the actor's token budget unless the rollout section sets its own
// (rollout.yaml: log_prob_use_dynamic_bsz and log_prob_max_token_len_per_gpu oc.select the
// actor's); without a micro-batch size or a budget verl refuses the file, and shardtune says the
// pass is not estimated.
TEST(ImportVerlTest, OldLogProbPassTakesTheRolloutsLogProbBatching) {
  ImportResult r;
  FromText(std::string(kVerlDynamic) + "    name: vllm\n", LlamaOn8(), &r);
  ASSERT_EQ(r.roles.size(), 1u);
  EXPECT_EQ(r.roles[0].plan.seq_len, 16384);  // 8192 x sp 2, the actor's budget
  EXPECT_EQ(r.roles[0].plan.packed_seq_len, 4096);
  EXPECT_EQ(r.roles[0].plan.role, model::Role::kInfer);
  ImportResult own;
  FromText(std::string(kVerlDynamic) + "    log_prob_max_token_len_per_gpu: 24576\n", LlamaOn8(), &own);
  ASSERT_EQ(own.roles.size(), 1u);
  EXPECT_EQ(own.roles[0].plan.seq_len, 49152);
  ImportResult fixed;
  FromText(std::string(kVerlDynamic) + "    log_prob_use_dynamic_bsz: false\n"
                                       "    log_prob_micro_batch_size_per_gpu: 6\n", LlamaOn8(), &fixed);
  ASSERT_EQ(fixed.roles.size(), 1u);
  EXPECT_EQ(fixed.roles[0].plan.micro_batch, 6);
  EXPECT_EQ(fixed.roles[0].plan.packed_seq_len, 0);
  ImportResult none;
  FromText(std::string(kVerlDynamic) + "    log_prob_use_dynamic_bsz: false\n", LlamaOn8(), &none);
  EXPECT_TRUE(none.roles.empty());
  EXPECT_THAT(AllWarnings(none), HasSubstr("log_prob_micro_batch_size_per_gpu not given"));
}

TEST(ImportVerlTest, TokenBudgetBelowThePaddedWidthIsAnError) {
  // verl asserts max_token_len (2048 x sp 2 = 4096) >= the padded width 1024 + 3072 + 1.
  std::string text = kVerlDynamic;
  text.replace(text.find("max_response_length: 3072"), 25, "max_response_length: 3073");
  text.replace(text.find("ppo_max_token_len_per_gpu: 8192"), 31, "ppo_max_token_len_per_gpu: 2048");
  EXPECT_THAT([&] { FromText(text, LlamaOn8()); },
              ThrowsMessage<InputError>(
                  AllOf(HasSubstr("cfg.yaml:/actor_rollout_ref/actor/ppo_max_token_len_per_gpu"),
                        HasSubstr("at least (max_prompt_length + max_response_length) / sp = 2049"),
                        HasSubstr("got 2048"))));
}

// use_remove_padding false: dp_actor.py's padded branch (LossKernel::kVerlPaddedCe) on the
// [B, prompt + response] batch with its attention mask; its response part is
// data.max_response_length (512 by default). The critic's own use_remove_padding (false in
// dp_critic.yaml) puts flash attention's unpad / pad on its batch too. verl's ActorConfig and
// CriticConfig refuse Ulysses without remove-padding; the PrefixGrouper forward of the padded
// branch is refused by name.
TEST(ImportVerlTest, PaddedLogProbPathReadsTheResponsePart) {
  const std::string head =
      "data:\n  max_prompt_length: 1024\n  max_response_length: 512\n"
      "actor_rollout_ref:\n  model:\n    use_remove_padding: false\n  actor:\n"
      "    ppo_micro_batch_size_per_gpu: 4\n    ppo_mini_batch_size: 32\n";
  ImportResult r;
  Plan p = FromText(head, LlamaOn8(), &r);
  EXPECT_EQ(p.loss_kernel, model::LossKernel::kVerlPaddedCe);
  EXPECT_EQ(p.response_len, 512);
  EXPECT_EQ(p.seq_len, 1536);
  EXPECT_TRUE(p.padding_mask);
  EXPECT_FALSE(p.entropy_from_logits);
  EXPECT_EQ(p.micro_batch, 4);
  // The entropy reads the padded logits (compiled entropy_from_logits), with a warning.
  ImportResult re;
  Plan e = FromText(head + "    entropy_coeff: 0.001\n", LlamaOn8(), &re);
  EXPECT_TRUE(e.entropy_from_logits);
  EXPECT_THAT(AllWarnings(re), HasSubstr("keeps the whole [B, S, V] lm_head output"));
  EXPECT_THAT([&] { FromText(head + "    ulysses_sequence_parallel_size: 2\n", LlamaOn8()); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("/actor_rollout_ref/model/use_remove_padding"),
                                              HasSubstr("refuses sequence parallelism"))));
  EXPECT_THAT([&] { FromText(head + "    use_prefix_grouper: true\n", LlamaOn8()); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("/actor_rollout_ref/actor/use_prefix_grouper"),
                                              HasSubstr("PrefixGrouper"))));
  // With remove-padding (the default) the prefix grouper is never taken: ignored.
  EXPECT_NO_THROW(FromText(
      "actor_rollout_ref:\n  actor:\n    ppo_micro_batch_size_per_gpu: 4\n"
      "    ppo_mini_batch_size: 32\n    use_prefix_grouper: true\n", LlamaOn8()));
  // A token budget with the padded branch: a packed row, said to be the least it can be.
  ImportResult rd;
  Plan d = FromText(
      "data:\n  max_prompt_length: 1024\n  max_response_length: 512\n"
      "actor_rollout_ref:\n  model:\n    use_remove_padding: false\n  actor:\n"
      "    use_dynamic_bsz: true\n    ppo_max_token_len_per_gpu: 6144\n    ppo_mini_batch_size: 32\n",
      LlamaOn8(), &rd);
  EXPECT_EQ(d.packed_seq_len, 1536);
  EXPECT_EQ(d.seq_len, 6144);
  EXPECT_EQ(d.response_len, 512);
  EXPECT_THAT(AllWarnings(rd), HasSubstr("padded to the padded width"));
  EXPECT_TRUE(d.Problems("plan", 8, 8, 32, 4096).empty());
}

// use_fused_kernels: the model returns the log-probs from verl's fused kernel, for the actor and
// the reference alike, on either padding path (monkey_patch.py patch_forward_with_backends);
// fused_kernel_options.impl_backend picks torch (hf_model.yaml's default) or triton, anything
// else is refused. The entropy's gradient reaches the torch kernel only with entropy_coeff != 0;
// calculate_entropy alone changes nothing (the kernel computes it in every chunk anyway). verl's
// actor asserts the prefix grouper and the fused kernels apart.
TEST(ImportVerlTest, FusedKernelsPickVerlsFusedHead) {
  const std::string head =
      "actor_rollout_ref:\n  model:\n    use_fused_kernels: true\n  actor:\n"
      "    ppo_micro_batch_size_per_gpu: 4\n    ppo_mini_batch_size: 32\n";
  Plan p = FromText(head, LlamaOn8());
  EXPECT_EQ(p.loss_kernel, model::LossKernel::kVerlFusedTorch);
  EXPECT_FALSE(p.padding_mask);
  EXPECT_FALSE(p.entropy_from_logits);
  EXPECT_TRUE(p.VerlPacksTokens());
  EXPECT_TRUE(FromText(head + "    entropy_coeff: 0.001\n", LlamaOn8()).entropy_from_logits);
  EXPECT_FALSE(FromText(head + "    calculate_entropy: true\n", LlamaOn8()).entropy_from_logits);
  ImportContext ref = LlamaOn8();
  ref.worker = "ref";
  EXPECT_EQ(FromText(head + "  ref:\n    log_prob_micro_batch_size_per_gpu: 8\n", ref).loss_kernel,
            model::LossKernel::kVerlFusedTorch);
  const std::string triton =
      "actor_rollout_ref:\n  model:\n    use_fused_kernels: true\n    fused_kernel_options:\n"
      "      impl_backend: triton\n    use_remove_padding: false\n  actor:\n"
      "    ppo_micro_batch_size_per_gpu: 4\n    ppo_mini_batch_size: 32\n    entropy_coeff: 0.01\n";
  Plan t = FromText(triton, LlamaOn8());
  EXPECT_EQ(t.loss_kernel, model::LossKernel::kVerlFusedTriton);
  EXPECT_TRUE(t.padding_mask);  // the padded batch, attention mask and all
  EXPECT_EQ(t.response_len, 0);  // no response slice of the logits is copied
  EXPECT_FALSE(t.entropy_from_logits);
  EXPECT_TRUE(t.Problems("plan", 8, 8, 32, 4096).empty());
  EXPECT_THAT([&] { FromText(std::string(triton).replace(triton.find("triton"), 6, "cuda"), LlamaOn8()); },
              ThrowsMessage<InputError>(AllOf(
                  HasSubstr("/actor_rollout_ref/model/fused_kernel_options/impl_backend"),
                  HasSubstr("torch"), HasSubstr("\"cuda\""))));
  EXPECT_THAT([&] { FromText(head + "    use_prefix_grouper: true\n", LlamaOn8()); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("/actor_rollout_ref/actor/use_prefix_grouper"),
                                              HasSubstr("use_fused_kernels"))));
}

TEST(ImportVerlTest, LogProbPathsNotModelledAreRefusedByName) {
  EXPECT_THAT(
      [] {
        FromText("actor_rollout_ref:\n  actor:\n    ppo_micro_batch_size_per_gpu: 1\n"
                 "    ppo_mini_batch_size: 8\n    entropy_coeff: 0.001\n"
                 "    use_torch_compile: false\n",
                 LlamaOn8());
      },
      ThrowsMessage<InputError>(AllOf(HasSubstr("/actor_rollout_ref/actor/use_torch_compile"),
                                      HasSubstr("eager entropy_from_logits"))));
  // The compiled entropy is read, with a warning saying what is assumed.
  ImportResult r;
  FromText("actor_rollout_ref:\n  actor:\n    ppo_micro_batch_size_per_gpu: 1\n"
           "    ppo_mini_batch_size: 8\n    entropy_coeff: 0.001\n",
           LlamaOn8(), &r);
  EXPECT_THAT(AllWarnings(r), HasSubstr("/actor_rollout_ref/actor/entropy_coeff: the entropy joins"));
}

// verl SFT's deprecated global data.micro_batch_size is not read by fsdp_sft_trainer.py: a
// warning naming it, not an error.
TEST(ImportVerlTest, DeprecatedSftMicroBatchSizeIsAWarning) {
  ImportResult r;
  FromText("trainer:\n  n_gpus_per_node: 8\ndata:\n  micro_batch_size: 16\n"
           "  micro_batch_size_per_gpu: 2\n  train_batch_size: 64\nmodel:\n  partial_pretrain: x\n",
           LlamaOn8(), &r);
  EXPECT_THAT(AllWarnings(r), HasSubstr("/data/micro_batch_size (deprecated, not read"));
}

// PPO with GAE: verl's critic trains on the actor's GPUs (need_critic). Its keys default to the
// actor's (mini-batch 64 x rollout.n 4 = 256 sequences / dp 8 = 32 per rank / micro 4 = 8
// micro-batches), its Ulysses size is its own (1, though the actor's is 2), its model carries a
// value head, and param_offload + optimizer_offload take its states off the GPU between phases.
const char* kVerlPpo =
    "algorithm:\n  adv_estimator: gae\n"
    "actor_rollout_ref:\n  model:\n    path: Qwen/Qwen3-8B\n  actor:\n    ppo_mini_batch_size: 64\n"
    "    ppo_micro_batch_size_per_gpu: 2\n    ulysses_sequence_parallel_size: 2\n"
    "  rollout:\n    n: 4\n"
    "critic:\n  ppo_micro_batch_size_per_gpu: 4\n  model:\n    path: Qwen/Qwen3-8B\n"
    "    fsdp_config:\n      param_offload: true\n      optimizer_offload: true\n";

TEST(ImportVerlTest, PpoCriticIsACoLocatedRoleWithAValueHead) {
  ImportResult r;
  Plan actor = FromText(kVerlPpo, LlamaOn8(), &r);
  EXPECT_EQ(actor.micro_batch, 2);
  ASSERT_EQ(r.roles.size(), 1u);  // no use_kl_loss: no reference policy
  const ImportedRole& c = r.roles[0];
  EXPECT_EQ(c.name, "critic");
  EXPECT_TRUE(c.value_head);
  EXPECT_TRUE(c.offloaded_when_idle);
  EXPECT_EQ(c.plan.role, model::Role::kTrain);
  EXPECT_EQ(c.plan.cp, 1);
  EXPECT_EQ(c.plan.micro_batch, 4);
  EXPECT_EQ(c.plan.grad_accum, 8);
  EXPECT_EQ(c.plan.checkpointing, model::Checkpointing::kFull);  // dp_critic.yaml default
  EXPECT_EQ(c.plan.loss_kernel, model::LossKernel::kCrossEntropy);
  EXPECT_TRUE(c.plan.padding_mask);     // dp_critic.yaml: use_remove_padding false
  EXPECT_FALSE(actor.padding_mask);     // the actor packs (hf_model.yaml: true)
  EXPECT_FALSE(r.offloaded_when_idle);  // the actor keeps its states
  // Read as fsdp_config's other booleans are: the string "true" too (ConfigReader::Bool).
  std::string quoted = kVerlPpo;
  quoted.replace(quoted.find("param_offload: true"), 19, "param_offload: 'true'");
  ImportResult q;
  FromText(quoted, LlamaOn8(), &q);
  ASSERT_EQ(q.roles.size(), 1u);
  EXPECT_TRUE(q.roles[0].offloaded_when_idle);
  // --from-worker critic: the critic is the plan.
  ImportContext ctx = LlamaOn8();
  ctx.worker = "critic";
  ImportResult rc;
  Plan critic = FromText(kVerlPpo, ctx, &rc);
  EXPECT_TRUE(rc.value_head);
  EXPECT_EQ(rc.worker, "critic");
  EXPECT_EQ(critic.micro_batch, 4);
  EXPECT_TRUE(rc.roles.empty());
  // GRPO: no critic; no adv_estimator and no critic section: a warning that verl's default
  // (gae) would add one.
  ImportResult g;
  std::string grpo = kVerlPpo;
  grpo.replace(grpo.find("gae"), 3, "grpo");
  FromText(grpo, LlamaOn8(), &g);
  EXPECT_TRUE(g.roles.empty());
  EXPECT_THAT(AllWarnings(g), HasSubstr("/critic"));  // read by nobody: listed as ignored
  ImportResult none;
  FromText("actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 8\n"
           "    ppo_micro_batch_size_per_gpu: 1\n",
           LlamaOn8(), &none);
  EXPECT_THAT(AllWarnings(none), HasSubstr("no algorithm.adv_estimator"));
  // The actor's token budget carries over to the critic (critic.yaml's oc.select), whose padded
  // batches (use_remove_padding false) make that a lower bound: said.
  std::string dynamic = kVerlPpo;
  dynamic.replace(dynamic.find("    ppo_micro_batch_size_per_gpu: 2\n"), 36,
                  "    use_dynamic_bsz: true\n");
  ImportResult d;
  FromText(dynamic, LlamaOn8(), &d);
  // (and the actor's old-log-prob pass, under the actor's budget: rollout.yaml's oc.select)
  ASSERT_EQ(d.roles.size(), 2u);
  EXPECT_EQ(d.roles[1].name, "actor old log-prob");
  EXPECT_EQ(d.roles[0].name, "critic");
  EXPECT_EQ(d.roles[0].plan.seq_len, 32768);  // dp_critic's own budget, sp 1
  EXPECT_EQ(d.roles[0].plan.packed_seq_len, 1024);  // verl's default 512 + 512
  EXPECT_THAT(AllWarnings(d), HasSubstr("the critic pads each micro-batch to the padded width"));
}

TEST(ImportErrorTest, VerlMiniBatchNotAMultipleOfTheMicroBatch) {
  EXPECT_THAT(
      [] {
        FromText(
            "actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 24\n"
            "    ppo_micro_batch_size_per_gpu: 2\n",
            LlamaOn8());  // 24 / 8 ranks = 3 per rank, not a multiple of 2
      },
      ThrowsMessage<InputError>(HasSubstr("cfg.yaml:/actor_rollout_ref/actor/ppo_mini_batch_size: "
                                          "expected a per-rank batch (3)")));
}

TEST(ImportErrorTest, RollUlyssesLargerThanFsdpSize) {
  EXPECT_THAT(
      [] {
        FromText(
            "w:\n  model_args:\n    ulysses_size: 4\n  strategy_args:\n    strategy_name: "
            "fsdp2_train\n    strategy_config:\n      fsdp_size: 2\n",
            LlamaOn8());
      },
      ThrowsMessage<InputError>(HasSubstr("at least ulysses_size 4")));
}

// Files layer in order: the Trainer arguments only change what they name.
TEST(ImportLayeringTest, SecondFileKeepsWhatItDoesNotName) {
  ImportContext ctx = LlamaOn8();
  Plan p;
  ImportConfigFile(Data("accelerate_fsdp1.yaml"), ctx, nullptr, &p);
  ImportConfigText("{\"per_device_train_batch_size\": 3, \"fp16\": true, \"bf16\": false}",
                   "b.json", ctx, nullptr, &p);
  EXPECT_EQ(p.offload, model::Offload::kAll);  // from the Accelerate file
  EXPECT_EQ(p.micro_batch, 3);
  EXPECT_EQ(p.param_dtype, model::DType::kFp16);
  EXPECT_EQ(p.reduce_dtype, model::DType::kFp16);
}

// The message of the InputError that importing `text` throws ("" when it imports).
std::string ImportError(const std::string& text, const std::string& file = "cfg.yaml",
                        const std::string& worker = "") {
  ImportContext ctx = LlamaOn8();
  ctx.worker = worker;
  try {
    FromText(text, ctx, nullptr, file);
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find_first_of("\r\n"), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

// Contract violations found by tests/fuzz (config_import); the inputs are kept in
// tests/fuzz/regressions/config_import/ under the names in the comments.
TEST(ImportFuzzRegressionTest, InvalidUtf8IsAnInputErrorNamingTheLine) {
  // invalid_utf8: was nlohmann type_error 316 from dump() in a message.
  EXPECT_EQ(ImportError("distributed_type: FSDP\nfsdp_config: \xD6\n"),
            "cfg.yaml:2: expected printable UTF-8 text, got the byte 0xD6 at column 14");
  // JSON too, before the JSON reader (whose message would quote the byte).
  EXPECT_EQ(ImportError("{\"output_dir\":\n \"\xD6\"}", "cfg.json"),
            "cfg.json:2: expected UTF-8 text, got the byte 0xD6 at column 3");
}

TEST(ImportFuzzRegressionTest, KeysWithLineBreaksAreEscapedInMessages) {
  EXPECT_THAT(ImportError("distributed_type: FSDP\n\"a\\nb\": 1\n"),
              HasSubstr("cfg.yaml:/a\\u000ab: expected a known key, got unknown key \"a\\nb\""));
  EXPECT_THAT(ImportError("{\"output_dir\": \"x\", \"a\\r\": 1}", "cfg.json"),
              HasSubstr("cfg.json:/a\\u000d: expected a known key, got unknown key \"a\\r\""));
}

TEST(ImportFuzzRegressionTest, MissingOrNullSectionsAreInputErrors) {
  // verl_sft_without_model: *Section("model") dereferenced an empty optional (ASan:
  // stack-use-after-scope).
  EXPECT_EQ(ImportError("actor_rollout_ref: ~\ndata: {}\n"
                        "trainer: {nnodes: 1, n_gpus_per_node: 8}\n"),
            "cfg.yaml:/model: expected a mapping, got nothing");
  EXPECT_EQ(ImportError("actor_train:\n  strategy_args: ~\n", "cfg.yaml", "actor_train"),
            "cfg.yaml:/actor_train/strategy_args: expected a mapping, got null");
}

TEST(ImportFuzzRegressionTest, OutOfRangeNumbersAreInputErrors) {
  // A float beyond int64_t was cast to it (undefined); 2^64-1 read as int64_t wrapped to -1.
  EXPECT_THAT(ImportError("{\"output_dir\": \"x\", \"per_device_train_batch_size\": 1e300}",
                          "cfg.json"),
              HasSubstr("cfg.json:/per_device_train_batch_size: expected an integer in [1, "));
  EXPECT_THAT(ImportError("{\"output_dir\": \"x\", \"per_device_train_batch_size\": "
                          "18446744073709551615}",
                          "cfg.json"),
              HasSubstr("got 18446744073709551615"));
  EXPECT_THAT(ImportError("distributed_type: FSDP\nnum_processes: 1" + std::string(400, '0') +
                          ".0\n"),
              HasSubstr("cfg.yaml:/num_processes: expected an integer in [1, 1048576], got .inf"));
  // prompt_length + response_length overflowed int64_t.
  EXPECT_THAT(ImportError("response_length: 9223372036854775807\nprompt_length: 1\nactor_train:\n"
                          "  strategy_args: {strategy_name: fsdp2_train}\n"),
              HasSubstr("cfg.yaml:/response_length: expected an integer in [1, "
                        "4611686018427387903], got 9223372036854775807"));
  // device_mapping: std::stol threw out_of_range on 23 digits.
  EXPECT_THAT(ImportError("actor_train:\n  device_mapping: list(range(0,99999999999999999999999))\n"
                          "  strategy_args: {strategy_name: fsdp2_train}\n"),
              HasSubstr("cfg.yaml:/actor_train/device_mapping: expected integer arguments to "
                        "range() in [0, 999999]"));
}

TEST(ImportFuzzRegressionTest, DeepJsonNestingIsRejectedBeforeParsing) {
  std::string deep = "{\"output_dir\": " + std::string(10000, '[') + std::string(10000, ']') + "}";
  EXPECT_EQ(ImportError(deep, "cfg.json"),
            "cfg.json:1: expected at most 64 levels of nested arrays and objects, got more");
}

// The model a config names, which the CLI estimates when --model is not given: verl's
// actor_rollout_ref.model.path (hf_config_path first when set), the critic's own critic.model.path,
// the SFT trainer's partial_pretrain; ROLL's worker model_name_or_path, else the pipeline's
// pretrain (reward_pretrain for the critic). The key is no longer listed as ignored.
TEST(ImportModelNamedTest, VerlAndRollNameTheModelTheyLoad) {
  ImportResult actor;
  FromText(kVerlPpo, LlamaOn8(), &actor);
  EXPECT_EQ(actor.model_named, "Qwen/Qwen3-8B");
  EXPECT_EQ(actor.model_named_where, "cfg.yaml:/actor_rollout_ref/model/path");
  EXPECT_THAT(AllWarnings(actor), testing::Not(HasSubstr("/model/path")));
  std::string other = kVerlPpo;
  other.replace(other.rfind("Qwen/Qwen3-8B"), 13, "Qwen/Qwen3-1.7B");
  ImportContext ctx = LlamaOn8();
  ctx.worker = "critic";
  ImportResult critic;
  FromText(other, ctx, &critic);
  EXPECT_EQ(critic.model_named, "Qwen/Qwen3-1.7B");
  EXPECT_EQ(critic.model_named_where, "cfg.yaml:/critic/model/path");
  std::string hf = kVerlPpo;
  hf.replace(hf.find("    path: Qwen/Qwen3-8B\n"), 0, "    hf_config_path: /cfg/qwen3\n");
  ImportResult h;
  FromText(hf, LlamaOn8(), &h);
  EXPECT_EQ(h.model_named, "/cfg/qwen3");
  ImportResult sft;
  FromFile("verl_sft.yaml", LlamaOn8(), &sft);
  EXPECT_EQ(sft.model_named, "~/models/gemma-1.1-7b-it");
  EXPECT_THAT(sft.model_named_where, HasSubstr("verl_sft.yaml:/model/partial_pretrain"));
  ImportResult roll;
  FromFile("roll_rlvr_fsdp2_cp2.yaml", LlamaOn8(), &roll);
  EXPECT_EQ(roll.model_named, "Qwen/Qwen2.5-7B");
  EXPECT_THAT(roll.model_named_where, HasSubstr("roll_rlvr_fsdp2_cp2.yaml:/pretrain"));
  const std::string roll_text =
      "pretrain: base/model\nreward_pretrain: reward/model\n"
      "actor_train:\n  model_args:\n    model_name_or_path: own/model\n"
      "  strategy_args:\n    strategy_name: fsdp2_train\n  world_size: 8\n"
      "critic:\n  strategy_args:\n    strategy_name: fsdp2_train\n  world_size: 8\n";
  ImportContext a = LlamaOn8();
  a.worker = "actor_train";
  ImportResult own;
  FromText(roll_text, a, &own);
  EXPECT_EQ(own.model_named, "own/model");
  EXPECT_EQ(own.model_named_where, "cfg.yaml:/actor_train/model_args/model_name_or_path");
  ImportContext c = LlamaOn8();
  c.worker = "critic";
  ImportResult rc;
  FromText(roll_text, c, &rc);
  EXPECT_EQ(rc.model_named, "reward/model");
  // Accelerate configs name no model.
  ImportResult acc;
  FromFile("accelerate_fsdp2.yaml", LlamaOn8(), &acc);
  EXPECT_EQ(acc.model_named, "");
}

// verl's override_config: the position limit (DAPO recipes' +...override_config.
// max_position_embeddings=32768) changes nothing a step holds; a key that could change the
// model's shapes is refused by name.
TEST(ImportVerlTest, OverrideConfigTakesThePositionLimitOnly) {
  std::string with = kVerlPpo;
  with.replace(with.find("    path: Qwen/Qwen3-8B\n"), 0,
               "    override_config:\n      max_position_embeddings: 32768\n");
  ImportResult r;
  FromText(with, LlamaOn8(), &r);
  EXPECT_EQ(r.model_named, "Qwen/Qwen3-8B");
  std::string shapes = kVerlPpo;
  shapes.replace(shapes.find("    path: Qwen/Qwen3-8B\n"), 0,
                 "    override_config:\n      num_hidden_layers: 12\n");
  EXPECT_THAT([&] { FromText(shapes, LlamaOn8()); },
              ThrowsMessage<InputError>(HasSubstr(
                  "cfg.yaml:/actor_rollout_ref/model/override_config/num_hidden_layers: expected "
                  "only max_position_embeddings in override_config")));
}

// ROLL reads its YAML into dataclasses with dacite's from_dict (strict=False), which drops keys
// they lack (flash_attn in the Qwen2.5-VL example): ignored with a warning naming the key, and
// the closest field when one is close (a misspelt key is dropped by ROLL too).
TEST(ImportRollTest, KeysRollsDataclassesLackAreIgnoredAsRollIgnoresThem) {
  const std::string text =
      "actor_train:\n  model_args:\n    flash_attn: fa2\n    disable_gradient_checkpoint: true\n"
      "  strategy_args:\n    strategy_name: fsdp2_train\n  world_size: 8\n";
  ImportResult r;
  Plan p = FromText(text, LlamaOn8(), &r);
  std::string w = AllWarnings(r);
  EXPECT_THAT(w, HasSubstr("/actor_train/model_args/flash_attn (not a field of ROLL's config "
                           "dataclasses, which dacite's from_dict drops)"));
  EXPECT_THAT(w, HasSubstr("did you mean \"disable_gradient_checkpointing\"?"));
  EXPECT_EQ(p.checkpointing, model::Checkpointing::kFull);  // the misspelt key changed nothing
}

}  // namespace
}  // namespace shardtune::configs
