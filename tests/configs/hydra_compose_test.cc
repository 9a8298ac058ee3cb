// Hydra's defaults-list composition (planner/configs/hydra_compose.h). Each case writes a small
// config tree shaped like verl's (verl/trainer/config: a primary with group entries under
// packages, a group config that pulls in `../optim@optim` and a sibling config, `_self_`) or
// ROLL's (`../config/envs@_here_`), and the expected composed tree is worked out by hand from
// Hydra's rules, which each case names: the merge order is the depth-first order of the defaults
// tree with `_self_` where it is listed (appended when not), packages are relative to the
// listing config's package, and group paths to its folder (hydra/_internal/defaults_list.py,
// hydra/core/default_element.py).
#include "planner/configs/hydra_compose.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "model/errors.h"
#include "planner/configs/config_yaml.h"
#include "planner/configs/import.h"

namespace shardtune::configs {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

class HydraComposeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("shardtune_hydra_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    // A trainer shaped like verl's ppo_trainer.yaml: a group under a package, a config at its
    // own package, then _self_.
    Write("conf/trainer.yaml",
          "defaults:\n"
          "  - actor@workers.actor: dp\n"
          "  - reward@reward\n"
          "  - _self_\n"
          "x: 1\n"
          "workers:\n"
          "  actor:\n"
          "    lr: 5\n");
    // Like verl's actor/dp_actor.yaml: ../optim@optim (a group beside its own folder, under its
    // package), then a sibling config of the same folder, then _self_.
    Write("conf/actor/dp.yaml",
          "defaults:\n"
          "  - ../optim@optim: adam\n"
          "  - base\n"
          "  - _self_\n"
          "micro: 4\n"
          "tags: [dp]\n");
    Write("conf/actor/base.yaml", "micro: 1\nstrategy: base\ntags: [a, b]\nname: ???\n");
    Write("conf/actor/mega.yaml", "strategy: mega\n");
    Write("conf/optim/adam.yaml", "lr: 0.001\nbetas: [0.9, 0.999]\n");
    Write("conf/optim/sgd.yaml", "lr: 0.1\n");
    Write("conf/reward.yaml", "enable: false\n");
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& rel, const std::string& text) {
    fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }

  HydraComposition Compose(const std::string& rel, const std::vector<std::string>& overrides = {},
                           const std::set<std::string>& builtin = {}) {
    fs::path p = root_ / rel;
    std::ifstream in(p);
    std::ostringstream text;
    text << in.rdbuf();
    Json doc = ParseYamlSubset(text.str(), p.string(), YamlFlavor::kOmegaConf);
    return ComposeHydraConfig(doc, text.str(), p.string(), overrides, root_.string(), builtin);
  }

  std::string Error(const std::string& rel, const std::vector<std::string>& overrides = {}) {
    try {
      Compose(rel, overrides);
    } catch (const InputError& e) {
      std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      return m;
    }
    ADD_FAILURE() << rel << ": expected an InputError";
    return "";
  }

  fs::path root_;
};

TEST_F(HydraComposeTest, DepthFirstOrderPackagesAndSelf) {
  HydraComposition c = Compose("conf/trainer.yaml");
  // trainer's list: actor@workers.actor: dp -> [optim/adam at workers.actor.optim (dp's package +
  // "optim"), actor/base at workers.actor (a config entry without @ keeps dp's package),
  // actor/dp's own content], then reward at reward, then trainer's own content.
  EXPECT_EQ(c.sources,
            (std::vector<std::string>{"optim/adam.yaml at workers.actor.optim", "actor/base.yaml at workers.actor",
                                      "actor/dp.yaml at workers.actor", "reward.yaml at reward",
                                      (root_ / "conf/trainer.yaml").string()}));
  const Json& a = c.doc["workers"]["actor"];
  EXPECT_EQ(a["micro"], 4);                      // dp's _self_ after base
  EXPECT_EQ(a["strategy"], "base");              // only base sets it
  EXPECT_EQ(a["tags"], Json::parse(R"(["dp"])"));  // a list is replaced, not merged
  EXPECT_EQ(a["lr"], 5);                         // trainer's _self_ comes last
  EXPECT_EQ(a["name"], "???");                   // still missing: nobody set it
  EXPECT_EQ(a["optim"]["lr"], 0.001);
  EXPECT_EQ(c.doc["reward"]["enable"], false);
  EXPECT_EQ(c.doc["x"], 1);
  EXPECT_FALSE(c.doc.contains("defaults"));
  EXPECT_TRUE(c.group_overrides.empty());
}

