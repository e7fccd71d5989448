#include "shardpoint/box.h"

#include <gtest/gtest.h>

#include <limits>

namespace shardpoint {
namespace {

TEST(BoxTest, Basics) {
  Box b({1, 2}, {3, 4});
  EXPECT_EQ(b.rank(), 2u);
  EXPECT_EQ(b.num_elements(), 12);
  EXPECT_FALSE(b.empty());
  EXPECT_EQ(b.ToString(), "[1:4, 2:6]");
  EXPECT_EQ(Box::Whole({2, 3}), Box({0, 0}, {2, 3}));
  EXPECT_TRUE(Box({0}, {0}).empty());
  EXPECT_EQ(Box().num_elements(), 1);  // 0-d
  EXPECT_EQ(Box().ToString(), "[]");
  EXPECT_EQ(ShapeToString({4, 8}), "[4, 8]");
  EXPECT_TRUE(Box({0, 5}, {1, 1}) < Box({1, 0}, {1, 1}));
  EXPECT_TRUE(Box({0, 0}, {1, 1}) < Box({0, 0}, {1, 2}));
  EXPECT_NE(Box({0}, {1}), Box({0}, {2}));
}

TEST(BoxTest, CheckedNumElements) {
  EXPECT_EQ(*CheckedNumElements({2, 3, 4}), 24);
  EXPECT_EQ(*CheckedNumElements({}), 1);
  EXPECT_EQ(*CheckedNumElements({5, 0}), 0);
  EXPECT_EQ(CheckedNumElements({2, -1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 32, int64_t{1} << 32}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(BoxTest, IntersectAndContains) {
  EXPECT_EQ(Intersect(Box({0, 0}, {4, 4}), Box({2, 3}, {4, 4})), Box({2, 3}, {2, 1}));
  EXPECT_FALSE(Intersect(Box({0, 0}, {4, 4}), Box({4, 0}, {4, 4})));  // touching edge
  EXPECT_FALSE(Intersect(Box({0}, {0}), Box({0}, {4})));              // empty
  EXPECT_EQ(Intersect(Box(), Box()), Box());                          // 0-d
  EXPECT_TRUE(Contains(Box({0, 0}, {4, 4}), Box({1, 1}, {3, 3})));
  EXPECT_FALSE(Contains(Box({0, 0}, {4, 4}), Box({1, 1}, {4, 3})));
  EXPECT_FALSE(Contains(Box({1}, {4}), Box({0}, {2})));
}

TEST(BoxTest, ValidateBoxInShape) {
  EXPECT_TRUE(ValidateBoxInShape(Box({0, 2}, {4, 2}), {4, 4}).ok());
  EXPECT_TRUE(ValidateBoxInShape(Box({4}, {0}), {4}).ok());
  EXPECT_TRUE(ValidateBoxInShape(Box(), {}).ok());
  Status s = ValidateBoxInShape(Box({0, 3}, {4, 2}), {4, 4});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[0:4, 3:5]"), std::string::npos) << s.ToString();
  EXPECT_FALSE(ValidateBoxInShape(Box({0}, {4}), {4, 4}).ok());
  EXPECT_FALSE(ValidateBoxInShape(Box({-1}, {2}), {4}).ok());
  EXPECT_FALSE(ValidateBoxInShape(Box({1}, {-1}), {4}).ok());
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_FALSE(ValidateBoxInShape(Box({big}, {big}), {big}).ok());
}

}  // namespace
}  // namespace shardpoint
