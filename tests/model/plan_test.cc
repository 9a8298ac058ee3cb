// Tests of the plan (plan.cc, plan_json.cc): enum names, shard group defaults, every Problems()
// rule, the compact --wrap / --checkpointing syntaxes, and "shardtune.plan" JSON.
#include "model/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/plan_json.h"
#include "model/strict_json.h"

namespace shardtune::model {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;

template <typename E>
void ExpectNamesRoundTrip() {
  const auto& names = EnumNames<E>();
  ASSERT_FALSE(names.empty());
  for (size_t i = 0; i < names.size(); ++i) {
    E e = static_cast<E>(i);
    EXPECT_EQ(ToString(e), names[i]);
    EXPECT_EQ(ParseEnum<E>(names[i], "--x"), e);
  }
}

TEST(PlanEnumsTest, EveryNameRoundTrips) {
  ExpectNamesRoundTrip<ShardingStrategy>();
  ExpectNamesRoundTrip<DType>();
  ExpectNamesRoundTrip<Checkpointing>();
  ExpectNamesRoundTrip<Offload>();
  ExpectNamesRoundTrip<BackwardPrefetch>();
  ExpectNamesRoundTrip<Optimizer>();
  ExpectNamesRoundTrip<OptimizerImpl>();
  ExpectNamesRoundTrip<Attention>();
  ExpectNamesRoundTrip<LossKernel>();
  ExpectNamesRoundTrip<Modeling>();
  ExpectNamesRoundTrip<WrapPolicy::Kind>();
  ExpectNamesRoundTrip<CpFsdpMesh>();
  ExpectNamesRoundTrip<Role>();
  EXPECT_STREQ(ToString(ShardingStrategy::kHybridShardZero2), "hybrid_shard_zero2");
  EXPECT_STREQ(ToString(OptimizerImpl::kForLoop), "for_loop");
}

TEST(PlanEnumsTest, UnknownNameListsAllowedAndSuggests) {
  EXPECT_THAT([] { ParseEnum<ShardingStrategy>("ful_shard", "--strategy"); },
              ThrowsMessage<InputError>(HasSubstr(
                  "--strategy: expected one of full_shard, shard_grad_op, no_shard, hybrid_shard, "
                  "hybrid_shard_zero2, got \"ful_shard\" (did you mean \"full_shard\"?)")));
}

TEST(PlanTest, BytesPerElement) {
  EXPECT_EQ(BytesPerElement(DType::kFp32), 4);
  EXPECT_EQ(BytesPerElement(DType::kBf16), 2);
  EXPECT_EQ(BytesPerElement(DType::kFp16), 2);
}

TEST(PlanTest, ResolvedShardGroupDefaults) {
  Plan p;
  EXPECT_EQ(p.ResolvedShardGroup(16, 8), 16);  // FULL_SHARD: the world
  p.strategy = ShardingStrategy::kShardGradOp;
  EXPECT_EQ(p.ResolvedShardGroup(16, 8), 16);
  p.strategy = ShardingStrategy::kHybridShard;
  EXPECT_EQ(p.ResolvedShardGroup(16, 8), 8);  // one node
  EXPECT_EQ(p.ResolvedShardGroup(4, 8), 4);   // a world smaller than a node
  EXPECT_EQ(p.ResolvedShardGroup(16, 0), 16);
  p.shard_group_size = 4;
  EXPECT_EQ(p.ResolvedShardGroup(16, 8), 4);
  p.strategy = ShardingStrategy::kNoShard;
  EXPECT_EQ(p.ResolvedShardGroup(16, 8), 1);
  EXPECT_EQ(p.ResolvedSeqLen(2048), 2048);
}

TEST(PlanTest, DefaultsAreFsdp2Defaults) {
  Plan p;
  EXPECT_TRUE(p.Problems("p", 8, 8, 32, 4096).empty());
  EXPECT_EQ(p.GlobalBatch(8), 8);
  EXPECT_TRUE(StrategyReshardsAfterForward(ShardingStrategy::kFullShard));
  EXPECT_FALSE(StrategyReshardsAfterForward(ShardingStrategy::kShardGradOp));
  EXPECT_FALSE(StrategyReshardsAfterForward(ShardingStrategy::kHybridShardZero2));
}

TEST(PlanTest, EachRuleReportsWhereWhatAndGot) {
  struct Case {
    void (*mutate)(Plan*);
    const char* message;
  };
  const Case cases[] = {
      {[](Plan* p) { p->micro_batch = 0; }, "p:/micro_batch: expected integer >= 1, got 0"},
      {[](Plan* p) { p->grad_accum = -1; }, "p:/grad_accum: expected integer >= 1, got -1"},
      {[](Plan* p) { p->seq_len = 4097; }, "p:/seq_len: expected integer in [1, 4096] (the model's sequence limit"},
      {[](Plan* p) { p->seq_len = -1; }, "p:/seq_len: expected integer in [1, "},
      {[](Plan* p) { p->shard_group_size = -1; }, "p:/shard_group_size: expected integer >= 0"},
      {[](Plan* p) { p->shard_group_size = 4; }, "p:/shard_group_size: expected 0 or the world "
                                                 "size 16 for full_shard"},
      {[](Plan* p) { p->strategy = ShardingStrategy::kNoShard, p->shard_group_size = 2; },
       "p:/shard_group_size: expected 0 or 1 for no_shard"},
      {[](Plan* p) { p->strategy = ShardingStrategy::kHybridShard, p->shard_group_size = 5; },
       "p:/shard_group_size: expected a divisor of the world size 16 for hybrid_shard (shard "
       "groups tile the world), got 5"},
      {[](Plan* p) { p->strategy = ShardingStrategy::kHybridShard, p->shard_group_size = 32; },
       "p:/shard_group_size: expected a divisor of the world size 16"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kEveryK, p->wrap.every_k = 0; },
       "p:/wrap/every_k: expected integer >= 1, got 0"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kSize; },
       "p:/wrap/min_num_params: expected integer >= 1, got 0"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kRanges; },
       "p:/wrap/ranges: expected at least one"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kRanges, p->wrap.ranges = {{1, 31}}; },
       "p:/wrap/ranges/0: expected a range [0, last]"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kRanges, p->wrap.ranges = {{0, 7}, {9, 31}}; },
       "p:/wrap/ranges/1: expected a range [8, last] with last in [8, 31]"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kRanges, p->wrap.ranges = {{0, 7}, {6, 31}}; },
       "p:/wrap/ranges/1: expected a range [8, last]"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kRanges, p->wrap.ranges = {{0, 40}}; },
       "p:/wrap/ranges/0: expected a range [0, last] with last in [0, 31]"},
      {[](Plan* p) { p->wrap.kind = WrapPolicy::Kind::kRanges, p->wrap.ranges = {{0, 7}}; },
       "p:/wrap/ranges: expected ranges ending at block 31, got ranges ending at block 7"},
      {[](Plan* p) { p->checkpoint_every_k = 0; }, "p:/checkpoint_every_k: expected integer >= 1"},
      {[](Plan* p) { p->checkpointing = Checkpointing::kFirstK, p->checkpoint_first_k = 33; },
       "p:/checkpoint_first_k: expected integer from 1 to the model's 32 blocks, got 33"},
      {[](Plan* p) { p->checkpointing = Checkpointing::kFirstK, p->checkpoint_first_k = 0; },
       "p:/checkpoint_first_k: expected integer from 1 to the model's 32 blocks, got 0"},
      {[](Plan* p) { p->max_inflight_allgathers = 0; }, "p:/max_inflight_allgathers: expected"},
      {[](Plan* p) { p->loss_kernel = LossKernel::kFusedLinear, p->keep_logits = true; },
       "p:/keep_logits: expected false with loss_kernel fused_linear (it never holds the logits), got true"},
      {[](Plan* p) { p->loss_kernel = LossKernel::kFusedLinear, p->role = Role::kInfer; },
       "p:/loss_kernel: expected cross_entropy for role infer"},
      {[](Plan* p) {
         p->loss_kernel = LossKernel::kFusedLinear, p->lora.rank = 8;
         p->lora.targets = {"q_proj", "lm_head"};
       },
       "p:/lora/targets/1: expected no lm_head adapter with loss_kernel fused_linear"},
  };
  for (const Case& c : cases) {
    Plan p;
    c.mutate(&p);
    std::vector<std::string> problems = p.Problems("p", 16, 8, 32, 4096);
    ASSERT_EQ(problems.size(), 1u) << c.message;
    EXPECT_THAT(problems[0], HasSubstr(c.message));
  }
}

