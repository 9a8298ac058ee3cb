// Tests of the strict JSON reader every input file goes through (model/strict_json.cc): messages
// name file and JSON pointer, say what was expected and what was found, and suggest fixes.
#include "model/strict_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"

namespace shardtune::model {
namespace {

using testing::HasSubstr;
using testing::ThrowsMessage;

nlohmann::json Doc() {
  return ParseJsonText(R"({"nodes": 2, "name": "c", "ratio": 0.5, "on": true,
    "kind": "ib", "link": {"latency_s": 1e-6, "lanes": 4}})",
                       "c.json");
}

TEST(StrictJsonTest, ReadsEveryTypeAndFinishesClean) {
  nlohmann::json j = Doc();
  StrictReader r(j, "c.json");
  EXPECT_EQ(r.RequiredInt("nodes", 1, 10), 2);
  EXPECT_EQ(r.RequiredString("name"), "c");
  EXPECT_DOUBLE_EQ(r.RequiredNumber("ratio", 0, 1), 0.5);
  EXPECT_TRUE(r.OptionalBool("on", false));
  EXPECT_EQ(r.RequiredEnum("kind", {"ib", "roce", "eth"}), "ib");
  StrictReader link = r.RequiredObject("link");
  EXPECT_DOUBLE_EQ(link.RequiredNumber("latency_s", 0, 1), 1e-6);
  EXPECT_EQ(link.OptionalInt("lanes", 1, 1, 8), 4);
  EXPECT_EQ(link.OptionalInt("absent", 7, 1, 8), 7);
  EXPECT_NO_THROW(link.Finish());
  EXPECT_NO_THROW(r.Finish());
}

TEST(StrictJsonTest, IntegralFloatIsAnInteger) {
  nlohmann::json j = {{"n", 8.0}};
  StrictReader r(j, "f.json");
  EXPECT_EQ(r.RequiredInt("n", 1, 10), 8);
}

TEST(StrictJsonTest, UnknownKeySuggestsTheClosestKnownKey) {
  nlohmann::json j = {{"nodes", 2}, {"gpus_per_nod", 8}};
  StrictReader r(j, "c.json");
  r.RequiredInt("nodes", 1, 10);
  r.OptionalInt("gpus_per_node", 8, 1, 64);
  EXPECT_THAT([&] { r.Finish(); },
              ThrowsMessage<InputError>(HasSubstr(
                  "c.json:/gpus_per_nod: unknown key (did you mean \"gpus_per_node\"?)")));
}

TEST(StrictJsonTest, UnknownKeyInNestedObjectHasFullPointer) {
  nlohmann::json j = Doc();
  j["link"]["lanez"] = 1;
  StrictReader r(j, "c.json");
  StrictReader link = r.RequiredObject("link");
  link.RequiredNumber("latency_s", 0, 1);
  link.OptionalInt("lanes", 1, 1, 8);
  EXPECT_THAT([&] { link.Finish(); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/link/lanez: unknown key (did you mean "
                                                  "\"lanes\"?)")));
}

TEST(StrictJsonTest, IgnoredKeysAreNotUnknown) {
  nlohmann::json j = {{"comment", "x"}};
  StrictReader r(j, "c.json");
  r.Ignore("comment");
  EXPECT_NO_THROW(r.Finish());
}

TEST(StrictJsonTest, MissingRequiredKey) {
  nlohmann::json j = Doc();
  StrictReader r(j, "c.json");
  EXPECT_THAT([&] { r.RequiredInt("gpus", 1, 8); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/: missing required key \"gpus\"")));
  StrictReader link = r.RequiredObject("link");
  EXPECT_THAT([&] { link.RequiredString("kind"); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/link: missing required key \"kind\"")));
}

