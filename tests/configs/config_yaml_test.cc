// The YAML subset reader: each construct the trainer configs use, read as PyYAML's safe_load would
// read it (the expected trees are written by hand), and every rejected construct names its line.
#include "planner/configs/config_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model/errors.h"

namespace shardtune::configs {
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

TEST(ConfigYamlTest, OmegaConfReadsAnExponentWithoutADotAsAFloat) {
  // omegaconf/_utils.py get_yaml_loader's float resolver: [-+]?[0-9][0-9_]*[eE][-+]?[0-9]+ too.
  ordered_json j = ParseYamlSubset("a: 1e-5\nb: -2E+3\nc: 1e\nd: e5\ne: '1e-5'\nf: 1.0e-6\ng: 3\n", "t.yaml",
                                   YamlFlavor::kOmegaConf);
  EXPECT_DOUBLE_EQ(j["a"].get<double>(), 1e-5);
  EXPECT_DOUBLE_EQ(j["b"].get<double>(), -2000.0);
  EXPECT_EQ(j["c"], "1e");  // no exponent digits
  EXPECT_EQ(j["d"], "e5");  // no leading digit
  EXPECT_EQ(j["e"], "1e-5");  // quoted: a string
  EXPECT_DOUBLE_EQ(j["f"].get<double>(), 1.0e-6);
  EXPECT_TRUE(j["g"].is_number_integer());
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

// PyYAML: yaml.safe_load("a:\n  ${x.y}\nb:\n  [1, 2]\nc:\n  two\n  words\nd: 1\n") ==
// {'a': '${x.y}', 'b': [1, 2], 'c': 'two words', 'd': 1} (ROLL's agentic custom_envs).
TEST(ConfigYamlTest, ScalarsMayStartOnTheNextMoreIndentedLine) {
  ordered_json j = Parse("a:\n  ${x.y}\nb:\n  [1, 2]\nc:\n  two\n  words\nd: 1\n");
  EXPECT_EQ(j["a"], "${x.y}");
  EXPECT_EQ(j["b"], ordered_json::parse("[1, 2]"));
  EXPECT_EQ(j["c"], "two words");
  EXPECT_EQ(j["d"], 1);
}

TEST(ConfigYamlTest, LeadingDocumentMarkerAndEmptyFile) {
  EXPECT_EQ(Parse("---\na: 1\n")["a"], 1);
  EXPECT_TRUE(Parse("# only a comment\n").empty());
}

// YAML 1.2 chapter 8.1 (block scalars), as PyYAML reads them: ROLL's examples/config/*.yaml
// hold prompts written as literal blocks.
TEST(ConfigYamlTest, BlockScalarsLiteralFoldedAndChomping) {
  ordered_json j = Parse("a: |\n  line1\n  # kept: text, not a comment\n\n  line3\n\nb: 1\n");
  EXPECT_EQ(j["a"], "line1\n# kept: text, not a comment\n\nline3\n");  // clip: one final break
  EXPECT_EQ(j["b"], 1);
  EXPECT_EQ(Parse("a: |-\n  x\n  y\n")["a"], "x\ny");                  // strip
  EXPECT_EQ(Parse("a: |+\n  x\n\n\nb: 2\n")["a"], "x\n\n\n");          // keep
  // Folded: lines of the content's indentation join with a space, an empty line is a break,
  // more-indented lines keep their breaks.
  EXPECT_EQ(Parse("a: >\n  folded\n  text\n\n  next para\n    indented\n  back\n")["a"],
            "folded text\nnext para\n  indented\nback\n");
  EXPECT_EQ(Parse("a: >-\n  x\n  y\n")["a"], "x y");
  // An indentation indicator counts from the parent's indentation.
  EXPECT_EQ(Parse("a: |2\n    lead\n  x\n")["a"], "  lead\nx\n");
  // In a sequence, and inside a nested mapping.
  ordered_json l = Parse("l:\n  - |\n    one\n  - two\nm:\n  k: >\n    deep\n    text\n  z: 3\n");
  EXPECT_EQ(l["l"], ordered_json::parse(R"(["one\n", "two"])"));
  EXPECT_EQ(l["m"]["k"], "deep text\n");
  EXPECT_EQ(l["m"]["z"], 3);
}

TEST(ConfigYamlTest, RejectedConstructsNameTheLine) {
  EXPECT_THAT([] { Parse("a: 1\na: 2\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:2: expected each key once")));
  EXPECT_THAT([] { Parse("a:\n\t b: 1\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:2: expected spaces")));
  EXPECT_THAT([] { Parse("a: &x 1\n"); }, ThrowsMessage<InputError>(HasSubstr("t.yaml:1:")));
  EXPECT_THAT([] { Parse("a: *x\n"); }, ThrowsMessage<InputError>(HasSubstr("anchors")));
  EXPECT_THAT([] { Parse("a: |4\n  x\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:2: expected the block scalar's indentation")));
  EXPECT_THAT([] { Parse("a: !!str 1\n"); }, ThrowsMessage<InputError>(HasSubstr("tags")));
  EXPECT_THAT([] { Parse("a:\n  b: 1\n    c: 2\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:3: expected indentation")));
  EXPECT_THAT([] { Parse("a: 1\njust text\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:2: expected \"key: value\"")));
  EXPECT_THAT([] { Parse("a: [1, 2\n"); }, ThrowsMessage<InputError>(HasSubstr("t.yaml:1:")));
  EXPECT_THAT([] { Parse("a: 1\n---\nb: 2\n"); },
              ThrowsMessage<InputError>(HasSubstr("one YAML document")));
}

// The message of the InputError that parsing `text` throws ("" when it parses): tests/fuzz
// requires one non-empty line.
std::string ErrorOf(const std::string& text) {
  try {
    Parse(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Each of these was a contract violation found by tests/fuzz (config_import), kept in
// tests/fuzz/regressions/config_import/ under the same name.
TEST(ConfigYamlTest, InvalidUtf8AndControlBytesAreRejectedWithTheirLineAndColumn) {
  // invalid_utf8: the byte went into a JSON string and nlohmann's dump() threw type_error 316.
  EXPECT_EQ(ErrorOf("a: 1\nb: \xD6\n"),
            "t.yaml:2: expected printable UTF-8 text, got the byte 0xD6 at column 4");
  EXPECT_EQ(ErrorOf("a: \xE2\x82\n"),  // a truncated 3-byte sequence
            "t.yaml:1: expected printable UTF-8 text, got the byte 0xE2 at column 4");
  EXPECT_EQ(ErrorOf("a: \xC0\xAF\n"),  // an overlong '/'
            "t.yaml:1: expected printable UTF-8 text, got the byte 0xC0 at column 4");
  EXPECT_EQ(ErrorOf("a: \xED\xA0\x80\n"),  // an encoded UTF-16 surrogate
            "t.yaml:1: expected printable UTF-8 text, got the byte 0xED at column 4");
  EXPECT_EQ(ErrorOf(std::string("a: x\0y\n", 7)),
            "t.yaml:1: expected printable UTF-8 text, got the control character 0x00 at column 5");
  EXPECT_EQ(ErrorOf("a: 1\rb: 2\n"),  // a lone CR (old Mac line end)
            "t.yaml:1: expected printable UTF-8 text, got the control character 0x0D at column 5");
  EXPECT_EQ(ErrorOf("a: x\xE2\x80\xA8y\n"),
            "t.yaml:1: expected printable UTF-8 text, got the line separator U+2028 at column 5");
  // Well-formed UTF-8 stays as it is.
  EXPECT_EQ(Parse("a: gr\xC3\xBC\xC3\x9F \xF0\x9F\x98\x80\n")["a"],
            "gr\xC3\xBC\xC3\x9F \xF0\x9F\x98\x80");
}

TEST(ConfigYamlTest, EscapesMakeValidUtf8OrAreRejected) {
  EXPECT_EQ(Parse("a: \"\\u00e9 \\x41 \\U0001F600 \\ud83d\\ude00\"\n")["a"],
            "\xC3\xA9 A \xF0\x9F\x98\x80 \xF0\x9F\x98\x80");
  // escape_lone_surrogate: "\ud800" became the bytes ED A0 80, which dump() rejects.
  EXPECT_EQ(ErrorOf("a: \"\\ud800\"\n"),
            "t.yaml:1: expected escapes of Unicode characters (no lone UTF-16 surrogate, none past "
            "U+10FFFF), got \"\\ud800\"");
  EXPECT_EQ(ErrorOf("a: \"\\UFFFFFFFF\"\n"),
            "t.yaml:1: expected escapes of Unicode characters (no lone UTF-16 surrogate, none past "
            "U+10FFFF), got \"\\UFFFFFFFF\"");
  EXPECT_EQ(ErrorOf("a: \"\\uzzzz\"\n"),
            "t.yaml:1: expected 4 hex digits after \\u, got \"\\uzzzz\"");
  EXPECT_EQ(ErrorOf("a: \"\\u12\"\n"), "t.yaml:1: expected 4 hex digits after \\u, got \"\\u12\"");
}

TEST(ConfigYamlTest, KeysWithEscapedLineBreaksStayOnOneLineInMessages) {
  EXPECT_EQ(ErrorOf("\"a\\nb\": 1\n\"a\\nb\": 2\n"),
            "t.yaml:2: expected each key once in a mapping, got a second \"a\\nb\"");
  EXPECT_EQ(ErrorOf("a: {\"x\\ry\": 1, \"x\\ry\": 2}\n"),
            "t.yaml:1: expected each key once in a mapping, got a second \"x\\ry\"");
}

TEST(ConfigYamlTest, NestingDeeperThan64LevelsIsRejected) {
  std::string ok = "a: " + std::string(63, '[') + std::string(63, ']') + "\n";
  EXPECT_TRUE(Parse(ok)["a"].is_array());
  // deep_flow / deep_block_sequence: the recursive descent overflowed the stack.
  const std::string msg = "t.yaml:1: expected at most 64 levels of nested collections, got more";
  EXPECT_EQ(ErrorOf("a: " + std::string(5000, '[') + std::string(5000, ']') + "\n"), msg);
  std::string maps = "a: ";
  for (int i = 0; i < 100; ++i) maps += "{k: ";
  EXPECT_EQ(ErrorOf(maps + "1" + std::string(100, '}') + "\n"), msg);
  std::string items;
  for (int i = 0; i < 100; ++i) items += "- ";
  EXPECT_EQ(ErrorOf(items + "x\n"), msg);
  std::string block;
  for (int i = 0; i < 100; ++i) block += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  EXPECT_EQ(ErrorOf(block),
            "t.yaml:65: expected at most 64 levels of nested collections, got more");
}

TEST(ConfigYamlTest, UnclosedQuoteInAFlowCollectionIsAnInputError) {
  // unclosed_flow_quote: the scanner stepped past the end and substr() threw out_of_range.
  EXPECT_EQ(ErrorOf("a: {'k''\n"), "t.yaml:1: expected ':' after the key \"k'\", got the end");
  EXPECT_THAT([] { Parse("a: {'x\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:1: expected")));
  EXPECT_THAT([] { Parse("a: [\"abc\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:1: expected")));
  EXPECT_THAT([] { Parse("a: {\"k\" 1}\n"); },
              ThrowsMessage<InputError>(HasSubstr("t.yaml:1: expected ':' after the key \"k\"")));
}

TEST(ConfigYamlTest, ByteOrderMarkAndCrLfLineEndsAreRead) {
  ordered_json j = Parse("\xEF\xBB\xBF" "a: 1\r\nb: [x, y]\r\nc: \"q\"\r\n");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"], ordered_json::array({"x", "y"}));
  EXPECT_EQ(j["c"], "q");
}

TEST(ConfigYamlTest, NumbersBeyondTheirRangesStayWellDefined) {
  ordered_json j = Parse("i: 99999999999999999999\nf: 1" + std::string(400, '0') + ".0\n");
  EXPECT_EQ(j["i"], "99999999999999999999");  // beyond int64 and no '.': a string
  EXPECT_TRUE(std::isinf(j["f"].get<double>()));
}

}  // namespace
}  // namespace shardtune::configs
