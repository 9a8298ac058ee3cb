// Round trips: import(export(plan)) == plan for every importable format over a set of plans the
// format can express (canonical: reshard_after_forward as the strategy says, fields the format
// has no key for at their defaults), and export(import(example file)) keeps every setting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/plan_json.h"
#include "model/presets.h"
#include "planner/configs/export.h"
#include "planner/configs/import.h"
#include "profiles/cluster.h"

namespace shardtune::configs {
namespace {

using model::DType;
using model::Plan;
using model::ShardingStrategy;

struct Case {
  std::string name;
  std::string model;
  std::string cluster;
  Plan plan;
};

ImportFormat ImportOf(ExportFormat f) {
  switch (f) {
    case ExportFormat::kAccelerate:
      return ImportFormat::kAccelerate;
    case ExportFormat::kHfTrainer:
      return ImportFormat::kHfTrainer;
    case ExportFormat::kRoll:
      return ImportFormat::kRoll;
    case ExportFormat::kTorchtitan:
      return ImportFormat::kTorchtitan;
    default:
      return ImportFormat::kVerl;
  }
}

void ExpectRoundTrip(const Case& c, ExportFormat format) {
  SCOPED_TRACE(std::string(ToString(format)) + " / " + c.name);
  model::ModelSpec spec = model::FindModelPreset(c.model);
  profiles::ClusterSpec cluster = profiles::ParseClusterShorthand(c.cluster);
  ASSERT_TRUE(c.plan
                  .Problems("plan", cluster.world_size(), cluster.gpus_per_node, spec.num_layers,
                            spec.max_seq_len)
                  .empty());
  ExportResult out = ExportPlan(c.plan, MakeExportContext(spec, cluster, c.plan), format);
  Plan back;
  ImportFormat f = ImportOf(format);
  ImportConfigText(out.text, "exported", MakeImportContext(spec, cluster), &f, &back);
  EXPECT_EQ(model::PlanToJson(back).dump(1), model::PlanToJson(c.plan).dump(1)) << out.text;
  // Detection finds the same format without the override.
  EXPECT_EQ(DetectImportFormat(out.text, "exported"), f);
}

Plan Sharded(ShardingStrategy s, int group = 0) {
  Plan p;
  p.strategy = s;
  p.shard_group_size = group;
  p.reshard_after_forward = model::StrategyReshardsAfterForward(s);
  return p;
}

// verl's FSDP engine SFT config says enable_activation_offload, and reads it back.
TEST(ImportRoundTripTest, VerlEngineKeepsActivationOffload) {
  model::ModelSpec spec = model::FindModelPreset("llama3-8b");
  profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("8xH100");
  Plan p = Sharded(ShardingStrategy::kFullShard);
  p.micro_batch = 1;
  p.activation_offload = model::ActivationOffload::kVerlAsync;
  ExportContext ctx = MakeExportContext(spec, cluster, p);
  ctx.verl_trainer = VerlTrainer::kSftEngine;
  ExportResult out = ExportPlan(p, ctx, ExportFormat::kVerl);
  Plan back;
  ImportFormat f = ImportFormat::kVerl;
  ImportConfigText(out.text, "exported", MakeImportContext(spec, cluster), &f, &back);
  EXPECT_EQ(back.activation_offload, model::ActivationOffload::kVerlAsync) << out.text;
}

void SetMixed(DType d, Plan* p) {
  p->param_dtype = d;
  p->reduce_dtype = d;
}

// shard_grad_op in fp32, wrapped by size: the size-wrap case of the trainers that offer it.
Plan ShardGradOpSizeWrapFp32(int64_t min_num_params) {
  Plan p = Sharded(ShardingStrategy::kShardGradOp);
  SetMixed(DType::kFp32, &p);
  p.wrap.kind = model::WrapPolicy::Kind::kSize;
  p.wrap.min_num_params = min_num_params;
  return p;
}

// A worker that only runs forwards (verl's ref and rollout log-prob workers): fully sharded, no
// optimizer states (bf16 master weights), everything offloaded between calls.
Plan InferWorker(int64_t micro_batch, int64_t seq_len) {
  Plan p = Sharded(ShardingStrategy::kFullShard);
  p.role = model::Role::kInfer;
  p.master_dtype = DType::kBf16;
  p.offload = model::Offload::kAll;
  p.micro_batch = micro_batch;
  p.seq_len = seq_len;
  return p;
}

TEST(ImportRoundTripTest, Accelerate) {
  std::vector<Case> cases;
  Plan a = Sharded(ShardingStrategy::kFullShard);
  SetMixed(DType::kBf16, &a);
  a.checkpointing = model::Checkpointing::kFull;
  a.offload = model::Offload::kAll;
  cases.push_back({"full_shard", "llama3-8b", "8xH100", a});
  Plan b = ShardGradOpSizeWrapFp32(100000000);
  cases.push_back({"shard_grad_op size wrap fp32", "llama3-8b", "8xH100", b});
  Plan c = Sharded(ShardingStrategy::kHybridShard, 8);
  SetMixed(DType::kFp16, &c);
  cases.push_back({"hybrid 2x8", "llama3-8b", "2x8xH100", c});
  Plan d = Sharded(ShardingStrategy::kHybridShardZero2, 4);
  SetMixed(DType::kBf16, &d);
  cases.push_back({"hybrid_zero2 groups of 4", "qwen3-8b", "8xH100", d});
  Plan e = Sharded(ShardingStrategy::kNoShard);
  SetMixed(DType::kBf16, &e);
  cases.push_back({"no_shard", "llama3-8b", "8xH100", e});
  for (const auto& k : cases) ExpectRoundTrip(k, ExportFormat::kAccelerate);
}

// torchtitan's job TOML: plans it can express run its own code (modeling torchtitan) with the
// embedding and [norm, output] as units, fp32 reduction, cp 1 (its context parallelism is ring
// attention), AdamW; the rest comes back as written.
Plan Titan(Plan p) {
  p.modeling = model::Modeling::kTorchtitan;
  p.wrap.embedding_unit = true;
  p.wrap.head_unit = true;
  p.reduce_dtype = DType::kFp32;
  p.optimizer_impl = model::OptimizerImpl::kFused;
  return p;
}

TEST(ImportRoundTripTest, Torchtitan) {
  std::vector<Case> cases;
  Plan a = Titan(Sharded(ShardingStrategy::kFullShard));
  a.micro_batch = 2;
  a.grad_accum = 4;
  a.seq_len = 8192;
  a.checkpointing = model::Checkpointing::kSelective;
  cases.push_back({"full_shard op sac", "llama3-8b", "8xH100", a});
  Plan b = Titan(Sharded(ShardingStrategy::kHybridShardZero2, 8));
  b.checkpointing = model::Checkpointing::kEveryK;
  b.checkpoint_every_k = 2;
  b.optimizer_impl = model::OptimizerImpl::kForeach;
  b.master_dtype = DType::kBf16;
  b.seq_len = 4096;
  cases.push_back({"hsdp never every:2 bf16 master", "llama3-8b", "2x8xH100", b});
  Plan c = Titan(Sharded(ShardingStrategy::kFullShard));
  c.offload = model::Offload::kAll;
  c.checkpointing = model::Checkpointing::kFull;
  c.seq_len = 4096;
  cases.push_back({"offload all full ckpt", "llama3-70b", "8xH100", c});
  Plan d = Titan(Sharded(ShardingStrategy::kFullShard));
  d.ep = 4;
  d.seq_len = 4096;
  cases.push_back({"moe ep 4", "qwen3-30b-a3b", "8xH100", d});
  Plan e = Titan(Sharded(ShardingStrategy::kNoShard));
  e.checkpointing = model::Checkpointing::kFull;
  e.seq_len = 4096;
  cases.push_back({"ddp", "llama3-8b", "8xH100", e});
  for (const auto& k : cases) ExpectRoundTrip(k, ExportFormat::kTorchtitan);
}

TEST(ImportRoundTripTest, HfTrainer) {
  std::vector<Case> cases;
  Plan a = Sharded(ShardingStrategy::kFullShard);
  SetMixed(DType::kBf16, &a);
  a.micro_batch = 2;
  a.grad_accum = 4;
  a.no_sync = true;
  a.checkpointing = model::Checkpointing::kFull;
  a.offload = model::Offload::kAll;
  a.optimizer_impl = model::OptimizerImpl::kFused;
  cases.push_back({"full_shard fused", "llama3-8b", "8xH100", a});
  Plan b = ShardGradOpSizeWrapFp32(5000000);
  b.optimizer = model::Optimizer::kSgd;
  cases.push_back({"shard_grad_op sgd", "gpt2", "8xH100", b});
  Plan c = Sharded(ShardingStrategy::kNoShard);
  SetMixed(DType::kFp16, &c);
  c.checkpointing = model::Checkpointing::kFull;
  c.optimizer = model::Optimizer::kAdafactor;
  c.grad_accum = 2;
  c.no_sync = true;
  cases.push_back({"ddp adafactor", "llama3-8b", "8xH100", c});
  // Liger: the module patches with and without the fused loss (liger_kernel_config says which).
  Plan d = a;
  d.liger = {true, true, true};
  d.loss_kernel = model::LossKernel::kFusedLinear;
  cases.push_back({"liger all", "llama3-8b", "8xH100", d});
  Plan e = a;
  e.liger = {true, false, false};
  cases.push_back({"liger rms_norm only", "llama3-8b", "8xH100", e});
  for (const auto& k : cases) ExpectRoundTrip(k, ExportFormat::kHfTrainer);
}

TEST(ImportRoundTripTest, Roll) {
  std::vector<Case> cases;
  Plan a = Sharded(ShardingStrategy::kHybridShard, 4);
  a.cp = 2;
  a.master_dtype = DType::kBf16;
  a.checkpointing = model::Checkpointing::kFull;
  a.micro_batch = 2;
  a.grad_accum = 8;
  a.no_sync = true;
  a.seq_len = 4096;
  a.wrap.embedding_unit = true;  // llama3-8b's embedding is untied: ROLL wraps it on its own
  a.lora.rank = 16;
  a.lora.alpha = 32.0;
  a.lora.targets = {"q_proj", "v_proj"};
  a.frozen_prefixes = {"model.embed_tokens", "model.layers.0."};
  a.tiled_mlp_shards = 4;
  cases.push_back({"hsdp cp lora freeze tiled", "llama3-8b", "8xH100", a});
  Plan b = InferWorker(4, 2048);
  b.wrap.embedding_unit = true;
  b.wrap.head_unit = true;
  cases.push_back({"fsdp2_infer", "llama3-8b", "8xH100", b});
  Plan c = Sharded(ShardingStrategy::kShardGradOp);
  c.seq_len = 1024;
  c.wrap.embedding_unit = true;
  cases.push_back({"shard_grad_op fp32 master", "qwen3-8b", "2x8xH100", c});
  Plan d = Sharded(ShardingStrategy::kFullShard);
  d.seq_len = 4096;
  d.wrap.embedding_unit = true;
  d.wrap.expert_units = true;
  d.master_dtype = DType::kFp16;
  d.param_dtype = DType::kFp16;
  cases.push_back({"moe experts fp16", "mixtral-8x7b", "8xH100", d});
  Plan sub = Sharded(ShardingStrategy::kFullShard);
  sub.seq_len = 2048;
  sub.wrap.embedding_unit = true;
  sub.wrap.sub_block_units = true;  // [Qwen3MoeAttention, Qwen3MoeSparseMoeBlock]
  cases.push_back({"moe sub-block units", "qwen3-30b-a3b", "8xH100", sub});
  // ROLL's expert parallelism: ep_size and efsdp_size (the shard group / ep) with moe_experts
  // naming transformers 5's experts module; over 16 ranks, ep 8 leaves 2 per expert shard.
  Plan ep = sub;
  ep.ep = 8;
  cases.push_back({"moe expert parallel", "qwen3-30b-a3b", "2x8xH100", ep});
  Plan e = Sharded(ShardingStrategy::kFullShard);
  e.seq_len = 512;
  e.wrap.embedding_unit = false;  // GPT-2 ties wte and the head: no separate embedding unit
  cases.push_back({"tied gpt2", "gpt2", "8xH100", e});
  for (const auto& k : cases) ExpectRoundTrip(k, ExportFormat::kRoll);
}

// verl's PPO workers compute log-probs with their own head (loss_kernel verl_flash_ce): plans
// with it go out as actor / ref sections; a training plan with a plain cross-entropy is an SFT
// job and goes out as the SFT trainer's config. Both read back the same.
Plan VerlLogProbs(Plan p) {
  p.loss_kernel = model::LossKernel::kVerlFlashCe;
  p.loss_fp32_upcast = false;
  return p;
}

// The ref worker of an actor's plan: inference, one micro-batch per step, no checkpointing,
// bf16 parameters offloaded (verl forces CPU offload for non-actor roles).
Plan RefOf(Plan actor) {
  actor.role = model::Role::kInfer;
  actor.checkpointing = model::Checkpointing::kNone;
  actor.grad_accum = 1;
  actor.master_dtype = DType::kBf16;
  actor.offload = model::Offload::kAll;
  return actor;
}

TEST(ImportRoundTripTest, Verl) {
  std::vector<Case> cases;
  Plan a = Sharded(ShardingStrategy::kFullShard);
  a.cp = 2;
  a.micro_batch = 2;
  a.grad_accum = 4;
  a.seq_len = 4096;
  a.checkpointing = model::Checkpointing::kFull;
  a.offload = model::Offload::kAll;
  a.forward_prefetch = true;
  a.lora.rank = 32;
  a.lora.alpha = 64.0;
  a.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  a.tiled_mlp_shards = 2;
  cases.push_back({"actor cp lora tiled offload", "llama3-8b", "8xH100", VerlLogProbs(a)});
  cases.push_back({"SFT cp lora tiled offload", "llama3-8b", "8xH100", a});
  Plan b = Sharded(ShardingStrategy::kHybridShardZero2, 8);
  b.wrap.kind = model::WrapPolicy::Kind::kSize;
  b.wrap.min_num_params = 50000000;
  b.master_dtype = DType::kBf16;
  b.reduce_dtype = DType::kBf16;
  b.seq_len = 2048;
  cases.push_back({"hybrid zero2 size wrap", "qwen3-8b", "2x8xH100", VerlLogProbs(b)});
  cases.push_back({"ref worker", "llama3-8b", "8xH100", VerlLogProbs(InferWorker(8, 2048))});
  // A token budget: rows of 8192 tokens per rank over sp 2 (16384 per cp group), sequences up to
  // 4096, 8 rows per update.
  Plan d = VerlLogProbs(Sharded(ShardingStrategy::kFullShard));
  d.cp = 2;
  d.micro_batch = 1;
  d.seq_len = 16384;
  d.packed_seq_len = 4096;
  d.grad_accum = 8;
  d.checkpointing = model::Checkpointing::kFull;
  cases.push_back({"actor token budget", "llama3-8b", "8xH100", d});
  cases.push_back({"ref token budget", "llama3-8b", "8xH100", RefOf(d)});
  // The padded log-prob branch (use_remove_padding false): its response part is the exported
  // max_response_length, and the flash attention padding mask comes back with it.
  Plan f = VerlLogProbs(Sharded(ShardingStrategy::kFullShard));
  f.loss_kernel = model::LossKernel::kVerlPaddedCe;
  f.micro_batch = 4;
  f.grad_accum = 4;
  f.seq_len = 1536;
  f.response_len = 1024;
  f.padding_mask = true;
  f.checkpointing = model::Checkpointing::kFull;
  cases.push_back({"actor padded", "llama3-8b", "8xH100", f});
  cases.push_back({"ref padded", "llama3-8b", "8xH100", RefOf(f)});
  // verl's fused heads (use_fused_kernels with its backend), packed and padded: the padding mask
  // comes back through use_remove_padding, no response slice is written for them.
  Plan g = d;
  g.loss_kernel = model::LossKernel::kVerlFusedTorch;
  cases.push_back({"actor fused torch token budget", "llama3-8b", "8xH100", g});
  cases.push_back({"ref fused torch token budget", "llama3-8b", "8xH100", RefOf(g)});
  Plan h = f;
  h.loss_kernel = model::LossKernel::kVerlFusedTriton;
  h.response_len = 0;
  cases.push_back({"actor fused triton padded", "llama3-8b", "8xH100", h});
  Plan li = d;  // use_liger: all three of Liger's module patches
  li.liger = {true, true, true};
  cases.push_back({"actor liger", "llama3-8b", "8xH100", li});
  cases.push_back({"ref liger", "llama3-8b", "8xH100", RefOf(li)});
  for (const auto& k : cases) ExpectRoundTrip(k, ExportFormat::kVerl);
}

// export(import(example)) == the imported plan: the exported config keeps every setting the
// example had (HF Trainer: TrainingArguments has no sequence-length key, so seq_len is dropped).
TEST(ImportRoundTripTest, ExamplesSurviveExportAndImportAgain) {
  struct Example {
    std::string file;
    ExportFormat format;
    std::string worker;
  };
  const std::vector<Example> examples = {
      {"accelerate_fsdp2.yaml", ExportFormat::kAccelerate, ""},
      {"accelerate_fsdp1.yaml", ExportFormat::kAccelerate, ""},
      {"hf_trainer_args.json", ExportFormat::kHfTrainer, ""},
      {"roll_rlvr_fsdp2_cp2.yaml", ExportFormat::kRoll, ""},
      {"roll_rlvr_fsdp2_cp2.yaml", ExportFormat::kRoll, "reference"},
      {"verl_grpo_lora.yaml", ExportFormat::kVerl, ""},
      {"verl_grpo_lora.yaml", ExportFormat::kVerl, "ref"},
      {"verl_sft.yaml", ExportFormat::kVerl, ""},
  };
  model::ModelSpec spec = model::FindModelPreset("llama3-8b");
  profiles::ClusterSpec cluster = profiles::ParseClusterShorthand("8xH100");
  for (const auto& e : examples) {
    SCOPED_TRACE(e.file + " " + e.worker);
    ImportContext ctx = MakeImportContext(spec, cluster);
    ctx.worker = e.worker;
    Plan first;
    ImportConfigFile(std::string(SHARDTUNE_TEST_DATA_DIR) + "/configs/" + e.file, ctx, nullptr,
                     &first);
    ExportResult out = ExportPlan(first, MakeExportContext(spec, cluster, first), e.format);
    ctx.worker = "";
    Plan second;
    ImportFormat f = ImportOf(e.format);
    ImportConfigText(out.text, "exported", ctx, &f, &second);
    if (e.format == ExportFormat::kHfTrainer) second.seq_len = first.seq_len;
    EXPECT_EQ(model::PlanToJson(second).dump(1), model::PlanToJson(first).dump(1)) << out.text;
  }
}

}  // namespace
}  // namespace shardtune::configs
