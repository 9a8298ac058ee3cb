// Tests of the shared text helpers (model/text.h) every layer's messages and parsers use.
#include "model/text.h"

#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

namespace shardtune::model {
namespace {

// ParseInt64 takes a whole decimal integer and nothing else; ParseLeadingInt64 the integer a text
// starts with and how long it is. The bounds are int64_t's own, written out.
TEST(TextTest, IntegersAreWholeDecimalNumbers) {
  EXPECT_EQ(ParseInt64("12"), 12);
  EXPECT_EQ(ParseInt64("-3"), -3);
  EXPECT_EQ(ParseInt64("0"), 0);
  EXPECT_EQ(ParseInt64("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ParseInt64("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  for (const char* bad : {"", " 12", "12 ", "+1", "12abc", "1e3", "0x10", "-", "9223372036854775808",
                          "99999999999999999999", "1.5"}) {
    EXPECT_FALSE(ParseInt64(bad).has_value()) << '"' << bad << '"';
  }
  size_t used = 7;
  EXPECT_EQ(ParseLeadingInt64("4(x2)", &used), 4);
  EXPECT_EQ(used, 1u);
  EXPECT_EQ(ParseLeadingInt64("-17kB", &used), -17);
  EXPECT_EQ(used, 3u);
  EXPECT_FALSE(ParseLeadingInt64("x4", &used).has_value());
  EXPECT_EQ(used, 0u);
  EXPECT_FALSE(ParseLeadingInt64("", &used).has_value());
  EXPECT_EQ(used, 0u);
}

TEST(TextTest, SplitTrimJoin) {
  EXPECT_EQ(Split("1,,2", ','), (std::vector<std::string>{"1", "", "2"}));
  EXPECT_EQ(Split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(Trim(" \ta b\t "), "a b");
  EXPECT_EQ(Trim(" \t "), "");
  EXPECT_EQ(Join({"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(Join({}, ", "), "");
  EXPECT_EQ(DidYouMean(""), "");
  EXPECT_EQ(DidYouMean("x"), " (did you mean \"x\"?)");
}

}  // namespace
}  // namespace shardtune::model
