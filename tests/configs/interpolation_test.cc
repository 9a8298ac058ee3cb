// OmegaConf interpolation and Hydra overrides (planner/configs/interpolation.h). Expected values
// follow OmegaConf's documentation ("Variable interpolation", "Resolvers": oc.env, oc.select) and
// Hydra's override grammar, written out per case.
#include "planner/configs/interpolation.h"

#include <gtest/gtest.h>

#include <map>

#include "model/errors.h"
#include "planner/configs/config_yaml.h"
#include "planner/configs/import.h"

namespace shardtune::configs {
namespace {

using Json = nlohmann::ordered_json;

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

Json Resolve(const std::string& yaml, UnresolvedInterpolations* unresolved = nullptr,
             const EnvLookup& env = FakeEnv({})) {
  Json doc = ParseYamlSubset(yaml, "t.yaml");
  UnresolvedInterpolations u = ResolveInterpolations(&doc, env);
  if (unresolved) *unresolved = u;
  return doc;
}

TEST(InterpolationTest, AbsoluteReferencesKeepTheReferencedType) {
  // ROLL's pipeline variables: lora_rank at the top, named by a worker.
  Json j = Resolve(
      "lora_rank: 32\nseq: 4096\nname: run\nactor:\n  model_args:\n    lora_rank: ${lora_rank}\n"
      "  path: out/${name}/${seq}\n  flag: ${actor.on}\n  on: true\n");
  EXPECT_EQ(j["actor"]["model_args"]["lora_rank"], 32);
  EXPECT_TRUE(j["actor"]["model_args"]["lora_rank"].is_number_integer());
  EXPECT_EQ(j["actor"]["path"], "out/run/4096");  // inside a string: the value's text
  EXPECT_EQ(j["actor"]["flag"], true);
}

TEST(InterpolationTest, RelativeReferencesCountDotsFromTheValuesMapping) {
  // ${.x}: a sibling; ${..x}: a key of the parent mapping.
  Json j = Resolve("top: 1\na:\n  x: 7\n  b:\n    y: ${.z}\n    z: 3\n    w: ${..x}\n");
  EXPECT_EQ(j["a"]["b"]["y"], 3);
  EXPECT_EQ(j["a"]["b"]["w"], 7);
}

TEST(InterpolationTest, ChainsAndMappingsResolveWhole) {
  Json j = Resolve("a: ${b}\nb: ${c.d}\nc:\n  d: 5\nm: ${c}\nl: [1, 2]\nfirst: ${l.1}\n");
  EXPECT_EQ(j["a"], 5);
  EXPECT_EQ(j["m"], Json::parse(R"({"d": 5})"));
  EXPECT_EQ(j["first"], 2);
}

TEST(InterpolationTest, ResolversEnvSelectDecode) {
  UnresolvedInterpolations u;
  Json j = Resolve(
      "a: ${oc.env:NGPUS}\nb: ${oc.env:MISSING,4}\nc: ${oc.select:x.y,16}\nd: ${oc.select:k}\n"
      "k: 9\ne: ${oc.env:MISSING,null}\nf: ${oc.decode:'12'}\n",
      &u, FakeEnv({{"NGPUS", "8"}}));
  EXPECT_TRUE(u.empty());
  EXPECT_EQ(j["a"], 8);  // the variable's text read as a scalar: an integer
  EXPECT_EQ(j["b"], 4);
  EXPECT_EQ(j["c"], 16);
  EXPECT_EQ(j["d"], 9);
  EXPECT_TRUE(j["e"].is_null());
  EXPECT_EQ(j["f"], 12);
}

TEST(InterpolationTest, UnresolvableValuesStayAndSayWhy) {
  UnresolvedInterpolations u;
  Json j = Resolve(
      "a: ${nope}\nb: ${oc.env:UNSET}\nc: ${now:%H}\nd: ${e}\ne: ${d}\nf: \\${literal}\n"
      "g: ${custom:1}\n",
      &u);
  EXPECT_EQ(j["a"], "${nope}");
  ASSERT_EQ(u.count("/a"), 1u);
  EXPECT_EQ(u["/a"], "no key nope in the file");
  EXPECT_NE(u["/b"].find("environment variable UNSET is not set"), std::string::npos);
  EXPECT_NE(u["/c"].find("Hydra's"), std::string::npos);
  EXPECT_NE(u["/d"].find("a cycle"), std::string::npos);
  EXPECT_EQ(j["f"], "${literal}");  // an escaped "${" is text
  EXPECT_EQ(u.count("/f"), 0u);
  EXPECT_NE(u["/g"].find("resolver custom"), std::string::npos);
}

// A hostile file cannot make the resolver recurse without bound: a chain of references longer
// than 64 and "${" nested more than 16 deep are unresolved, with the reason.
TEST(InterpolationTest, DeepChainsAndNestingAreBounded) {
  // k0 -> k1 -> ... -> k100: 1, written so that k0 is resolved first.
  std::string yaml;
  for (int i = 0; i < 100; ++i) {
    yaml += "k" + std::to_string(i) + ": ${k" + std::to_string(i + 1) + "}\n";
  }
  yaml += "k100: 1\n";
  std::string nested = "x";
  for (int i = 0; i < 40; ++i) nested = "${" + nested + "}";
  yaml += "n: '" + nested + "'\n";
  UnresolvedInterpolations u;
  Json j = Resolve(yaml, &u);
  EXPECT_EQ(j["k90"], 1);  // a short chain resolves
  ASSERT_EQ(u.count("/k0"), 1u);
  EXPECT_NE(u["/k0"].find("chained more than 64 deep"), std::string::npos) << u["/k0"];
  ASSERT_EQ(u.count("/n"), 1u);
  EXPECT_NE(u["/n"].find("nested more than 16 deep"), std::string::npos) << u["/n"];
}

TEST(InterpolationTest, OverridesFollowHydrasGrammar) {
  Json doc = Json::parse(R"({"a": {"b": 1}, "keep": 2})");
  ApplyOverride(ParseOverride("a.b=8", "--set"), "--set", &doc);
  ApplyOverride(ParseOverride("a.c.d=true", "--set"), "--set", &doc);
  ApplyOverride(ParseOverride("+a.e=[x, 2, null]", "--set"), "--set", &doc);
  ApplyOverride(ParseOverride("++a.b='9'", "--set"), "--set", &doc);
  ApplyOverride(ParseOverride("~keep", "--set"), "--set", &doc);
  ApplyOverride(ParseOverride("a.f=1.5e-6", "--set"), "--set", &doc);
  ApplyOverride(ParseOverride("a.g=${a.c.d}", "--set"), "--set", &doc);
  EXPECT_EQ(doc["a"]["b"], "9");  // quoted: a string
  EXPECT_EQ(doc["a"]["c"]["d"], true);
  EXPECT_EQ(doc["a"]["e"], Json::parse(R"(["x", 2, null])"));
  EXPECT_FALSE(doc.contains("keep"));
  EXPECT_DOUBLE_EQ(doc["a"]["f"].get<double>(), 1.5e-6);
  EXPECT_EQ(doc["a"]["g"], "${a.c.d}");  // resolved afterwards, with the file
  EXPECT_THROW(ApplyOverride(ParseOverride("+a.b=1", "--set"), "--set", &doc), InputError);
  // Hydra lets "+" reach a key that is there when its value is null or the new value is a list
  // (verl's SFT scripts: +data.response_dict_keys=['answer'] over sft_trainer.yaml's null).
  Json null_there = Json::parse(R"({"d": {"keys": null, "list": [1], "n": 3}})");
  ApplyOverride(ParseOverride("+d.keys=x", "--set"), "--set", &null_there);
  ApplyOverride(ParseOverride("+d.list=['answer']", "--set"), "--set", &null_there);
  EXPECT_EQ(null_there["d"]["keys"], "x");
  EXPECT_EQ(null_there["d"]["list"], Json::parse(R"(["answer"])"));
  EXPECT_THROW(ApplyOverride(ParseOverride("+d.n=4", "--set"), "--set", &null_there), InputError);
  EXPECT_THROW(ApplyOverride(ParseOverride("~a.zz", "--set"), "--set", &doc), InputError);
  EXPECT_THROW(ApplyOverride(ParseOverride("a.b.c=1", "--set"), "--set", &doc), InputError);
  EXPECT_THROW(ParseOverride("no_equals", "--set"), InputError);
  EXPECT_THROW(ParseOverride("=3", "--set"), InputError);
}

// Through the importer: a ROLL worker's ${lora_rank} is read (it was "not given" before, and the
// plan silently became a full fine-tune), an unresolvable one is a one-line error naming the key.
const char* kRollWithVariables = R"(lora_rank: 32
lora_target: q_proj,v_proj
sequence_length: 256
actor_train:
  model_args:
    dtype: bf16
    lora_rank: ${lora_rank}
    lora_target: ${lora_target}
  training_args:
    per_device_train_batch_size: 1
    gradient_accumulation_steps: 4
  strategy_args:
    strategy_name: fsdp2_train
    strategy_config:
      fsdp_size: 8
  device_mapping: list(range(0,8))
)";

ImportContext Ctx() {
  ImportContext ctx;
  ctx.world_size = 8;
  ctx.gpus_per_node = 8;
  ctx.layer_class = "LlamaDecoderLayer";
  return ctx;
}

TEST(InterpolationTest, RollVariablesReachTheWorker) {
  model::Plan plan;
  ImportResult r = ImportConfigText(kRollWithVariables, "roll.yaml", Ctx(), nullptr, &plan);
  EXPECT_EQ(plan.lora.rank, 32);
  EXPECT_EQ(plan.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(r.seq_len_from, "roll.yaml:/sequence_length");
}

TEST(InterpolationTest, AnUnresolvedValueThatIsReadIsAnErrorNamingTheKey) {
  std::string text = kRollWithVariables;
  text.replace(text.find("lora_rank: 32\n"), 14, "");
  model::Plan plan;
  try {
    ImportConfigText(text, "roll.yaml", Ctx(), nullptr, &plan);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("roll.yaml:/actor_train/model_args/lora_rank"), std::string::npos) << m;
    EXPECT_NE(m.find("no key lora_rank in the file"), std::string::npos) << m;
    EXPECT_NE(m.find("--set actor_train.model_args.lora_rank=VALUE"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  // The same value given as an override: "+lora_rank=16" adds the missing top-level key.
  ImportContext ctx = Ctx();
  ctx.overrides = {"+lora_rank=16", "actor_train.training_args.gradient_accumulation_steps=2"};
  ImportResult r = ImportConfigText(text, "roll.yaml", ctx, nullptr, &plan);
  EXPECT_EQ(plan.lora.rank, 16);
  EXPECT_EQ(plan.grad_accum, 2);
  EXPECT_EQ(r.overrides_applied.size(), 2u);
}

TEST(InterpolationTest, AnUnresolvedValueNobodyReadsIsNoError) {
  // output_dir is ignored by the reader: OmegaConf would not resolve it either until accessed.
  std::string text = std::string("output_dir: ${oc.env:SOMEWHERE_UNSET}/x\n") + kRollWithVariables;
  model::Plan plan;
  EXPECT_NO_THROW(ImportConfigText(text, "roll.yaml", Ctx(), nullptr, &plan));
}

// A ROLL worker on 8 of a 16-GPU pool: read when the caller estimates on the worker's own GPUs
// (allow_subset_world), an error otherwise (tune and run need the config's world to be theirs).
TEST(InterpolationTest, RollWorkerOnPartOfThePool) {
  ImportContext ctx = Ctx();
  ctx.world_size = 16;
  model::Plan plan;
  EXPECT_THROW(ImportConfigText(kRollWithVariables, "roll.yaml", ctx, nullptr, &plan), InputError);
  ctx.allow_subset_world = true;
  ImportResult r = ImportConfigText(kRollWithVariables, "roll.yaml", ctx, nullptr, &plan);
  EXPECT_EQ(r.world_size, 8);
  bool said = false;
  for (const auto& w : r.warnings) said = said || w.find("runs on 8 of the") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(InterpolationTest, DeprecatedKeysAreWarningsNamingTheKey) {
  std::string text = kRollWithVariables;
  text.replace(text.find("      fsdp_size: 8\n"), 19,
               "      fsdp_size: 8\n      use_batched_model_update: false\n");
  model::Plan plan;
  ImportResult r = ImportConfigText(text, "roll.yaml", Ctx(), nullptr, &plan);
  bool named = false;
  for (const auto& w : r.warnings) {
    named = named || w.find("use_batched_model_update (not read by ROLL") != std::string::npos;
  }
  EXPECT_TRUE(named);
  // use_sequence_packing on an fsdp2 worker: only ROLL's megatron strategy reads it.
  std::string packing = kRollWithVariables;
  packing.replace(packing.find("  device_mapping:"), 17,
                  "  use_sequence_packing: true\n  use_dynamic_batching_in_train: true\n"
                  "  device_mapping:");
  ImportResult p = ImportConfigText(packing, "roll.yaml", Ctx(), nullptr, &plan);
  bool ignored = false;
  for (const auto& w : p.warnings) {
    ignored = ignored || w.find("use_sequence_packing (read only by ROLL's megatron strategy)") !=
                             std::string::npos;
  }
  EXPECT_TRUE(ignored);
  bool dynamic = false;
  for (const auto& w : p.warnings) {
    dynamic = dynamic || w.find("use_dynamic_batching_in_train (fsdp2 strategies keep fixed") !=
                             std::string::npos;
  }
  EXPECT_TRUE(dynamic);
}

}  // namespace
}  // namespace shardtune::configs
