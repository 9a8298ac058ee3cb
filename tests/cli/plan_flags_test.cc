// The plan flags' one table (cli/plan_flags.cc, issue #23 item 2): every flag is registered by
// AddPlanFlags / AddFromFlags from it, sets the plan only when given, and a name the table lacks
// is a bug, not a silent "not given".
#include "cli/plan_flags.h"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "model/errors.h"
#include "model/plan.h"

namespace shardtune::cli {
namespace {

struct Parsed {
  CLI::App app{"t"};
  PlanFlags flags;
  Parsed() {
    AddPlanFlags(&app, &flags);
    AddFromFlags(&app, &flags);
  }
  model::Plan Build(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
    app.parse(args);
    return BuildPlan(flags);
  }
};

TEST(PlanFlagsTest, EveryPlanFlagIsRegisteredOnce) {
  Parsed p;
  std::set<std::string> seen;
  for (const std::string& name : PlanFlagNames()) {
    EXPECT_TRUE(seen.insert(name).second) << name << " twice in the table";
    EXPECT_NE(p.app.get_option_no_throw(name), nullptr) << name;
  }
  for (const char* from : {"--from", "--from-format", "--from-worker"}) {
    EXPECT_EQ(seen.count(from), 0u) << from << " is a --from flag, not a plan flag";
    EXPECT_NE(p.app.get_option_no_throw(from), nullptr) << from;
  }
  EXPECT_GE(PlanFlagNames().size(), 30u);
}

// No flag given: the plan is the default plan (no flag applies anything on its own).
TEST(PlanFlagsTest, NothingGivenIsTheDefaultPlan) {
  Parsed p;
  model::Plan got = p.Build({});
  model::Plan want;
  EXPECT_EQ(got.strategy, want.strategy);
  EXPECT_EQ(got.micro_batch, want.micro_batch);
  EXPECT_EQ(got.reshard_after_forward, want.reshard_after_forward);
  EXPECT_EQ(got.wrap.embedding_unit, want.wrap.embedding_unit);
  EXPECT_EQ(got.lora.rank, want.lora.rank);
  EXPECT_EQ(got.keep_logits, want.keep_logits);
}

// Table order: --strategy sets reshard_after_forward's default, --reshard-after-forward then
// overrides it, whatever the command-line order; --wrap keeps the unit flags given beside it.
TEST(PlanFlagsTest, FlagsApplyInTableOrder) {
  Parsed a;
  model::Plan p = a.Build({"--reshard-after-forward", "true", "--strategy", "shard_grad_op"});
  EXPECT_EQ(p.strategy, model::ShardingStrategy::kShardGradOp);
  EXPECT_TRUE(p.reshard_after_forward);
  Parsed b;
  model::Plan q = b.Build({"--wrap-embedding", "--wrap", "every:2", "--micro-batch", "3"});
  EXPECT_TRUE(q.wrap.embedding_unit);
  EXPECT_EQ(q.micro_batch, 3);
  EXPECT_TRUE(FlagGiven(b.flags, "--wrap"));
  EXPECT_FALSE(FlagGiven(b.flags, "--strategy"));
}

TEST(PlanFlagsTest, AskingAboutAFlagTheTableLacksIsABug) {
  Parsed p;
  p.Build({});
  EXPECT_THROW(FlagGiven(p.flags, "--micro-batches"), InternalError);
}

TEST(PlanFlagsTest, BadValuesNameTheFlag) {
  Parsed p;
  try {
    p.Build({"--reshard-after-forward", "maybe"});
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--reshard-after-forward: expected true or false, got \"maybe\"");
  }
}

}  // namespace
}  // namespace shardtune::cli