TEST(PlanTest, AllowedCombinations) {
  Plan p;
  p.strategy = ShardingStrategy::kHybridShard;
  p.shard_group_size = 16;  // one replica
  EXPECT_TRUE(p.Problems("p", 16, 8, 32, 4096).empty());
  p.strategy = ShardingStrategy::kNoShard;
  p.shard_group_size = 0;
  p.offload = Offload::kOptimizer;  // offload without sharding
  p.no_sync = true;                 // with grad_accum 1: no effect, not an error
  p.wrap.kind = WrapPolicy::Kind::kRanges;
  p.wrap.ranges = {{0, 0}, {1, 30}, {31, 31}};
  EXPECT_TRUE(p.Problems("p", 16, 8, 32, 4096).empty());
  p.shard_group_size = 0;
  p.strategy = ShardingStrategy::kFullShard;
  p.shard_group_size = 16;  // explicit world
  EXPECT_TRUE(p.Problems("p", 16, 8, 32, 4096).empty());
}

TEST(PlanTest, SeveralProblemsAreReportedTogether) {
  Plan p;
  p.micro_batch = 0;
  p.grad_accum = 0;
  p.max_inflight_allgathers = 0;
  EXPECT_EQ(p.Problems("p", 8, 8, 32, 4096).size(), 3u);
}