TEST_F(HydraComposeTest, SelfIsAppendedWhenNotListed) {
  // No _self_: Hydra 1.1+ appends it, so the file's own keys win over its defaults.
  Write("conf/noself.yaml", "defaults:\n  - reward@reward\nreward:\n  enable: true\n");
  EXPECT_EQ(Compose("conf/noself.yaml").doc["reward"]["enable"], true);
  // _self_ first: the defaults win over the file's keys.
  Write("conf/selffirst.yaml", "defaults:\n  - _self_\n  - reward@reward\nreward:\n  enable: true\n");
  EXPECT_EQ(Compose("conf/selffirst.yaml").doc["reward"]["enable"], false);
}

TEST_F(HydraComposeTest, CommandLineGroupChoiceAndValueOverrides) {
  // "actor@workers.actor=mega" names the entry by its override key (group@package, as the
  // package differs from the group's own); a dotted key is no config-group folder: a value, left
  // to the caller.
  HydraComposition c = Compose("conf/trainer.yaml", {"actor@workers.actor=mega", "workers.actor.micro=2"});
  EXPECT_EQ(c.group_overrides, (std::vector<std::string>{"actor@workers.actor=mega"}));
  const Json& a = c.doc["workers"]["actor"];
  EXPECT_EQ(a["strategy"], "mega");
  EXPECT_FALSE(a.contains("micro"));  // mega has no defaults list: no base, no optim
  EXPECT_FALSE(a.contains("optim"));
  EXPECT_EQ(a["lr"], 5);
  // A group whose package is its own name is overridden by the bare group name (verl's SFT
  // trainer: engine@engine: fsdp, overridden by engine=...).
  Write("conf/sft.yaml", "defaults:\n  - optim@optim: adam\n  - _self_\n");
  HydraComposition s = Compose("conf/sft.yaml", {"optim=sgd", "optim.lr=2"});
  EXPECT_EQ(s.group_overrides, (std::vector<std::string>{"optim=sgd"}));
  EXPECT_EQ(s.doc["optim"], Json::parse(R"({"lr": 0.1})"));
}

TEST_F(HydraComposeTest, OverrideEntriesAndTheCommandLineWinsOverThem) {
  Write("conf/recipe.yaml",
        "defaults:\n  - trainer\n  - override actor@workers.actor: mega\n  - _self_\nx: 2\n");
  HydraComposition c = Compose("conf/recipe.yaml");
  EXPECT_EQ(c.doc["workers"]["actor"]["strategy"], "mega");
  EXPECT_EQ(c.doc["x"], 2);
  HydraComposition cl = Compose("conf/recipe.yaml", {"actor@workers.actor=dp"});
  EXPECT_EQ(cl.doc["workers"]["actor"]["micro"], 4);
}

TEST_F(HydraComposeTest, RecipeFolderWithSearchPathRelativeToTheCurrentFolder) {
  // verl's examples/sglang_multiturn/config/*.yaml: hydra.searchpath file://verl/trainer/config
  // (relative to where the trainer runs), defaults [ppo_trainer, _self_].
  Write("recipes/multiturn.yaml",
        "hydra:\n  searchpath:\n    - file://conf\n"
        "defaults:\n  - trainer\n  - _self_\n"
        "workers:\n  actor:\n    micro: 8\n");
  HydraComposition c = Compose("recipes/multiturn.yaml");
  EXPECT_EQ(c.doc["workers"]["actor"]["micro"], 8);
  EXPECT_EQ(c.doc["workers"]["actor"]["optim"]["lr"], 0.001);
  EXPECT_FALSE(c.doc.contains("hydra"));
  // pkg://conf: the package folder under the current folder, else under a PYTHONPATH entry.
  Write("recipes/pkg.yaml", "hydra:\n  searchpath:\n    - pkg://site.conf\ndefaults:\n  - trainer\n");
  Write("lib/site/conf/trainer.yaml", "from_pythonpath: true\n");
  ::setenv("PYTHONPATH", (root_ / "nowhere").string().append(":").append((root_ / "lib").string()).c_str(), 1);
  EXPECT_EQ(Compose("recipes/pkg.yaml").doc["from_pythonpath"], true);
  ::unsetenv("PYTHONPATH");
  Write("recipes/lost.yaml", "hydra:\n  searchpath:\n    - file://elsewhere/config\ndefaults:\n  - trainer\n");
  std::string m = Error("recipes/lost.yaml");
  EXPECT_NE(m.find("/hydra/searchpath/0"), std::string::npos) << m;
  EXPECT_NE(m.find("file://elsewhere/config"), std::string::npos) << m;
}

