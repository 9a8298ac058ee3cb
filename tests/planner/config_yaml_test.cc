// The YAML subset reader: each construct the trainer configs use, read as PyYAML's safe_load would
// read it (the expected trees are written by hand), and every rejected construct names its line.
#include "planner/config_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/errors.h"

namespace shardtune::plan {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

ordered_json Parse(const std::string& text) { return ParseYamlSubset(text, "t.yaml"); }

TEST(ConfigYamlTest, BlockMappingsNestByIndentation) {
  ordered_json j = Parse("a:\n  b: 1\n  c:\n    d: x\ne: 2\n");
  EXPECT_EQ(j["a"]["b"], 1);
  EXPECT_EQ(j["a"]["c"]["d"], "x");
  EXPECT_EQ(j["e"], 2);
  EXPECT_EQ(j.size(), 2u);
}

TEST(ConfigYamlTest, PlainScalarsAreTypedAsPyYamlReadsThem) {
  ordered_json j = Parse(
      "n1: ~\nn2: null\nn3:\nt1: true\nt2: True\nf1: false\nf2: no\ni: -42\nf: 1.0e-6\n"
      "g: 0.5\ns: fsdp2_train\nr: list(range(0,8))\nv: 1.2.3\ne: 1e-5\n");
  EXPECT_TRUE(j["n1"].is_null());
  EXPECT_TRUE(j["n2"].is_null());
  EXPECT_TRUE(j["n3"].is_null());
  EXPECT_EQ(j["t1"], true);
  EXPECT_EQ(j["t2"], true);
  EXPECT_EQ(j["f1"], false);
  EXPECT_EQ(j["f2"], false);
  EXPECT_EQ(j["i"], -42);
  EXPECT_TRUE(j["i"].is_number_integer());
  EXPECT_DOUBLE_EQ(j["f"].get<double>(), 1.0e-6);
  EXPECT_DOUBLE_EQ(j["g"].get<double>(), 0.5);
  EXPECT_EQ(j["s"], "fsdp2_train");
  EXPECT_EQ(j["r"], "list(range(0,8))");
  EXPECT_EQ(j["v"], "1.2.3");
  EXPECT_EQ(j["e"], "1e-5");  // YAML 1.1: no '.', no float
}

TEST(ConfigYamlTest, QuotedScalarsStayStringsWithEscapes) {
  ordered_json j = Parse("a: 'no'\nb: \"true\"\nc: \"x\\\"y\\\\z\\n\"\nd: 'it''s'\ne: \"1\"\n");
  EXPECT_EQ(j["a"], "no");
  EXPECT_EQ(j["b"], "true");
  EXPECT_EQ(j["c"], "x\"y\\z\n");
  EXPECT_EQ(j["d"], "it's");
  EXPECT_EQ(j["e"], "1");
}

TEST(ConfigYamlTest, CommentsAreCutOutsideQuotesOnly) {
  ordered_json j = Parse("# header\na: 1  # one\nb: \"x # y\"\nc: a#b\n  # indented comment\n");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"], "x # y");
  EXPECT_EQ(j["c"], "a#b");
}

TEST(ConfigYamlTest, BlockSequencesIndentedOrAtTheKeysColumn) {
  ordered_json j = Parse("a:\n  - x\n  - 2\nb:\n- y\n- z\nc: 3\n");
  EXPECT_EQ(j["a"], ordered_json::array({"x", 2}));
  EXPECT_EQ(j["b"], ordered_json::array({"y", "z"}));
  EXPECT_EQ(j["c"], 3);
}

TEST(ConfigYamlTest, SequenceItemsCanBeMappings) {
  ordered_json j = Parse("defaults:\n  - actor: dp_actor\n    extra: 1\n  - _self_\n");
  ASSERT_EQ(j["defaults"].size(), 2u);
  EXPECT_EQ(j["defaults"][0]["actor"], "dp_actor");
  EXPECT_EQ(j["defaults"][0]["extra"], 1);
  EXPECT_EQ(j["defaults"][1], "_self_");
}

TEST(ConfigYamlTest, FlowCollectionsIncludingNestedAndMultiLine) {
  ordered_json j = Parse(
      "a: [\"LlamaDecoderLayer\", x, 3]\nb: {k: v, n: [1, 2]}\nc: []\nd: {}\ne: [ 'console',\n"
      "  'wandb' ]\n");
  EXPECT_EQ(j["a"], ordered_json::array({"LlamaDecoderLayer", "x", 3}));
  EXPECT_EQ(j["b"]["k"], "v");
  EXPECT_EQ(j["b"]["n"], ordered_json::array({1, 2}));
  EXPECT_TRUE(j["c"].is_array() && j["c"].empty());
  EXPECT_TRUE(j["d"].is_object() && j["d"].empty());
  EXPECT_EQ(j["e"], ordered_json::array({"console", "wandb"}));
}

TEST(ConfigYamlTest, QuotedKeysAndValuesWithColons) {
  ordered_json j = Parse("'n': 1\nurl: http://x:80/y\n");
  EXPECT_EQ(j["n"], 1);
  EXPECT_EQ(j["url"], "http://x:80/y");
}

TEST(ConfigYamlTest, PlainScalarsContinueOnMoreIndentedLines) {
  ordered_json j = Parse("a: ${oc.select:x.y,\n    null}\nb: 1\n");
  EXPECT_EQ(j["a"], "${oc.select:x.y, null}");
  EXPECT_EQ(j["b"], 1);
}

TEST(ConfigYamlTest, LeadingDocumentMarkerAndEmptyFile) {
  EXPECT_EQ(Parse("---\na: 1\n")["a"], 1);
  EXPECT_TRUE(Parse("# only a comment\n").empty());
}

TEST(ConfigYamlTest, RejectedConstructsNameTheLine) {
  EXPECT_THAT([] { Parse("a: 1\na: 2\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:2: expected each key once")));
  EXPECT_THAT([] { Parse("a:\n\t b: 1\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:2: expected spaces")));
  EXPECT_THAT([] { Parse("a: &x 1\n"); }, ThrowsMessage<InputError>(HasSubstr("t.yaml:1:")));
  EXPECT_THAT([] { Parse("a: *x\n"); }, ThrowsMessage<InputError>(HasSubstr("anchors")));
  EXPECT_THAT([] { Parse("a: |\n  text\n"); },
              ThrowsMessage<InputError>(HasSubstr("block scalars")));
  EXPECT_THAT([] { Parse("a: !!str 1\n"); }, ThrowsMessage<InputError>(HasSubstr("tags")));
  EXPECT_THAT([] { Parse("a:\n  b: 1\n    c: 2\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:3: expected indentation")));
  EXPECT_THAT([] { Parse("a: 1\njust text\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:2: expected \"key: value\"")));
  EXPECT_THAT([] { Parse("a: [1, 2\n"); }, ThrowsMessage<InputError>(HasSubstr("t.yaml:1:")));
  EXPECT_THAT([] { Parse("a: 1\n---\nb: 2\n"); },
              ThrowsMessage<InputError>(HasSubstr("one YAML document")));
}

}  // namespace
}  // namespace shardtune::plan