TEST(WrapSpecTest, ParsesEveryForm) {
  EXPECT_EQ(ParseWrapSpec("block", "--wrap").kind, WrapPolicy::Kind::kBlock);
  WrapPolicy every = ParseWrapSpec("every:4", "--wrap");
  EXPECT_EQ(every.kind, WrapPolicy::Kind::kEveryK);
  EXPECT_EQ(every.every_k, 4);
  WrapPolicy ranges = ParseWrapSpec("ranges:0-7,8-31", "--wrap");
  EXPECT_EQ(ranges.kind, WrapPolicy::Kind::kRanges);
  EXPECT_EQ(ranges.ranges, (std::vector<std::pair<int, int>>{{0, 7}, {8, 31}}));
  EXPECT_EQ(ParseWrapSpec("ranges:0-3,4,5-9", "--wrap").ranges[1], std::make_pair(4, 4));
  EXPECT_EQ(ParseWrapSpec("size:100M", "--wrap").min_num_params, 100 * 1'000'000);
  EXPECT_EQ(ParseWrapSpec("size:2k", "--wrap").min_num_params, 2 * 1'000);
  EXPECT_EQ(ParseWrapSpec("size:3B", "--wrap").min_num_params, 3LL * 1'000'000'000);
  EXPECT_EQ(ParseWrapSpec("size:12345", "--wrap").min_num_params, 12345);
}

TEST(WrapSpecTest, RoundTrips) {
  for (const char* text : {"block", "every:3", "ranges:0-7,8-31", "size:100M", "size:2B",
                           "size:1500K", "size:12345"}) {
    EXPECT_EQ(WrapSpecToString(ParseWrapSpec(text, "--wrap")), text);
  }
}

TEST(WrapSpecTest, BadSpecsSayWhatIsExpected) {
  for (const char* text : {"", "blok", "block:2", "every", "every:0", "every:x", "ranges:",
                           "ranges:0-", "ranges:a-b", "size:", "size:10X", "size:0",
                           "size:-5", "evry:2"}) {
    EXPECT_THAT([&] { ParseWrapSpec(text, "--wrap"); },
                ThrowsMessage<InputError>(HasSubstr(
                    "--wrap: expected block, every:K, ranges:A-B,C-D,... or size:N[K|M|B]")))
        << text;
  }
  EXPECT_THAT([] { ParseWrapSpec("evry:2", "--wrap"); },
              ThrowsMessage<InputError>(HasSubstr("(did you mean \"every\"?)")));
}

TEST(CheckpointingSpecTest, ParsesAndRoundTrips) {
  for (const char* text : {"none", "full", "selective", "every:2", "first:12", "first:12+selective"}) {
    Plan p;
    ParseCheckpointingSpec(text, "--checkpointing", &p);
    EXPECT_EQ(CheckpointingSpecToString(p), text);
  }
  Plan p;
  ParseCheckpointingSpec("every:3", "--checkpointing", &p);
  EXPECT_EQ(p.checkpointing, Checkpointing::kEveryK);
  EXPECT_EQ(p.checkpoint_every_k, 3);
  ParseCheckpointingSpec("first:5", "--checkpointing", &p);
  EXPECT_EQ(p.checkpointing, Checkpointing::kFirstK);
  EXPECT_EQ(p.checkpoint_first_k, 5);
  ParseCheckpointingSpec("first:4+selective", "--checkpointing", &p);
  EXPECT_EQ(p.checkpointing, Checkpointing::kFirstK);
  EXPECT_EQ(p.checkpoint_first_k, 4);
  EXPECT_TRUE(p.checkpoint_rest_selective);
  ParseCheckpointingSpec("first:4", "--checkpointing", &p);  // the rest keep everything again
  EXPECT_FALSE(p.checkpoint_rest_selective);
  ParseCheckpointingSpec("first:4+selective", "--checkpointing", &p);
  ParseCheckpointingSpec("full", "--checkpointing", &p);
  EXPECT_FALSE(p.checkpoint_rest_selective);
  for (const char* text : {"every", "every:0", "ful", "full:2", "", "first", "first:0", "first:x", "first:-1",
                           "first:0+selective", "first:+selective", "every:2+selective", "first:3+full",
                           "first:3+selective+selective"}) {
    EXPECT_THAT([&] { ParseCheckpointingSpec(text, "--checkpointing", &p); },
                ThrowsMessage<InputError>(HasSubstr(
                    "--checkpointing: expected none, full, selective, every:K, first:K, first:K+selective (K >= 1), "
                    "sac:OPS")))
        << text;
  }
  EXPECT_THAT([&] { ParseCheckpointingSpec("selectiv", "--checkpointing", &p); },
              ThrowsMessage<InputError>(HasSubstr("(did you mean \"selective\"?)")));
}

// `spec` parsed into `plan` (which keeps what earlier specs set, as the flag parser's plan does),
// then `pred` (model::BlockCheckpointed or model::BlockSelective) of each block of a VL tower's 3
// blocks and the text model's 5 after them: '1' where it holds.
std::string BlockMask(const std::string& spec, bool (*pred)(const Plan&, int, int), Plan* plan) {
  const int vision_blocks = 3;
  ParseCheckpointingSpec(spec, "--checkpointing", plan);
  std::string s;
  for (int b = 0; b < vision_blocks + 5; ++b) s += pred(*plan, b, vision_blocks) ? '1' : '0';
  return s;
}

// Each (spec, mask) in turn parsed into one plan, as the flag parser's plan keeps what earlier
// specs set: `pred`'s BlockMask after the spec is `mask`.
void ExpectBlockMasks(bool (*pred)(const Plan&, int, int),
                      const std::vector<std::pair<std::string, std::string>>& spec_masks) {
  Plan p;
  for (const auto& [spec, mask] : spec_masks) {
    SCOPED_TRACE(spec);
    EXPECT_EQ(BlockMask(spec, pred, &p), mask);
  }
}

// Which blocks rerun whole (model::BlockCheckpointed), each stack (a VL tower's 3 blocks, then the
// text model's) counted from 0: first:2 reruns tower blocks 0-1 and text blocks 0-1; every:2 the
// even ones of each; full all; none and selective (pieces of every block) none.
TEST(CheckpointingSpecTest, BlockCheckpointedCountsEachStackFromZero) {
  ExpectBlockMasks(model::BlockCheckpointed,
                   {{"first:2", "110" "11000"},
                    {"every:2", "101" "10101"},
                    {"full", "111" "11111"},
                    {"none", "000" "00000"},
                    {"selective", "000" "00000"},
                    {"first:7", "111" "11111"},             // K beyond a stack reruns all of it
                    {"first:2+selective", "110" "11000"}});  // the rest run selective, not whole
}

// Which blocks run selective recompute (model::BlockSelective): every block under selective; under
// first:K+selective the blocks of each stack after its first K; none otherwise.
TEST(CheckpointingSpecTest, BlockSelectiveIsTheRestOfFirstKPlusSelective) {
  ExpectBlockMasks(model::BlockSelective, {{"first:2+selective", "001" "00111"},
                                           {"selective", "111" "11111"},
                                           {"first:2", "000" "00000"},
                                           {"full", "000" "00000"},
                                           {"first:7+selective", "000" "00000"}});
}

nlohmann::json PlanDoc() {
  return ParseJsonText(R"({"schema": "shardtune.plan", "schema_version": 1})", "plan.json");
}

TEST(PlanJsonTest, EmptyPlanIsTheDefaultPlan) {
  Plan p = PlanFromJson(PlanDoc(), "plan.json");
  EXPECT_EQ(PlanToJson(p).dump(), PlanToJson(Plan()).dump());
}

// sdpa_backend is written only when not auto (older readers' plans stay as they were) and reads back.
TEST(PlanJsonTest, SdpaBackendRoundTrips) {
  Plan p;
  EXPECT_FALSE(PlanToJson(p).contains("sdpa_backend"));
  p.sdpa_backend = SdpaBackend::kCudnn;
  nlohmann::json j = PlanToJson(p);
  EXPECT_EQ(j.at("sdpa_backend"), "cudnn");
  EXPECT_EQ(PlanFromJson(j, "plan.json").sdpa_backend, SdpaBackend::kCudnn);
}

// verl's padded log-prob head: its response part, entropy and padding mask are written only when
// set and read back; the response part must lie inside the padded width.
TEST(PlanJsonTest, VerlPaddedHeadRoundTripsAndIsChecked) {
  Plan p;
  EXPECT_FALSE(PlanToJson(p).contains("response_len"));
  p.seq_len = 1536;
  p.loss_kernel = LossKernel::kVerlPaddedCe;
  p.response_len = 512;
  p.entropy_from_logits = true;
  p.padding_mask = true;
  Plan back = PlanFromJson(PlanToJson(p), "plan.json");
  EXPECT_EQ(PlanToJson(back).dump(), PlanToJson(p).dump());
  EXPECT_TRUE(p.Problems("plan", 8, 8, 32, 4096).empty());
  p.response_len = 2000;
  EXPECT_THAT(p.Problems("plan", 8, 8, 32, 4096),
              ::testing::ElementsAre(::testing::HasSubstr("plan:/response_len: expected")));
  p.response_len = 0;
  EXPECT_EQ(p.Problems("plan", 8, 8, 32, 4096).size(), 1u);
  p.response_len = 512;
  p.cp = 2;
  EXPECT_THAT(p.Problems("plan", 8, 8, 32, 4096),
              ::testing::Contains(::testing::HasSubstr("plan:/cp: expected 1 with loss_kernel")));
}

// Liger's module patches and verl's fused heads round-trip; a mistyped Liger key names itself;
// the fused heads refuse kept logits and an lm_head adapter, and run under no_grad (role infer).
TEST(PlanJsonTest, LigerAndVerlFusedHeadsRoundTrip) {
  Plan p;
  EXPECT_FALSE(PlanToJson(p).contains("liger"));
  p.liger = {true, false, true};
  p.loss_kernel = LossKernel::kVerlFusedTriton;
  Plan back = PlanFromJson(PlanToJson(p), "plan.json");
  EXPECT_EQ(PlanToJson(back).dump(), PlanToJson(p).dump());
  EXPECT_TRUE(back.liger.rms_norm && back.liger.rope && !back.liger.swiglu);
  nlohmann::json j = PlanToJson(p);
  j["liger"]["rmsnorm"] = true;
  EXPECT_THAT([&] { PlanFromJson(j, "plan.json"); },
              ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("plan.json:/liger/rmsnorm")));
  p.role = Role::kInfer;
  EXPECT_TRUE(p.Problems("plan", 8, 8, 32, 4096).empty());
  p.keep_logits = true;
  EXPECT_THAT(p.Problems("plan", 8, 8, 32, 4096),
              ::testing::ElementsAre(::testing::HasSubstr("keep_logits: expected false with loss_kernel verl_fused_triton")));
}

TEST(PlanJsonTest, ReshardAfterForwardDefaultsByStrategy) {
  nlohmann::json j = PlanDoc();
  j["strategy"] = "shard_grad_op";
  EXPECT_FALSE(PlanFromJson(j, "plan.json").reshard_after_forward);
  j["reshard_after_forward"] = true;
  EXPECT_TRUE(PlanFromJson(j, "plan.json").reshard_after_forward);
}

TEST(PlanJsonTest, ReadsTestDataFile) {
  Plan p = ReadPlanFile(std::string(SHARDTUNE_TEST_DATA_DIR) + "/model/plan.json");
  EXPECT_EQ(p.strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(p.shard_group_size, 8);
  EXPECT_EQ(p.wrap.kind, WrapPolicy::Kind::kRanges);
  EXPECT_EQ(WrapSpecToString(p.wrap), "ranges:0-7,8-31");
  EXPECT_TRUE(p.wrap.head_unit);
  EXPECT_FALSE(p.wrap.embedding_unit);
  EXPECT_EQ(p.micro_batch, 2);
  EXPECT_EQ(p.seq_len, 4096);
  EXPECT_EQ(p.grad_accum, 4);
  EXPECT_TRUE(p.no_sync);
  EXPECT_EQ(CheckpointingSpecToString(p), "every:2");
  EXPECT_EQ(p.offload, Offload::kOptimizer);
  EXPECT_EQ(p.backward_prefetch, BackwardPrefetch::kPost);
  EXPECT_EQ(p.optimizer_impl, OptimizerImpl::kFused);
  EXPECT_TRUE(p.Problems("plan.json", 32, 8, 32, 8192).empty());
}

TEST(PlanJsonTest, NonDefaultPlansRoundTrip) {
  Plan p;
  p.strategy = ShardingStrategy::kHybridShardZero2;
  p.shard_group_size = 4;
  p.micro_batch = 3;
  p.seq_len = 1000;
  p.grad_accum = 7;
  p.no_sync = true;
  p.checkpointing = Checkpointing::kSelective;
  p.offload = Offload::kAll;
  p.param_dtype = DType::kFp16;
  p.reduce_dtype = DType::kBf16;
  p.master_dtype = DType::kBf16;
  p.reshard_after_forward = false;
  p.forward_prefetch = true;
  p.backward_prefetch = BackwardPrefetch::kNone;
  p.max_inflight_allgathers = 3;
  p.optimizer = Optimizer::kAdafactor;
  p.optimizer_impl = OptimizerImpl::kForLoop;
  p.attention = Attention::kEager;
  p.modeling = Modeling::kTorchtitan;
  p.loss_fp32_upcast = false;
  p.keep_logits = false;
  p.loss_kernel = LossKernel::kFusedLinear;
  for (const char* wrap : {"block", "every:2", "ranges:0-3,4-9", "size:50M"}) {
    p.wrap = ParseWrapSpec(wrap, "--wrap");
    p.wrap.embedding_unit = true;
    std::string out = PlanToJson(p).dump();
    Plan back = PlanFromJson(ParseJsonText(out, "plan.json"), "plan.json");
    EXPECT_EQ(PlanToJson(back).dump(), out) << wrap;
  }
  ParseCheckpointingSpec("first:7", "--checkpointing", &p);
  const std::string out = PlanToJson(p).dump();
  EXPECT_NE(out.find("\"checkpoint_first_k\":7"), std::string::npos) << out;
  EXPECT_EQ(CheckpointingSpecToString(PlanFromJson(ParseJsonText(out, "plan.json"), "plan.json")), "first:7");
  EXPECT_EQ(out.find("checkpoint_rest"), std::string::npos) << out;  // written only when selective
  ParseCheckpointingSpec("first:7+selective", "--checkpointing", &p);
  const std::string mixed = PlanToJson(p).dump();
  EXPECT_NE(mixed.find("\"checkpoint_rest\":\"selective\""), std::string::npos) << mixed;
  EXPECT_EQ(CheckpointingSpecToString(PlanFromJson(ParseJsonText(mixed, "plan.json"), "plan.json")),
            "first:7+selective");
}

// checkpoint_rest means something with "checkpointing": "first" only, and takes none or selective.
TEST(PlanJsonTest, CheckpointRestIsForFirstKOnly) {
  EXPECT_THAT([] { PlanFromJson(ParseJsonText(R"({"schema": "shardtune.plan", "schema_version": 1, "checkpointing": "full", "checkpoint_rest": "selective"})", "p.json"), "p.json"); },
              ThrowsMessage<InputError>(HasSubstr("p.json:/checkpoint_rest: only allowed with \"checkpointing\": \"first\"")));
  EXPECT_THAT([] {
                PlanFromJson(ParseJsonText(R"({"schema": "shardtune.plan", "schema_version": 1, "checkpointing": "first", "checkpoint_first_k": 2,
                                                "checkpoint_rest": "full"})",
                                           "p.json"),
                             "p.json");
              },
              ThrowsMessage<InputError>(HasSubstr("p.json:/checkpoint_rest: expected \"none\" or \"selective\", got \"full\"")));
  Plan p;
  p.checkpointing = Checkpointing::kFull;
  p.checkpoint_rest_selective = true;
  const auto problems = p.Problems("p", 8, 8, 32, 4096);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("checkpoint_rest"), std::string::npos) << problems.front();
}