TEST_F(HydraComposeTest, HereParentFolderAndPackageHeader) {
  // ROLL's examples: `../config/traj_envs@_here_` from examples/<job>/ puts the file's keys at
  // the root. A `# @package` header places a file whose entry names no package (absolute).
  Write("roll/config/envs.yaml", "custom_env:\n  Sokoban:\n    max_steps: 5\n");
  Write("roll/job/run.yaml", "defaults:\n  - ../config/envs@_here_\n  - extra\nseq: 4\n");
  Write("roll/job/extra.yaml", "# @package workers.extra\nk: 3\n");
  HydraComposition c = Compose("roll/job/run.yaml");
  EXPECT_EQ(c.doc["custom_env"]["Sokoban"]["max_steps"], 5);
  EXPECT_EQ(c.doc["workers"]["extra"]["k"], 3);
  EXPECT_EQ(c.doc["seq"], 4);
}

TEST_F(HydraComposeTest, OptionListsNullAndAppends) {
  Write("conf/many.yaml", "defaults:\n  - optim@opts: [sgd, adam]\n  - reward@r: null\n");
  HydraComposition c = Compose("conf/many.yaml");
  EXPECT_EQ(c.doc["opts"]["lr"], 0.001);  // adam after sgd
  EXPECT_FALSE(c.doc.contains("r"));      // a null choice drops the entry
  // "+group=option" appends an entry to the primary's list, at the group's own package.
  HydraComposition a = Compose("conf/many.yaml", {"+optim=sgd"});
  EXPECT_EQ(a.doc["optim"]["lr"], 0.1);
  // "~group@package" drops a group entry.
  HydraComposition d = Compose("conf/trainer.yaml", {"~actor@workers.actor"});
  EXPECT_EQ(d.group_overrides, (std::vector<std::string>{"~actor@workers.actor"}));
  EXPECT_EQ(d.doc["workers"]["actor"], Json::parse(R"({"lr": 5})"));
}

TEST_F(HydraComposeTest, ErrorsNameTheFileAndTheEntry) {
  Write("conf/missing.yaml", "defaults:\n  - actor@a: nosuch\n");
  std::string m = Error("conf/missing.yaml");
  EXPECT_NE(m.find("missing.yaml: defaults entry \"actor@a: nosuch\""), std::string::npos) << m;
  EXPECT_NE(m.find("actor/nosuch.yaml"), std::string::npos) << m;
  m = Error("conf/trainer.yaml", {"optim=sgd"});  // no entry has the key "optim"
  EXPECT_NE(m.find("--set optim=sgd"), std::string::npos) << m;
  EXPECT_NE(m.find("+optim=OPTION"), std::string::npos) << m;
  Write("conf/unfilled.yaml", "defaults:\n  - optim@o: ???\n");
  m = Error("conf/unfilled.yaml");
  EXPECT_NE(m.find("--set optim@o=OPTION"), std::string::npos) << m;
  Write("conf/loop.yaml", "defaults:\n  - loop2\n");
  Write("conf/loop2.yaml", "defaults:\n  - loop\n");
  m = Error("conf/loop.yaml");
  EXPECT_NE(m.find("cycle"), std::string::npos) << m;
  Write("conf/bad.yaml", "defaults:\n  - {a: x, b: y}\n");
  EXPECT_NE(Error("conf/bad.yaml").find("2 keys"), std::string::npos);
  Write("conf/twice.yaml", "defaults:\n  - optim@o: adam\n  - optim@o: sgd\n");
  EXPECT_NE(Error("conf/twice.yaml").find("twice"), std::string::npos);
  Write("conf/late.yaml", "defaults:\n  - override actor@workers.actor: mega\n  - reward@r\n");
  EXPECT_NE(Error("conf/late.yaml").find("at the end"), std::string::npos);
}

