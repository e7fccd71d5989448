#include "src/format/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace shardpoint::internal_format {
namespace {

TEST(JsonDepth, CountsObjectsAndArrays) {
  EXPECT_EQ(JsonMaxDepth(""), 0);
  EXPECT_EQ(JsonMaxDepth("1"), 0);
  EXPECT_EQ(JsonMaxDepth(R"({"a": [1, {"b": []}], "c": {}})"), 4);
}

TEST(JsonDepth, IgnoresBracketsInStringsAndEscapedQuotes) {
  EXPECT_EQ(JsonMaxDepth(R"({"a": "[[{{\"]]"})"), 1);
  EXPECT_EQ(JsonMaxDepth(R"(["\\", [2]])"), 2);
}

TEST(JsonDepth, DeepNestingIsMeasuredWithoutParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(JsonMaxDepth(deep), 100000);
}

}  // namespace
}  // namespace shardpoint::internal_format