TEST(PlanJsonTest, ContextParallelFrozenLoraRoundTrip) {
  Plan p;
  p.cp = 4;
  p.cp_fsdp_mesh = CpFsdpMesh::kDp;
  p.role = Role::kInfer;
  p.frozen_prefixes = {"model.embed_tokens", "model.layers.0."};
  p.lora.rank = 8;
  p.lora.alpha = 32;
  p.lora.targets = {"q_proj", "v_proj"};
  p.lora.dtype = DType::kBf16;
  p.lora.dropout = 0.05;
  p.tiled_mlp_shards = 4;
  p.wrap.expert_units = true;
  std::string out = PlanToJson(p).dump();
  Plan back = PlanFromJson(ParseJsonText(out, "plan.json"), "plan.json");
  EXPECT_EQ(PlanToJson(back).dump(), out);
  EXPECT_EQ(back.cp, 4);
  EXPECT_EQ(back.lora.targets, p.lora.targets);
  EXPECT_DOUBLE_EQ(back.lora.dropout, 0.05);
  EXPECT_TRUE(back.wrap.expert_units);
  EXPECT_THAT([] { PlanFromJson(ParseJsonText(R"({"schema": "shardtune.plan", "schema_version": 1, "lora": {"rank": 8, "targets": ["q_proj"], "dropout": 1}})", "p.json"), "p.json"); },
              ThrowsMessage<InputError>(HasSubstr("p.json:/lora/dropout")));
  EXPECT_THAT([] { PlanFromJson(ParseJsonText(R"({"schema": "shardtune.plan", "schema_version": 1, "lora": {"rank": 8, "targets": [""]}})", "p.json"), "p.json"); },
              ThrowsMessage<InputError>(HasSubstr("p.json:/lora/targets/0: expected projection names")));
  EXPECT_THAT([] { PlanFromJson(ParseJsonText(R"({"schema": "shardtune.plan", "schema_version": 1, "cp_fsdp_mesh": "cp"})", "p.json"), "p.json"); },
              ThrowsMessage<InputError>(HasSubstr("p.json:/cp_fsdp_mesh")));
}