TEST_F(HydraComposeTest, ABuiltInConfigMissingFromTheSearchPathIsSkippedAndNamed) {
  // export --format verl writes `defaults: [ppo_trainer, _self_]`; read away from a verl
  // checkout, the reader's own copy of verl's defaults stands in for ppo_trainer.yaml.
  Write("away/job.yaml", "defaults:\n  - ppo_trainer\n  - _self_\nx: 3\n");
  HydraComposition c = Compose("away/job.yaml", {}, {"ppo_trainer"});
  EXPECT_EQ(c.doc, Json::parse(R"({"x": 3})"));
  ASSERT_EQ(c.sources.size(), 2u);
  EXPECT_NE(c.sources[0].find("ppo_trainer.yaml (not on the search path"), std::string::npos) << c.sources[0];
  // Found on the search path, the real one is used; not built in, it is an error.
  Write("away/ppo_trainer.yaml", "y: 4\n");
  EXPECT_EQ(Compose("away/job.yaml", {}, {"ppo_trainer"}).doc["y"], 4);
  fs::remove(root_ / "away/ppo_trainer.yaml");
  EXPECT_NE(Error("away/job.yaml").find("ppo_trainer.yaml in one of the search folders"), std::string::npos);
}

// Through --from: a ROLL job whose sequence length is a variable of the composed file; without
// the folder beside it, the one-line error says where it looked.
TEST_F(HydraComposeTest, ImportComposesBeforeInterpolations) {
  Write("roll/config/lengths.yaml", "max_len: 1024\n");
  Write("roll/job/run.yaml",
        "defaults:\n  - ../config/lengths@_here_\n"
        "sequence_length: ${max_len}\n"
        "actor_train:\n  model_args:\n    dtype: bf16\n"
        "  training_args:\n    per_device_train_batch_size: 1\n    gradient_accumulation_steps: 4\n"
        "  strategy_args:\n    strategy_name: fsdp2_train\n    strategy_config:\n      fsdp_size: 8\n"
        "  device_mapping: list(range(0,8))\n");
  ImportContext ctx;
  ctx.world_size = 8;
  ctx.gpus_per_node = 8;
  ctx.layer_class = "LlamaDecoderLayer";
  model::Plan plan;
  ImportResult r = ImportConfigFile((root_ / "roll/job/run.yaml").string(), ctx, nullptr, &plan);
  EXPECT_EQ(plan.seq_len, 1024);
  ASSERT_EQ(r.composed_from.size(), 2u);
  EXPECT_EQ(r.composed_from[0], "../config/lengths.yaml");
  fs::remove_all(root_ / "roll/config");
  try {
    ImportConfigFile((root_ / "roll/job/run.yaml").string(), ctx, nullptr, &plan);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("defaults entry \"../config/lengths@_here_\""), std::string::npos) << m;
    EXPECT_NE(m.find("--cfg job"), std::string::npos) << m;
  }
}

// verl's own tree, when a checkout is given (SHARDTUNE_VERL_CHECKOUT=path, as
// tests/bench/real_configs.py materialises it): composing verl/trainer/config/ppo_trainer.yaml
// gives verl's checked-in _generated_ppo_trainer.yaml (written by `--cfg job`), key for key.
TEST(HydraComposeVerlTest, PpoTrainerEqualsVerlsGeneratedConfig) {
  const char* checkout = std::getenv("SHARDTUNE_VERL_CHECKOUT");
  if (!checkout) GTEST_SKIP() << "SHARDTUNE_VERL_CHECKOUT is not set (a verl checkout)";
  fs::path dir = fs::path(checkout) / "verl/trainer/config";
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    std::ostringstream t;
    t << in.rdbuf();
    return t.str();
  };
  std::string text = read(dir / "ppo_trainer.yaml");
  HydraComposition c =
      ComposeHydraConfig(ParseYamlSubset(text, "ppo_trainer.yaml", YamlFlavor::kOmegaConf), text, (dir / "ppo_trainer.yaml").string(), {},
                         checkout);
  Json generated = ParseYamlSubset(read(dir / "_generated_ppo_trainer.yaml"), "_generated_ppo_trainer.yaml",
                                   YamlFlavor::kOmegaConf);
  // Compared as unordered trees: Hydra's output orders keys by merge, not as the file lists them.
  nlohmann::json want = nlohmann::json::parse(generated.dump());
  nlohmann::json got = nlohmann::json::parse(c.doc.dump());
  EXPECT_EQ(nlohmann::json::diff(got, want).dump(), "[]");
}

}  // namespace
}  // namespace shardtune::configs