TEST(StrictJsonTest, WrongTypes) {
  nlohmann::json j = Doc();
  StrictReader r(j, "c.json");
  EXPECT_THAT([&] { r.RequiredInt("name", 1, 8); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/name: expected integer in [1, 8], got "
                                                  "string \"c\"")));
  EXPECT_THAT([&] { r.RequiredInt("ratio", 0, 8); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/ratio: expected integer in [0, 8], got "
                                                  "0.5")));
  EXPECT_THAT([&] { r.RequiredString("nodes"); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/nodes: expected a string, got 2")));
  EXPECT_THAT([&] { r.OptionalBool("name", false); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/name: expected true or false")));
  EXPECT_THAT([&] { r.RequiredNumber("on", 0, 1); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/on: expected number in [0, 1], got "
                                                  "boolean true")));
  EXPECT_THAT([&] { r.RequiredObject("nodes"); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/nodes: expected a JSON object, got 2")));
  EXPECT_THAT([] { StrictReader(nlohmann::json::array(), "c.json"); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/: expected a JSON object")));
}

TEST(StrictJsonTest, OutOfRange) {
  nlohmann::json j = {{"nodes", 0}, {"ratio", 1.5}, {"big", 18446744073709551615ULL}};
  StrictReader r(j, "c.json");
  EXPECT_THAT([&] { r.RequiredInt("nodes", 1, 1024); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/nodes: expected integer in [1, 1024], "
                                                  "got 0")));
  EXPECT_THAT([&] { r.RequiredNumber("ratio", 0, 1); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/ratio: expected number in [0, 1], got "
                                                  "1.5")));
  EXPECT_THAT([&] { r.RequiredInt("big", 0, INT64_MAX); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/big: expected integer")));
}

TEST(StrictJsonTest, EnumListsAllowedAndSuggests) {
  nlohmann::json j = {{"kind", "infiniband"}, {"fabric", "robe"}, {"n", 3}};
  StrictReader r(j, "c.json");
  EXPECT_THAT([&] { r.RequiredEnum("fabric", {"ib", "roce", "eth"}); },
              ThrowsMessage<InputError>(HasSubstr(
                  "c.json:/fabric: expected one of ib, roce, eth, got \"robe\" (did you mean "
                  "\"roce\"?)")));
  EXPECT_THAT([&] { r.RequiredEnum("kind", {"ib", "roce", "eth"}); },
              ThrowsMessage<InputError>(testing::Not(HasSubstr("did you mean"))));
  EXPECT_THAT([&] { r.OptionalEnum("n", "ib", {"ib"}); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/n: expected one of ib, got 3")));
  EXPECT_EQ(r.OptionalEnum("absent", "eth", {"ib", "eth"}), "eth");
}

TEST(StrictJsonTest, SchemaKindAndVersion) {
  nlohmann::json j = {{"schema", "shardtune.cluster"}, {"schema_version", 1}};
  StrictReader ok(j, "c.json");
  EXPECT_NO_THROW(ok.CheckSchema("shardtune.cluster", 1));
  StrictReader wrong_kind(j, "c.json");
  EXPECT_THAT([&] { wrong_kind.CheckSchema("shardtune.plan", 1); },
              ThrowsMessage<InputError>(HasSubstr("c.json:/schema: expected \"shardtune.plan\", "
                                                  "got \"shardtune.cluster\"")));
  j["schema_version"] = 3;
  StrictReader too_new(j, "c.json");
  EXPECT_THAT([&] { too_new.CheckSchema("shardtune.cluster", 2); },
              ThrowsMessage<InputError>(HasSubstr("reads shardtune.cluster up to version 2, got 3")));
  nlohmann::json none = {{"nodes", 1}};
  StrictReader missing(none, "c.json");
  EXPECT_THAT([&] { missing.CheckSchema("shardtune.cluster", 1); },
              ThrowsMessage<InputError>(HasSubstr("missing required key \"schema\"")));
}

TEST(StrictJsonTest, SyntaxErrorReportsLineAndColumn) {
  EXPECT_THAT([] { ParseJsonText("{\n  \"a\": 1,\n  \"b\": ,\n}", "x.json"); },
              ThrowsMessage<InputError>(HasSubstr("x.json:3:8: invalid JSON: syntax error")));
  EXPECT_THAT([] { ParseJsonText("", "e.json"); },
              ThrowsMessage<InputError>(HasSubstr("e.json:1:1: invalid JSON")));
}

TEST(StrictJsonTest, MissingFile) {
  EXPECT_THAT([] { ReadJsonFile("/nonexistent/x.json"); },
              ThrowsMessage<InputError>(HasSubstr("/nonexistent/x.json: cannot open file")));
}

TEST(StrictJsonTest, ClosestNameOnlySuggestsPlausibleTypos) {
  EXPECT_EQ(ClosestName("hiden", {"hidden", "heads"}), "hidden");
  EXPECT_EQ(ClosestName("HIDDEN", {"hidden"}), "hidden");  // case-insensitive
  EXPECT_EQ(ClosestName("xyz", {"hidden", "heads"}), "");
  EXPECT_EQ(ClosestName("a", {}), "");
}

TEST(StrictJsonTest, DescribeNamesTypeAndTruncates) {
  EXPECT_EQ(Describe(nlohmann::json("s")), "string \"s\"");
  EXPECT_EQ(Describe(nlohmann::json(nullptr)), "null");
  EXPECT_EQ(Describe(nlohmann::json(3)), "3");
  std::string long_text = Describe(nlohmann::json(std::string(100, 'a')));
  EXPECT_LE(long_text.size(), std::string("string ").size() + 40);
  EXPECT_THAT(long_text, HasSubstr("..."));
}

}  // namespace
}  // namespace shardtune::model