// frozen_dtype: absent means the master dtype (and is not written back); set, it round-trips and
// a bad name is a one-line error naming the key, the choices and what was found.
TEST(PlanJsonTest, FrozenDtypeDefaultsToMasterAndRoundTrips) {
  Plan p = PlanFromJson(PlanDoc(), "plan.json");
  EXPECT_FALSE(p.frozen_dtype.has_value());
  EXPECT_EQ(p.FrozenDtype(), p.master_dtype);
  EXPECT_FALSE(PlanToJson(p).contains("frozen_dtype"));
  p.master_dtype = DType::kBf16;
  EXPECT_EQ(p.FrozenDtype(), DType::kBf16);
  nlohmann::json j = PlanDoc();
  j["frozen_dtype"] = "bf16";
  Plan bf16 = PlanFromJson(j, "plan.json");
  ASSERT_TRUE(bf16.frozen_dtype.has_value());
  EXPECT_EQ(*bf16.frozen_dtype, DType::kBf16);
  EXPECT_EQ(bf16.master_dtype, DType::kFp32);
  std::string out = PlanToJson(bf16).dump();
  EXPECT_EQ(PlanToJson(PlanFromJson(ParseJsonText(out, "plan.json"), "plan.json")).dump(), out);
  j["frozen_dtype"] = "int8";
  EXPECT_THAT([&] { PlanFromJson(j, "plan.json"); },
              ThrowsMessage<InputError>(AllOf(HasSubstr("plan.json:/frozen_dtype"),
                                              HasSubstr("fp32, bf16"), HasSubstr("int8"))));
  j["frozen_dtype"] = 2;
  EXPECT_THAT([&] { PlanFromJson(j, "plan.json"); },
              ThrowsMessage<InputError>(HasSubstr("plan.json:/frozen_dtype")));
  j.erase("frozen_dtype");
  j["frozen_dtyp"] = "bf16";
  EXPECT_THAT([&] { PlanFromJson(j, "plan.json"); },
              ThrowsMessage<InputError>(HasSubstr("frozen_dtype")));
}

TEST(PlanTest, ContextParallelDividesWorldAndSequence) {
  Plan p;
  p.cp = 3;
  p.seq_len = 1024;
  auto problems = p.Problems("plan", 8, 8, 4, 4096);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_THAT(problems[0], HasSubstr("plan:/cp: expected an integer >= 1 dividing the world size 8"));
  EXPECT_THAT(problems[1], HasSubstr("plan:/cp: expected a divisor of seq_len 1024"));
  p.cp = 4;
  EXPECT_TRUE(p.Problems("plan", 8, 8, 4, 4096).empty());
  // Data-parallel degree and global batch count cp ranks once: 8 ranks / cp 4 = 2 batches.
  p.micro_batch = 3;
  p.grad_accum = 2;
  EXPECT_EQ(p.DataParallel(8), 2);
  EXPECT_EQ(p.GlobalBatch(8), 3 * 2 * 2);
  // With FSDP over dp only, FULL_SHARD shards over world / cp and rejects a larger group.
  EXPECT_EQ(p.ResolvedShardGroup(8, 8), 8);
  p.cp_fsdp_mesh = CpFsdpMesh::kDp;
  EXPECT_EQ(p.ResolvedShardGroup(8, 8), 2);
  p.shard_group_size = 8;
  EXPECT_FALSE(p.Problems("plan", 8, 8, 4, 4096).empty());
}

TEST(PlanJsonTest, BadValuesNameTheKeyAndPointer) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* message;
  };
  const Case cases[] = {
      {"strategy", "fsdp", "plan.json:/strategy: expected one of full_shard"},
      {"strategy", "full-shard", "(did you mean \"full_shard\"?)"},
      {"shard_group_size", "8", "plan.json:/shard_group_size: expected integer"},
      {"wrap", "block", "plan.json:/wrap: expected a JSON object"},
      {"micro_batch", 1.5, "plan.json:/micro_batch: expected integer"},
      {"seq_len", true, "plan.json:/seq_len: expected integer"},
      {"grad_accum", nullptr, "plan.json:/grad_accum: expected integer"},
      {"no_sync", "yes", "plan.json:/no_sync: expected true or false"},
      {"checkpointing", "every:2", "plan.json:/checkpointing: expected one of none, full, "
                                   "selective, every, first"},
      {"checkpoint_first_k", 2, "plan.json:/checkpoint_first_k: only allowed with "
                                "\"checkpointing\": \"first\""},
      {"checkpoint_every_k", 2, "plan.json:/checkpoint_every_k: only allowed with "
                                "\"checkpointing\": \"every\""},
      {"offload", "cpu", "plan.json:/offload: expected one of none, optimizer, all"},
      {"param_dtype", "bfloat16", "plan.json:/param_dtype: expected one of fp32, bf16, fp16"},
      {"reduce_dtype", "fp8", "plan.json:/reduce_dtype: expected one of"},
      {"master_dtype", 32, "plan.json:/master_dtype: expected one of"},
      {"reshard_after_forward", 0, "plan.json:/reshard_after_forward: expected true or false"},
      {"forward_prefetch", "true", "plan.json:/forward_prefetch: expected true or false"},
      {"backward_prefetch", "backward_pre", "plan.json:/backward_prefetch: expected one of pre, "
                                            "post, none"},
      {"max_inflight_allgathers", "2", "plan.json:/max_inflight_allgathers: expected integer"},
      {"optimizer", "adam", "(did you mean \"adamw\"?)"},
      {"optimizer_impl", "fuse", "plan.json:/optimizer_impl: expected one of foreach, fused"},
      {"attention", "flash", "plan.json:/attention: expected one of sdpa, eager"},
      {"sdpa_backend", "fa3", "plan.json:/sdpa_backend: expected one of auto, flash, cudnn, efficient, math"},
      {"modeling", "titan", "plan.json:/modeling: expected one of hf, torchtitan"},
      {"loss_fp32_upcast", 1, "plan.json:/loss_fp32_upcast: expected true or false"},
      {"keep_logits", "no", "plan.json:/keep_logits: expected true or false"},
      {"loss_kernel", "liger", "plan.json:/loss_kernel: expected one of cross_entropy, fused_linear"},
      {"micro_batches", 2, "plan.json:/micro_batches: unknown key (did you mean \"micro_batch\"?)"},
      {"schema", "shardtune.model", "plan.json:/schema: expected \"shardtune.plan\""},
      {"schema_version", 9, "up to version 1, got 9"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = PlanDoc();
    j[c.key] = c.value;
    EXPECT_THAT([&] { PlanFromJson(j, "plan.json"); },
                ThrowsMessage<InputError>(HasSubstr(c.message)))
        << c.key;
  }
}

TEST(PlanJsonTest, BadWrapObjects) {
  struct Case {
    const char* wrap;  // JSON text of the "wrap" object
    const char* message;
  };
  const Case cases[] = {
      {R"({"policy": "range"})", "plan.json:/wrap/policy: expected one of block, every, ranges, "
                                 "size, got \"range\" (did you mean \"ranges\"?)"},
      {R"({"policy": "every"})", "plan.json:/wrap: missing required key \"every_k\""},
      {R"({"policy": "every", "every_k": "2"})", "plan.json:/wrap/every_k: expected integer"},
      {R"({"policy": "block", "every_k": 2})", "plan.json:/wrap/every_k: only allowed with "
                                               "\"policy\": \"every\""},
      {R"({"policy": "size", "ranges": [[0, 1]]})", "plan.json:/wrap/ranges: only allowed with"},
      {R"({"policy": "every", "every_k": 1, "min_num_params": 5})",
       "plan.json:/wrap/min_num_params: only allowed with"},
      {R"({"policy": "ranges", "ranges": "0-7"})", "plan.json:/wrap/ranges: expected an array of "
                                                   "[first, last]"},
      {R"({"policy": "ranges", "ranges": [[0, 7], [8]]})", "plan.json:/wrap/ranges/1: expected "
                                                           "[first, last] block indices"},
      {R"({"policy": "ranges", "ranges": [[0, -1]]})", "plan.json:/wrap/ranges/0: expected"},
      {R"({"policy": "ranges", "ranges": [[0, 1.5]]})", "plan.json:/wrap/ranges/0: expected"},
      {R"({"policy": "size", "min_num_params": "100M"})", "plan.json:/wrap/min_num_params: "
                                                          "expected integer"},
      {R"({"head_unit": "yes"})", "plan.json:/wrap/head_unit: expected true or false"},
      {R"({"embeding_unit": true})", "plan.json:/wrap/embeding_unit: unknown key (did you mean "
                                     "\"embedding_unit\"?)"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = PlanDoc();
    j["wrap"] = ParseJsonText(c.wrap, "wrap");
    EXPECT_THAT([&] { PlanFromJson(j, "plan.json"); },
                ThrowsMessage<InputError>(HasSubstr(c.message)))
        << c.wrap;
  }
}

}  // namespace
}  // namespace shardtune::model
